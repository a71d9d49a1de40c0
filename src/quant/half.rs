//! f16 / bf16 conversions and the plain (one element per block) formats.

use super::lanes::reduce16;

/// f32 -> IEEE binary16, round to nearest even. NaN becomes the quiet NaN
/// 0x7e00 (with the input's sign), like ggml's `GGML_FP32_TO_FP16`.
pub fn f32_to_f16(x: f32) -> u16 {
    let bits = x.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let abs = bits & 0x7fff_ffff;
    if abs > 0x7f80_0000 {
        return sign | 0x7e00;
    }
    // 65520 = 65504 (largest f16) + half an ulp: ties go to the even inf.
    if abs >= 0x477f_f000 {
        return sign | 0x7c00;
    }
    if abs < 0x3880_0000 {
        // Below 2^-14: an f16 subnormal (or the smallest normal after
        // rounding). Scaling by 2^24 is exact and gives the f16 bit pattern.
        let scaled = f32::from_bits(abs) * 16_777_216.0;
        return sign | scaled.round_ties_even() as u16;
    }
    // Normal: rebias the exponent (127 -> 15) and drop 13 mantissa bits,
    // rounding to nearest even (a carry into the exponent is correct).
    let rebased = abs - ((127 - 15) << 23);
    let rounded = rebased + 0x0fff + ((rebased >> 13) & 1);
    sign | (rounded >> 13) as u16
}

/// IEEE binary16 -> f32 (exact; NaN payloads are kept).
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h as u32) & 0x8000) << 16;
    let exp = ((h >> 10) & 0x1f) as u32;
    let man = (h & 0x3ff) as u32;
    match exp {
        0 => {
            // Zero or subnormal: man * 2^-24, exact in f32.
            let v = man as f32 * (1.0 / 16_777_216.0);
            f32::from_bits(sign | v.to_bits())
        }
        31 => f32::from_bits(sign | 0x7f80_0000 | (man << 13)),
        _ => f32::from_bits(sign | ((exp + 127 - 15) << 23) | (man << 13)),
    }
}

/// f32 -> bfloat16, round to nearest even; NaN is kept and made quiet, like
/// ggml's `GGML_FP32_TO_BF16`.
pub fn f32_to_bf16(x: f32) -> u16 {
    let bits = x.to_bits();
    if bits & 0x7fff_ffff > 0x7f80_0000 {
        return ((bits >> 16) | 0x40) as u16;
    }
    let rounded = bits.wrapping_add(0x7fff + ((bits >> 16) & 1));
    (rounded >> 16) as u16
}

/// bfloat16 -> f32 (exact).
pub fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

#[inline(always)]
fn f32_le(b: &[u8; 4]) -> f32 {
    f32::from_le_bytes(*b)
}

#[inline(always)]
fn f16_le(b: &[u8; 2]) -> f32 {
    f16_to_f32(u16::from_le_bytes(*b))
}

#[inline(always)]
fn bf16_le(b: &[u8; 2]) -> f32 {
    bf16_to_f32(u16::from_le_bytes(*b))
}

pub(crate) fn dequantize_f32(src: &[u8], dst: &mut [f32]) {
    for (d, s) in dst.iter_mut().zip(src.as_chunks::<4>().0) {
        *d = f32_le(s);
    }
}

pub(crate) fn dequantize_f16(src: &[u8], dst: &mut [f32]) {
    for (d, s) in dst.iter_mut().zip(src.as_chunks::<2>().0) {
        *d = f16_le(s);
    }
}

pub(crate) fn dequantize_bf16(src: &[u8], dst: &mut [f32]) {
    for (d, s) in dst.iter_mut().zip(src.as_chunks::<2>().0) {
        *d = bf16_le(s);
    }
}

pub(crate) fn dequantize_i8(src: &[u8], dst: &mut [f32]) {
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = s as i8 as f32;
    }
}

pub(crate) fn dequantize_i16(src: &[u8], dst: &mut [f32]) {
    for (d, s) in dst.iter_mut().zip(src.as_chunks::<2>().0) {
        *d = i16::from_le_bytes(*s) as f32;
    }
}

