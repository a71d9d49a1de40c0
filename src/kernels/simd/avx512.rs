//! AVX-512 (F, BW, VL, VNNI) kernels, on top of AVX2 + FMA + F16C.
//!
//! They keep the scalar reference's results bit for bit (`crate::quant::lanes`): integer sums
//! are exact whatever the instruction, so a kernel may compute them 64 elements at a time as
//! long as, before the float step, 32-bit lane `k` holds what the reference's lane `k` holds;
//! the float steps (one 8-lane FMA per block, `hsum_float_8`) are then the reference's.
//!
//! - Legacy formats against Q8_0 (decode): two weight rows share one 512-bit register, row A's
//!   block in the low 256 bits and row B's in the high, so one VNNI `dpbusd` multiplies a block
//!   of both rows and one 16-lane FMA advances both rows' accumulators (each half keeps its own
//!   row's order). The activation row is prepared once per matmul ([`prep_q8_0`]): quants
//!   duplicated into that lane layout and the per-lane sums that turn unsigned weight quants
//!   back into signed ones.
//! - K-quants against Q8_K (decode and prefill): two 32-element groups per 512-bit register;
//!   the two halves of the integer sum are added before the block's FMA.
//!
//! # Safety (all `unsafe fn` here)
//! The caller must have checked that the CPU supports AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C,
//! and that every pointer covers the blocks the function's docs describe.

#![allow(clippy::missing_safety_doc, clippy::needless_range_loop, clippy::too_many_arguments)]

use std::arch::x86_64::*;

use crate::quant::fp4::{e8m0_half, KVALUES_FP4};
use crate::quant::iq_tables::KVALUES_IQ4NL;
use crate::quant::GgmlType;

const QK_K: usize = crate::quant::QK_K;
const Q4_0_B: usize = GgmlType::Q4_0.block_bytes();
const Q5_0_B: usize = GgmlType::Q5_0.block_bytes();
const Q8_0_B: usize = GgmlType::Q8_0.block_bytes();
const IQ4_NL_B: usize = GgmlType::IQ4_NL.block_bytes();
const MXFP4_B: usize = GgmlType::MXFP4.block_bytes();
const IQ4_XS_B: usize = GgmlType::IQ4_XS.block_bytes();
const Q4_K_B: usize = GgmlType::Q4K.block_bytes();
const Q5_K_B: usize = GgmlType::Q5K.block_bytes();
const Q6_K_B: usize = GgmlType::Q6K.block_bytes();
const Q8_K_B: usize = GgmlType::Q8K.block_bytes();

/// How far ahead of the current block the decode kernels prefetch weights (bytes): far enough
/// (into the rows after the current ones) that DRAM latency is covered at full bandwidth; the
/// hardware prefetchers alone reach less than half of it.
const PREFETCH: usize = 8192;

/// Bytes of a prepared Q8_0 activation block: 64 quants in the pair layout, 16 i32 offsets.
pub(crate) const PREP_BLOCK: usize = 128;

/// Bytes of a prepared activation row of `nb` Q8_0 blocks: the blocks, then `nb` f32 scales.
pub fn prep_bytes(nb: usize) -> usize {
    (nb * PREP_BLOCK + 4 * nb).next_multiple_of(64)
}

#[inline(always)]
unsafe fn f16_at(p: *const u8) -> f32 {
    // SAFETY: caller guarantees 2 readable bytes at p; F16C is enabled in every caller.
    unsafe { _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(std::ptr::read_unaligned(p as *const u16) as i32))) }
}

/// The two f16 values at `p` and `p + 2`, from one 32-bit load. [`f16_at`]'s 16-bit load
/// becomes a `vpinsrw` into whatever register LLVM picks, in Q4_K's loop the mins'
/// accumulator, which chained every block on the previous one (7% of the kernel).
#[inline(always)]
unsafe fn f16_pair_at(p: *const u8) -> (f32, f32) {
    // SAFETY: caller guarantees 4 readable bytes at p; F16C is enabled in every caller.
    unsafe {
        let v = _mm_cvtph_ps(_mm_cvtsi32_si128(std::ptr::read_unaligned(p as *const i32)));
        (_mm_cvtss_f32(v), _mm_cvtss_f32(_mm_movehdup_ps(v)))
    }
}

#[inline(always)]
unsafe fn f32_at(p: *const u8) -> f32 {
    // SAFETY: caller guarantees 4 readable bytes at p.
    unsafe { std::ptr::read_unaligned(p as *const f32) }
}

#[inline(always)]
unsafe fn load128(p: *const u8) -> __m128i {
    // SAFETY: caller guarantees 16 readable bytes at p.
    unsafe { _mm_loadu_si128(p as *const __m128i) }
}

#[inline(always)]
unsafe fn load256(p: *const u8) -> __m256i {
    // SAFETY: caller guarantees 32 readable bytes at p.
    unsafe { _mm256_loadu_si256(p as *const __m256i) }
}

#[inline(always)]
unsafe fn load512(p: *const u8) -> __m512i {
    // SAFETY: caller guarantees 64 readable bytes at p.
    unsafe { _mm512_loadu_si512(p as *const __m512i) }
}

/// `hsum_float_8`: ((l0+l4) + (l2+l6)) + ((l1+l5) + (l3+l7)).
#[inline(always)]
unsafe fn hsum_float_8(x: __m256) -> f32 {
    // SAFETY: register-only AVX intrinsics.
    unsafe {
        let mut res = _mm_add_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
        res = _mm_add_ps(res, _mm_movehl_ps(res, res));
        res = _mm_add_ss(res, _mm_movehdup_ps(res));
        _mm_cvtss_f32(res)
    }
}

/// The sum of both 256-bit halves of 16 i32 lanes (lane k + lane k + 8).
#[inline(always)]
unsafe fn fold_halves(x: __m512i) -> __m256i {
    // SAFETY: register-only AVX-512F intrinsics.
    unsafe { _mm256_add_epi32(_mm512_castsi512_si256(x), _mm512_extracti64x4_epi64(x, 1)) }
}

// ---------------------------------------------------------------------------------------------
// legacy formats against Q8_0, decode: pairs of weight rows

/// Prepares one Q8_0 activation row (`nb` blocks at `a`) for the pair kernels, at `prep`
/// (64-byte aligned, [`prep_bytes`] long): per block its 32 quants twice (the pair layout) and,
/// per 32-bit lane of that layout, `-OFF * (sum of the lane's four quants)`, the correction for
/// weight quants stored with an offset of `OFF`; then the blocks' scales as f32.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn prep_q8_0<const OFF: i32>(nb: usize, a: *const u8, prep: *mut u8) {
    // SAFETY: see the module docs; block ib writes prep[128ib..128ib+128] and the scale at
    // prep[128nb + 4ib], inside prep_bytes(nb).
    unsafe {
        let scale = _mm512_set1_epi8(OFF as u8 as i8);
        let d = prep.add(nb * PREP_BLOCK) as *mut f32;
        for ib in 0..nb {
            let ab = a.add(ib * Q8_0_B);
            let y = _mm512_broadcast_i64x4(load256(ab.add(2)));
            let sums = _mm512_dpbusd_epi32(_mm512_setzero_si512(), scale, y);
            let o = prep.add(ib * PREP_BLOCK);
            _mm512_store_si512(o as *mut __m512i, y);
            _mm512_store_si512(o.add(64) as *mut __m512i, _mm512_sub_epi32(_mm512_setzero_si512(), sums));
            *d.add(ib) = f16_at(ab);
        }
    }
}

/// `2 * P` weight rows (`w + j * w_stride`, `nb` blocks of `WB` bytes) against one prepared
/// activation row; `unpack(row A block, row B block)` gives both blocks' quants, unsigned, in
/// the pair layout: row A's 32 in the low 256 bits, row B's in the high. Results to `out[j]`.
#[inline(always)]
unsafe fn gemv_pairs<const P: usize, const WB: usize>(nb: usize, w: *const u8, w_stride: usize, prep: *const u8, out: *mut f32, unpack: impl Fn(*const u8, *const u8) -> __m512i) {
    const { assert!(P == 1 || P == 2) };
    // SAFETY: see the module docs.
    unsafe {
        let ds = prep.add(nb * PREP_BLOCK) as *const f32;
        // the rows' scales, as f32 lanes 2p (row A) and 2p + 1 (row B), to 8 lanes each
        let didx: [__m512i; P] = std::array::from_fn(|p| {
            let (a, b) = (2 * p as i32, 2 * p as i32 + 1);
            _mm512_setr_epi32(a, a, a, a, a, a, a, a, b, b, b, b, b, b, b, b)
        });
        // the rows' bytes ahead, prefetched in ascending order, a few lines per block
        let span = 2 * P * w_stride;
        const { assert!(2 * P * WB <= 64 * 3) };
        let lines_per_block = (2 * P * WB).div_ceil(64);
        let mut acc = [_mm512_setzero_ps(); P];
        for ib in 0..nb {
            let pb = prep.add(ib * PREP_BLOCK);
            let y = _mm512_load_si512(pb as *const __m512i);
            let offs = _mm512_load_si512(pb.add(64) as *const __m512i);
            let row = |j: usize| w.add(j * w_stride + ib * WB);
            for k in 0..lines_per_block {
                let at = (ib * lines_per_block + k) * 64;
                if at < span {
                    _mm_prefetch::<_MM_HINT_T0>(w.add(PREFETCH + at) as *const i8);
                }
            }
            let f16_bits = |j: usize| std::ptr::read_unaligned(row(j) as *const u16) as i32;
            let mut dh = _mm_insert_epi16::<1>(_mm_cvtsi32_si128(f16_bits(0)), f16_bits(1));
            if P == 2 {
                dh = _mm_insert_epi16::<3>(_mm_insert_epi16::<2>(dh, f16_bits(2)), f16_bits(3));
            }
            let dw = _mm_mul_ps(_mm_cvtph_ps(dh), _mm_set1_ps(*ds.add(ib)));
            for p in 0..P {
                let isum = _mm512_dpbusd_epi32(offs, unpack(row(2 * p), row(2 * p + 1)), y);
                let d = _mm512_permutexvar_ps(didx[p], _mm512_castps128_ps512(dw));
                acc[p] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(isum), acc[p]);
            }
        }
        for p in 0..P {
            *out.add(2 * p) = hsum_float_8(_mm512_castps512_ps256(acc[p]));
            *out.add(2 * p + 1) = hsum_float_8(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[p]), 1)));
        }
    }
}
/// Two rows' 16 nibble bytes (at `a`, `b`) as [A low, A high, B low, B high] nibbles: each
/// row's 32 quants in order.
#[inline(always)]
unsafe fn nibble_pair(a: *const u8, b: *const u8) -> __m512i {
    // SAFETY: caller guarantees 16 readable bytes at a and at b.
    unsafe {
        let z = _mm512_mask_broadcast_i32x4(_mm512_broadcast_i32x4(load128(a)), 0xff00, load128(b));
        let shifts = _mm512_setr_epi64(0, 0, 0x0004_0004_0004_0004, 0x0004_0004_0004_0004, 0, 0, 0x0004_0004_0004_0004, 0x0004_0004_0004_0004);
        _mm512_and_si512(_mm512_srlv_epi16(z, shifts), _mm512_set1_epi8(0x0f))
    }
}

