//! TQ1_0: super-blocks of 256 ternary weights, 1.6875 bpw, `x = (t − 1) · d`, t ∈ 0..=2.
//!
//! Layout (54 bytes): `qs: [u8; 48]` (5 trits per byte) | `qh: [u8; 4]` (4 trits per byte) |
//! `d: f16`. Trit `n` of byte `v` is `((v · 3^n mod 256) · 3) >> 8`; trit `n` of `qs[m]` is
//! weight `32n + m` (m < 32) or `160 + 16n + (m − 32)`, of `qh[m]` weight `240 + 4n + m`.
//! `dequantize_row_tq1_0` (ggml-quants.c:2428), `ggml_vec_dot_tq1_0_q8_K`
//! (ggml-cpu/arch/x86/quants.c:1376; its `avg_epu8` trit extraction gives the same trits for
//! every byte).

use super::tq2_0::{dequantize_ternary, vec_dot_ternary};
use super::QK_K;

pub(crate) const BYTES: usize = (QK_K - 4 * QK_K / 64) / 5 + QK_K / 64 + 2;
const QH: usize = 48;

#[inline(always)]
fn trit(v: u8, n: usize) -> i8 {
    const POW3: [u8; 5] = [1, 3, 9, 27, 81];
    ((v.wrapping_mul(POW3[n]) as u16 * 3) >> 8) as i8
}

/// The 256 trits in element order.
#[inline(always)]
fn quants(b: &[u8; BYTES]) -> [i8; QK_K] {
    std::array::from_fn(|e| match e {
        0..160 => trit(b[e % 32], e / 32),
        160..240 => trit(b[32 + (e - 160) % 16], (e - 160) / 16),
        _ => trit(b[QH + (e - 240) % 4], (e - 240) / 4),
    })
}

pub(crate) fn dequantize(src: &[u8], dst: &mut [f32]) {
    dequantize_ternary::<BYTES>(src, dst, quants)
}

pub(crate) fn vec_dot(w: &[u8], a: &[u8]) -> f32 {
    vec_dot_ternary::<BYTES>(w, a, quants)
}

block_format!("TQ1_0 as a [`BlockFormat`](super::BlockFormat).", Format, "tq1_0", QK_K, BYTES, Q8K, true, dequantize, None, None, Some(vec_dot));

#[cfg(test)]
mod tests {
    #[test]
    fn avx2_trits_equal_the_reference_decoding() {
        // ggml_vec_dot_tq1_0_q8_K: saturating −1, then avg_epu8(q, avg_epu8(q, 0)) >> 6
        for v in 0..=255u8 {
            for n in 0..5 {
                let q = v.wrapping_mul([1, 3, 9, 27, 81][n]);
                let avg_epu8 = |a: u32, b: u32| (a + b + 1) >> 1;
                let q1 = q.saturating_sub(1) as u32;
                let avx = (avg_epu8(q1, avg_epu8(q1, 0)) >> 6) as i8;
                assert_eq!(super::trit(v, n), avx, "{v} {n}");
            }
        }
    }
}
