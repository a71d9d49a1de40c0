//! SIMD kernels, chosen once at start-up from the CPU's features (`crate::kernels::cpu_features`).
//!
//! Levels: AVX-512 (F, BW, VL, VNNI) on top of AVX2; AVX2 + FMA + F16C (x86-64); else none
//! (the scalar reference in `crate::quant` is used). The AVX-512 level replaces the kernels it
//! has and keeps the AVX2 ones for the rest. `DEEPSEEK_KERNELS=scalar` (or `avx2`) caps the
//! level, so every level can be tested on one machine. Room is left for NEON tables.

#[cfg(target_arch = "x86_64")]
pub mod attn;
#[cfg(target_arch = "x86_64")]
pub mod avx2;
#[cfg(target_arch = "x86_64")]
pub mod avx512;
#[cfg(target_arch = "x86_64")]
pub mod tiled;
#[cfg(target_arch = "x86_64")]
pub mod vmath;

use crate::quant::GgmlType;

/// One weight row (`nb` blocks at `w`) against `R` activation rows (`a + i * a_stride` bytes),
/// results to `out + i * out_stride` floats. `R` is the index in a [`DotFns`] table plus one.
///
/// # Safety
/// The pointers must cover the blocks described, and the kernel's CPU features must be present
/// (guaranteed for the tables this module hands out).
pub type DotFn = unsafe fn(nb: usize, w: *const u8, a: *const u8, a_stride: usize, out: *mut f32, out_stride: usize);

/// Kernels for 1 to 8 activation rows per weight row.
pub type DotFns = [DotFn; 8];

/// Unpacks a panel's weight rows (`w + j * w_stride`, `nb` blocks) into `nb * block_bytes`
/// bytes (64-byte aligned) of the panel layout of its [`PanelFns`].
///
/// # Safety
/// The pointers must cover what is described; the CPU features must be present.
pub type UnpackFn = unsafe fn(nb: usize, w: *const u8, w_stride: usize, panel: *mut u8);

/// An unpacked panel of weight rows against `R` activation rows with their per-block
/// [`ActAux`] (`aux + i * nb`); result (i, j) to `out + i * out_stride + j`. Sums in a
/// different order from the reference (used for several activation rows only).
///
/// # Safety
/// As [`DotFn`]; `aux` must hold `R * nb` entries filled by [`fill_act_aux`] for the same
/// activations, and the panel must come from the matching [`UnpackFn`].
pub type PanelFn = unsafe fn(nb: usize, panel: *const u8, a: *const u8, a_stride: usize, aux: *const ActAux, out: *mut f32, out_stride: usize);

/// The panel (prefill) kernels of a weight type: `rows` weight rows are unpacked once into
/// `block_bytes` per block, then multiplied by 1 to 8 activation rows per call. They are used
/// from `min_act_rows` activation rows on: below that the type's per-row kernels are faster
/// (K-quants, whose unpacking decodes scales, need two tiles of activations to pay it back;
/// measured with 8-sequence batched decode).
pub struct PanelFns {
    pub rows: usize,
    pub min_act_rows: usize,
    pub block_bytes: usize,
    pub unpack: UnpackFn,
    pub gemm: [PanelFn; 8],
}

/// Per activation block data the panel kernels need: the scale as f32, `offset * sum(q)` for
/// weights whose quants are taken unsigned (Q4_0: 8, Q5_0: 16, Q8_0: 128) over the block and
/// over each group of 4 quants (the reference's 32-bit lanes), and Q8_1's `s` as f32.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ActAux {
    pub d: f32,
    pub corr: i32,
    pub s: f32,
    pub corr_g: [i32; 8],
}

/// Whether the panel kernels of weight type `ty` take per-block [`ActAux`] data
/// ([`fill_act_aux`] fills it for these types only).
pub fn panel_takes_aux(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 | GgmlType::IQ4_NL | GgmlType::Q4_1 | GgmlType::Q5_1)
}

/// Per-block activation data for the panel kernels of weight type `ty` (`act` holds whole
/// blocks of `ty.vec_dot_type()`, Q8_0 or Q8_1; `aux` one entry per block; nothing for
/// K-quants).
pub fn fill_act_aux(ty: GgmlType, act: &[u8], aux: &mut [ActAux]) {
    let (q8_1, offset) = match ty {
        GgmlType::Q4_0 => (false, 8),
        GgmlType::Q5_0 => (false, 16),
        GgmlType::Q8_0 | GgmlType::IQ4_NL => (false, 128),
        GgmlType::Q4_1 | GgmlType::Q5_1 => (true, 0),
        // the K-quant panels read what they need from the Q8_K blocks
        _ => return,
    };
    let ab = ty.vec_dot_type().block_bytes();
    for (x, b) in aux.iter_mut().zip(act.chunks_exact(ab)) {
        let q = &b[ab - 32..];
        let sum: i32 = q.iter().map(|&v| v as i8 as i32).sum();
        x.d = crate::quant::f16_to_f32(u16::from_le_bytes([b[0], b[1]]));
        x.corr = offset * sum;
        for (g, c) in x.corr_g.iter_mut().enumerate() {
            *c = offset * q[4 * g..4 * g + 4].iter().map(|&v| v as i8 as i32).sum::<i32>();
        }
        x.s = if q8_1 { crate::quant::f16_to_f32(u16::from_le_bytes([b[2], b[3]])) } else { 0.0 };
    }
}

/// Quantizes one activation row; `dst.len()` must be the row's size in the target format.
///
/// # Safety
/// The kernel's CPU features must be present (guaranteed for what [`quantize_fn`] returns).
pub type QuantFn = unsafe fn(src: &[f32], dst: &mut [u8]);

/// The instruction-set level in use (ordered: a level includes the ones below it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Scalar,
    Avx2,
    Avx512,
}

/// The highest level this CPU supports.
pub fn supported_level() -> Level {
    let f = super::cpu_features();
    if !(cfg!(target_arch = "x86_64") && f.avx2 && f.fma && f.f16c) {
        Level::Scalar
    } else if f.avx512f && f.avx512bw && f.avx512vl && f.avx512vnni {
        Level::Avx512
    } else {
        Level::Avx2
    }
}

/// The level chosen at start-up (once): the highest the CPU supports, capped by
/// `DEEPSEEK_KERNELS` (`scalar` or `avx2`).
pub fn level() -> Level {
    static LEVEL: once_cell::sync::OnceCell<Level> = once_cell::sync::OnceCell::new();
    *LEVEL.get_or_init(|| {
        let cap = match std::env::var("DEEPSEEK_KERNELS").map(|v| v.to_ascii_lowercase()).as_deref() {
            Ok("scalar") => Level::Scalar,
            Ok("avx2") => Level::Avx2,
            _ => Level::Avx512,
        };
        supported_level().min(cap)
    })
}

