//! Q8_K: the activation format paired with the K-quants. Super-blocks of
//! 256 values, `x = d * q`, with per-16 sums of the quants.
//!
//! Layout (292 bytes): `d: f32` | `qs: [i8; 256]` | `bsums: [i16; 16]`.

use super::common::nearest_int;
use super::{arr, QK_K};

pub(crate) const BYTES: usize = 4 + QK_K + 2 * (QK_K / 16);
pub(crate) const QS: usize = 4;
pub(crate) const BSUMS: usize = 4 + QK_K;

/// The super-block scale.
#[inline(always)]
pub(crate) fn d(b: &[u8; BYTES]) -> f32 {
    f32::from_le_bytes(*arr(b, 0))
}

/// The 256 quants as raw bytes (reinterpret as i8).
#[inline(always)]
pub(crate) fn qs(b: &[u8; BYTES]) -> &[u8; QK_K] {
    arr(b, QS)
}

/// The 16 sums of 16 quants each.
#[inline(always)]
pub(crate) fn bsums(b: &[u8; BYTES]) -> [i16; 16] {
    let raw: &[u8; 32] = arr(b, BSUMS);
    let mut out = [0i16; 16];
    for (o, p) in out.iter_mut().zip(raw.as_chunks::<2>().0) {
        *o = i16::from_le_bytes(*p);
    }
    out
}

pub(crate) fn dequantize(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src
        .as_chunks::<BYTES>()
        .0
        .iter()
        .zip(dst.as_chunks_mut::<QK_K>().0)
    {
        let d = d(b);
        for (y, &q) in y.iter_mut().zip(qs(b)) {
            *y = d * (q as i8) as f32;
        }
    }
}

/// `quantize_row_q8_K_ref` (also what x86 uses): scale `-127 / max` with the
/// signed extreme, `nearest_int`, `d = 1 / iscale`. An all-zero block gets
/// d = 0 and zero quants (ggml leaves its bsums untouched; we zero them).
pub(crate) fn quantize(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.as_chunks::<QK_K>().0.iter().zip(dst.as_chunks_mut::<BYTES>().0) {
        let (mut amax, mut max) = (0f32, 0f32);
        for &v in x {
            if v.abs() > amax {
                amax = v.abs();
                max = v;
            }
        }
        if amax == 0.0 {
            b.fill(0);
            continue;
        }
        let iscale = -127.0 / max;
        let (qs, rest) = b[QS..].split_at_mut(QK_K);
        for (q, &v) in qs.iter_mut().zip(x) {
            *q = nearest_int(iscale * v).min(127) as i8 as u8;
        }
        for (s, grp) in rest
            .as_chunks_mut::<2>()
            .0
            .iter_mut()
            .zip(qs.as_chunks::<16>().0)
        {
            let sum: i32 = grp.iter().map(|&q| q as i8 as i32).sum();
            *s = (sum as i16).to_le_bytes();
        }
        b[0..4].copy_from_slice(&(1.0 / iscale).to_le_bytes());
    }
}

block_format!("Q8_K as a [`BlockFormat`](super::BlockFormat).", Format, "q8_K", QK_K, BYTES, Q8K, false, dequantize, Some(quantize), Some(quantize), None);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::test_util::{act, Rng};
    use crate::quant::{dequantize_row, quantize_row, GgmlType};

    /// d, quants and bsums against an f64 model.
    #[test]
    fn activation_fields() {
        let mut rng = Rng::new(61);
        for _ in 0..30 {
            let x = rng.row(512);
            let mut b = vec![0u8; 2 * BYTES];
            quantize_row(GgmlType::Q8K, &x, &mut b);
            let vals = act::q8_k(&b);
            for (xb, bb) in x.chunks(QK_K).zip(b.chunks(BYTES)) {
                let (mut amax, mut max) = (0f64, 0f64);
                for &v in xb {
                    if (v as f64).abs() > amax {
                        amax = (v as f64).abs();
                        max = v as f64;
                    }
                }
                let iscale = (-127.0 / max) as f32; // single rounding, like f32 division
                let d = f32::from_le_bytes([bb[0], bb[1], bb[2], bb[3]]);
                assert_eq!(d, 1.0 / iscale);
                assert!(((d as f64) - max / -127.0).abs() <= (max / 127.0).abs() * 1e-6);
                for (i, &v) in xb.iter().enumerate() {
                    let p = (iscale * v) as f64;
                    let q = bb[4 + i] as i8 as f64;
                    assert!((q - p).abs() <= 0.5, "{p} -> {q}");
                    if (q - p).abs() == 0.5 {
                        assert_eq!(q % 2.0, 0.0);
                    }
                }
                // the signed extreme maps to exactly -127
                let imax = xb.iter().position(|&v| v as f64 == max).unwrap();
                assert_eq!(bb[4 + imax] as i8, -127);
                for g in 0..16 {
                    let want: i32 = (0..16).map(|i| bb[4 + 16 * g + i] as i8 as i32).sum();
                    let got = i16::from_le_bytes([bb[BSUMS + 2 * g], bb[BSUMS + 2 * g + 1]]);
                    assert_eq!(got as i32, want);
                }
            }
            let mut y = vec![0f32; 512];
            dequantize_row(GgmlType::Q8K, &b, &mut y);
            for (a, c) in y.iter().zip(&vals) {
                // f32 product d*q vs the exact one: one rounding
                assert!((*a as f64 - *c).abs() <= c.abs() * 2f64.powi(-24));
            }
        }
    }

    #[test]
    fn ties_and_zero() {
        // max = -127 gives iscale = 1 exactly: x.5 inputs are ties -> even
        let mut x = [0f32; QK_K];
        x[0] = -127.0;
        x[1] = 0.5;
        x[2] = 1.5;
        x[3] = -2.5;
        x[4] = 126.5;
        let mut b = [0u8; BYTES];
        quantize(&x, &mut b);
        assert_eq!(d(&b), 1.0);
        let q: Vec<i8> = qs(&b)[..5].iter().map(|&v| v as i8).collect();
        assert_eq!(q, [-127, 0, 2, -2, 126]);
        assert_eq!(bsums(&b)[0], -127 + 2 - 2 + 126);
        quantize(&[0.0; QK_K], &mut b);
        assert!(b.iter().all(|&v| v == 0));
    }
}
