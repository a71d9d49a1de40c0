//! AVX2 + FMA + F16C element-wise math: `exp` and what is built on it (SiLU gating, the
//! exponentials of a softmax block), RMSNorm's sum of squares and scaling, and RoPE rotations.
//!
//! `expf8` is libm's `expf` bit for bit and `ggml_v_expf8` ggml's vector `expf` bit for bit (see
//! each). `exp8` is not bit-identical to libm's `expf` (the scalar reference): it is within 2 ulp of the
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

/// glibc's `expf` (sysdeps/ieee754/flt-32/e_expf.c, the FMA build its x86_64 ifunc picks on
/// every CPU with AVX2): x·32/ln2 = k + r in double precision (the product fused into both the
/// rounding shift and r), 2^(k/32) from a 32-entry table, 2^(r/32) by a cubic, rounded once to
/// f32. The same bits as glibc's `expf` on every input (compared on every f32 from −104 to 89;
/// the kernel tests check every third); ggml's flash attention calls `expf` for each cell's
/// weight.
pub(crate) const EXPF_TAB: [u64; 32] = [
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51,
    0x3fef72b83c7d517b, 0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1,
    0x3fef06fe0a31b715, 0x3feef1a7373aa9cb, 0x3feedea64c123422, 0x3feece086061892d,
    0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429, 0x3feea47eb03a5585,
    0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13,
    0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d,
    0x3feee89f995ad3ad, 0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069,
    0x3fef5818dcfba487, 0x3fef7c97337b9b5f, 0x3fefa4afa2a490da, 0x3fefd0765b6e4540,
];
/// 32/ln2, the rounding shift 1.5·2^52 and the cubic's coefficients (glibc's `__exp2f_data`).
const EXPF_INVLN2N: f64 = f64::from_bits(0x40471547652b82fe);
const EXPF_SHIFT: f64 = f64::from_bits(0x4338000000000000);
const EXPF_C: [f64; 3] = [f64::from_bits(0x3ebc6af84b912394), f64::from_bits(0x3f2ebfce50fac4f3), f64::from_bits(0x3f962e42ff0c52d6)];
/// Below this e^x rounds to 0; above the other bound to +inf (glibc's thresholds).
const EXPF_LO: f32 = -103.972_08; // -0x1.9fe368p6
const EXPF_HI: f32 = 88.722_83; // 0x1.62e42ep6

/// [`EXPF_TAB`]'s algorithm for 4 lanes in double precision (no special cases: see expf8).
#[inline(always)]
unsafe fn expf_core4(x: __m128) -> __m128 {
    // SAFETY: register-only AVX2/FMA intrinsics; the gather reads EXPF_TAB[ki & 31].
    unsafe {
        let xd = _mm256_cvtps_pd(x);
        let inv = _mm256_set1_pd(EXPF_INVLN2N);
        let kd0 = _mm256_fmadd_pd(inv, xd, _mm256_set1_pd(EXPF_SHIFT));
        let ki = _mm256_castpd_si256(kd0);
        let kd = _mm256_sub_pd(kd0, _mm256_set1_pd(EXPF_SHIFT));
        let r = _mm256_fmsub_pd(inv, xd, kd);
        let idx = _mm256_and_si256(ki, _mm256_set1_epi64x(31));
        let t = _mm256_i64gather_epi64::<8>(EXPF_TAB.as_ptr() as *const i64, idx);
        let s = _mm256_castsi256_pd(_mm256_add_epi64(t, _mm256_slli_epi64::<47>(ki)));
        let z = _mm256_fmadd_pd(_mm256_set1_pd(EXPF_C[0]), r, _mm256_set1_pd(EXPF_C[1]));
        let r2 = _mm256_mul_pd(r, r);
        let y = _mm256_fmadd_pd(_mm256_set1_pd(EXPF_C[2]), r, _mm256_set1_pd(1.0));
        let y = _mm256_fmadd_pd(z, r2, y);
        _mm256_cvtpd_ps(_mm256_mul_pd(y, s))
    }
}

