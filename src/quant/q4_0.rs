//! Q4_0: blocks of 32 weights, `x = d * (q - 8)` with 4-bit `q`.
//!
//! Layout (18 bytes): `d: f16` | `qs: [u8; 16]` — element `j` in the low
//! nibble of `qs[j]`, element `j + 16` in the high nibble.

use super::arr;
use super::legacy;

pub(crate) const QK: usize = 32;
pub(crate) const BYTES: usize = 2 + QK / 2;

/// The block's quants, already offset to -8..=7.
#[inline(always)]
fn quants(b: &[u8; BYTES]) -> [i8; QK] {
    legacy::unpack(arr(b, 2), 0, 8)
}

pub(crate) fn dequantize(src: &[u8], dst: &mut [f32]) {
    legacy::dequantize_scaled::<BYTES>(src, dst, quants)
}

/// `quantize_row_q4_0_ref`.
pub(crate) fn quantize_ref(src: &[f32], dst: &mut [u8]) {
    legacy::quantize_scaled::<BYTES>(src, dst, 15, |b, q| b[2..].copy_from_slice(&legacy::pack(&q).0))
}

/// `ggml_vec_dot_q4_0_q8_0`, AVX2 order.
pub(crate) fn vec_dot(w: &[u8], a: &[u8]) -> f32 {
    legacy::vec_dot_q8_0::<BYTES>(w, a, quants)
}

block_format!("Q4_0 as a [`BlockFormat`](super::BlockFormat).", Format, "q4_0", QK, BYTES, Q8_0, true, dequantize, Some(quantize_ref), None, Some(vec_dot));

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::test_util::f16_field;

    #[test]
    fn quantize_ref_known_block() {
        let x: Vec<f32> = (0..32).map(|i| i as f32 - 16.0).collect(); // max |x| = -16
        let mut b = [0u8; BYTES];
        quantize_ref(&x, &mut b);
        assert_eq!(f16_field(&b, 0), 2.0); // d = -16 / -8
        let mut y = [0f32; 32];
        dequantize(&b, &mut y);
        for (i, (a, c)) in x.iter().zip(&y).enumerate() {
            // x/2 + 8.5 truncated; odd x land on ties and round up
            let q = ((a / 2.0 + 8.5) as i32).min(15);
            assert_eq!(*c, 2.0 * (q - 8) as f32, "{i}");
        }
    }
}