/// Q4_0 weights, 2P rows (quants stored with offset 8; prepared with `prep_q8_0::<8>`).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn gemv_q4_0<const P: usize>(nb: usize, w: *const u8, w_stride: usize, prep: *const u8, out: *mut f32) {
    // SAFETY: forwarded contract; 16 nibble bytes follow the 2-byte scale.
    unsafe { gemv_pairs::<P, Q4_0_B>(nb, w, w_stride, prep, out, |a, b| nibble_pair(a.add(2), b.add(2))) }
}

/// Q5_0 weights, 2P rows (offset 16; `prep_q8_0::<16>`): both rows' `qh`, side by side, are
/// the byte mask of the quants that get their 5th bit.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn gemv_q5_0<const P: usize>(nb: usize, w: *const u8, w_stride: usize, prep: *const u8, out: *mut f32) {
    // SAFETY: forwarded contract; qh (4 bytes) and 16 nibble bytes follow the scale.
    unsafe {
        gemv_pairs::<P, Q5_0_B>(nb, w, w_stride, prep, out, |a, b| {
            let ha = std::ptr::read_unaligned(a.add(2) as *const u32) as u64;
            let hb = std::ptr::read_unaligned(b.add(2) as *const u32) as u64;
            let q = nibble_pair(a.add(6), b.add(6));
            _mm512_mask_add_epi8(q, ha | hb << 32, q, _mm512_set1_epi8(16))
        })
    }
}

/// As [`gemv_q5_0`] with GFNI: one affine byte transform per pair takes each nibble to its
/// quant (low or high nibble by 128-bit lane), and a second, under the `qh` mask, the same plus
/// the 5th bit.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c,gfni")]
pub unsafe fn gemv_q5_0_gfni<const P: usize>(nb: usize, w: *const u8, w_stride: usize, prep: *const u8, out: *mut f32) {
    // output bit i = input bit i (low nibble) or i + 4 (high nibble) for i < 4, else 0: in
    // gf2p8affineqb's matrix, byte 7 - i of the qword selects the input bits of output bit i
    const LOW: i64 = 0x0102_0408_0000_0000;
    const HIGH: i64 = 0x1020_4080_0000_0000;
    // SAFETY: forwarded contract; qh (4 bytes) and 16 nibble bytes follow the scale.
    unsafe {
        gemv_pairs::<P, Q5_0_B>(nb, w, w_stride, prep, out, |a, b| {
            let ha = std::ptr::read_unaligned(a.add(2) as *const u32) as u64;
            let hb = std::ptr::read_unaligned(b.add(2) as *const u32) as u64;
            let z = _mm512_mask_broadcast_i32x4(_mm512_broadcast_i32x4(load128(a.add(6))), 0xff00, load128(b.add(6)));
            let m = _mm512_setr_epi64(LOW, LOW, HIGH, HIGH, LOW, LOW, HIGH, HIGH);
            let q = _mm512_gf2p8affine_epi64_epi8::<0>(z, m);
            _mm512_mask_gf2p8affine_epi64_epi8::<0x10>(q, ha | hb << 32, z, m)
        })
    }
}

/// Q8_0 weights, 2P rows (signed quants made unsigned by flipping the top bit: offset 128;
/// `prep_q8_0::<128>`).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn gemv_q8_0<const P: usize>(nb: usize, w: *const u8, w_stride: usize, prep: *const u8, out: *mut f32) {
    // SAFETY: forwarded contract; 32 quant bytes follow the scale.
    unsafe {
        gemv_pairs::<P, Q8_0_B>(nb, w, w_stride, prep, out, |a, b| {
            let z = _mm512_inserti64x4(_mm512_castsi256_si512(load256(a.add(2))), load256(b.add(2)), 1);
            _mm512_xor_si512(z, _mm512_set1_epi8(0x80u8 as i8))
        })
    }
}

/// IQ4_NL / MXFP4 weights, 2P rows, against a prepared Q8_0 row (`prep_q8_0::<128>`): each
/// nibble looked up in the type's codebook (`values`) and made unsigned by flipping the top bit.
/// Upstream's order for these types (the reference: `quant::legacy::vec_dot_q8_0_pairs`): even
/// and odd blocks in two accumulators, `hsum(acc_even + acc_odd)`, an odd last block added as
/// `sumf + d · sumi`; each row's accumulators are one 256-bit half here. `F16`: the scales are
/// f16 at the block start, else `scale` decodes them.
#[inline(always)]
unsafe fn gemv_pairs_nl<const P: usize, const WB: usize, const F16: bool>(
    nb: usize,
    w: *const u8,
    w_stride: usize,
    prep: *const u8,
    out: *mut f32,
    values: &[i8; 16],
    qs_off: usize,
    scale: impl Fn(*const u8) -> f32,
) {
    const { assert!(P == 1 || P == 2) };
    // SAFETY: see the module docs.
    unsafe {
        let ds = prep.add(nb * PREP_BLOCK) as *const f32;
        let didx: [__m512i; P] = std::array::from_fn(|p| {
            let (a, b) = (2 * p as i32, 2 * p as i32 + 1);
            _mm512_setr_epi32(a, a, a, a, a, a, a, a, b, b, b, b, b, b, b, b)
        });
        let table = _mm512_broadcast_i32x4(load128(values.as_ptr() as *const u8));
        let flip = _mm512_set1_epi8(0x80u8 as i8);
        let span = 2 * P * w_stride;
        const { assert!(2 * P * WB <= 64 * 3) };
        let lines_per_block = (2 * P * WB).div_ceil(64);
        let mut acc = [[_mm512_setzero_ps(); P]; 2];
        let pairs = nb / 2 * 2;
        for ib in 0..pairs {
            let pb = prep.add(ib * PREP_BLOCK);
            let y = _mm512_load_si512(pb as *const __m512i);
            let offs = _mm512_load_si512(pb.add(64) as *const __m512i);
            let row = |j: usize| w.add(j * w_stride + ib * WB);
            for k in 0..lines_per_block {
                let at = (ib * lines_per_block + k) * 64;
                if at < span {
                    _mm_prefetch::<_MM_HINT_T0>(w.add(PREFETCH + at) as *const i8);
                }
            }
            let dw = if F16 {
                let f16_bits = |j: usize| std::ptr::read_unaligned(row(j) as *const u16) as i32;
                let mut dh = _mm_insert_epi16::<1>(_mm_cvtsi32_si128(f16_bits(0)), f16_bits(1));
                if P == 2 {
                    dh = _mm_insert_epi16::<3>(_mm_insert_epi16::<2>(dh, f16_bits(2)), f16_bits(3));
                }
                _mm_mul_ps(_mm_cvtph_ps(dh), _mm_set1_ps(*ds.add(ib)))
            } else {
                let s = |j: usize| if j < 2 * P { scale(row(j)) } else { 0.0 };
                _mm_mul_ps(_mm_setr_ps(s(0), s(1), s(2), s(3)), _mm_set1_ps(*ds.add(ib)))
            };
            for p in 0..P {
                let q = _mm512_xor_si512(_mm512_shuffle_epi8(table, nibble_pair(row(2 * p).add(qs_off), row(2 * p + 1).add(qs_off))), flip);
                let isum = _mm512_dpbusd_epi32(offs, q, y);
                let d = _mm512_permutexvar_ps(didx[p], _mm512_castps128_ps512(dw));
                acc[ib & 1][p] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(isum), acc[ib & 1][p]);
            }
        }
        for p in 0..P {
            let t = _mm512_add_ps(acc[0][p], acc[1][p]);
            let halves = [_mm512_castps512_ps256(t), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(t), 1))];
            for (h, &half) in halves.iter().enumerate() {
                let j = 2 * p + h;
                let mut sumf = hsum_float_8(half);
                if pairs < nb {
                    // the last block: its quants are the first 32 bytes of the prepared block
                    let (wb, yb) = (w.add(j * w_stride + pairs * WB), prep.add(pairs * PREP_BLOCK));
                    let mut sumi = 0i32;
                    for k in 0..16 {
                        let byte = *wb.add(qs_off + k);
                        sumi += values[(byte & 15) as usize] as i32 * *yb.add(k) as i8 as i32;
                        sumi += values[(byte >> 4) as usize] as i32 * *yb.add(16 + k) as i8 as i32;
                    }
                    let dw = if F16 { f16_at(wb) } else { scale(wb) };
                    sumf += *ds.add(pairs) * dw * sumi as f32;
                }
                *out.add(j) = sumf;
            }
        }
    }
}

/// IQ4_NL weights, 2P rows (`prep_q8_0::<128>`).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn gemv_iq4_nl<const P: usize>(nb: usize, w: *const u8, w_stride: usize, prep: *const u8, out: *mut f32) {
    // SAFETY: forwarded contract; layout d (f16) | qs[16].
    unsafe { gemv_pairs_nl::<P, IQ4_NL_B, true>(nb, w, w_stride, prep, out, &KVALUES_IQ4NL, 2, |_| 0.0) }
}

/// MXFP4 weights, 2P rows (`prep_q8_0::<128>`).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn gemv_mxfp4<const P: usize>(nb: usize, w: *const u8, w_stride: usize, prep: *const u8, out: *mut f32) {
    // SAFETY: forwarded contract; layout e (E8M0) | qs[16].
    unsafe { gemv_pairs_nl::<P, MXFP4_B, false>(nb, w, w_stride, prep, out, &KVALUES_FP4, 1, |b| e8m0_half(*b)) }
}

