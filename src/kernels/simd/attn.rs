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

/// out[c] = scale · q·k_c for the key rows k_c = k + c·stride, c < 16, summed as ggml's
/// `ggml_vec_dot_f16` sums them on AVX-512 (see [`crate::kernels::attention::dot_ggml`]): four
/// 16-lane accumulators over the first `dk & !63` elements (accumulator j takes elements 16j..
/// 16j + 16 of each 64), added (0 + 2) + (1 + 3), then lanes (j, j + 8), (j, j + 4), (j, j + 2),
/// (j, j + 1) pairwise; the remaining elements added one by one in f64. q and each row cover
/// `dk` values. Only rows c < n are read (the others repeat row n − 1, 1 ≤ n ≤ 16).
#[target_feature(enable = "avx512f")]
pub unsafe fn scores_512(q: *const f32, k: *const f32, stride: usize, n: usize, dk: usize, scale: f32, out: &mut [f32; 16]) {
    // SAFETY: rows min(c, n - 1) < n and elements d < dk are inside what the caller covers.
    unsafe {
        let rows: [*const f32; 16] = std::array::from_fn(|c| k.add(c.min(n - 1) * stride));
        let np = dk & !63;
        // each row's 16-lane partial sum (0 + 2) + (1 + 3), a row at a time (four accumulators
        // live, the query in registers where it fits: the 16 rows' accumulators at once spilled)
        let part: [__m512; 16] = match np {
            64 => {
                let qv: [__m512; 4] = std::array::from_fn(|j| _mm512_loadu_ps(q.add(16 * j)));
                std::array::from_fn(|c| row_part_512::<4>(&qv, rows[c]))
            }
            128 => {
                let qv: [__m512; 8] = std::array::from_fn(|j| _mm512_loadu_ps(q.add(16 * j)));
                std::array::from_fn(|c| row_part_512::<8>(&qv, rows[c]))
            }
            _ => std::array::from_fn(|c| {
                let mut acc = [_mm512_setzero_ps(); 4];
                for i in (0..np).step_by(64) {
                    for j in 0..4 {
                        acc[j] = _mm512_fmadd_ps(_mm512_loadu_ps(rows[c].add(i + 16 * j)), _mm512_loadu_ps(q.add(i + 16 * j)), acc[j]);
                    }
                }
                _mm512_add_ps(_mm512_add_ps(acc[0], acc[2]), _mm512_add_ps(acc[1], acc[3]))
            }),
        };
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
        let z = _mm512_permutexvar_ps(order, z);
        if np < dk {
            let mut sums = [0f32; 16];
            _mm512_storeu_ps(sums.as_mut_ptr(), z);
            for c in 0..n {
                sums[c] = tail_f64(sums[c], q, rows[c], np, dk);
            }
            _mm512_storeu_ps(out.as_mut_ptr(), _mm512_mul_ps(_mm512_loadu_ps(sums.as_ptr()), _mm512_set1_ps(scale)));
        } else {
            _mm512_storeu_ps(out.as_mut_ptr(), _mm512_mul_ps(z, _mm512_set1_ps(scale)));
        }
    }
}

/// One key row's 16-lane partial sum for [`scores_512`] with the query's first `16 · NQ`
/// elements (`NQ` a multiple of 4) in registers: accumulator j over elements 16j.. of each 64,
/// ascending, then (0 + 2) + (1 + 3).
#[inline(always)]
unsafe fn row_part_512<const NQ: usize>(qv: &[__m512; NQ], row: *const f32) -> __m512 {
    // SAFETY: the caller's row covers 16 · NQ elements.
    unsafe {
        let mut acc = [_mm512_setzero_ps(); 4];
        for i in 0..NQ / 4 {
            for j in 0..4 {
                acc[j] = _mm512_fmadd_ps(_mm512_loadu_ps(row.add(64 * i + 16 * j)), qv[4 * i + j], acc[j]);
            }
        }
        _mm512_add_ps(_mm512_add_ps(acc[0], acc[2]), _mm512_add_ps(acc[1], acc[3]))
    }
}

