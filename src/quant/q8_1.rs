//! Q8_1: blocks of 32 activations, `x = d * q` with int8 `q`, plus
//! `s = d * sum(q)` for the Q4_1 / Q5_1 minimum terms.
//!
//! Layout (36 bytes): `d: f16` | `s: f16` | `qs: [i8; 32]`.

use super::{arr, q8_0};

pub(crate) const QK: usize = 32;
pub(crate) const BYTES: usize = 4 + QK;

pub(crate) fn dequantize(src: &[u8], dst: &mut [f32]) {
    q8_0::dequantize_scaled::<BYTES>(src, dst, |b| arr::<QK>(b, 4).map(|v| v as i8))
}

/// x86 `quantize_row_q8_1` (AVX2 path): as Q8_0, and `s = f16(d * sum)`
/// with the unrounded f32 `d`.
pub(crate) fn quantize_x86(src: &[f32], dst: &mut [u8]) {
    q8_0::quantize_blocks::<BYTES, 4, true>(src, dst)
}

/// `quantize_row_q8_1_ref`: multiplier `1 / d`, `roundf`.
pub(crate) fn quantize_ref(src: &[f32], dst: &mut [u8]) {
    q8_0::quantize_blocks::<BYTES, 4, false>(src, dst)
}

block_format!("Q8_1 as a [`BlockFormat`](super::BlockFormat).", Format, "q8_1", QK, BYTES, Q8_1, false, dequantize, Some(quantize_ref), Some(quantize_x86), None);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::test_util::{act, f16_bits_to_f64, Rng};
    use crate::quant::{dequantize_row, f32_to_f16, quantize_row, GgmlType};

    /// Stored d and s against an f64 model; s = d*sum(q) (current ggml; older
    /// versions stored sum(x) instead).
    #[test]
    fn activation_fields() {
        let mut rng = Rng::new(51);
        for _ in 0..50 {
            let x = rng.row(128);
            let mut b = vec![0u8; 4 * BYTES];
            quantize_row(GgmlType::Q8_1, &x, &mut b);
            let (vals, s) = act::q8_1(&b);
            for (k, (xb, bb)) in x.chunks(32).zip(b.chunks(BYTES)).enumerate() {
                let amax = xb.iter().map(|v| v.abs() as f64).fold(0.0, f64::max);
                let d = (amax / 127.0) as f32;
                assert_eq!(u16::from_le_bytes([bb[0], bb[1]]), f32_to_f16(d));
                let sum: i32 = bb[4..].iter().map(|&q| q as i8 as i32).sum();
                let s_model = d as f64 * sum as f64;
                assert_eq!(
                    u16::from_le_bytes([bb[2], bb[3]]),
                    f32_to_f16(d * sum as f32)
                );
                assert!((s[k] - s_model).abs() <= s_model.abs() * 2f64.powi(-11) + 1e-30);
                let id = if amax != 0.0 {
                    (127.0 / amax) as f32
                } else {
                    0.0
                };
                for (i, &v) in xb.iter().enumerate() {
                    let p = (v * id) as f64;
                    let q = bb[4 + i] as i8 as f64;
                    assert!((q - p).abs() <= 0.5);
                    if (q - p).abs() == 0.5 {
                        assert_eq!(q % 2.0, 0.0);
                    }
                    let dq = f16_bits_to_f64(f32_to_f16(d)) * q;
                    assert_eq!(vals[32 * k + i], dq);
                }
            }
            let mut y = vec![0f32; 128];
            dequantize_row(GgmlType::Q8_1, &b, &mut y);
            for (a, c) in y.iter().zip(&vals) {
                assert_eq!(*a as f64, *c);
            }
        }
    }

    #[test]
    fn s_uses_unrounded_d() {
        // amax chosen so f16(d) != d: s must be f16(d_f32 * sum)
        let mut x = [0f32; 32];
        x[0] = 1.0;
        x[1] = 0.7;
        x[2] = 0.3;
        let mut b = [0u8; BYTES];
        quantize_x86(&x, &mut b);
        let d = 1.0f32 / 127.0;
        let sum: i32 = b[4..].iter().map(|&q| q as i8 as i32).sum();
        assert_eq!(sum, 127 + 89 + 38);
        assert_eq!(u16::from_le_bytes([b[2], b[3]]), f32_to_f16(d * sum as f32));
        // the reference quantizer agrees here (no ties), up to the multiplier
        let mut r = [0u8; BYTES];
        quantize_ref(&x, &mut r);
        assert_eq!(&r[4..], &b[4..]);
    }
}