/// IQ4_XS × Q8_K, R activation rows. Upstream's AVX2 loop (the reference) keeps per super-block
/// 8 i32 lanes, lane k the sum over the 8 groups of `ls_g` × the group's four products in lane
/// k, then one 8-lane FMA by `d_w · d_a`; here two groups share a 512-bit register (group g in
/// the low 256 bits, g + 1 in the high), `maddubs` + `dpwssd` add `ls` × the products into each
/// half, and the halves are added before the FMA — the same integers, so the same floats.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn dot_iq4_xs<const R: usize>(nb: usize, w: *const u8, a: *const u8, a_stride: usize, out: *mut f32, out_stride: usize) {
    // SAFETY: see the module docs. Layout: d | scales_h u16 | scales_l[4] | qs[128]; Q8_K:
    // d (f32) | qs[256] | bsums.
    unsafe {
        let table = _mm512_broadcast_i32x4(load128(KVALUES_IQ4NL.as_ptr() as *const u8));
        let mut acc = [_mm256_setzero_ps(); R];
        for ibl in 0..nb {
            let wb = w.add(ibl * IQ4_XS_B);
            // the 8 groups' scales ls_g − 32 as 16-bit lanes 0..8, from scales_l (nibble g % 2
            // of byte g / 2) and scales_h (bits 2g, 2g + 1) in registers
            let sl = _mm_cvtsi32_si128(std::ptr::read_unaligned(wb.add(4) as *const i32));
            let lo = _mm_and_si128(_mm_srlv_epi16(_mm_shuffle_epi8(sl, _mm_setr_epi8(0, -1, 0, -1, 1, -1, 1, -1, 2, -1, 2, -1, 3, -1, 3, -1)), _mm_setr_epi16(0, 4, 0, 4, 0, 4, 0, 4)), _mm_set1_epi16(15));
            let hi = _mm_and_si128(_mm_srlv_epi16(_mm_set1_epi16(std::ptr::read_unaligned(wb.add(2) as *const i16)), _mm_setr_epi16(0, 2, 4, 6, 8, 10, 12, 14)), _mm_set1_epi16(3));
            let lsall = _mm512_castsi128_si512(_mm_sub_epi16(_mm_or_si128(lo, _mm_slli_epi16(hi, 4)), _mm_set1_epi16(32)));
            // two chains of integer sums (pairs of groups 0, 2 and 1, 3), added at the end:
            // integers, so the order is free, and the chains overlap
            let mut sumi = [[_mm512_setzero_si512(); R]; 2];
            for g in (0..8).step_by(2) {
                let lsv = _mm512_permutexvar_epi16(_mm512_mask_blend_epi16(0xFFFF_0000, _mm512_set1_epi16(g as i16), _mm512_set1_epi16(g as i16 + 1)), lsall);
                let q = _mm512_shuffle_epi8(table, nibble_pair(wb.add(8 + 16 * g), wb.add(8 + 16 * (g + 1))));
                let aq = _mm512_abs_epi8(q);
                let neg = _mm512_movepi8_mask(q);
                for r in 0..R {
                    let y = load512(a.add(r * a_stride + ibl * Q8_K_B + 4 + 32 * g));
                    let sy = _mm512_mask_sub_epi8(y, neg, _mm512_setzero_si512(), y);
                    let c = g / 2 % 2;
                    sumi[c][r] = _mm512_dpwssd_epi32(sumi[c][r], _mm512_maddubs_epi16(aq, sy), lsv);
                }
            }
            let dw = f16_at(wb);
            for r in 0..R {
                let da = f32_at(a.add(r * a_stride + ibl * Q8_K_B));
                let t = _mm512_add_epi32(sumi[0][r], sumi[1][r]);
                acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * da), _mm256_cvtepi32_ps(fold_halves(t)), acc[r]);
            }
        }
        for r in 0..R {
            *out.add(r * out_stride) = hsum_float_8(acc[r]);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Q8_K activations prepared for several activation rows (batched decode)

/// Bytes of a prepared Q8_K activation block ([`prep_q8_k`]): the 256 quants first, so that a
/// 64-byte-aligned block keeps every 64-byte load inside one cache line (a Q8_K block's quants
/// start 4 bytes in, and each load of them straddles two lines), then `d`, the 8 group sums and
/// the 16 bsums.
pub(crate) const KPREP_BLOCK: usize = 320;
const KPREP_D: usize = 256;
const KPREP_GROUP_SUMS: usize = 272;
const KPREP_BSUMS: usize = 288;

/// Bytes of a prepared activation row of `nb` Q8_K blocks (a multiple of 64).
pub fn kprep_bytes(nb: usize) -> usize {
    nb * KPREP_BLOCK
}

/// Prepares one Q8_K activation row (`nb` blocks at `a`) at `prep` (64-byte aligned,
/// [`kprep_bytes`] long) for the `*_prepped` kernels: per block the quants, `d`, the sums of
/// each 32-quant group as i16 (|sum| <= 32 * 128) and the bsums.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn prep_q8_k(nb: usize, a: *const u8, prep: *mut u8) {
    // SAFETY: see the module docs; block ib writes prep[320ib..320ib+320], inside
    // kprep_bytes(nb), at offsets aligned for each store.
    unsafe {
        for ib in 0..nb {
            let ab = a.add(ib * Q8_K_B);
            let o = prep.add(ib * KPREP_BLOCK);
            for k in 0..4 {
                _mm512_store_si512(o.add(64 * k) as *mut __m512i, load512(ab.add(4 + 64 * k)));
            }
            std::ptr::write(o.add(KPREP_D) as *mut f32, f32_at(ab));
            let bs = load256(ab.add(4 + QK_K));
            let pairs = _mm256_madd_epi16(bs, _mm256_set1_epi16(1));
            _mm_store_si128(o.add(KPREP_GROUP_SUMS) as *mut __m128i, _mm_packs_epi32(_mm256_castsi256_si128(pairs), _mm256_extracti128_si256(pairs, 1)));
            _mm256_store_si256(o.add(KPREP_BSUMS) as *mut __m256i, bs);
        }
    }
}

/// Where an activation block's fields are: plain Q8_K or prepared ([`prep_q8_k`]).
struct ActLayout {
    block: usize,
    qs: usize,
    d: usize,
    bsums: usize,
}

const fn act_layout(prepped: bool) -> ActLayout {
    if prepped {
        ActLayout { block: KPREP_BLOCK, qs: 0, d: KPREP_D, bsums: KPREP_BSUMS }
    } else {
        ActLayout { block: Q8_K_B, qs: 4, d: 0, bsums: 4 + QK_K }
    }
}

// ---------------------------------------------------------------------------------------------
// K-quants against Q8_K: one weight row × R activation rows

/// 16-bit lanes holding, for group pair `c`, scale byte `2c` of `scales` (the 8 scale bytes
/// in every qword) zero-extended in the low 16 lanes and byte `2c + 1` in the high 16 (ready
/// for `dpwssd` after `maddubs` of two groups). An in-lane byte shuffle: cheaper than a
/// cross-lane word permute.
#[inline(always)]
unsafe fn group_pair_scales(scales: __m512i, c: usize) -> __m512i {
    // SAFETY: register-only AVX-512BW intrinsics.
    unsafe {
        let (lo, hi) = ((0xff00 | (2 * c)) as u16 as i16, (0xff00 | (2 * c + 1)) as u16 as i16);
        let idx = _mm512_mask_blend_epi16(0xffff_0000, _mm512_set1_epi16(lo), _mm512_set1_epi16(hi));
        _mm512_shuffle_epi8(scales, idx)
    }
}

/// Q4_K × Q8_K, one weight row × R activation rows (`a + i * a_stride`).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn dot_q4_k<const R: usize>(nb: usize, w: *const u8, a: *const u8, a_stride: usize, out: *mut f32, out_stride: usize) {
    // SAFETY: forwarded contract.
    unsafe { dot_qk45::<R, false, false, false, false>(nb, w, a, a_stride, out, out_stride) }
}

/// Q5_K × Q8_K, one weight row × R activation rows (`a + i * a_stride`).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn dot_q5_k<const R: usize>(nb: usize, w: *const u8, a: *const u8, a_stride: usize, out: *mut f32, out_stride: usize) {
    // SAFETY: forwarded contract.
    unsafe { dot_qk45::<R, true, false, false, false>(nb, w, a, a_stride, out, out_stride) }
}

/// As [`dot_q4_k`] on activation rows prepared by [`prep_q8_k`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn dot_q4_k_prepped<const R: usize>(nb: usize, w: *const u8, a: *const u8, a_stride: usize, out: *mut f32, out_stride: usize) {
    // SAFETY: forwarded contract.
    unsafe { dot_qk45::<R, false, true, false, false>(nb, w, a, a_stride, out, out_stride) }
}

/// As [`dot_q5_k`] on activation rows prepared by [`prep_q8_k`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn dot_q5_k_prepped<const R: usize>(nb: usize, w: *const u8, a: *const u8, a_stride: usize, out: *mut f32, out_stride: usize) {
    // SAFETY: forwarded contract.
    unsafe { dot_qk45::<R, true, true, false, false>(nb, w, a, a_stride, out, out_stride) }
}

/// Q4_K × Q8_K in llama.cpp's repacked order (`quant::vec_dot_repacked`, the steps of
/// `avx2::dot_q4_k_repacked`), one weight row × R activation rows.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn dot_q4_k_repacked<const R: usize>(nb: usize, w: *const u8, a: *const u8, a_stride: usize, out: *mut f32, out_stride: usize) {
    // SAFETY: forwarded contract.
    unsafe { dot_qk45::<R, false, false, true, false>(nb, w, a, a_stride, out, out_stride) }
}

/// As [`dot_q4_k_repacked`] on activation rows prepared by [`prep_q8_k`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn dot_q4_k_repacked_prepped<const R: usize>(nb: usize, w: *const u8, a: *const u8, a_stride: usize, out: *mut f32, out_stride: usize) {
    // SAFETY: forwarded contract.
    unsafe { dot_qk45::<R, false, true, true, false>(nb, w, a, a_stride, out, out_stride) }
}

/// Q4_K × Q8_K in the order of llama.cpp's tiled matmul (`quant::vec_dot_tiled`), one weight
/// row × R activation rows prepared by [`prep_q8_k`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn dot_q4_k_tiled_prepped<const R: usize>(nb: usize, w: *const u8, a: *const u8, a_stride: usize, out: *mut f32, out_stride: usize) {
    // SAFETY: forwarded contract.
    unsafe { dot_qk45::<R, false, true, false, true>(nb, w, a, a_stride, out, out_stride) }
}

/// As [`dot_q4_k_tiled_prepped`] for Q5_K.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn dot_q5_k_tiled_prepped<const R: usize>(nb: usize, w: *const u8, a: *const u8, a_stride: usize, out: *mut f32, out_stride: usize) {
    // SAFETY: forwarded contract.
    unsafe { dot_qk45::<R, true, true, false, true>(nb, w, a, a_stride, out, out_stride) }
}

/// For group pair `c` (groups 2c and 2c + 1 in the low and high 256 bits): the bit of each `qh`
/// byte that holds the group's 5th bits.
#[inline(always)]
unsafe fn qh_pair_bits(c: usize) -> __m512i {
    // SAFETY: register-only AVX-512F intrinsics.
    unsafe { _mm512_inserti64x4(_mm512_set1_epi8(1 << (2 * c)), _mm256_set1_epi8(1 << (2 * c + 1)), 1) }
}

