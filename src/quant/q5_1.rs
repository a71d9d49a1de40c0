//! Q5_1: blocks of 32 weights, `x = d * q + m` with 5-bit `q`.
//!
//! Layout (24 bytes): `d: f16` | `m: f16` | `qh: [u8; 4]` (bit `j` of the
//! little-endian u32 = 5th bit of element `j`) | `qs: [u8; 16]` (element `j`
//! in the low nibble of `qs[j]`, element `j + 16` in the high nibble).

use super::arr;
use super::legacy;

pub(crate) const QK: usize = 32;
pub(crate) const BYTES: usize = 4 + 4 + QK / 2;

/// The block's quants, 0..=31.
#[inline(always)]
fn quants(b: &[u8; BYTES]) -> [i8; QK] {
    legacy::unpack(arr(b, 8), u32::from_le_bytes(*arr(b, 4)), 0)
}

pub(crate) fn dequantize(src: &[u8], dst: &mut [f32]) {
    legacy::dequantize_with_min::<BYTES>(src, dst, quants)
}

/// `quantize_row_q5_1_ref`.
pub(crate) fn quantize_ref(src: &[f32], dst: &mut [u8]) {
    legacy::quantize_with_min::<BYTES>(src, dst, 31, |b, q| {
        let (qs, qh) = legacy::pack(&q);
        b[4..8].copy_from_slice(&qh.to_le_bytes());
        b[8..].copy_from_slice(&qs);
    })
}

/// `ggml_vec_dot_q5_1_q8_1`, AVX2 order (see Q4_1).
pub(crate) fn vec_dot(w: &[u8], a: &[u8]) -> f32 {
    legacy::vec_dot_q8_1::<BYTES>(w, a, quants)
}

block_format!("Q5_1 as a [`BlockFormat`](super::BlockFormat).", Format, "q5_1", QK, BYTES, Q8_1, true, dequantize, Some(quantize_ref), None, Some(vec_dot));
