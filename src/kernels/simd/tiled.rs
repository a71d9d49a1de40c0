//! Panels in the order of llama.cpp's tiled matmul (`quant::vec_dot_tiled`), one generic pair of
//! kernels per level for every type it serves: a panel's weight rows are unpacked once (the
//! reference's `quant::tiled::unpack`) into integer weights, per sub-block scales (and mins) and
//! the f32 factors; the kernels then sum, per block and exactly in 32-bit integers,
//! `s1 = Σ_s scale_s · Σ_e w_e q_e` and `s2 = Σ_s min_s · bsum_s`, and take the reference's
//! f32 steps `r = d · s1` (`r = fnmadd(dmin, s2, r)`), `acc = fma(r, d_a, acc)`.
//!
//! AVX-512 (16 weight rows, VNNI): the weights are stored `w + 128` as unsigned bytes in groups
//! of 4 per row (`vpdpbusd` against 4 activation bytes broadcast), the `128 · bsum` of each
//! sub-block taken off the integer sums. AVX2 (8 rows): the weights stay signed and each group
//! goes through `maddubs(|w|, sign(q, w))` (|w|, |q| ≤ 127: no pair saturates), then
//! `madd` by ones. Both are exact, so both give the reference's bits.

#![allow(clippy::missing_safety_doc, clippy::needless_range_loop, clippy::too_many_arguments)]

use std::arch::x86_64::*;

use crate::quant::tiled::unpack;
use crate::quant::{GgmlType, QK_K};

const Q8_K_B: usize = GgmlType::Q8K.block_bytes();
/// Offset of the 16 i16 bsums in a Q8_K block.
const Q8_K_BSUMS: usize = 4 + QK_K;

/// The type of a const generic type id.
#[inline(always)]
fn ty_of(id: u32) -> GgmlType {
    GgmlType::from_u32(id).expect("a tiled type")
}

/// One activation block's per-sub-block code sums (`n_sub` 8: pairs of Q8_K's 16-sums).
#[inline(always)]
unsafe fn sub_bsums<const NSUB: usize>(ab: *const u8) -> [i32; 16] {
    // SAFETY: the caller guarantees a whole Q8_K block at ab.
    unsafe {
        let bs = |i: usize| std::ptr::read_unaligned(ab.add(Q8_K_BSUMS + 2 * i) as *const i16) as i32;
        std::array::from_fn(|s| if s >= NSUB { 0 } else if NSUB == 16 { bs(s) } else { bs(2 * s) + bs(2 * s + 1) })
    }
}

// ---------------------------------------------------------------------------------------------
// AVX-512: 16 weight rows

/// Offsets in one block of a 16-row panel: 64 groups × 16 rows × 4 bytes (`w + 128`), then per
/// sub-block slot (16) the rows' scales as i32, the same for mins, then the rows' `d`, `dmin`.
const P16_SC: usize = 64 * 64;
const P16_MN: usize = P16_SC + 16 * 64;
const P16_D: usize = P16_MN + 16 * 64;
pub(crate) const P16_BLOCK: usize = P16_D + 2 * 64;

/// Unpacks 16 rows of type `TY` (`w + j * w_stride`, `nb` blocks) into a panel of
/// `nb * P16_BLOCK` bytes.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn unpack16<const TY: u32>(nb: usize, w: *const u8, w_stride: usize, panel: *mut u8) {
    let ty = ty_of(TY);
    let bb = ty.block_bytes();
    // SAFETY: the caller guarantees 16 rows of nb blocks at w and nb * P16_BLOCK bytes at panel.
    unsafe {
        for ib in 0..nb {
            let pb = panel.add(ib * P16_BLOCK);
            for j in 0..16 {
                let t = unpack(ty, std::slice::from_raw_parts(w.add(j * w_stride + ib * bb), bb));
                for (k, g) in t.w.as_chunks::<4>().0.iter().enumerate() {
                    std::ptr::write_unaligned(pb.add(64 * k + 4 * j) as *mut u32, u32::from_le_bytes(g.map(|v| v as u8)) ^ 0x8080_8080);
                }
                for s in 0..16 {
                    *(pb.add(P16_SC + 64 * s + 4 * j) as *mut i32) = t.sc[s];
                    *(pb.add(P16_MN + 64 * s + 4 * j) as *mut i32) = t.mn[s];
                }
                *(pb.add(P16_D + 4 * j) as *mut f32) = t.d;
                *(pb.add(P16_D + 64 + 4 * j) as *mut f32) = t.dmin;
            }
        }
    }
}