/// [`scores_256`] for rows whose query does not fit in registers (MLA's 576): the 8 rows'
/// accumulators of one (j, half) at a time, the query loaded once for all of them.
#[inline(always)]
unsafe fn scores_256_wide(q: *const f32, rows: &[*const f32; 8], n: usize, dk: usize, scale: f32, out: &mut [f32; 8]) {
    // SAFETY: as scores_256.
    unsafe {
        let np = dk & !63;
        // pair[p][half]: accumulators 0 + 2 (p = 0) or 1 + 3 (p = 1), lanes 0..8 or 8..16
        let mut pair = [[[_mm256_setzero_ps(); 8]; 2]; 2];
        for j in [0, 2, 1, 3] {
            for half in 0..2 {
                let mut acc = [_mm256_setzero_ps(); 8];
                for i in (0..np).step_by(64) {
                    let d = i + 16 * j + 8 * half;
                    let qv = _mm256_loadu_ps(q.add(d));
                    for c in 0..8 {
                        acc[c] = _mm256_fmadd_ps(_mm256_loadu_ps(rows[c].add(d)), qv, acc[c]);
                    }
                }
                let p = &mut pair[j & 1][half];
                for c in 0..8 {
                    p[c] = if j < 2 { acc[c] } else { _mm256_add_ps(p[c], acc[c]) };
                }
            }
        }
        // lanes j + (j + 8) of the 16-lane sum (0 + 2) + (1 + 3)
        let part: [__m256; 8] = std::array::from_fn(|c| _mm256_add_ps(_mm256_add_ps(pair[0][0][c], pair[1][0][c]), _mm256_add_ps(pair[0][1][c], pair[1][1][c])));
        reduce_256(part, q, rows, n, np, dk, scale, out)
    }
}

/// One key row's half (its lanes 0..8 or 8..16, `row` and `qv` already offset) of the 16-lane
/// partial sum of [`scores_512`], for [`scores_256`]: `qv[4i + j]` the query's elements 64i +
/// 16j + (0..8) of the half, accumulator j over them ascending in i, then (0 + 2) + (1 + 3).
#[inline(always)]
unsafe fn row_half_256<const NQ: usize>(qv: &[__m256; NQ], row: *const f32) -> __m256 {
    // SAFETY: the caller's row covers 16 · NQ elements from its half's start.
    unsafe {
        let mut acc = [_mm256_setzero_ps(); 4];
        for i in 0..NQ / 4 {
            for j in 0..4 {
                acc[j] = _mm256_fmadd_ps(_mm256_loadu_ps(row.add(64 * i + 16 * j)), qv[4 * i + j], acc[j]);
            }
        }
        _mm256_add_ps(_mm256_add_ps(acc[0], acc[2]), _mm256_add_ps(acc[1], acc[3]))
    }
}

/// ggml's leftovers of a dot product: `head` in f64, then q[d]·k[d] (exact in f32 for F16
/// values) added one by one in f64 for d in from..to, rounded to f32.
#[inline(always)]
unsafe fn tail_f64(head: f32, q: *const f32, k: *const f32, from: usize, to: usize) -> f32 {
    let mut s = head as f64;
    for d in from..to {
        // SAFETY: the caller covers elements below `to` of both rows.
        s += unsafe { *q.add(d) * *k.add(d) } as f64;
    }
    s as f32
}

/// [`scores_512`] for 8 key rows with the same sums, each 16-lane accumulator as two 8-lane
/// halves (lanes j and j + 8 added first, then (j, j + 4), (j, j + 2), (j, j + 1)): the same
/// bits. Rows c < n read (1 ≤ n ≤ 8).
#[target_feature(enable = "avx2,fma")]
pub unsafe fn scores_256(q: *const f32, k: *const f32, stride: usize, n: usize, dk: usize, scale: f32, out: &mut [f32; 8]) {
    // SAFETY: as scores_512.
    unsafe {
        let rows: [*const f32; 8] = std::array::from_fn(|c| k.add(c.min(n - 1) * stride));
        let np = dk & !63;
        if np != 64 && np != 128 {
            return scores_256_wide(q, &rows, n, dk, scale, out);
        }
        // per half (lanes 0..8, then 8..16 of the 16-lane accumulators) and row, the four
        // accumulators' (0 + 2) + (1 + 3), the half's query in registers where it fits; then
        // the halves added: lanes j + (j + 8) of the 16-lane sum
        let half = |h: usize| -> [__m256; 8] {
            match np {
                64 => {
                    let qv: [__m256; 4] = std::array::from_fn(|j| _mm256_loadu_ps(q.add(16 * j + 8 * h)));
                    std::array::from_fn(|c| row_half_256::<4>(&qv, rows[c].add(8 * h)))
                }
                128 => {
                    let qv: [__m256; 8] = std::array::from_fn(|j| _mm256_loadu_ps(q.add(64 * (j / 4) + 16 * (j % 4) + 8 * h)));
                    std::array::from_fn(|c| row_half_256::<8>(&qv, rows[c].add(8 * h)))
                }
                _ => unreachable!("wide rows take scores_256_wide"),
            }
        };
        let (lo, hi) = (half(0), half(1));
        let part: [__m256; 8] = std::array::from_fn(|c| _mm256_add_ps(lo[c], hi[c]));
        reduce_256(part, q, &rows, n, np, dk, scale, out)
    }
}

