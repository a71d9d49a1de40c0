//! AVX2 + FMA + F16C kernels.
//!
//! The dot products follow the lane layout of ggml-cpu's AVX2 kernels, which is also what the
//! scalar reference in `crate::quant` models: 32-bit lane `k` of a block's integer sum holds the
//! products of elements `4k..4k+4` of every 32-element group, the lanes are accumulated with one
//! FMA per block and reduced in `hsum_float_8` order. Integer sums are exact, so the results are
//! the reference's bit for bit (the tests still only ask for a tolerance).
//!
//! Every kernel takes one weight row and `R` activation rows (`a + i * a_stride`), and writes the
//! `R` dot products to `out + i * out_stride`. With `R > 1` each weight block is loaded and
//! unpacked once for all `R` activation rows (prefill tiles).
//!
//! # Safety (all `unsafe fn` here)
//! The caller must have checked that the CPU supports AVX2, FMA and F16C, that `w` points to
//! `nb` readable weight blocks, each `a + i * a_stride` (i < R) to `nb` readable activation
//! blocks of the matching type, and each `out + i * out_stride` to a writable f32.

#![allow(clippy::missing_safety_doc, clippy::needless_range_loop, clippy::too_many_arguments)]

use std::arch::x86_64::*;

use super::ActAux;
use crate::quant::fp4::{e8m0_half, ue4m3, KVALUES_FP4};
use crate::quant::iq_tables::{IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID, KVALUES_IQ4NL};
use crate::quant::GgmlType;

const QK_K: usize = crate::quant::QK_K;

// Block sizes (bytes), from the formats' one definition (quant::BlockFormat).
const Q4_0_B: usize = GgmlType::Q4_0.block_bytes();
const Q4_1_B: usize = GgmlType::Q4_1.block_bytes();
const Q5_0_B: usize = GgmlType::Q5_0.block_bytes();
const Q5_1_B: usize = GgmlType::Q5_1.block_bytes();
const Q8_0_B: usize = GgmlType::Q8_0.block_bytes();
const Q8_1_B: usize = GgmlType::Q8_1.block_bytes();
const Q2_K_B: usize = GgmlType::Q2K.block_bytes();
const Q3_K_B: usize = GgmlType::Q3K.block_bytes();
const Q4_K_B: usize = GgmlType::Q4K.block_bytes();
const Q5_K_B: usize = GgmlType::Q5K.block_bytes();
const Q6_K_B: usize = GgmlType::Q6K.block_bytes();
const Q8_K_B: usize = GgmlType::Q8K.block_bytes();
const IQ2_XXS_B: usize = GgmlType::IQ2_XXS.block_bytes();
const IQ2_XS_B: usize = GgmlType::IQ2_XS.block_bytes();
const IQ2_S_B: usize = GgmlType::IQ2_S.block_bytes();
const IQ3_XXS_B: usize = GgmlType::IQ3_XXS.block_bytes();
const IQ3_S_B: usize = GgmlType::IQ3_S.block_bytes();
const IQ1_S_B: usize = GgmlType::IQ1_S.block_bytes();
const IQ4_XS_B: usize = GgmlType::IQ4_XS.block_bytes();
const IQ4_NL_B: usize = GgmlType::IQ4_NL.block_bytes();
const MXFP4_B: usize = GgmlType::MXFP4.block_bytes();
const IQ1_M_B: usize = GgmlType::IQ1_M.block_bytes();
const TQ1_0_B: usize = GgmlType::TQ1_0.block_bytes();
const TQ2_0_B: usize = GgmlType::TQ2_0.block_bytes();
const NVFP4_B: usize = GgmlType::NVFP4.block_bytes();
const Q1_0_B: usize = GgmlType::Q1_0.block_bytes();
const Q2_0_B: usize = GgmlType::Q2_0.block_bytes();
/// `IQ1S_DELTA` (ggml-common.h:1132).
const IQ1S_DELTA: f32 = 0.125;

// ---------------------------------------------------------------------------------------------
// helpers (always inlined into the `#[target_feature]` kernels that call them)

#[inline(always)]
unsafe fn f16_at(p: *const u8) -> f32 {
    // SAFETY: caller guarantees 2 readable bytes at p.
    let h = unsafe { std::ptr::read_unaligned(p as *const u16) } as u32;
    // Integer and scalar-float steps, not F16C: for a one-lane `_mm_cvtph_ps` LLVM emits a
    // `vpinsrw` merging into whatever register it likes, once an FMA accumulator, which put
    // the conversion on the loop-carried chain (IQ4_NL ran at half speed). Exact: the f16's
    // exponent rebased and mantissa widened (normal f16s), the mantissa times 2^-24 (subnormal
    // ones), inf/NaN apart. No step has a subnormal operand: scaling the f16's bits as a
    // subnormal f32 by 2^112, as this did before, took a microcode assist per subnormal `d` —
    // most Q6_K blocks' (`d` ≈ max / 4096) — and 44% of the Q6_K kernel's time (Zen 4).
    let e = h & 0x7c00;
    let mag = if e == 0 {
        (h & 0x3ff) as f32 * f32::from_bits(0x3380_0000)
    } else if e == 0x7c00 {
        f32::from_bits(0x7f80_0000 | ((h & 0x3ff) << 13))
    } else {
        f32::from_bits(((h & 0x7fff) << 13) + 0x3800_0000)
    };
    f32::from_bits(mag.to_bits() | ((h & 0x8000) << 16))
}

/// Two f16 fields converted by one `vcvtph2ps` (both lanes used, so no partial-register merge).
#[inline(always)]
unsafe fn f16_pair(p: *const u8, q: *const u8) -> (f32, f32) {
    // SAFETY: caller guarantees 2 readable bytes at p and q; F16C is enabled in every caller.
    unsafe {
        let (x, y) = (std::ptr::read_unaligned(p as *const u16), std::ptr::read_unaligned(q as *const u16));
        let v = _mm_cvtph_ps(_mm_cvtsi32_si128((x as u32 | (y as u32) << 16) as i32));
        (_mm_cvtss_f32(v), _mm_cvtss_f32(_mm_movehdup_ps(v)))
    }
}

#[inline(always)]
unsafe fn f32_to_f16_bits(x: f32) -> u16 {
    // SAFETY: register-only F16C intrinsic; callers enable F16C.
    unsafe { _mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(x), _MM_FROUND_TO_NEAREST_INT), 0) as u16 }
}

#[inline(always)]
unsafe fn f32_at(p: *const u8) -> f32 {
    // SAFETY: caller guarantees 4 readable bytes at p.
    unsafe { std::ptr::read_unaligned(p as *const f32) }
}

/// How far ahead of the current block the decode kernels (one activation row) prefetch
/// weights, in bytes: into the rows after the current one, far enough that DRAM latency is
/// covered, as the AVX-512 kernels do (`avx512::PREFETCH`).
const PREFETCH: usize = 8192;

/// In decode (`R == 1`), prefetches the weight bytes `PREFETCH` ahead of the block at `wb`
/// (`WB` bytes): every line of a block of 64 bytes or more; for smaller blocks the line the
/// far block starts in (consecutive blocks then touch every line). A chunk's rows are one
/// ascending stream in memory, so this runs ahead of it into the next rows. With several
/// activation rows (prefill tiles re-read a chunk from L1/L2) nothing is prefetched. Into L2
/// (`T1`), not L1: the 1.5B model's generation on an Intel Xeon, two threads, 26.2–27.2 →
/// 28.2–28.6 tok/s at AVX2 and 27.5–28.0 → 29.4–29.9 at AVX-512 (whose interleaved Q4_K kernel
/// is this level's); the 0.5B's unchanged.
#[inline(always)]
unsafe fn prefetch_decode<const R: usize, const WB: usize>(wb: *const u8) {
    if R == 1 {
        let mut l = 0;
        while l < WB {
            // SAFETY: a prefetch never faults, wherever it points.
            unsafe { _mm_prefetch::<_MM_HINT_T1>(wb.wrapping_add(PREFETCH + l) as *const i8) };
            l += 64;
        }
    }
}

/// While a panel's block `ib` is unpacked from `ROWS` rows (`w + j * w_stride`, blocks of `WB`
/// bytes): prefetches the lines of the next `ROWS` rows that fall to this block, in ascending
/// order. The rows are one stream in memory (a chunk is one panel or a few), and short
/// interleaved row streams leave the hardware prefetcher behind: with this, 8-sequence batched
/// decode of the 0.5B model (AVX-512 Q5_0/Q8_0 panels, 16 rows) went from 236 to 330 tokens/s.
/// (SSE's prefetch: every x86-64 level.)
#[inline(always)]
pub(crate) unsafe fn prefetch_next_panel<const ROWS: usize, const WB: usize>(w: *const u8, w_stride: usize, ib: usize) {
    let span = ROWS * w_stride;
    let lines_per_block = (ROWS * WB).div_ceil(64);
    for k in 0..lines_per_block {
        let at = (ib * lines_per_block + k) * 64;
        if at < span {
            // SAFETY: a prefetch never faults, wherever it points.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(w.wrapping_add(span + at) as *const i8) };
        }
    }
}

#[inline(always)]
unsafe fn load256(p: *const u8) -> __m256i {
    // SAFETY: caller guarantees 32 readable bytes at p.
    unsafe { _mm256_loadu_si256(p as *const __m256i) }
}

/// `hsum_float_8`: ((l0+l4) + (l2+l6)) + ((l1+l5) + (l3+l7)).
#[inline(always)]
unsafe fn hsum_float_8(x: __m256) -> f32 {
    // SAFETY: register-only AVX intrinsics; callers enable AVX2.
    unsafe {
        let mut res = _mm_add_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
        res = _mm_add_ps(res, _mm_movehl_ps(res, res));
        res = _mm_add_ss(res, _mm_movehdup_ps(res));
        _mm_cvtss_f32(res)
    }
}

/// 32 nibbles of 16 bytes: low nibbles are elements 0..16, high nibbles 16..32.
#[inline(always)]
unsafe fn bytes_from_nibbles_32(p: *const u8) -> __m256i {
    // SAFETY: caller guarantees 16 readable bytes at p.
    unsafe {
        // the 16 bytes in both halves (one load), the high half's shifted by a nibble
        let both = _mm256_broadcastsi128_si256(_mm_loadu_si128(p as *const __m128i));
        _mm256_and_si256(_mm256_set1_epi8(0x0f), _mm256_srlv_epi64(both, _mm256_set_epi64x(4, 4, 0, 0)))
    }
}

/// Byte `j` = 0xff if bit `j` of `x` is set, else 0.
#[inline(always)]
unsafe fn bytes_from_bits_32(x: u32) -> __m256i {
    // SAFETY: register-only AVX2 intrinsics.
    unsafe {
        let shuf_mask = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0x0000000000000000);
        let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(x as i32), shuf_mask);
        let bit_mask = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe_u64 as i64);
        let bytes = _mm256_or_si256(bytes, bit_mask);
        _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1))
    }
}

/// Per 32-bit lane: sum of 4 products of unsigned `ax` bytes and signed `sy` bytes.
#[inline(always)]
unsafe fn mul_sum_us8_pairs(ax: __m256i, sy: __m256i) -> __m256i {
    // SAFETY: register-only AVX2 intrinsics.
    unsafe { _mm256_madd_epi16(_mm256_set1_epi16(1), _mm256_maddubs_epi16(ax, sy)) }
}

// ---------------------------------------------------------------------------------------------
// legacy formats against Q8_0 / Q8_1

/// Shared body of Q4_0 / Q5_0 / Q8_0 × Q8_0 (raw or prepared activation rows): `unpack(w_block)`
/// gives the signed int8 quants, `block(w_block)` what the block gives every activation row
/// (its scale), `act(that, w_block, activation row, ib)` the row's 32 quants and `d_w · d_a`.
#[inline(always)]
unsafe fn dot_signed<const R: usize, const WB: usize, B: Copy>(
    nb: usize,
    w: *const u8,
    (a, a_stride): (*const u8, usize),
    out: *mut f32,
    out_stride: usize,
    unpack: impl Fn(*const u8) -> __m256i,
    block: impl Fn(*const u8) -> B,
    act: impl Fn(B, *const u8, *const u8, usize) -> (__m256i, __m256),
) {
    // SAFETY: see the module docs; all pointer offsets stay inside the caller's blocks.
    unsafe {
        let mut acc = [_mm256_setzero_ps(); R];
        for ib in 0..nb {
            let wb = w.add(ib * WB);
            prefetch_decode::<R, WB>(wb);
            let bw = block(wb);
            let qx = unpack(wb);
            let ax = _mm256_sign_epi8(qx, qx);
            for r in 0..R {
                let (qy, d) = act(bw, wb, a.add(r * a_stride), ib);
                let q = _mm256_cvtepi32_ps(mul_sum_us8_pairs(ax, _mm256_sign_epi8(qy, qx)));
                acc[r] = _mm256_fmadd_ps(d, q, acc[r]);
            }
        }
        for r in 0..R {
            *out.add(r * out_stride) = hsum_float_8(acc[r]);
        }
    }
}

