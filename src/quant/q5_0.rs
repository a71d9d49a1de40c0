//! Q5_0: blocks of 32 weights, `x = d * (q - 16)` with 5-bit `q`.
//!
//! Layout (22 bytes): `d: f16` | `qh: [u8; 4]` (bit `j` of the little-endian
//! u32 = 5th bit of element `j`) | `qs: [u8; 16]` (low nibbles: element `j`
//! in the low half of `qs[j]`, element `j + 16` in the high half).

use super::arr;
use super::legacy;

pub(crate) const QK: usize = 32;
pub(crate) const BYTES: usize = 2 + 4 + QK / 2;

/// The block's quants, already offset to -16..=15.
#[inline(always)]
fn quants(b: &[u8; BYTES]) -> [i8; QK] {
    legacy::unpack(arr(b, 6), u32::from_le_bytes(*arr(b, 2)), 16)
}

pub(crate) fn dequantize(src: &[u8], dst: &mut [f32]) {
    legacy::dequantize_scaled::<BYTES>(src, dst, quants)
}

/// `quantize_row_q5_0_ref`.
pub(crate) fn quantize_ref(src: &[f32], dst: &mut [u8]) {
    legacy::quantize_scaled::<BYTES>(src, dst, 31, |b, q| {
        let (qs, qh) = legacy::pack(&q);
        b[2..6].copy_from_slice(&qh.to_le_bytes());
        b[6..].copy_from_slice(&qs);
    })
}

/// `ggml_vec_dot_q5_0_q8_0`, AVX2 order.
pub(crate) fn vec_dot(w: &[u8], a: &[u8]) -> f32 {
    legacy::vec_dot_q8_0::<BYTES>(w, a, quants)
}

block_format!("Q5_0 as a [`BlockFormat`](super::BlockFormat).", Format, "q5_0", QK, BYTES, Q8_0, true, dequantize, Some(quantize_ref), None, Some(vec_dot));