pub(crate) fn dequantize_i32(src: &[u8], dst: &mut [f32]) {
    for (d, s) in dst.iter_mut().zip(src.as_chunks::<4>().0) {
        *d = i32::from_le_bytes(*s) as f32;
    }
}

pub(crate) fn dequantize_i64(src: &[u8], dst: &mut [f32]) {
    for (d, s) in dst.iter_mut().zip(src.as_chunks::<8>().0) {
        *d = i64::from_le_bytes(*s) as f32;
    }
}

pub(crate) fn dequantize_f64(src: &[u8], dst: &mut [f32]) {
    for (d, s) in dst.iter_mut().zip(src.as_chunks::<8>().0) {
        *d = f64::from_le_bytes(*s) as f32;
    }
}

pub(crate) fn quantize_f32(src: &[f32], dst: &mut [u8]) {
    for (d, s) in dst.as_chunks_mut::<4>().0.iter_mut().zip(src) {
        *d = s.to_le_bytes();
    }
}

pub(crate) fn quantize_f16(src: &[f32], dst: &mut [u8]) {
    for (d, &s) in dst.as_chunks_mut::<2>().0.iter_mut().zip(src) {
        *d = f32_to_f16(s).to_le_bytes();
    }
}

pub(crate) fn quantize_bf16(src: &[f32], dst: &mut [u8]) {
    for (d, &s) in dst.as_chunks_mut::<2>().0.iter_mut().zip(src) {
        *d = f32_to_bf16(s).to_le_bytes();
    }
}

/// Elements per step of the AVX-512 f32/f16 dot loops (4 registers x 16).
const STEP: usize = 64;

/// `ggml_vec_dot_f32` on AVX-512F: four 16-lane FMA accumulators over steps
/// of 64, reduced pairwise and with `_mm512_reduce_add_ps`; then the
/// `n % 64` leftovers are added to the f32 total in order. For the
/// leftovers we follow GCC's `-O3` code for `sumf += x[i]*y[i]`: it
/// vectorizes the products of whole groups of 4 (rounded `vmulps`, then
/// sequential adds) and contracts the last `n % 4` into scalar FMAs.
pub(crate) fn vec_dot_f32(w: &[u8], a: &[u8]) -> f32 {
    let (wsteps, wrest) = w.as_chunks::<{ 4 * STEP }>();
    let (asteps, arest) = a.as_chunks::<{ 4 * STEP }>();
    let mut sum = [[0f32; 16]; 4];
    for (ws, as_) in wsteps.iter().zip(asteps) {
        let wv = ws.as_chunks::<4>().0;
        let av = as_.as_chunks::<4>().0;
        for (j, acc) in sum.iter_mut().enumerate() {
            for (l, s) in acc.iter_mut().enumerate() {
                let i = 16 * j + l;
                *s = f32_le(&wv[i]).mul_add(f32_le(&av[i]), *s);
            }
        }
    }
    let mut sumf = reduce4x16(&mut sum);
    let wrest = wrest.as_chunks::<4>().0;
    let arest = arest.as_chunks::<4>().0;
    let split = wrest.len() / 4 * 4;
    for (x, y) in wrest[..split].iter().zip(&arest[..split]) {
        sumf += f32_le(x) * f32_le(y);
    }
    for (x, y) in wrest[split..].iter().zip(&arest[split..]) {
        sumf = f32_le(x).mul_add(f32_le(y), sumf);
    }
    sumf
}