/// [`dot_signed`] on raw Q8_0 activation rows.
#[inline(always)]
unsafe fn dot_signed_q8_0<const R: usize, const WB: usize>(nb: usize, w: *const u8, a: *const u8, a_stride: usize, out: *mut f32, out_stride: usize, unpack: impl Fn(*const u8) -> __m256i) {
    // SAFETY: forwarded contract.
    unsafe {
        dot_signed::<R, WB, ()>(nb, w, (a, a_stride), out, out_stride, unpack, |_| (), |(), wb, ar, ib| {
            let ab = ar.add(ib * Q8_0_B);
            // both scales by one vcvtph2ps (the scalar conversion cost ~20 instructions a block)
            let (dw, da) = f16_pair(wb, ab);
            (load256(ab.add(2)), _mm256_set1_ps(dw * da))
        })
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_q8_0<const R: usize>(nb: usize, w: *const u8, a: *const u8, a_stride: usize, out: *mut f32, out_stride: usize) {
    // SAFETY: forwarded contract.
    unsafe { dot_signed_q8_0::<R, Q8_0_B>(nb, w, a, a_stride, out, out_stride, |b| unpack_q8_0(b)) }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_q4_0<const R: usize>(nb: usize, w: *const u8, a: *const u8, a_stride: usize, out: *mut f32, out_stride: usize) {
    // SAFETY: forwarded contract.
    unsafe { dot_signed_q8_0::<R, Q4_0_B>(nb, w, a, a_stride, out, out_stride, |b| unpack_q4_0(b)) }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_q5_0<const R: usize>(nb: usize, w: *const u8, a: *const u8, a_stride: usize, out: *mut f32, out_stride: usize) {
    // SAFETY: forwarded contract.
    unsafe { dot_signed_q8_0::<R, Q5_0_B>(nb, w, a, a_stride, out, out_stride, |b| unpack_q5_0(b)) }
}

/// Shared body of Q4_1 / Q5_1 × Q8_1: unsigned quants, `summs += m * s`.
#[inline(always)]
unsafe fn dot_unsigned_q8_1<const R: usize, const WB: usize>(
    nb: usize,
    w: *const u8,
    a: *const u8,
    a_stride: usize,
    out: *mut f32,
    out_stride: usize,
    unpack: impl Fn(*const u8) -> __m256i,
) {
    // SAFETY: see the module docs.
    unsafe {
        let mut acc = [_mm256_setzero_ps(); R];
        let mut summs = [0f32; R];
        for ib in 0..nb {
            let wb = w.add(ib * WB);
            prefetch_decode::<R, WB>(wb);
            let (dw, mw) = f16_pair(wb, wb.add(2));
            let qx = unpack(wb);
            for r in 0..R {
                let ab = a.add(r * a_stride + ib * Q8_1_B);
                let (da, sa) = f16_pair(ab, ab.add(2));
                summs[r] = mw.mul_add(sa, summs[r]);
                let d = _mm256_set1_ps(dw * da);
                let qy = load256(ab.add(4));
                let q = _mm256_cvtepi32_ps(mul_sum_us8_pairs(qx, qy));
                acc[r] = _mm256_fmadd_ps(d, q, acc[r]);
            }
        }
        for r in 0..R {
            *out.add(r * out_stride) = hsum_float_8(acc[r]) + summs[r];
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_q4_1<const R: usize>(nb: usize, w: *const u8, a: *const u8, a_stride: usize, out: *mut f32, out_stride: usize) {
    // SAFETY: forwarded contract.
    unsafe { dot_unsigned_q8_1::<R, Q4_1_B>(nb, w, a, a_stride, out, out_stride, |b| bytes_from_nibbles_32(b.add(4))) }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_q5_1<const R: usize>(nb: usize, w: *const u8, a: *const u8, a_stride: usize, out: *mut f32, out_stride: usize) {
    // SAFETY: forwarded contract.
    unsafe {
        dot_unsigned_q8_1::<R, Q5_1_B>(nb, w, a, a_stride, out, out_stride, |b| unsigned_q5(b.add(4), b.add(8)))
    }
}

// ---------------------------------------------------------------------------------------------
// Q4_0 / Q5_0 / Q8_0 against prepared Q8_0 activations (decode several weight rows per pass,
// prefill tiles): the activation row's quants 32-byte aligned and its scales as f32, so the
// per-(block, row) work is the integer sum, one multiply and one FMA. Bit for bit the
// reference: each output keeps its own 8-lane accumulator and the block's `d_w · d_a`.

/// Bytes of a prepared Q8_0 activation row of `nb` blocks: `nb` runs of 32 quants (32-byte
/// aligned: no load straddles two cache lines), then `nb` f32 scales; padded to 64 bytes.
pub fn prep_bytes_q8_0(nb: usize) -> usize {
    (nb * 36).next_multiple_of(64)
}

/// Prepares one Q8_0 activation row (`nb` blocks at `act`) into `prep` (see [`prep_bytes_q8_0`]).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn prep_q8_0(nb: usize, act: *const u8, prep: *mut u8) {
    // SAFETY: the caller provides nb blocks at act and prep_bytes_q8_0(nb) bytes at prep,
    // 64-byte aligned.
    unsafe {
        let ds = prep.add(nb * 32) as *mut f32;
        for ib in 0..nb {
            let b = act.add(ib * Q8_0_B);
            _mm256_store_si256(prep.add(32 * ib) as *mut __m256i, load256(b.add(2)));
            *ds.add(ib) = crate::quant::f16_to_f32(std::ptr::read_unaligned(b as *const u16));
        }
    }
}

/// The f32 scale of prepared activation block `ib` (of `nb` blocks of `STEP` bytes: 32 for
/// [`prep_q8_0`]'s rows, 64 for [`prep_q8_0_off`]'s), broadcast.
#[inline(always)]
unsafe fn prepped_d<const STEP: usize>(a: *const u8, nb: usize, ib: usize) -> __m256 {
    // SAFETY: the caller's prepared row holds nb scales after the blocks.
    unsafe { _mm256_broadcast_ss(&*(a.add(nb * STEP + 4 * ib) as *const f32)) }
}

/// A block's f16 scale at `p`, converted exactly and broadcast to 8 lanes (a full-register
/// `vcvtph2ps`, so nothing merges into an accumulator's register).
#[inline(always)]
unsafe fn f16_splat(p: *const u8) -> __m256 {
    // SAFETY: caller guarantees 2 readable bytes at p; F16C is enabled in every caller.
    unsafe { _mm256_cvtph_ps(_mm_set1_epi16(std::ptr::read_unaligned(p as *const i16))) }
}

/// [`dot_signed`] on prepared activation rows (`a + i * a_stride`).
#[inline(always)]
unsafe fn dot_signed_prepped<const R: usize, const WB: usize>(nb: usize, w: *const u8, a: *const u8, a_stride: usize, out: *mut f32, out_stride: usize, unpack: impl Fn(*const u8) -> __m256i) {
    // SAFETY: forwarded contract; `a` rows are prepared rows of nb blocks.
    unsafe {
        dot_signed::<R, WB, __m256>(nb, w, (a, a_stride), out, out_stride, unpack, |wb| f16_splat(wb), |dw, _, ar, ib| {
            (_mm256_load_si256(ar.add(32 * ib) as *const __m256i), _mm256_mul_ps(dw, prepped_d::<32>(ar, nb, ib)))
        })
    }
}

/// `P` weight rows (`w + j * w_stride`, `nb` blocks of `WB` bytes) against one prepared
/// activation row; results to `out[j]`. `OFF`: `unpack` gives a block's quants unsigned and the
/// row was prepared by [`prep_q8_0_off`] (the offset's share subtracted per lane); else signed
/// quants against a [`prep_q8_0`] row (the sign trick). The rows are one ascending stream in
/// memory, which is prefetched `PREFETCH` bytes ahead, a few lines per block.
#[inline(always)]
unsafe fn gemv_prepped<const P: usize, const WB: usize, const OFF: bool>(nb: usize, w: *const u8, w_stride: usize, prep: *const u8, out: *mut f32, unpack: impl Fn(*const u8) -> __m256i) {
    const { assert!(P == 2 || P == 4) };
    // SAFETY: see the module docs; prep is a prepared row of nb blocks.
    unsafe {
        let span = P * w_stride;
        let lines_per_block = (P * WB).div_ceil(64);
        let lane: [__m256i; P] = std::array::from_fn(|j| _mm256_set1_epi32(j as i32));
        let step = if OFF { 64 } else { 32 };
        let da = prep.add(nb * step) as *const f32;
        let mut acc = [_mm256_setzero_ps(); P];
        for ib in 0..nb {
            for k in 0..lines_per_block {
                let at = (ib * lines_per_block + k) * 64;
                if at < span {
                    _mm_prefetch::<_MM_HINT_T0>(w.wrapping_add(PREFETCH + at) as *const i8);
                }
            }
            let row = |j: usize| w.add(j * w_stride + ib * WB);
            // the P rows' scales by one conversion, times the activation's
            let h = |j: usize| std::ptr::read_unaligned(row(j) as *const u16) as u64;
            let bits = if P == 4 { h(0) | h(1) << 16 | h(2) << 32 | h(3) << 48 } else { h(0) | h(1) << 16 };
            let ds = _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi64_si128(bits as i64)), _mm_set1_ps(*da.add(ib)));
            let ds = _mm256_castps128_ps256(ds);
            let pa = prep.add(step * ib);
            for j in 0..P {
                let qx = unpack(row(j));
                let q = if OFF {
                    off_block_sum(qx, pa)
                } else {
                    let qy = _mm256_load_si256(pa as *const __m256i);
                    _mm256_cvtepi32_ps(mul_sum_us8_pairs(_mm256_sign_epi8(qx, qx), _mm256_sign_epi8(qy, qx)))
                };
                acc[j] = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(ds, lane[j]), q, acc[j]);
            }
        }
        for j in 0..P {
            *out.add(j) = hsum_float_8(acc[j]);
        }
    }
}

/// Signed quants of a Q4_0 block.
#[inline(always)]
unsafe fn unpack_q4_0(b: *const u8) -> __m256i {
    // SAFETY: 16 nibble bytes follow the 2-byte scale.
    unsafe { _mm256_sub_epi8(bytes_from_nibbles_32(b.add(2)), _mm256_set1_epi8(8)) }
}

/// Signed quants of a Q5_0 block.
#[inline(always)]
unsafe fn unpack_q5_0(b: *const u8) -> __m256i {
    // SAFETY: qh (4 bytes) and 16 nibble bytes follow the scale.
    unsafe {
        let qh = std::ptr::read_unaligned(b.add(2) as *const u32);
        let bx = bytes_from_nibbles_32(b.add(6));
        // (nibble | 0xf0) = nibble - 16 where the 5th bit is clear
        let hi = _mm256_andnot_si256(bytes_from_bits_32(qh), _mm256_set1_epi8(0xf0u8 as i8));
        _mm256_or_si256(bx, hi)
    }
}

/// Signed quants of a Q8_0 block.
#[inline(always)]
unsafe fn unpack_q8_0(b: *const u8) -> __m256i {
    // SAFETY: 32 quant bytes follow the 2-byte scale.
    unsafe { load256(b.add(2)) }
}

/// The prepared-row kernels of a type: `$dot` for 1–8 activation rows (`$dot_body`), `$gemv`
/// for 2 or 4 weight rows (`gemv_prepped` with `OFF = $off`).
macro_rules! prepped_rows {
    ($dot:ident, $gemv:ident, $wb:expr, $unpack:expr, $dot_body:ident, $off:literal) => {
        #[target_feature(enable = "avx2,fma,f16c")]
        pub unsafe fn $dot<const R: usize>(nb: usize, w: *const u8, a: *const u8, a_stride: usize, out: *mut f32, out_stride: usize) {
            // SAFETY: forwarded contract (prepared activation rows).
            unsafe { $dot_body::<R, { $wb }>(nb, w, a, a_stride, out, out_stride, |b| $unpack(b)) }
        }

        #[target_feature(enable = "avx2,fma,f16c")]
        pub unsafe fn $gemv<const P: usize>(nb: usize, w: *const u8, w_stride: usize, prep: *const u8, out: *mut f32) {
            // SAFETY: forwarded contract (a prepared activation row).
            unsafe { gemv_prepped::<P, { $wb }, $off>(nb, w, w_stride, prep, out, |b| $unpack(b)) }
        }
    };
}

prepped_rows!(dot_q8_0_prepped, gemv_q8_0, Q8_0_B, unpack_q8_0, dot_signed_prepped, false);

// Q4_0 / Q5_0 against a Q8_0 activation row prepared with its corrections: the weights' quants
// taken unsigned (no sign trick: one `maddubs` of the stored quants against the activation),
// the offset's share subtracted per 32-bit lane — the reference's integers, so its bits.

/// Bytes of a Q8_0 activation row prepared with corrections ([`prep_q8_0_off`]): per block its
/// 32 quants, then per 32-bit lane `g` `OFF · (sum of quants 4g .. 4g + 4)` (64 bytes a block);
/// then `nb` f32 scales; padded to 64 bytes.
pub fn prep_bytes_q8_0_off(nb: usize) -> usize {
    (nb * 68).next_multiple_of(64)
}

/// Prepares one Q8_0 activation row (`nb` blocks at `act`) for weights whose quants are stored
/// with an offset of `OFF` (Q4_0: 8, Q5_0: 16) into `prep` (see [`prep_bytes_q8_0_off`]).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn prep_q8_0_off<const OFF: i32>(nb: usize, act: *const u8, prep: *mut u8) {
    // SAFETY: the caller provides nb blocks at act and prep_bytes_q8_0_off(nb) bytes at prep,
    // 64-byte aligned.
    unsafe {
        let ds = prep.add(nb * 64) as *mut f32;
        for ib in 0..nb {
            let b = act.add(ib * Q8_0_B);
            let y = load256(b.add(2));
            let sums = mul_sum_us8_pairs(_mm256_set1_epi8(1), y);
            _mm256_store_si256(prep.add(64 * ib) as *mut __m256i, y);
            _mm256_store_si256(prep.add(64 * ib + 32) as *mut __m256i, _mm256_mullo_epi32(sums, _mm256_set1_epi32(OFF)));
            *ds.add(ib) = crate::quant::f16_to_f32(std::ptr::read_unaligned(b as *const u16));
        }
    }
}

/// The 8 lanes of one block's integer sum: `unsigned` quants against a prepared row's block at
/// `pa` ([`prep_q8_0_off`]), less the offset's share; as f32 (exact).
#[inline(always)]
unsafe fn off_block_sum(unsigned: __m256i, pa: *const u8) -> __m256 {
    // SAFETY: the caller's prepared block (64 bytes, 32-byte aligned); AVX2 checked by the callers.
    unsafe {
        let qy = _mm256_load_si256(pa as *const __m256i);
        let corr = _mm256_load_si256(pa.add(32) as *const __m256i);
        _mm256_cvtepi32_ps(_mm256_sub_epi32(mul_sum_us8_pairs(unsigned, qy), corr))
    }
}

/// One weight row (`w`, `nb` blocks of `WB` bytes, its quants unsigned by `unpack`) against `R` rows
/// prepared by [`prep_q8_0_off`] (`a + i * a_stride`); result `i` to `out + i * out_stride`.
#[inline(always)]
unsafe fn dot_off_prepped<const R: usize, const WB: usize>(nb: usize, w: *const u8, a: *const u8, a_stride: usize, out: *mut f32, out_stride: usize, unpack: impl Fn(*const u8) -> __m256i) {
    // SAFETY: see the module docs; `a` rows are prepared rows of nb blocks.
    unsafe {
        let mut acc = [_mm256_setzero_ps(); R];
        for ib in 0..nb {
            let wb = w.add(ib * WB);
            prefetch_decode::<R, WB>(wb);
            let dw = f16_splat(wb);
            let u = unpack(wb);
            for (r, acc) in acc.iter_mut().enumerate() {
                let ar = a.add(r * a_stride);
                let d = _mm256_mul_ps(dw, prepped_d::<64>(ar, nb, ib));
                *acc = _mm256_fmadd_ps(d, off_block_sum(u, ar.add(64 * ib)), *acc);
            }
        }
        for r in 0..R {
            *out.add(r * out_stride) = hsum_float_8(acc[r]);
        }
    }
}

prepped_rows!(dot_q4_0_prepped, gemv_q4_0, Q4_0_B, |b: *const u8| bytes_from_nibbles_32(b.add(2)), dot_off_prepped, true);
prepped_rows!(dot_q5_0_prepped, gemv_q5_0, Q5_0_B, |b: *const u8| unsigned_q5(b.add(2), b.add(6)), dot_off_prepped, true);

// ---------------------------------------------------------------------------------------------
// K-quants against Q8_K

/// The 8 6-bit scales and 8 6-bit mins of a Q4_K / Q5_K block (`get_scale_min_k4` for all j)
/// as 16-bit lanes, scale j in lane j of both 128-bit halves (for `_mm256_shuffle_epi8`), and
/// the mins as bytes 0..8, both from three 32-bit words (upstream's kmask steps).
#[inline(always)]
unsafe fn scales_mins_k4(p: *const u8) -> (__m256i, __m128i) {
    // SAFETY: caller guarantees 12 readable bytes at p; register-only intrinsics otherwise.
    unsafe {
        let (sc, mn) = super::k4_scales_mins(std::ptr::read_unaligned(p as *const [u32; 3]));
        let sc16 = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(sc as i64));
        (_mm256_broadcastsi128_si256(sc16), _mm_cvtsi64_si128(mn as i64))
    }
}

/// Shuffle masks that broadcast 16-bit lane `j` (of each 128-bit half) to all 8 lanes of a half.
#[inline(always)]
unsafe fn word_splats() -> [__m256i; 8] {
    // SAFETY: register-only AVX intrinsics; the callers checked AVX2.
    std::array::from_fn(|j| unsafe { _mm256_set1_epi16((2 * j as i16) | ((2 * j as i16 + 1) << 8)) })
}

/// The scaled quant products of one Q4_K / Q5_K block (`wb`, `QH`: Q5_K) with R Q8_K blocks
/// (`ab + r * a_stride`), exact in 32 bits: per activation row 8 lanes whose sum is the block's
/// sum over groups of scale × (quants · activation quants). `scales` as [`scales_mins_k4`]
/// gives them, `splat` from [`word_splats`].
#[inline(always)]
unsafe fn qk45_sumi<const R: usize, const QH: bool>(wb: *const u8, scales: __m256i, ab: *const u8, a_stride: usize, splat: &[__m256i; 8]) -> [__m256i; R] {
    // SAFETY: forwarded contract.
    unsafe {
        let mut sumi = [_mm256_setzero_si256(); R];
        for c in 0..4 {
            let p = qk45_sumi_pair::<R, QH>(wb, scales, ab, a_stride, splat, c);
            for r in 0..R {
                sumi[r] = _mm256_add_epi32(sumi[r], p[r]);
            }
        }
        sumi
    }
}

/// As [`qk45_sumi`] for groups 2c and 2c + 1 (elements 64c..64c + 64) only.
#[inline(always)]
unsafe fn qk45_sumi_pair<const R: usize, const QH: bool>(wb: *const u8, scales: __m256i, ab: *const u8, a_stride: usize, splat: &[__m256i; 8], c: usize) -> [__m256i; R] {
    let qs_off = if QH { 48 } else { 16 };
    // SAFETY: the caller's weight block and R activation blocks; AVX2 checked by the callers.
    unsafe {
        let m4 = _mm256_set1_epi8(0x0f);
        let one = _mm256_set1_epi8(1);
        let q4bits = load256(wb.add(qs_off + 32 * c));
        let mut q4l = _mm256_and_si256(q4bits, m4);
        let mut q4h = _mm256_and_si256(_mm256_srli_epi16(q4bits, 4), m4);
        if QH {
            // 5th bit of group g = 2c + h at bit g of qh[l]
            let hbits = load256(wb.add(16));
            let bl = _mm256_and_si256(_mm256_srl_epi16(hbits, _mm_cvtsi32_si128(2 * c as i32)), one);
            let bh = _mm256_and_si256(_mm256_srl_epi16(hbits, _mm_cvtsi32_si128(2 * c as i32 + 1)), one);
            q4l = _mm256_or_si256(q4l, _mm256_slli_epi16(bl, 4));
            q4h = _mm256_or_si256(q4h, _mm256_slli_epi16(bh, 4));
        }
        let sl = _mm256_shuffle_epi8(scales, splat[2 * c]);
        let sh = _mm256_shuffle_epi8(scales, splat[2 * c + 1]);
        // a loop, not `array::from_fn`: a closure handed to a function that is not inlined (it
        // was not for 3 or more rows) is compiled without AVX2, and every intrinsic in it
        // became a call
        let mut out = [_mm256_setzero_si256(); R];
        for (r, o) in out.iter_mut().enumerate() {
            let aq = ab.add(r * a_stride + 4 + 64 * c);
            let pl = _mm256_madd_epi16(sl, _mm256_maddubs_epi16(q4l, load256(aq)));
            let ph = _mm256_madd_epi16(sh, _mm256_maddubs_epi16(q4h, load256(aq.add(32))));
            *o = _mm256_add_epi32(pl, ph);
        }
        out
    }
}

/// Q4_K and Q5_K × Q8_K. `QH`: Q5_K (5th bits in `qh`), else Q4_K. The group scales are
/// selected by byte shuffles of the block's scale vector; the mins' products with the
/// activation's 16-element sums by one `madd` of the mins doubled to 16-bit pairs.
#[inline(always)]
unsafe fn dot_qk_45<const R: usize, const QH: bool, const TILED: bool>(nb: usize, w: *const u8, a: *const u8, a_stride: usize, out: *mut f32, out_stride: usize) {
    let wbytes = if QH { Q5_K_B } else { Q4_K_B };
    // SAFETY: see the module docs.
    unsafe {
        let mut tiled = [0f32; R];
        let mut acc = [_mm256_setzero_ps(); R];
        let mut acc_m = [_mm_setzero_ps(); R];
        let mut summs = [0f32; R];
        let splat = word_splats();
        // mins byte j to 16-bit lanes 2j and 2j + 1
        let dup = _mm_setr_epi8(0, -1, 0, -1, 1, -1, 1, -1, 2, -1, 2, -1, 3, -1, 3, -1);
        let dup_hi = _mm_setr_epi8(4, -1, 4, -1, 5, -1, 5, -1, 6, -1, 6, -1, 7, -1, 7, -1);
        for ib in 0..nb {
            let wb = w.add(ib * wbytes);
            if QH {
                prefetch_decode::<R, Q5_K_B>(wb);
            } else {
                prefetch_decode::<R, Q4_K_B>(wb);
            }
            let (wd, wdmin) = f16_pair(wb, wb.add(2));
            let (scales, mins8) = scales_mins_k4(wb.add(4));
            let mins = _mm256_set_m128i(_mm_shuffle_epi8(mins8, dup_hi), _mm_shuffle_epi8(mins8, dup));
            let sumi = qk45_sumi::<R, QH>(wb, scales, a.add(ib * Q8_K_B), a_stride, &splat);
            for r in 0..R {
                let ab = a.add(r * a_stride + ib * Q8_K_B);
                if TILED {
                    // the tiled matmul's: the scaled quant sum and the mins' sum reduced exactly
                    // to two integers, r = d · s1, r = fnmadd(dmin, s2, r), fma(r, d_a, acc)
                    let t = _mm256_madd_epi16(load256(ab.add(4 + QK_K)), mins);
                    let h = _mm256_hadd_epi32(sumi[r], t);
                    let q = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
                    // [isum, imin, isum, imin]
                    let q = _mm_hadd_epi32(q, q);
                    let (s1, s2) = (_mm_cvtsi128_si32(q), _mm_extract_epi32::<1>(q));
                    let rr = (-wdmin).mul_add(s2 as f32, wd * s1 as f32);
                    tiled[r] = rr.mul_add(f32_at(ab), tiled[r]);
                    continue;
                }
                let yd = f32_at(ab);
                // lane j: m[j] * (bs[2j] + bs[2j+1]); prod[k] = lane 2k + lane 2k+1
                let t = _mm256_madd_epi16(load256(ab.add(4 + QK_K)), mins);
                let h = _mm256_hadd_epi32(t, t); // [p0, p1, p0, p1 | p2, p3, p2, p3]
                let prod = _mm_unpacklo_epi64(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
                let dmin = -yd * wdmin;
                if QH {
                    let s = _mm_add_epi32(prod, _mm_shuffle_epi32(prod, 0b01_00_11_10));
                    let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b10_11_00_01));
                    summs[r] = dmin.mul_add(_mm_cvtsi128_si32(s) as f32, summs[r]);
                } else {
                    acc_m[r] = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(prod), acc_m[r]);
                }
                let d = _mm256_set1_ps(yd * wd);
                acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sumi[r]), acc[r]);
            }
        }
        for r in 0..R {
            if TILED {
                *out.add(r * out_stride) = tiled[r];
                continue;
            }
            let extra = if QH {
                summs[r]
            } else {
                let mut m = [0f32; 4];
                _mm_storeu_ps(m.as_mut_ptr(), acc_m[r]);
                (m[0] + m[2]) + (m[1] + m[3])
            };
            *out.add(r * out_stride) = hsum_float_8(acc[r]) + extra;
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_q4_k<const R: usize>(nb: usize, w: *const u8, a: *const u8, a_stride: usize, out: *mut f32, out_stride: usize) {
    // SAFETY: forwarded contract.
    unsafe { dot_qk_45::<R, false, false>(nb, w, a, a_stride, out, out_stride) }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_q5_k<const R: usize>(nb: usize, w: *const u8, a: *const u8, a_stride: usize, out: *mut f32, out_stride: usize) {
    // SAFETY: forwarded contract.
    unsafe { dot_qk_45::<R, true, false>(nb, w, a, a_stride, out, out_stride) }
}

/// Q4_K × Q8_K in the order of llama.cpp's repacked kernels (`quant::vec_dot_repacked`): per
/// super-block the scaled quant sum and the mins' sum reduced exactly to two 32-bit integers,
/// converted, and added by one FMA with (d · d_a, dmin · d_a) into the two lanes of one
/// accumulator; scales part minus mins part at the end.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_q4_k_repacked<const R: usize>(nb: usize, w: *const u8, a: *const u8, a_stride: usize, out: *mut f32, out_stride: usize) {
    // SAFETY: see the module docs.
    unsafe {
        let mut acc = [_mm_setzero_ps(); R];
        let splat = word_splats();
        // mins byte j to 16-bit lanes 2j and 2j + 1
        let dup = _mm_setr_epi8(0, -1, 0, -1, 1, -1, 1, -1, 2, -1, 2, -1, 3, -1, 3, -1);
        let dup_hi = _mm_setr_epi8(4, -1, 4, -1, 5, -1, 5, -1, 6, -1, 6, -1, 7, -1, 7, -1);
        for ib in 0..nb {
            let wb = w.add(ib * Q4_K_B);
            prefetch_decode::<R, Q4_K_B>(wb);
            // [d, dmin, 0, 0]
            let dd = _mm_cvtph_ps(_mm_cvtsi32_si128(std::ptr::read_unaligned(wb as *const i32)));
            let (scales, mins8) = scales_mins_k4(wb.add(4));
            let mins = _mm256_set_m128i(_mm_shuffle_epi8(mins8, dup_hi), _mm_shuffle_epi8(mins8, dup));
            let sumi = qk45_sumi::<R, false>(wb, scales, a.add(ib * Q8_K_B), a_stride, &splat);
            for r in 0..R {
                let ab = a.add(r * a_stride + ib * Q8_K_B);
                // lanes summing to the mins' products with the activation's group sums
                let t = _mm256_madd_epi16(load256(ab.add(4 + QK_K)), mins);
                let h = _mm256_hadd_epi32(sumi[r], t);
                let q = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
                // [isum, imin, isum, imin]
                let q = _mm_hadd_epi32(q, q);
                acc[r] = _mm_fmadd_ps(_mm_cvtepi32_ps(q), _mm_mul_ps(dd, _mm_set1_ps(f32_at(ab))), acc[r]);
            }
        }
        for r in 0..R {
            *out.add(r * out_stride) = _mm_cvtss_f32(_mm_sub_ss(acc[r], _mm_movehdup_ps(acc[r])));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Q4_K decode in the repacked GEMV's order: one activation row prepared once

/// Bytes of an activation row of `nb` Q8_K blocks prepared by [`prep_q8_k_row`].
pub fn krow_bytes(nb: usize) -> usize {
    (nb * (QK_K + 16 + 4)).next_multiple_of(64)
}

/// Prepares one Q8_K activation row (`nb` blocks at `a`) at `prep` (64-byte aligned,
/// [`krow_bytes`] long) for [`gemv_q4_k_repacked`]: the blocks' quants (`nb` × 256 bytes),
/// then each block's 8 group sums as i16 (`nb` × 16, |sum| <= 32 * 128: two blocks' in one
/// load), then each block's `d` (`nb` × 4).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn prep_q8_k_row(nb: usize, a: *const u8, prep: *mut u8) {
    // SAFETY: block ib writes prep[256ib..256ib+256] (32-byte aligned), prep[256nb+16ib..+16]
    // (16-byte aligned) and prep[272nb+4ib..+4], inside krow_bytes(nb); a holds nb blocks.
    unsafe {
        for ib in 0..nb {
            let ab = a.add(ib * Q8_K_B);
            for k in 0..8 {
                _mm256_store_si256(prep.add(ib * QK_K + 32 * k) as *mut __m256i, load256(ab.add(4 + 32 * k)));
            }
            let pairs = _mm256_madd_epi16(load256(ab.add(4 + QK_K)), _mm256_set1_epi16(1));
            let sums = _mm_packs_epi32(_mm256_castsi256_si128(pairs), _mm256_extracti128_si256(pairs, 1));
            _mm_store_si128(prep.add(nb * QK_K + 16 * ib) as *mut __m128i, sums);
            std::ptr::write(prep.add(nb * (QK_K + 16) + 4 * ib) as *mut f32, f32_at(ab));
        }
    }
}

/// Q4_K weights, N rows one after the other (`w + j * w_stride`), against an activation row
/// prepared by [`prep_q8_k_row`], in llama.cpp's repacked GEMV order: bit for bit
/// [`dot_q4_k_repacked`], with two blocks' integer reductions done together (the FMAs stay
/// one per block, in order).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn gemv_q4_k_repacked<const N: usize>(nb: usize, w: *const u8, w_stride: usize, prep: *const u8, out: *mut f32) {
    let (gs_at, d_at) = (nb * QK_K, nb * (QK_K + 16));
    // SAFETY: N rows of nb blocks at w + j * w_stride; a prepared row of nb blocks at prep
    // (64-byte aligned); N outputs at out.
    unsafe {
        // (the masks through black_box: with them known, LLVM turns each byte shuffle into an
        // extract and a broadcast, two instructions for one)
        let splat = std::hint::black_box(byte_splats());
        // block ib's [d, dmin] × the activation's d ([d, dmin, 0, 0]: lanes 2 and 3 of the
        // accumulator stay 0)
        let scale = |wb: *const u8, ib: usize| _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(std::ptr::read_unaligned(wb as *const i32))), _mm_set1_ps(f32_at(prep.add(d_at + 4 * ib))));
        for j in 0..N {
            let w = w.add(j * w_stride);
            let mut acc = _mm_setzero_ps();
            let mut ib = 0;
            while ib + 2 <= nb {
                let (w0, w1) = (w.add(ib * Q4_K_B), w.add((ib + 1) * Q4_K_B));
                let sm = scales_mins_k4_x2(w0.add(4), w1.add(4));
                prefetch_decode::<1, Q4_K_B>(w0);
                let u0 = q4_k_block_sums(w0, _mm256_permute2x128_si256::<0x00>(sm, sm), prep.add(ib * QK_K), prep.add(gs_at + 16 * ib), &splat);
                prefetch_decode::<1, Q4_K_B>(w1);
                let u1 = q4_k_block_sums(w1, _mm256_permute2x128_si256::<0x11>(sm, sm), prep.add((ib + 1) * QK_K), prep.add(gs_at + 16 * (ib + 1)), &splat);
                // [S0, M0, S1, M1]: each block's scaled quant sum and mins' sum
                let v = _mm_cvtepi32_ps(_mm_hadd_epi32(u0, u1));
                acc = _mm_fmadd_ps(v, scale(w0, ib), acc);
                acc = _mm_fmadd_ps(_mm_movehl_ps(v, v), scale(w1, ib + 1), acc);
                ib += 2;
            }
            if ib < nb {
                let wb = w.add(ib * Q4_K_B);
                let sm = scales_mins_k4_x2(wb.add(4), wb.add(4));
                let u = q4_k_block_sums(wb, sm, prep.add(ib * QK_K), prep.add(gs_at + 16 * ib), &splat);
                acc = _mm_fmadd_ps(_mm_cvtepi32_ps(_mm_hadd_epi32(u, u)), scale(wb, ib), acc);
            }
            *out.add(j) = _mm_cvtss_f32(_mm_sub_ss(acc, _mm_movehdup_ps(acc)));
        }
    }
}

