//! IQ3_XXS: super-blocks of 256 weights, 3.0625 bpw, `x = d · (0.5 + ls) / 2 · ±grid`.
//!
//! Layout (98 bytes): `d: f16` | `qs: [u8; 64]` (an `iq3xxs_grid` index per 4 weights, 4
//! magnitudes each) | 8 × u32 (per 32 weights 4 × 7 sign bits, `ksigns_iq2xs`, and a 4-bit
//! `ls` on top). `dequantize_row_iq3_xxs` (ggml-quants.c:2575), `ggml_vec_dot_iq3_xxs_q8_K`
//! (ggml-cpu/arch/x86/quants.c:3260).

use super::iq_tables::{IQ3XXS_GRID, KSIGNS_IQ2XS};
use super::iquant;
use super::{arr, QK_K};

pub(crate) const BYTES: usize = 2 + 3 * QK_K / 8;
const SIGNS: usize = 2 + QK_K / 4;

/// The 256 signed grid values and the 8 scales `ls` (per 32).
#[inline(always)]
fn decode(b: &[u8; BYTES]) -> ([i8; QK_K], [u8; 8]) {
    let mut q = [0i8; QK_K];
    let mut ls = [0u8; 8];
    for (g, (qg, l)) in q.as_chunks_mut::<32>().0.iter_mut().zip(&mut ls).enumerate() {
        let sg = u32::from_le_bytes(*arr(b, SIGNS + 4 * g));
        *l = (sg >> 28) as u8;
        for (k, q8) in qg.as_chunks_mut::<8>().0.iter_mut().enumerate() {
            let i = 2 + 8 * g + 2 * k;
            let mut grid = [0u8; 8];
            grid[..4].copy_from_slice(&IQ3XXS_GRID[b[i] as usize].to_le_bytes());
            grid[4..].copy_from_slice(&IQ3XXS_GRID[b[i + 1] as usize].to_le_bytes());
            iquant::put_signed(q8, &grid, KSIGNS_IQ2XS[(sg >> (7 * k)) as usize & 127]);
        }
    }
    (q, ls)
}

pub(crate) fn dequantize(src: &[u8], dst: &mut [f32]) {
    iquant::dequantize_half::<BYTES, 8>(src, dst, 0.5, decode)
}

/// `ggml_vec_dot_iq3_xxs_q8_K`, AVX2 order: per-32 scales `2·ls + 1`, `0.25 · hsum`.
pub(crate) fn vec_dot(w: &[u8], a: &[u8]) -> f32 {
    iquant::vec_dot_half::<BYTES, 8>(w, a, 0.25, decode)
}

block_format!("IQ3_XXS as a [`BlockFormat`](super::BlockFormat).", Format, "iq3_xxs", QK_K, BYTES, Q8K, true, dequantize, None, None, Some(vec_dot));
