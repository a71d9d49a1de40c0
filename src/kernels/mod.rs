//! kernels: the arithmetic of a forward pass, knowing nothing about models. Each function works
//! on caller-provided buffers and allocates nothing. Rounding points follow ggml's CPU backend.

use crate::threads;

pub mod attention;
pub mod indexer;
pub mod matmul;
pub mod norm;
pub mod rope;
pub mod simd;

/// SiLU-gated unit in place: gate[i] = silu(gate[i]) * up[i], as ggml_swiglu computes it (f32;
/// the SIMD levels' `exp` is within 2 ulp of libm's).
pub fn swiglu(gate: &mut [f32], up: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if simd::level() >= simd::Level::Avx2 {
        // SAFETY: the AVX2/FMA/F16C level was detected.
        unsafe { simd::vmath::swiglu(gate, up) };
        return;
    }
    for (g, &u) in gate.iter_mut().zip(up) {
        *g = *g / (1.0 + (-*g).exp()) * u;
    }
}

/// [`swiglu`] on the pool, in chunks of 8192 elements, when there are several chunks (prefill).
pub fn swiglu_on(pool: &threads::ThreadPool, gate: &mut [f32], up: &[f32]) {
    const CHUNK: usize = 8192;
    let n = gate.len().min(up.len());
    if n < 2 * CHUNK {
        return swiglu(gate, up);
    }
    let out = threads::SharedOut::new(&mut gate[..n]);
    let next = std::sync::atomic::AtomicUsize::new(0);
    pool.run(&|_, _| loop {
        let start = CHUNK * next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if start >= n {
            break;
        }
        let end = (start + CHUNK).min(n);
        // SAFETY: the chunk is claimed by this thread only.
        swiglu(unsafe { out.slice(start..end) }, &up[start..end]);
    });
}

/// The clamp of ggml_swiglu_clamp before its SiLU-gated unit: gate[i] = min(gate[i], limit),
/// up[i] = clamp(up[i], −limit, limit) (DeepSeek V4's experts; `limit` > 0).
pub fn swiglu_clamp_inputs(gate: &mut [f32], up: &mut [f32], limit: f32) {
    gate.iter_mut().for_each(|g| *g = g.min(limit));
    up.iter_mut().for_each(|u| *u = u.clamp(-limit, limit));
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
