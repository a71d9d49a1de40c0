//! AVX2 + FMA + F16C element-wise math: `exp` and what is built on it (SiLU gating, the
//! exponentials of a softmax block), RMSNorm's sum of squares and scaling, and RoPE rotations.
//!
//! `exp` is not bit-identical to libm's `expf` (the scalar reference): it is within 2 ulp of the
//! exact value over the whole f32 range (denormal results within 2 of the smallest denormal),
//! +inf → +inf, -inf → 0, NaN → NaN; the tests measure that against f64.
//!
//! # Safety (all `unsafe fn` here)
//! The caller must have checked that the CPU supports AVX2, FMA and F16C.

#![allow(clippy::missing_safety_doc)]

use std::arch::x86_64::*;

/// e^x for 8 lanes: x = n·ln2 + r with |r| ≤ ln2/2 (ln2 split in two for an exact r), e^r by
/// its degree-7 Taylor polynomial (truncation error < 6e-9 relative), times 2^n applied in two
/// halves so that results below 2^-126 (denormals) and above 2^127 (overflow to +inf) come out
/// right without special cases.
#[inline(always)]
pub unsafe fn exp8(x: __m256) -> __m256 {
    // SAFETY: register-only AVX2/FMA intrinsics.
    unsafe {
        let nan = _mm256_cmp_ps::<_CMP_UNORD_Q>(x, x);
        // e^-104 is below half the smallest denormal and e^89 above f32::MAX
        let xc = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-104.0)), _mm256_set1_ps(89.0));
        let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(xc, _mm256_set1_ps(std::f32::consts::LOG2_E)));
        let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693_145_75), xc);
        let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428_606_8e-6), r);
        let mut p = _mm256_set1_ps(1.0 / 5040.0);
        for c in [1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0] {
            p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
        }
        // 2^n = 2^h · 2^(n-h), each factor a normal float (|n| ≤ 151)
        let ni = _mm256_cvtps_epi32(n);
        let h = _mm256_srai_epi32::<1>(ni);
        let pow2 = |k: __m256i| _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(k, _mm256_set1_epi32(127))));
        let e = _mm256_mul_ps(_mm256_mul_ps(p, pow2(h)), pow2(_mm256_sub_epi32(ni, h)));
        _mm256_blendv_ps(e, x, nan)
    }
}

/// x[i] = e^(x[i] - shift).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn exp_shifted(x: &mut [f32], shift: f32) {
    // SAFETY: chunk i touches x[8i..8i+8], inside the slice.
    unsafe {
        let n8 = x.len() / 8;
        let s = _mm256_set1_ps(shift);
        for i in 0..n8 {
            let p = x.as_mut_ptr().add(8 * i);
            _mm256_storeu_ps(p, exp8(_mm256_sub_ps(_mm256_loadu_ps(p), s)));
        }
        let tail = x.len() - 8 * n8;
        if tail > 0 {
            let mut t = [0f32; 8];
            t[..tail].copy_from_slice(&x[8 * n8..]);
            let mut v = [0f32; 8];
            _mm256_storeu_ps(v.as_mut_ptr(), exp8(_mm256_sub_ps(_mm256_loadu_ps(t.as_ptr()), s)));
            x[8 * n8..].copy_from_slice(&v[..tail]);
        }
    }
}

/// gate[i] = gate[i] / (1 + e^-gate[i]) · up[i] (SiLU-gated unit, the reference's operation order).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn swiglu(gate: &mut [f32], up: &[f32]) {
    let n = gate.len().min(up.len());
    let n8 = n / 8;
    // SAFETY: chunk i touches gate[8i..8i+8] and up[8i..8i+8], inside both slices.
    unsafe {
        let one = _mm256_set1_ps(1.0);
        for i in 0..n8 {
            let g = _mm256_loadu_ps(gate.as_ptr().add(8 * i));
            let u = _mm256_loadu_ps(up.as_ptr().add(8 * i));
            let e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));
            _mm256_storeu_ps(gate.as_mut_ptr().add(8 * i), _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), u));
        }
    }
    for i in 8 * n8..n {
        gate[i] = gate[i] / (1.0 + (-gate[i]).exp()) * up[i];
    }
}