/// libm's `expf` on 8 lanes, bit for bit (see [`EXPF_TAB`]): below −103.97 (and −inf) 0, above
/// 88.72 (and +inf) +inf, NaN stays NaN.
#[inline(always)]
pub unsafe fn expf8(x: __m256) -> __m256 {
    // SAFETY: register-only AVX2/FMA intrinsics.
    unsafe {
        let lo = _mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_set1_ps(EXPF_LO));
        let hi = _mm256_cmp_ps::<_CMP_GT_OQ>(x, _mm256_set1_ps(EXPF_HI));
        let nan = _mm256_cmp_ps::<_CMP_UNORD_Q>(x, x);
        // the core on a clamped input (no overflow of the table index arithmetic)
        let xc = _mm256_blendv_ps(x, _mm256_setzero_ps(), _mm256_or_ps(_mm256_or_ps(lo, hi), nan));
        let e = _mm256_set_m128(expf_core4(_mm256_extractf128_ps::<1>(xc)), expf_core4(_mm256_castps256_ps128(xc)));
        let e = _mm256_andnot_ps(lo, e);
        let e = _mm256_blendv_ps(e, _mm256_set1_ps(f32::INFINITY), hi);
        _mm256_blendv_ps(e, _mm256_add_ps(x, x), nan)
    }
}

/// x[i] = libm's expf(x[i]), bit for bit.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn expf_libm(x: &mut [f32]) {
    // SAFETY: chunk i touches x[8i..8i+8], inside the slice; the tail goes through a copy.
    unsafe {
        let n8 = x.len() / 8;
        for i in 0..n8 {
            let p = x.as_mut_ptr().add(8 * i);
            _mm256_storeu_ps(p, expf8(_mm256_loadu_ps(p)));
        }
        let tail = x.len() - 8 * n8;
        if tail > 0 {
            let mut t = [0f32; 8];
            t[..tail].copy_from_slice(&x[8 * n8..]);
            _mm256_storeu_ps(t.as_mut_ptr(), expf8(_mm256_loadu_ps(t.as_ptr())));
            x[8 * n8..].copy_from_slice(&t[..tail]);
        }
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

/// `crate::kernels::ggml_v_expf` on 8 lanes (ggml's AVX-512 `ggml_v_expf`, the same bits):
/// its fused multiply-adds in the same order, `scalef` as two exact-then-one-rounding scalings.
#[inline(always)]
pub unsafe fn ggml_v_expf8(x: __m256) -> __m256 {
    // SAFETY: register-only AVX2/FMA intrinsics.
    unsafe {
        let c = |b: u32| _mm256_set1_ps(f32::from_bits(b));
        let r = c(0x4b40_0000);
        let z = _mm256_fmadd_ps(x, c(0x3fb8_aa3b), r);
        let n = _mm256_sub_ps(z, r);
        let b = _mm256_fnmadd_ps(n, c(0x35bf_be8e), _mm256_fnmadd_ps(n, c(0x3f31_7200), x));
        let u = _mm256_mul_ps(b, b);
        let j = _mm256_fmadd_ps(
            _mm256_fmadd_ps(_mm256_fmadd_ps(c(0x3c07_2010), b, c(0x3d2b_9f17)), u, _mm256_fmadd_ps(c(0x3e2a_af33), b, c(0x3eff_fedb))),
            u,
            _mm256_fmadd_ps(c(0x3f7f_fff6), b, _mm256_set1_ps(1.0)),
        );
        // j · 2^n: the exponent split so that the first scaling is exact
        let ni = _mm256_cvtps_epi32(_mm256_max_ps(_mm256_min_ps(n, _mm256_set1_ps(192.0)), _mm256_set1_ps(-192.0)));
        let e1 = _mm256_max_epi32(_mm256_min_epi32(ni, _mm256_set1_epi32(127)), _mm256_set1_epi32(-126));
        let pow2 = |e: __m256i| _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(e, _mm256_set1_epi32(127))));
        let res = _mm256_mul_ps(_mm256_mul_ps(j, pow2(_mm256_sub_epi32(ni, e1))), pow2(e1));
        let big = _mm256_cmp_ps::<_CMP_GT_OQ>(_mm256_andnot_ps(_mm256_set1_ps(-0.0), n), _mm256_set1_ps(192.0));
        let alt = _mm256_blendv_ps(_mm256_set1_ps(f32::INFINITY), _mm256_setzero_ps(), _mm256_cmp_ps::<_CMP_LE_OQ>(n, _mm256_setzero_ps()));
        _mm256_blendv_ps(res, alt, big)
    }
}

