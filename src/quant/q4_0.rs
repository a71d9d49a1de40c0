//! Q4_0: blocks of 32 weights, `x = d * (q - 8)` with 4-bit `q`.
//!
//! Layout (18 bytes): `d: f16` | `qs: [u8; 16]` — element `j` in the low
//! nibble of `qs[j]`, element `j + 16` in the high nibble.

use super::legacy;
use super::common::signed_absmax;
use super::{arr, put_f16};

pub(crate) const QK: usize = 32;
pub(crate) const BYTES: usize = 2 + QK / 2;

/// The block's quants, already offset to -8..=7.
#[inline(always)]
fn quants(b: &[u8; BYTES]) -> [i8; QK] {
    let qs: &[u8; 16] = arr(b, 2);
    let mut q = [0i8; QK];
    for (j, &byte) in qs.iter().enumerate() {
        q[j] = (byte & 0x0f) as i8 - 8;
        q[j + 16] = (byte >> 4) as i8 - 8;
    }
    q
}

pub(crate) fn dequantize(src: &[u8], dst: &mut [f32]) {
    legacy::dequantize_scaled::<BYTES>(src, dst, quants)
}

/// `quantize_row_q4_0_ref`.
pub(crate) fn quantize_ref(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src
        .as_chunks::<QK>()
        .0
        .iter()
        .zip(dst.as_chunks_mut::<BYTES>().0)
    {
        let (_, max) = signed_absmax(x);
        let d = max / -8.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        put_f16(b, 0, d);
        let q = |v: f32| ((v * id + 8.5) as i8).min(15) as u8;
        for j in 0..QK / 2 {
            b[2 + j] = q(x[j]) | (q(x[j + 16]) << 4);
        }
    }
}

/// `ggml_vec_dot_q4_0_q8_0`, AVX2 order.
pub(crate) fn vec_dot(w: &[u8], a: &[u8]) -> f32 {
    legacy::vec_dot_q8_0::<BYTES>(w, a, quants)
}

block_format!("Q4_0 as a [`BlockFormat`](super::BlockFormat).", Format, "q4_0", QK, BYTES, Q8_0, true, dequantize, Some(quantize_ref), None, Some(vec_dot));

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::test_util::{f16_field, weight, Rng, F32_REL};
    use crate::quant::GgmlType;

    fn randomize(rng: &mut Rng, b: &mut [u8]) {
        let h = rng.f16_bits(-12, 2, true);
        crate::quant::test_util::set_f16_field(b, 0, h);
    }

    /// Independent decoding from ggml-common.h's block_q4_0.
    fn decode(b: &[u8]) -> Vec<(f64, f64)> {
        let d = f16_field(b, 0);
        (0..32)
            .map(|i| {
                let byte = b[2 + i % 16];
                let nib = if i < 16 { byte & 15 } else { byte >> 4 };
                let v = d * (nib as f64 - 8.0);
                (v, v.abs() * F32_REL)
            })
            .collect()
    }

    #[test]
    fn dequantize_matches_layout() {
        weight::check_dequantize(GgmlType::Q4_0, 1, randomize, decode);
    }

    #[test]
    fn vec_dot_matches_f64() {
        weight::check_vec_dot(GgmlType::Q4_0, 2, randomize, decode);
    }

    #[test]
    fn roundtrip_within_step() {
        // step |d| = amax/8; the value opposite the extreme may clamp (error <= |d|)
        weight::check_roundtrip(GgmlType::Q4_0, 3, |x| {
            let amax = x.iter().fold(0f32, |m, v| m.max(v.abs())) as f64;
            amax / 8.0 * 1.002
        });
    }

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
