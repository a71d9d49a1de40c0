//! kernels: the arithmetic of a forward pass, knowing nothing about models. Each function works
//! on caller-provided buffers and allocates nothing. Rounding points follow ggml's CPU backend.

use crate::threads;

pub mod attention;
pub mod indexer;
pub mod matmul;
pub mod norm;
pub mod rope;
pub mod simd;

/// ggml's vectorized `expf` of its AVX-512 build (`ggml_v_expf`, vec.h, b11312), one lane:
/// x = n·ln2 + b (ln2 in two parts), e^b by its degree-5 polynomial in fused multiply-adds,
/// scaled by 2^n with one rounding (`_mm512_scalef_ps`); |n| > 192 gives 0 or +inf.
pub fn ggml_v_expf(x: f32) -> f32 {
    let r = f32::from_bits(0x4b40_0000); // 0x1.8p23
    let z = x.mul_add(f32::from_bits(0x3fb8_aa3b), r); // 0x1.715476p+0
    let n = z - r;
    let b = (-n).mul_add(f32::from_bits(0x35bf_be8e), (-n).mul_add(f32::from_bits(0x3f31_7200), x)); // 0x1.7f7d1cp-20, 0x1.62e4p-1
    let u = b * b;
    let p = |c: u32| f32::from_bits(c);
    let j = p(0x3c07_2010).mul_add(b, p(0x3d2b_9f17)).mul_add(u, p(0x3e2a_af33).mul_add(b, p(0x3eff_fedb))).mul_add(u, p(0x3f7f_fff6).mul_add(b, 1.0));
    if n.abs() > 192.0 {
        return if n <= 0.0 { 0.0 } else { f32::INFINITY };
    }
    scale_pow2(j, n as i32)
}

/// j · 2^n with one rounding, as `_mm512_scalef_ps` gives it (|n| ≤ 192): the part of n that
/// keeps j normal exactly, then the rest.
#[inline(always)]
fn scale_pow2(j: f32, n: i32) -> f32 {
    let e1 = n.clamp(-126, 127);
    let pow2 = |e: i32| f32::from_bits(((e + 127) as u32) << 23);
    (j * pow2(n - e1)) * pow2(e1)
}

/// SiLU-gated unit in place over rows of `row` elements: gate[i] = silu(gate[i]) · up[i], as
/// ggml_swiglu computes it on AVX-512 (`ggml_vec_swiglu_f32` per row): 16 elements at a time
/// with [`ggml_v_expf`], the row's last `row % 16` with libm's `expf`; x / (1 + e^−x), then
/// times up. The same bits at every level.
pub fn swiglu(gate: &mut [f32], up: &[f32], row: usize) {
    swiglu_at(simd::level(), gate, up, row)
}

/// [`swiglu`] with the kernels of `level`.
fn swiglu_at(level: simd::Level, gate: &mut [f32], up: &[f32], row: usize) {
    let n = gate.len().min(up.len());
    assert!(row > 0 && n % row == 0, "swiglu: {n} elements in rows of {row}");
    #[cfg(target_arch = "x86_64")]
    if level >= simd::Level::Avx2 {
        // SAFETY: the AVX2/FMA/F16C level was detected.
        unsafe { simd::vmath::swiglu(&mut gate[..n], &up[..n], row) };
        return;
    }
    for (g, u) in gate[..n].chunks_exact_mut(row).zip(up.chunks_exact(row)) {
        let body = row & !15;
        for (g, &u) in g[..body].iter_mut().zip(&u[..body]) {
            *g = *g / (1.0 + ggml_v_expf(0.0 - *g)) * u;
        }
        for (g, &u) in g[body..].iter_mut().zip(&u[body..]) {
            *g = *g / (1.0 + (-*g).exp()) * u;
        }
    }
}

/// [`swiglu`] on the pool, in chunks of whole rows (about 8192 elements), when there are
/// several chunks (prefill).
pub fn swiglu_on(pool: &threads::ThreadPool, gate: &mut [f32], up: &[f32], row: usize) {
    on_row_chunks(pool, gate, up, row, &|g, u| swiglu(g, u, row));
}