/// x[i] = `ggml_v_expf8`(x[i] − shift) over a multiple of 8 values.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn ggml_v_expf_shifted(x: &mut [f32], shift: f32) {
    assert!(x.len() % 8 == 0);
    // SAFETY: chunk i covers elements 8i..8i + 8 of x.
    unsafe {
        let s = _mm256_set1_ps(shift);
        for i in 0..x.len() / 8 {
            let p = x.as_mut_ptr().add(8 * i);
            _mm256_storeu_ps(p, ggml_v_expf8(_mm256_sub_ps(_mm256_loadu_ps(p), s)));
        }
    }
}

/// `crate::kernels::swiglu` on rows of `row` elements (the same bits): per row, 16 elements at a
/// time (two 8-lane halves) gate / (1 + v_expf(0 − gate)) · up, the last `row % 16` with libm.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn swiglu(gate: &mut [f32], up: &[f32], row: usize) {
    let n = gate.len().min(up.len());
    let body = row & !15;
    let mut start = 0;
    while start + row <= n {
        // SAFETY: chunk i of this row touches gate/up[start + 8i..start + 8i + 8], inside both.
        unsafe {
            let one = _mm256_set1_ps(1.0);
            for i in 0..body / 8 {
                let at = start + 8 * i;
                let g = _mm256_loadu_ps(gate.as_ptr().add(at));
                let u = _mm256_loadu_ps(up.as_ptr().add(at));
                let e = ggml_v_expf8(_mm256_sub_ps(_mm256_setzero_ps(), g));
                _mm256_storeu_ps(gate.as_mut_ptr().add(at), _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), u));
            }
        }
        for i in start + body..start + row {
            gate[i] = gate[i] / (1.0 + (-gate[i]).exp()) * up[i];
        }
        start += row;
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

/// f[i] = fma(f[i], scale_f, a[i] · scale_a) (the scalar code's `mul_add`, the same bits).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn rescale_add(f: &mut [f32], scale_f: f32, a: &[f32], scale_a: f32) {
    let n = f.len().min(a.len());
    let n8 = n / 8;
    // SAFETY: chunk i touches elements 8i..8i+8 < n of both slices.
    unsafe {
        let (sf, sa) = (_mm256_set1_ps(scale_f), _mm256_set1_ps(scale_a));
        for i in 0..n8 {
            let p = f.as_mut_ptr().add(8 * i);
            let av = _mm256_mul_ps(_mm256_loadu_ps(a.as_ptr().add(8 * i)), sa);
            _mm256_storeu_ps(p, _mm256_fmadd_ps(_mm256_loadu_ps(p), sf, av));
        }
    }
    for i in 8 * n8..n {
        f[i] = f[i].mul_add(scale_f, a[i] * scale_a);
    }
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
/// (fma(a, c, −b·s), fma(a, s, b·c)) as GCC contracts ggml's rotate_pairs (the scalar code's
/// bits).
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
            // even lanes fma(a, c, −b·s), odd lanes fma(a, s, b·c)
            let (c, s) = (_mm256_moveldup_ps(cs), _mm256_movehdup_ps(cs));
            let even = _mm256_fmsub_ps(v, c, _mm256_mul_ps(swapped, s));
            let odd = _mm256_fmadd_ps(swapped, s, _mm256_mul_ps(v, c));
            _mm256_storeu_ps(x.as_mut_ptr().add(8 * i), _mm256_blend_ps::<0b1010_1010>(even, odd));
        }
    }
    for i0 in (8 * n8..n_dims).step_by(2) {
        let (c, s) = (cache[i0], cache[i0 + 1]);
        let (a, b) = (x[i0], x[i0 + 1]);
        x[i0] = a.mul_add(c, -(b * s));
        x[i0 + 1] = a.mul_add(s, b * c);
    }
}

