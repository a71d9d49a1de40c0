//! IQ1_M: super-blocks of 256 weights, 1.75 bpw, `x = d · (2·s + 1) · (grid ± 1/8)` with a
//! 3-bit `s` per 16 weights.
//!
//! Layout (56 bytes): `qs: [u8; 32]` (low 8 bits of an 11-bit `iq1s_grid` index per 8 weights)
//! | `qh: [u8; 16]` (per 8 weights, one nibble: 3 high index bits and the delta sign, bit 3) |
//! `scales: [u8; 8]` read as 4 u16: 4 × 3-bit `s` each in bits 0..12, and the f16 super-scale
//! `d` spread over their top nibbles. `dequantize_row_iq1_m` (ggml-quants.c:2675),
//! `ggml_vec_dot_iq1_m_q8_K` (ggml-cpu/arch/x86/quants.c:3713).

use super::iq1_s::{dequantize_block, DELTA};
use super::iq_tables::IQ1S_GRID;
use super::iquant;
use super::lanes::Acc8;
use super::{arr, f16_to_f32, kquant, q8_k, QK_K};

pub(crate) const BYTES: usize = QK_K / 8 + QK_K / 16 + QK_K / 32;
const QH: usize = QK_K / 8;
const SCALES: usize = QH + QK_K / 16;

/// The 256 grid values, the delta signs as ±1 per weight, the 16 factors `2·s + 1` and `d`.
#[inline(always)]
fn decode(b: &[u8; BYTES]) -> ([i8; QK_K], [i8; QK_K], [i32; 16], f32) {
    let sc: [u16; 4] = std::array::from_fn(|i| u16::from_le_bytes(*arr(b, SCALES + 2 * i)));
    let d = (sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000);
    let mut q = [0i8; QK_K];
    let mut delta = [0i8; QK_K];
    for (k, (q8, d8)) in q.as_chunks_mut::<8>().0.iter_mut().zip(delta.as_chunks_mut::<8>().0).enumerate() {
        let h = (b[QH + k / 2] >> (4 * (k % 2))) as usize;
        *q8 = IQ1S_GRID[b[k] as usize | ((h & 7) << 8)].to_le_bytes().map(|v| v as i8);
        *d8 = [if h & 8 != 0 { -1 } else { 1 }; 8];
    }
    let s = std::array::from_fn(|j| 2 * ((sc[j / 4] >> (3 * (j % 4))) & 7) as i32 + 1);
    (q, delta, s, f16_to_f32(d))
}

pub(crate) fn dequantize(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.as_chunks::<BYTES>().0.iter().zip(dst.as_chunks_mut::<QK_K>().0) {
        let (q, delta, s, d) = decode(b);
        dequantize_block::<16>(&q, &s.map(|s| d * s as f32), |k| delta[8 * k] < 0, y);
    }
}

/// `ggml_vec_dot_iq1_m_q8_K`, AVX2 order: grid products and delta-signed activation sums in
/// two 8-lane FMA accumulators (per-16 scales on both), then
/// `fma(hsum(accum2), DELTA, hsum(accum1))` (contracted upstream).
pub(crate) fn vec_dot(w: &[u8], a: &[u8]) -> f32 {
    let (mut acc1, mut acc2) = (Acc8::new(), Acc8::new());
    for (wb, ab) in kquant::blocks::<BYTES>(w, a) {
        let (q, delta, s, dw) = decode(wb);
        let d = q8_k::d(ab) * dw;
        acc1.fma(d, &iquant::scaled_dot(&q, q8_k::qs(ab), &s));
        acc2.fma(d, &iquant::scaled_dot(&delta, q8_k::qs(ab), &s));
    }
    acc2.hsum().mul_add(DELTA, acc1.hsum())
}

block_format!("IQ1_M as a [`BlockFormat`](super::BlockFormat).", Format, "iq1_m", QK_K, BYTES, Q8K, true, dequantize, None, None, Some(vec_dot));