/// Q4_K and Q5_K (`QH`: 5th bits in `qh`) × Q8_K, one weight row × R activation rows. The float
/// steps are the AVX2 kernels' (`avx2::dot_qk_45`): Q4_K's mins in 4 lanes, Q5_K's in one sum;
/// with `REPACKED` (Q4_K only) those of `avx2::dot_q4_k_repacked`: per block the quant and min
/// sums reduced to two exact integers, one FMA by (d · d_a, dmin · d_a) into two lanes.
#[inline(always)]
unsafe fn dot_qk45<const R: usize, const QH: bool, const PREPPED: bool, const REPACKED: bool, const TILED: bool>(nb: usize, w: *const u8, a: *const u8, a_stride: usize, out: *mut f32, out_stride: usize) {
    let (wbytes, qs_off) = if QH { (Q5_K_B, 48) } else { (Q4_K_B, 16) };
    let act = const { act_layout(PREPPED) };
    // SAFETY: see the module docs.
    unsafe {
        let mut acc = [_mm256_setzero_ps(); R];
        let mut acc_m = [_mm_setzero_ps(); R];
        let mut summs = [0f32; R];
        let mut acc_r = [_mm_setzero_ps(); R];
        let m4 = _mm512_set1_epi8(0x0f);
        let high_half_by_4 = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
        for ib in 0..nb {
            let wb = w.add(ib * wbytes);
            for l in (0..wbytes).step_by(64) {
                _mm_prefetch::<_MM_HINT_T0>(wb.add(PREFETCH + l) as *const i8);
            }
            let (wd, wdmin) = f16_pair_at(wb);
            // the 6-bit scales and mins (get_scale_min_k4): bytes 0..8 scales, 8..16 mins
            let (sc, mn) = super::k4_scales_mins(std::ptr::read_unaligned(wb.add(4) as *const [u32; 3]));
            let scales = _mm512_set1_epi64(sc as i64);
            let mins16 = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(mn as i64));
            let hbits = if QH { _mm512_broadcast_i64x4(load256(wb.add(16))) } else { _mm512_setzero_si512() };
            let mut sumi = [_mm512_setzero_si512(); R];
            for c in 0..4 {
                // the 32 bytes in both halves, the high half shifted to its high nibbles
                let bits = _mm512_broadcast_i64x4(load256(wb.add(qs_off + 32 * c)));
                let mut qz = _mm512_and_si512(_mm512_srlv_epi16(bits, high_half_by_4), m4);
                if QH {
                    let m = _mm512_test_epi8_mask(hbits, qh_pair_bits(c));
                    qz = _mm512_mask_add_epi8(qz, m, qz, _mm512_set1_epi8(16));
                }
                let sc = group_pair_scales(scales, c);
                for r in 0..R {
                    let y = load512(a.add(r * a_stride + ib * act.block + act.qs + 64 * c));
                    sumi[r] = _mm512_dpwssd_epi32(sumi[r], _mm512_maddubs_epi16(qz, y), sc);
                }
            }
            for r in 0..R {
                let ab = a.add(r * a_stride + ib * act.block);
                let yd = f32_at(ab.add(act.d));
                // prod[k] = m[2k] * (bs[4k] + bs[4k+1]) + m[2k+1] * (bs[4k+2] + bs[4k+3])
                // the group sums (|sum| <= 32 * 128) fit i16: one madd with the mins gives prod
                let group_sums = if PREPPED {
                    _mm_load_si128(ab.add(KPREP_GROUP_SUMS) as *const __m128i)
                } else {
                    let pairs = _mm256_madd_epi16(load256(ab.add(act.bsums)), _mm256_set1_epi16(1));
                    _mm_packs_epi32(_mm256_castsi256_si128(pairs), _mm256_extracti128_si256(pairs, 1))
                };
                let prod = _mm_madd_epi16(group_sums, mins16);
                if REPACKED || TILED {
                    // lanes of the quants' sum, then [isum, imin, isum, imin]
                    let s = fold_halves(sumi[r]);
                    let s = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
                    let h = _mm_hadd_epi32(s, prod);
                    let h = _mm_hadd_epi32(h, h);
                    if TILED {
                        // the tiled matmul's: r = d · s1, r = fnmadd(dmin, s2, r), fma(r, d_a, acc)
                        let (s1, s2) = (_mm_cvtsi128_si32(h), _mm_extract_epi32::<1>(h));
                        summs[r] = (-wdmin).mul_add(s2 as f32, wd * s1 as f32).mul_add(yd, summs[r]);
                        continue;
                    }
                    acc_r[r] = _mm_fmadd_ps(_mm_cvtepi32_ps(h), _mm_mul_ps(_mm_setr_ps(wd, wdmin, 0.0, 0.0), _mm_set1_ps(yd)), acc_r[r]);
                    continue;
                }
                let dmin = -yd * wdmin;
                if QH {
                    let s = _mm_add_epi32(prod, _mm_shuffle_epi32::<0b01_00_11_10>(prod));
                    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
                    summs[r] = dmin.mul_add(_mm_cvtsi128_si32(s) as f32, summs[r]);
                } else {
                    acc_m[r] = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(prod), acc_m[r]);
                }
                let d = _mm256_set1_ps(yd * wd);
                acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(fold_halves(sumi[r])), acc[r]);
            }
        }
        for r in 0..R {
            let extra = if QH {
                summs[r]
            } else {
                let mut m = [0f32; 4];
                _mm_storeu_ps(m.as_mut_ptr(), acc_m[r]);
                (m[0] + m[2]) + (m[1] + m[3])
            };
            *out.add(r * out_stride) = if TILED {
                summs[r]
            } else if REPACKED {
                _mm_cvtss_f32(_mm_sub_ss(acc_r[r], _mm_movehdup_ps(acc_r[r])))
            } else {
                hsum_float_8(acc[r]) + extra
            };
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Q4_K / Q5_K decode: one activation row prepared in the weights' nibble order

/// Chunk `k` (64 bytes) of a block prepared by [`prep_q8_k_row`] holds the activation quants of
/// groups `KROW_GROUPS[k].0` (low 32 bytes) and `.1` (high 32): what a 64-byte load of a
/// Q4_K/Q5_K block's quants holds in its low (k even) or high (k odd) nibbles. Two whole loads
/// and one shift per block replace four broadcasts and four variable shifts.
const KROW_GROUPS: [(usize, usize); 4] = [(0, 2), (1, 3), (4, 6), (5, 7)];

/// Bytes of an activation row of `nb` Q8_K blocks prepared by [`prep_q8_k_row`].
pub fn krow_bytes(nb: usize) -> usize {
    (nb * (QK_K + 16 + 4)).next_multiple_of(64)
}

/// Prepares one Q8_K activation row (`nb` blocks at `a`) at `prep` (64-byte aligned,
/// [`krow_bytes`] long) for the one-row Q4_K/Q5_K kernels: the blocks' quants in the
/// [`KROW_GROUPS`] order (`nb` × 256 bytes), then each block's 8 group sums as i16 (`nb` × 16,
/// |sum| <= 32 * 128), then each block's `d` (`nb` × 4): a kernel reads 4 blocks' group sums
/// in one load.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn prep_q8_k_row(nb: usize, a: *const u8, prep: *mut u8) {
    // SAFETY: see the module docs; block ib writes prep[256ib..256ib+256] (64-byte aligned),
    // prep[256nb+16ib..+16] (16-byte aligned) and prep[272nb+4ib..+4], inside krow_bytes(nb).
    unsafe {
        for ib in 0..nb {
            let ab = a.add(ib * Q8_K_B);
            let o = prep.add(ib * QK_K);
            for (k, &(ga, gb)) in KROW_GROUPS.iter().enumerate() {
                let z = _mm512_inserti64x4(_mm512_castsi256_si512(load256(ab.add(4 + 32 * ga))), load256(ab.add(4 + 32 * gb)), 1);
                _mm512_store_si512(o.add(64 * k) as *mut __m512i, z);
            }
            let pairs = _mm256_madd_epi16(load256(ab.add(4 + QK_K)), _mm256_set1_epi16(1));
            let sums = _mm_packs_epi32(_mm256_castsi256_si128(pairs), _mm256_extracti128_si256(pairs, 1));
            _mm_store_si128(prep.add(nb * QK_K + 16 * ib) as *mut __m128i, sums);
            std::ptr::write(prep.add(nb * (QK_K + 16) + 4 * ib) as *mut f32, f32_at(ab));
        }
    }
}

/// Q4_K weights, N rows one after the other (`w + j * w_stride`), against an activation row
/// prepared by [`prep_q8_k_row`]; `vec_dot`'s order, bit for bit [`dot_q4_k`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn gemv_q4_k<const N: usize>(nb: usize, w: *const u8, w_stride: usize, prep: *const u8, out: *mut f32) {
    // SAFETY: forwarded contract.
    unsafe {
        for j in 0..N {
            *out.add(j) = dot_qk45_row::<false, false>(nb, w.add(j * w_stride), prep);
        }
    }
}

/// As [`gemv_q4_k`] for Q5_K (bit for bit [`dot_q5_k`]).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn gemv_q5_k<const N: usize>(nb: usize, w: *const u8, w_stride: usize, prep: *const u8, out: *mut f32) {
    // SAFETY: forwarded contract.
    unsafe {
        for j in 0..N {
            *out.add(j) = dot_qk45_row::<true, false>(nb, w.add(j * w_stride), prep);
        }
    }
}

/// As [`gemv_q4_k`] in llama.cpp's repacked GEMV order (`quant::vec_dot_repacked(.., false)`,
/// bit for bit [`dot_q4_k_repacked`]).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn gemv_q4_k_repacked<const N: usize>(nb: usize, w: *const u8, w_stride: usize, prep: *const u8, out: *mut f32) {
    // SAFETY: forwarded contract.
    unsafe {
        for j in 0..N {
            *out.add(j) = dot_qk45_row::<false, true>(nb, w.add(j * w_stride), prep);
        }
    }
}

/// The largest prepared activation row ([`krow_bytes`]) for which the one-row kernels prefetch
/// weights into L1 (`_MM_HINT_T0`); above it into L2 (`_MM_HINT_T1`). Half of a 32 KB L1.
const KROW_L1_PREFETCH_MAX: usize = 16 << 10;

/// Prefetches the weight bytes `PREFETCH` ahead of the block of `wbytes` at `wb`: into L1, or
/// into L2 when `to_l2`.
#[inline(always)]
unsafe fn prefetch_row_block(wb: *const u8, wbytes: usize, to_l2: bool) {
    for l in (0..wbytes).step_by(64) {
        let p = wb.wrapping_add(PREFETCH + l) as *const i8;
        // SAFETY: a prefetch never faults, whatever the address.
        unsafe {
            if to_l2 {
                _mm_prefetch::<_MM_HINT_T1>(p)
            } else {
                _mm_prefetch::<_MM_HINT_T0>(p)
            }
        }
    }
}

/// One Q4_K/Q5_K (`QH`) block against its prepared activation block `y`: the 16 lanes of
/// scaled quant sums (the lanes of [`dot_qk45`]'s: a lane of the low half and the one 8 above
/// hold the same terms, so their sums agree exactly) and the block's 8 mins. Q5_K: each
/// chunk's products are summed four bytes to a lane by one `dpbusd` (at most 4 × 31 × 128 in
/// magnitude: an i16); two chunks' lanes share a vector (low and high i16 of each lane) that one
/// `dpwssd` scales and adds — three multiplies and one scale shuffle per chunk pair instead of
/// four and two (measured +4% one thread in L2; Q4_K lost 4% that way and keeps maddubs).
#[inline(always)]
unsafe fn qk45_block_row<const QH: bool>(wb: *const u8, y: *const u8) -> (__m512i, u64) {
    let qs_off = if QH { 48 } else { 16 };
    // SAFETY: see the module docs; a whole weight block at wb and a prepared block at y.
    unsafe {
        let (sc, mn) = super::k4_scales_mins(std::ptr::read_unaligned(wb.add(4) as *const [u32; 3]));
        let scales = _mm512_set1_epi64(sc as i64);
        let m4 = _mm512_set1_epi8(0x0f);
        let q = [load512(wb.add(qs_off)), load512(wb.add(qs_off + 64))];
        let hbits = if QH { _mm512_broadcast_i64x4(load256(wb.add(16))) } else { _mm512_setzero_si512() };
        let mut d = [_mm512_setzero_si512(); 4];
        for (k, &(ga, gb)) in KROW_GROUPS.iter().enumerate() {
            let bits = if k % 2 == 0 { q[k / 2] } else { _mm512_srli_epi16::<4>(q[k / 2]) };
            let mut qz = _mm512_and_si512(bits, m4);
            if QH {
                let m = _mm512_test_epi8_mask(hbits, _mm512_inserti64x4(_mm512_set1_epi8(1 << ga), _mm256_set1_epi8(1 << gb), 1));
                qz = _mm512_mask_add_epi8(qz, m, qz, _mm512_set1_epi8(16));
            }
            let y = _mm512_load_si512(y.add(64 * k) as *const __m512i);
            if !QH {
                // (Q4_K: measured faster as maddubs + dpwssd per chunk, one thread in L2)
                let idx = _mm512_mask_blend_epi16(0xffff_0000, _mm512_set1_epi16((0xff00 | ga) as u16 as i16), _mm512_set1_epi16((0xff00 | gb) as u16 as i16));
                d[0] = _mm512_dpwssd_epi32(d[0], _mm512_maddubs_epi16(qz, y), _mm512_shuffle_epi8(scales, idx));
                continue;
            }
            d[k] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), qz, y);
        }
        if !QH {
            return (d[0], mn);
        }
        let mut sumi = _mm512_setzero_si512();
        for j in 0..2 {
            let ((a0, a1), (b0, b1)) = (KROW_GROUPS[2 * j], KROW_GROUPS[2 * j + 1]);
            // lane i: chunk 2j's sum in the low i16, chunk 2j + 1's in the high
            let p = _mm512_mask_blend_epi16(0xaaaa_aaaa, d[2 * j], _mm512_slli_epi32::<16>(d[2 * j + 1]));
            // and the scales of their groups (the low 8 lanes: ga's, the high 8: gb's)
            let lane = |ga: usize, gb: usize| (0xff00 | ga) as i32 | ((0xff00 | gb) as i32) << 16;
            let idx = _mm512_mask_blend_epi32(0xff00, _mm512_set1_epi32(lane(a0, b0)), _mm512_set1_epi32(lane(a1, b1)));
            sumi = _mm512_dpwssd_epi32(sumi, p, _mm512_shuffle_epi8(scales, idx));
        }
        (sumi, mn)
    }
}