macro_rules! table {
    ($m:ident, $f:ident) => {
        [
            $m::$f::<1> as DotFn,
            $m::$f::<2> as DotFn,
            $m::$f::<3> as DotFn,
            $m::$f::<4> as DotFn,
            $m::$f::<5> as DotFn,
            $m::$f::<6> as DotFn,
            $m::$f::<7> as DotFn,
            $m::$f::<8> as DotFn,
        ]
    };
}

/// The SIMD dot kernels for weights of type `ty` (against `ty.vec_dot_type()` activations),
/// or None when only the scalar reference handles it.
pub fn dot_fns(ty: GgmlType) -> Option<&'static DotFns> {
    dot_fns_at(level(), ty)
}

/// As [`dot_fns`] at a given level (None for the scalar level).
pub fn dot_fns_at(level: Level, ty: GgmlType) -> Option<&'static DotFns> {
    match level {
        Level::Scalar => None,
        #[cfg(target_arch = "x86_64")]
        Level::Avx512 => {
            static Q4_K: DotFns = table!(avx512, dot_q4_k);
            static Q5_K: DotFns = table!(avx512, dot_q5_k);
            static Q6_K: DotFns = table!(avx512, dot_q6_k);
            static IQ4_XS: DotFns = table!(avx512, dot_iq4_xs);
            match ty {
                GgmlType::IQ4_XS => Some(&IQ4_XS),
                GgmlType::Q4K => Some(&Q4_K),
                GgmlType::Q5K => Some(&Q5_K),
                GgmlType::Q6K => Some(&Q6_K),
                _ => dot_fns_at(Level::Avx2, ty),
            }
        }
        #[cfg(target_arch = "x86_64")]
        Level::Avx2 => {
            static Q4_0: DotFns = table!(avx2, dot_q4_0);
            static Q4_1: DotFns = table!(avx2, dot_q4_1);
            static Q5_0: DotFns = table!(avx2, dot_q5_0);
            static Q5_1: DotFns = table!(avx2, dot_q5_1);
            static Q8_0: DotFns = table!(avx2, dot_q8_0);
            static Q2_K: DotFns = table!(avx2, dot_q2_k);
            static Q3_K: DotFns = table!(avx2, dot_q3_k);
            static Q4_K: DotFns = table!(avx2, dot_q4_k);
            static Q5_K: DotFns = table!(avx2, dot_q5_k);
            static Q6_K: DotFns = table!(avx2, dot_q6_k);
            static F16: DotFns = table!(avx2, dot_f16);
            static F32: DotFns = table!(avx2, dot_f32);
            static BF16: DotFns = table!(avx2, dot_bf16);
            static IQ2_XXS: DotFns = table!(avx2, dot_iq2_xxs);
            static IQ2_XS: DotFns = table!(avx2, dot_iq2_xs);
            static IQ2_S: DotFns = table!(avx2, dot_iq2_s);
            static IQ3_XXS: DotFns = table!(avx2, dot_iq3_xxs);
            static IQ3_S: DotFns = table!(avx2, dot_iq3_s);
            static IQ1_S: DotFns = table!(avx2, dot_iq1_s);
            static IQ4_XS: DotFns = table!(avx2, dot_iq4_xs);
            static IQ4_NL: DotFns = table!(avx2, dot_iq4_nl);
            static MXFP4: DotFns = table!(avx2, dot_mxfp4);
            static IQ1_M: DotFns = table!(avx2, dot_iq1_m);
            static TQ1_0: DotFns = table!(avx2, dot_tq1_0);
            static TQ2_0: DotFns = table!(avx2, dot_tq2_0);
            static NVFP4: DotFns = table!(avx2, dot_nvfp4);
            static Q1_0: DotFns = table!(avx2, dot_q1_0);
            static Q2_0: DotFns = table!(avx2, dot_q2_0);
            match ty {
                GgmlType::IQ1_M => Some(&IQ1_M),
                GgmlType::TQ1_0 => Some(&TQ1_0),
                GgmlType::TQ2_0 => Some(&TQ2_0),
                GgmlType::NVFP4 => Some(&NVFP4),
                GgmlType::Q1_0 => Some(&Q1_0),
                GgmlType::Q2_0 => Some(&Q2_0),
                GgmlType::IQ2_XXS => Some(&IQ2_XXS),
                GgmlType::IQ2_XS => Some(&IQ2_XS),
                GgmlType::IQ2_S => Some(&IQ2_S),
                GgmlType::IQ3_XXS => Some(&IQ3_XXS),
                GgmlType::IQ3_S => Some(&IQ3_S),
                GgmlType::IQ1_S => Some(&IQ1_S),
                GgmlType::IQ4_XS => Some(&IQ4_XS),
                GgmlType::IQ4_NL => Some(&IQ4_NL),
                GgmlType::MXFP4 => Some(&MXFP4),
                GgmlType::Q4_0 => Some(&Q4_0),
                GgmlType::Q4_1 => Some(&Q4_1),
                GgmlType::Q5_0 => Some(&Q5_0),
                GgmlType::Q5_1 => Some(&Q5_1),
                GgmlType::Q8_0 => Some(&Q8_0),
                GgmlType::Q2K => Some(&Q2_K),
                GgmlType::Q3K => Some(&Q3_K),
                GgmlType::Q4K => Some(&Q4_K),
                GgmlType::Q5K => Some(&Q5_K),
                GgmlType::Q6K => Some(&Q6_K),
                GgmlType::F16 => Some(&F16),
                GgmlType::F32 => Some(&F32),
                GgmlType::BF16 => Some(&BF16),
                _ => None,
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        Level::Avx2 | Level::Avx512 => None,
    }
}

/// The SIMD dot kernels for a several-row product of a matrix of type `ty` that upstream hands
/// to llamafile's tinyBLAS in another order than `vec_dot`'s (`quant::Repacked::Sgemm`).
pub fn dot_fns_sgemm(ty: GgmlType) -> Option<&'static DotFns> {
    dot_fns_sgemm_at(level(), ty)
}

