//! Q8_0: blocks of 32 values, `x = d * q` with int8 `q`. Weight format and
//! the activation format paired with Q4_0 / Q5_0 / Q8_0 weights.
//!
//! Layout (34 bytes): `d: f16` | `qs: [i8; 32]`.

use super::lanes::{dot32, Acc8};
use super::{arr, f16_at, put_f16};

pub(crate) const QK: usize = 32;
pub(crate) const BYTES: usize = 2 + QK;

#[inline(always)]
fn quants(b: &[u8; BYTES]) -> [i8; QK] {
    arr::<QK>(b, 2).map(|v| v as i8)
}

pub(crate) fn dequantize(src: &[u8], dst: &mut [f32]) {
    dequantize_scaled::<BYTES>(src, dst, quants)
}

/// `x = d · q` (Q8_0, and the weight formats with a scale: Q4_0, Q5_0, IQ4_NL; `d` is the
/// block's first f16).
#[inline(always)]
pub(crate) fn dequantize_scaled<const B: usize>(src: &[u8], dst: &mut [f32], quants: impl Fn(&[u8; B]) -> [i8; QK]) {
    for (b, y) in src.as_chunks::<B>().0.iter().zip(dst.as_chunks_mut::<QK>().0) {
        let d = f16_at(b, 0);
        for (y, q) in y.iter_mut().zip(quants(b)) {
            *y = q as f32 * d;
        }
    }
}

/// `ggml_vec_dot_q{4,5,8}_0_q8_0`, AVX2 order: one lane FMA per block with d_w·d_a.
#[inline(always)]
pub(crate) fn vec_dot_q8_0<const B: usize>(w: &[u8], a: &[u8], quants: impl Fn(&[u8; B]) -> [i8; QK]) -> f32 {
    let mut acc = Acc8::new();
    for (wb, ab) in w.as_chunks::<B>().0.iter().zip(a.as_chunks::<BYTES>().0) {
        let d = f16_at(wb, 0) * f16_at(ab, 0);
        acc.fma(d, &dot32(&quants(wb), arr(ab, 2)));
    }
    acc.hsum()
}

/// Largest |x| of a group (`_mm256_max_ps` over `andnot(-0.0, x)`).
#[inline(always)]
pub(crate) fn absmax(x: &[f32]) -> f32 {
    x.iter()
        .fold(0f32, |m, v| if v.abs() > m { v.abs() } else { m })
}

/// `_mm256_round_ps(v, _MM_ROUND_NEAREST)` + `cvtps_epi32` + the saturating
/// packs down to int8.
#[inline(always)]
pub(crate) fn round_pack_i8(v: f32) -> i8 {
    let r = v.round_ties_even();
    // cvtps_epi32 yields i32::MIN for NaN and out-of-range values
    let i = if (-2_147_483_648.0..2_147_483_648.0).contains(&r) {
        r as i32
    } else {
        i32::MIN
    };
    i.clamp(-128, 127) as i8
}

/// The Q8_0 / Q8_1 quantizers: `d` (f16) at 0, the quants at `QS` (2 for Q8_0; 4 for Q8_1,
/// which also stores `s = f16(d · Σq)` at 2, with the unrounded f32 `d`). `X86`: ggml-cpu's
/// AVX path (multiplier `127 / amax`, round half to even); otherwise `quantize_row_q8_*_ref`
/// (multiplier `1 / d`, `roundf`: half away from zero).
#[inline(always)]
pub(crate) fn quantize_blocks<const B: usize, const QS: usize, const X86: bool>(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.as_chunks::<QK>().0.iter().zip(dst.as_chunks_mut::<B>().0) {
        let (d, q): (f32, [i8; QK]) = if X86 {
            let amax = absmax(x);
            let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
            (amax / 127.0, x.map(|v| round_pack_i8(v * id)))
        } else {
            let amax = x.iter().fold(0f32, |m, v| if m > v.abs() { m } else { v.abs() });
            let d = amax / 127.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            (d, x.map(|v| (v * id).round() as i8))
        };
        put_f16(b, 0, d);
        for (o, &v) in b[QS..].iter_mut().zip(&q) {
            *o = v as u8;
        }
        if QS == 4 {
            let sum: i32 = q.iter().map(|&v| v as i32).sum();
            put_f16(b, 2, d * sum as f32);
        }
    }
}

/// x86 `quantize_row_q8_0` (AVX path).
pub(crate) fn quantize_x86(src: &[f32], dst: &mut [u8]) {
    quantize_blocks::<BYTES, 2, true>(src, dst)
}