/// As [`qk45_block_row`], with only the 16 lanes' total defined (what the repacked order
/// needs: the block's exact integer sum): two chunks' lane sums are packed into one vector of
/// i16 by one `packs` (the saturation never applies: each is an i16).
#[inline(always)]
unsafe fn qk45_block_row_total<const QH: bool>(wb: *const u8, y: *const u8) -> (__m512i, u64) {
    let qs_off = if QH { 48 } else { 16 };
    // SAFETY: see the module docs; a whole weight block at wb and a prepared block at y.
    unsafe {
        let (sc, mn) = super::k4_scales_mins(std::ptr::read_unaligned(wb.add(4) as *const [u32; 3]));
        let scales = _mm512_set1_epi64(sc as i64);
        let m4 = _mm512_set1_epi8(0x0f);
        let q = [load512(wb.add(qs_off)), load512(wb.add(qs_off + 64))];
        let hbits = if QH { _mm512_broadcast_i64x4(load256(wb.add(16))) } else { _mm512_setzero_si512() };
        let mut d = [_mm512_setzero_si512(); 4];
        for (k, &(ga, gb)) in KROW_GROUPS.iter().enumerate() {
            let bits = if k % 2 == 0 { q[k / 2] } else { _mm512_srli_epi16::<4>(q[k / 2]) };
            let mut qz = _mm512_and_si512(bits, m4);
            if QH {
                let m = _mm512_test_epi8_mask(hbits, _mm512_inserti64x4(_mm512_set1_epi8(1 << ga), _mm256_set1_epi8(1 << gb), 1));
                qz = _mm512_mask_add_epi8(qz, m, qz, _mm512_set1_epi8(16));
            }
            d[k] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), qz, _mm512_load_si512(y.add(64 * k) as *const __m512i));
        }
        // packs_epi32(d[2j], d[2j + 1]), 128-bit lane L: four i16 of chunk 2j's group (ga in
        // lanes 0-1, gb in 2-3), then four of chunk 2j + 1's
        let mut sumi = _mm512_setzero_si512();
        for j in 0..2 {
            let ((a0, a1), (b0, b1)) = (KROW_GROUPS[2 * j], KROW_GROUPS[2 * j + 1]);
            let four = |g: usize| {
                let w = (0xff00 | g) as i64;
                w | w << 16 | w << 32 | w << 48
            };
            let idx = _mm512_set_epi64(four(b1), four(a1), four(b1), four(a1), four(b0), four(a0), four(b0), four(a0));
            let p = _mm512_packs_epi32(d[2 * j], d[2 * j + 1]);
            sumi = _mm512_dpwssd_epi32(sumi, p, _mm512_shuffle_epi8(scales, idx));
        }
        (sumi, mn)
    }
}

/// One weight row (`nb` Q4_K/Q5_K blocks at `w`) against an activation row prepared by
/// [`prep_q8_k_row`]: the float steps of [`dot_qk45`] at R = 1 (`REPACKED`: Q4_K in the
/// repacked GEMV's order), with the repacked order's per-block reductions done four blocks at a
/// time (the integers are exact; the FMAs stay one per block, in order).
#[inline(always)]
unsafe fn dot_qk45_row<const QH: bool, const REPACKED: bool>(nb: usize, w: *const u8, prep: *const u8) -> f32 {
    let wbytes = if QH { Q5_K_B } else { Q4_K_B };
    let (gs_at, d_at) = (nb * QK_K, nb * (QK_K + 16));
    // SAFETY: see the module docs; nb blocks at w, a prepared row of nb blocks at prep.
    unsafe {
        let (mut acc, mut acc_m, mut summs, mut acc_r) = (_mm256_setzero_ps(), _mm_setzero_ps(), 0f32, _mm_setzero_ps());
        // (a prepared row over half of L1 — 16384 columns and more — would be evicted by
        // weights prefetched into L1: those go to L2 then, measured +5–10% in V3.2's decode)
        let to_l2 = krow_bytes(nb) > KROW_L1_PREFETCH_MAX;
        let mut ib = 0;
        while ib < nb {
            if REPACKED && ib + 4 <= nb {
                // 4 blocks: their sums, then the exact [isum, imin] of each in one pass
                let mut sumi = [_mm512_setzero_si512(); 4];
                let mut mn = [0u64; 4];
                for b in 0..4 {
                    let wb = w.add((ib + b) * wbytes);
                    prefetch_row_block(wb, wbytes, to_l2);
                    (sumi[b], mn[b]) = qk45_block_row_total::<QH>(wb, prep.add((ib + b) * QK_K));
                }
                // 128-bit lane b: block b's 16 lanes folded to 4
                let x = _mm512_add_epi32(_mm512_shuffle_i64x2::<0b01_00_01_00>(sumi[0], sumi[1]), _mm512_shuffle_i64x2::<0b11_10_11_10>(sumi[0], sumi[1]));
                let y = _mm512_add_epi32(_mm512_shuffle_i64x2::<0b01_00_01_00>(sumi[2], sumi[3]), _mm512_shuffle_i64x2::<0b11_10_11_10>(sumi[2], sumi[3]));
                let u = _mm512_add_epi32(_mm512_shuffle_i64x2::<0b10_00_10_00>(x, y), _mm512_shuffle_i64x2::<0b11_01_11_01>(x, y));
                // lane b: block b's mins × group sums
                let mins = _mm512_cvtepu8_epi16(_mm256_setr_epi64x(mn[0] as i64, mn[1] as i64, mn[2] as i64, mn[3] as i64));
                let gs = _mm512_loadu_si512(prep.add(gs_at + 16 * ib) as *const __m512i);
                let p = _mm512_madd_epi16(gs, mins);
                // lane b: [isum, imin, isum, imin]
                let z = _mm512_add_epi32(_mm512_unpacklo_epi32(u, p), _mm512_unpackhi_epi32(u, p));
                let v = _mm512_cvtepi32_ps(_mm512_add_epi32(z, _mm512_shuffle_epi32::<0b01_00_11_10>(z)));
                let f = [_mm512_castps512_ps128(v), _mm512_extractf32x4_ps::<1>(v), _mm512_extractf32x4_ps::<2>(v), _mm512_extractf32x4_ps::<3>(v)];
                for b in 0..4 {
                    let (wd, wdmin) = f16_pair_at(w.add((ib + b) * wbytes));
                    let yd = f32_at(prep.add(d_at + 4 * (ib + b)));
                    acc_r = _mm_fmadd_ps(f[b], _mm_mul_ps(_mm_setr_ps(wd, wdmin, 0.0, 0.0), _mm_set1_ps(yd)), acc_r);
                }
                ib += 4;
                continue;
            }
            let wb = w.add(ib * wbytes);
            prefetch_row_block(wb, wbytes, to_l2);
            let (sumi, mn) = qk45_block_row::<QH>(wb, prep.add(ib * QK_K));
            let (wd, wdmin) = f16_pair_at(wb);
            let yd = f32_at(prep.add(d_at + 4 * ib));
            let prod = _mm_madd_epi16(_mm_load_si128(prep.add(gs_at + 16 * ib) as *const __m128i), _mm_cvtepu8_epi16(_mm_cvtsi64_si128(mn as i64)));
            if REPACKED {
                // (the last nb % 4 blocks) lanes of the quants' sum, then [isum, imin, isum, imin]
                let s = fold_halves(sumi);
                let s = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
                let h = _mm_hadd_epi32(s, prod);
                let h = _mm_hadd_epi32(h, h);
                acc_r = _mm_fmadd_ps(_mm_cvtepi32_ps(h), _mm_mul_ps(_mm_setr_ps(wd, wdmin, 0.0, 0.0), _mm_set1_ps(yd)), acc_r);
                ib += 1;
                continue;
            }
            let dmin = -yd * wdmin;
            if QH {
                let s = _mm_add_epi32(prod, _mm_shuffle_epi32::<0b01_00_11_10>(prod));
                let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
                summs = dmin.mul_add(_mm_cvtsi128_si32(s) as f32, summs);
            } else {
                acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(prod), acc_m);
            }
            acc = _mm256_fmadd_ps(_mm256_set1_ps(yd * wd), _mm256_cvtepi32_ps(fold_halves(sumi)), acc);
            ib += 1;
        }
        if REPACKED {
            _mm_cvtss_f32(_mm_sub_ss(acc_r, _mm_movehdup_ps(acc_r)))
        } else if QH {
            hsum_float_8(acc) + summs
        } else {
            let mut m = [0f32; 4];
            _mm_storeu_ps(m.as_mut_ptr(), acc_m);
            hsum_float_8(acc) + ((m[0] + m[2]) + (m[1] + m[3]))
        }
    }
}

/// Q6_K × Q8_K, one weight row × R activation rows. Layout: ql[128] | qh[64] | scales[16] | d.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn dot_q6_k<const R: usize>(nb: usize, w: *const u8, a: *const u8, a_stride: usize, out: *mut f32, out_stride: usize) {
    // SAFETY: forwarded contract.
    unsafe { dot_q6_k_any::<R, false, false>(nb, w, a, a_stride, out, out_stride) }
}

/// As [`dot_q6_k`] on activation rows prepared by [`prep_q8_k`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn dot_q6_k_prepped<const R: usize>(nb: usize, w: *const u8, a: *const u8, a_stride: usize, out: *mut f32, out_stride: usize) {
    // SAFETY: forwarded contract.
    unsafe { dot_q6_k_any::<R, true, false>(nb, w, a, a_stride, out, out_stride) }
}

/// Q6_K × Q8_K in the order of llama.cpp's tiled matmul (`quant::vec_dot_tiled`), on activation
/// rows prepared by [`prep_q8_k`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn dot_q6_k_tiled_prepped<const R: usize>(nb: usize, w: *const u8, a: *const u8, a_stride: usize, out: *mut f32, out_stride: usize) {
    // SAFETY: forwarded contract.
    unsafe { dot_q6_k_any::<R, true, true>(nb, w, a, a_stride, out, out_stride) }
}