/// `ggml_vec_dot_f16` on AVX-512F: like f32 after widening, but the total
/// and the leftovers are accumulated in f64.
pub(crate) fn vec_dot_f16(w: &[u8], a: &[u8]) -> f32 {
    let (wsteps, wrest) = w.as_chunks::<{ 2 * STEP }>();
    let (asteps, arest) = a.as_chunks::<{ 2 * STEP }>();
    let mut sum = [[0f32; 16]; 4];
    for (ws, as_) in wsteps.iter().zip(asteps) {
        let wv = ws.as_chunks::<2>().0;
        let av = as_.as_chunks::<2>().0;
        for (j, acc) in sum.iter_mut().enumerate() {
            for (l, s) in acc.iter_mut().enumerate() {
                let i = 16 * j + l;
                *s = f16_le(&wv[i]).mul_add(f16_le(&av[i]), *s);
            }
        }
    }
    let mut sumf = reduce4x16(&mut sum) as f64;
    for (x, y) in wrest
        .as_chunks::<2>()
        .0
        .iter()
        .zip(arest.as_chunks::<2>().0)
    {
        sumf += (f16_le(x) * f16_le(y)) as f64;
    }
    sumf as f32
}

/// `ggml_vec_dot_bf16` on AVX-512F without AVX512_BF16: two 16-lane
/// accumulators over steps of 32, each reduced separately into an f64 total.
/// (bf16 x bf16 products are exact in f32, so mul+add equals FMA here.)
pub(crate) fn vec_dot_bf16(w: &[u8], a: &[u8]) -> f32 {
    let (wsteps, wrest) = w.as_chunks::<64>();
    let (asteps, arest) = a.as_chunks::<64>();
    let mut c = [[0f32; 16]; 2];
    for (ws, as_) in wsteps.iter().zip(asteps) {
        let wv = ws.as_chunks::<2>().0;
        let av = as_.as_chunks::<2>().0;
        for (j, acc) in c.iter_mut().enumerate() {
            for (l, s) in acc.iter_mut().enumerate() {
                let i = 16 * j + l;
                *s += bf16_le(&wv[i]) * bf16_le(&av[i]);
            }
        }
    }
    let mut sumf = reduce16(&c[0]) as f64;
    sumf += reduce16(&c[1]) as f64;
    for (x, y) in wrest
        .as_chunks::<2>()
        .0
        .iter()
        .zip(arest.as_chunks::<2>().0)
    {
        sumf += (bf16_le(x) * bf16_le(y)) as f64;
    }
    sumf as f32
}

/// `GGML_F32x16_REDUCE` with 4 registers: (s0+s2) + (s1+s3), then the
/// 16-lane horizontal sum.
fn reduce4x16(sum: &mut [[f32; 16]; 4]) -> f32 {
    let [s0, s1, s2, s3] = sum;
    for (a, b) in s0.iter_mut().zip(s2.iter()) {
        *a += *b;
    }
    for (a, b) in s1.iter_mut().zip(s3.iter()) {
        *a += *b;
    }
    for (a, b) in s0.iter_mut().zip(s1.iter()) {
        *a += *b;
    }
    reduce16(s0)
}