/// `quantize_row_q8_0_ref`.
pub(crate) fn quantize_ref(src: &[f32], dst: &mut [u8]) {
    quantize_blocks::<BYTES, 2, false>(src, dst)
}

/// `ggml_vec_dot_q8_0_q8_0`, AVX2 order.
pub(crate) fn vec_dot(w: &[u8], a: &[u8]) -> f32 {
    vec_dot_q8_0::<BYTES>(w, a, quants)
}

block_format!("Q8_0 as a [`BlockFormat`](super::BlockFormat).", Format, "q8_0", QK, BYTES, Q8_0, true, dequantize, Some(quantize_ref), Some(quantize_x86), Some(vec_dot));

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::test_util::{
        act, f16_bits_to_f64, f16_field, set_f16_field, weight, Rng, F32_REL,
    };
    use crate::quant::{f32_to_f16, quantize_row, GgmlType};

    fn randomize(rng: &mut Rng, b: &mut [u8]) {
        let h = rng.f16_bits(-14, 0, true);
        set_f16_field(b, 0, h);
    }

    /// Independent decoding from ggml-common.h's block_q8_0.
    fn decode(b: &[u8]) -> Vec<(f64, f64)> {
        let d = f16_field(b, 0);
        (0..32)
            .map(|i| {
                let v = d * (b[2 + i] as i8) as f64;
                (v, v.abs() * F32_REL)
            })
            .collect()
    }

    #[test]
    fn layout_dot_and_roundtrip() {
        weight::check_format(GgmlType::Q8_0, 41, randomize, decode, |x| {
            let amax = weight::amax(x);
            amax / 127.0 * 0.5 + amax * 2f64.powi(-11)
        });
    }

    /// Activation quantization: scale from an f64 model, quants = nearest
    /// (ties to even) of x * 127/amax.
    #[test]
    fn activation_quantizer() {
        let mut rng = Rng::new(44);
        for _ in 0..50 {
            let x = rng.row(256);
            let mut b = vec![0u8; 8 * BYTES];
            quantize_row(GgmlType::Q8_0, &x, &mut b);
            for (xb, bb) in x.chunks(32).zip(b.chunks(BYTES)) {
                let amax = xb.iter().map(|v| v.abs() as f64).fold(0.0, f64::max);
                let d = (amax / 127.0) as f32; // f64 quotient rounded once == f32 division
                assert_eq!(u16::from_le_bytes([bb[0], bb[1]]), f32_to_f16(d));
                assert!(
                    (f16_bits_to_f64(f32_to_f16(d)) - amax / 127.0).abs()
                        <= amax / 127.0 * 2f64.powi(-11)
                );
                let id = if amax != 0.0 {
                    (127.0 / amax) as f32
                } else {
                    0.0
                };
                for (i, &v) in xb.iter().enumerate() {
                    let p = (v * id) as f64; // the f32 product, as the SIMD code forms it
                    let q = bb[2 + i] as i8 as f64;
                    assert!((q - p).abs() <= 0.5, "{v} -> {q}");
                    if (q - p).abs() == 0.5 {
                        assert_eq!(q % 2.0, 0.0, "tie must go to even: {p} -> {q}");
                    }
                    assert!(q.abs() <= 127.0);
                }
            }
        }
        // ties: amax = 127 makes id = 1, so x.5 values are exact ties
        let mut x = [0f32; 32];
        x[0] = 127.0;
        x[1] = 0.5;
        x[2] = 1.5;
        x[3] = 2.5;
        x[4] = -0.5;
        x[5] = -1.5;
        x[6] = -2.5;
        x[7] = 126.5;
        let mut b = [0u8; BYTES];
        quantize_x86(&x, &mut b);
        let q: Vec<i8> = b[2..10].iter().map(|&v| v as i8).collect();
        assert_eq!(q, [127, 0, 2, 2, 0, -2, -2, 126]);
        // the reference quantizer rounds ties away from zero
        quantize_ref(&x, &mut b);
        let q: Vec<i8> = b[2..10].iter().map(|&v| v as i8).collect();
        assert_eq!(q, [127, 1, 2, 3, -1, -2, -3, 127]);
        // all-zero block: d = 0, quants 0
        quantize_x86(&[0.0; 32], &mut b);
        assert!(b.iter().all(|&v| v == 0));
        assert_eq!(act::q8_0(&b), vec![0.0; 32]);
    }
}
