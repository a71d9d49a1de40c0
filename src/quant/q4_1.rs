//! Q4_1: blocks of 32 weights, `x = d * q + m` with 4-bit `q`.
//!
//! Layout (20 bytes): `d: f16` | `m: f16` | `qs: [u8; 16]` (element `j` in
//! the low nibble of `qs[j]`, element `j + 16` in the high nibble).

use super::arr;
use super::legacy;

pub(crate) const QK: usize = 32;
pub(crate) const BYTES: usize = 4 + QK / 2;

/// The block's quants, 0..=15.
#[inline(always)]
fn quants(b: &[u8; BYTES]) -> [i8; QK] {
    legacy::unpack(arr(b, 4), 0, 0)
}

pub(crate) fn dequantize(src: &[u8], dst: &mut [f32]) {
    legacy::dequantize_with_min::<BYTES>(src, dst, quants)
}

/// `quantize_row_q4_1_ref`.
pub(crate) fn quantize_ref(src: &[f32], dst: &mut [u8]) {
    legacy::quantize_with_min::<BYTES>(src, dst, 15, |b, q| b[4..].copy_from_slice(&legacy::pack(&q).0))
}

/// `ggml_vec_dot_q4_1_q8_1`, AVX2 order: lane FMAs with d_w*d_a, plus the
/// scalar `summs += m * s` (contracted to an FMA by the compiler).
pub(crate) fn vec_dot(w: &[u8], a: &[u8]) -> f32 {
    legacy::vec_dot_q8_1::<BYTES>(w, a, quants)
}

block_format!("Q4_1 as a [`BlockFormat`](super::BlockFormat).", Format, "q4_1", QK, BYTES, Q8_1, true, dequantize, Some(quantize_ref), None, Some(vec_dot));
