//! Q4_1: blocks of 32 weights, `x = d * q + m` with 4-bit `q`.
//!
//! Layout (20 bytes): `d: f16` | `m: f16` | `qs: [u8; 16]` (element `j` in
//! the low nibble of `qs[j]`, element `j + 16` in the high nibble).

use super::legacy;
use super::common::min_max;
use super::{arr, put_f16};

pub(crate) const QK: usize = 32;
pub(crate) const BYTES: usize = 4 + QK / 2;

/// The block's quants, 0..=15.
#[inline(always)]
fn quants(b: &[u8; BYTES]) -> [i8; QK] {
    let qs: &[u8; 16] = arr(b, 4);
    let mut q = [0i8; QK];
    for (j, &byte) in qs.iter().enumerate() {
        q[j] = (byte & 0x0f) as i8;
        q[j + 16] = (byte >> 4) as i8;
    }
    q
}

pub(crate) fn dequantize(src: &[u8], dst: &mut [f32]) {
    legacy::dequantize_with_min::<BYTES>(src, dst, quants)
}

/// `quantize_row_q4_1_ref`.
pub(crate) fn quantize_ref(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src
        .as_chunks::<QK>()
        .0
        .iter()
        .zip(dst.as_chunks_mut::<BYTES>().0)
    {
        let (min, max) = min_max(x);
        let d = (max - min) / 15.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        put_f16(b, 0, d);
        put_f16(b, 2, min);
        let q = |v: f32| (((v - min) * id + 0.5) as i8).min(15) as u8;
        for j in 0..QK / 2 {
            b[4 + j] = q(x[j]) | (q(x[j + 16]) << 4);
        }
    }
}

/// `ggml_vec_dot_q4_1_q8_1`, AVX2 order: lane FMAs with d_w*d_a, plus the
/// scalar `summs += m * s` (contracted to an FMA by the compiler).
pub(crate) fn vec_dot(w: &[u8], a: &[u8]) -> f32 {
    legacy::vec_dot_q8_1::<BYTES>(w, a, quants)
}

block_format!("Q4_1 as a [`BlockFormat`](super::BlockFormat).", Format, "q4_1", QK, BYTES, Q8_1, true, dequantize, Some(quantize_ref), None, Some(vec_dot));

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::test_util::{f16_field, set_f16_field, weight, Rng, F32_REL};
    use crate::quant::GgmlType;

    fn randomize(rng: &mut Rng, b: &mut [u8]) {
        let d = rng.f16_bits(-12, 0, false);
        let m = rng.f16_bits(-8, 3, true);
        set_f16_field(b, 0, d);
        set_f16_field(b, 2, m);
    }

    /// Independent decoding from ggml-common.h's block_q4_1.
    fn decode(b: &[u8]) -> Vec<(f64, f64)> {
        let d = f16_field(b, 0);
        let m = f16_field(b, 2);
        (0..32)
            .map(|i| {
                let byte = b[4 + i % 16];
                let nib = if i < 16 { byte & 15 } else { byte >> 4 };
                let dq = d * nib as f64;
                (dq + m, (dq.abs() + m.abs()) * F32_REL)
            })
            .collect()
    }

    #[test]
    fn dequantize_matches_layout() {
        weight::check_dequantize(GgmlType::Q4_1, 11, randomize, decode);
    }

    #[test]
    fn vec_dot_matches_f64() {
        weight::check_vec_dot(GgmlType::Q4_1, 12, randomize, decode);
    }

    #[test]
    fn roundtrip_within_step() {
        // half a step (max-min)/15, plus f16 rounding of d (x15) and m
        weight::check_roundtrip(GgmlType::Q4_1, 13, |x| {
            let (min, max) = min_max(x);
            let step = ((max - min) / 15.0) as f64;
            0.5 * step + (max.abs() + min.abs()) as f64 * 2f64.powi(-10)
        });
    }
}