/// ggml_swiglu_clamp (DeepSeek V4's experts; `limit` > 0) in place: gate[i] = g / (1 + e^−g) · u
/// with g = min(gate[i], limit), u = clamp(up[i], −limit, limit), element by element with
/// libm's `expf` as upstream's scalar kernel (ggml-cpu/ops.cpp, swiglu_clamp_f32) computes it
/// (not the vector exp of [`swiglu`]). On the pool in chunks of whole rows, as [`swiglu_on`].
pub fn swiglu_clamp_on(pool: &threads::ThreadPool, gate: &mut [f32], up: &[f32], row: usize, limit: f32) {
    on_row_chunks(pool, gate, up, row, &|g, u| swiglu_clamp(g, u, limit));
}

/// [`swiglu_clamp_on`]'s work on one chunk.
fn swiglu_clamp(gate: &mut [f32], up: &[f32], limit: f32) {
    for (g, &u) in gate.iter_mut().zip(up) {
        let x = g.min(limit);
        *g = x / (1.0 + (-x).exp()) * u.clamp(-limit, limit);
    }
}

/// `f(gate chunk, up chunk)` over chunks of whole rows (about 8192 elements) of the first
/// min(len) elements, on the pool when there are several chunks.
fn on_row_chunks(pool: &threads::ThreadPool, gate: &mut [f32], up: &[f32], row: usize, f: &(dyn Fn(&mut [f32], &[f32]) + Sync)) {
    let chunk = row * (8192 / row).max(1);
    let n = gate.len().min(up.len());
    if n < 2 * chunk {
        return f(&mut gate[..n], &up[..n]);
    }
    let out = threads::SharedOut::new(&mut gate[..n]);
    let next = std::sync::atomic::AtomicUsize::new(0);
    pool.run(&|_, _| loop {
        let start = chunk * next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if start >= n {
            break;
        }
        let end = (start + chunk).min(n);
        // SAFETY: the chunk is claimed by this thread only.
        f(unsafe { out.slice(start..end) }, &up[start..end]);
    });
}

/// a[i] += b[i]
pub fn add_assign(a: &mut [f32], b: &[f32]) {
    for (x, &y) in a.iter_mut().zip(b) {
        *x += y;
    }
}

/// The CPU features the kernels can use, detected once.
pub struct CpuFeatures {
    pub avx2: bool,
    pub fma: bool,
    pub avx512f: bool,
    pub avx512bw: bool,
    pub avx512vl: bool,
    pub avx512vnni: bool,
    pub f16c: bool,
    /// Galois-field byte transforms (`gf2p8affineqb`): one instruction unpacks a nibble.
    pub gfni: bool,
}

pub fn cpu_features() -> &'static CpuFeatures {
    static FEATURES: once_cell::sync::OnceCell<CpuFeatures> = once_cell::sync::OnceCell::new();
    FEATURES.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            CpuFeatures {
                avx2: is_x86_feature_detected!("avx2"),
                fma: is_x86_feature_detected!("fma"),
                avx512f: is_x86_feature_detected!("avx512f"),
                avx512bw: is_x86_feature_detected!("avx512bw"),
                avx512vl: is_x86_feature_detected!("avx512vl"),
                avx512vnni: is_x86_feature_detected!("avx512vnni"),
                f16c: is_x86_feature_detected!("f16c"),
                gfni: is_x86_feature_detected!("gfni"),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            CpuFeatures { avx2: false, fma: false, avx512f: false, avx512bw: false, avx512vl: false, avx512vnni: false, f16c: false, gfni: false }
        }
    })
}

