//! The measurement behind issue 20's repack decision: Q4_K decode (one activation row, the
//! repacked GEMV's order) on weights interleaved four rows at a time — the layout ik_llama.cpp
//! repacks to at load (`-rtr`) — against the library's one-row kernels on the file's layout,
//! at the AVX2 level, one thread, in L2 and streamed from DRAM.
//!
//! Usage: [PF=BYTES] cargo bench --bench interleave -- [-c COLS ...] (default 1536 8960: the 1.5B
//! model's)
//!
//! Layout of one super-block of a group of 4 rows (576 bytes, the 4 blocks' bytes): the 4 `d`
//! then the 4 `dmin` (f16), the 4 rows' 12 scale bytes, then the quants: for chunk c (64
//! elements) and slice k (8 bytes), 32 bytes = bytes 32c + 8k .. + 8 of rows 0, 1, 2, 3. One
//! 32-byte load then holds 8 elements of groups 2c (low nibbles) and 2c + 1 (high) for all
//! four rows: the activation's 8 bytes broadcast meet them, the products of 4 slices add up in
//! i16 (at most 8 × 15 × 128), and one `madd` applies the four rows' scales — per row and
//! block a quarter of the scale work of the row layout, where each 32 elements need their own.
//! Every row's result is checked bit for bit against `quant::vec_dot_repacked`.

#![allow(clippy::missing_safety_doc)]

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

#[path = "common.rs"]
mod common;
use common::{cpu_seconds, random_rows};
#[cfg(target_arch = "x86_64")]
use deepseek::kernels::simd::avx2;
use deepseek::kernels::matmul::{activation_bytes, matmul, quantize_activations, WeightMatrix};
use deepseek::quant::{self, GgmlType};

const QK_K: usize = 256;
use deepseek::threads::ThreadPool;

const Q4_K_B: usize = 144;
const Q8_K_B: usize = 4 + QK_K + 32;



/// The rows interleaved four at a time (see the module docs).
fn interleave(w: &[u8], rows: usize, nb: usize) -> Vec<u8> {
    let rb = nb * Q4_K_B;
    let mut out = vec![0u8; w.len()];
    for g in 0..rows / 4 {
        for ib in 0..nb {
            let o = &mut out[(g * nb + ib) * 4 * Q4_K_B..][..4 * Q4_K_B];
            for r in 0..4 {
                let b = &w[(4 * g + r) * rb + ib * Q4_K_B..][..Q4_K_B];
                o[2 * r..2 * r + 2].copy_from_slice(&b[0..2]);
                o[8 + 2 * r..8 + 2 * r + 2].copy_from_slice(&b[2..4]);
                o[16 + 12 * r..16 + 12 * r + 12].copy_from_slice(&b[4..16]);
                for c in 0..4 {
                    for k in 0..4 {
                        o[64 + (4 * c + k) * 32 + 8 * r..][..8].copy_from_slice(&b[16 + 32 * c + 8 * k..][..8]);
                    }
                }
            }
        }
    }
    out
}

/// The activation's 8 group sums per block (i16), from its Q8_K bsums.
fn group_sums(act: &[u8], nb: usize) -> Vec<i16> {
    (0..nb)
        .flat_map(|ib| {
            let bs = move |i: usize| i16::from_le_bytes([act[ib * Q8_K_B + 4 + QK_K + 2 * i], act[ib * Q8_K_B + 4 + QK_K + 2 * i + 1]]);
            (0..8).map(move |g| bs(2 * g) + bs(2 * g + 1))
        })
        .collect()
}

