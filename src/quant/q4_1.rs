//! Q4_1: blocks of 32 weights, `x = d * q + m` with 4-bit `q`.
//!
//! Layout (20 bytes): `d: f16` | `m: f16` | `qs: [u8; 16]` (element `j` in
//! the low nibble of `qs[j]`, element `j + 16` in the high nibble).

use super::common::min_max;
use super::lanes::{dot32, Acc8};
use super::{arr, f16_at, put_f16, q8_1};

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
    for (b, y) in src
        .as_chunks::<BYTES>()
        .0
        .iter()
        .zip(dst.as_chunks_mut::<QK>().0)
    {
        let d = f16_at(b, 0);
        let m = f16_at(b, 2);
        for (y, q) in y.iter_mut().zip(quants(b)) {
            *y = q as f32 * d + m;
        }
    }
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
    let mut acc = Acc8::new();
    let mut summs = 0f32;
    for (wb, ab) in w
        .as_chunks::<BYTES>()
        .0
        .iter()
        .zip(a.as_chunks::<{ q8_1::BYTES }>().0)
    {
        summs = f16_at(wb, 2).mul_add(f16_at(ab, 2), summs);
        let d = f16_at(wb, 0) * f16_at(ab, 0);
        acc.fma(d, &dot32(&quants(wb), arr(ab, 4)));
    }
    acc.hsum() + summs
}


/// Q4_1 as a [`BlockFormat`](super::BlockFormat).
pub(crate) struct Format;

impl super::BlockFormat for Format {
    const NAME: &'static str = "q4_1";
    const BLOCK_LEN: usize = QK;
    const BLOCK_BYTES: usize = BYTES;
    const VEC_DOT_TYPE: super::GgmlType = super::GgmlType::Q8_1;
    const IS_WEIGHT: bool = true;
    const DEQUANTIZE: super::DequantizeFn = dequantize;
    const QUANTIZE_REF: Option<super::QuantizeFn> = Some(quantize_ref);
    const QUANTIZE_ACT: Option<super::QuantizeFn> = None;
    const VEC_DOT: Option<super::VecDotFn> = Some(vec_dot);
}

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