#[inline(always)]
unsafe fn dot_q6_k_any<const R: usize, const PREPPED: bool, const TILED: bool>(nb: usize, w: *const u8, a: *const u8, a_stride: usize, out: *mut f32, out_stride: usize) {
    let act = const { act_layout(PREPPED) };
    // SAFETY: see the module docs.
    unsafe {
        let mut tiled = [0f32; R];
        let mut acc = [_mm256_setzero_ps(); R];
        let m4 = _mm512_set1_epi8(0x0f);
        let m30 = _mm512_set1_epi8(0x30);
        // 16-bit lane j of the scale vector for groups (4n+s, 4n+s+1): scale 8n + 2s + j / 8
        let sidx = |first: i16| {
            _mm512_add_epi16(_mm512_set1_epi16(first), _mm512_srli_epi16(_mm512_set_epi16(31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0), 3))
        };
        let idx = [sidx(0), sidx(4), sidx(8), sidx(12)];
        for ib in 0..nb {
            let wb = w.add(ib * Q6_K_B);
            for l in (0..Q6_K_B).step_by(64) {
                _mm_prefetch::<_MM_HINT_T0>(wb.add(PREFETCH + l) as *const i8);
            }
            let wd = f16_at(wb.add(208));
            let sc8 = load128(wb.add(192));
            let sc16 = _mm256_cvtepi8_epi16(sc8);
            let scz = _mm512_castsi256_si512(sc16);
            let mut sumi = [_mm512_setzero_si512(); R];
            for n in 0..2 {
                let ql = load512(wb.add(64 * n));
                let qh = load256(wb.add(128 + 32 * n));
                // [qh, qh >> 2]: bits (0,1) and (4,5) of each byte serve groups s = 0,1 and 2,3
                let qhz = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
                let q01 = _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_and_si512(_mm512_slli_epi16(qhz, 4), m30));
                let q23 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4), _mm512_and_si512(qhz, m30));
                let s01 = _mm512_permutexvar_epi16(idx[2 * n], scz);
                let s23 = _mm512_permutexvar_epi16(idx[2 * n + 1], scz);
                for r in 0..R {
                    let aq = a.add(r * a_stride + ib * act.block + act.qs + 128 * n);
                    let p01 = _mm512_dpwssd_epi32(sumi[r], _mm512_maddubs_epi16(q01, load512(aq)), s01);
                    sumi[r] = _mm512_dpwssd_epi32(p01, _mm512_maddubs_epi16(q23, load512(aq.add(64))), s23);
                }
            }
            for r in 0..R {
                let ab = a.add(r * a_stride + ib * act.block);
                let bs = load256(ab.add(act.bsums));
                let sub = _mm256_slli_epi32(_mm256_madd_epi16(bs, sc16), 5);
                let s = _mm256_sub_epi32(fold_halves(sumi[r]), sub);
                if TILED {
                    // the tiled matmul's: the block's exact sum, r = d · s1, fma(r, d_a, acc)
                    let q = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
                    let q = _mm_add_epi32(q, _mm_shuffle_epi32::<0b01_00_11_10>(q));
                    let s1 = _mm_cvtsi128_si32(_mm_add_epi32(q, _mm_shuffle_epi32::<0b10_11_00_01>(q)));
                    tiled[r] = (wd * s1 as f32).mul_add(f32_at(ab.add(act.d)), tiled[r]);
                    continue;
                }
                let d = _mm256_set1_ps(f32_at(ab.add(act.d)) * wd);
                acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(s), acc[r]);
            }
        }
        for r in 0..R {
            *out.add(r * out_stride) = if TILED { tiled[r] } else { hsum_float_8(acc[r]) };
        }
    }
}

// ---------------------------------------------------------------------------------------------
// legacy formats against Q8_0, prefill: 16 weight rows × R activation rows

/// Bytes of one block of a 16-row panel: for each group `g` of 4 consecutive elements, the 4
/// unsigned quants of each of the 16 rows (64 bytes, so that one VNNI `dpbusd` against the
/// activation's 4 bytes broadcast gives one partial sum per row), then the 16 rows' f16 scales
/// (padded to 64 bytes).
pub(crate) const PANEL_BLOCK: usize = 8 * 64 + 64;

/// Unpacks 16 weight rows (`w + j * w_stride`, `nb` blocks of `WB` bytes) into a panel;
/// `unpack(block)` gives the block's 32 quants, unsigned.
#[inline(always)]
unsafe fn unpack16<const WB: usize>(nb: usize, w: *const u8, w_stride: usize, panel: *mut u8, unpack: impl Fn(*const u8) -> __m256i) {
    // SAFETY: the caller guarantees 16 rows of nb blocks at w and nb * PANEL_BLOCK bytes at
    // panel.
    unsafe {
        for ib in 0..nb {
            super::avx2::prefetch_next_panel::<16, WB>(w, w_stride, ib);
            let pb = panel.add(ib * PANEL_BLOCK);
            // the scales stay f16 here: gathering them in a local array and loading that as a
            // vector would stall on store forwarding every block
            let dh = pb.add(512) as *mut u16;
            // z[r] = [row r | row r + 8], 8 dwords (groups of 4 quants) each
            let mut z = [_mm512_setzero_si512(); 8];
            for r in 0..8 {
                let (wa, wb) = (w.add(r * w_stride + ib * WB), w.add((r + 8) * w_stride + ib * WB));
                *dh.add(r) = std::ptr::read_unaligned(wa as *const u16);
                *dh.add(r + 8) = std::ptr::read_unaligned(wb as *const u16);
                z[r] = _mm512_inserti64x4(_mm512_castsi256_si512(unpack(wa)), unpack(wb), 1);
            }
            store_transposed(pb, z);
        }
    }
}

/// Stores 16 rows of 32 quants (`z[r]` = [row r | row r + 8]) at `pb` as 8 vectors of 64 bytes,
/// vector `g` holding quants 4g..4g+4 of rows 0..16 in order: an 8 × 8 dword transpose done in
/// both 256-bit halves at once.
#[inline(always)]
unsafe fn store_transposed(pb: *mut u8, z: [__m512i; 8]) {
    // SAFETY: the caller guarantees 512 writable bytes at pb.
    unsafe {
        for (k, v) in transposed(z).into_iter().enumerate() {
            _mm512_storeu_si512(pb.add(64 * k) as *mut __m512i, v);
        }
    }
}

/// [`store_transposed`]'s 512 bytes, as the 8 vectors stored in order.
#[inline(always)]
unsafe fn transposed(z: [__m512i; 8]) -> [__m512i; 8] {
    // SAFETY: register-only AVX-512F intrinsics.
    unsafe {
        let lo = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13);
        let hi = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
        let t: [__m512i; 8] = std::array::from_fn(|i| {
            let (a, b) = (z[i & !1], z[i | 1]);
            if i % 2 == 0 {
                _mm512_unpacklo_epi32(a, b)
            } else {
                _mm512_unpackhi_epi32(a, b)
            }
        });
        // u[4q + k]: dword k (and k + 4) of rows 4q..4q+4 (and + 8)
        let u: [__m512i; 8] = std::array::from_fn(|i| {
            let (q, k) = (i / 4, i % 4);
            let (a, b) = (t[4 * q + k / 2], t[4 * q + 2 + k / 2]);
            if k % 2 == 0 {
                _mm512_unpacklo_epi64(a, b)
            } else {
                _mm512_unpackhi_epi64(a, b)
            }
        });
        let mut out = [_mm512_setzero_si512(); 8];
        for k in 0..4 {
            out[k] = _mm512_permutex2var_epi64(u[k], lo, u[4 + k]);
            out[k + 4] = _mm512_permutex2var_epi64(u[k], hi, u[4 + k]);
        }
        out
    }
}

/// 32 nibbles of 16 bytes: low nibbles are elements 0..16, high nibbles 16..32.
#[inline(always)]
unsafe fn nibbles_32(p: *const u8) -> __m256i {
    // SAFETY: caller guarantees 16 readable bytes at p.
    unsafe {
        let t = load128(p);
        _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(0x0f))
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn unpack16_q4_0(nb: usize, w: *const u8, w_stride: usize, panel: *mut u8) {
    // SAFETY: forwarded contract.
    unsafe { unpack16::<Q4_0_B>(nb, w, w_stride, panel, |b| nibbles_32(b.add(2))) }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn unpack16_q5_0(nb: usize, w: *const u8, w_stride: usize, panel: *mut u8) {
    // SAFETY: forwarded contract.
    unsafe {
        unpack16::<Q5_0_B>(nb, w, w_stride, panel, |b| {
            let qh = std::ptr::read_unaligned(b.add(2) as *const u32);
            _mm256_mask_add_epi8(nibbles_32(b.add(6)), qh, nibbles_32(b.add(6)), _mm256_set1_epi8(16))
        })
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn unpack16_q8_0(nb: usize, w: *const u8, w_stride: usize, panel: *mut u8) {
    // SAFETY: forwarded contract.
    unsafe { unpack16::<Q8_0_B>(nb, w, w_stride, panel, |b| _mm256_xor_si256(load256(b.add(2)), _mm256_set1_epi8(0x80u8 as i8))) }
}

/// IQ4_NL: each nibble's codebook value, made unsigned by flipping the top bit (offset 128,
/// as Q8_0's).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn unpack16_iq4_nl(nb: usize, w: *const u8, w_stride: usize, panel: *mut u8) {
    // SAFETY: forwarded contract; 16 nibble bytes follow the f16 scale.
    unsafe {
        let table = _mm256_broadcastsi128_si256(load128(KVALUES_IQ4NL.as_ptr() as *const u8));
        unpack16::<IQ4_NL_B>(nb, w, w_stride, panel, |b| _mm256_xor_si256(_mm256_shuffle_epi8(table, nibbles_32(b.add(2))), _mm256_set1_epi8(0x80u8 as i8)))
    }
}

/// A 16-row panel × R Q8_0 activation rows (`a + i * a_stride`, per-block [`super::ActAux`]
/// at `aux + i * nb` with `corr_g = offset * sum(q of group g)`); result (i, j) to
/// `out + i * out_stride + j`. Bit for bit the reference's `vec_dot` (upstream's AVX2 order):
/// group g of 4 elements is the reference's 32-bit lane g, so each group keeps its own f32
/// accumulator, one FMA per block with the block's d·d; then the groups are added as
/// `hsum_float_8` adds lanes: ((0 + 4) + (2 + 6)) + ((1 + 5) + (3 + 7)). One `dpbusd` per group
/// covers all 16 rows. Activation rows go two at a time (16 independent accumulators).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn gemm16<const R: usize>(nb: usize, panel: *const u8, a: *const u8, a_stride: usize, aux: *const super::ActAux, out: *mut f32, out_stride: usize) {
    // SAFETY: see the module docs; rows r0.. of a, aux and out are inside the caller's R rows.
    unsafe {
        let mut r0 = 0;
        while r0 + 2 <= R {
            gemm16_rows::<2>(nb, panel, a.add(r0 * a_stride), a_stride, aux.add(r0 * nb), out.add(r0 * out_stride), out_stride);
            r0 += 2;
        }
        if r0 < R {
            gemm16_rows::<1>(nb, panel, a.add(r0 * a_stride), a_stride, aux.add(r0 * nb), out.add(r0 * out_stride), out_stride);
        }
    }
}

#[inline(always)]
unsafe fn gemm16_rows<const C: usize>(nb: usize, panel: *const u8, a: *const u8, a_stride: usize, aux: *const super::ActAux, out: *mut f32, out_stride: usize) {
    // SAFETY: as gemm16 for C activation rows.
    unsafe {
        let mut acc = [[_mm512_setzero_ps(); 8]; C];
        for ib in 0..nb {
            let pb = panel.add(ib * PANEL_BLOCK);
            let dw = _mm512_cvtph_ps(load256(pb.add(512)));
            for r in 0..C {
                let x = &*aux.add(r * nb + ib);
                let ya = a.add(r * a_stride + ib * Q8_0_B + 2) as *const i32;
                let d = _mm512_mul_ps(dw, _mm512_set1_ps(x.d));
                for g in 0..8 {
                    let isum = _mm512_dpbusd_epi32(_mm512_set1_epi32(-x.corr_g[g]), load512(pb.add(64 * g)), _mm512_set1_epi32(std::ptr::read_unaligned(ya.add(g))));
                    acc[r][g] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(isum), acc[r][g]);
                }
            }
        }
        for r in 0..C {
            let l = &acc[r];
            let even = _mm512_add_ps(_mm512_add_ps(l[0], l[4]), _mm512_add_ps(l[2], l[6]));
            let odd = _mm512_add_ps(_mm512_add_ps(l[1], l[5]), _mm512_add_ps(l[3], l[7]));
            _mm512_storeu_ps(out.add(r * out_stride), _mm512_add_ps(even, odd));
        }
    }
}

/// As [`gemm16`] in a faster order (the dense recipes' prefill): each block's integer sums
/// reduced to one per row before a single FMA per block and row (within 1e-5 of the
/// reference, not bit for bit; about half the instructions).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn gemm16_fast<const R: usize>(nb: usize, panel: *const u8, a: *const u8, a_stride: usize, aux: *const super::ActAux, out: *mut f32, out_stride: usize) {
    // SAFETY: see the module docs; the panel holds nb blocks; aux holds R rows of nb entries.
    unsafe {
        let mut acc = [_mm512_setzero_ps(); R];
        for ib in 0..nb {
            let pb = panel.add(ib * PANEL_BLOCK);
            let mut isum = [_mm512_setzero_si512(); R];
            for r in 0..R {
                isum[r] = _mm512_set1_epi32(-(*aux.add(r * nb + ib)).corr);
            }
            for g in 0..8 {
                let wv = load512(pb.add(64 * g));
                for r in 0..R {
                    let y = std::ptr::read_unaligned(a.add(r * a_stride + ib * Q8_0_B + 2 + 4 * g) as *const i32);
                    isum[r] = _mm512_dpbusd_epi32(isum[r], wv, _mm512_set1_epi32(y));
                }
            }
            let dw = _mm512_cvtph_ps(load256(pb.add(512)));
            for r in 0..R {
                let d = _mm512_mul_ps(dw, _mm512_set1_ps((*aux.add(r * nb + ib)).d));
                acc[r] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(isum[r]), acc[r]);
            }
        }
        for r in 0..R {
            _mm512_storeu_ps(out.add(r * out_stride), acc[r]);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Q4_K against Q8_K, prefill: 16 weight rows × R activation rows

/// Offsets inside one super-block of a 16-row Q4_K panel: 8 groups of 32 quants as in
/// [`PANEL_BLOCK`]'s layout (512 bytes each), then per group the 16 rows' 6-bit scales and mins
/// as f32, then the rows' `d` and `dmin` as f32.
const Q4K_SC: usize = 8 * 512;
const Q4K_MIN: usize = Q4K_SC + 8 * 64;
const Q4K_D: usize = Q4K_MIN + 8 * 64;
pub(crate) const Q4K_PANEL_BLOCK: usize = Q4K_D + 128;

/// Unpacks 16 Q4_K rows (`w + j * w_stride`, `nb` super-blocks) into a panel of
/// `nb * Q4K_PANEL_BLOCK` bytes.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn unpack16_q4_k(nb: usize, w: *const u8, w_stride: usize, panel: *mut u8) {
    // SAFETY: as unpack16_qk45's contract, which the caller guarantees.
    unsafe { unpack16_qk45::<false>(nb, w, w_stride, panel) }
}

/// Unpacks 16 Q5_K rows into the Q4_K panel layout (quants 0..31: the 5th bit from `qh`), for
/// [`gemm16_q4_k`], whose steps do not depend on the quants' range (a block's integer sums stay
/// far below 2^31).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn unpack16_q5_k(nb: usize, w: *const u8, w_stride: usize, panel: *mut u8) {
    // SAFETY: as unpack16_qk45's contract, which the caller guarantees.
    unsafe { unpack16_qk45::<true>(nb, w, w_stride, panel) }
}