/// The end of [`scores_256`]: the rows' `part`s (lanes j + (j + 8) of their 16-lane sums)
/// reduced as `_mm512_reduce_add_ps` continues, the tails added in f64, scaled into `out`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn reduce_256(part: [__m256; 8], q: *const f32, rows: &[*const f32; 8], n: usize, np: usize, dk: usize, scale: f32, out: &mut [f32; 8]) {
    // SAFETY: as scores_256.
    unsafe {
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
        let z = _mm256_permutevar8x32_ps(z, order);
        if np < dk {
            let mut sums = [0f32; 8];
            _mm256_storeu_ps(sums.as_mut_ptr(), z);
            for c in 0..n {
                sums[c] = tail_f64(sums[c], q, rows[c], np, dk);
            }
            _mm256_storeu_ps(out.as_mut_ptr(), _mm256_mul_ps(_mm256_loadu_ps(sums.as_ptr()), _mm256_set1_ps(scale)));
        } else {
            _mm256_storeu_ps(out.as_mut_ptr(), _mm256_mul_ps(z, _mm256_set1_ps(scale)));
        }
    }
}

/// x rounded to F16 (to nearest, ties to even) and back.
#[inline(always)]
unsafe fn round_f16_512(x: __m512) -> __m512 {
    // SAFETY: the caller's AVX-512F level.
    unsafe { _mm512_cvtph_ps(_mm512_cvtps_ph::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(x)) }
}

#[inline(always)]
unsafe fn round_f16_256(x: __m256) -> __m256 {
    // SAFETY: the caller's F16C level.
    unsafe { _mm256_cvtph_ps(_mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(x)) }
}

/// ggml's F16 accumulator of the online softmax, cell by cell (c ascending) over the rows `v`,
/// for `R` query rows at once (they share the value rows' loads, and their chains of dependent
/// roundings interleave): for row i, where bit c of `rescale[i]` is set, acc_i = f16(acc_i ·
/// ms_i[c]) first; then acc_i = f16(fma(v_c, p_i[c], acc_i)). `dv` a multiple of 16; each
/// acc_i holds F16-representable values. Per element the same operations as the other levels.
#[target_feature(enable = "avx512f")]
pub unsafe fn accumulate_512<const R: usize, const ROUND: bool>(acc: [*mut f32; R], dv: usize, v: &[*const f32], p: [&[f32]; R], ms: [&[f32]; R], rescale: [u32; R]) {
    // SAFETY: every acc_i and every row hold dv elements; p_i and ms_i at least v.len().
    unsafe {
        // (no rescale in the block, always so for the f32 accumulator: no test per cell)
        let any = rescale.iter().any(|&m| m != 0);
        let mut d0 = 0;
        while dv - d0 >= 64 {
            if any {
                acc_chunk_512::<R, 4, ROUND, true>(acc, d0, v, p, ms, rescale);
            } else {
                acc_chunk_512::<R, 4, ROUND, false>(acc, d0, v, p, ms, rescale);
            }
            d0 += 64;
        }
        while d0 < dv {
            acc_chunk_512::<R, 1, ROUND, true>(acc, d0, v, p, ms, rescale);
            d0 += 16;
        }
    }
}