/// Groups of 4 interleaved rows (`groups` of them at `w`, `nb` blocks) against one Q8_K row
/// `a` with its group sums `gs`; row results to `out`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn gemv_r4(nb: usize, groups: usize, w: *const u8, a: *const u8, gs: *const i16, out: *mut f32, pf: usize) {
    // SAFETY: groups × nb interleaved blocks at w; nb Q8_K blocks at a; 8 nb sums at gs.
    unsafe {
        // mask g: i16 lane l of a half takes scale byte 8 (l / 4) + g
        let masks: [__m256i; 8] = std::hint::black_box(std::array::from_fn(|g| {
            let m: [i8; 16] = std::array::from_fn(|i| if i % 2 == 1 { -1 } else { (8 * (i / 8) + g) as i8 });
            _mm256_broadcastsi128_si256(_mm_loadu_si128(m.as_ptr() as *const __m128i))
        }));
        let m4 = _mm256_set1_epi8(0x0f);
        for grp in 0..groups {
            let (mut acc_s, mut acc_m) = (_mm_setzero_ps(), _mm_setzero_ps());
            for ib in 0..nb {
                let b = w.add((grp * nb + ib) * 4 * Q4_K_B);
                let mut l = 0;
                while pf > 0 && l < 4 * Q4_K_B {
                    _mm_prefetch::<_MM_HINT_T0>(b.wrapping_add(pf + l) as *const i8);
                    l += 64;
                }
                let y = a.add(ib * Q8_K_B + 4);
                let sm01 = avx2::scales_mins_k4_x2(b.add(16), b.add(28));
                let sm23 = avx2::scales_mins_k4_x2(b.add(40), b.add(52));
                let (lo_rows, hi_rows) = (_mm256_permute2x128_si256::<0x20>(sm01, sm23), _mm256_permute2x128_si256::<0x31>(sm01, sm23));
                // halves: [scales of rows 0, 1 | rows 2, 3], the same for the mins
                let sc = _mm256_unpacklo_epi64(lo_rows, hi_rows);
                let mn = _mm256_unpackhi_epi64(lo_rows, hi_rows);
                let mut sumi = _mm256_setzero_si256();
                for c in 0..4 {
                    let mut pl = _mm256_setzero_si256();
                    let mut ph = _mm256_setzero_si256();
                    for k in 0..4 {
                        let x = _mm256_loadu_si256(b.add(64 + (4 * c + k) * 32) as *const __m256i);
                        let yl = _mm256_set1_epi64x(std::ptr::read_unaligned(y.add(64 * c + 8 * k) as *const i64));
                        let yh = _mm256_set1_epi64x(std::ptr::read_unaligned(y.add(64 * c + 32 + 8 * k) as *const i64));
                        pl = _mm256_add_epi16(pl, _mm256_maddubs_epi16(_mm256_and_si256(x, m4), yl));
                        ph = _mm256_add_epi16(ph, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16::<4>(x), m4), yh));
                    }
                    sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(pl, _mm256_shuffle_epi8(sc, masks[2 * c])));
                    sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(ph, _mm256_shuffle_epi8(sc, masks[2 * c + 1])));
                }
                // [isum of rows 0, 1, 2, 3]
                let h = _mm256_hadd_epi32(sumi, sumi);
                let isum = _mm_unpacklo_epi64(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
                // [imin of rows 0, 1, 2, 3]
                let g8 = _mm256_broadcastsi128_si256(_mm_loadu_si128(gs.add(8 * ib) as *const __m128i));
                let p01 = _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm256_castsi256_si128(mn)), g8);
                let p23 = _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm256_extracti128_si256(mn, 1)), g8);
                let x = _mm256_hadd_epi32(p01, p23);
                let x = _mm256_hadd_epi32(x, x);
                let imin = _mm_unpacklo_epi32(_mm256_castsi256_si128(x), _mm256_extracti128_si256(x, 1));
                // the reference's per-row FMAs, four rows per instruction
                let dd = _mm256_cvtph_ps(_mm_loadu_si128(b as *const __m128i));
                let yd = _mm_set1_ps(std::ptr::read_unaligned(a.add(ib * Q8_K_B) as *const f32));
                acc_s = _mm_fmadd_ps(_mm_cvtepi32_ps(isum), _mm_mul_ps(_mm256_castps256_ps128(dd), yd), acc_s);
                acc_m = _mm_fmadd_ps(_mm_cvtepi32_ps(imin), _mm_mul_ps(_mm256_extractf128_ps(dd, 1), yd), acc_m);
            }
            _mm_storeu_ps(out.add(4 * grp), _mm_sub_ps(acc_s, acc_m));
        }
    }
}