/// Four Q4_K rows interleaved (`quant::interleave`: one group at `w`, `nb` super-blocks of 576
/// bytes; `w_stride` unused) against an activation row prepared by [`prep_q8_k_row`], in
/// llama.cpp's repacked GEMV order: bit for bit [`gemv_q4_k_repacked`] on the rows before
/// interleaving. Per 32-byte load 8 elements of two groups of all four rows: the 4 slices of a
/// chunk add up in i16 (at most 8 × 15 × 128 per lane), one `madd` applies the four rows'
/// scales, and the block's float steps run four rows per instruction — per row and block a
/// quarter of the one-row kernel's scale and reduction work.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn gemv_q4_k_r4(nb: usize, w: *const u8, _w_stride: usize, prep: *const u8, out: *mut f32) {
    const G: usize = 4 * Q4_K_B;
    let (gs_at, d_at) = (nb * QK_K, nb * (QK_K + 16));
    // SAFETY: one interleaved group of nb blocks at w; a prepared row of nb blocks at prep
    // (64-byte aligned); 4 outputs at out.
    unsafe {
        let masks = r4_masks();
        let (mut acc_s, mut acc_m) = (_mm_setzero_ps(), _mm_setzero_ps());
        for ib in 0..nb {
            let b = w.add(ib * G);
            // (the group is one ascending stream: without software prefetch the whole 1.5B
            // model's generation, two threads on an Intel Xeon, 17–20 → 22–26 tok/s with it into
            // L1, at AVX2 and AVX-512 alike; 4 and 16 KB ahead no better than 8)
            prefetch_decode::<1, G>(b);
            let y = prep.add(ib * QK_K);
            let (sc, mn01, mn23) = r4_scales_mins(b);
            let mut sumi = _mm256_setzero_si256();
            for c in 0..4 {
                sumi = _mm256_add_epi32(sumi, r4_chunk::<1>(b, [y], c, sc, &masks)[0]);
            }
            let g8 = _mm256_broadcastsi128_si256(_mm_load_si128(prep.add(gs_at + 16 * ib) as *const __m128i));
            let (isum, imin) = r4_block_sums(sumi, _mm256_madd_epi16(mn01, g8), _mm256_madd_epi16(mn23, g8));
            // the reference's per-row FMAs, four rows per instruction
            let dd = _mm256_cvtph_ps(_mm_loadu_si128(b as *const __m128i));
            let yd = _mm_set1_ps(f32_at(prep.add(d_at + 4 * ib)));
            acc_s = _mm_fmadd_ps(_mm_cvtepi32_ps(isum), _mm_mul_ps(_mm256_castps256_ps128(dd), yd), acc_s);
            acc_m = _mm_fmadd_ps(_mm_cvtepi32_ps(imin), _mm_mul_ps(_mm256_extractf128_ps(dd, 1), yd), acc_m);
        }
        _mm_storeu_ps(out, _mm_sub_ps(acc_s, acc_m));
    }
}

/// The shuffle masks of the interleaved Q4_K kernels: mask g takes, to i16 lane l of each half
/// of [`r4_scales_mins`]'s scales, byte 8 (l / 4) + g (the half's first or second row, group g).
/// Through black_box: with the masks known, LLVM splits each shuffle in two.
#[inline(always)]
unsafe fn r4_masks() -> [__m256i; 8] {
    // SAFETY: register-only AVX2 intrinsics on a local array; the callers checked AVX2.
    std::hint::black_box(std::array::from_fn(|g| unsafe {
        let m: [i8; 16] = std::array::from_fn(|i| if i % 2 == 1 { -1 } else { (8 * (i / 8) + g) as i8 });
        _mm256_broadcastsi128_si256(_mm_loadu_si128(m.as_ptr() as *const __m128i))
    }))
}

/// The block at `b` of an interleaved Q4_K group: its scales as bytes [rows 0, 1 | rows 2, 3]
/// (8 each), and its mins widened to i16, [row 0 | row 1] and [row 2 | row 3].
#[inline(always)]
unsafe fn r4_scales_mins(b: *const u8) -> (__m256i, __m256i, __m256i) {
    // SAFETY: one interleaved block (576 bytes) at b; AVX2 checked by the callers.
    unsafe {
        let sm01 = scales_mins_k4_x2(b.add(16), b.add(28));
        let sm23 = scales_mins_k4_x2(b.add(40), b.add(52));
        let (lo_rows, hi_rows) = (_mm256_permute2x128_si256::<0x20>(sm01, sm23), _mm256_permute2x128_si256::<0x31>(sm01, sm23));
        let mn = _mm256_unpackhi_epi64(lo_rows, hi_rows);
        (_mm256_unpacklo_epi64(lo_rows, hi_rows), _mm256_cvtepu8_epi16(_mm256_castsi256_si128(mn)), _mm256_cvtepu8_epi16(_mm256_extracti128_si256(mn, 1)))
    }
}

/// Chunk `c` (64 elements: groups 2c, 2c + 1) of the interleaved block at `b` against each of
/// `R` activations' 256 quants (`y[t]`), scaled by the groups' scales (`sc`, [`r4_masks`]):
/// i32 lanes 2j, 2j + 1 of the low half are row j's (j = 0, 1), of the high half row j + 2's;
/// exact. Each 32-byte load of quants is split into its nibbles once for all `R`. The 4 slices'
/// products add up in i16 (at most 8 × 15 × 128 per lane).
#[inline(always)]
unsafe fn r4_chunk<const R: usize>(b: *const u8, y: [*const u8; R], c: usize, sc: __m256i, masks: &[__m256i; 8]) -> [__m256i; R] {
    // SAFETY: one interleaved block at b, 256 quants at each y[t]; AVX2 checked by the callers.
    unsafe {
        let m4 = _mm256_set1_epi8(0x0f);
        let mut pl = [_mm256_setzero_si256(); R];
        let mut ph = [_mm256_setzero_si256(); R];
        for k in 0..4 {
            let x = load256(b.add(64 + (4 * c + k) * 32));
            let (xl, xh) = (_mm256_and_si256(x, m4), _mm256_and_si256(_mm256_srli_epi16::<4>(x), m4));
            for t in 0..R {
                let yl = _mm256_set1_epi64x(std::ptr::read_unaligned(y[t].add(64 * c + 8 * k) as *const i64));
                let yh = _mm256_set1_epi64x(std::ptr::read_unaligned(y[t].add(64 * c + 32 + 8 * k) as *const i64));
                pl[t] = _mm256_add_epi16(pl[t], _mm256_maddubs_epi16(xl, yl));
                ph[t] = _mm256_add_epi16(ph[t], _mm256_maddubs_epi16(xh, yh));
            }
        }
        let (sl, sh) = (_mm256_shuffle_epi8(sc, masks[2 * c]), _mm256_shuffle_epi8(sc, masks[2 * c + 1]));
        // (a loop, not a closure: a closure would not inherit the callers' target features)
        for t in 0..R {
            pl[t] = _mm256_add_epi32(_mm256_madd_epi16(pl[t], sl), _mm256_madd_epi16(ph[t], sh));
        }
        pl
    }
}

/// A block's [isum of rows 0..4] from its chunks' sum `s` ([`r4_chunk`]'s lanes), and [imin of
/// rows 0..4] from the mins' products with the group sums (`p01`, `p23`: `vpmaddwd` of
/// [`r4_scales_mins`]'s mins); exact.
#[inline(always)]
unsafe fn r4_block_sums(s: __m256i, p01: __m256i, p23: __m256i) -> (__m128i, __m128i) {
    // SAFETY: register-only AVX2 intrinsics; the callers checked AVX2.
    unsafe {
        let h = _mm256_hadd_epi32(s, s);
        let isum = _mm_unpacklo_epi64(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
        let x = _mm256_hadd_epi32(p01, p23);
        let x = _mm256_hadd_epi32(x, x);
        (isum, _mm_unpacklo_epi32(_mm256_castsi256_si128(x), _mm256_extracti128_si256(x, 1)))
    }
}

/// Four interleaved Q4_K rows (one group at `w`, as [`gemv_q4_k_r4`]) against `R` Q8_K
/// activation rows (`a + t * a_stride`); result (t, j) to `out + t * out_stride + j`. `GEMM`:
/// llama.cpp's repacked GEMM order (per pair of sub-blocks one FMA for the scales' part and one
/// for the mins', `quant::vec_dot_repacked` with `gemm`), else its GEMV order (per super-block);
/// bit for bit either way. Batched decode of an interleaved matrix: the block's scales and
/// mins are decoded, and each 32-byte load of quants split into its nibbles, once for the four
/// rows and every activation row.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_q4_k_r4<const R: usize, const GEMM: bool>(nb: usize, w: *const u8, a: *const u8, a_stride: usize, out: *mut f32, out_stride: usize) {
    const G: usize = 4 * Q4_K_B;
    // activation rows taken two at a time in the GEMM order ([`r4_gemm_pair`])
    let pairs = if GEMM { R / 2 } else { 0 };
    // SAFETY: one interleaved group of nb blocks at w; R rows of nb Q8_K blocks at a; outputs
    // (t, 0..4) at out.
    unsafe {
        let masks = r4_masks();
        let mut acc_s = [_mm_setzero_ps(); R];
        let mut acc_m = [_mm_setzero_ps(); R];
        // the pairs' accumulators: activation row 2p in the low half, 2p + 1 in the high
        let mut acc_s2 = [_mm256_setzero_ps(); 2];
        let mut acc_m2 = [_mm256_setzero_ps(); 2];
        for ib in 0..nb {
            let b = w.add(ib * G);
            let (sc, mn01, mn23) = r4_scales_mins(b);
            let dd = _mm256_cvtph_ps(_mm_loadu_si128(b as *const __m128i));
            // every activation row's chunk sums, the weights unpacked once for all
            let y: [*const u8; R] = std::array::from_fn(|t| a.add(t * a_stride + ib * Q8_K_B + 4));
            let chunks = [0, 1, 2, 3].map(|c| r4_chunk::<R>(b, y, c, sc, &masks));
            if pairs > 0 {
                // per chunk c, each row's two mins of it (a 32-bit lane), rows 0..4 in both halves
                // (loops, not closures: a closure would not inherit the target features)
                let mut mnc = [_mm256_setzero_si256(); 4];
                for (c, m) in mnc.iter_mut().enumerate() {
                    let i = c as i32;
                    let idx = _mm256_setr_epi32(i, 4 + i, i, 4 + i, i, 4 + i, i, 4 + i);
                    *m = _mm256_unpacklo_epi64(_mm256_permutevar8x32_epi32(mn01, idx), _mm256_permutevar8x32_epi32(mn23, idx));
                }
                let (d2, dmin2) = (_mm256_permute2f128_ps::<0x00>(dd, dd), _mm256_permute2f128_ps::<0x11>(dd, dd));
                for p in 0..pairs {
                    let ab = a.add(2 * p * a_stride + ib * Q8_K_B);
                    let mut sums = [_mm256_setzero_si256(); 4];
                    for (c, s) in sums.iter_mut().enumerate() {
                        *s = _mm256_hadd_epi32(chunks[c][2 * p], chunks[c][2 * p + 1]);
                    }
                    (acc_s2[p], acc_m2[p]) = r4_gemm_pair(sums, &mnc, d2, dmin2, ab, a_stride, acc_s2[p], acc_m2[p]);
                }
            }
            for t in 2 * pairs..R {
                let ab = a.add(t * a_stride + ib * Q8_K_B);
                let yd = _mm_set1_ps(f32_at(ab));
                let (ds, dm) = (_mm_mul_ps(_mm256_castps256_ps128(dd), yd), _mm_mul_ps(_mm256_extractf128_ps(dd, 1), yd));
                // the activation's 8 group sums (i16) in both halves
                let g8 = _mm256_broadcastsi128_si256(r4_group_sums(ab));
                // lane c of each row: the mins' part of chunk c (groups 2c, 2c + 1)
                let (p01, p23) = (_mm256_madd_epi16(mn01, g8), _mm256_madd_epi16(mn23, g8));
                let sumi: [__m256i; 4] = std::array::from_fn(|c| chunks[c][t]);
                if GEMM {
                    // per chunk: [isum of rows 0..4] and [imin of rows 0..4], one FMA each
                    let h01 = _mm256_hadd_epi32(sumi[0], sumi[1]);
                    let h23 = _mm256_hadd_epi32(sumi[2], sumi[3]);
                    // lanes of h: [c0 r0, c0 r1, c1 r0, c1 r1 | c0 r2, c0 r3, c1 r2, c1 r3]
                    // the mins' parts: a 4 × 4 transpose of [row j: chunks 0..4]
                    let (r0, r1) = (_mm256_castsi256_si128(p01), _mm256_extracti128_si256(p01, 1));
                    let (r2, r3) = (_mm256_castsi256_si128(p23), _mm256_extracti128_si256(p23, 1));
                    let (u0, u1) = (_mm_unpacklo_epi32(r0, r1), _mm_unpackhi_epi32(r0, r1));
                    let (u2, u3) = (_mm_unpacklo_epi32(r2, r3), _mm_unpackhi_epi32(r2, r3));
                    let imins = [_mm_unpacklo_epi64(u0, u2), _mm_unpackhi_epi64(u0, u2), _mm_unpacklo_epi64(u1, u3), _mm_unpackhi_epi64(u1, u3)];
                    for (c, &imin) in imins.iter().enumerate() {
                        let h = if c < 2 { h01 } else { h23 };
                        let (lo, hi) = (_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
                        // [r0, r1, r2, r3] of chunk c
                        let isum = if c % 2 == 0 { _mm_unpacklo_epi64(lo, hi) } else { _mm_unpackhi_epi64(lo, hi) };
                        acc_s[t] = _mm_fmadd_ps(_mm_cvtepi32_ps(isum), ds, acc_s[t]);
                        acc_m[t] = _mm_fmadd_ps(_mm_cvtepi32_ps(imin), dm, acc_m[t]);
                    }
                } else {
                    let s = _mm256_add_epi32(_mm256_add_epi32(sumi[0], sumi[1]), _mm256_add_epi32(sumi[2], sumi[3]));
                    let (isum, imin) = r4_block_sums(s, p01, p23);
                    acc_s[t] = _mm_fmadd_ps(_mm_cvtepi32_ps(isum), ds, acc_s[t]);
                    acc_m[t] = _mm_fmadd_ps(_mm_cvtepi32_ps(imin), dm, acc_m[t]);
                }
            }
        }
        for p in 0..pairs {
            let r = _mm256_sub_ps(acc_s2[p], acc_m2[p]);
            _mm_storeu_ps(out.add(2 * p * out_stride), _mm256_castps256_ps128(r));
            _mm_storeu_ps(out.add((2 * p + 1) * out_stride), _mm256_extractf128_ps(r, 1));
        }
        for t in 2 * pairs..R {
            _mm_storeu_ps(out.add(t * out_stride), _mm_sub_ps(acc_s[t], acc_m[t]));
        }
    }
}

/// The 8 group sums (i16) of the Q8_K block at `ab`.
#[inline(always)]
unsafe fn r4_group_sums(ab: *const u8) -> __m128i {
    // SAFETY: a whole Q8_K block at ab; AVX2 checked by the callers.
    unsafe {
        let pairs = _mm256_madd_epi16(load256(ab.add(4 + QK_K)), _mm256_set1_epi16(1));
        _mm_packs_epi32(_mm256_castsi256_si128(pairs), _mm256_extracti128_si256(pairs, 1))
    }
}

/// One block of [`dot_q4_k_r4`]'s GEMM order for two activation rows at once (`ab`, `ab +
/// a_stride`: lanes 0..4 the first's rows 0..4, lanes 4..8 the second's), the same FMAs as one
/// row at a time, half as many instructions: `sums[c]` is `vphaddd` of the two rows' chunk `c`
/// ([first r0, r1, second r0, r1 | first r2, r3, second r2, r3]); `mnc[c]` the group's mins of
/// chunk `c` (rows 0..4 in both halves), `d2` / `dmin2` the rows' `d` / `dmin` in both halves.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn r4_gemm_pair(sums: [__m256i; 4], mnc: &[__m256i; 4], d2: __m256, dmin2: __m256, ab: *const u8, a_stride: usize, mut acc_s: __m256, mut acc_m: __m256) -> (__m256, __m256) {
    // SAFETY: two whole Q8_K blocks at ab and ab + a_stride; AVX2 checked by the callers.
    unsafe {
        let ab1 = ab.add(a_stride);
        let yd = _mm256_set_m128(_mm_set1_ps(f32_at(ab1)), _mm_set1_ps(f32_at(ab)));
        let (ds, dm) = (_mm256_mul_ps(d2, yd), _mm256_mul_ps(dmin2, yd));
        // the two rows' group sums, the first's in the low half
        let gg = _mm256_set_m128i(r4_group_sums(ab1), r4_group_sums(ab));
        let gc = [_mm256_shuffle_epi32::<0x00>(gg), _mm256_shuffle_epi32::<0x55>(gg), _mm256_shuffle_epi32::<0xaa>(gg), _mm256_shuffle_epi32::<0xff>(gg)];
        for c in 0..4 {
            // [first r0..r4 | second r0..r4]
            let isum = _mm256_permute4x64_epi64::<0b11_01_10_00>(sums[c]);
            let imin = _mm256_madd_epi16(mnc[c], gc[c]);
            acc_s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), ds, acc_s);
            acc_m = _mm256_fmadd_ps(_mm256_cvtepi32_ps(imin), dm, acc_m);
        }
        (acc_s, acc_m)
    }
}

/// `groups` groups of four interleaved Q4_K rows (`quant::interleave`, `nb` super-blocks each,
/// at `src`) back in the file's layout, row after row (`4 * groups` rows of `nb * 144` bytes at
/// `dst`): bit for bit `quant::interleave::deinterleave_q4_k`; the quants by 4 × 4 transposes
/// of 8-byte words, two shuffles per 32 bytes.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn deinterleave_q4_k(nb: usize, groups: usize, src: *const u8, dst: *mut u8) {
    let rb = nb * Q4_K_B;
    // SAFETY: groups × 4 rows of rb bytes at src and at dst (the caller's contract).
    unsafe {
        for g in 0..groups {
            for ib in 0..nb {
                let o = src.add(g * 4 * rb + ib * 4 * Q4_K_B);
                let row = |r: usize| dst.add((4 * g + r) * rb + ib * Q4_K_B);
                for r in 0..4 {
                    std::ptr::copy_nonoverlapping(o.add(2 * r), row(r), 2);
                    std::ptr::copy_nonoverlapping(o.add(8 + 2 * r), row(r).add(2), 2);
                    std::ptr::copy_nonoverlapping(o.add(16 + 12 * r), row(r).add(4), 12);
                }
                for c in 0..4 {
                    let x: [__m256i; 4] = std::array::from_fn(|k| load256(o.add(64 + (4 * c + k) * 32)));
                    let (t0, t1) = (_mm256_unpacklo_epi64(x[0], x[1]), _mm256_unpackhi_epi64(x[0], x[1]));
                    let (t2, t3) = (_mm256_unpacklo_epi64(x[2], x[3]), _mm256_unpackhi_epi64(x[2], x[3]));
                    let rows = [_mm256_permute2x128_si256::<0x20>(t0, t2), _mm256_permute2x128_si256::<0x20>(t1, t3), _mm256_permute2x128_si256::<0x31>(t0, t2), _mm256_permute2x128_si256::<0x31>(t1, t3)];
                    for (r, v) in rows.into_iter().enumerate() {
                        _mm256_storeu_si256(row(r).add(16 + 32 * c) as *mut __m256i, v);
                    }
                }
            }
        }
    }
}