#[inline(always)]
unsafe fn acc_chunk_512<const R: usize, const W: usize, const ROUND: bool, const RESCALE: bool>(acc: [*mut f32; R], d0: usize, v: &[*const f32], p: [&[f32]; R], ms: [&[f32]; R], rescale: [u32; R]) {
    // SAFETY: as accumulate_512, elements d0..d0 + 16·W.
    unsafe {
        let mut r = [[_mm512_setzero_ps(); W]; R];
        for i in 0..R {
            for k in 0..W {
                r[i][k] = _mm512_loadu_ps(acc[i].add(d0 + 16 * k));
            }
        }
        for (c, &row) in v.iter().enumerate() {
            let mut x = [_mm512_setzero_ps(); W];
            for k in 0..W {
                x[k] = _mm512_loadu_ps(row.add(d0 + 16 * k));
            }
            for i in 0..R {
                if RESCALE && rescale[i] >> c & 1 == 1 {
                    let s = _mm512_set1_ps(ms[i][c]);
                    for k in 0..W {
                        r[i][k] = _mm512_mul_ps(r[i][k], s);
                        if ROUND {
                            r[i][k] = round_f16_512(r[i][k]);
                        }
                    }
                }
                let w = _mm512_set1_ps(p[i][c]);
                for k in 0..W {
                    r[i][k] = _mm512_fmadd_ps(x[k], w, r[i][k]);
                    if ROUND {
                        r[i][k] = round_f16_512(r[i][k]);
                    }
                }
            }
        }
        for i in 0..R {
            for k in 0..W {
                _mm512_storeu_ps(acc[i].add(d0 + 16 * k), r[i][k]);
            }
        }
    }
}

/// [`accumulate_512`] with 8-lane registers (`dv` a multiple of 8); the same operations
/// per element, so the same results.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn accumulate_256<const R: usize, const ROUND: bool>(acc: [*mut f32; R], dv: usize, v: &[*const f32], p: [&[f32]; R], ms: [&[f32]; R], rescale: [u32; R]) {
    // SAFETY: as accumulate_512.
    unsafe {
        // (no rescale in the block, always so for the f32 accumulator: no test per cell)
        let any = rescale.iter().any(|&m| m != 0);
        let mut d0 = 0;
        while dv - d0 >= 16 {
            if any {
                acc_chunk_256::<R, 2, ROUND, true>(acc, d0, v, p, ms, rescale);
            } else {
                acc_chunk_256::<R, 2, ROUND, false>(acc, d0, v, p, ms, rescale);
            }
            d0 += 16;
        }
        while d0 < dv {
            acc_chunk_256::<R, 1, ROUND, true>(acc, d0, v, p, ms, rescale);
            d0 += 8;
        }
    }
}

#[inline(always)]
unsafe fn acc_chunk_256<const R: usize, const W: usize, const ROUND: bool, const RESCALE: bool>(acc: [*mut f32; R], d0: usize, v: &[*const f32], p: [&[f32]; R], ms: [&[f32]; R], rescale: [u32; R]) {
    // SAFETY: as accumulate_256, elements d0..d0 + 8·W.
    unsafe {
        let mut r = [[_mm256_setzero_ps(); W]; R];
        for i in 0..R {
            for k in 0..W {
                r[i][k] = _mm256_loadu_ps(acc[i].add(d0 + 8 * k));
            }
        }
        for (c, &row) in v.iter().enumerate() {
            let mut x = [_mm256_setzero_ps(); W];
            for k in 0..W {
                x[k] = _mm256_loadu_ps(row.add(d0 + 8 * k));
            }
            for i in 0..R {
                if RESCALE && rescale[i] >> c & 1 == 1 {
                    let s = _mm256_set1_ps(ms[i][c]);
                    for k in 0..W {
                        r[i][k] = _mm256_mul_ps(r[i][k], s);
                        if ROUND {
                            r[i][k] = round_f16_256(r[i][k]);
                        }
                    }
                }
                let w = _mm256_set1_ps(p[i][c]);
                for k in 0..W {
                    r[i][k] = _mm256_fmadd_ps(x[k], w, r[i][k]);
                    if ROUND {
                        r[i][k] = round_f16_256(r[i][k]);
                    }
                }
            }
        }
        for i in 0..R {
            for k in 0..W {
                _mm256_storeu_ps(acc[i].add(d0 + 8 * k), r[i][k]);
            }
        }
    }
}

