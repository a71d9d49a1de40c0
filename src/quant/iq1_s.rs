//! IQ1_S: super-blocks of 256 weights, 1.5625 bpw, `x = d · (2·s + 1) · (grid ± 1/8)`.
//!
//! Layout (50 bytes): `d: f16` | `qs: [u8; 32]` (low 8 bits of an 11-bit `iq1s_grid` index
//! per 8 weights, grid values −1, 0, 1) | `qh: [u16; 8]`, one per 32 weights: 4 × 3 high index
//! bits, a 3-bit scale `s` (bits 12..15) and the sign of the delta (bit 15).
//! `dequantize_row_iq1_s` (ggml-quants.c:2650), `ggml_vec_dot_iq1_s_q8_K`
//! (ggml-cpu/arch/x86/quants.c:3594).

use super::iq_tables::IQ1S_GRID;
use super::iquant::{self, per32};
use super::lanes::Acc8;
use super::{arr, f16_at, kquant, q8_k, QK_K};

pub(crate) const BYTES: usize = 2 + QK_K / 8 + QK_K / 16;
const QH: usize = 2 + QK_K / 8;
/// `IQ1S_DELTA` (ggml-common.h:1132).
pub(crate) const DELTA: f32 = 0.125;

/// The 256 grid values (−1, 0, 1), the 8 scale factors `2·s + 1` and the 8 delta signs
/// (true: −DELTA).
#[inline(always)]
fn decode(b: &[u8; BYTES]) -> ([i8; QK_K], [i32; 8], [bool; 8]) {
    let qh: [u16; 8] = std::array::from_fn(|g| u16::from_le_bytes(*arr(b, QH + 2 * g)));
    let mut q = [0i8; QK_K];
    for (k, q8) in q.as_chunks_mut::<8>().0.iter_mut().enumerate() {
        let index = b[2 + k] as usize | ((((qh[k / 4] >> (3 * (k % 4))) & 7) as usize) << 8);
        *q8 = IQ1S_GRID[index].to_le_bytes().map(|v| v as i8);
    }
    (q, qh.map(|h| 2 * ((h >> 12) & 7) as i32 + 1), qh.map(|h| h & 0x8000 != 0))
}

/// `y = dl · (grid + delta)` per 32 (IQ1_S) or 16 (IQ1_M) weights, as ggml computes it.
#[inline(always)]
pub(crate) fn dequantize_block<const N: usize>(q: &[i8; QK_K], dl: &[f32; N], neg: impl Fn(usize) -> bool, y: &mut [f32; QK_K]) {
    for (k, (ys, qs)) in y.as_chunks_mut::<8>().0.iter_mut().zip(q.as_chunks::<8>().0).enumerate() {
        let delta = if neg(k) { -DELTA } else { DELTA };
        let d = dl[k * 8 / (QK_K / N)];
        for (y, &g) in ys.iter_mut().zip(qs) {
            *y = d * (g as f32 + delta);
        }
    }
}

pub(crate) fn dequantize(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.as_chunks::<BYTES>().0.iter().zip(dst.as_chunks_mut::<QK_K>().0) {
        let (q, sc, neg) = decode(b);
        let d = f16_at(b, 0);
        dequantize_block::<8>(&q, &sc.map(|s| d * s as f32), |k| neg[k / 4], y);
    }
}

/// `ggml_vec_dot_iq1_s_q8_K`, AVX2 order: the grid products in an 8-lane FMA accumulator,
/// the delta terms (`bsums` × sign × scale) in a scalar one (contracted to an FMA upstream),
/// then `hsum + DELTA · accum1` (not contracted).
pub(crate) fn vec_dot(w: &[u8], a: &[u8]) -> f32 {
    let mut acc = Acc8::new();
    let mut acc1 = 0f32;
    for (wb, ab) in kquant::blocks::<BYTES>(w, a) {
        let (q, sc, neg) = decode(wb);
        let bs = q8_k::bsums(ab);
        let sumi1: i32 = (0..8)
            .map(|g| (bs[2 * g] as i32 + bs[2 * g + 1] as i32) * if neg[g] { -1 } else { 1 } * sc[g])
            .sum();
        let d = q8_k::d(ab) * f16_at(wb, 0);
        acc.fma(d, &iquant::scaled_dot(&q, q8_k::qs(ab), &per32(sc)));
        acc1 = d.mul_add(sumi1 as f32, acc1);
    }
    acc.hsum() + DELTA * acc1
}

block_format!("IQ1_S as a [`BlockFormat`](super::BlockFormat).", Format, "iq1_s", QK_K, BYTES, Q8K, true, dequantize, None, None, Some(vec_dot));