/// The per-row kernels in llamafile tinyBLAS's order (`quant::vec_dot_sgemm`) for the types of
/// `quant::sgemm_order`, at a given level (the AVX2 kernels serve the AVX-512 level too).
pub fn dot_fns_sgemm_at(level: Level, ty: GgmlType) -> Option<&'static DotFns> {
    match level {
        Level::Scalar => None,
        #[cfg(target_arch = "x86_64")]
        Level::Avx2 | Level::Avx512 => {
            static IQ4_NL: DotFns = table!(avx2, dot_iq4_nl_sgemm);
            match ty {
                GgmlType::IQ4_NL => Some(&IQ4_NL),
                _ => None,
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        Level::Avx2 | Level::Avx512 => None,
    }
}

/// The per-row kernels in the order of llama.cpp's tiled matmul (`quant::vec_dot_tiled`) for the
/// types of `quant::tiled_order`, or None when only the scalar reference handles it.
pub fn dot_fns_tiled(ty: GgmlType) -> Option<&'static DotFns> {
    dot_fns_tiled_at(level(), ty)
}

/// As [`dot_fns_tiled`] at a given level.
pub fn dot_fns_tiled_at(level: Level, ty: GgmlType) -> Option<&'static DotFns> {
    match level {
        Level::Scalar => None,
        #[cfg(target_arch = "x86_64")]
        Level::Avx2 | Level::Avx512 => {
            static Q4_K: DotFns = table!(avx2, dot_q4_k_tiled);
            static Q5_K: DotFns = table!(avx2, dot_q5_k_tiled);
            static Q6_K: DotFns = table!(avx2, dot_q6_k_tiled);
            static IQ2_XXS: DotFns = table!(avx2, dot_iq2_xxs_tiled);
            static IQ2_XS: DotFns = table!(avx2, dot_iq2_xs_tiled);
            static IQ2_S: DotFns = table!(avx2, dot_iq2_s_tiled);
            static IQ3_XXS: DotFns = table!(avx2, dot_iq3_xxs_tiled);
            static IQ3_S: DotFns = table!(avx2, dot_iq3_s_tiled);
            static IQ4_XS: DotFns = table!(avx2, dot_iq4_xs_tiled);
            static IQ1_S: DotFns = table!(avx2, dot_iq1_s_tiled);
            match ty {
                GgmlType::Q4K => Some(&Q4_K),
                GgmlType::Q5K => Some(&Q5_K),
                GgmlType::Q6K => Some(&Q6_K),
                GgmlType::IQ2_XXS => Some(&IQ2_XXS),
                GgmlType::IQ2_XS => Some(&IQ2_XS),
                GgmlType::IQ2_S => Some(&IQ2_S),
                GgmlType::IQ3_XXS => Some(&IQ3_XXS),
                GgmlType::IQ3_S => Some(&IQ3_S),
                GgmlType::IQ4_XS => Some(&IQ4_XS),
                GgmlType::IQ1_S => Some(&IQ1_S),
                _ => None,
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        Level::Avx2 | Level::Avx512 => None,
    }
}

/// The batched kernels (on prepared activation rows) in the tiled matmul's order, for `ty`:
/// the AVX-512 level's (the AVX2 level takes the per-row kernels of [`dot_fns_tiled`]).
pub fn batch_fns_tiled(ty: GgmlType) -> Option<&'static BatchFns> {
    match level() {
        #[cfg(target_arch = "x86_64")]
        Level::Avx512 => {
            static Q4_K: BatchFns = BatchFns { prep: avx512::prep_q8_k as PrepFn, prep_bytes: avx512::kprep_bytes, rows: table!(avx512, dot_q4_k_tiled_prepped) };
            static Q5_K: BatchFns = BatchFns { prep: avx512::prep_q8_k as PrepFn, prep_bytes: avx512::kprep_bytes, rows: table!(avx512, dot_q5_k_tiled_prepped) };
            static Q6_K: BatchFns = BatchFns { prep: avx512::prep_q8_k as PrepFn, prep_bytes: avx512::kprep_bytes, rows: table!(avx512, dot_q6_k_tiled_prepped) };
            match ty {
                GgmlType::Q4K => Some(&Q4_K),
                GgmlType::Q5K => Some(&Q5_K),
                GgmlType::Q6K => Some(&Q6_K),
                _ => None,
            }
        }
        _ => None,
    }
}

/// The panels that sum in the tiled matmul's order (`quant::vec_dot_tiled`), for `ty`.
pub fn panel_fns_tiled(ty: GgmlType) -> Option<&'static PanelFns> {
    panel_fns_tiled_at(level(), ty)
}

macro_rules! panel {
    ($m:ident, $rows:expr, $u:ident, $f:ident) => {
        panel!($m, $rows, 2, $m::PANEL_BLOCK, $u, $f)
    };
    ($m:ident, $rows:expr, $min:expr, $bytes:expr, $u:ident, $f:ident) => {
        PanelFns {
            rows: $rows,
            min_act_rows: $min,
            block_bytes: $bytes,
            unpack: $m::$u as UnpackFn,
            gemm: [
                $m::$f::<1> as PanelFn,
                $m::$f::<2> as PanelFn,
                $m::$f::<3> as PanelFn,
                $m::$f::<4> as PanelFn,
                $m::$f::<5> as PanelFn,
                $m::$f::<6> as PanelFn,
                $m::$f::<7> as PanelFn,
                $m::$f::<8> as PanelFn,
            ],
        }
    };
}

macro_rules! tiled_panel {
    ($rows:expr, $bytes:expr, $u:ident, $g:ident, $ty:ident, $nsub:expr, $min:expr) => {
        PanelFns {
            rows: $rows,
            min_act_rows: 1,
            block_bytes: $bytes,
            unpack: tiled::$u::<{ GgmlType::$ty as u32 }> as UnpackFn,
            gemm: [
                tiled::$g::<1, $nsub, $min> as PanelFn,
                tiled::$g::<2, $nsub, $min> as PanelFn,
                tiled::$g::<3, $nsub, $min> as PanelFn,
                tiled::$g::<4, $nsub, $min> as PanelFn,
                tiled::$g::<5, $nsub, $min> as PanelFn,
                tiled::$g::<6, $nsub, $min> as PanelFn,
                tiled::$g::<7, $nsub, $min> as PanelFn,
                tiled::$g::<8, $nsub, $min> as PanelFn,
            ],
        }
    };
}