/// One Q4_K block against its prepared activation quants `y` and group sums `gs`, with its
/// scales and mins as bytes in both halves of `sm` (a lane of [`scales_mins_k4_x2`]): lanes 0
/// + 1 are the block's scaled quant sum, lanes 2 + 3 its mins' products with the group sums
/// (both exact).
#[inline(always)]
unsafe fn q4_k_block_sums(wb: *const u8, sm: __m256i, y: *const u8, gs: *const u8, splat: &[__m256i; 8]) -> __m128i {
    // SAFETY: a whole Q4_K block at wb, 256 prepared quants at y (32-byte aligned), 8 i16 at
    // gs (16-byte aligned).
    unsafe {
        let m4 = _mm256_set1_epi8(0x0f);
        let mut sumi = _mm256_setzero_si256();
        for c in 0..4 {
            let bits = load256(wb.add(16 + 32 * c));
            let lo = _mm256_and_si256(bits, m4);
            let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(bits), m4);
            let yl = _mm256_load_si256(y.add(64 * c) as *const __m256i);
            let yh = _mm256_load_si256(y.add(64 * c + 32) as *const __m256i);
            let pl = _mm256_madd_epi16(_mm256_shuffle_epi8(sm, splat[2 * c]), _mm256_maddubs_epi16(lo, yl));
            let ph = _mm256_madd_epi16(_mm256_shuffle_epi8(sm, splat[2 * c + 1]), _mm256_maddubs_epi16(hi, yh));
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(pl, ph));
        }
        let s = _mm_add_epi32(_mm256_castsi256_si128(sumi), _mm256_extracti128_si256(sumi, 1));
        // the mins (bytes 8..16) as i16
        let mins = _mm_shuffle_epi8(_mm256_castsi256_si128(sm), _mm_setr_epi8(8, -1, 9, -1, 10, -1, 11, -1, 12, -1, 13, -1, 14, -1, 15, -1));
        let p = _mm_madd_epi16(_mm_load_si128(gs as *const __m128i), mins);
        _mm_hadd_epi32(s, p)
    }
}

/// The 8 6-bit scales and 8 6-bit mins of two Q4_K / Q5_K blocks (`get_scale_min_k4` for all
/// j), block b's in 128-bit lane b: its scales as bytes 0..8, its mins as bytes 8..16; from
/// each block's 12 scale bytes (`p0`, `p1`; 16 readable bytes at each) by two byte shuffles.
///
/// # Safety
/// 16 readable bytes at `p0` and `p1`; the CPU has AVX2.
#[inline(always)]
pub unsafe fn scales_mins_k4_x2(p0: *const u8, p1: *const u8) -> __m256i {
    // SAFETY: the caller guarantees 16 readable bytes at p0 and p1; AVX2 checked by callers.
    unsafe {
        let q = _mm256_set_m128i(_mm_loadu_si128(p1 as *const __m128i), _mm_loadu_si128(p0 as *const __m128i));
        // the low bits: scales 0..4 = q[0..4] & 63, scales 4..8 = q[8..12] & 15, mins 0..4 =
        // q[4..8] & 63, mins 4..8 = q[8..12] >> 4
        let a = _mm256_shuffle_epi8(q, _mm256_broadcastsi128_si256(_mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11)));
        let keep = _mm256_broadcastsi128_si256(_mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 0, 0, 0, 0));
        let high_nibble = _mm256_broadcastsi128_si256(_mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 15, 15, 15, 15));
        let low = _mm256_or_si256(_mm256_and_si256(a, keep), _mm256_and_si256(_mm256_srli_epi16::<4>(a), high_nibble));
        // bits 4 and 5 of scales and mins 4..8: the top two bits of q[0..4] and q[4..8]
        let b = _mm256_shuffle_epi8(q, _mm256_broadcastsi128_si256(_mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7)));
        _mm256_or_si256(low, _mm256_and_si256(_mm256_srli_epi16::<2>(b), _mm256_set1_epi8(0x30)))
    }
}

/// Shuffle masks that take byte `j` (of each 128-bit half) to all 8 16-bit lanes of a half,
/// zero-extended.
#[inline(always)]
unsafe fn byte_splats() -> [__m256i; 8] {
    // SAFETY: register-only AVX intrinsics; the callers checked AVX2.
    std::array::from_fn(|j| unsafe { _mm256_set1_epi16((j as i16) | (0x80u16 << 8) as i16) })
}

/// The exact sum of 8 i32 lanes.
#[inline(always)]
unsafe fn hsum_epi32_8(v: __m256i) -> i32 {
    // SAFETY: register-only AVX2 intrinsics.
    unsafe {
        let q = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
        let q = _mm_add_epi32(q, _mm_shuffle_epi32(q, 0b01_00_11_10));
        _mm_cvtsi128_si32(_mm_add_epi32(q, _mm_shuffle_epi32(q, 0b10_11_00_01)))
    }
}

/// Q4_K / Q5_K × Q8_K in the order of llama.cpp's tiled matmul (`quant::vec_dot_tiled`): per
/// super-block the scaled quant sum and the mins' sum reduced exactly to two integers, then
/// `r = d · s1`, `r = fnmadd(dmin, s2, r)`, `acc = fma(r, d_a, acc)`. One weight row × R
/// activation rows; the AVX-512 level uses them too.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_q4_k_tiled<const R: usize>(nb: usize, w: *const u8, a: *const u8, a_stride: usize, out: *mut f32, out_stride: usize) {
    // SAFETY: forwarded contract.
    unsafe { dot_qk_45::<R, false, true>(nb, w, a, a_stride, out, out_stride) }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_q5_k_tiled<const R: usize>(nb: usize, w: *const u8, a: *const u8, a_stride: usize, out: *mut f32, out_stride: usize) {
    // SAFETY: forwarded contract.
    unsafe { dot_qk_45::<R, true, true>(nb, w, a, a_stride, out, out_stride) }
}

/// Q4_K × Q8_K in the order of llama.cpp's repacked GEMM (`quant::vec_dot_repacked` with
/// `gemm`): per pair of groups (64 elements) the scaled quant sum and the mins' sum, exact
/// integers, each by one FMA with d · d_a / dmin · d_a into two lanes of one accumulator, in
/// order; scales part minus mins part at the end.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_q4_k_repacked_gemm<const R: usize>(nb: usize, w: *const u8, a: *const u8, a_stride: usize, out: *mut f32, out_stride: usize) {
    // SAFETY: see the module docs.
    unsafe {
        let mut acc = [_mm_setzero_ps(); R];
        let splat = word_splats();
        // mins byte j to 16-bit lanes 2j and 2j + 1
        let dup = _mm_setr_epi8(0, -1, 0, -1, 1, -1, 1, -1, 2, -1, 2, -1, 3, -1, 3, -1);
        let dup_hi = _mm_setr_epi8(4, -1, 4, -1, 5, -1, 5, -1, 6, -1, 6, -1, 7, -1, 7, -1);
        for ib in 0..nb {
            let wb = w.add(ib * Q4_K_B);
            prefetch_decode::<R, Q4_K_B>(wb);
            // [d, dmin, d, dmin]
            let dd = _mm_cvtph_ps(_mm_set1_epi32(std::ptr::read_unaligned(wb as *const i32)));
            let (scales, mins8) = scales_mins_k4(wb.add(4));
            let mins = _mm256_set_m128i(_mm_shuffle_epi8(mins8, dup_hi), _mm_shuffle_epi8(mins8, dup));
            let ab0 = a.add(ib * Q8_K_B);
            let pair = |c| qk45_sumi_pair::<R, false>(wb, scales, ab0, a_stride, &splat, c);
            let s: [[__m256i; R]; 4] = [pair(0), pair(1), pair(2), pair(3)];
            for r in 0..R {
                let ab = ab0.add(r * a_stride);
                // [isum of pair 0, 1, 2, 3]
                let h = _mm256_hadd_epi32(_mm256_hadd_epi32(s[0][r], s[1][r]), _mm256_hadd_epi32(s[2][r], s[3][r]));
                let isum = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
                // lane j: m[j] * (bs[2j] + bs[2j+1]); [imin of pair 0, 1, 2, 3]
                let t = _mm256_madd_epi16(load256(ab.add(4 + QK_K)), mins);
                let t = _mm256_hadd_epi32(t, t);
                let imin = _mm_unpacklo_epi64(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
                let scale = _mm_mul_ps(dd, _mm_set1_ps(f32_at(ab)));
                let lo = _mm_cvtepi32_ps(_mm_unpacklo_epi32(isum, imin));
                let hi = _mm_cvtepi32_ps(_mm_unpackhi_epi32(isum, imin));
                let mut x = acc[r];
                x = _mm_fmadd_ps(lo, scale, x);
                x = _mm_fmadd_ps(_mm_movehl_ps(lo, lo), scale, x);
                x = _mm_fmadd_ps(hi, scale, x);
                x = _mm_fmadd_ps(_mm_movehl_ps(hi, hi), scale, x);
                acc[r] = x;
            }
        }
        for r in 0..R {
            *out.add(r * out_stride) = _mm_cvtss_f32(_mm_sub_ss(acc[r], _mm_movehdup_ps(acc[r])));
        }
    }
}

/// upstream's get_scale_shuffle_q3k(i) for i = 0..4: 16-bit scale 2i in the low 128 bits, 2i + 1
/// in the high (Q2_K and Q3_K).
#[inline(always)]
unsafe fn scale_shuffles_q3k() -> [__m256i; 4] {
    let shuffle = |i: i8| {
        let (lo, hi) = (4 * i, 4 * i + 2);
        // SAFETY: register-only AVX intrinsics; the callers checked AVX2.
        unsafe { _mm256_setr_epi8(lo, lo + 1, lo, lo + 1, lo, lo + 1, lo, lo + 1, lo, lo + 1, lo, lo + 1, lo, lo + 1, lo, lo + 1, hi, hi + 1, hi, hi + 1, hi, hi + 1, hi, hi + 1, hi, hi + 1, hi, hi + 1, hi, hi + 1, hi, hi + 1) }
    };
    [shuffle(0), shuffle(1), shuffle(2), shuffle(3)]
}

/// Q2_K × Q8_K, R activation rows: upstream's AVX2 loop (`ggml_vec_dot_q2_K_q8_K`), whose lanes
/// the scalar reference (`quant::q2_k`) follows: per super-block the mins' products with the
/// activation's 16 sums in one 8-lane FMA by `-d_a · dmin`, then the four 2-bit planes of each
/// 128 weights by `maddubs`, each 16-weight sub-block's scale by `madd`, into 8 lanes and one
/// FMA by `d_a · d`; `hsum_float_8` at the end.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_q2_k<const R: usize>(nb: usize, w: *const u8, a: *const u8, a_stride: usize, out: *mut f32, out_stride: usize) {
    // SAFETY: see the module docs. Layout: scales[16] | qs[64] | d | dmin; Q8_K: d (f32) |
    // qs[256] | bsums i16[16].
    unsafe {
        let shuf = scale_shuffles_q3k();
        let m3 = _mm256_set1_epi8(3);
        let m4 = _mm_set1_epi8(0xF);
        let mut acc = [_mm256_setzero_ps(); R];
        for i in 0..nb {
            let wb = w.add(i * Q2_K_B);
            prefetch_decode::<R, Q2_K_B>(wb);
            let (dw, dminw) = f16_pair(wb.add(80), wb.add(82));
            let mins_and_scales = _mm_loadu_si128(wb as *const __m128i);
            let scales8 = _mm_and_si128(mins_and_scales, m4);
            let mins = _mm256_cvtepi8_epi16(_mm_and_si128(_mm_srli_epi16(mins_and_scales, 4), m4));
            let all_scales = _mm256_cvtepi8_epi16(scales8);
            let (l, h) = (_mm256_castsi256_si128(all_scales), _mm256_extracti128_si256(all_scales, 1));
            let scales = [_mm256_set_m128i(l, l), _mm256_set_m128i(h, h)];
            for r in 0..R {
                let ab = a.add(r * a_stride + i * Q8_K_B);
                let da = f32_at(ab);
                let (d, dmin) = (da * dw, -da * dminw);
                let prod = _mm256_madd_epi16(mins, load256(ab.add(260)));
                acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(prod), acc[r]);
                let mut sumi = _mm256_setzero_si256();
                for j in 0..2 {
                    let q2bits = load256(wb.add(16 + 32 * j));
                    let q8 = |k: usize| load256(ab.add(4 + 128 * j + 32 * k));
                    let plane = |k: i32| match k {
                        0 => _mm256_and_si256(q2bits, m3),
                        1 => _mm256_and_si256(_mm256_srli_epi16(q2bits, 2), m3),
                        2 => _mm256_and_si256(_mm256_srli_epi16(q2bits, 4), m3),
                        _ => _mm256_and_si256(_mm256_srli_epi16(q2bits, 6), m3),
                    };
                    let p: [__m256i; 4] = std::array::from_fn(|k| _mm256_madd_epi16(_mm256_shuffle_epi8(scales[j], shuf[k]), _mm256_maddubs_epi16(plane(k as i32), q8(k))));
                    sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(_mm256_add_epi32(p[0], p[1]), _mm256_add_epi32(p[2], p[3])));
                }
                acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc[r]);
            }
        }
        for r in 0..R {
            *out.add(r * out_stride) = hsum_float_8(acc[r]);
        }
    }
}

/// Q3_K × Q8_K, R activation rows: upstream's AVX2 loop (`ggml_vec_dot_q3_K_q8_K`): the 6-bit
/// scales unpacked as there, the low two bits by `maddubs` minus 4 × the activation where the
/// high bit is clear, each sub-block's scale by `madd`, 8 lanes and one FMA per super-block.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_q3_k<const R: usize>(nb: usize, w: *const u8, a: *const u8, a_stride: usize, out: *mut f32, out_stride: usize) {
    // SAFETY: see the module docs. Layout: hmask[32] | qs[64] | scales[12] | d; Q8_K: d (f32) |
    // qs[256] | bsums.
    unsafe {
        let shuf = scale_shuffles_q3k();
        let (m3, mone) = (_mm256_set1_epi8(3), _mm256_set1_epi8(1));
        const KMASK1: u32 = 0x0303_0303;
        const KMASK2: u32 = 0x0f0f_0f0f;
        let mut acc = [_mm256_setzero_ps(); R];
        for i in 0..nb {
            let wb = w.add(i * Q3_K_B);
            prefetch_decode::<R, Q3_K_B>(wb);
            let dw = f16_at(wb.add(108));
            let aux: [u32; 3] = std::array::from_fn(|k| std::ptr::read_unaligned(wb.add(96 + 4 * k) as *const u32));
            let scales128 = _mm_sub_epi8(
                _mm_set_epi32(
                    (((aux[1] >> 4) & KMASK2) | (((aux[2] >> 6) & KMASK1) << 4)) as i32,
                    (((aux[0] >> 4) & KMASK2) | (((aux[2] >> 4) & KMASK1) << 4)) as i32,
                    ((aux[1] & KMASK2) | (((aux[2] >> 2) & KMASK1) << 4)) as i32,
                    ((aux[0] & KMASK2) | ((aux[2] & KMASK1) << 4)) as i32,
                ),
                _mm_set1_epi8(32),
            );
            let all_scales = _mm256_cvtepi8_epi16(scales128);
            let (l, h) = (_mm256_castsi256_si128(all_scales), _mm256_extracti128_si256(all_scales, 1));
            let scales = [_mm256_set_m128i(l, l), _mm256_set_m128i(h, h)];
            let hbits = load256(wb);
            // per plane (j, k): the low two bits and 4 where the high bit is clear
            let planes: [[(__m256i, __m256i); 4]; 2] = std::array::from_fn(|j| {
                let q3bits = load256(wb.add(32 + 32 * j));
                std::array::from_fn(|k| {
                    let bit = (4 * j + k) as i32;
                    let low = _mm256_and_si256(_mm256_srl_epi16(q3bits, _mm_cvtsi32_si128(2 * k as i32)), m3);
                    let high = _mm256_slli_epi16(_mm256_srl_epi16(_mm256_andnot_si256(hbits, _mm256_sll_epi16(mone, _mm_cvtsi32_si128(bit))), _mm_cvtsi32_si128(bit)), 2);
                    (low, high)
                })
            });
            for r in 0..R {
                let ab = a.add(r * a_stride + i * Q8_K_B);
                let d = f32_at(ab) * dw;
                let mut sumi = _mm256_setzero_si256();
                for j in 0..2 {
                    let p: [__m256i; 4] = std::array::from_fn(|k| {
                        let q8 = load256(ab.add(4 + 128 * j + 32 * k));
                        let (low, high) = planes[j][k];
                        let p16 = _mm256_sub_epi16(_mm256_maddubs_epi16(low, q8), _mm256_maddubs_epi16(high, q8));
                        _mm256_madd_epi16(_mm256_shuffle_epi8(scales[j], shuf[k]), p16)
                    });
                    sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(_mm256_add_epi32(p[0], p[1]), _mm256_add_epi32(p[2], p[3])));
                }
                acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc[r]);
            }
        }
        for r in 0..R {
            *out.add(r * out_stride) = hsum_float_8(acc[r]);
        }
    }
}

/// Q6_K × Q8_K: one weight row × R activation rows, in `vec_dot`'s order (one 8-lane FMA per
/// block, `hsum` at the end) or, with `TILED`, in llama.cpp's tiled matmul's (per block the exact
/// sum of the scaled quants less 32 · the scaled group sums, `r = d · s1`, `acc = fma(r, d_a,
/// acc)`).
#[inline(always)]
unsafe fn dot_q6_k_any<const R: usize, const TILED: bool>(nb: usize, w: *const u8, a: *const u8, a_stride: usize, out: *mut f32, out_stride: usize) {
    // SAFETY: see the module docs. Layout: ql[128] | qh[64] | scales[16] | d.
    unsafe {
        let mut acc = [_mm256_setzero_ps(); R];
        let mut tiled = [0f32; R];
        let m4 = _mm256_set1_epi8(0x0f);
        let m2 = _mm256_set1_epi8(0x03);
        // bytes 2g (×8) then 2g + 1 (×8)
        let pick: [__m128i; 8] = std::array::from_fn(|g| _mm_set_epi64x(0x0101_0101_0101_0101 * (2 * g as i64 + 1), 0x0101_0101_0101_0101 * (2 * g as i64)));
        for ib in 0..nb {
            let wb = w.add(ib * Q6_K_B);
            prefetch_decode::<R, Q6_K_B>(wb);
            let wd = f16_at(wb.add(208));
            let sc8 = _mm_loadu_si128(wb.add(192) as *const __m128i);
            let sc16 = _mm256_cvtepi8_epi16(sc8);
            let mut sumi = [_mm256_setzero_si256(); R];
            for n in 0..2 {
                let qh = load256(wb.add(128 + 32 * n));
                let ql0 = load256(wb.add(64 * n));
                let ql1 = load256(wb.add(64 * n + 32));
                for s in 0..4 {
                    let lowbytes = if s % 2 == 0 { ql0 } else { ql1 };
                    let low = if s < 2 { _mm256_and_si256(lowbytes, m4) } else { _mm256_and_si256(_mm256_srli_epi16(lowbytes, 4), m4) };
                    let high = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * s as i32)), m2);
                    let q = _mm256_or_si256(low, _mm256_slli_epi16(high, 4));
                    let g = 4 * n + s;
                    // sub-block 2g's scale in the low half's 16-bit lanes, 2g + 1's in the high half's
                    let scv = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc8, pick[g]));
                    for r in 0..R {
                        let aq = a.add(r * a_stride + ib * Q8_K_B + 4 + 32 * g);
                        let p = _mm256_madd_epi16(scv, _mm256_maddubs_epi16(q, load256(aq)));
                        sumi[r] = _mm256_add_epi32(sumi[r], p);
                    }
                }
            }
            for r in 0..R {
                let ab = a.add(r * a_stride + ib * Q8_K_B);
                let bs = load256(ab.add(4 + QK_K));
                let sub = _mm256_slli_epi32(_mm256_madd_epi16(bs, sc16), 5);
                let s = _mm256_sub_epi32(sumi[r], sub);
                if TILED {
                    // the tiled matmul's: the block's exact sum, r = d · s1, fma(r, d_a, acc)
                    tiled[r] = (wd * hsum_epi32_8(s) as f32).mul_add(f32_at(ab), tiled[r]);
                } else {
                    let d = _mm256_set1_ps(f32_at(ab) * wd);
                    acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(s), acc[r]);
                }
            }
        }
        for r in 0..R {
            *out.add(r * out_stride) = if TILED { tiled[r] } else { hsum_float_8(acc[r]) };
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_q6_k<const R: usize>(nb: usize, w: *const u8, a: *const u8, a_stride: usize, out: *mut f32, out_stride: usize) {
    // SAFETY: forwarded contract.
    unsafe { dot_q6_k_any::<R, false>(nb, w, a, a_stride, out, out_stride) }
}

/// [`dot_q6_k`] in the order of llama.cpp's tiled matmul (`quant::vec_dot_tiled`); the AVX-512
/// level uses it too.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_q6_k_tiled<const R: usize>(nb: usize, w: *const u8, a: *const u8, a_stride: usize, out: *mut f32, out_stride: usize) {
    // SAFETY: forwarded contract.
    unsafe { dot_q6_k_any::<R, true>(nb, w, a, a_stride, out, out_stride) }
}

