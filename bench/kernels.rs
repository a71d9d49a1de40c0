//! Matrix-vector throughput per weight type: the decode path's `matmul` with one activation row,
//! on a matrix that stays in L2 (compute-bound) and on one far larger than the caches (streams
//! from DRAM), so kernel cost and memory bandwidth can be told apart.
//!
//! Usage: cargo bench --bench kernels -- [-t THREADS] [-n ACT_ROWS] [-c COLS (2048)] [--fast] [--experts] [TYPE ...]
//!        (--fast: the dense recipes' prefill order; default the reference's, as the MoE recipes;
//!        --experts: the matrix multiplied as an expert stack, `quant::Repacked::of(.., true)`;
//!        --interleaved: a Q4_K matrix in the model's interleaved layout, as `use_extra_bufts`
//!        loads it, `quant::interleave`)
//!        cargo bench --bench kernels -- attention   (decode attention, one thread: ns per cell
//!        for a GQA group of the 0.5B/1.5B models and for MLA's 16 heads, at 512 and 4096 cells)
//! Prints GB/s of weight bytes and ns per weight row, by CPU time (the machine may be shared:
//! time spent descheduled is not counted) divided by the thread count.

#[path = "common.rs"]
mod common;
use common::{cpu_seconds, random_rows};
use deepseek::kernels::matmul::{activation_bytes, matmul, quantize_activations, WeightMatrix};
use deepseek::quant::GgmlType;
use deepseek::threads::ThreadPool;



fn main() {
    let (mut threads, mut n_act, mut cols) = (1usize, 1usize, 2048usize);
    let mut order = deepseek::kernels::simd::SumOrder::Reference;
    let (mut experts, mut interleaved) = (false, false);
    let mut types = Vec::new();
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "-t" => threads = it.next().unwrap().parse().unwrap(),
            "-n" => n_act = it.next().unwrap().parse().unwrap(),
            "-c" => cols = it.next().unwrap().parse().unwrap(),
            "--fast" => order = deepseek::kernels::simd::SumOrder::Fast,
            "--experts" => experts = true,
            "--interleaved" => interleaved = true,
            "--bench" => {}
            name => types.push(name.to_string()),
        }
    }
    if types.iter().any(|t| t == "attention") {
        attention();
        return;
    }
    if types.is_empty() {
        types = ["q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q4_K", "q5_K", "q6_K", "f16"].map(String::from).to_vec();
        // the IQ, ternary, FP4 and 1/2-bit types
        types.extend(
            ["iq4_xs", "iq2_xxs", "iq1_s", "iq3_xxs", "iq4_nl", "mxfp4", "iq1_m", "iq2_xs", "iq2_s", "iq3_s", "tq1_0", "tq2_0", "nvfp4", "q1_0", "q2_0"]
                .map(String::from),
        );
    }
    let pool = ThreadPool::new(threads).unwrap();
    println!("kernels {:?}, {threads} thread(s), {n_act} activation row(s), {order:?} order{}{}", deepseek::kernels::simd::level(), if experts { ", expert stacks" } else { "" }, if interleaved { ", Q4_K interleaved" } else { "" });
    for name in types {
        let ty = (0..64u32).filter_map(GgmlType::from_u32).find(|t| t.name().eq_ignore_ascii_case(&name)).expect("type name");
        let rb = ty.row_bytes(cols).unwrap();
        let mut line = format!("{:>7}", ty.name());
        for (label, bytes) in [("L2", 512 << 10), ("DRAM", 512 << 20)] {
            // (a multiple of 16: whole panels, and an expert stack as upstream repacks it)
            let rows = bytes / rb / 16 * 16;
            let mut data = random_rows(ty, rows, cols);
            let mut layout = deepseek::kernels::matmul::Layout::Rows;
            if interleaved && deepseek::quant::interleave::can_interleave(ty, rows) {
                let mut to = vec![0u8; data.len()];
                deepseek::quant::interleave::interleave_q4_k(&data, rows, cols, &mut to);
                (data, layout) = (to, deepseek::kernels::matmul::Layout::Interleaved4);
            }
            let w = WeightMatrix { ty, rows, cols, data: &data, order, repacked: deepseek::quant::Repacked::of(ty, rows, experts), layout };
            let x: Vec<f32> = (0..cols * n_act).map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5).collect();
            let mut act = vec![0u8; activation_bytes(ty, cols, n_act)];
            quantize_activations(&pool, ty, &x, cols, n_act, &mut act);
            let mut out = vec![0f32; rows * n_act];
            let reps = (1usize << 31) / (rows * rb) + 2;
            matmul(&pool, &w, &act, n_act, &mut out);
            let t = cpu_seconds();
            for _ in 0..reps {
                matmul(&pool, &w, &act, n_act, &mut out);
            }
            let dt = (cpu_seconds() - t) / threads as f64 / reps as f64;
            line += &format!("  {label}: {:6.1} GB/s {:7.1} ns/row", (rows * rb) as f64 / dt / 1e9, dt * 1e9 / rows as f64);
        }
        println!("{line}");
    }
}

/// Decode attention: one tile of `rows` query rows (the heads sharing a K/V head) over `n`
/// cached F16 cells, CPU ns per cell (all rows).
fn attention() {
    use deepseek::kernels::attention::{Accumulator, TileScratch};
    println!("attention {:?}, one thread, CPU ns per cell for the whole tile", deepseek::kernels::simd::level());
    for (label, rows, dk, dv, mla, acc) in [("GQA 7x64 (0.5B) f32", 7, 64, 64, false, Accumulator::F32), ("GQA 6x128 (1.5B) f32", 6, 128, 128, false, Accumulator::F32), ("GQA 7x64 f16", 7, 64, 64, false, Accumulator::F16), ("MLA 16x576/512 f16", 16, 576, 512, true, Accumulator::F16)] {
        let mut line = format!("{label:>22}");
        for n in [512usize, 4096] {
            let mut seed = 0x2545_f491_4f6c_dd1du64;
            let mut rnd = || {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                ((seed >> 40) as f32 / (1u64 << 24) as f32) - 0.5
            };
            // F16 cells as the cache holds them: little-endian bytes
            let keys: Vec<u8> = (0..n * dk).flat_map(|_| deepseek::quant::f32_to_f16(rnd() * 2.0).to_le_bytes()).collect();
            let vals: Vec<u8> = (0..n * dv).flat_map(|_| deepseek::quant::f32_to_f16(rnd()).to_le_bytes()).collect();
            let qs: Vec<Vec<f32>> = (0..rows).map(|_| (0..dk).map(|_| rnd()).collect()).collect();
            let mut tile = TileScratch::new(rows, dk, dv, acc).unwrap();
            let mut out = vec![0f32; dv];
            let cells = || (0..n).map(|c| (c as i32, &keys[2 * c * dk..2 * (c + 1) * dk], if mla { &keys[2 * c * dk..2 * (c * dk + dv)] } else { &vals[2 * c * dv..2 * (c + 1) * dv] }));
            let mut best = f64::INFINITY;
            for _ in 0..5 {
                let reps = (2_000_000 / n).max(1);
                let t0 = cpu_seconds();
                for _ in 0..reps {
                    for (r, q) in qs.iter().enumerate() {
                        tile.set_query(r, q, n as i32);
                    }
                    tile.run(rows, 0.125, cells());
                    tile.output(0, &mut out);
                }
                best = best.min((cpu_seconds() - t0) / (reps * n) as f64 * 1e9);
            }
            line += &format!("  {n:>5} cells {best:7.2} ns");
            std::hint::black_box(&out);
        }
        println!("{line}");
    }
}