/// A one-line description of the CPU features, NUL-terminated (llama_print_system_info).
pub fn system_info() -> &'static std::ffi::CStr {
    static INFO: once_cell::sync::OnceCell<std::ffi::CString> = once_cell::sync::OnceCell::new();
    INFO.get_or_init(|| {
        let f = cpu_features();
        let b = |x: bool| x as u8;
        let s = format!("CPU : AVX2 = {} | FMA = {} | F16C = {} | AVX512 = {} | AVX512_VNNI = {} | GFNI = {} | deepseek kernels = {:?} | ", b(f.avx2), b(f.fma), b(f.f16c), b(f.avx512f), b(f.avx512vnni), b(f.gfni), simd::level());
        std::ffi::CString::new(s).expect("no NUL")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::quant::test_util::upstream_op as f32s;

    /// llama.cpp's SWIGLU op output on its own inputs (tests/data/upstream_ops), bit for bit at
    /// every level.
    #[test]
    fn swiglu_is_llama_cpps() {
        for level in simd::tested_levels(&[simd::Level::Scalar, simd::Level::Avx2, simd::Level::Avx512]) {
            {
                for (g, u, o, row) in [("ffn_gate_0.f32", "ffn_up_0.f32", "ffn_swiglu_0.f32", 768), ("ffn_moe_gate_1.f32", "ffn_moe_up_1.f32", "ffn_moe_swiglu_1.f32", 256)] {
                    let (mut gate, up, want) = (f32s(g), f32s(u), f32s(o));
                    swiglu_at(level, &mut gate, &up, row);
                    for (i, (a, b)) in gate.iter().zip(&want).enumerate() {
                        assert_eq!(a.to_bits(), b.to_bits(), "{level:?} {o}[{i}]: {a} vs llama.cpp's {b}");
                    }
                }
            }
        }
    }

    /// llama.cpp's SWIGLU_CLAMP op (DeepSeek V4's routed experts, limit 2: 158 of the 2560 gates
    /// and 299 of the ups clamped) on its own inputs (tests/data/upstream_ops), bit for bit. The
    /// vector exp of [`swiglu`] after the clamp gives other bits on these inputs, which this
    /// asserts too so that the comparison can see a kernel swapped for it.
    #[test]
    fn swiglu_clamp_is_llama_cpps() {
        let (gate, up, want) = (f32s("dsv4_moe_gate_0.f32"), f32s("dsv4_moe_up_0.f32"), f32s("dsv4_moe_swiglu_clamp_0.f32"));
        let mut ours = gate.clone();
        swiglu_clamp(&mut ours, &up, 2.0);
        for (i, (a, b)) in ours.iter().zip(&want).enumerate() {
            assert_eq!(a.to_bits(), b.to_bits(), "[{i}] gate {} up {}: {a} vs llama.cpp's {b}", gate[i], up[i]);
        }
        let (mut g, mut u) = (gate.clone(), up.clone());
        g.iter_mut().for_each(|x| *x = x.min(2.0));
        u.iter_mut().for_each(|x| *x = x.clamp(-2.0, 2.0));
        swiglu_at(simd::Level::Scalar, &mut g, &u, 32);
        assert!(g.iter().zip(&want).any(|(a, b)| a.to_bits() != b.to_bits()), "the vector-exp SwiGLU gave the same bits: the test would not see it");
    }

    /// Every level gives the scalar port's bits, row tails (libm) included, over the range
    /// where e^−x goes from overflow to zero.
    #[test]
    fn swiglu_levels_agree() {
        let row = 203;
        let gate: Vec<f32> = (0..row * 3).map(|i| (i as f32 * 0.731).sin() * 120.0 + (i % 7) as f32 * 1e-3).collect();
        let up: Vec<f32> = (0..row * 3).map(|i| (i as f32 * 0.113).cos()).collect();
        let mut results = Vec::new();
        for level in simd::tested_levels(&[simd::Level::Scalar, simd::Level::Avx2, simd::Level::Avx512]) {
            let mut g = gate.clone();
            swiglu_at(level, &mut g, &up, row);
            results.push((level, g));
        }
        for (level, g) in &results[1..] {
            for (i, (a, b)) in g.iter().zip(&results[0].1).enumerate() {
                assert_eq!(a.to_bits(), b.to_bits(), "{level:?} [{i}] gate {}: {a} vs {b}", gate[i]);
            }
        }
        for x in [-200.0f32, -104.0, -88.0, -20.0, -1.0, -1e-8, 0.0, 1e-8, 1.0, 20.0, 88.0, 104.0, 200.0] {
            let e = ggml_v_expf(x);
            let exact = (x as f64).exp();
            assert!(e == 0.0 && exact < 1e-44 || e.is_infinite() && exact > 3.4e38 || ((e as f64 - exact) / exact).abs() < 4e-7, "v_expf({x}) = {e}, exact {exact}");
        }
    }
}