/// Σ x[i]² with each square rounded to f32 and summed in f64, as ggml's RMSNorm does; the
/// f64 sum over 8 lanes (two 4-lane registers), then the lanes pairwise: within an f64 rounding
/// of the scalar order.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn sum_squares_f64(x: &[f32]) -> f64 {
    let n8 = x.len() / 8;
    // SAFETY: chunk i reads x[8i..8i+8], inside the slice.
    let mut sum = unsafe {
        let (mut a, mut b) = (_mm256_setzero_pd(), _mm256_setzero_pd());
        for i in 0..n8 {
            let v = _mm256_loadu_ps(x.as_ptr().add(8 * i));
            let sq = _mm256_mul_ps(v, v);
            a = _mm256_add_pd(a, _mm256_cvtps_pd(_mm256_castps256_ps128(sq)));
            b = _mm256_add_pd(b, _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(sq)));
        }
        let mut l = [0f64; 4];
        _mm256_storeu_pd(l.as_mut_ptr(), _mm256_add_pd(a, b));
        (l[0] + l[2]) + (l[1] + l[3])
    };
    for &v in &x[8 * n8..] {
        sum += (v * v) as f64;
    }
    sum
}

/// out[i] = (x[i] · scale) · w[i], two f32 multiplications as in the scalar code (the same bits).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn scale_mul(x: &[f32], scale: f32, w: &[f32], out: &mut [f32]) {
    let n = x.len().min(w.len()).min(out.len());
    let n8 = n / 8;
    // SAFETY: chunk i touches elements 8i..8i+8 < n of the three slices.
    unsafe {
        let sv = _mm256_set1_ps(scale);
        for i in 0..n8 {
            let v = _mm256_mul_ps(_mm256_loadu_ps(x.as_ptr().add(8 * i)), sv);
            _mm256_storeu_ps(out.as_mut_ptr().add(8 * i), _mm256_mul_ps(v, _mm256_loadu_ps(w.as_ptr().add(8 * i))));
        }
    }
    for i in 8 * n8..n {
        out[i] = (x[i] * scale) * w[i];
    }
}

/// RoPE of adjacent pairs (x[2i], x[2i+1]) by the (cos, sin) pairs of `cache`, i < n_dims / 2:
/// (a·c − b·s, a·s + b·c), products and sums rounded as in the scalar code (the same bits).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn rope_pairs(n_dims: usize, cache: &[f32], x: &mut [f32]) {
    assert!(cache.len() >= n_dims && x.len() >= n_dims);
    let n8 = n_dims / 8;
    // SAFETY: chunk i touches x[8i..8i+8] and cache[8i..8i+8], inside both (asserted).
    unsafe {
        for i in 0..n8 {
            let v = _mm256_loadu_ps(x.as_ptr().add(8 * i));
            let cs = _mm256_loadu_ps(cache.as_ptr().add(8 * i));
            let swapped = _mm256_permute_ps::<0b10_11_00_01>(v);
            // even lanes a·c − b·s, odd lanes b·c + a·s
            let r = _mm256_addsub_ps(_mm256_mul_ps(v, _mm256_moveldup_ps(cs)), _mm256_mul_ps(swapped, _mm256_movehdup_ps(cs)));
            _mm256_storeu_ps(x.as_mut_ptr().add(8 * i), r);
        }
    }
    for i0 in (8 * n8..n_dims).step_by(2) {
        let (c, s) = (cache[i0], cache[i0 + 1]);
        let (a, b) = (x[i0], x[i0 + 1]);
        x[i0] = a * c - b * s;
        x[i0 + 1] = a * s + b * c;
    }
}

