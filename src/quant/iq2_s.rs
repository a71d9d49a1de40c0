//! IQ2_S: super-blocks of 256 weights, 2.5625 bpw, `x = d · (0.5 + ls) / 4 · ±grid`.
//!
//! Layout (82 bytes): `d: f16` | `qs: [u8; 32]` (low 8 bits of a 10-bit `iq2s_grid` index per
//! 8 weights) | `signs: [u8; 32]` (one bit per weight) | `qh: [u8; 8]` (per 32 weights the
//! index's top 2 bits, 2 per 8) | `scales: [u8; 8]` (two 4-bit `ls` per 32, low nibble first).
//! `dequantize_row_iq2_s` (ggml-quants.c:2543), `ggml_vec_dot_iq2_s_q8_K`
//! (ggml-cpu/arch/x86/quants.c:3075).

use super::iq_tables::IQ2S_GRID;
use super::iquant;
use super::{arr, QK_K};

pub(crate) const BYTES: usize = 2 + QK_K / 4 + QK_K / 16;
const SIGNS: usize = 2 + QK_K / 8;
const QH: usize = 2 + QK_K / 4;
const SCALES: usize = QH + QK_K / 32;

/// The 256 signed grid values and the 16 scales `ls` (per 16).
#[inline(always)]
fn decode(b: &[u8; BYTES]) -> ([i8; QK_K], [u8; 16]) {
    let mut q = [0i8; QK_K];
    for (k, q8) in q.as_chunks_mut::<8>().0.iter_mut().enumerate() {
        let hi = ((b[QH + k / 4] as usize) << (8 - 2 * (k % 4))) & 0x300;
        let grid = IQ2S_GRID[b[2 + k] as usize | hi].to_le_bytes();
        iquant::put_signed(q8, &grid, b[SIGNS + k]);
    }
    (q, iquant::nibbles16(arr(b, SCALES)))
}

pub(crate) fn dequantize(src: &[u8], dst: &mut [f32]) {
    iquant::dequantize_half::<BYTES, 16>(src, dst, 0.25, decode)
}

/// `ggml_vec_dot_iq2_s_q8_K`, AVX2 order: per-16 scales `2·ls + 1`, `0.125 · hsum`.
pub(crate) fn vec_dot(w: &[u8], a: &[u8]) -> f32 {
    iquant::vec_dot_half::<BYTES, 16>(w, a, 0.125, decode)
}

block_format!("IQ2_S as a [`BlockFormat`](super::BlockFormat).", Format, "iq2_s", QK_K, BYTES, Q8K, true, dequantize, None, None, Some(vec_dot));