// ---------------------------------------------------------------------------------------------
// IQ formats against Q8_K (the reference: `quant::iquant`)

/// The two row kernels of an IQ type from its `_any::<R, TILED>` body: `$name` in `vec_dot`'s
/// order and `$tiled` in llama.cpp's tiled matmul's (`quant::vec_dot_tiled`).
macro_rules! row_kernels {
    ($name:ident, $tiled:ident, $any:ident) => {
        #[target_feature(enable = "avx2,fma,f16c")]
        pub unsafe fn $name<const R: usize>(nb: usize, w: *const u8, a: *const u8, a_stride: usize, out: *mut f32, out_stride: usize) {
            // SAFETY: forwarded contract.
            unsafe { $any::<R, false>(nb, w, a, a_stride, out, out_stride) }
        }

        /// As the kernel without `_tiled` in the order of llama.cpp's tiled matmul.
        #[target_feature(enable = "avx2,fma,f16c")]
        pub unsafe fn $tiled<const R: usize>(nb: usize, w: *const u8, a: *const u8, a_stride: usize, out: *mut f32, out_stride: usize) {
            // SAFETY: forwarded contract.
            unsafe { $any::<R, true>(nb, w, a, a_stride, out, out_stride) }
        }
    };
}

/// One 32-weight group of an IQ block: the weights' magnitudes `ax`, a sign source `s` for
/// `sign_epi8(a, s)` (the signed weights themselves, or ±1 bytes) and the scales of its two
/// halves: the group's lane sums are `madd(maddubs(ax, sign_epi8(a, s)), scales)`.
struct IqGroup {
    ax: __m256i,
    s: __m256i,
    lo: i16,
    hi: i16,
}

/// `ksigns_iq2xs[i]` as 8 bytes of ±1 (−1 where bit `j` is set; upstream's `keven_signs_q2xs`):
/// the 7 sign bits of `i` and their parity (checked against the table in the tests).
pub(crate) static KSIGNS64: [u64; 128] = {
    let mut t = [0u64; 128];
    let mut i = 0;
    while i < 128 {
        let bits = i as u32 | ((i as u32).count_ones() & 1) << 7;
        let mut j = 0;
        while j < 8 {
            t[i] |= (if bits >> j & 1 == 1 { 0xffu64 } else { 0x01 }) << (8 * j);
            j += 1;
        }
        i += 1;
    }
    t
};

/// The ±1 sign bytes of four 7-bit `ksigns_iq2xs` indices at bits 0, 7, 14, 21 of `sg`.
#[inline(always)]
unsafe fn ksigns4(sg: u32) -> __m256i {
    let k = |i: u32| KSIGNS64[((sg >> (7 * i)) & 127) as usize] as i64;
    // SAFETY: register-only AVX intrinsic.
    unsafe { _mm256_set_epi64x(k(3), k(2), k(1), k(0)) }
}

/// ±1 bytes from 32 sign bits (bit `j` set: −1), as upstream's IQ2_S / IQ3_S kernels make them.
#[inline(always)]
unsafe fn signs_from_bits(bits: u32) -> __m256i {
    // SAFETY: register-only AVX2 intrinsics.
    unsafe { _mm256_or_si256(bytes_from_bits_32(bits), _mm256_set1_epi8(1)) }
}

/// Signed weight bytes as a group: magnitudes and themselves as the sign source.
#[inline(always)]
unsafe fn signed_group(q: __m256i, lo: i16, hi: i16) -> IqGroup {
    // SAFETY: register-only AVX2 intrinsic.
    IqGroup { ax: unsafe { _mm256_sign_epi8(q, q) }, s: q, lo, hi }
}

#[inline(always)]
unsafe fn grid64x4(g: &[u64], i: [usize; 4]) -> __m256i {
    // SAFETY: register-only AVX intrinsic; indexing is bounds-checked.
    unsafe { _mm256_set_epi64x(g[i[3]] as i64, g[i[2]] as i64, g[i[1]] as i64, g[i[0]] as i64) }
}

/// A block's 32 grid indices of 4 per group, 8 per register: index 4g + l is the byte
/// `qs[4g + l]` with, above bit 8, the field `(h_g >> shifts[l]) & mask` of the group's high bits
/// `h_g` (32-bit lane g of `hv`).
#[inline(always)]
unsafe fn grid_indices_4x8(qs: *const u8, hv: __m256i, shifts: [i32; 4], mask: i32) -> [u32; 32] {
    // SAFETY: register-only AVX2 intrinsics but for the caller's 32 readable bytes at qs.
    unsafe {
        let sh = _mm256_setr_epi32(shifts[0], shifts[1], shifts[2], shifts[3], shifts[0], shifts[1], shifts[2], shifts[3]);
        let mut idx = [0u32; 32];
        for k in 0..4 {
            let rep = _mm256_permutevar8x32_epi32(hv, _mm256_setr_epi32(2 * k, 2 * k, 2 * k, 2 * k, 2 * k + 1, 2 * k + 1, 2 * k + 1, 2 * k + 1));
            let hi = _mm256_slli_epi32::<8>(_mm256_and_si256(_mm256_srlv_epi32(rep, sh), _mm256_set1_epi32(mask)));
            let lo = _mm256_cvtepu8_epi32(_mm_loadl_epi64(qs.add(8 * k as usize) as *const __m128i));
            _mm256_storeu_si256(idx.as_mut_ptr().add(8 * k as usize) as *mut __m256i, _mm256_or_si256(lo, hi));
        }
        idx
    }
}

/// Entry `i` of a block's precomputed grid indices, read back from memory: a load per index
/// instead of the two-µop register extractions the compiler would otherwise make of them.
#[inline(always)]
fn idx_at<const N: usize>(idx: &[u32; N], i: usize) -> u32 {
    // SAFETY: `&idx[i]` is bounds-checked: an aligned u32 of the array.
    unsafe { std::ptr::read_volatile(&idx[i]) }
}

#[inline(always)]
unsafe fn grid32x8(g: &[u32], i: [usize; 8]) -> __m256i {
    // SAFETY: register-only AVX intrinsic; indexing is bounds-checked.
    unsafe { _mm256_setr_epi32(g[i[0]] as i32, g[i[1]] as i32, g[i[2]] as i32, g[i[3]] as i32, g[i[4]] as i32, g[i[5]] as i32, g[i[6]] as i32, g[i[7]] as i32) }
}

/// The IQ super-block dot product: per block the 8 groups decoded once (signs applied), then
/// per activation row `maddubs(|w|, sign_epi8(a, w))`, `madd` with the per-16 scales, one FMA
/// with `d_w · d_a`; `factor · hsum`. With `EXTRA`, `extra(w_block)` gives 16 i16 factors of
/// the Q8_K block sums whose (exact) total is added as `acc1 = fma(d, total, acc1)`, and
/// `IQ1S_DELTA · acc1` at the end (IQ1_S's deltas).
#[inline(always)]
unsafe fn dot_iq<const R: usize, const WB: usize, const EXTRA: bool, const TILED: bool, B>(
    nb: usize,
    w: *const u8,
    a: *const u8,
    a_stride: usize,
    out: *mut f32,
    out_stride: usize,
    factor: f32,
    block: impl Fn(*const u8) -> B,
    group: impl Fn(*const u8, &B, usize) -> IqGroup,
    extra: impl Fn(*const u8) -> __m256i,
) {
    // SAFETY: see the module docs; all pointer offsets stay inside the caller's blocks.
    unsafe {
        let mut acc = [_mm256_setzero_ps(); R];
        let mut acc1 = [0f32; R];
        let mut tiled = [0f32; R];
        for ib in 0..nb {
            let wb = w.add(ib * WB);
            prefetch_decode::<R, WB>(wb);
            let dw = f16_at(wb);
            let mut sumi = [_mm256_setzero_si256(); R];
            let ex = if EXTRA { extra(wb) } else { _mm256_setzero_si256() };
            let bs = block(wb);
            for g in 0..8 {
                let gr = group(wb, &bs, g);
                let sc = _mm256_blend_epi32::<0xf0>(_mm256_set1_epi16(gr.lo), _mm256_set1_epi16(gr.hi));
                for r in 0..R {
                    let qy = load256(a.add(r * a_stride + ib * Q8_K_B + 4 + 32 * g));
                    let p = _mm256_maddubs_epi16(gr.ax, _mm256_sign_epi8(qy, gr.s));
                    sumi[r] = _mm256_add_epi32(sumi[r], _mm256_madd_epi16(p, sc));
                }
            }
            if TILED {
                // llama.cpp's tiled matmul (`quant::vec_dot_tiled`): the block's exact sum s1
                // (IQ1_S: its weights 8·grid ± 1, so 8 · the grid part + the delta part), then
                // r = d · s1 (d with the type's factor), fma(r, d_a, acc)
                let d0 = dw * if EXTRA { 0.125 } else { factor };
                for r in 0..R {
                    let ab = a.add(r * a_stride + ib * Q8_K_B);
                    let mut s1 = hsum_epi32_8(sumi[r]);
                    if EXTRA {
                        let t = _mm256_madd_epi16(load256(ab.add(4 + QK_K)), ex);
                        s1 = 8 * s1 + hsum_epi32_8(t);
                    }
                    tiled[r] = (d0 * s1 as f32).mul_add(f32_at(ab), tiled[r]);
                }
                continue;
            }
            for r in 0..R {
                let ab = a.add(r * a_stride + ib * Q8_K_B);
                let sumi = sumi[r];
                let d = dw * f32_at(ab);
                acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc[r]);
                if EXTRA {
                    let t = _mm256_madd_epi16(load256(ab.add(4 + QK_K)), ex);
                    let t = _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
                    let t = _mm_add_epi32(t, _mm_unpackhi_epi64(t, t));
                    let t = _mm_cvtsi128_si32(_mm_add_epi32(t, _mm_shuffle_epi32(t, 0b01)));
                    acc1[r] = d.mul_add(t as f32, acc1[r]);
                }
            }
        }
        for r in 0..R {
            if TILED {
                *out.add(r * out_stride) = tiled[r];
                continue;
            }
            let s = factor * hsum_float_8(acc[r]);
            *out.add(r * out_stride) = if EXTRA { s + IQ1S_DELTA * acc1[r] } else { s };
        }
    }
}

/// The per-32 scale `2·ls + 1` of both halves.
#[inline(always)]
fn odd_scale(ax: __m256i, s: __m256i, ls: u32) -> IqGroup {
    let sc = (2 * ls + 1) as i16;
    IqGroup { ax, s, lo: sc, hi: sc }
}

#[inline(always)]
unsafe fn dot_iq2_xxs_any<const R: usize, const TILED: bool>(nb: usize, w: *const u8, a: *const u8, a_stride: usize, out: *mut f32, out_stride: usize) {
    // SAFETY: forwarded contract. Layout: d | per 32: 4 grid bytes, u32 signs + scale.
    unsafe {
        let group = |wb: *const u8, _: &(), g: usize| {
            let idx = std::ptr::read_unaligned(wb.add(2 + 8 * g) as *const [u8; 4]);
            let sg = std::ptr::read_unaligned(wb.add(6 + 8 * g) as *const u32);
            odd_scale(grid64x4(&IQ2XXS_GRID, idx.map(|i| i as usize)), ksigns4(sg), sg >> 28)
        };
        dot_iq::<R, IQ2_XXS_B, false, TILED, _>(nb, w, a, a_stride, out, out_stride, 0.125, |_| (), group, |_| _mm256_setzero_si256())
    }
}

row_kernels!(dot_iq2_xxs, dot_iq2_xxs_tiled, dot_iq2_xxs_any);

#[inline(always)]
unsafe fn dot_iq3_xxs_any<const R: usize, const TILED: bool>(nb: usize, w: *const u8, a: *const u8, a_stride: usize, out: *mut f32, out_stride: usize) {
    // SAFETY: forwarded contract. Layout: d | 64 grid bytes | per 32 a u32 of signs + scale.
    unsafe {
        let group = |wb: *const u8, _: &(), g: usize| {
            let idx = std::ptr::read_unaligned(wb.add(2 + 8 * g) as *const [u8; 8]);
            let sg = std::ptr::read_unaligned(wb.add(66 + 4 * g) as *const u32);
            odd_scale(grid32x8(&IQ3XXS_GRID, idx.map(|i| i as usize)), ksigns4(sg), sg >> 28)
        };
        dot_iq::<R, IQ3_XXS_B, false, TILED, _>(nb, w, a, a_stride, out, out_stride, 0.25, |_| (), group, |_| _mm256_setzero_si256())
    }
}

row_kernels!(dot_iq3_xxs, dot_iq3_xxs_tiled, dot_iq3_xxs_any);

/// Two 4-bit scales of a byte as the per-16 factors `2·s + 1` (low nibble first).
#[inline(always)]
fn nibble_scales(ax: __m256i, s: __m256i, sc: u8) -> IqGroup {
    IqGroup { ax, s, lo: 2 * (sc & 15) as i16 + 1, hi: 2 * (sc >> 4) as i16 + 1 }
}

#[inline(always)]
unsafe fn dot_iq2_xs_any<const R: usize, const TILED: bool>(nb: usize, w: *const u8, a: *const u8, a_stride: usize, out: *mut f32, out_stride: usize) {
    // SAFETY: forwarded contract. Layout: d | u16 qs[32] (9-bit index, 7 sign bits) | scales[8].
    unsafe {
        // the block's 32 sign bytes at once (`ksigns_iq2xs`: the 7 sign bits of each index and
        // their parity as bit 7), 16 per register: the parity of the 7 bits is that of the low
        // nibble of s ^ (s >> 4), looked up by one byte shuffle
        let block = |wb: *const u8| {
            let parity = _mm256_setr_epi8(0, -128, -128, 0, -128, 0, 0, -128, -128, 0, 0, -128, 0, -128, -128, 0, 0, -128, -128, 0, -128, 0, 0, -128, -128, 0, 0, -128, 0, -128, -128, 0);
            let bits = |v: __m256i| {
                let s7 = _mm256_srli_epi16::<9>(v);
                (s7, _mm256_and_si256(_mm256_xor_si256(s7, _mm256_srli_epi16::<13>(v)), _mm256_set1_epi16(15)))
            };
            let (s0, n0) = bits(load256(wb.add(2)));
            let (s1, n1) = bits(load256(wb.add(34)));
            // packus interleaves the 128-bit lanes: back to index order
            let s7 = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packus_epi16(s0, s1));
            let nib = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packus_epi16(n0, n1));
            let mut signs = [0u8; 32];
            _mm256_storeu_si256(signs.as_mut_ptr() as *mut __m256i, _mm256_or_si256(s7, _mm256_shuffle_epi8(parity, nib)));
            signs
        };
        let group = |wb: *const u8, signs: &[u8; 32], g: usize| {
            let v = std::ptr::read_unaligned(wb.add(2 + 8 * g) as *const [u16; 4]);
            // sign byte l of the group to bytes 8l..8l + 8, then bit j of byte 8l + j: −1 where set
            let four = _mm256_set1_epi32(std::ptr::read_unaligned(signs.as_ptr().add(4 * g) as *const i32));
            let spread = _mm256_shuffle_epi8(four, _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
            let sel = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
            let sv = _mm256_or_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, sel), sel), _mm256_set1_epi8(1));
            nibble_scales(grid64x4(&IQ2XS_GRID, v.map(|v| (v & 511) as usize)), sv, *wb.add(66 + g))
        };
        dot_iq::<R, IQ2_XS_B, false, TILED, _>(nb, w, a, a_stride, out, out_stride, 0.125, block, group, |_| _mm256_setzero_si256())
    }
}

row_kernels!(dot_iq2_xs, dot_iq2_xs_tiled, dot_iq2_xs_any);

#[inline(always)]
unsafe fn dot_iq2_s_any<const R: usize, const TILED: bool>(nb: usize, w: *const u8, a: *const u8, a_stride: usize, out: *mut f32, out_stride: usize) {
    // SAFETY: forwarded contract. Layout: d | qs[32] | signs[32] | qh[8] | scales[8].
    unsafe {
        // the block's 32 grid indices at once (4g + l: qs[4g + l] | 2 bits of qh[g] at 2l above it)
        let block = |wb: *const u8| grid_indices_4x8(wb.add(2), _mm256_cvtepu8_epi32(_mm_loadl_epi64(wb.add(66) as *const __m128i)), [0, 2, 4, 6], 3);
        let group = |wb: *const u8, idx: &[u32; 32], g: usize| {
            let signs = signs_from_bits(std::ptr::read_unaligned(wb.add(34 + 4 * g) as *const u32));
            // (10-bit indices: the grid has 1024 entries)
            nibble_scales(grid64x4(&IQ2S_GRID, std::array::from_fn(|l| (idx_at(idx, 4 * g + l) & 1023) as usize)), signs, *wb.add(74 + g))
        };
        dot_iq::<R, IQ2_S_B, false, TILED, _>(nb, w, a, a_stride, out, out_stride, 0.125, block, group, |_| _mm256_setzero_si256())
    }
}

row_kernels!(dot_iq2_s, dot_iq2_s_tiled, dot_iq2_s_any);

#[inline(always)]
unsafe fn dot_iq3_s_any<const R: usize, const TILED: bool>(nb: usize, w: *const u8, a: *const u8, a_stride: usize, out: *mut f32, out_stride: usize) {
    // SAFETY: forwarded contract. Layout: d | qs[64] | qh[8] | signs[32] | scales[4].
    unsafe {
        // the block's 64 grid indices at once (8g + i: qs[8g + i] | bit i of qh[g] above it)
        let block = |wb: *const u8| {
            let mut idx = [0u32; 64];
            for g in 0..8 {
                let hi = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(*wb.add(66 + g) as i32), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)), _mm256_set1_epi32(1));
                let lo = _mm256_cvtepu8_epi32(_mm_loadl_epi64(wb.add(2 + 8 * g) as *const __m128i));
                _mm256_storeu_si256(idx.as_mut_ptr().add(8 * g) as *mut __m256i, _mm256_or_si256(lo, _mm256_slli_epi32::<8>(hi)));
            }
            idx
        };
        let group = |wb: *const u8, idx: &[u32; 64], g: usize| {
            let signs = signs_from_bits(std::ptr::read_unaligned(wb.add(74 + 4 * g) as *const u32));
            let ls = (*wb.add(106 + g / 2) >> (4 * (g % 2))) as u32 & 15;
            // (9-bit indices: the grid has 512 entries)
            odd_scale(grid32x8(&IQ3S_GRID, std::array::from_fn(|i| (idx_at(idx, 8 * g + i) & 511) as usize)), signs, ls)
        };
        dot_iq::<R, IQ3_S_B, false, TILED, _>(nb, w, a, a_stride, out, out_stride, 1.0, block, group, |_| _mm256_setzero_si256())
    }
}

row_kernels!(dot_iq3_s, dot_iq3_s_tiled, dot_iq3_s_any);

#[inline(always)]
unsafe fn dot_iq4_xs_any<const R: usize, const TILED: bool>(nb: usize, w: *const u8, a: *const u8, a_stride: usize, out: *mut f32, out_stride: usize) {
    // SAFETY: forwarded contract. Layout: d | scales_h u16 | scales_l[4] | qs[128].
    unsafe {
        let table = _mm256_broadcastsi128_si256(_mm_loadu_si128(KVALUES_IQ4NL.as_ptr() as *const __m128i));
        let group = |wb: *const u8, _: &(), g: usize| {
            let q = _mm256_shuffle_epi8(table, bytes_from_nibbles_32(wb.add(8 + 16 * g)));
            let sh = std::ptr::read_unaligned(wb.add(2) as *const u16);
            let ls = (((*wb.add(4 + g / 2) >> (4 * (g % 2))) & 15) as i16 | ((((sh >> (2 * g)) & 3) as i16) << 4)) - 32;
            signed_group(q, ls, ls)
        };
        dot_iq::<R, IQ4_XS_B, false, TILED, _>(nb, w, a, a_stride, out, out_stride, 1.0, |_| (), group, |_| _mm256_setzero_si256())
    }
}

row_kernels!(dot_iq4_xs, dot_iq4_xs_tiled, dot_iq4_xs_any);

#[inline(always)]
unsafe fn dot_iq1_s_any<const R: usize, const TILED: bool>(nb: usize, w: *const u8, a: *const u8, a_stride: usize, out: *mut f32, out_stride: usize) {
    // SAFETY: forwarded contract. Layout: d | qs[32] | qh u16[8]; Q8_K bsums at 4 + 256.
    unsafe {
        let qh = |wb: *const u8, g: usize| std::ptr::read_unaligned(wb.add(34 + 2 * g) as *const u16) as usize;
        // the block's 32 grid indices at once (index 4g + l: qs[4g + l] | 3 bits of qh[g] at 3l
        // above it), 8 per register: a quarter of the scalar shifts and masks
        let block = |wb: *const u8| grid_indices_4x8(wb.add(2), _mm256_cvtepu16_epi32(_mm_loadu_si128(wb.add(34) as *const __m128i)), [0, 3, 6, 9], 7);
        let group = |wb: *const u8, idx: &[u32; 32], g: usize| {
            let h = qh(wb, g);
            let sc = 2 * ((h >> 12) & 7) as i16 + 1;
            // (11-bit indices: the grid has 2048 entries)
            signed_group(grid64x4(&IQ1S_GRID, std::array::from_fn(|l| (idx_at(idx, 4 * g + l) & 2047) as usize)), sc, sc)
        };
        // per group g: bsums 2g and 2g + 1 times ±(2·s + 1), the sign from bit 15 (in
        // registers: a vector built in memory from 16 stores stalls the 256-bit reload)
        let extra = |wb: *const u8| {
            let h = _mm_loadu_si128(wb.add(34) as *const __m128i);
            let sc = _mm_or_si128(_mm_slli_epi16(_mm_and_si128(_mm_srli_epi16(h, 12), _mm_set1_epi16(7)), 1), _mm_set1_epi16(1));
            let f = _mm_sign_epi16(sc, _mm_or_si128(h, _mm_set1_epi16(1)));
            _mm256_set_m128i(_mm_unpackhi_epi16(f, f), _mm_unpacklo_epi16(f, f))
        };
        dot_iq::<R, IQ1_S_B, true, TILED, _>(nb, w, a, a_stride, out, out_stride, 1.0, block, group, extra)
    }
}