/// RoPE of the pairs (x[i], x[i + n_dims/2]) (NEOX) by the (cos, sin) pairs of `cache`, with
/// the scalar code's roundings (the same bits).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn rope_halves(n_dims: usize, cache: &[f32], x: &mut [f32]) {
    assert!(cache.len() >= n_dims && x.len() >= n_dims);
    let half = n_dims / 2;
    let n8 = half / 8;
    // SAFETY: chunk i touches x[8i..8i+8], x[half+8i..half+8i+8] and cache[16i..16i+16], inside
    // both slices (asserted).
    unsafe {
        for i in 0..n8 {
            let lo = _mm256_loadu_ps(cache.as_ptr().add(16 * i));
            let hi = _mm256_loadu_ps(cache.as_ptr().add(16 * i + 8));
            // [c0 c1 c4 c5 | c2 c3 c6 c7] → c0..c7, and the same for the sines
            let c = _mm256_castpd_ps(_mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(_mm256_shuffle_ps::<0b10_00_10_00>(lo, hi))));
            let s = _mm256_castpd_ps(_mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(_mm256_shuffle_ps::<0b11_01_11_01>(lo, hi))));
            let pa = x.as_mut_ptr().add(8 * i);
            let pb = x.as_mut_ptr().add(half + 8 * i);
            let (a, b) = (_mm256_loadu_ps(pa), _mm256_loadu_ps(pb));
            _mm256_storeu_ps(pa, _mm256_sub_ps(_mm256_mul_ps(a, c), _mm256_mul_ps(b, s)));
            _mm256_storeu_ps(pb, _mm256_add_ps(_mm256_mul_ps(a, s), _mm256_mul_ps(b, c)));
        }
    }
    for i in 8 * n8..half {
        let (c, s) = (cache[2 * i], cache[2 * i + 1]);
        let (a, b) = (x[i], x[i + half]);
        x[i] = a * c - b * s;
        x[i + half] = a * s + b * c;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn available() -> bool {
        !super::super::tested_levels(&[super::super::Level::Avx2]).is_empty()
    }

    /// Distance in units of the last place at the exact value (for denormal results: in units
    /// of the smallest denormal).
    fn ulps(got: f32, exact: f64) -> f64 {
        let e = exact.abs();
        let spacing = if e < f32::MIN_POSITIVE as f64 {
            f32::from_bits(1) as f64
        } else {
            let f = e as f32;
            (f32::from_bits(f.to_bits() + 1) - f) as f64
        };
        (got as f64 - exact).abs() / spacing
    }

    #[test]
    fn exp_within_two_ulp_of_f64() {
        if !available() {
            return;
        }
        let mut xs: Vec<f32> = (-1_100_000..=950_000).map(|i| i as f32 * 1e-4).collect();
        xs.extend([-103.9, -103.2, -100.0, -87.4, -87.3, -0.0, 0.0, 1e-30, -1e-30, 88.7, 88.72, 88.73]);
        let mut got = xs.clone();
        // SAFETY: the AVX2 level was detected.
        unsafe { exp_shifted(&mut got, 0.0) };
        let mut worst = 0f64;
        for (&x, &g) in xs.iter().zip(&got) {
            let exact = (x as f64).exp();
            if exact > f32::MAX as f64 {
                assert_eq!(g, f32::INFINITY, "exp({x})");
                continue;
            }
            let u = ulps(g, exact);
            worst = worst.max(u);
            assert!(u <= 2.0, "exp({x}) = {g}, exact {exact}: {u} ulp");
        }
        eprintln!("worst exp error {worst:.3} ulp");
        let mut special = [f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 200.0, -200.0, 1.0, 2.0, 3.0];
        // SAFETY: as above.
        unsafe { exp_shifted(&mut special, 0.0) };
        assert_eq!(special[0], f32::INFINITY);
        assert_eq!(special[1], 0.0);
        assert!(special[2].is_nan());
        assert_eq!(special[3], f32::INFINITY);
        assert_eq!(special[4], 0.0);
    }

    #[test]
    fn swiglu_matches_f64() {
        if !available() {
            return;
        }
        let gate: Vec<f32> = (0..203).map(|i| (i as f32 * 0.37).sin() * 12.0).collect();
        let up: Vec<f32> = (0..203).map(|i| (i as f32 * 0.11).cos()).collect();
        let mut got = gate.clone();
        // SAFETY: the AVX2 level was detected.
        unsafe { swiglu(&mut got, &up) };
        for ((&g, &u), &r) in gate.iter().zip(&up).zip(&got) {
            let exact = (g as f64 / (1.0 + (-g as f64).exp())) * u as f64;
            assert!((r as f64 - exact).abs() <= 4e-7 * exact.abs() + 1e-30, "swiglu({g}, {u}) = {r}, exact {exact}");
        }
    }
}