/// As [`panel_fns_tiled`] at a given level: one generic pair of kernels per level
/// (`simd::tiled`), exact, so bit for bit the reference.
pub fn panel_fns_tiled_at(level: Level, ty: GgmlType) -> Option<&'static PanelFns> {
    macro_rules! per_type {
        ($rows:expr, $bytes:expr, $u:ident, $g:ident) => {{
            static Q2K: PanelFns = tiled_panel!($rows, $bytes, $u, $g, Q2K, 16, true);
            static Q3K: PanelFns = tiled_panel!($rows, $bytes, $u, $g, Q3K, 16, false);
            static Q4K: PanelFns = tiled_panel!($rows, $bytes, $u, $g, Q4K, 8, true);
            static Q5K: PanelFns = tiled_panel!($rows, $bytes, $u, $g, Q5K, 8, true);
            static Q6K: PanelFns = tiled_panel!($rows, $bytes, $u, $g, Q6K, 16, false);
            static IQ4_XS: PanelFns = tiled_panel!($rows, $bytes, $u, $g, IQ4_XS, 8, false);
            static IQ2_XXS: PanelFns = tiled_panel!($rows, $bytes, $u, $g, IQ2_XXS, 8, false);
            static IQ2_XS: PanelFns = tiled_panel!($rows, $bytes, $u, $g, IQ2_XS, 16, false);
            static IQ2_S: PanelFns = tiled_panel!($rows, $bytes, $u, $g, IQ2_S, 16, false);
            static IQ3_XXS: PanelFns = tiled_panel!($rows, $bytes, $u, $g, IQ3_XXS, 8, false);
            static IQ3_S: PanelFns = tiled_panel!($rows, $bytes, $u, $g, IQ3_S, 8, false);
            static IQ1_S: PanelFns = tiled_panel!($rows, $bytes, $u, $g, IQ1_S, 8, false);
            static IQ1_M: PanelFns = tiled_panel!($rows, $bytes, $u, $g, IQ1_M, 16, false);
            match ty {
                GgmlType::Q2K => Some(&Q2K),
                GgmlType::Q3K => Some(&Q3K),
                GgmlType::Q4K => Some(&Q4K),
                GgmlType::Q5K => Some(&Q5K),
                GgmlType::Q6K => Some(&Q6K),
                GgmlType::IQ4_XS => Some(&IQ4_XS),
                GgmlType::IQ2_XXS => Some(&IQ2_XXS),
                GgmlType::IQ2_XS => Some(&IQ2_XS),
                GgmlType::IQ2_S => Some(&IQ2_S),
                GgmlType::IQ3_XXS => Some(&IQ3_XXS),
                GgmlType::IQ3_S => Some(&IQ3_S),
                GgmlType::IQ1_S => Some(&IQ1_S),
                GgmlType::IQ1_M => Some(&IQ1_M),
                _ => None,
            }
        }};
    }
    match level {
        Level::Scalar => None,
        // Q6_K: its own panel (the quants unsigned, the scales in the widening `madd`)
        #[cfg(target_arch = "x86_64")]
        Level::Avx2 if ty == GgmlType::Q6K => {
            static Q6K: PanelFns = panel!(tiled, 8, 8, tiled::Q6_BLOCK, unpack8_q6k, gemm8_q6k);
            Some(&Q6K)
        }
        #[cfg(target_arch = "x86_64")]
        Level::Avx2 => per_type!(8, tiled::P8_BLOCK, unpack8, gemm8),
        // Q4_K and Q5_K: their own panels (unpacked in registers), in the tiled order
        #[cfg(target_arch = "x86_64")]
        Level::Avx512 if ty == GgmlType::Q4K => {
            static Q4K: PanelFns = panel!(avx512, 16, 9, avx512::Q4K_PANEL_BLOCK, unpack16_q4_k, gemm16_q4_k_tiled);
            Some(&Q4K)
        }
        #[cfg(target_arch = "x86_64")]
        Level::Avx512 if ty == GgmlType::Q5K => {
            static Q5K: PanelFns = panel!(avx512, 16, 9, avx512::Q4K_PANEL_BLOCK, unpack16_q5_k, gemm16_q4_k_tiled);
            Some(&Q5K)
        }
        #[cfg(target_arch = "x86_64")]
        Level::Avx512 => per_type!(16, tiled::P16_BLOCK, unpack16, gemm16),
        #[cfg(not(target_arch = "x86_64"))]
        Level::Avx2 | Level::Avx512 => None,
    }
}

/// The SIMD dot kernels for a weight matrix of type `ty` that llama.cpp repacks
/// (`quant::repacked_order`), in the order of its repacked GEMM (`gemm`) or GEMV
/// (`quant::vec_dot_repacked`), or None when only the scalar reference handles it. The GEMM
/// order's (used for small tiles only: panels take the rest) are the AVX2 ones at AVX-512 too.
pub fn dot_fns_repacked(ty: GgmlType, gemm: bool) -> Option<&'static DotFns> {
    dot_fns_repacked_at(level(), ty, gemm)
}

/// As [`dot_fns_repacked`] at a given level.
pub fn dot_fns_repacked_at(level: Level, ty: GgmlType, gemm: bool) -> Option<&'static DotFns> {
    match level {
        Level::Scalar => None,
        #[cfg(target_arch = "x86_64")]
        Level::Avx512 if !gemm => {
            static Q4_K: DotFns = table!(avx512, dot_q4_k_repacked);
            match ty {
                GgmlType::Q4K => Some(&Q4_K),
                _ => None,
            }
        }
        #[cfg(target_arch = "x86_64")]
        Level::Avx2 | Level::Avx512 => {
            static Q4_K: DotFns = table!(avx2, dot_q4_k_repacked);
            static Q4_K_GEMM: DotFns = table!(avx2, dot_q4_k_repacked_gemm);
            match ty {
                GgmlType::Q4K => Some(if gemm { &Q4_K_GEMM } else { &Q4_K }),
                _ => None,
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        Level::Avx2 | Level::Avx512 => None,
    }
}

/// The batched kernels (activations prepared once) for a matrix of type `ty` that llama.cpp
/// repacks, in its repacked GEMV's order, or None.
pub fn batch_fns_repacked(ty: GgmlType) -> Option<&'static BatchFns> {
    batch_fns_repacked_at(level(), ty)
}

/// As [`batch_fns_repacked`] at a given level.
pub fn batch_fns_repacked_at(level: Level, ty: GgmlType) -> Option<&'static BatchFns> {
    match level {
        #[cfg(target_arch = "x86_64")]
        Level::Avx512 => {
            static Q4_K: BatchFns = BatchFns { prep: avx512::prep_q8_k as PrepFn, prep_bytes: avx512::kprep_bytes, rows: table!(avx512, dot_q4_k_repacked_prepped) };
            match ty {
                GgmlType::Q4K => Some(&Q4_K),
                _ => None,
            }
        }
        _ => None,
    }
}