row_kernels!(dot_iq1_s, dot_iq1_s_tiled, dot_iq1_s_any);

/// ±1 bytes for the 4 × 8 weights of an IQ1_M group from its 4 delta-sign bits (bit k: the
/// k-th 8 weights' delta is negative).
static IQ1M_DELTA_SIGNS: [[u64; 4]; 16] = {
    let mut t = [[0u64; 4]; 16];
    let mut i = 0;
    while i < 16 {
        let mut k = 0;
        while k < 4 {
            t[i][k] = if i >> k & 1 == 1 { u64::MAX } else { 0x0101_0101_0101_0101 };
            k += 1;
        }
        i += 1;
    }
    t
};

/// IQ1_M × Q8_K (the reference: `quant::iq1_m::vec_dot`): the grid products and the
/// delta-signed activations in two 8-lane FMA accumulators with the per-16 scales, then
/// `fma(hsum(acc2), DELTA, hsum(acc1))`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_iq1_m<const R: usize>(nb: usize, w: *const u8, a: *const u8, a_stride: usize, out: *mut f32, out_stride: usize) {
    // SAFETY: see the module docs. Layout: qs[32] | qh[16] | scales[8] (4 u16).
    unsafe {
        let (mut acc1, mut acc2) = ([_mm256_setzero_ps(); R], [_mm256_setzero_ps(); R]);
        for ib in 0..nb {
            let wb = w.add(ib * IQ1_M_B);
            let sc = std::ptr::read_unaligned(wb.add(48) as *const [u16; 4]);
            let dh = (sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000);
            let dw = f16_at(dh.to_le_bytes().as_ptr());
            let (mut s1, mut s2) = ([_mm256_setzero_si256(); R], [_mm256_setzero_si256(); R]);
            // per block, in registers: the 32 grid indices (4g + k: qs[4g + k] | 3 bits of the
            // group's qh nibble k above it) and the 16 per-16 factors 2·s + 1 (s_j: bits 3(j % 4)
            // of the j/4-th scale word; group g's halves are j = 2g, 2g + 1)
            let idx = grid_indices_4x8(wb, _mm256_cvtepu16_epi32(_mm_loadu_si128(wb.add(32) as *const __m128i)), [0, 4, 8, 12], 7);
            let words = _mm256_shuffle_epi8(
                _mm256_broadcastsi128_si256(_mm_loadl_epi64(wb.add(48) as *const __m128i)),
                _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 4, 5, 4, 5, 4, 5, 4, 5, 6, 7, 6, 7, 6, 7, 6, 7),
            );
            let s3 = _mm256_and_si256(_mm256_srli_epi16::<9>(_mm256_mullo_epi16(words, _mm256_setr_epi16(512, 64, 8, 1, 512, 64, 8, 1, 512, 64, 8, 1, 512, 64, 8, 1))), _mm256_set1_epi16(7));
            let factors = _mm256_or_si256(_mm256_slli_epi16::<1>(s3), _mm256_set1_epi16(1));
            for g in 0..8 {
                // the group's 4 nibbles: 3 high index bits and the delta sign (bit 3) per 8 weights
                let qh = std::ptr::read_unaligned(wb.add(32 + 2 * g) as *const u16) as usize;
                // (11-bit indices: the grid has 2048 entries)
                let q = grid64x4(&IQ1S_GRID, std::array::from_fn(|k| (idx_at(&idx, 4 * g + k) & 2047) as usize));
                let signs = (qh >> 3 & 1) | (qh >> 6 & 2) | (qh >> 9 & 4) | (qh >> 12 & 8);
                let delta = _mm256_loadu_si256(IQ1M_DELTA_SIGNS[signs].as_ptr() as *const __m256i);
                // group g's factor pair (32-bit element g) to every lane, low factor in the low
                // half and high factor in the high half
                let pair = _mm256_permutevar8x32_epi32(factors, _mm256_set1_epi32(g as i32));
                let scv = _mm256_shuffle_epi8(pair, _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3));
                let ax = _mm256_sign_epi8(q, q);
                for r in 0..R {
                    let qy = load256(a.add(r * a_stride + ib * Q8_K_B + 4 + 32 * g));
                    let p1 = _mm256_maddubs_epi16(ax, _mm256_sign_epi8(qy, q));
                    let p2 = _mm256_maddubs_epi16(_mm256_set1_epi8(1), _mm256_sign_epi8(qy, delta));
                    s1[r] = _mm256_add_epi32(s1[r], _mm256_madd_epi16(p1, scv));
                    s2[r] = _mm256_add_epi32(s2[r], _mm256_madd_epi16(p2, scv));
                }
            }
            for r in 0..R {
                let d = _mm256_set1_ps(f32_at(a.add(r * a_stride + ib * Q8_K_B)) * dw);
                acc1[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(s1[r]), acc1[r]);
                acc2[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(s2[r]), acc2[r]);
            }
        }
        for r in 0..R {
            *out.add(r * out_stride) = hsum_float_8(acc2[r]).mul_add(IQ1S_DELTA, hsum_float_8(acc1[r]));
        }
    }
}

/// TQ1_0 / TQ2_0 × Q8_K (the reference: `quant::tq2_0::vec_dot_ternary`): `chunks(w_block)`
/// gives the block's 8 runs of 32 unsigned quants in element order; per lane the exact
/// products minus the block sums' pairs, one FMA with `d_a · d_w` (`d_w` the last 2 bytes).
#[inline(always)]
unsafe fn dot_ternary<const R: usize, const WB: usize>(
    nb: usize,
    w: *const u8,
    a: *const u8,
    a_stride: usize,
    out: *mut f32,
    out_stride: usize,
    chunks: impl Fn(*const u8) -> [__m256i; 8],
) {
    // SAFETY: see the module docs.
    unsafe {
        let mut acc = [_mm256_setzero_ps(); R];
        let ones = _mm256_set1_epi16(1);
        for ib in 0..nb {
            let wb = w.add(ib * WB);
            let q = chunks(wb);
            let dw = f16_at(wb.add(WB - 2));
            for r in 0..R {
                let ab = a.add(r * a_stride + ib * Q8_K_B);
                let mut sumi = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_madd_epi16(load256(ab.add(4 + QK_K)), ones));
                for c in 0..8 {
                    sumi = _mm256_add_epi32(sumi, mul_sum_us8_pairs(q[c], load256(ab.add(4 + 32 * c))));
                }
                acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(f32_at(ab) * dw), _mm256_cvtepi32_ps(sumi), acc[r]);
            }
        }
        for r in 0..R {
            *out.add(r * out_stride) = hsum_float_8(acc[r]);
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_tq2_0<const R: usize>(nb: usize, w: *const u8, a: *const u8, a_stride: usize, out: *mut f32, out_stride: usize) {
    // SAFETY: forwarded contract. Layout: qs[64] (2-bit planes of two 128-weight runs) | d.
    unsafe {
        let chunks = |wb: *const u8| {
            let m3 = _mm256_set1_epi8(3);
            std::array::from_fn(|c| _mm256_and_si256(_mm256_srl_epi16(load256(wb.add(32 * (c / 4))), _mm_cvtsi32_si128(2 * (c % 4) as i32)), m3))
        };
        dot_ternary::<R, TQ2_0_B>(nb, w, a, a_stride, out, out_stride, chunks)
    }
}

/// Trits of bytes already multiplied by 3^n (mod 256): `((q · 3) >> 8)`, computed as
/// upstream's kernel does (saturating −1, two `avg_epu8`, `>> 6`; equal for every byte).
#[inline(always)]
unsafe fn trits(q: __m256i) -> __m256i {
    // SAFETY: register-only AVX2 intrinsics.
    unsafe {
        let t = _mm256_subs_epu8(q, _mm256_set1_epi8(1));
        let t = _mm256_avg_epu8(t, _mm256_avg_epu8(t, _mm256_setzero_si256()));
        _mm256_and_si256(_mm256_srli_epi16(t, 6), _mm256_set1_epi8(3))
    }
}

/// Bytes times 3 and 9 (mod 256) without 8-bit multiplies.
#[inline(always)]
unsafe fn times3(x: __m256i) -> __m256i {
    // SAFETY: register-only AVX2 intrinsics.
    unsafe { _mm256_add_epi8(x, _mm256_add_epi8(x, x)) }
}
#[inline(always)]
unsafe fn times9(x: __m256i) -> __m256i {
    // SAFETY: register-only AVX2 intrinsics.
    unsafe { _mm256_add_epi8(_mm256_and_si256(_mm256_slli_epi16(x, 3), _mm256_set1_epi8(-8)), x) }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_tq1_0<const R: usize>(nb: usize, w: *const u8, a: *const u8, a_stride: usize, out: *mut f32, out_stride: usize) {
    // SAFETY: forwarded contract. Layout: qs[48] (5 trits a byte) | qh[4] (4) | d.
    unsafe {
        let chunks = |wb: *const u8| {
            // weights 0..160: trit n of qs[m] (m < 32) is weight 32n + m
            let x = load256(wb);
            let (x3, x9) = (times3(x), times9(x));
            // weights 160..240: trit n of qs[32 + m] is 160 + 16n + m; 240..256: trit n of
            // qh[m] is 240 + 4n + m, i.e. byte p of the 16 is qh[p % 4] · 3^(p / 4)
            let y = _mm_loadu_si128(wb.add(32) as *const __m128i);
            let y = _mm256_set_m128i(y, y);
            let (y3, y9) = (times3(y), times9(y));
            let qh = _mm256_cvtepu8_epi16(_mm_set1_epi32(std::ptr::read_unaligned(wb.add(48) as *const i32)));
            let qh = _mm256_and_si256(_mm256_mullo_epi16(qh, _mm256_set_epi16(27, 27, 27, 27, 9, 9, 9, 9, 3, 3, 3, 3, 1, 1, 1, 1)), _mm256_set1_epi16(0xff));
            let qh = _mm_packus_epi16(_mm256_castsi256_si128(qh), _mm256_extracti128_si256(qh, 1));
            let y01 = _mm256_blend_epi32::<0xf0>(y, y3);
            let y23 = _mm256_blend_epi32::<0xf0>(y9, times3(y9));
            let y4h = _mm256_set_m128i(qh, _mm256_castsi256_si128(times9(y9)));
            [x, x3, x9, times3(x9), times9(x9), y01, y23, y4h].map(|v| trits(v))
        };
        dot_ternary::<R, TQ1_0_B>(nb, w, a, a_stride, out, out_stride, chunks)
    }
}

/// NVFP4 × Q8_0 (the reference: `quant::nvfp4::vec_dot`): per 32 weights one FMA whose lanes
/// 0..4 carry one 16-weight sub-block's `ue4m3(d_s) · d_a` and lanes 4..8 the next one's.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_nvfp4<const R: usize>(nb: usize, w: *const u8, a: *const u8, a_stride: usize, out: *mut f32, out_stride: usize) {
    // SAFETY: see the module docs. Layout: d[4] | qs[32] (8 bytes per 16 weights).
    unsafe {
        let table = _mm_loadu_si128(KVALUES_FP4.as_ptr() as *const __m128i);
        let m4 = _mm_set1_epi8(0x0f);
        let mut acc = [_mm256_setzero_ps(); R];
        for ib in 0..nb {
            let wb = w.add(ib * NVFP4_B);
            for h in 0..2 {
                let bits = _mm_loadu_si128(wb.add(4 + 16 * h) as *const __m128i);
                let lo = _mm_shuffle_epi8(table, _mm_and_si128(bits, m4));
                let hi = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(bits, 4), m4));
                let q = _mm256_set_m128i(_mm_unpackhi_epi64(lo, hi), _mm_unpacklo_epi64(lo, hi));
                let ax = _mm256_sign_epi8(q, q);
                let (s0, s1) = (ue4m3(*wb.add(2 * h)), ue4m3(*wb.add(2 * h + 1)));
                for r in 0..R {
                    let ab = a.add(r * a_stride + (2 * ib + h) * Q8_0_B);
                    let dy = f16_at(ab);
                    let p = mul_sum_us8_pairs(ax, _mm256_sign_epi8(load256(ab.add(2)), q));
                    let sc = _mm256_set_m128(_mm_set1_ps(s1 * dy), _mm_set1_ps(s0 * dy));
                    acc[r] = _mm256_fmadd_ps(sc, _mm256_cvtepi32_ps(p), acc[r]);
                }
            }
        }
        for r in 0..R {
            *out.add(r * out_stride) = hsum_float_8(acc[r]);
        }
    }
}

/// Q1_0 × Q8_0 (the reference: `quant::q1_0::vec_dot`): per Q8_0 block the activations
/// negated where the bit is clear and summed in lanes, scaled by `d_a` into a block accumulator
/// (a multiply, then three FMAs), one FMA with `d_w` into the row's.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_q1_0<const R: usize>(nb: usize, w: *const u8, a: *const u8, a_stride: usize, out: *mut f32, out_stride: usize) {
    // SAFETY: see the module docs. Layout: d | qs[16].
    unsafe {
        let ones = _mm256_set1_epi8(1);
        let mut acc = [_mm256_setzero_ps(); R];
        for ib in 0..nb {
            let wb = w.add(ib * Q1_0_B);
            let dw = f16_at(wb);
            let neg: [__m256i; 4] = std::array::from_fn(|k| {
                let set = bytes_from_bits_32(std::ptr::read_unaligned(wb.add(2 + 4 * k) as *const u32));
                _mm256_xor_si256(set, _mm256_set1_epi8(-1))
            });
            for r in 0..R {
                let ab = a.add(r * a_stride + 4 * ib * Q8_0_B);
                // the four activation scales by one vcvtph2ps (every lane used: no partial merge)
                let h = |k: usize| std::ptr::read_unaligned(ab.add(k * Q8_0_B) as *const u16) as i64;
                let dy = _mm256_castps128_ps256(_mm_cvtph_ps(_mm_cvtsi64_si128(h(0) | h(1) << 16 | h(2) << 32 | h(3) << 48)));
                let mut blk = _mm256_setzero_ps();
                for k in 0..4 {
                    let y = ab.add(k * Q8_0_B);
                    let sy = _mm256_sub_epi8(_mm256_xor_si256(load256(y.add(2)), neg[k]), neg[k]);
                    let s = _mm256_cvtepi32_ps(mul_sum_us8_pairs(ones, sy));
                    let d = _mm256_permutevar8x32_ps(dy, _mm256_set1_epi32(k as i32));
                    blk = if k == 0 { _mm256_mul_ps(d, s) } else { _mm256_fmadd_ps(d, s, blk) };
                }
                acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw), blk, acc[r]);
            }
        }
        for r in 0..R {
            *out.add(r * out_stride) = hsum_float_8(acc[r]);
        }
    }
}

/// Q2_0 × Q8_0 (the reference: `quant::q2_0::vec_dot`, upstream's generic loop): the exact
/// integer sums of each Q8_0 block in SIMD, the float steps as the scalar reference's.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_q2_0<const R: usize>(nb: usize, w: *const u8, a: *const u8, a_stride: usize, out: *mut f32, out_stride: usize) {
    // SAFETY: see the module docs. Layout: d | qs[16], weight j at bits 2(j % 4) of byte j / 4.
    unsafe {
        // byte b of 8 repeated at 4b..4b+4 (each 128-bit lane holds 4 of the 8), then field p % 4
        let rep = _mm256_setr_epi8(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7);
        let pos = |j: i32| _mm256_set1_epi32(0xff << (8 * j));
        let (m3, ones) = (_mm256_set1_epi8(3), _mm256_set1_epi8(1));
        let mut sumf = [0f32; R];
        for ib in 0..nb {
            let wb = w.add(ib * Q2_0_B);
            let dw = f16_at(wb);
            let q: [__m256i; 2] = std::array::from_fn(|k| {
                let x = _mm256_shuffle_epi8(_mm256_set1_epi64x(std::ptr::read_unaligned(wb.add(2 + 8 * k) as *const i64)), rep);
                let f = |j: i32| _mm256_and_si256(_mm256_and_si256(_mm256_srl_epi16(x, _mm_cvtsi32_si128(2 * j)), m3), pos(j));
                _mm256_or_si256(_mm256_or_si256(f(0), f(1)), _mm256_or_si256(f(2), f(3)))
            });
            for r in 0..R {
                let mut sumi = 0f32;
                for k in 0..2 {
                    let y = a.add(r * a_stride + (2 * ib + k) * Q8_0_B);
                    let qy = load256(y.add(2));
                    // Σ (q − 1)·y = Σ q·y − Σ y, both exact
                    let v = _mm256_sub_epi32(mul_sum_us8_pairs(q[k], qy), mul_sum_us8_pairs(ones, qy));
                    let v = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
                    let v = _mm_add_epi32(v, _mm_unpackhi_epi64(v, v));
                    let s = _mm_cvtsi128_si32(_mm_add_epi32(v, _mm_shuffle_epi32(v, 0b01)));
                    sumi += f16_at(y) * s as f32;
                }
                sumf[r] += dw * sumi;
            }
        }
        for r in 0..R {
            *out.add(r * out_stride) = sumf[r];
        }
    }
}

