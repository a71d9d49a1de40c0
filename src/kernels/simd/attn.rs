//! Attention over a block of cached rows already widened to f32 (`crate::kernels::attention`):
//! the scores of one query against several key rows, and a block of value rows weighted into
//! an accumulator. One query's score against one key depends only on those two rows (a fixed
//! summation order, whichever other rows share the call), so a query gets the same result in a
//! tile of prefill queries as alone in decode.
//!
//! # Safety (all `unsafe fn` here)
//! The caller must have checked the CPU features of the function's level (AVX-512F for the
//! `_512` functions; AVX2, FMA and F16C for the others), and that every pointer covers the
//! elements the function's docs describe.

#![allow(clippy::missing_safety_doc, clippy::needless_range_loop)]

use std::arch::x86_64::*;

/// out[c] = scale · Σ_d q[d]·k_c[d] for the key rows k_c = k + c·stride, c < 16; `dk` is a
/// multiple of 16. Only rows c < n are read (the others repeat row n − 1, 1 ≤ n ≤ 16). Per row:
/// 16 lane sums in order of d, then lanes (j, j + 8), (j, j + 4), (j, j + 2), (j, j + 1) added
/// pairwise, the 16 rows' trees interleaved.
#[target_feature(enable = "avx512f")]
pub unsafe fn scores_512(q: *const f32, k: *const f32, stride: usize, n: usize, dk: usize, scale: f32, out: &mut [f32; 16]) {
    // SAFETY: rows min(c, n - 1) < n and elements d < dk are inside what the caller covers.
    unsafe {
        let rows: [*const f32; 16] = std::array::from_fn(|c| k.add(c.min(n - 1) * stride));
        let mut part = [_mm512_setzero_ps(); 16];
        for d in (0..dk).step_by(16) {
            let qv = _mm512_loadu_ps(q.add(d));
            for c in 0..16 {
                part[c] = _mm512_fmadd_ps(_mm512_loadu_ps(rows[c].add(d)), qv, part[c]);
            }
        }
        // t[i]: 128-bit lanes 0, 1 hold row 2i's lanes j + (j + 8), lanes 2, 3 row 2i + 1's
        let t: [__m512; 8] = std::array::from_fn(|i| {
            let (a, b) = (part[2 * i], part[2 * i + 1]);
            _mm512_add_ps(_mm512_shuffle_f32x4::<0b01_00_01_00>(a, b), _mm512_shuffle_f32x4::<0b11_10_11_10>(a, b))
        });
        // u[i]: 128-bit lane L holds row 4i + L's four partial sums
        let u: [__m512; 4] = std::array::from_fn(|i| {
            let (a, b) = (t[2 * i], t[2 * i + 1]);
            _mm512_add_ps(_mm512_shuffle_f32x4::<0b10_00_10_00>(a, b), _mm512_shuffle_f32x4::<0b11_01_11_01>(a, b))
        });
        // w[i], lane L: [row 8i + L: (0 + 2), (1 + 3); row 8i + 4 + L: (0 + 2), (1 + 3)]
        let w: [__m512; 2] = std::array::from_fn(|i| {
            let (a, b) = (u[2 * i], u[2 * i + 1]);
            _mm512_add_ps(_mm512_shuffle_ps::<0b01_00_01_00>(a, b), _mm512_shuffle_ps::<0b11_10_11_10>(a, b))
        });
        // element 4L + m holds row 4m + L's total
        let z = _mm512_add_ps(_mm512_shuffle_ps::<0b10_00_10_00>(w[0], w[1]), _mm512_shuffle_ps::<0b11_01_11_01>(w[0], w[1]));
        let order = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
        _mm512_storeu_ps(out.as_mut_ptr(), _mm512_mul_ps(_mm512_permutexvar_ps(order, z), _mm512_set1_ps(scale)));
    }
}

