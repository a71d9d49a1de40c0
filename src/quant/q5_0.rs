//! Q5_0: blocks of 32 weights, `x = d * (q - 16)` with 5-bit `q`.
//!
//! Layout (22 bytes): `d: f16` | `qh: [u8; 4]` (bit `j` of the little-endian
//! u32 = 5th bit of element `j`) | `qs: [u8; 16]` (low nibbles: element `j`
//! in the low half of `qs[j]`, element `j + 16` in the high half).

use super::legacy;
use super::common::signed_absmax;
use super::{arr, put_f16};

pub(crate) const QK: usize = 32;
pub(crate) const BYTES: usize = 2 + 4 + QK / 2;

/// The block's quants, already offset to -16..=15.
#[inline(always)]
fn quants(b: &[u8; BYTES]) -> [i8; QK] {
    let qh = u32::from_le_bytes(*arr(b, 2));
    let qs: &[u8; 16] = arr(b, 6);
    let mut q = [0i8; QK];
    for (j, &byte) in qs.iter().enumerate() {
        let h0 = ((qh >> j) & 1) as u8;
        let h1 = ((qh >> (j + 16)) & 1) as u8;
        q[j] = ((byte & 0x0f) | (h0 << 4)) as i8 - 16;
        q[j + 16] = ((byte >> 4) | (h1 << 4)) as i8 - 16;
    }
    q
}

pub(crate) fn dequantize(src: &[u8], dst: &mut [f32]) {
    legacy::dequantize_scaled::<BYTES>(src, dst, quants)
}

/// `quantize_row_q5_0_ref`.
pub(crate) fn quantize_ref(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src
        .as_chunks::<QK>()
        .0
        .iter()
        .zip(dst.as_chunks_mut::<BYTES>().0)
    {
        let (_, max) = signed_absmax(x);
        let d = max / -16.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        put_f16(b, 0, d);
        let q = |v: f32| ((v * id + 16.5) as i8).min(31) as u8;
        let mut qh = 0u32;
        for j in 0..QK / 2 {
            let (q0, q1) = (q(x[j]), q(x[j + 16]));
            b[6 + j] = (q0 & 0x0f) | ((q1 & 0x0f) << 4);
            qh |= ((q0 >> 4) as u32) << j;
            qh |= ((q1 >> 4) as u32) << (j + 16);
        }
        b[2..6].copy_from_slice(&qh.to_le_bytes());
    }
}

/// `ggml_vec_dot_q5_0_q8_0`, AVX2 order.
pub(crate) fn vec_dot(w: &[u8], a: &[u8]) -> f32 {
    legacy::vec_dot_q8_0::<BYTES>(w, a, quants)
}

block_format!("Q5_0 as a [`BlockFormat`](super::BlockFormat).", Format, "q5_0", QK, BYTES, Q8_0, true, dequantize, Some(quantize_ref), None, Some(vec_dot));

#[cfg(test)]
mod tests {
    use crate::quant::test_util::{f16_field, set_f16_field, weight, Rng, F32_REL};
    use crate::quant::GgmlType;

    fn randomize(rng: &mut Rng, b: &mut [u8]) {
        let h = rng.f16_bits(-12, 2, true);
        set_f16_field(b, 0, h);
    }

    /// Independent decoding from ggml-common.h's block_q5_0.
    fn decode(b: &[u8]) -> Vec<(f64, f64)> {
        let d = f16_field(b, 0);
        (0..32)
            .map(|i| {
                let byte = b[6 + i % 16];
                let nib = if i < 16 { byte & 15 } else { byte >> 4 };
                let hi = (b[2 + i / 8] >> (i % 8)) & 1;
                let v = d * ((nib as i32 + 16 * hi as i32) - 16) as f64;
                (v, v.abs() * F32_REL)
            })
            .collect()
    }

    #[test]
    fn dequantize_matches_layout() {
        weight::check_dequantize(GgmlType::Q5_0, 21, randomize, decode);
    }

    #[test]
    fn vec_dot_matches_f64() {
        weight::check_vec_dot(GgmlType::Q5_0, 22, randomize, decode);
    }

    #[test]
    fn roundtrip_within_step() {
        weight::check_roundtrip(GgmlType::Q5_0, 23, |x| {
            let amax = x.iter().fold(0f32, |m, v| m.max(v.abs())) as f64;
            amax / 16.0 * 1.002
        });
    }
}