// The element formats (one value per block): floats are weights and their own activation
// format; integers and f64 only dequantize.
block_format!("F32 values.", F32, "f32", 1, 4, F32, true, dequantize_f32, Some(quantize_f32), Some(quantize_f32), Some(vec_dot_f32));
block_format!("F16 values.", F16, "f16", 1, 2, F16, true, dequantize_f16, Some(quantize_f16), Some(quantize_f16), Some(vec_dot_f16));
block_format!("BF16 values.", BF16, "bf16", 1, 2, BF16, true, dequantize_bf16, Some(quantize_bf16), Some(quantize_bf16), Some(vec_dot_bf16));
block_format!("I8 values.", I8, "i8", 1, 1, I8, false, dequantize_i8, None, None, None);
block_format!("I16 values.", I16, "i16", 1, 2, I16, false, dequantize_i16, None, None, None);
block_format!("I32 values.", I32, "i32", 1, 4, I32, false, dequantize_i32, None, None, None);
block_format!("I64 values.", I64, "i64", 1, 8, I64, false, dequantize_i64, None, None, None);
block_format!("F64 values.", F64, "f64", 1, 8, F64, false, dequantize_f64, None, None, None);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::test_util::{f16_bits_to_f64, Rng};
    use crate::quant::{dequantize_row, quantize_row, quantize_row_ref, vec_dot, GgmlType};

    /// Nearest binary16 to `x` by exhaustive search over the finite values,
    /// ties to the even bit pattern; overflow per IEEE (>= 65520 -> inf).
    fn f16_nearest(x: f64) -> u16 {
        let sign = if x.is_sign_negative() { 0x8000 } else { 0 };
        let ax = x.abs();
        if ax >= 65520.0 {
            return sign | 0x7c00;
        }
        // binary search over the monotone positive encodings 0..=0x7bff
        let (mut lo, mut hi) = (0u16, 0x7bffu16);
        while hi - lo > 1 {
            let mid = (lo + hi) / 2;
            if f16_bits_to_f64(mid) <= ax {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        let (dl, dh) = (ax - f16_bits_to_f64(lo), f16_bits_to_f64(hi) - ax);
        let pick = if dl < dh {
            lo
        } else if dh < dl {
            hi
        } else if lo % 2 == 0 {
            lo
        } else {
            hi
        };
        sign | pick
    }

    #[test]
    fn f16_special_values() {
        assert_eq!(f32_to_f16(0.0), 0x0000);
        assert_eq!(f32_to_f16(-0.0), 0x8000);
        assert_eq!(f32_to_f16(1.0), 0x3c00);
        assert_eq!(f32_to_f16(-2.0), 0xc000);
        assert_eq!(f32_to_f16(65504.0), 0x7bff);
        assert_eq!(f32_to_f16(65519.99), 0x7bff);
        assert_eq!(f32_to_f16(65520.0), 0x7c00);
        assert_eq!(f32_to_f16(1e10), 0x7c00);
        assert_eq!(f32_to_f16(f32::INFINITY), 0x7c00);
        assert_eq!(f32_to_f16(f32::NEG_INFINITY), 0xfc00);
        assert_eq!(f32_to_f16(f32::NAN), 0x7e00);
        assert_eq!(f32_to_f16(-f32::NAN), 0xfe00);
        assert_eq!(f32_to_f16(f32::from_bits(0x7f80_0001)), 0x7e00); // sNaN
        assert_eq!(f32_to_f16(f32::MAX), 0x7c00);
        // smallest subnormal 2^-24, half of it ties to even (0), a bit more rounds up
        assert_eq!(f32_to_f16(2f32.powi(-24)), 0x0001);
        assert_eq!(f32_to_f16(2f32.powi(-25)), 0x0000);
        assert_eq!(f32_to_f16(-2f32.powi(-25)), 0x8000);
        assert_eq!(f32_to_f16(2f32.powi(-25) * 1.0001), 0x0001);
        assert_eq!(f32_to_f16(3.0 * 2f32.powi(-25)), 0x0002); // 1.5 ulp -> 2
        assert_eq!(f32_to_f16(f32::from_bits(1)), 0x0000); // f32 subnormal
                                                           // largest subnormal rounds up into the smallest normal
        assert_eq!(f32_to_f16(2f32.powi(-14) - 2f32.powi(-26)), 0x0400);
        assert_eq!(f32_to_f16(2f32.powi(-14)), 0x0400);
        // ties in the normal range: 1 + 2^-11 -> 1 (even), 1 + 3*2^-11 -> 1 + 2^-9
        assert_eq!(f32_to_f16(1.0 + 2f32.powi(-11)), 0x3c00);
        assert_eq!(f32_to_f16(1.0 + 3.0 * 2f32.powi(-11)), 0x3c02);

        assert_eq!(f16_to_f32(0x0000).to_bits(), 0);
        assert_eq!(f16_to_f32(0x8000).to_bits(), 0x8000_0000);
        assert_eq!(f16_to_f32(0x0001), 2f32.powi(-24));
        assert_eq!(f16_to_f32(0x03ff), 1023.0 * 2f32.powi(-24));
        assert_eq!(f16_to_f32(0x0400), 2f32.powi(-14));
        assert_eq!(f16_to_f32(0x7bff), 65504.0);
        assert_eq!(f16_to_f32(0x7c00), f32::INFINITY);
        assert_eq!(f16_to_f32(0xfc00), f32::NEG_INFINITY);
        assert!(f16_to_f32(0x7e00).is_nan());
        assert!(f16_to_f32(0x7c01).is_nan());
    }

    #[test]
    fn f16_exhaustive_against_f64_model() {
        for h in 0..=u16::MAX {
            let v = f16_to_f32(h);
            let exp = (h >> 10) & 0x1f;
            if exp == 31 && h & 0x3ff != 0 {
                assert!(v.is_nan());
                assert_eq!(f32_to_f16(v), (h & 0x8000) | 0x7e00);
                continue;
            }
            // decoding matches an independent f64 model and round-trips
            assert_eq!(v as f64, f16_bits_to_f64(h), "{h:#06x}");
            assert_eq!(f32_to_f16(v), h, "{h:#06x}");
        }
        // midpoints and their f32 neighbours for every pair of adjacent finite values
        for h in 0..0x7bffu16 {
            for sign in [1.0f64, -1.0] {
                let lo = f16_bits_to_f64(h);
                let hi = f16_bits_to_f64(h + 1);
                let mid = (lo + hi) / 2.0; // exact in f32 (12 significant bits)
                let m = (sign * mid) as f32;
                assert_eq!(m as f64, sign * mid);
                for x in [
                    m,
                    f32::from_bits(m.to_bits() - 1),
                    f32::from_bits(m.to_bits() + 1),
                ] {
                    assert_eq!(f32_to_f16(x), f16_nearest(x as f64), "{x:e}");
                }
            }
        }
        let mut rng = Rng::new(7);
        for _ in 0..200_000 {
            let x = f32::from_bits(rng.next_u32());
            if x.is_nan() {
                continue;
            }
            assert_eq!(f32_to_f16(x), f16_nearest(x as f64), "{x:e}");
        }
    }

    #[test]
    fn bf16_values() {
        assert_eq!(f32_to_bf16(0.0), 0x0000);
        assert_eq!(f32_to_bf16(-0.0), 0x8000);
        assert_eq!(f32_to_bf16(1.0), 0x3f80);
        assert_eq!(f32_to_bf16(f32::INFINITY), 0x7f80);
        assert_eq!(f32_to_bf16(f32::NEG_INFINITY), 0xff80);
        assert_eq!(f32_to_bf16(f32::MAX), 0x7f80); // rounds up to inf
        assert_eq!(f32_to_bf16(f32::from_bits(0x7f80_0001)), 0x7fc0); // sNaN quieted
        assert_eq!(f32_to_bf16(f32::from_bits(0xffc1_2345)), 0xffc1); // payload kept
                                                                      // ties: 1 + 2^-8 -> 1 (even), 1 + 3*2^-8 -> 1 + 2^-6
        assert_eq!(f32_to_bf16(1.0 + 2f32.powi(-8)), 0x3f80);
        assert_eq!(f32_to_bf16(1.0 + 3.0 * 2f32.powi(-8)), 0x3f82);
        assert_eq!(f32_to_bf16(1.0 + 2f32.powi(-8) + 2f32.powi(-20)), 0x3f81);
        // subnormals are rounded, not flushed
        assert_eq!(f32_to_bf16(f32::from_bits(0x0000_8000)), 0x0000);
        assert_eq!(f32_to_bf16(f32::from_bits(0x0001_8000)), 0x0002);
        assert_eq!(f32_to_bf16(f32::from_bits(0x0000_8001)), 0x0001);
        assert_eq!(bf16_to_f32(0x3f80), 1.0);
        assert_eq!(bf16_to_f32(0x8000).to_bits(), 0x8000_0000);
        assert!(bf16_to_f32(0x7fc0).is_nan());
        // every bf16 round-trips; random f32 round to the nearest of the two candidates
        for h in 0..=u16::MAX {
            let v = bf16_to_f32(h);
            if !v.is_nan() {
                assert_eq!(f32_to_bf16(v), h);
            }
        }
        let mut rng = Rng::new(3);
        for _ in 0..100_000 {
            let x = f32::from_bits(rng.next_u32());
            if !x.is_finite() {
                continue;
            }
            let b = f32_to_bf16(x);
            if bf16_to_f32(b).is_infinite() {
                // overflow only from at or above max + half an ulp
                assert!(x.to_bits() & 0x7fff_ffff >= 0x7f7f_8000, "{x:e}");
                continue;
            }
            let lo = x.to_bits() >> 16;
            let cand = [lo as u16, (lo + 1) as u16];
            let err = |c: u16| (bf16_to_f32(c) as f64 - x as f64).abs();
            assert!(cand.contains(&b));
            let other = if b == cand[0] { cand[1] } else { cand[0] };
            if bf16_to_f32(other).is_finite() {
                assert!(err(b) <= err(other), "{x:e}");
            }
        }
    }

    #[test]
    fn plain_rows_roundtrip() {
        let mut rng = Rng::new(11);
        let x: Vec<f32> = (0..77).map(|_| rng.normal() * 3.0).collect();
        for (ty, tol) in [
            (GgmlType::F32, 0.0),
            (GgmlType::F16, 1.0 / 2048.0),
            (GgmlType::BF16, 1.0 / 256.0),
        ] {
            let mut buf = vec![0u8; ty.row_bytes(x.len()).unwrap()];
            quantize_row(ty, &x, &mut buf);
            let mut buf_ref = vec![0u8; buf.len()];
            quantize_row_ref(ty, &x, &mut buf_ref);
            assert_eq!(buf, buf_ref);
            let mut back = vec![0f32; x.len()];
            dequantize_row(ty, &buf, &mut back);
            for (a, b) in x.iter().zip(&back) {
                assert!((a - b).abs() <= tol * a.abs(), "{} {a} {b}", ty.name());
            }
        }
        let ints: Vec<u8> = [-3i32, 7, i32::MIN]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let mut out = [0f32; 3];
        dequantize_row(GgmlType::I32, &ints, &mut out);
        assert_eq!(out, [-3.0, 7.0, -2147483648.0]);
        let mut out = [0f32; 2];
        dequantize_row(GgmlType::I8, &[0xff, 5], &mut out);
        assert_eq!(out, [-1.0, 5.0]);
    }

    /// vec_dot against an f64 dot of the decoded rows, for lengths that
    /// exercise the 64-wide main loop and the leftovers.
    #[test]
    fn plain_vec_dot() {
        let mut rng = Rng::new(5);
        for ty in [GgmlType::F32, GgmlType::F16, GgmlType::BF16] {
            for n in [1usize, 31, 64, 65, 200, 1024, 1000] {
                let w: Vec<f32> = (0..n).map(|_| rng.normal()).collect();
                let x: Vec<f32> = (0..n).map(|_| rng.normal()).collect();
                let mut wb = vec![0u8; ty.row_bytes(n).unwrap()];
                let mut xb = vec![0u8; ty.row_bytes(n).unwrap()];
                quantize_row(ty, &w, &mut wb);
                quantize_row(ty, &x, &mut xb);
                let mut wd = vec![0f32; n];
                let mut xd = vec![0f32; n];
                dequantize_row(ty, &wb, &mut wd);
                dequantize_row(ty, &xb, &mut xd);
                let exact: f64 = wd.iter().zip(&xd).map(|(a, b)| *a as f64 * *b as f64).sum();
                let mag: f64 = wd
                    .iter()
                    .zip(&xd)
                    .map(|(a, b)| (*a as f64 * *b as f64).abs())
                    .sum();
                let got = vec_dot(ty, n, &wb, &xb) as f64;
                assert!(
                    (got - exact).abs() <= 1e-5 * mag,
                    "{} n={n} {got} {exact}",
                    ty.name()
                );
            }
        }
    }

    /// The reduction order is observable: with values chosen so that f32
    /// addition is not associative, the result must equal the documented tree.
    #[test]
    fn f32_reduction_order() {
        let n = 64 + 3;
        let mut w = vec![0f32; n];
        let x = vec![1f32; n];
        w[0] = 1.0e8; // lane 0 of register 0
        w[32] = -1.0e8; // lane 0 of register 2, cancels in the (s0+s2) step
        w[16] = 3.0; // register 1
        w[63] = 0.75; // register 3, lane 15
        w[64] = 0.5; // leftovers
        w[65] = 0.25;
        w[66] = 1.0e-8;
        let mut wb = vec![0u8; 4 * n];
        let mut xb = vec![0u8; 4 * n];
        quantize_row(GgmlType::F32, &w, &mut wb);
        quantize_row(GgmlType::F32, &x, &mut xb);
        // (1e8 + -1e8) + 3 + 0.75, then + 0.5 + 0.25 + 1e-8 (lost in f32)
        assert_eq!(vec_dot(GgmlType::F32, n, &wb, &xb), 4.5);
        // leftovers: whole groups of 4 use rounded products, the rest FMA
        let n = 64 + 5;
        let e = 2f32.powi(-12);
        let mut w = vec![0f32; n];
        let mut x = vec![0f32; n];
        w[0] = -1.0; // main loop: total -1
        x[0] = 1.0;
        for i in [64, 68] {
            w[i] = 1.0 + e; // (1+e)^2 = 1 + 2e + e^2: e^2 is lost unless fused
            x[i] = 1.0 + e;
        }
        let mut wb = vec![0u8; 4 * n];
        let mut xb = vec![0u8; 4 * n];
        quantize_row(GgmlType::F32, &w, &mut wb);
        quantize_row(GgmlType::F32, &x, &mut xb);
        // element 64 (in the group of 4): -1 + round((1+e)^2) = 2e (fused: 2e + e^2);
        // element 68 (the tail): 2e + (1 + 2e + e^2) rounds to 1 + 4e
        assert_eq!(vec_dot(GgmlType::F32, n, &wb, &xb), 1.0 + 4.0 * e);
        // a lone tail element is fused: -(1 + 2e) + (1+e)^2 = e^2 exactly
        let w = [-(1.0 + 2.0 * e)]
            .into_iter()
            .chain(std::iter::repeat_n(0.0, 63))
            .chain([1.0 + e]);
        let x = [1.0f32]
            .into_iter()
            .chain(std::iter::repeat_n(0.0, 63))
            .chain([1.0 + e]);
        let (w, x): (Vec<f32>, Vec<f32>) = (w.collect(), x.collect());
        let mut wb = vec![0u8; 4 * 65];
        let mut xb = vec![0u8; 4 * 65];
        quantize_row(GgmlType::F32, &w, &mut wb);
        quantize_row(GgmlType::F32, &x, &mut xb);
        assert_eq!(vec_dot(GgmlType::F32, 65, &wb, &xb), e * e);
        // A sequential f32 sum would lose the 3.0: 1e8 + 3 = 1e8.
        let seq = w.iter().fold(0f32, |s, v| s + v);
        assert_ne!(seq, 4.5);
    }
}

/// Little-endian F16 row bytes as u16 values (rows that start at even addresses, as every
/// row of the KV cache's page-aligned buffers does).
pub fn f16_slice(bytes: &[u8]) -> &[u16] {
    // SAFETY: any two bytes are a valid u16; align_to yields only the aligned middle, and the
    // assertion requires that to be the whole slice.
    let (pre, mid, post) = unsafe { bytes.align_to::<u16>() };
    assert!(pre.is_empty() && post.is_empty(), "an F16 row at an odd address or of odd length");
    mid
}

/// F16 values as their little-endian bytes.
pub fn f16_bytes(h: &[u16]) -> &[u8] {
    // SAFETY: u16 has no padding and every byte is initialized; the byte slice covers exactly
    // the memory of `h`, for its lifetime.
    unsafe { std::slice::from_raw_parts(h.as_ptr().cast::<u8>(), std::mem::size_of_val(h)) }
}