/// How a product of several activation rows may sum. `Reference`: as llama.cpp b11312 does on
/// x86 wherever our reference is its order (its `vec_dot`, and tinyBLAS for Q8_0-family
/// batches, which sums alike), so a panel is used only if it is bit for bit the reference;
/// for the matrices upstream repacks at load in an order we follow (`quant::repacked_order`:
/// Q4_K) only panels bit for bit that order; for the other types upstream repacks (Q4_0,
/// IQ4_NL, MXFP4, Q2_K: its own 8×8 kernels' order, which the reference does not follow) any
/// panel. `Fast`: the fastest order
/// the panels have (within 1e-5 of the reference).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SumOrder {
    Reference,
    Fast,
}

/// A Q4_K/Q5_K block's 6-bit scales and mins (`get_scale_min_k4`) from its 12 scale bytes as
/// three little-endian words (upstream's kmask steps): (scales, mins), byte g of each being
/// group g's.
#[inline(always)]
pub(crate) fn k4_scales_mins(q: [u32; 3]) -> (u64, u64) {
    let s_lo = q[0] & 0x3f3f_3f3f;
    let s_hi = (q[2] & 0x0f0f_0f0f) | ((q[0] >> 6) & 0x0303_0303) << 4;
    let m_lo = q[1] & 0x3f3f_3f3f;
    let m_hi = ((q[2] >> 4) & 0x0f0f_0f0f) | ((q[1] >> 6) & 0x0303_0303) << 4;
    (s_lo as u64 | (s_hi as u64) << 32, m_lo as u64 | (m_hi as u64) << 32)
}

/// The types llama.cpp b11312 repacks into interleaved rows on x86 (`ggml_repack_get_optimal_
/// repack_type`) and multiplies in that layout's order.
fn upstream_repacks(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::Q4_0 | GgmlType::Q4K | GgmlType::IQ4_NL | GgmlType::MXFP4 | GgmlType::Q2K)
}

/// The panel kernels for `ty` (used for several activation rows) that sum in `order`, or None.
/// `repacked`: the matrix is one llama.cpp repacks (`quant::repacked_order`), whose order is
/// then the reference's.
pub fn panel_fns(ty: GgmlType, order: SumOrder, repacked: bool) -> Option<&'static PanelFns> {
    panel_fns_at(level(), ty, order, repacked)
}

/// Whether the panels of `ty` at `level` sum in the reference's order (`vec_dot`'s, or for
/// `repacked` matrices the GEMM order of `vec_dot_repacked`).
pub fn panel_is_exact(level: Level, ty: GgmlType, repacked: bool) -> bool {
    if repacked {
        level >= Level::Avx2 && ty == GgmlType::Q4K
    } else {
        level >= Level::Avx2 && matches!(ty, GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0)
    }
}

/// Whether the panels of `ty` at `level` sum in llamafile tinyBLAS's order
/// (`quant::vec_dot_sgemm`) for the types of `quant::sgemm_order`: the AVX-512 IQ4_NL panel
/// (`gemm16`) keeps tinyBLAS's eight 32-bit lanes in eight accumulators, one FMA per block with
/// `d_w · d_a`, and adds them as its `hsum`.
pub fn panel_is_sgemm_exact(level: Level, ty: GgmlType) -> bool {
    level == Level::Avx512 && ty == GgmlType::IQ4_NL
}

/// The panel kernels for an expert stack of type `ty` that llama.cpp repacks and multiplies in
/// its GEMV's order (`quant::Repacked::MulMatId`: every routed row as `quant::vec_dot_repacked`
/// without `gemm`), bit for bit that order, or None.
pub fn panel_fns_gemv(ty: GgmlType) -> Option<&'static PanelFns> {
    panel_fns_gemv_at(level(), ty)
}

/// As [`panel_fns_gemv`] at a given level. An expert's matrix takes them from 3 routed rows,
/// where they beat the batched per-row kernels (`cargo bench --bench kernels -- --experts -c
/// 7168 -n 3 q4_K`, Zen 4, ns per weight row in L2 / streamed from DRAM: 328 / 393 against
/// 354 / 433 at AVX-512, 364 / 465 against 384 / 599 at AVX2).
pub fn panel_fns_gemv_at(level: Level, ty: GgmlType) -> Option<&'static PanelFns> {
    match (level, ty) {
        #[cfg(target_arch = "x86_64")]
        (Level::Avx512, GgmlType::Q4K) => {
            static Q4_K: PanelFns = panel!(avx512, 16, 3, avx512::Q4K_PANEL_BLOCK, unpack16_q4_k, gemm16_q4_k_gemv);
            Some(&Q4_K)
        }
        #[cfg(target_arch = "x86_64")]
        (Level::Avx2, GgmlType::Q4K) => {
            static Q4_K: PanelFns = panel!(avx2, 8, 3, avx2::Q4K_PANEL8_BLOCK, unpack8_q4_k, gemm8_q4_k_gemv);
            Some(&Q4_K)
        }
        _ => None,
    }
}

/// As [`panel_fns`] at a given level.
pub fn panel_fns_at(level: Level, ty: GgmlType, order: SumOrder, repacked: bool) -> Option<&'static PanelFns> {
    let fns = panel_fns_any(level, ty, order);
    match order {
        SumOrder::Reference => fns.filter(|_| panel_is_exact(level, ty, repacked) || (upstream_repacks(ty) && ty != GgmlType::Q4K)),
        SumOrder::Fast => fns,
    }
}

