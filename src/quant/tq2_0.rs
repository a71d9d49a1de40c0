//! TQ2_0: super-blocks of 256 ternary weights, 2.0625 bpw, `x = (q − 1) · d`, q ∈ 0..=2.
//!
//! Layout (66 bytes): `qs: [u8; 64]` | `d: f16`. Bits `2l..2l+2` of byte `m` of 32-byte run
//! `c` hold weight `128c + 32l + m`. `dequantize_row_tq2_0` (ggml-quants.c:2467),
//! `ggml_vec_dot_tq2_0_q8_K` (ggml-cpu/arch/x86/quants.c:1508).

use super::lanes::{dot32, Acc8};
use super::{arr, f16_at, kquant, q8_k, QK_K};

pub(crate) const BYTES: usize = QK_K / 4 + 2;

/// The 256 quants (0..=3) in element order.
#[inline(always)]
fn quants(b: &[u8; BYTES]) -> [i8; QK_K] {
    kquant::unpack_2bit(arr(b, 0))
}

pub(crate) fn dequantize(src: &[u8], dst: &mut [f32]) {
    dequantize_ternary::<BYTES>(src, dst, quants)
}

/// `(q − 1) · d` with `d` the block's last two bytes (TQ1_0, TQ2_0).
#[inline(always)]
pub(crate) fn dequantize_ternary<const B: usize>(src: &[u8], dst: &mut [f32], quants: impl Fn(&[u8; B]) -> [i8; QK_K]) {
    kquant::dequantize::<B, 1>(src, dst, |b| (quants(b).map(|q| q - 1), [(f16_at(b, B - 2), 0.0)]))
}

/// The x86 ternary kernels (`ggml_vec_dot_tq{1,2}_0_q8_K`, AVX2 order): per block the unsigned
/// quants' products in lanes (`maddubs`, lane `k` = elements `4k..4k+4` of every run of 32),
/// minus the Q8_K block sums `bsums[2k] + bsums[2k + 1]` (the `− 1`), one lane FMA with
/// `d_a · d_w` (contracted upstream), `hsum`.
#[inline(always)]
pub(crate) fn vec_dot_ternary<const B: usize>(w: &[u8], a: &[u8], quants: impl Fn(&[u8; B]) -> [i8; QK_K]) -> f32 {
    let mut acc = Acc8::new();
    for (wb, ab) in kquant::blocks::<B>(w, a) {
        let q = quants(wb);
        let bs = q8_k::bsums(ab);
        let mut lanes: [i32; 8] = std::array::from_fn(|k| -(bs[2 * k] as i32 + bs[2 * k + 1] as i32));
        for (qc, yc) in q.as_chunks::<32>().0.iter().zip(q8_k::qs(ab).as_chunks::<32>().0) {
            for (l, p) in lanes.iter_mut().zip(dot32(qc, yc)) {
                *l += p;
            }
        }
        acc.fma(q8_k::d(ab) * f16_at(wb, B - 2), &lanes);
    }
    acc.hsum()
}

pub(crate) fn vec_dot(w: &[u8], a: &[u8]) -> f32 {
    vec_dot_ternary::<BYTES>(w, a, quants)
}

block_format!("TQ2_0 as a [`BlockFormat`](super::BlockFormat).", Format, "tq2_0", QK_K, BYTES, Q8K, true, dequantize, None, None, Some(vec_dot));