/// IQ4_NL / MXFP4 × Q8_0 in upstream's pairs (the reference: `quant::legacy::vec_dot_q8_0_pairs`):
/// even and odd blocks in two accumulators, `hsum(acc1 + acc2)`, an odd last block added as
/// `sumf + d · sumi` with the exact integer sum. `F16`: the scales are f16 at the block start.
#[inline(always)]
unsafe fn dot_nl_pairs<const R: usize, const WB: usize, const F16: bool>(
    nb: usize,
    w: *const u8,
    a: *const u8,
    a_stride: usize,
    out: *mut f32,
    out_stride: usize,
    values: &[i8; 16],
    qs_off: usize,
    scale: impl Fn(*const u8) -> f32,
) {
    // SAFETY: see the module docs.
    unsafe {
        let table = _mm256_broadcastsi128_si256(_mm_loadu_si128(values.as_ptr() as *const __m128i));
        let (mut acc1, mut acc2) = ([_mm256_setzero_ps(); R], [_mm256_setzero_ps(); R]);
        let pairs = nb / 2 * 2;
        for ib in (0..pairs).step_by(2) {
            let (w1, w2) = (w.add(ib * WB), w.add((ib + 1) * WB));
            prefetch_decode::<R, WB>(w1);
            prefetch_decode::<R, WB>(w2);
            let (d1, d2) = if F16 { (0.0, 0.0) } else { (scale(w1), scale(w2)) };
            let q1 = _mm256_shuffle_epi8(table, bytes_from_nibbles_32(w1.add(qs_off)));
            let q2 = _mm256_shuffle_epi8(table, bytes_from_nibbles_32(w2.add(qs_off)));
            let (ax1, ax2) = (_mm256_sign_epi8(q1, q1), _mm256_sign_epi8(q2, q2));
            for r in 0..R {
                let ab = a.add(r * a_stride + ib * Q8_0_B);
                let p1 = mul_sum_us8_pairs(ax1, _mm256_sign_epi8(load256(ab.add(2)), q1));
                let p2 = mul_sum_us8_pairs(ax2, _mm256_sign_epi8(load256(ab.add(Q8_0_B + 2)), q2));
                let (s1, s2) = if F16 {
                    // d_a · d_w of both blocks from one conversion of the four f16 fields
                    let h = |p: *const u8| std::ptr::read_unaligned(p as *const u16) as i64;
                    let v = _mm_cvtph_ps(_mm_cvtsi64_si128(h(ab) | h(ab.add(Q8_0_B)) << 16 | h(w1) << 32 | h(w2) << 48));
                    let m = _mm_mul_ps(v, _mm_movehl_ps(v, v));
                    (_mm_cvtss_f32(m), _mm_cvtss_f32(_mm_movehdup_ps(m)))
                } else {
                    let (a1, a2) = f16_pair(ab, ab.add(Q8_0_B));
                    (a1 * d1, a2 * d2)
                };
                acc1[r] = _mm256_fmadd_ps(_mm256_set1_ps(s1), _mm256_cvtepi32_ps(p1), acc1[r]);
                acc2[r] = _mm256_fmadd_ps(_mm256_set1_ps(s2), _mm256_cvtepi32_ps(p2), acc2[r]);
            }
        }
        for r in 0..R {
            let mut sumf = hsum_float_8(_mm256_add_ps(acc1[r], acc2[r]));
            if pairs < nb {
                let (wb, ab) = (w.add(pairs * WB), a.add(r * a_stride + pairs * Q8_0_B));
                let mut sumi = 0i32;
                for j in 0..16 {
                    let byte = *wb.add(qs_off + j);
                    sumi += values[(byte & 15) as usize] as i32 * *ab.add(2 + j) as i8 as i32;
                    sumi += values[(byte >> 4) as usize] as i32 * *ab.add(18 + j) as i8 as i32;
                }
                sumf += f16_at(ab) * scale(wb) * sumi as f32;
            }
            *out.add(r * out_stride) = sumf;
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_iq4_nl<const R: usize>(nb: usize, w: *const u8, a: *const u8, a_stride: usize, out: *mut f32, out_stride: usize) {
    // SAFETY: forwarded contract. Layout: d | qs[16].
    unsafe { dot_nl_pairs::<R, IQ4_NL_B, true>(nb, w, a, a_stride, out, out_stride, &KVALUES_IQ4NL, 2, |b| f16_at(b)) }
}

/// IQ4_NL in llamafile tinyBLAS's order (`quant::vec_dot_sgemm`): Q4_0's single accumulator
/// over IQ4_NL's codebook values.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_iq4_nl_sgemm<const R: usize>(nb: usize, w: *const u8, a: *const u8, a_stride: usize, out: *mut f32, out_stride: usize) {
    // SAFETY: forwarded contract. Layout: d | qs[16].
    unsafe {
        let table = _mm256_broadcastsi128_si256(_mm_loadu_si128(KVALUES_IQ4NL.as_ptr() as *const __m128i));
        dot_signed_q8_0::<R, IQ4_NL_B>(nb, w, a, a_stride, out, out_stride, |b| _mm256_shuffle_epi8(table, bytes_from_nibbles_32(b.add(2))))
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_mxfp4<const R: usize>(nb: usize, w: *const u8, a: *const u8, a_stride: usize, out: *mut f32, out_stride: usize) {
    // SAFETY: forwarded contract. Layout: e | qs[16].
    unsafe { dot_nl_pairs::<R, MXFP4_B, false>(nb, w, a, a_stride, out, out_stride, &KVALUES_FP4, 1, |b| e8m0_half(*b)) }
}

// ---------------------------------------------------------------------------------------------
// float weights

/// 16-lane reduction of two 8-lane halves in `_mm512_reduce_add_ps` order.
#[inline(always)]
unsafe fn reduce16(lo: __m256, hi: __m256) -> f32 {
    // SAFETY: register-only AVX intrinsics. t = lo + hi (lanes i and i+8), then hsum_float_8's
    // order ((t0+t4) + (t2+t6)) + ((t1+t5) + (t3+t7)) is the reference's reduce16.
    unsafe { hsum_float_8(_mm256_add_ps(lo, hi)) }
}

/// F16 weights × F16 activations (`n` elements), the AVX-512F layout of ggml_vec_dot_f16
/// emulated with pairs of 8-lane registers.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_f16<const R: usize>(n: usize, w: *const u8, a: *const u8, a_stride: usize, out: *mut f32, out_stride: usize) {
    // SAFETY: see the module docs (here `n` counts elements of 2 bytes).
    unsafe {
        let steps = n / 64;
        let sums = sums_4x16::<R, 2>(steps, w, a, a_stride, |p| _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i)));
        for r in 0..R {
            let mut sumf = sums[r] as f64;
            let ar = a.add(r * a_stride);
            for i in 64 * steps..n {
                sumf += (f16_at(w.add(2 * i)) * f16_at(ar.add(2 * i))) as f64;
            }
            *out.add(r * out_stride) = sumf as f32;
        }
    }
}

/// The 64-element steps of the AVX-512F f32/f16 dot layout (`GGML_F32_STEP`, four 16-lane
/// accumulators) emulated with pairs of 8-lane registers, over elements of `B` bytes widened
/// to f32 by `load` (8 at a time); per activation row the reduction (s0+s2) + (s1+s3), then
/// the 16-lane sum.
#[inline(always)]
unsafe fn sums_4x16<const R: usize, const B: usize>(steps: usize, w: *const u8, a: *const u8, a_stride: usize, load: impl Fn(*const u8) -> __m256) -> [f32; R] {
    // SAFETY: the callers' contract covers steps * 64 elements of every row.
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); 8]; R];
        for s in 0..steps {
            let mut wv = [_mm256_setzero_ps(); 8];
            for (j, v) in wv.iter_mut().enumerate() {
                *v = load(w.add(B * (64 * s + 8 * j)));
            }
            for r in 0..R {
                let ar = a.add(r * a_stride);
                for j in 0..8 {
                    acc[r][j] = _mm256_fmadd_ps(wv[j], load(ar.add(B * (64 * s + 8 * j))), acc[r][j]);
                }
            }
        }
        std::array::from_fn(|r| {
            let v = &acc[r];
            // accumulator J (16 lanes) = (v[2J], v[2J+1]); (s0+s2), (s1+s3), then s0+s1
            let s0l = _mm256_add_ps(_mm256_add_ps(v[0], v[4]), _mm256_add_ps(v[2], v[6]));
            let s0h = _mm256_add_ps(_mm256_add_ps(v[1], v[5]), _mm256_add_ps(v[3], v[7]));
            reduce16(s0l, s0h)
        })
    }
}

/// F32 weights × F32 activations (`n` elements), the AVX-512F layout of ggml_vec_dot_f32
/// (`quant::half::vec_dot_f32`) emulated with pairs of 8-lane registers; the leftovers as the
/// reference takes them (whole groups of 4 by plain products, the rest fused).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_f32<const R: usize>(n: usize, w: *const u8, a: *const u8, a_stride: usize, out: *mut f32, out_stride: usize) {
    // SAFETY: see the module docs (here `n` counts elements of 4 bytes).
    unsafe {
        let steps = n / 64;
        let sums = sums_4x16::<R, 4>(steps, w, a, a_stride, |p| _mm256_loadu_ps(p as *const f32));
        let rest = 64 * steps;
        let split = rest + (n - rest) / 4 * 4;
        for r in 0..R {
            let mut sumf = sums[r];
            let ar = a.add(r * a_stride);
            for i in rest..split {
                sumf += f32_at(w.add(4 * i)) * f32_at(ar.add(4 * i));
            }
            for i in split..n {
                sumf = _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(f32_at(w.add(4 * i))), _mm_set_ss(f32_at(ar.add(4 * i))), _mm_set_ss(sumf)));
            }
            *out.add(r * out_stride) = sumf;
        }
    }
}

/// BF16 weights × BF16 activations (`n` elements), the layout of ggml_vec_dot_bf16 on AVX-512F
/// without AVX512_BF16 (`quant::half::vec_dot_bf16`): two 16-lane accumulators over steps of 32,
/// each reduced into an f64 total, the leftovers added in f64. The products of two bf16 values
/// are exact in f32, so the FMA here equals the reference's multiply and add.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_bf16<const R: usize>(n: usize, w: *const u8, a: *const u8, a_stride: usize, out: *mut f32, out_stride: usize) {
    // SAFETY: see the module docs (here `n` counts elements of 2 bytes).
    unsafe {
        let steps = n / 32;
        let mut acc = [[_mm256_setzero_ps(); 4]; R];
        let ld = |p: *const u8| _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(_mm_loadu_si128(p as *const __m128i))));
        for s in 0..steps {
            let mut wv = [_mm256_setzero_ps(); 4];
            for (j, v) in wv.iter_mut().enumerate() {
                *v = ld(w.add(2 * (32 * s + 8 * j)));
            }
            for r in 0..R {
                let ar = a.add(r * a_stride);
                for j in 0..4 {
                    acc[r][j] = _mm256_fmadd_ps(wv[j], ld(ar.add(2 * (32 * s + 8 * j))), acc[r][j]);
                }
            }
        }
        let bf = |p: *const u8| f32::from_bits((std::ptr::read_unaligned(p as *const u16) as u32) << 16);
        for r in 0..R {
            let v = &acc[r];
            let mut sumf = reduce16(v[0], v[1]) as f64;
            sumf += reduce16(v[2], v[3]) as f64;
            let ar = a.add(r * a_stride);
            for i in 32 * steps..n {
                sumf += (bf(w.add(2 * i)) * bf(ar.add(2 * i))) as f64;
            }
            *out.add(r * out_stride) = sumf as f32;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// activation quantization

/// Q8_0 (x86 `quantize_row_q8_0`): `src.len()` a multiple of 32, `dst` 34 bytes per block.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn quantize_q8_0(src: &[f32], dst: &mut [u8]) {
    // SAFETY: the caller checked dst.len() == src.len() / 32 * 34 and the CPU features.
    unsafe { quantize_q8_x::<false>(src, dst) }
}

/// Q8_1 (x86 `quantize_row_q8_1`): as Q8_0 plus `s = d * sum(q)`; 36 bytes per block.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn quantize_q8_1(src: &[f32], dst: &mut [u8]) {
    // SAFETY: as quantize_q8_0 with 36-byte blocks.
    unsafe { quantize_q8_x::<true>(src, dst) }
}

#[inline(always)]
unsafe fn quantize_q8_x<const SUM: bool>(src: &[f32], dst: &mut [u8]) {
    let bb = if SUM { Q8_1_B } else { Q8_0_B };
    let nb = src.len() / 32;
    assert!(src.len().is_multiple_of(32) && dst.len() == nb * bb);
    // SAFETY: block ib reads src[32ib..32ib+32] and writes dst[bb*ib..bb*(ib+1)], in bounds by
    // the assert above.
    unsafe {
        let sign = _mm256_set1_ps(-0.0);
        let perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        for ib in 0..nb {
            let x = src.as_ptr().add(32 * ib);
            let v0 = _mm256_loadu_ps(x);
            let v1 = _mm256_loadu_ps(x.add(8));
            let v2 = _mm256_loadu_ps(x.add(16));
            let v3 = _mm256_loadu_ps(x.add(24));
            let mut m = _mm256_andnot_ps(sign, v0);
            m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v1));
            m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v2));
            m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v3));
            let mut m4 = _mm_max_ps(_mm256_extractf128_ps(m, 1), _mm256_castps256_ps128(m));
            m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
            m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
            let amax = _mm_cvtss_f32(m4);
            let d = amax / 127.0;
            let o = dst.as_mut_ptr().add(bb * ib);
            let dh = f32_to_f16_bits(d);
            std::ptr::write_unaligned(o as *mut u16, dh);
            let id = _mm256_set1_ps(if amax != 0.0 { 127.0 / amax } else { 0.0 });
            let r = |v| _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v, id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
            let (i0, i1, i2, i3) = (r(v0), r(v1), r(v2), r(v3));
            if SUM {
                let s = _mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3));
                let mut l = [0i32; 8];
                _mm256_storeu_si256(l.as_mut_ptr() as *mut __m256i, s);
                let sum: i32 = l.iter().sum();
                let sh = f32_to_f16_bits(d * sum as f32);
                std::ptr::write_unaligned(o.add(2) as *mut u16, sh);
            }
            let p01 = _mm256_packs_epi32(i0, i1);
            let p23 = _mm256_packs_epi32(i2, i3);
            let p = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p01, p23), perm);
            _mm256_storeu_si256(o.add(if SUM { 4 } else { 2 }) as *mut __m256i, p);
        }
    }
}

/// Q8_K (`quantize_row_q8_K`): `src.len()` a multiple of 256, 292 bytes per block.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn quantize_q8_k(src: &[f32], dst: &mut [u8]) {
    let nb = src.len() / QK_K;
    assert!(src.len().is_multiple_of(QK_K) && dst.len() == nb * Q8_K_B);
    // SAFETY: block ib reads src[256ib..] (256 floats) and writes dst[292ib..] (292 bytes).
    unsafe {
        let sign = _mm256_set1_ps(-0.0);
        let perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        for ib in 0..nb {
            let x = src.as_ptr().add(QK_K * ib);
            let o = dst.as_mut_ptr().add(Q8_K_B * ib);
            let mut m = _mm256_setzero_ps();
            for j in 0..32 {
                m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x.add(8 * j))));
            }
            let mut m4 = _mm_max_ps(_mm256_extractf128_ps(m, 1), _mm256_castps256_ps128(m));
            m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
            m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
            let amax = _mm_cvtss_f32(m4);
            if amax == 0.0 {
                std::ptr::write_bytes(o, 0, Q8_K_B);
                continue;
            }
            // the first element whose |x| is amax gives the sign (as the scalar loop does)
            let am = _mm256_set1_ps(amax);
            let mut max = amax;
            for j in 0..32 {
                let v = _mm256_loadu_ps(x.add(8 * j));
                let eq = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign, v), am, _CMP_EQ_OQ));
                if eq != 0 {
                    max = *x.add(8 * j + eq.trailing_zeros() as usize);
                    break;
                }
            }
            let iscale = -127.0 / max;
            let is = _mm256_set1_ps(iscale);
            let c127 = _mm256_set1_epi32(127);
            let q = o.add(4);
            for j in 0..8 {
                let xj = x.add(32 * j);
                let r = |k: usize| {
                    let v = _mm256_mul_ps(is, _mm256_loadu_ps(xj.add(8 * k)));
                    _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)), c127)
                };
                let p01 = _mm256_packs_epi32(r(0), r(1));
                let p23 = _mm256_packs_epi32(r(2), r(3));
                let p = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p01, p23), perm);
                _mm256_storeu_si256(q.add(32 * j) as *mut __m256i, p);
                // bsums of the two 16-element halves
                let lo = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(p));
                let hi = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(p, 1));
                let one = _mm256_set1_epi16(1);
                let sl = _mm256_madd_epi16(lo, one);
                let sh = _mm256_madd_epi16(hi, one);
                // hadd: [l0+l1, l2+l3, h0+h1, h2+h3 | l4+l5, l6+l7, h4+h5, h6+h7]
                let h = _mm256_hadd_epi32(sl, sh);
                let h = _mm256_hadd_epi32(h, h);
                // [L0123, H0123, .., .. | L4567, H4567, .., ..]
                let t = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
                let bl = _mm_cvtsi128_si32(t) as i16;
                let bh = _mm_extract_epi32(t, 1) as i16;
                std::ptr::write_unaligned(o.add(4 + QK_K + 4 * j) as *mut i16, bl);
                std::ptr::write_unaligned(o.add(4 + QK_K + 4 * j + 2) as *mut i16, bh);
            }
            std::ptr::write_unaligned(o as *mut f32, 1.0 / iscale);
        }
    }
}

/// F16 activations (`quantize_row` for F16 weights): round to nearest even.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn quantize_f16(src: &[f32], dst: &mut [u8]) {
    assert!(dst.len() == 2 * src.len());
    let n8 = src.len() / 8;
    // SAFETY: chunk i reads src[8i..8i+8] and writes dst[16i..16i+16], in bounds.
    unsafe {
        for i in 0..n8 {
            let v = _mm256_loadu_ps(src.as_ptr().add(8 * i));
            let h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
            _mm_storeu_si128(dst.as_mut_ptr().add(16 * i) as *mut __m128i, h);
        }
    }
    for i in 8 * n8..src.len() {
        dst[2 * i..2 * i + 2].copy_from_slice(&crate::quant::f32_to_f16(src[i]).to_le_bytes());
    }
}

// ---------------------------------------------------------------------------------------------
// prefill: 8 weight rows × R activation rows

/// Bytes of one block of an 8-row panel: 8 × 32 unpacked quants (unsigned), 8 f32 scales,
/// 8 f32 minimums.
pub(crate) const PANEL_BLOCK: usize = 320;

/// Unpacks 8 weight rows (`w + j * w_stride`) of `nb` blocks into a panel (`nb * PANEL_BLOCK`
/// bytes at `panel`), so that the 8-row kernels read them ready for `maddubs`.
#[inline(always)]
unsafe fn unpack8<const WB: usize, const MIN: bool>(nb: usize, w: *const u8, w_stride: usize, panel: *mut u8, unpack: impl Fn(*const u8) -> __m256i) {
    // SAFETY: the caller guarantees 8 rows of nb blocks at w and nb * PANEL_BLOCK bytes at panel.
    unsafe {
        for ib in 0..nb {
            let pb = panel.add(ib * PANEL_BLOCK);
            let mut dh = [0u16; 8];
            let mut mh = [0u16; 8];
            for j in 0..8 {
                let wb = w.add(j * w_stride + ib * WB);
                dh[j] = std::ptr::read_unaligned(wb as *const u16);
                if MIN {
                    mh[j] = std::ptr::read_unaligned(wb.add(2) as *const u16);
                }
                _mm256_storeu_si256(pb.add(32 * j) as *mut __m256i, unpack(wb));
            }
            _mm256_storeu_ps(pb.add(256) as *mut f32, _mm256_cvtph_ps(_mm_loadu_si128(dh.as_ptr() as *const __m128i)));
            _mm256_storeu_ps(pb.add(288) as *mut f32, _mm256_cvtph_ps(_mm_loadu_si128(mh.as_ptr() as *const __m128i)));
        }
    }
}

/// 8 weight rows (an unpacked panel of `nb` blocks) × R activation rows (`a + i * a_stride`,
/// with their per-block [`ActAux`] at `aux + i * nb`); result (i, j) to
/// `out + i * out_stride + j`.
///
/// Each block's integer products are reduced to one sum per row before the FMA, so these sum
/// in a different order from the reference (not bit-exact; well within 1e-5 of it).
#[inline(always)]
unsafe fn gemm8p<const R: usize, const AB: usize, const MIN: bool>(nb: usize, panel: *const u8, a: *const u8, a_stride: usize, aux: *const ActAux, out: *mut f32, out_stride: usize) {
    // SAFETY: see the module docs; the panel holds nb blocks; aux holds R rows of nb entries.
    unsafe {
        let ones = _mm256_set1_epi16(1);
        let mut acc = [_mm256_setzero_ps(); R];
        let mut summs = [_mm256_setzero_ps(); R];
        for ib in 0..nb {
            let pb = panel.add(ib * PANEL_BLOCK);
            let dw = _mm256_loadu_ps(pb.add(256) as *const f32);
            for r in 0..R {
                let ab = a.add(r * a_stride + ib * AB);
                let x = &*aux.add(r * nb + ib);
                let y = load256(ab.add(AB - 32));
                let p = |j: usize| _mm256_madd_epi16(_mm256_maddubs_epi16(load256(pb.add(32 * j)), y), ones);
                let h01 = _mm256_hadd_epi32(p(0), p(1));
                let h23 = _mm256_hadd_epi32(p(2), p(3));
                let h45 = _mm256_hadd_epi32(p(4), p(5));
                let h67 = _mm256_hadd_epi32(p(6), p(7));
                let h0123 = _mm256_hadd_epi32(h01, h23);
                let h4567 = _mm256_hadd_epi32(h45, h67);
                let mut isum = _mm256_add_epi32(_mm256_permute2x128_si256(h0123, h4567, 0x20), _mm256_permute2x128_si256(h0123, h4567, 0x31));
                if MIN {
                    let mw = _mm256_loadu_ps(pb.add(288) as *const f32);
                    summs[r] = _mm256_fmadd_ps(mw, _mm256_set1_ps(x.s), summs[r]);
                } else {
                    // the quants were taken unsigned: subtract offset * sum(y)
                    isum = _mm256_sub_epi32(isum, _mm256_set1_epi32(x.corr));
                }
                let d = _mm256_mul_ps(dw, _mm256_set1_ps(x.d));
                acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(isum), acc[r]);
            }
        }
        for r in 0..R {
            let v = if MIN { _mm256_add_ps(acc[r], summs[r]) } else { acc[r] };
            _mm256_storeu_ps(out.add(r * out_stride), v);
        }
    }
}

/// A Q5_0 / Q5_1 block's 32 quants as unsigned bytes (0..32): its `qh` word at `qh`, its 16
/// nibble bytes at `qs`.
#[inline(always)]
unsafe fn unsigned_q5(qh: *const u8, qs: *const u8) -> __m256i {
    // SAFETY: the caller guarantees 4 readable bytes at qh and 16 at qs; AVX2 checked by the
    // callers.
    unsafe {
        let hi = _mm256_and_si256(bytes_from_bits_32(std::ptr::read_unaligned(qh as *const u32)), _mm256_set1_epi8(0x10));
        _mm256_or_si256(bytes_from_nibbles_32(qs), hi)
    }
}

/// Bytes of one block of a transposed 8-row Q8_0 panel ([`unpack8t_q8_0`]): the quants'
/// magnitudes, then the quants themselves (their signs), then 8 f32 scales.
pub(crate) const PANEL8T_Q8_0_BLOCK: usize = 544;

/// Bytes per block and offset of the scales in a transposed 8-row panel ([`unpack8t`]).
const fn panel8t_layout(signed: bool) -> (usize, usize) {
    if signed { (PANEL8T_Q8_0_BLOCK, 512) } else { (PANEL_BLOCK, 256) }
}