/// 16 Q4_K (or, with `QH`, Q5_K) rows of nb super-blocks at `w` into nb * Q4K_PANEL_BLOCK
/// bytes at `panel`. Both types start with d, dmin and the same 12 bytes of 6-bit scales/mins.
/// The 32 quant bytes of a pair of groups (low nibbles group 2c, high nibbles 2c + 1) are
/// transposed once for both groups; the scales and mins are decoded per row in two u64 and
/// transposed to per-group vectors of the 16 rows.
#[inline(always)]
unsafe fn unpack16_qk45<const QH: bool>(nb: usize, w: *const u8, w_stride: usize, panel: *mut u8) {
    let (wbytes, qs_off) = if QH { (Q5_K_B, 48) } else { (Q4_K_B, 16) };
    // SAFETY: the caller guarantees 16 rows of nb super-blocks at w and nb * Q4K_PANEL_BLOCK
    // bytes at panel.
    unsafe {
        let m4 = _mm512_set1_epi8(0x0f);
        // in each 128-bit lane (two rows' 8 bytes), the bytes of group g of both rows together
        let pair_bytes = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15));
        // word 4g + l of the result: word g of lane l (group g of rows 2l, 2l + 1)
        let groups_first = _mm512_loadu_si512(GROUPS_FIRST.as_ptr() as *const __m512i);
        for ib in 0..nb {
            // the rows' blocks a few ahead (16 streams: more than the hardware follows)
            // (and near the end the next panel's first blocks)
            let (ahead_row, ahead_block) = if ib + PANEL_AHEAD < nb { (0, ib + PANEL_AHEAD) } else { (16, ib + PANEL_AHEAD - nb) };
            for j in 0..16 {
                for l in (0..wbytes).step_by(64) {
                    // SAFETY: a prefetch never faults, wherever it points.
                    _mm_prefetch::<_MM_HINT_T1>(w.wrapping_add((ahead_row + j) * w_stride + ahead_block * wbytes + l) as *const i8);
                }
            }
            let pb = panel.add(ib * Q4K_PANEL_BLOCK);
            let rows = w.add(ib * wbytes);
            // bit g of qh[l] is the 5th bit of quant l of group g
            let qh = if QH { transposed(rows32(rows, w_stride, 16)) } else { [_mm512_setzero_si512(); 8] };
            for c in 0..4 {
                let t = transposed(rows32(rows, w_stride, qs_off + 32 * c));
                for k in 0..8 {
                    let mut lo = _mm512_and_si512(t[k], m4);
                    let mut hi = _mm512_and_si512(_mm512_srli_epi16::<4>(t[k]), m4);
                    if QH {
                        let sixteen = _mm512_set1_epi8(16);
                        lo = _mm512_mask_add_epi8(lo, _mm512_test_epi8_mask(qh[k], _mm512_set1_epi8(1 << (2 * c))), lo, sixteen);
                        hi = _mm512_mask_add_epi8(hi, _mm512_test_epi8_mask(qh[k], _mm512_set1_epi8(1 << (2 * c + 1))), hi, sixteen);
                    }
                    _mm512_storeu_si512(pb.add(512 * (2 * c) + 64 * k) as *mut __m512i, lo);
                    _mm512_storeu_si512(pb.add(512 * (2 * c + 1) + 64 * k) as *mut __m512i, hi);
                }
            }
            // per row the scales and mins (get_scale_min_k4) as 8 bytes each, d and dmin
            let (mut scales, mut mins, mut dd) = ([0u64; 16], [0u64; 16], [0u32; 16]);
            for j in 0..16 {
                let h: [u32; 4] = std::ptr::read_unaligned(rows.add(j * w_stride) as *const [u32; 4]);
                (scales[j], mins[j]) = super::k4_scales_mins([h[1], h[2], h[3]]);
                dd[j] = h[0];
            }
            for (src, dst) in [(&scales, Q4K_SC), (&mins, Q4K_MIN)] {
                // [row][group] bytes to [group][row]: rows 0..8 in `a`, 8..16 in `b`, each
                // group's 8 rows in one qword; then lane l of `lo` / `hi` holds groups 2l / 2l + 1
                let a = _mm512_permutexvar_epi16(groups_first, _mm512_shuffle_epi8(_mm512_loadu_si512(src.as_ptr() as *const __m512i), pair_bytes));
                let b = _mm512_permutexvar_epi16(groups_first, _mm512_shuffle_epi8(_mm512_loadu_si512(src.as_ptr().add(8) as *const __m512i), pair_bytes));
                let (lo, hi) = (_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b));
                let store = |g: usize, v: __m128i| _mm512_storeu_ps(pb.add(dst + 64 * g) as *mut f32, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(v)));
                store(0, _mm512_castsi512_si128(lo));
                store(1, _mm512_castsi512_si128(hi));
                store(2, _mm512_extracti32x4_epi32::<1>(lo));
                store(3, _mm512_extracti32x4_epi32::<1>(hi));
                store(4, _mm512_extracti32x4_epi32::<2>(lo));
                store(5, _mm512_extracti32x4_epi32::<2>(hi));
                store(6, _mm512_extracti32x4_epi32::<3>(lo));
                store(7, _mm512_extracti32x4_epi32::<3>(hi));
            }
            let dd = _mm512_loadu_si512(dd.as_ptr() as *const __m512i);
            _mm512_storeu_ps(pb.add(Q4K_D) as *mut f32, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dd)));
            _mm512_storeu_ps(pb.add(Q4K_D + 64) as *mut f32, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32::<16>(dd))));
        }
    }
}

/// The 32 bytes at `off` of 16 rows (`rows + j * stride`) as [row r | row r + 8] pairs.
#[inline(always)]
unsafe fn rows32(rows: *const u8, stride: usize, off: usize) -> [__m512i; 8] {
    // SAFETY: the caller guarantees 32 readable bytes at off in each of the 16 rows.
    unsafe {
        let mut z = [_mm512_setzero_si512(); 8];
        for (r, v) in z.iter_mut().enumerate() {
            *v = _mm512_inserti64x4(_mm512_castsi256_si512(load256(rows.add(r * stride + off))), load256(rows.add((r + 8) * stride + off)), 1);
        }
        z
    }
}

/// How many super-blocks ahead [`unpack16_qk45`] prefetches its rows.
const PANEL_AHEAD: usize = 4;

/// The word permutation of [`unpack16_qk45`]'s scale transpose: result word 4g + l is word g of
/// 128-bit lane l.
static GROUPS_FIRST: [u16; 32] = {
    let mut t = [0u16; 32];
    let mut i = 0;
    while i < 32 {
        t[i] = ((i % 4) * 8 + i / 4) as u16;
        i += 1;
    }
    t
};

/// A 16-row Q4_K (or Q5_K) panel × R Q8_K activation rows (`a + i * a_stride`); result
/// (i, j) to `out + i * out_stride + j`. Per group the integer sums of quants × activations
/// (`dpbusd`) are scaled by the rows' 6-bit scales, and the mins by the activation's group
/// sums, all in 32-bit integers (exact: a Q5_K block's total stays below 2^27); then per pair
/// of groups one FMA of the scales' part by `d · d_a` and one of the mins' part by `dmin · d_a`
/// into two accumulators, subtracted at the end: bit for bit llama.cpp's repacked Q4_K GEMM
/// (`quant::vec_dot_repacked` with `gemm`), the same steps as [`super::avx2::gemm8_q4_k`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn gemm16_q4_k<const R: usize>(nb: usize, panel: *const u8, a: *const u8, a_stride: usize, aux: *const super::ActAux, out: *mut f32, out_stride: usize) {
    // SAFETY: forwarded contract.
    unsafe { gemm16_q4_k_in::<R, Q4K_GEMM>(nb, panel, a, a_stride, aux, out, out_stride) }
}