/// [`scores_512`] for 8 key rows with 8-lane sums: `dk` a multiple of 8, rows c < n read
/// (1 ≤ n ≤ 8), lanes (j, j + 4), (j, j + 2), (j, j + 1) added pairwise.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn scores_256(q: *const f32, k: *const f32, stride: usize, n: usize, dk: usize, scale: f32, out: &mut [f32; 8]) {
    // SAFETY: as scores_512.
    unsafe {
        let rows: [*const f32; 8] = std::array::from_fn(|c| k.add(c.min(n - 1) * stride));
        let mut part = [_mm256_setzero_ps(); 8];
        for d in (0..dk).step_by(8) {
            let qv = _mm256_loadu_ps(q.add(d));
            for c in 0..8 {
                part[c] = _mm256_fmadd_ps(_mm256_loadu_ps(rows[c].add(d)), qv, part[c]);
            }
        }
        // t[i]: low 128 bits row 2i's lanes j + (j + 4), high 128 bits row 2i + 1's
        let t: [__m256; 4] = std::array::from_fn(|i| {
            let (a, b) = (part[2 * i], part[2 * i + 1]);
            _mm256_add_ps(_mm256_permute2f128_ps::<0x20>(a, b), _mm256_permute2f128_ps::<0x31>(a, b))
        });
        // w[i], lane L: [row 4i + L: (0 + 2), (1 + 3); row 4i + 2 + L: (0 + 2), (1 + 3)]
        let w: [__m256; 2] = std::array::from_fn(|i| {
            let (a, b) = (t[2 * i], t[2 * i + 1]);
            _mm256_add_ps(_mm256_shuffle_ps::<0b01_00_01_00>(a, b), _mm256_shuffle_ps::<0b11_10_11_10>(a, b))
        });
        // element 4L + m holds row 2m + L's total
        let z = _mm256_add_ps(_mm256_shuffle_ps::<0b10_00_10_00>(w[0], w[1]), _mm256_shuffle_ps::<0b11_01_11_01>(w[0], w[1]));
        let order = _mm256_set_epi32(7, 3, 6, 2, 5, 1, 4, 0);
        _mm256_storeu_ps(out.as_mut_ptr(), _mm256_mul_ps(_mm256_permutevar8x32_ps(z, order), _mm256_set1_ps(scale)));
    }
}

/// acc[d] += Σ_c p[c]·v_c[d] over the rows `v` (c ascending, one FMA per term), d < dv, `dv` a
/// multiple of 16; the accumulator stays in registers 128 elements at a time.
#[target_feature(enable = "avx512f")]
pub unsafe fn accumulate_512(acc: *mut f32, dv: usize, v: &[*const f32], p: &[f32]) {
    // SAFETY: acc and every row hold dv elements.
    unsafe {
        let mut d0 = 0;
        while d0 < dv {
            let width = (dv - d0).min(128) / 16;
            let mut r = [_mm512_setzero_ps(); 8];
            for k in 0..width {
                r[k] = _mm512_loadu_ps(acc.add(d0 + 16 * k));
            }
            for (&row, &w) in v.iter().zip(p) {
                let wv = _mm512_set1_ps(w);
                for k in 0..width {
                    r[k] = _mm512_fmadd_ps(_mm512_loadu_ps(row.add(d0 + 16 * k)), wv, r[k]);
                }
            }
            for k in 0..width {
                _mm512_storeu_ps(acc.add(d0 + 16 * k), r[k]);
            }
            d0 += 16 * width;
        }
    }
}

/// [`accumulate_512`] with 8-lane registers (`dv` a multiple of 8), 64 elements at a time; the
/// same FMAs in the same order, so the same results.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn accumulate_256(acc: *mut f32, dv: usize, v: &[*const f32], p: &[f32]) {
    // SAFETY: as accumulate_512.
    unsafe {
        let mut d0 = 0;
        while d0 < dv {
            let width = (dv - d0).min(64) / 8;
            let mut r = [_mm256_setzero_ps(); 8];
            for k in 0..width {
                r[k] = _mm256_loadu_ps(acc.add(d0 + 8 * k));
            }
            for (&row, &w) in v.iter().zip(p) {
                let wv = _mm256_set1_ps(w);
                for k in 0..width {
                    r[k] = _mm256_fmadd_ps(_mm256_loadu_ps(row.add(d0 + 8 * k)), wv, r[k]);
                }
            }
            for k in 0..width {
                _mm256_storeu_ps(acc.add(d0 + 8 * k), r[k]);
            }
            d0 += 8 * width;
        }
    }
}

/// dst[i] = src[i] as f32 for F16 `src` (exact).
#[target_feature(enable = "avx2,f16c")]
pub unsafe fn widen_f16(src: &[u16], dst: &mut [f32]) {
    let n = src.len().min(dst.len());
    // SAFETY: chunk i touches elements 8i..8i + 8 < n of both slices.
    unsafe {
        for i in 0..n / 8 {
            _mm256_storeu_ps(dst.as_mut_ptr().add(8 * i), _mm256_cvtph_ps(_mm_loadu_si128(src.as_ptr().add(8 * i) as *const __m128i)));
        }
    }
    for i in n / 8 * 8..n {
        dst[i] = crate::quant::f16_to_f32(src[i]);
    }
}