fn panel_fns_any(level: Level, ty: GgmlType, order: SumOrder) -> Option<&'static PanelFns> {
    match level {
        Level::Scalar => None,
        #[cfg(target_arch = "x86_64")]
        Level::Avx512 => {
            static Q4_0: PanelFns = panel!(avx512, 16, unpack16_q4_0, gemm16);
            static Q5_0: PanelFns = panel!(avx512, 16, unpack16_q5_0, gemm16);
            static Q8_0: PanelFns = panel!(avx512, 16, unpack16_q8_0, gemm16);
            static Q4_0_FAST: PanelFns = panel!(avx512, 16, unpack16_q4_0, gemm16_fast);
            static Q5_0_FAST: PanelFns = panel!(avx512, 16, unpack16_q5_0, gemm16_fast);
            static Q8_0_FAST: PanelFns = panel!(avx512, 16, unpack16_q8_0, gemm16_fast);
            let fast = order == SumOrder::Fast;
            static IQ4_NL: PanelFns = panel!(avx512, 16, unpack16_iq4_nl, gemm16);
            static Q4_K: PanelFns = panel!(avx512, 16, 9, avx512::Q4K_PANEL_BLOCK, unpack16_q4_k, gemm16_q4_k);
            static Q5_K: PanelFns = panel!(avx512, 16, 9, avx512::Q4K_PANEL_BLOCK, unpack16_q5_k, gemm16_q4_k);
            static Q6_K: PanelFns = panel!(avx512, 16, 9, avx512::Q6K_PANEL_BLOCK, unpack16_q6_k, gemm16_q6_k);
            match ty {
                GgmlType::Q4K => Some(&Q4_K),
                GgmlType::Q5K => Some(&Q5_K),
                GgmlType::Q6K => Some(&Q6_K),
                GgmlType::Q4_0 => Some(if fast { &Q4_0_FAST } else { &Q4_0 }),
                GgmlType::Q5_0 => Some(if fast { &Q5_0_FAST } else { &Q5_0 }),
                GgmlType::Q8_0 => Some(if fast { &Q8_0_FAST } else { &Q8_0 }),
                GgmlType::IQ4_NL => Some(&IQ4_NL),
                _ => panel_fns_any(Level::Avx2, ty, order),
            }
        }
        #[cfg(target_arch = "x86_64")]
        Level::Avx2 => {
            macro_rules! g {
                ($u:ident, $f:ident) => {
                    panel!(avx2, 8, $u, $f)
                };
            }
            static Q4_0: PanelFns = g!(unpack8_q4_0, gemm8p_q8_0);
            static Q5_0: PanelFns = g!(unpack8_q5_0, gemm8p_q8_0);
            // the reference's order (`vec_dot`'s eight lanes), bit for bit; from 9 activation
            // rows: below, the prepared-row kernels (`BatchFns`, one weight row's unpack for up
            // to 8 activation rows) cost less than the transposing unpack (llvm-mca, 8 rows of
            // 8: Q5_0 170 against 200 cycles on znver3, 192 against 206 on icelake-server)
            static Q4_0_EXACT: PanelFns = panel!(avx2, 8, 9, avx2::PANEL_BLOCK, unpack8t_q4_0, gemm8t_q8_0);
            static Q5_0_EXACT: PanelFns = panel!(avx2, 8, 9, avx2::PANEL_BLOCK, unpack8t_q5_0, gemm8t_q8_0);
            static Q8_0_EXACT: PanelFns = panel!(avx2, 8, 9, avx2::PANEL8T_Q8_0_BLOCK, unpack8t_q8_0, gemm8t_q8_0_signed);
            let exact = order == SumOrder::Reference;
            static Q4_1: PanelFns = g!(unpack8_q4_1, gemm8p_q8_1);
            static Q5_1: PanelFns = g!(unpack8_q5_1, gemm8p_q8_1);
            // from 9 activation rows, as at AVX-512: unpacking decodes scales
            static Q4_K: PanelFns = panel!(avx2, 8, 9, avx2::Q4K_PANEL8_BLOCK, unpack8_q4_k, gemm8_q4_k);
            match ty {
                GgmlType::Q4K => Some(&Q4_K),
                GgmlType::Q4_0 => Some(if exact { &Q4_0_EXACT } else { &Q4_0 }),
                GgmlType::Q5_0 => Some(if exact { &Q5_0_EXACT } else { &Q5_0 }),
                GgmlType::Q8_0 => Some(&Q8_0_EXACT),
                GgmlType::Q4_1 => Some(&Q4_1),
                GgmlType::Q5_1 => Some(&Q5_1),
                _ => None,
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        Level::Avx2 | Level::Avx512 => None,
    }
}

/// Prepares one activation row (`nb` blocks of the weight type's `vec_dot_type` at `act`) for
/// the [`GemvFns`] kernels, into `prep_bytes(nb)` bytes at `prep` (64-byte aligned).
///
/// # Safety
/// The pointers must cover what is described; the CPU features must be present.
pub type PrepFn = unsafe fn(nb: usize, act: *const u8, prep: *mut u8);

/// Several weight rows (`w + j * w_stride`, `nb` blocks each) against one prepared activation
/// row; result j to `out + j`. Bit for bit the reference's `vec_dot` of each row.
///
/// # Safety
/// As [`PrepFn`]; `prep` must come from the matching prepare function for the same `nb`.
pub type GemvFn = unsafe fn(nb: usize, w: *const u8, w_stride: usize, prep: *const u8, out: *mut f32);

/// The decode (one activation row) kernels of a weight type on an activation row prepared once:
/// the preparation and kernels for 4 and 2 weight rows, and for one where the type has it (else
/// a last odd row goes to the type's [`DotFns`]).
pub struct GemvFns {
    pub prep: PrepFn,
    pub prep_bytes: fn(usize) -> usize,
    pub rows4: GemvFn,
    pub rows2: GemvFn,
    pub rows1: Option<GemvFn>,
}

/// The several-rows decode kernels for weights of type `ty`, or None.
pub fn gemv_fns(ty: GgmlType) -> Option<&'static GemvFns> {
    gemv_fns_at(level(), super::cpu_features().gfni, ty)
}

