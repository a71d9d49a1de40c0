//! Q5_1: blocks of 32 weights, `x = d * q + m` with 5-bit `q`.
//!
//! Layout (24 bytes): `d: f16` | `m: f16` | `qh: [u8; 4]` (bit `j` of the
//! little-endian u32 = 5th bit of element `j`) | `qs: [u8; 16]` (element `j`
//! in the low nibble of `qs[j]`, element `j + 16` in the high nibble).

use super::legacy;
use super::common::min_max;
use super::{arr, put_f16};

pub(crate) const QK: usize = 32;
pub(crate) const BYTES: usize = 4 + 4 + QK / 2;

/// The block's quants, 0..=31.
#[inline(always)]
fn quants(b: &[u8; BYTES]) -> [i8; QK] {
    let qh = u32::from_le_bytes(*arr(b, 4));
    let qs: &[u8; 16] = arr(b, 8);
    let mut q = [0i8; QK];
    for (j, &byte) in qs.iter().enumerate() {
        let h0 = ((qh >> j) & 1) as u8;
        let h1 = ((qh >> (j + 16)) & 1) as u8;
        q[j] = ((byte & 0x0f) | (h0 << 4)) as i8;
        q[j + 16] = ((byte >> 4) | (h1 << 4)) as i8;
    }
    q
}

pub(crate) fn dequantize(src: &[u8], dst: &mut [f32]) {
    legacy::dequantize_with_min::<BYTES>(src, dst, quants)
}

/// `quantize_row_q5_1_ref`.
pub(crate) fn quantize_ref(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src
        .as_chunks::<QK>()
        .0
        .iter()
        .zip(dst.as_chunks_mut::<BYTES>().0)
    {
        let (min, max) = min_max(x);
        let d = (max - min) / 31.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        put_f16(b, 0, d);
        put_f16(b, 2, min);
        let q = |v: f32| ((v - min) * id + 0.5) as u8;
        let mut qh = 0u32;
        for j in 0..QK / 2 {
            let (q0, q1) = (q(x[j]), q(x[j + 16]));
            b[8 + j] = (q0 & 0x0f) | ((q1 & 0x0f) << 4);
            qh |= (((q0 & 0x10) >> 4) as u32) << j;
            qh |= (((q1 & 0x10) >> 4) as u32) << (j + 16);
        }
        b[4..8].copy_from_slice(&qh.to_le_bytes());
    }
}

/// `ggml_vec_dot_q5_1_q8_1`, AVX2 order (see Q4_1).
pub(crate) fn vec_dot(w: &[u8], a: &[u8]) -> f32 {
    legacy::vec_dot_q8_1::<BYTES>(w, a, quants)
}

block_format!("Q5_1 as a [`BlockFormat`](super::BlockFormat).", Format, "q5_1", QK, BYTES, Q8_1, true, dequantize, Some(quantize_ref), None, Some(vec_dot));

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

    /// Independent decoding from ggml-common.h's block_q5_1.
    fn decode(b: &[u8]) -> Vec<(f64, f64)> {
        let d = f16_field(b, 0);
        let m = f16_field(b, 2);
        (0..32)
            .map(|i| {
                let byte = b[8 + i % 16];
                let nib = if i < 16 { byte & 15 } else { byte >> 4 };
                let hi = (b[4 + i / 8] >> (i % 8)) & 1;
                let dq = d * (nib as f64 + 16.0 * hi as f64);
                (dq + m, (dq.abs() + m.abs()) * F32_REL)
            })
            .collect()
    }

    #[test]
    fn dequantize_matches_layout() {
        weight::check_dequantize(GgmlType::Q5_1, 31, randomize, decode);
    }

    #[test]
    fn vec_dot_matches_f64() {
        weight::check_vec_dot(GgmlType::Q5_1, 32, randomize, decode);
    }

    #[test]
    fn roundtrip_within_step() {
        weight::check_roundtrip(GgmlType::Q5_1, 33, |x| {
            let (min, max) = min_max(x);
            let step = ((max - min) / 31.0) as f64;
            0.5 * step + (max.abs() + min.abs()) as f64 * 2f64.powi(-10)
        });
    }
}