/// out[r·64 + c] = Σ_d q_r[d] · kt[d·64 + c] (`crate::kernels::attention::tiled_scores`): per
/// element one chain of fused multiply-adds over d ascending from 0. Rows r < `rows` at
/// q + r·qstride (dk values each), kt's rows of 64 (dk of them), `ncols` a multiple of 16 ≤ 64.
#[target_feature(enable = "avx512f")]
pub unsafe fn tiled_scores_512(q: *const f32, qstride: usize, rows: usize, kt: *const f32, dk: usize, ncols: usize, out: *mut f32) {
    // SAFETY: rows < rows, d < dk and columns < ncols ≤ 64 are what the caller covers.
    unsafe {
        let w = ncols / 16;
        let mut r0 = 0;
        while r0 < rows {
            let nr = (rows - r0).min(4);
            macro_rules! go {
                ($r:literal, $w:literal) => {
                    scores_block_512::<$r, $w>(q.add(r0 * qstride), qstride, kt, dk, out.add(r0 * 64))
                };
            }
            match (nr, w) {
                (4, 4) => go!(4, 4),
                (4, 3) => go!(4, 3),
                (4, 2) => go!(4, 2),
                (4, 1) => go!(4, 1),
                (3, 4) => go!(3, 4),
                (3, 3) => go!(3, 3),
                (3, 2) => go!(3, 2),
                (3, 1) => go!(3, 1),
                (2, 4) => go!(2, 4),
                (2, 3) => go!(2, 3),
                (2, 2) => go!(2, 2),
                (2, 1) => go!(2, 1),
                (1, 4) => go!(1, 4),
                (1, 3) => go!(1, 3),
                (1, 2) => go!(1, 2),
                _ => go!(1, 1),
            }
            r0 += nr;
        }
    }
}

#[inline(always)]
unsafe fn scores_block_512<const R: usize, const W: usize>(q: *const f32, qstride: usize, kt: *const f32, dk: usize, out: *mut f32) {
    // SAFETY: as tiled_scores_512 for R rows and 16·W columns.
    unsafe {
        let mut acc = [[_mm512_setzero_ps(); W]; R];
        for d in 0..dk {
            let mut b = [_mm512_setzero_ps(); W];
            for k in 0..W {
                b[k] = _mm512_loadu_ps(kt.add(d * 64 + 16 * k));
            }
            for i in 0..R {
                let a = _mm512_set1_ps(*q.add(i * qstride + d));
                for k in 0..W {
                    acc[i][k] = _mm512_fmadd_ps(b[k], a, acc[i][k]);
                }
            }
        }
        for i in 0..R {
            for k in 0..W {
                _mm512_storeu_ps(out.add(i * 64 + 16 * k), acc[i][k]);
            }
        }
    }
}

/// [`tiled_scores_512`] with 8-lane registers: the same chains, the same results.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn tiled_scores_256(q: *const f32, qstride: usize, rows: usize, kt: *const f32, dk: usize, ncols: usize, out: *mut f32) {
    // SAFETY: as tiled_scores_512.
    unsafe {
        let mut r0 = 0;
        while r0 < rows {
            let nr = (rows - r0).min(4);
            let mut c0 = 0;
            while c0 < ncols {
                let (qq, kk, oo) = (q.add(r0 * qstride), kt.add(c0), out.add(r0 * 64 + c0));
                match nr {
                    4 => scores_block_256::<4, 2>(qq, qstride, kk, dk, oo),
                    3 => scores_block_256::<3, 2>(qq, qstride, kk, dk, oo),
                    2 => scores_block_256::<2, 2>(qq, qstride, kk, dk, oo),
                    _ => scores_block_256::<1, 2>(qq, qstride, kk, dk, oo),
                }
                c0 += 16;
            }
            r0 += nr;
        }
    }
}

#[inline(always)]
unsafe fn scores_block_256<const R: usize, const W: usize>(q: *const f32, qstride: usize, kt: *const f32, dk: usize, out: *mut f32) {
    // SAFETY: as tiled_scores_256 for R rows and 8·W columns.
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); W]; R];
        for d in 0..dk {
            let mut b = [_mm256_setzero_ps(); W];
            for k in 0..W {
                b[k] = _mm256_loadu_ps(kt.add(d * 64 + 8 * k));
            }
            for i in 0..R {
                let a = _mm256_set1_ps(*q.add(i * qstride + d));
                for k in 0..W {
                    acc[i][k] = _mm256_fmadd_ps(b[k], a, acc[i][k]);
                }
            }
        }
        for i in 0..R {
            for k in 0..W {
                _mm256_storeu_ps(out.add(i * 64 + 8 * k), acc[i][k]);
            }
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