/// As [`gemv_fns`] at a given level, with or without the GFNI variants (where a type has one).
pub fn gemv_fns_at(level: Level, gfni: bool, ty: GgmlType) -> Option<&'static GemvFns> {
    match level {
        #[cfg(target_arch = "x86_64")]
        Level::Avx512 => {
            macro_rules! g {
                ($off:literal, $f:ident) => {
                    GemvFns {
                        prep: avx512::prep_q8_0::<$off> as PrepFn,
                        prep_bytes: avx512::prep_bytes,
                        rows4: avx512::$f::<2> as GemvFn,
                        rows2: avx512::$f::<1> as GemvFn,
                        rows1: None,
                    }
                };
            }
            static Q4_0: GemvFns = g!(8, gemv_q4_0);
            static Q5_0: GemvFns = g!(16, gemv_q5_0);
            static Q5_0_GFNI: GemvFns = g!(16, gemv_q5_0_gfni);
            static Q8_0: GemvFns = g!(128, gemv_q8_0);
            static IQ4_NL: GemvFns = g!(128, gemv_iq4_nl);
            static MXFP4: GemvFns = g!(128, gemv_mxfp4);
            // (Q4_K and Q5_K had kernels interleaving 4 and 2 rows: against one-row ones they
            // lost 17% of 1.5B generation when the machine's memory was contended, 3% when it
            // was not. These run their rows one after the other, each in one ascending stream.)
            macro_rules! k {
                ($f:ident) => {
                    GemvFns {
                        prep: avx512::prep_q8_k_row as PrepFn,
                        prep_bytes: avx512::krow_bytes,
                        rows4: avx512::$f::<4> as GemvFn,
                        rows2: avx512::$f::<2> as GemvFn,
                        rows1: Some(avx512::$f::<1> as GemvFn),
                    }
                };
            }
            static Q4_K: GemvFns = k!(gemv_q4_k);
            static Q5_K: GemvFns = k!(gemv_q5_k);
            match ty {
                GgmlType::Q4K => Some(&Q4_K),
                GgmlType::Q5K => Some(&Q5_K),
                GgmlType::Q4_0 => Some(&Q4_0),
                GgmlType::Q5_0 if gfni => Some(&Q5_0_GFNI),
                GgmlType::Q5_0 => Some(&Q5_0),
                GgmlType::Q8_0 => Some(&Q8_0),
                GgmlType::IQ4_NL => Some(&IQ4_NL),
                GgmlType::MXFP4 => Some(&MXFP4),
                _ => None,
            }
        }
        #[cfg(target_arch = "x86_64")]
        Level::Avx2 => {
            macro_rules! g {
                ($prep:expr, $bytes:ident, $f:ident) => {
                    GemvFns { prep: $prep as PrepFn, prep_bytes: avx2::$bytes, rows4: avx2::$f::<4> as GemvFn, rows2: avx2::$f::<2> as GemvFn, rows1: None }
                };
            }
            static Q4_0: GemvFns = g!(avx2::prep_q8_0_off::<8>, prep_bytes_q8_0_off, gemv_q4_0);
            static Q5_0: GemvFns = g!(avx2::prep_q8_0_off::<16>, prep_bytes_q8_0_off, gemv_q5_0);
            static Q8_0: GemvFns = g!(avx2::prep_q8_0, prep_bytes_q8_0, gemv_q8_0);
            match ty {
                GgmlType::Q4_0 => Some(&Q4_0),
                GgmlType::Q5_0 => Some(&Q5_0),
                GgmlType::Q8_0 => Some(&Q8_0),
                _ => None,
            }
        }
        _ => None,
    }
}

/// The decode kernels on a prepared activation row for a matrix of type `ty` that llama.cpp
/// repacks, in its repacked GEMV's order (`quant::vec_dot_repacked(.., false)`), or None.
pub fn gemv_fns_repacked(ty: GgmlType) -> Option<&'static GemvFns> {
    gemv_fns_repacked_at(level(), ty)
}

/// As [`gemv_fns_repacked`] at a given level.
pub fn gemv_fns_repacked_at(level: Level, ty: GgmlType) -> Option<&'static GemvFns> {
    // (each level's one-row Q4_K kernel on its own prepared row, rows one after the other)
    macro_rules! q4_k {
        ($m:ident) => {{
            static Q4_K: GemvFns = GemvFns {
                prep: $m::prep_q8_k_row as PrepFn,
                prep_bytes: $m::krow_bytes,
                rows4: $m::gemv_q4_k_repacked::<4> as GemvFn,
                rows2: $m::gemv_q4_k_repacked::<2> as GemvFn,
                rows1: Some($m::gemv_q4_k_repacked::<1> as GemvFn),
            };
            &Q4_K
        }};
    }
    match (level, ty) {
        #[cfg(target_arch = "x86_64")]
        (Level::Avx512, GgmlType::Q4K) => Some(q4_k!(avx512)),
        #[cfg(target_arch = "x86_64")]
        (Level::Avx2, GgmlType::Q4K) => Some(q4_k!(avx2)),
        _ => None,
    }
}

/// The decode kernel for a matrix of type `ty` whose rows are interleaved in groups of four
/// (`quant::interleave`), in the repacked GEMV's order: `rows4` takes one group (`w` at its
/// start); a matrix is interleaved at load only where this is Some, and only whole groups are
/// ever handed to it (`rows2` and `rows1` are not used).
pub fn gemv_fns_interleaved(ty: GgmlType) -> Option<&'static GemvFns> {
    gemv_fns_interleaved_at(level(), ty)
}

/// As [`gemv_fns_interleaved`] at a given level: the AVX2 kernel serves the AVX-512 level too
/// (measured faster there than the AVX-512 one-row kernel: 1.28–1.38× in L2, one thread, Zen 4).
pub fn gemv_fns_interleaved_at(level: Level, ty: GgmlType) -> Option<&'static GemvFns> {
    match (level, ty) {
        #[cfg(target_arch = "x86_64")]
        (Level::Avx2 | Level::Avx512, GgmlType::Q4K) => {
            static Q4_K: GemvFns = GemvFns {
                prep: avx2::prep_q8_k_row as PrepFn,
                prep_bytes: avx2::krow_bytes,
                rows4: avx2::gemv_q4_k_r4 as GemvFn,
                rows2: avx2::gemv_q4_k_r4 as GemvFn,
                rows1: None,
            };
            Some(&Q4_K)
        }
        _ => None,
    }
}

/// The several-activation-row kernels of an interleaved Q4_K matrix (one group of four rows ×
/// 1–4 activation rows, `[n - 1]`), in upstream's repacked GEMM order (`gemm`) or GEMV order:
/// [`avx2::dot_q4_k_r4`], at the AVX2 and the AVX-512 level.
pub fn dot_fns_interleaved(ty: GgmlType, gemm: bool) -> Option<&'static [DotFn; 4]> {
    match (level(), ty) {
        #[cfg(target_arch = "x86_64")]
        (Level::Avx2 | Level::Avx512, GgmlType::Q4K) => {
            static GEMM: [DotFn; 4] = [avx2::dot_q4_k_r4::<1, true>, avx2::dot_q4_k_r4::<2, true>, avx2::dot_q4_k_r4::<3, true>, avx2::dot_q4_k_r4::<4, true>];
            static GEMV: [DotFn; 4] = [avx2::dot_q4_k_r4::<1, false>, avx2::dot_q4_k_r4::<2, false>, avx2::dot_q4_k_r4::<3, false>, avx2::dot_q4_k_r4::<4, false>];
            Some(if gemm { &GEMM } else { &GEMV })
        }
        _ => None,
    }
}