/// As [`gemm16_q4_k`] in the order of llama.cpp's repacked Q4_K GEMV (`quant::vec_dot_repacked`
/// without `gemm`: what its `ggml_mul_mat_id` takes for every routed row of an expert): the
/// integer sums of a whole super-block, then one FMA for each part.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn gemm16_q4_k_gemv<const R: usize>(nb: usize, panel: *const u8, a: *const u8, a_stride: usize, aux: *const super::ActAux, out: *mut f32, out_stride: usize) {
    // SAFETY: forwarded contract.
    unsafe { gemm16_q4_k_in::<R, Q4K_GEMV>(nb, panel, a, a_stride, aux, out, out_stride) }
}

/// As [`gemm16_q4_k`] in the order of llama.cpp's tiled matmul (`quant::vec_dot_tiled`: per
/// super-block `r = d · s1`, `r = fnmadd(dmin, s2, r)`, `acc = fma(r, d_a, acc)`), for the Q4_K
/// and Q5_K matrices upstream does not repack.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn gemm16_q4_k_tiled<const R: usize>(nb: usize, panel: *const u8, a: *const u8, a_stride: usize, aux: *const super::ActAux, out: *mut f32, out_stride: usize) {
    // SAFETY: forwarded contract.
    unsafe { gemm16_q4_k_in::<R, Q4K_TILED>(nb, panel, a, a_stride, aux, out, out_stride) }
}

/// The orders of [`gemm16_q4_k_in`]: upstream's repacked GEMM and GEMV, its tiled matmul.
const Q4K_GEMM: u8 = 0;
const Q4K_GEMV: u8 = 1;
const Q4K_TILED: u8 = 2;

/// [`gemm16_q4_k`] in `ORDER`. The super-block's integer sums stay exact: 8 groups × 63 ×
/// 32 · 31 · 128 < 2^31.
#[inline(always)]
unsafe fn gemm16_q4_k_in<const R: usize, const ORDER: u8>(nb: usize, panel: *const u8, a: *const u8, a_stride: usize, _aux: *const super::ActAux, out: *mut f32, out_stride: usize) {
    // SAFETY: see the module docs; the panel holds nb super-blocks.
    unsafe {
        let mut acc = [_mm512_setzero_ps(); R];
        let mut acc_m = [_mm512_setzero_ps(); R];
        for ib in 0..nb {
            let pb = panel.add(ib * Q4K_PANEL_BLOCK);
            let d = _mm512_loadu_ps(pb.add(Q4K_D) as *const f32);
            let dmin = _mm512_loadu_ps(pb.add(Q4K_D + 64) as *const f32);
            // per activation row: d · d_a, dmin · d_a, and the groups' activation sums
            let mut yd = [_mm512_setzero_ps(); R];
            let mut dy = [_mm512_setzero_ps(); R];
            let mut dminy = [_mm512_setzero_ps(); R];
            let mut group_sums = [[0i32; 8]; R];
            for r in 0..R {
                let ab = a.add(r * a_stride + ib * Q8_K_B);
                yd[r] = _mm512_set1_ps(f32_at(ab));
                (dy[r], dminy[r]) = (_mm512_mul_ps(d, yd[r]), _mm512_mul_ps(dmin, yd[r]));
                _mm256_storeu_si256(group_sums[r].as_mut_ptr() as *mut __m256i, _mm256_madd_epi16(load256(ab.add(4 + QK_K)), _mm256_set1_epi16(1)));
            }
            let mut itot = [_mm512_setzero_si512(); R];
            let mut mtot = [_mm512_setzero_si512(); R];
            for g in 0..8 {
                let mut isum = [_mm512_setzero_si512(); R];
                for k in 0..8 {
                    let wv = load512(pb.add(512 * g + 64 * k));
                    for r in 0..R {
                        let y = std::ptr::read_unaligned(a.add(r * a_stride + ib * Q8_K_B + 4 + 32 * g + 4 * k) as *const i32);
                        isum[r] = _mm512_dpbusd_epi32(isum[r], wv, _mm512_set1_epi32(y));
                    }
                }
                // the rows' 6-bit scales, stored as (exact) f32
                let sc = _mm512_cvttps_epi32(_mm512_loadu_ps(pb.add(Q4K_SC + 64 * g) as *const f32));
                for r in 0..R {
                    itot[r] = _mm512_add_epi32(itot[r], _mm512_mullo_epi32(isum[r], sc));
                }
                if g % 2 == 1 {
                    // a pair of groups done: the mins of both groups × the activation's group
                    // sums; as upstream's GEMM one FMA for each part per pair, as its GEMV
                    // per super-block
                    let m0 = _mm512_cvttps_epi32(_mm512_loadu_ps(pb.add(Q4K_MIN + 64 * (g - 1)) as *const f32));
                    let m1 = _mm512_cvttps_epi32(_mm512_loadu_ps(pb.add(Q4K_MIN + 64 * g) as *const f32));
                    for r in 0..R {
                        let msum = _mm512_add_epi32(_mm512_mullo_epi32(m0, _mm512_set1_epi32(group_sums[r][g - 1])), _mm512_mullo_epi32(m1, _mm512_set1_epi32(group_sums[r][g])));
                        mtot[r] = _mm512_add_epi32(mtot[r], msum);
                        if ORDER == Q4K_TILED && g == 7 {
                            let res = _mm512_fnmadd_ps(dmin, _mm512_cvtepi32_ps(mtot[r]), _mm512_mul_ps(d, _mm512_cvtepi32_ps(itot[r])));
                            acc[r] = _mm512_fmadd_ps(res, yd[r], acc[r]);
                        } else if ORDER == Q4K_GEMM || g == 7 {
                            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(itot[r]), dy[r], acc[r]);
                            acc_m[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(mtot[r]), dminy[r], acc_m[r]);
                            itot[r] = _mm512_setzero_si512();
                            mtot[r] = _mm512_setzero_si512();
                        }
                    }
                }
            }
        }
        for r in 0..R {
            // (the tiled order's sum is all in acc)
            _mm512_storeu_ps(out.add(r * out_stride), _mm512_sub_ps(acc[r], acc_m[r]));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Q6_K against Q8_K, prefill: 16 weight rows × R activation rows

/// Offsets inside one super-block of a 16-row Q6_K panel: 8 groups of 32 quants (0..63, the
/// stored value + 32) as in [`PANEL_BLOCK`]'s layout, then per 16-element sub-group the 16
/// rows' scales as f32, then the rows' `d` as f32.
const Q6K_SC: usize = 8 * 512;
const Q6K_D: usize = Q6K_SC + 16 * 64;
pub(crate) const Q6K_PANEL_BLOCK: usize = Q6K_D + 64;

/// Unpacks 16 Q6_K rows (`w + j * w_stride`, `nb` super-blocks) into a panel of
/// `nb * Q6K_PANEL_BLOCK` bytes. Layout of a row's block: ql[128] | qh[64] | scales[16] | d.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn unpack16_q6_k(nb: usize, w: *const u8, w_stride: usize, panel: *mut u8) {
    // SAFETY: the caller guarantees 16 rows of nb super-blocks at w and nb * Q6K_PANEL_BLOCK
    // bytes at panel.
    unsafe {
        let (m4, m3) = (_mm256_set1_epi8(0x0f), _mm256_set1_epi8(0x03));
        for ib in 0..nb {
            super::avx2::prefetch_next_panel::<16, Q6_K_B>(w, w_stride, ib);
            let pb = panel.add(ib * Q6K_PANEL_BLOCK);
            let row = |j: usize| w.add(j * w_stride + ib * Q6_K_B);
            for g in 0..8 {
                // group g = 4n + s: nibble s / 2 of ql[64n + 32(s % 2)..], bits 2s of qh[32n..]
                let (n, s) = (g / 4, g % 4);
                let quants = |j: usize| {
                    let b = row(j);
                    let ql = _mm256_srl_epi16(load256(b.add(64 * n + 32 * (s % 2))), _mm_cvtsi32_si128(4 * (s / 2) as i32));
                    let qh = _mm256_srl_epi16(load256(b.add(128 + 32 * n)), _mm_cvtsi32_si128(2 * s as i32));
                    _mm256_or_si256(_mm256_and_si256(ql, m4), _mm256_slli_epi16(_mm256_and_si256(qh, m3), 4))
                };
                let z: [__m512i; 8] = std::array::from_fn(|r| _mm512_inserti64x4(_mm512_castsi256_si512(quants(r)), quants(r + 8), 1));
                store_transposed(pb.add(512 * g), z);
            }
            let (sc, d) = (pb.add(Q6K_SC) as *mut f32, pb.add(Q6K_D) as *mut f32);
            for j in 0..16 {
                let b = row(j);
                for u in 0..16 {
                    *sc.add(16 * u + j) = *b.add(192 + u) as i8 as f32;
                }
                *d.add(j) = f16_at(b.add(208));
            }
        }
    }
}

/// A 16-row Q6_K panel × R Q8_K activation rows (`a + i * a_stride`); result (i, j) to
/// `out + i * out_stride + j`. Per super-block: Σ scale × (Σ q × y) − 32 Σ scale × (sum of the
/// sub-group's activation quants), the integer sums of each sub-group exact, scaled in f32
/// (exact below 2^24), then one FMA (prefill only).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn gemm16_q6_k<const R: usize>(nb: usize, panel: *const u8, a: *const u8, a_stride: usize, _aux: *const super::ActAux, out: *mut f32, out_stride: usize) {
    // SAFETY: see the module docs; the panel holds nb super-blocks.
    unsafe {
        let mut acc = [_mm512_setzero_ps(); R];
        for ib in 0..nb {
            let pb = panel.add(ib * Q6K_PANEL_BLOCK);
            let mut sumf = [_mm512_setzero_ps(); R];
            for r in 0..R {
                let bs = a.add(r * a_stride + ib * Q8_K_B + 4 + QK_K);
                let mut sub_sums = [0f32; 16];
                _mm512_storeu_ps(sub_sums.as_mut_ptr(), _mm512_cvtepi32_ps(_mm512_cvtepi16_epi32(load256(bs))));
                let mut corr = _mm512_setzero_ps();
                for (u, &s) in sub_sums.iter().enumerate() {
                    corr = _mm512_fmadd_ps(_mm512_loadu_ps(pb.add(Q6K_SC + 64 * u) as *const f32), _mm512_set1_ps(s), corr);
                }
                sumf[r] = _mm512_mul_ps(corr, _mm512_set1_ps(-32.0));
            }
            for u in 0..16 {
                let mut isum = [_mm512_setzero_si512(); R];
                for k in 0..4 {
                    let wv = load512(pb.add(256 * u + 64 * k));
                    for r in 0..R {
                        let y = std::ptr::read_unaligned(a.add(r * a_stride + ib * Q8_K_B + 4 + 16 * u + 4 * k) as *const i32);
                        isum[r] = _mm512_dpbusd_epi32(isum[r], wv, _mm512_set1_epi32(y));
                    }
                }
                let sc = _mm512_loadu_ps(pb.add(Q6K_SC + 64 * u) as *const f32);
                for r in 0..R {
                    sumf[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[r]), sc, sumf[r]);
                }
            }
            let d = _mm512_loadu_ps(pb.add(Q6K_D) as *const f32);
            for r in 0..R {
                let yd = _mm512_set1_ps(f32_at(a.add(r * a_stride + ib * Q8_K_B)));
                acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(d, yd), sumf[r], acc[r]);
            }
        }
        for r in 0..R {
            _mm512_storeu_ps(out.add(r * out_stride), acc[r]);
        }
    }
}