/// RoPE of the pairs (x[i], x[i + n_dims/2]) (NEOX) by the (cos, sin) pairs of `cache`, with
/// the scalar code's roundings (the same bits: ggml's fused ones).
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
            _mm256_storeu_ps(pa, _mm256_fmsub_ps(a, c, _mm256_mul_ps(b, s)));
            _mm256_storeu_ps(pb, _mm256_fmadd_ps(a, s, _mm256_mul_ps(b, c)));
        }
    }
    for i in 8 * n8..half {
        let (c, s) = (cache[2 * i], cache[2 * i + 1]);
        let (a, b) = (x[i], x[i + half]);
        x[i] = a.mul_add(c, -(b * s));
        x[i + half] = a.mul_add(s, b * c);
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

    /// expf_libm equals libm's expf on every 3rd f32 from −104 to 89 (about 7·10⁸ inputs; every
    /// 21st in debug builds; all of them once when this was written), on ±0, ±inf, NaN and far
    /// outside the range.
    #[test]
    fn expf_libm_is_libm_bit_for_bit() {
        if !available() {
            return;
        }
        let step = if cfg!(debug_assertions) { 21 } else { 3 };
        let mut buf = Vec::with_capacity(4096);
        let check = |buf: &mut Vec<f32>| {
            let xs = buf.clone();
            // SAFETY: the AVX2 level was detected.
            unsafe { expf_libm(buf) };
            for (&x, &g) in xs.iter().zip(buf.iter()) {
                let want = std::hint::black_box(x).exp();
                assert!(g.to_bits() == want.to_bits() || (g.is_nan() && want.is_nan()), "expf({x:e}) = {g:e}, libm {want:e}");
            }
            buf.clear();
        };
        // negative floats from -104 up to -0, then positive from +0 to 89, by bit pattern
        let ranges = [((-104f32).to_bits(), 0x8000_0000u32, true), (0u32, 89f32.to_bits(), false)];
        for (from, to, down) in ranges {
            let mut b = from;
            loop {
                buf.push(f32::from_bits(b));
                if buf.len() == 4093 {
                    check(&mut buf);
                }
                if b == to {
                    break;
                }
                b = if down { b.saturating_sub(step).max(to) } else { b.saturating_add(step).min(to) };
            }
        }
        buf.extend([f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 1e30, -1e30, -103.972_08, -103.972_09, 88.722_83, 88.722_84]);
        check(&mut buf);
    }

    /// rescale_add is the scalar `mul_add` bit for bit (a whole-vector part and a tail; values
    /// whose unfused rounding would differ).
    #[test]
    fn rescale_add_is_the_scalar_fma() {
        if !available() {
            return;
        }
        let a: Vec<f32> = (0..203).map(|i| (i as f32 * 0.37).sin() * 3.1).collect();
        let f0: Vec<f32> = (0..203).map(|i| (i as f32 * 0.13).cos() * 1.7 + 1e-3).collect();
        let (sf, sa) = (0.812_345_7f32, 1.000_001_2f32);
        let mut got = f0.clone();
        // SAFETY: the AVX2 level was detected.
        unsafe { rescale_add(&mut got, sf, &a, sa) };
        let mut fused_differs = false;
        for i in 0..203 {
            let want = f0[i].mul_add(sf, a[i] * sa);
            assert_eq!(got[i].to_bits(), want.to_bits(), "element {i}");
            fused_differs |= want != f0[i] * sf + a[i] * sa;
        }
        assert!(fused_differs, "the inputs must tell a fused multiply-add from an unfused one");
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
        unsafe { swiglu(&mut got, &up, 203) };
        for ((&g, &u), &r) in gate.iter().zip(&up).zip(&got) {
            let exact = (g as f64 / (1.0 + (-g as f64).exp())) * u as f64;
            assert!((r as f64 - exact).abs() <= 4e-7 * exact.abs() + 1e-30, "swiglu({g}, {u}) = {r}, exact {exact}");
        }
    }
}
