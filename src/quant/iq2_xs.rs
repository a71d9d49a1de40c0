//! IQ2_XS: super-blocks of 256 weights, 2.3125 bpw, `x = d · (0.5 + ls) / 4 · ±grid`.
//!
//! Layout (74 bytes): `d: f16` | `qs: [u16; 32]` (per 8 weights a 9-bit `iq2xs_grid` index and
//! 7 sign bits, `ksigns_iq2xs`) | `scales: [u8; 8]` (per 32 weights two 4-bit `ls`, low nibble
//! for the first 16). `dequantize_row_iq2_xs` (ggml-quants.c:2516),
//! `ggml_vec_dot_iq2_xs_q8_K` (ggml-cpu/arch/x86/quants.c:2778).

use super::iq_tables::{IQ2XS_GRID, KSIGNS_IQ2XS};
use super::iquant;
use super::{arr, QK_K};

pub(crate) const BYTES: usize = 2 + QK_K / 4 + QK_K / 32;
const SCALES: usize = 2 + QK_K / 4;

/// The 256 signed grid values and the 16 scales `ls` (per 16).
#[inline(always)]
fn decode(b: &[u8; BYTES]) -> ([i8; QK_K], [u8; 16]) {
    let mut q = [0i8; QK_K];
    for (k, q8) in q.as_chunks_mut::<8>().0.iter_mut().enumerate() {
        let v = u16::from_le_bytes(*arr(b, 2 + 2 * k));
        let grid = IQ2XS_GRID[(v & 511) as usize].to_le_bytes();
        iquant::put_signed(q8, &grid, KSIGNS_IQ2XS[(v >> 9) as usize]);
    }
    (q, iquant::nibbles16(arr(b, SCALES)))
}

pub(crate) fn dequantize(src: &[u8], dst: &mut [f32]) {
    iquant::dequantize_half::<BYTES, 16>(src, dst, 0.25, decode)
}

/// `ggml_vec_dot_iq2_xs_q8_K`, AVX2 order: per-16 scales `2·ls + 1`, `0.125 · hsum`.
pub(crate) fn vec_dot(w: &[u8], a: &[u8]) -> f32 {
    iquant::vec_dot_half::<BYTES, 16>(w, a, 0.125, decode)
}

block_format!("IQ2_XS as a [`BlockFormat`](super::BlockFormat).", Format, "iq2_xs", QK_K, BYTES, Q8K, true, dequantize, None, None, Some(vec_dot));