/// A 16-row panel against `R` Q8_K activation rows (`a + i * a_stride`): result (i, j) to
/// `out + i * out_stride + j`, in the tiled matmul's order.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn gemm16<const R: usize, const NSUB: usize, const HAS_MIN: bool>(nb: usize, panel: *const u8, a: *const u8, a_stride: usize, _aux: *const super::ActAux, out: *mut f32, out_stride: usize) {
    let gps = QK_K / NSUB / 4;
    // SAFETY: the panel holds nb blocks of P16_BLOCK bytes; a holds R rows of nb Q8_K blocks.
    unsafe {
        let mut acc = [_mm512_setzero_ps(); R];
        for ib in 0..nb {
            let pb = panel.add(ib * P16_BLOCK);
            let ab: [*const u8; R] = std::array::from_fn(|r| a.add(r * a_stride + ib * Q8_K_B));
            let bsums: [[i32; 16]; R] = std::array::from_fn(|r| sub_bsums::<NSUB>(ab[r]));
            let mut s1 = [_mm512_setzero_si512(); R];
            let mut s2 = [_mm512_setzero_si512(); R];
            for s in 0..NSUB {
                let mut isum = [_mm512_setzero_si512(); R];
                for g in 0..gps {
                    let k = s * gps + g;
                    let wv = _mm512_loadu_si512(pb.add(64 * k) as *const __m512i);
                    for r in 0..R {
                        let y = std::ptr::read_unaligned(ab[r].add(4 + 4 * k) as *const i32);
                        isum[r] = _mm512_dpbusd_epi32(isum[r], wv, _mm512_set1_epi32(y));
                    }
                }
                let sc = _mm512_loadu_si512(pb.add(P16_SC + 64 * s) as *const __m512i);
                for r in 0..R {
                    let raw = _mm512_sub_epi32(isum[r], _mm512_set1_epi32(128 * bsums[r][s]));
                    s1[r] = _mm512_add_epi32(s1[r], _mm512_mullo_epi32(raw, sc));
                }
                if HAS_MIN {
                    let mn = _mm512_loadu_si512(pb.add(P16_MN + 64 * s) as *const __m512i);
                    for r in 0..R {
                        s2[r] = _mm512_add_epi32(s2[r], _mm512_mullo_epi32(mn, _mm512_set1_epi32(bsums[r][s])));
                    }
                }
            }
            let d = _mm512_loadu_ps(pb.add(P16_D) as *const f32);
            let dmin = _mm512_loadu_ps(pb.add(P16_D + 64) as *const f32);
            for r in 0..R {
                let mut res = _mm512_mul_ps(d, _mm512_cvtepi32_ps(s1[r]));
                if HAS_MIN {
                    res = _mm512_fnmadd_ps(dmin, _mm512_cvtepi32_ps(s2[r]), res);
                }
                let da = std::ptr::read_unaligned(ab[r] as *const f32);
                acc[r] = _mm512_fmadd_ps(res, _mm512_set1_ps(da), acc[r]);
            }
        }
        for r in 0..R {
            _mm512_storeu_ps(out.add(r * out_stride), acc[r]);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// AVX2: 8 weight rows

/// Offsets in one block of an 8-row panel: 64 groups × 8 rows × 4 signed bytes, then per
/// sub-block slot (16) the rows' scales as i32, the same for mins, then the rows' `d`, `dmin`.
const P8_SC: usize = 64 * 32;
const P8_MN: usize = P8_SC + 16 * 32;
const P8_D: usize = P8_MN + 16 * 32;
pub(crate) const P8_BLOCK: usize = P8_D + 2 * 32;

/// Unpacks 8 rows of type `TY` (`w + j * w_stride`, `nb` blocks) into a panel of
/// `nb * P8_BLOCK` bytes.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn unpack8<const TY: u32>(nb: usize, w: *const u8, w_stride: usize, panel: *mut u8) {
    let ty = ty_of(TY);
    let bb = ty.block_bytes();
    // SAFETY: the caller guarantees 8 rows of nb blocks at w and nb * P8_BLOCK bytes at panel.
    unsafe {
        for ib in 0..nb {
            let pb = panel.add(ib * P8_BLOCK);
            for j in 0..8 {
                let t = unpack(ty, std::slice::from_raw_parts(w.add(j * w_stride + ib * bb), bb));
                for (k, g) in t.w.as_chunks::<4>().0.iter().enumerate() {
                    std::ptr::write_unaligned(pb.add(32 * k + 4 * j) as *mut u32, u32::from_le_bytes(g.map(|v| v as u8)));
                }
                for s in 0..16 {
                    *(pb.add(P8_SC + 32 * s + 4 * j) as *mut i32) = t.sc[s];
                    *(pb.add(P8_MN + 32 * s + 4 * j) as *mut i32) = t.mn[s];
                }
                *(pb.add(P8_D + 4 * j) as *mut f32) = t.d;
                *(pb.add(P8_D + 32 + 4 * j) as *mut f32) = t.dmin;
            }
        }
    }
}

/// An 8-row panel against `R` Q8_K activation rows: result (i, j) to `out + i * out_stride + j`,
/// in the tiled matmul's order.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn gemm8<const R: usize, const NSUB: usize, const HAS_MIN: bool>(nb: usize, panel: *const u8, a: *const u8, a_stride: usize, _aux: *const super::ActAux, out: *mut f32, out_stride: usize) {
    let gps = QK_K / NSUB / 4;
    // SAFETY: the panel holds nb blocks of P8_BLOCK bytes; a holds R rows of nb Q8_K blocks.
    unsafe {
        let ones = _mm256_set1_epi16(1);
        let mut acc = [_mm256_setzero_ps(); R];
        for ib in 0..nb {
            let pb = panel.add(ib * P8_BLOCK);
            let ab: [*const u8; R] = std::array::from_fn(|r| a.add(r * a_stride + ib * Q8_K_B));
            let mut s1 = [_mm256_setzero_si256(); R];
            let mut s2 = [_mm256_setzero_si256(); R];
            let bsums: [[i32; 16]; R] = std::array::from_fn(|r| if HAS_MIN { sub_bsums::<NSUB>(ab[r]) } else { [0; 16] });
            for s in 0..NSUB {
                let mut isum = [_mm256_setzero_si256(); R];
                for g in 0..gps {
                    let k = s * gps + g;
                    let wv = _mm256_loadu_si256(pb.add(32 * k) as *const __m256i);
                    let ax = _mm256_sign_epi8(wv, wv);
                    for r in 0..R {
                        let y = _mm256_set1_epi32(std::ptr::read_unaligned(ab[r].add(4 + 4 * k) as *const i32));
                        let p = _mm256_maddubs_epi16(ax, _mm256_sign_epi8(y, wv));
                        isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(p, ones));
                    }
                }
                let sc = _mm256_loadu_si256(pb.add(P8_SC + 32 * s) as *const __m256i);
                for r in 0..R {
                    s1[r] = _mm256_add_epi32(s1[r], _mm256_mullo_epi32(isum[r], sc));
                }
                if HAS_MIN {
                    let mn = _mm256_loadu_si256(pb.add(P8_MN + 32 * s) as *const __m256i);
                    for r in 0..R {
                        s2[r] = _mm256_add_epi32(s2[r], _mm256_mullo_epi32(mn, _mm256_set1_epi32(bsums[r][s])));
                    }
                }
            }
            let d = _mm256_loadu_ps(pb.add(P8_D) as *const f32);
            let dmin = _mm256_loadu_ps(pb.add(P8_D + 32) as *const f32);
            for r in 0..R {
                let mut res = _mm256_mul_ps(d, _mm256_cvtepi32_ps(s1[r]));
                if HAS_MIN {
                    res = _mm256_fnmadd_ps(dmin, _mm256_cvtepi32_ps(s2[r]), res);
                }
                let da = std::ptr::read_unaligned(ab[r] as *const f32);
                acc[r] = _mm256_fmadd_ps(res, _mm256_set1_ps(da), acc[r]);
            }
        }
        for r in 0..R {
            _mm256_storeu_ps(out.add(r * out_stride), acc[r]);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// AVX2, Q6_K: 8 weight rows, the quants unsigned

/// Offsets in one block of an 8-row Q6_K panel: 64 groups × 8 rows × 4 bytes `w + 32` (0..63),
/// then per sub-block the rows' scales as i16 pairs (lanes 2j, 2j + 1: row j's scale twice),
/// then per pair of sub-blocks `p` the rows' scales of sub-blocks 2p (low i16) and 2p + 1 (high),
/// then the rows' `d`.
const Q6_SC: usize = 64 * 32;
const Q6_SC2: usize = Q6_SC + 16 * 32;
const Q6_D: usize = Q6_SC2 + 8 * 32;
pub(crate) const Q6_BLOCK: usize = Q6_D + 32;

/// Unpacks 8 Q6_K rows (`w + j * w_stride`, `nb` blocks) into a panel of `nb * Q6_BLOCK` bytes
/// for [`gemm8_q6k`]: per 32 quants of the 8 rows (as the row kernels build them) one 8 × 8
/// transpose of 32-bit lanes, the scales widened and transposed likewise (the reference's
/// `quant::tiled::unpack` and a scatter per row took 40 ns per row and block, more than the
/// products against 8 activation rows).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn unpack8_q6k(nb: usize, w: *const u8, w_stride: usize, panel: *mut u8) {
    const BB: usize = GgmlType::Q6K.block_bytes();
    // SAFETY: the caller guarantees 8 rows of nb blocks at w and nb * Q6_BLOCK bytes at panel.
    unsafe {
        let (m4, m30) = (_mm256_set1_epi8(0x0f), _mm256_set1_epi8(0x30));
        // each 32-bit lane's i16 0 (`dup_lo`) or 1 (`dup_hi`) in both of its halves
        let (lo0, lo1) = (0x0504_0504_0100_0100, 0x0d0c_0d0c_0908_0908);
        let dup_lo = _mm256_set_epi64x(lo1, lo0, lo1, lo0);
        let (hi0, hi1) = (0x0706_0706_0302_0302, 0x0f0e_0f0e_0b0a_0b0a);
        let dup_hi = _mm256_set_epi64x(hi1, hi0, hi1, hi0);
        for ib in 0..nb {
            super::avx2::prefetch_next_panel::<8, BB>(w, w_stride, ib);
            let pb = panel.add(ib * Q6_BLOCK);
            let mut rb = [w; 8];
            for (j, r) in rb.iter_mut().enumerate() {
                *r = w.add(j * w_stride + ib * BB);
            }
            let mut q = [_mm256_setzero_si256(); 8];
            for n in 0..2 {
                for s in 0..4 {
                    for j in 0..8 {
                        let ql = _mm256_loadu_si256(rb[j].add(64 * n + 32 * (s % 2)) as *const __m256i);
                        let low = if s < 2 { _mm256_and_si256(ql, m4) } else { _mm256_and_si256(_mm256_srli_epi16::<4>(ql), m4) };
                        // bits 2s, 2s + 1 of each qh byte to bits 4, 5
                        let qh = _mm256_loadu_si256(rb[j].add(128 + 32 * n) as *const __m256i);
                        let high = match s {
                            0 => _mm256_slli_epi16::<4>(qh),
                            1 => _mm256_slli_epi16::<2>(qh),
                            2 => qh,
                            _ => _mm256_srli_epi16::<2>(qh),
                        };
                        q[j] = _mm256_or_si256(low, _mm256_and_si256(high, m30));
                    }
                    let g = 4 * n + s;
                    for (m, v) in super::avx2::transpose8x32(q).into_iter().enumerate() {
                        _mm256_storeu_si256(pb.add(32 * (8 * g + m)) as *mut __m256i, v);
                    }
                }
            }
            // the scales: row j's sub-blocks 2p, 2p + 1 as 32-bit lane p, transposed
            let mut sc = [_mm256_setzero_si256(); 8];
            let mut dh = [0u16; 8];
            for j in 0..8 {
                sc[j] = _mm256_cvtepi8_epi16(_mm_loadu_si128(rb[j].add(192) as *const __m128i));
                dh[j] = std::ptr::read_unaligned(rb[j].add(208) as *const u16);
            }
            for (p, v) in super::avx2::transpose8x32(sc).into_iter().enumerate() {
                _mm256_storeu_si256(pb.add(Q6_SC2 + 32 * p) as *mut __m256i, v);
                _mm256_storeu_si256(pb.add(Q6_SC + 32 * (2 * p)) as *mut __m256i, _mm256_shuffle_epi8(v, dup_lo));
                _mm256_storeu_si256(pb.add(Q6_SC + 32 * (2 * p + 1)) as *mut __m256i, _mm256_shuffle_epi8(v, dup_hi));
            }
            _mm256_storeu_ps(pb.add(Q6_D) as *mut f32, _mm256_cvtph_ps(_mm_loadu_si128(dh.as_ptr() as *const __m128i)));
        }
    }
}

/// An 8-row Q6_K panel ([`unpack8_q6k`]) × `R` Q8_K activation rows: result (i, j) to
/// `out + i * out_stride + j`, in the tiled matmul's order (bit for bit [`gemm8`]'s). The quants
/// go unsigned (`w + 32`) into `maddubs`, two groups' products added in 16 bits (at most
/// 2 · 2 · 63 · 128 < 2^15), scaled by the sub-block's scale in the `madd` that widens them;
/// `32 · Σ_s scale_s · bsum_s` (the offset) is taken off the block's sum, one `madd` per pair of
/// sub-blocks against the activation's 16-sums: `s1` exact in 32 bits, as the reference's.
/// Per 32 products one `maddubs`, half an add and a `madd` (the generic panel: two sign
/// operations, `maddubs`, `madd` by ones and an add, then `vpmulld` per sub-block).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn gemm8_q6k<const R: usize>(nb: usize, panel: *const u8, a: *const u8, a_stride: usize, _aux: *const super::ActAux, out: *mut f32, out_stride: usize) {
    // SAFETY: the panel holds nb blocks of Q6_BLOCK bytes; a holds R rows of nb Q8_K blocks.
    unsafe {
        let mut acc = [_mm256_setzero_ps(); R];
        for ib in 0..nb {
            let pb = panel.add(ib * Q6_BLOCK);
            let d = _mm256_loadu_ps(pb.add(Q6_D) as *const f32);
            let mut r0 = 0;
            while r0 < R {
                let ar = a.add(r0 * a_stride + ib * Q8_K_B);
                match R - r0 {
                    1 => q6k8_rows::<1>(pb, ar, a_stride, d, &mut acc[r0..]),
                    2 => q6k8_rows::<2>(pb, ar, a_stride, d, &mut acc[r0..]),
                    3 => q6k8_rows::<3>(pb, ar, a_stride, d, &mut acc[r0..]),
                    _ => q6k8_rows::<4>(pb, ar, a_stride, d, &mut acc[r0..]),
                }
                r0 += 4;
            }
        }
        for r in 0..R {
            _mm256_storeu_ps(out.add(r * out_stride), acc[r]);
        }
    }
}