#[cfg(target_arch = "x86_64")]
fn main() {
    if !is_x86_feature_detected!("avx2") || !is_x86_feature_detected!("fma") || !is_x86_feature_detected!("f16c") {
        println!("interleave: no AVX2 here");
        return;
    }
    let mut cols_list = Vec::new();
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "-c" => cols_list.push(it.next().unwrap().parse::<usize>().unwrap()),
            "--bench" => {}
            other => panic!("unknown argument {other}"),
        }
    }
    if cols_list.is_empty() {
        cols_list = vec![1536, 8960];
    }
    // PF=BYTES: the interleaved kernel prefetches its weights that far ahead; by default none
    // (measured faster from DRAM than 4, 8 or 16 KB ahead: 27 against 23-26 GB/s, one thread)
    let pf: usize = std::env::var("PF").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
    let pool = ThreadPool::new(1).unwrap();
    println!("Q4_K decode, one thread, {:?} level for the row kernels: interleaved 4 rows vs the file's rows", deepseek::kernels::simd::level());
    for cols in cols_list {
        let nb = cols / QK_K;
        let rb = GgmlType::Q4K.row_bytes(cols).unwrap();
        let x: Vec<f32> = (0..cols).map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5).collect();
        let mut act = vec![0u8; activation_bytes(GgmlType::Q4K, cols, 1)];
        quantize_activations(&pool, GgmlType::Q4K, &x, cols, 1, &mut act);
        let gs = group_sums(&act, nb);
        for (label, bytes) in [("L2", 512usize << 10), ("DRAM", 512 << 20)] {
            let rows = bytes / rb / 16 * 16;
            let data = random_rows(GgmlType::Q4K, rows, cols);
            let r4 = interleave(&data, rows, nb);
            let mut out = vec![0f32; rows];
            // SAFETY: rows / 4 groups of nb interleaved blocks; nb activation blocks; AVX2 checked.
            unsafe { gemv_r4(nb, rows / 4, r4.as_ptr(), act.as_ptr(), gs.as_ptr(), out.as_mut_ptr(), pf) };
            for r in 0..16.min(rows) {
                let want = quant::vec_dot_repacked(GgmlType::Q4K, cols, &data[r * rb..(r + 1) * rb], &act, false);
                assert_eq!(out[r].to_bits(), want.to_bits(), "row {r}: {} vs {want}", out[r]);
            }
            let w = WeightMatrix { ty: GgmlType::Q4K, rows, cols, data: &data, order: deepseek::kernels::simd::SumOrder::Reference, repacked: quant::Repacked::MulMatId, layout: deepseek::kernels::matmul::Layout::Rows };
            let mut out2 = vec![0f32; rows];
            matmul(&pool, &w, &act, 1, &mut out2);
            assert_eq!(out.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), out2.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
            let reps = (1usize << 31) / (rows * rb) + 2;
            let mut best = [f64::INFINITY; 2];
            for _ in 0..3 {
                let t = cpu_seconds();
                for _ in 0..reps {
                    matmul(&pool, &w, &act, 1, &mut out2);
                }
                best[0] = best[0].min((cpu_seconds() - t) / reps as f64);
                let t = cpu_seconds();
                for _ in 0..reps {
                    // SAFETY: as above.
                    unsafe { gemv_r4(nb, rows / 4, r4.as_ptr(), act.as_ptr(), gs.as_ptr(), out.as_mut_ptr(), pf) };
                }
                best[1] = best[1].min((cpu_seconds() - t) / reps as f64);
            }
            let gbs = |dt: f64| (rows * rb) as f64 / dt / 1e9;
            println!("cols {cols:>5} {label:>4}: rows {:6.1} GB/s  interleaved {:6.1} GB/s  ({:.2}x)", gbs(best[0]), gbs(best[1]), best[0] / best[1]);
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn main() {
    println!("interleave: x86_64 only");
}