/// `quant::interleave::deinterleave_q4_k` (the same bytes), by the AVX2 kernel where the CPU
/// has it.
pub fn deinterleave_q4_k(src: &[u8], groups: usize, cols: usize, dst: &mut [u8]) {
    #[cfg(target_arch = "x86_64")]
    if level() >= Level::Avx2 {
        let rb = GgmlType::Q4K.row_bytes(cols).expect("Q4_K columns are a multiple of 256");
        assert!(src.len() >= groups * 4 * rb && dst.len() >= groups * 4 * rb);
        // SAFETY: the lengths were checked; the level says the CPU has AVX2, FMA and F16C.
        return unsafe { avx2::deinterleave_q4_k(rb / 144, groups, src.as_ptr(), dst.as_mut_ptr()) };
    }
    crate::quant::interleave::deinterleave_q4_k(src, groups, cols, dst)
}

/// The kernels of a weight type for several activation rows (batched decode) on activations
/// prepared once per row (`prep`, into `prep_bytes(nb)` bytes, 64-byte aligned): a weight row
/// meets every activation row, so what depends on the activation alone is computed once. Bit
/// for bit the type's [`DotFns`].
pub struct BatchFns {
    pub prep: PrepFn,
    pub prep_bytes: fn(usize) -> usize,
    pub rows: DotFns,
}

/// The batched kernels for weights of type `ty`, or None.
pub fn batch_fns(ty: GgmlType) -> Option<&'static BatchFns> {
    batch_fns_at(level(), ty)
}

/// As [`batch_fns`] at a given level.
pub fn batch_fns_at(level: Level, ty: GgmlType) -> Option<&'static BatchFns> {
    match level {
        #[cfg(target_arch = "x86_64")]
        Level::Avx512 => {
            macro_rules! b {
                ($f:ident) => {
                    BatchFns { prep: avx512::prep_q8_k as PrepFn, prep_bytes: avx512::kprep_bytes, rows: table!(avx512, $f) }
                };
            }
            static Q4_K: BatchFns = b!(dot_q4_k_prepped);
            static Q5_K: BatchFns = b!(dot_q5_k_prepped);
            static Q6_K: BatchFns = b!(dot_q6_k_prepped);
            match ty {
                GgmlType::Q4K => Some(&Q4_K),
                GgmlType::Q5K => Some(&Q5_K),
                GgmlType::Q6K => Some(&Q6_K),
                _ => None,
            }
        }
        #[cfg(target_arch = "x86_64")]
        Level::Avx2 => {
            macro_rules! b {
                ($prep:expr, $bytes:ident, $f:ident) => {
                    BatchFns { prep: $prep as PrepFn, prep_bytes: avx2::$bytes, rows: table!(avx2, $f) }
                };
            }
            static Q4_0: BatchFns = b!(avx2::prep_q8_0_off::<8>, prep_bytes_q8_0_off, dot_q4_0_prepped);
            static Q5_0: BatchFns = b!(avx2::prep_q8_0_off::<16>, prep_bytes_q8_0_off, dot_q5_0_prepped);
            static Q8_0: BatchFns = b!(avx2::prep_q8_0, prep_bytes_q8_0, dot_q8_0_prepped);
            match ty {
                GgmlType::Q4_0 => Some(&Q4_0),
                GgmlType::Q5_0 => Some(&Q5_0),
                GgmlType::Q8_0 => Some(&Q8_0),
                _ => None,
            }
        }
        _ => None,
    }
}

/// The SIMD quantizer for activation format `vt`, or None (use `quant::quantize_row`).
pub fn quantize_fn(vt: GgmlType) -> Option<QuantFn> {
    quantize_fn_at(level(), vt)
}

/// As [`quantize_fn`] at a given level.
pub fn quantize_fn_at(level: Level, vt: GgmlType) -> Option<QuantFn> {
    match level {
        Level::Scalar => None,
        #[cfg(target_arch = "x86_64")]
        Level::Avx512 => quantize_fn_at(Level::Avx2, vt),
        #[cfg(target_arch = "x86_64")]
        Level::Avx2 => match vt {
            GgmlType::Q8_0 => Some(avx2::quantize_q8_0 as QuantFn),
            GgmlType::Q8_1 => Some(avx2::quantize_q8_1 as QuantFn),
            GgmlType::Q8K => Some(avx2::quantize_q8_k as QuantFn),
            GgmlType::F16 => Some(avx2::quantize_f16 as QuantFn),
            _ => None,
        },
        #[cfg(not(target_arch = "x86_64"))]
        Level::Avx2 | Level::Avx512 => None,
    }
}

#[cfg(test)]
mod tests;

/// For the kernel tests: the levels of `candidates` this CPU runs, capped like the library by
/// `DEEPSEEK_KERNELS` (each is then tested). The first call says on stderr, past the test
/// harness's capture, which levels the tests run and which they do not ("AVX-512 kernels NOT
/// tested on this machine"), so a run on a smaller CPU does not pass as a test of every kernel.
#[cfg(test)]
pub(crate) fn tested_levels(candidates: &[Level]) -> Vec<Level> {
    static REPORTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !REPORTED.swap(true, std::sync::atomic::Ordering::Relaxed) {
        use std::io::Write;
        let _ = std::io::stderr().write_all(level_report().as_bytes());
    }
    candidates.iter().copied().filter(|&l| l <= level()).collect()
}

/// The kernel tests' report of the levels and features they exercise here.
#[cfg(test)]
pub(crate) fn level_report() -> String {
    let f = super::cpu_features();
    let name = |l: Level| match l {
        Level::Scalar => "scalar",
        Level::Avx2 => "AVX2",
        Level::Avx512 => "AVX-512",
    };
    let top = level();
    let why = |l: Level, needs: &str| {
        if supported_level() >= l {
            "DEEPSEEK_KERNELS caps the level".to_string()
        } else {
            format!("the CPU lacks {needs}")
        }
    };
    let tested: Vec<&str> = [Level::Scalar, Level::Avx2, Level::Avx512].into_iter().filter(|&l| l <= top).map(name).collect();
    let mut s = format!("kernel tests: levels tested on this machine: {}{}\n", tested.join(", "), if f.gfni && top >= Level::Avx2 { " (+ GFNI variants)" } else { "" });
    if top < Level::Avx512 {
        s += &format!("kernel tests: AVX-512 kernels NOT tested on this machine ({})\n", why(Level::Avx512, "one of AVX-512 F, BW, VL, VNNI"));
    }
    if top < Level::Avx2 {
        s += &format!("kernel tests: AVX2 kernels NOT tested on this machine ({})\n", why(Level::Avx2, "one of AVX2, FMA, F16C"));
    }
    if !f.gfni && top >= Level::Avx2 {
        s += "kernel tests: GFNI kernel variants NOT tested on this machine (the CPU lacks GFNI)\n";
    }
    s
}
