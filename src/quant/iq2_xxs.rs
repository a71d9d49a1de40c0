//! IQ2_XXS: super-blocks of 256 weights, 2.0625 bpw, `x = d · (0.5 + ls) / 4 · ±grid`.
//!
//! Layout (66 bytes): `d: f16` | 8 × (4 grid bytes → `iq2xxs_grid` (8 magnitudes each),
//! then a u32: 4 × 7 sign bits (`ksigns_iq2xs`, the 8th sign is their parity) and a 4-bit
//! scale `ls` in the top bits) per 32 weights. `dequantize_row_iq2_xxs`
//! (ggml-quants.c:2488), `ggml_vec_dot_iq2_xxs_q8_K` (ggml-cpu/arch/x86/quants.c:2660).

use super::iq_tables::{IQ2XXS_GRID, KSIGNS_IQ2XS};
use super::iquant;
use super::{arr, QK_K};

pub(crate) const BYTES: usize = 2 + QK_K / 4;

/// The 256 signed grid values and the 8 scales `ls` (per 32).
#[inline(always)]
fn decode(b: &[u8; BYTES]) -> ([i8; QK_K], [u8; 8]) {
    let mut q = [0i8; QK_K];
    let mut ls = [0u8; 8];
    for (g, (qg, l)) in q.as_chunks_mut::<32>().0.iter_mut().zip(&mut ls).enumerate() {
        let idx: &[u8; 4] = arr(b, 2 + 8 * g);
        let sg = u32::from_le_bytes(*arr(b, 6 + 8 * g));
        *l = (sg >> 28) as u8;
        for (k, q8) in qg.as_chunks_mut::<8>().0.iter_mut().enumerate() {
            let grid = IQ2XXS_GRID[idx[k] as usize].to_le_bytes();
            iquant::put_signed(q8, &grid, KSIGNS_IQ2XS[(sg >> (7 * k)) as usize & 127]);
        }
    }
    (q, ls)
}

pub(crate) fn dequantize(src: &[u8], dst: &mut [f32]) {
    iquant::dequantize_half::<BYTES, 8>(src, dst, 0.25, decode)
}

/// `ggml_vec_dot_iq2_xxs_q8_K`, AVX2 order: per-32 scales `2·ls + 1`, `0.125 · hsum`.
pub(crate) fn vec_dot(w: &[u8], a: &[u8]) -> f32 {
    iquant::vec_dot_half::<BYTES, 8>(w, a, 0.125, decode)
}

block_format!("IQ2_XXS as a [`BlockFormat`](super::BlockFormat).", Format, "iq2_xxs", QK_K, BYTES, Q8K, true, dequantize, None, None, Some(vec_dot));