/// Unpacks 8 weight rows of `nb` blocks transposed: run `g` of a block's panel (32 bytes at `32
/// g`) holds in 32-bit lane `j` row `j`'s quants `4g .. 4g + 4` (the reference's lane `g`) as
/// `unpack` gives them (Q4_0 / Q5_0: unsigned; `SIGNED` (Q8_0): their magnitudes, and at 256
/// the signed quants); then the rows' scales as f32 (at 256, or 512 if `SIGNED`).
#[inline(always)]
unsafe fn unpack8t<const WB: usize, const SIGNED: bool>(nb: usize, w: *const u8, w_stride: usize, panel: *mut u8, unpack: impl Fn(*const u8) -> __m256i) {
    // SAFETY: the caller guarantees 8 rows of nb blocks at w and nb * (PANEL_BLOCK or
    // PANEL8T_Q8_0_BLOCK if SIGNED) bytes at panel.
    unsafe {
        let (block, d_at) = panel8t_layout(SIGNED);
        for ib in 0..nb {
            let pb = panel.add(ib * block);
            let mut dh = [0u16; 8];
            let mut q = [_mm256_setzero_si256(); 8];
            for j in 0..8 {
                let wb = w.add(j * w_stride + ib * WB);
                dh[j] = std::ptr::read_unaligned(wb as *const u16);
                q[j] = unpack(wb);
            }
            for (g, t) in transpose8x32(q).into_iter().enumerate() {
                if SIGNED {
                    _mm256_storeu_si256(pb.add(32 * g) as *mut __m256i, _mm256_sign_epi8(t, t));
                    _mm256_storeu_si256(pb.add(256 + 32 * g) as *mut __m256i, t);
                } else {
                    _mm256_storeu_si256(pb.add(32 * g) as *mut __m256i, t);
                }
            }
            _mm256_storeu_ps(pb.add(d_at) as *mut f32, _mm256_cvtph_ps(_mm_loadu_si128(dh.as_ptr() as *const __m128i)));
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn unpack8t_q8_0(nb: usize, w: *const u8, w_stride: usize, panel: *mut u8) {
    // SAFETY: forwarded contract.
    unsafe { unpack8t::<Q8_0_B, true>(nb, w, w_stride, panel, |b| unpack_q8_0(b)) }
}

/// A transposed 8-row panel ([`unpack8t`]) × R Q8_0 activation rows (`a + i * a_stride`,
/// per-block [`ActAux`] at `aux + i * nb` with `corr_g = offset * sum(q of group g)`); result
/// (i, j) to `out + i * out_stride + j`. Bit for bit the reference's `vec_dot` (upstream's AVX2
/// order): the reference's 32-bit lane `g` (the products of group `g` of 4 quants) is
/// accumulator `g` here, whose lane `j` is weight row `j`; one FMA per block with the 8 rows'
/// `d_w · d_a`; the accumulators then added as `hsum_float_8` adds lanes, ((0 + 4) + (2 + 6)) +
/// ((1 + 5) + (3 + 7)). The lane's integers are the reference's (its sign trick): Q4_0 / Q5_0
/// as `maddubs` of the unsigned quants less `corr_g`; Q8_0 (`SIGNED`) as `maddubs` of the
/// magnitudes and the activation signed by the quants. Against the per-row kernel: no
/// unpacking per activation row, no broadcast of scales; one `maddubs` serves 8 rows.
#[inline(always)]
unsafe fn gemm8t<const R: usize, const SIGNED: bool>(nb: usize, panel: *const u8, a: *const u8, a_stride: usize, aux: *const ActAux, out: *mut f32, out_stride: usize) {
    // SAFETY: see the module docs; the panel holds nb blocks; aux holds R rows of nb entries.
    unsafe {
        let (block, d_at) = panel8t_layout(SIGNED);
        let ones = _mm256_set1_epi16(1);
        for r in 0..R {
            let mut acc = [_mm256_setzero_ps(); 8];
            for ib in 0..nb {
                let pb = panel.add(ib * block);
                let x = &*aux.add(r * nb + ib);
                let ya = a.add(r * a_stride + ib * Q8_0_B + 2) as *const i32;
                let d = _mm256_mul_ps(_mm256_loadu_ps(pb.add(d_at) as *const f32), _mm256_set1_ps(x.d));
                for (g, acc) in acc.iter_mut().enumerate() {
                    let mut y = _mm256_set1_epi32(std::ptr::read_unaligned(ya.add(g)));
                    if SIGNED {
                        y = _mm256_sign_epi8(y, load256(pb.add(256 + 32 * g)));
                    }
                    let mut p = _mm256_madd_epi16(_mm256_maddubs_epi16(load256(pb.add(32 * g)), y), ones);
                    if !SIGNED {
                        p = _mm256_sub_epi32(p, _mm256_set1_epi32(x.corr_g[g]));
                    }
                    *acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), *acc);
                }
            }
            let even = _mm256_add_ps(_mm256_add_ps(acc[0], acc[4]), _mm256_add_ps(acc[2], acc[6]));
            let odd = _mm256_add_ps(_mm256_add_ps(acc[1], acc[5]), _mm256_add_ps(acc[3], acc[7]));
            _mm256_storeu_ps(out.add(r * out_stride), _mm256_add_ps(even, odd));
        }
    }
}

/// [`gemm8t`] for Q4_0 / Q5_0 panels.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn gemm8t_q8_0<const R: usize>(nb: usize, panel: *const u8, a: *const u8, a_stride: usize, aux: *const ActAux, out: *mut f32, out_stride: usize) {
    // SAFETY: forwarded contract.
    unsafe { gemm8t::<R, false>(nb, panel, a, a_stride, aux, out, out_stride) }
}

/// [`gemm8t`] for Q8_0 panels.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn gemm8t_q8_0_signed<const R: usize>(nb: usize, panel: *const u8, a: *const u8, a_stride: usize, aux: *const ActAux, out: *mut f32, out_stride: usize) {
    // SAFETY: forwarded contract.
    unsafe { gemm8t::<R, true>(nb, panel, a, a_stride, aux, out, out_stride) }
}

/// 8-row panel × Q8_0 activations (Q4_0 / Q5_0 weights).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn gemm8p_q8_0<const R: usize>(nb: usize, panel: *const u8, a: *const u8, a_stride: usize, aux: *const ActAux, out: *mut f32, out_stride: usize) {
    // SAFETY: forwarded contract.
    unsafe { gemm8p::<R, Q8_0_B, false>(nb, panel, a, a_stride, aux, out, out_stride) }
}

/// 8-row panel × Q8_1 activations (Q4_1 / Q5_1 weights).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn gemm8p_q8_1<const R: usize>(nb: usize, panel: *const u8, a: *const u8, a_stride: usize, aux: *const ActAux, out: *mut f32, out_stride: usize) {
    // SAFETY: forwarded contract.
    unsafe { gemm8p::<R, Q8_1_B, true>(nb, panel, a, a_stride, aux, out, out_stride) }
}

/// The two 8-row unpacks of a type whose quants are taken unsigned against Q8_0: [`unpack8`]'s
/// (whole-block panels) and [`unpack8t`]'s (transposed, the reference's order).
macro_rules! unpack8_pair {
    ($u:ident, $ut:ident, $wb:expr, $quants:expr) => {
        #[target_feature(enable = "avx2,fma,f16c")]
        pub unsafe fn $u(nb: usize, w: *const u8, w_stride: usize, panel: *mut u8) {
            // SAFETY: forwarded contract.
            unsafe { unpack8::<{ $wb }, false>(nb, w, w_stride, panel, |b| $quants(b)) }
        }

        #[target_feature(enable = "avx2,fma,f16c")]
        pub unsafe fn $ut(nb: usize, w: *const u8, w_stride: usize, panel: *mut u8) {
            // SAFETY: forwarded contract.
            unsafe { unpack8t::<{ $wb }, false>(nb, w, w_stride, panel, |b| $quants(b)) }
        }
    };
}

unpack8_pair!(unpack8_q4_0, unpack8t_q4_0, Q4_0_B, |b: *const u8| bytes_from_nibbles_32(b.add(2)));
unpack8_pair!(unpack8_q5_0, unpack8t_q5_0, Q5_0_B, |b: *const u8| unsigned_q5(b.add(2), b.add(6)));

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn unpack8_q4_1(nb: usize, w: *const u8, w_stride: usize, panel: *mut u8) {
    // SAFETY: forwarded contract.
    unsafe { unpack8::<Q4_1_B, true>(nb, w, w_stride, panel, |b| bytes_from_nibbles_32(b.add(4))) }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn unpack8_q5_1(nb: usize, w: *const u8, w_stride: usize, panel: *mut u8) {
    // SAFETY: forwarded contract.
    unsafe {
        unpack8::<Q5_1_B, true>(nb, w, w_stride, panel, |b| unsigned_q5(b.add(4), b.add(8)))
    }
}

// ---------------------------------------------------------------------------------------------
// Q4_K against Q8_K, prefill: 8 weight rows × R activation rows

/// Offsets inside one super-block of an 8-row Q4_K panel: 8 groups of 32 quants, each 8 runs
/// of 32 bytes in which 32-bit lane `j` holds row `j`'s 4 quants of the run (so one `maddubs`
/// against 4 broadcast activation bytes serves all 8 rows); then per group the rows' 6-bit
/// scales as 16-bit pairs (lanes 2j and 2j + 1: row j's), per pair of groups the rows' mins
/// (lane 2j: group 2p's, 2j + 1: group 2p + 1's), and the rows' `d` and `dmin` as f32.
const Q4K8_SC: usize = 8 * 256;
const Q4K8_MIN: usize = Q4K8_SC + 8 * 32;
const Q4K8_D: usize = Q4K8_MIN + 4 * 32;
pub(crate) const Q4K_PANEL8_BLOCK: usize = Q4K8_D + 64;

/// 8 × 8 transpose of 32-bit lanes: lane `k` of `r[j]` to lane `j` of the result's `k`.
#[inline(always)]
pub(crate) unsafe fn transpose8x32(r: [__m256i; 8]) -> [__m256i; 8] {
    // SAFETY: register-only AVX2 intrinsics; the callers checked AVX2.
    unsafe {
        let t: [__m256i; 8] = std::array::from_fn(|i| {
            let (x, y) = (r[2 * (i / 2)], r[2 * (i / 2) + 1]);
            if i % 2 == 0 {
                _mm256_unpacklo_epi32(x, y)
            } else {
                _mm256_unpackhi_epi32(x, y)
            }
        });
        // u[4h + m]: rows 4h..4h+4, lanes m (low 128 bits) and m + 4 (high)
        let u: [__m256i; 8] = std::array::from_fn(|i| {
            let (h, m) = (i / 4, i % 4);
            let (x, y) = (t[4 * h + m / 2], t[4 * h + 2 + m / 2]);
            if m % 2 == 0 {
                _mm256_unpacklo_epi64(x, y)
            } else {
                _mm256_unpackhi_epi64(x, y)
            }
        });
        std::array::from_fn(|k| if k < 4 { _mm256_permute2x128_si256::<0x20>(u[k], u[4 + k]) } else { _mm256_permute2x128_si256::<0x31>(u[k - 4], u[k]) })
    }
}

/// Unpacks 8 Q4_K rows (`w + j * w_stride`, `nb` super-blocks) into a panel of
/// `nb * Q4K_PANEL8_BLOCK` bytes (64-byte aligned).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn unpack8_q4_k(nb: usize, w: *const u8, w_stride: usize, panel: *mut u8) {
    // SAFETY: the caller guarantees 8 rows of nb super-blocks at w and nb * Q4K_PANEL8_BLOCK
    // bytes at panel.
    unsafe {
        let m4 = _mm256_set1_epi8(0x0f);
        for ib in 0..nb {
            // the rows' blocks a few ahead, into L2 (8 streams)
            let (ahead_row, ahead_block) = if ib + PANEL8_AHEAD < nb { (0, ib + PANEL8_AHEAD) } else { (8, ib + PANEL8_AHEAD - nb) };
            for j in 0..8 {
                for l in (0..Q4_K_B).step_by(64) {
                    // SAFETY: a prefetch never faults, wherever it points.
                    _mm_prefetch::<_MM_HINT_T1>(w.wrapping_add((ahead_row + j) * w_stride + ahead_block * Q4_K_B + l) as *const i8);
                }
            }
            let pb = panel.add(ib * Q4K_PANEL8_BLOCK);
            let row = |j: usize| w.add(j * w_stride + ib * Q4_K_B);
            // the 32 bytes of a pair of groups transposed once: low nibbles group 2c, high 2c + 1
            for c in 0..4 {
                let q: [__m256i; 8] = std::array::from_fn(|j| load256(row(j).add(16 + 32 * c)));
                for (k, v) in transpose8x32(q).into_iter().enumerate() {
                    _mm256_store_si256(pb.add(256 * (2 * c) + 32 * k) as *mut __m256i, _mm256_and_si256(v, m4));
                    _mm256_store_si256(pb.add(256 * (2 * c + 1) + 32 * k) as *mut __m256i, _mm256_and_si256(_mm256_srli_epi16::<4>(v), m4));
                }
            }
            // per row the scales and mins (get_scale_min_k4) as 8 bytes each, then an 8 × 8 byte
            // transpose: byte j of qword g of `cols` is row j's value of group g
            let (mut scales, mut mins, mut dh, mut mh) = ([0u64; 8], [0u64; 8], [0u16; 8], [0u16; 8]);
            for j in 0..8 {
                let h: [u32; 4] = std::ptr::read_unaligned(row(j) as *const [u32; 4]);
                (scales[j], mins[j]) = super::k4_scales_mins([h[1], h[2], h[3]]);
                (dh[j], mh[j]) = (h[0] as u16, (h[0] >> 16) as u16);
            }
            // scales: per group the rows' scale twice in u16 (for madd with maddubs's pairs)
            for (p, v) in transpose8x8(&scales).into_iter().enumerate() {
                for (g, col) in [(2 * p, v), (2 * p + 1, _mm_srli_si128::<8>(v))] {
                    _mm256_store_si256(pb.add(Q4K8_SC + 32 * g) as *mut __m256i, _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(col, col)));
                }
            }
            // mins: per pair of groups the rows' two mins in u16
            for (p, v) in transpose8x8(&mins).into_iter().enumerate() {
                _mm256_store_si256(pb.add(Q4K8_MIN + 32 * p) as *mut __m256i, _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(v, _mm_srli_si128::<8>(v))));
            }
            _mm256_store_ps(pb.add(Q4K8_D) as *mut f32, _mm256_cvtph_ps(_mm_loadu_si128(dh.as_ptr() as *const __m128i)));
            _mm256_store_ps(pb.add(Q4K8_D + 32) as *mut f32, _mm256_cvtph_ps(_mm_loadu_si128(mh.as_ptr() as *const __m128i)));
        }
    }
}

/// How many super-blocks ahead [`unpack8_q4_k`] prefetches its rows.
const PANEL8_AHEAD: usize = 4;

/// An 8 × 8 byte transpose of `rows` (row j's bytes g = 0..8 in `rows[j]`): vector `p` holds
/// column 2p (byte j = row j) in its low 8 bytes and column 2p + 1 in its high 8.
#[inline(always)]
unsafe fn transpose8x8(rows: &[u64; 8]) -> [__m128i; 4] {
    // SAFETY: register-only SSE2 intrinsics.
    unsafe {
        let r = |j: usize| _mm_cvtsi64_si128(rows[j] as i64);
        let x: [__m128i; 4] = std::array::from_fn(|i| _mm_unpacklo_epi8(r(2 * i), r(2 * i + 1)));
        let (y0, y1) = (_mm_unpacklo_epi16(x[0], x[1]), _mm_unpackhi_epi16(x[0], x[1]));
        let (y2, y3) = (_mm_unpacklo_epi16(x[2], x[3]), _mm_unpackhi_epi16(x[2], x[3]));
        [_mm_unpacklo_epi32(y0, y2), _mm_unpackhi_epi32(y0, y2), _mm_unpacklo_epi32(y1, y3), _mm_unpackhi_epi32(y1, y3)]
    }
}

/// An 8-row Q4_K panel × R Q8_K activation rows (`a + i * a_stride`); result (i, j) to
/// `out + i * out_stride + j`. Per group of 32 the 8 runs' `maddubs` are added in 16 bits
/// (each term is at most 2 · 15 · 128, eight of them stay below 2^15), scaled by the rows'
/// 6-bit scales in one `madd`; the mins' products with the activation's group sums by `madd`;
/// all exact in 32 bits. Then per pair of groups one FMA for the scales' part and one for the
/// mins', in two accumulators subtracted at the end: bit for bit llama.cpp's
/// repacked GEMM (`quant::vec_dot_repacked` with `gemm`), so used for the matrices it repacks.
/// Activation rows go four at a time, so each run of the panel is loaded once for four.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn gemm8_q4_k<const R: usize>(nb: usize, panel: *const u8, a: *const u8, a_stride: usize, aux: *const ActAux, out: *mut f32, out_stride: usize) {
    // SAFETY: forwarded contract.
    unsafe { gemm8_q4_k_in::<R, false>(nb, panel, a, a_stride, aux, out, out_stride) }
}

/// As [`gemm8_q4_k`] in the order of llama.cpp's repacked Q4_K GEMV (`quant::vec_dot_repacked`
/// without `gemm`: what its `ggml_mul_mat_id` takes for every routed row of an expert): the
/// integer sums of a whole super-block, then one FMA for each part.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn gemm8_q4_k_gemv<const R: usize>(nb: usize, panel: *const u8, a: *const u8, a_stride: usize, aux: *const ActAux, out: *mut f32, out_stride: usize) {
    // SAFETY: forwarded contract.
    unsafe { gemm8_q4_k_in::<R, true>(nb, panel, a, a_stride, aux, out, out_stride) }
}

/// [`gemm8_q4_k`] (`GEMV`: [`gemm8_q4_k_gemv`]).
#[inline(always)]
unsafe fn gemm8_q4_k_in<const R: usize, const GEMV: bool>(nb: usize, panel: *const u8, a: *const u8, a_stride: usize, _aux: *const ActAux, out: *mut f32, out_stride: usize) {
    // SAFETY: see the module docs; the panel holds nb super-blocks.
    unsafe {
        let mut acc = [_mm256_setzero_ps(); R];
        let mut acc_m = [_mm256_setzero_ps(); R];
        for ib in 0..nb {
            let pb = panel.add(ib * Q4K_PANEL8_BLOCK);
            let mut r0 = 0;
            while r0 < R {
                let ar = a.add(r0 * a_stride + ib * Q8_K_B);
                match R - r0 {
                    1 => q4k8_rows::<1, GEMV>(pb, ar, a_stride, &mut acc[r0..], &mut acc_m[r0..]),
                    2 => q4k8_rows::<2, GEMV>(pb, ar, a_stride, &mut acc[r0..], &mut acc_m[r0..]),
                    3 => q4k8_rows::<3, GEMV>(pb, ar, a_stride, &mut acc[r0..], &mut acc_m[r0..]),
                    _ => q4k8_rows::<4, GEMV>(pb, ar, a_stride, &mut acc[r0..], &mut acc_m[r0..]),
                }
                r0 += 4;
            }
        }
        for r in 0..R {
            _mm256_storeu_ps(out.add(r * out_stride), _mm256_sub_ps(acc[r], acc_m[r]));
        }
    }
}

/// One super-block of an 8-row Q4_K panel (`pb`) × `N` activation blocks (`ab + i * a_stride`),
/// added to `acc[i]` (see [`gemm8_q4_k`]).
#[inline(always)]
unsafe fn q4k8_rows<const N: usize, const GEMV: bool>(pb: *const u8, ab: *const u8, a_stride: usize, acc: &mut [__m256], acc_m: &mut [__m256]) {
    // SAFETY: the caller's panel block and N activation blocks.
    unsafe {
        let row = |i: usize| ab.add(i * a_stride);
        let d = _mm256_load_ps(pb.add(Q4K8_D) as *const f32);
        let dmin = _mm256_load_ps(pb.add(Q4K8_D + 32) as *const f32);
        // The mins' part first (its accumulator is a chain of its own): per pair of groups the
        // mins × the activation's group sums, one FMA by dmin · d_a. The group sums as 16-bit
        // pairs: 32-bit lanes 0, 1, 4, 5 hold groups (0, 1), (2, 3), (4, 5), (6, 7).
        for i in 0..N {
            let dminy = _mm256_mul_ps(dmin, _mm256_set1_ps(f32_at(row(i))));
            let bs = load256(row(i).add(4 + QK_K));
            let gs = _mm256_hadd_epi16(bs, bs);
            let mut m = acc_m[i];
            let mut mtot = _mm256_setzero_si256();
            for (p, lane) in [0, 1, 4, 5].into_iter().enumerate() {
                let msum = _mm256_madd_epi16(_mm256_load_si256(pb.add(Q4K8_MIN + 32 * p) as *const __m256i), _mm256_permutevar8x32_epi32(gs, _mm256_set1_epi32(lane)));
                if GEMV {
                    // (the GEMV's: one FMA for the super-block)
                    mtot = _mm256_add_epi32(mtot, msum);
                } else {
                    m = _mm256_fmadd_ps(dminy, _mm256_cvtepi32_ps(msum), m);
                }
            }
            if GEMV {
                m = _mm256_fmadd_ps(dminy, _mm256_cvtepi32_ps(mtot), m);
            }
            acc_m[i] = m;
        }
        let mut isum = [_mm256_setzero_si256(); N];
        for g in 0..8 {
            let mut s16 = [_mm256_setzero_si256(); N];
            for k in 0..8 {
                let wv = _mm256_load_si256(pb.add(256 * g + 32 * k) as *const __m256i);
                for i in 0..N {
                    let y = _mm256_set1_epi32(std::ptr::read_unaligned(row(i).add(4 + 32 * g + 4 * k) as *const i32));
                    s16[i] = _mm256_add_epi16(s16[i], _mm256_maddubs_epi16(wv, y));
                }
            }
            let sc = _mm256_load_si256(pb.add(Q4K8_SC + 32 * g) as *const __m256i);
            for i in 0..N {
                isum[i] = _mm256_add_epi32(isum[i], _mm256_madd_epi16(s16[i], sc));
            }
            if g % 2 == 1 && (!GEMV || g == 7) {
                // a pair of groups done: its scaled sum by one FMA with d · d_a, as upstream's
                // GEMM (its GEMV: the super-block's)
                for i in 0..N {
                    let dy = _mm256_mul_ps(d, _mm256_set1_ps(f32_at(row(i))));
                    acc[i] = _mm256_fmadd_ps(dy, _mm256_cvtepi32_ps(isum[i]), acc[i]);
                    isum[i] = _mm256_setzero_si256();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    /// The kernels' f16 conversion is the reference's on every one of the 65536 f16 values
    /// (NaNs as NaNs).
    #[test]
    fn f16_at_converts_every_f16() {
        for h in 0..=u16::MAX {
            let bytes = h.to_le_bytes();
            // SAFETY: two readable bytes; the conversion uses no SIMD instruction.
            let got = unsafe { super::f16_at(bytes.as_ptr()) };
            let want = crate::quant::f16_to_f32(h);
            assert!(got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()), "f16 {h:#06x}: {got:e}, reference {want:e}");
        }
    }
}
