//! Q4_K decode (one activation row, the repacked GEMV's order) on weights interleaved four
//! rows at a time (`quant::interleave`, the layout the model repacks to at load when
//! `use_extra_bufts`, as ik_llama.cpp's `-rtr` does) with the library's kernel
//! (`avx2::gemv_q4_k_r4`), against the one-row kernels of the running level on the file's
//! layout: one thread, in L2 and streamed from DRAM. The measurement behind issue 20's repack
//! decision (1.46–1.52× in L2, 1.30–1.54× from DRAM at AVX2 on Zen 4). Every row's result is
//! checked bit for bit against `quant::vec_dot_repacked` and `matmul`.
//!
//! Usage: cargo bench --bench interleave -- [-c COLS ...] (default 1536 8960: the 1.5B model's)

#![allow(clippy::missing_safety_doc)]

#[path = "common.rs"]
mod common;
use common::{cpu_seconds, random_rows};
#[cfg(target_arch = "x86_64")]
use deepseek::kernels::simd::avx2;
use deepseek::kernels::matmul::{activation_bytes, matmul, quantize_activations, WeightMatrix};
use deepseek::quant::{self, GgmlType};
use deepseek::threads::ThreadPool;

const QK_K: usize = 256;

/// The library's interleaved decode kernel over `groups` groups at `w` (`nb` blocks each)
/// against the activation row prepared at `prep`.
#[cfg(target_arch = "x86_64")]
fn gemv_r4(nb: usize, groups: usize, w: &[u8], prep: &[u8], out: &mut [f32]) {
    let gb = 4 * nb * 144;
    assert!(w.len() >= groups * gb && out.len() >= 4 * groups);
    for g in 0..groups {
        // SAFETY: group g lies inside w; prep holds a prepared row of nb blocks (64-byte
        // aligned); 4 outputs at out[4g..]; main checked AVX2, FMA and F16C.
        unsafe { avx2::gemv_q4_k_r4(nb, w.as_ptr().add(g * gb), 0, prep.as_ptr(), out.as_mut_ptr().add(4 * g)) };
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
    let pool = ThreadPool::new(1).unwrap();
    println!("Q4_K decode, one thread, {:?} level for the row kernels: interleaved 4 rows vs the file's rows", deepseek::kernels::simd::level());
    for cols in cols_list {
        let nb = cols / QK_K;
        let rb = GgmlType::Q4K.row_bytes(cols).unwrap();
        let x: Vec<f32> = (0..cols).map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5).collect();
        let mut act = vec![0u8; activation_bytes(GgmlType::Q4K, cols, 1)];
        quantize_activations(&pool, GgmlType::Q4K, &x, cols, 1, &mut act);
        // the prepared row, 64-byte aligned (u64 storage, offset to a 64-byte boundary)
        let mut store = vec![0u64; avx2::krow_bytes(nb) / 8 + 8];
        let off = (64 - store.as_ptr() as usize % 64) % 64 / 8;
        let prep = unsafe { std::slice::from_raw_parts_mut(store[off..].as_mut_ptr() as *mut u8, avx2::krow_bytes(nb)) };
        // SAFETY: act holds nb Q8_K blocks; prep is krow_bytes(nb) long and 64-byte aligned; AVX2 checked.
        unsafe { avx2::prep_q8_k_row(nb, act.as_ptr(), prep.as_mut_ptr()) };
        for (label, bytes) in [("L2", 512usize << 10), ("DRAM", 512 << 20)] {
            let rows = bytes / rb / 16 * 16;
            let data = random_rows(GgmlType::Q4K, rows, cols);
            let mut r4 = vec![0u8; data.len()];
            quant::interleave::interleave_q4_k(&data, rows, cols, &mut r4);
            let mut out = vec![0f32; rows];
            gemv_r4(nb, rows / 4, &r4, prep, &mut out);
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
                    gemv_r4(nb, rows / 4, &r4, prep, &mut out);
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