/// One block of an 8-row Q6_K panel (`pb`, the rows' `d` in `d`) × `N` Q8_K blocks
/// (`ab + i * a_stride`), added to `acc[i]` (see [`gemm8_q6k`]).
#[inline(always)]
unsafe fn q6k8_rows<const N: usize>(pb: *const u8, ab: *const u8, a_stride: usize, d: __m256, acc: &mut [__m256]) {
    // SAFETY: the caller's panel block and N activation blocks; AVX2 checked by the caller.
    unsafe {
        let row = |i: usize| ab.add(i * a_stride);
        let y4 = |i: usize, k: usize| _mm256_set1_epi32(std::ptr::read_unaligned(row(i).add(4 + 4 * k) as *const i32));
        let mut s1 = [_mm256_setzero_si256(); N];
        for s in 0..16 {
            let sc = _mm256_loadu_si256(pb.add(Q6_SC + 32 * s) as *const __m256i);
            for h in 0..2 {
                let k = 4 * s + 2 * h;
                let (w0, w1) = (_mm256_loadu_si256(pb.add(32 * k) as *const __m256i), _mm256_loadu_si256(pb.add(32 * k + 32) as *const __m256i));
                for i in 0..N {
                    let p = _mm256_add_epi16(_mm256_maddubs_epi16(w0, y4(i, k)), _mm256_maddubs_epi16(w1, y4(i, k + 1)));
                    s1[i] = _mm256_add_epi32(s1[i], _mm256_madd_epi16(p, sc));
                }
            }
        }
        for i in 0..N {
            // the offset: 32 · Σ_s scale_s · bsum_s
            let mut c = _mm256_setzero_si256();
            for p in 0..8 {
                let bs = _mm256_set1_epi32(std::ptr::read_unaligned(row(i).add(Q8_K_BSUMS + 4 * p) as *const i32));
                c = _mm256_add_epi32(c, _mm256_madd_epi16(_mm256_loadu_si256(pb.add(Q6_SC2 + 32 * p) as *const __m256i), bs));
            }
            let s = _mm256_sub_epi32(s1[i], _mm256_slli_epi32::<5>(c));
            let res = _mm256_mul_ps(d, _mm256_cvtepi32_ps(s));
            let da = std::ptr::read_unaligned(row(i) as *const f32);
            acc[i] = _mm256_fmadd_ps(res, _mm256_set1_ps(da), acc[i]);
        }
    }
}
