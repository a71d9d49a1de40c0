//! GGML tensor formats: block layouts, (de)quantization and dot products.
//!
//! This is the scalar reference implementation. Its numerics follow what
//! llama.cpp's CPU backend computes on x86-64 (AVX2 / AVX-512 builds):
//!
//! * `dequantize_row` and `quantize_row_ref` follow ggml-base's scalar
//!   `dequantize_row_*` / `quantize_row_*_ref` (compiled for baseline x86-64,
//!   so no fused multiply-add).
//! * `quantize_row` follows the activation quantizers ggml-cpu uses on x86
//!   (`quantize_row_q8_0/q8_1` AVX path: `127/amax` multiplier and
//!   round-half-to-even; `quantize_row_q8_K`: `nearest_int`).
//! * `vec_dot` follows the x86 kernels' accumulation order: the integer sums
//!   land in the same 8 lanes as the AVX2 code, each lane is accumulated with
//!   a fused multiply-add and the lanes are reduced in `hsum_float_8` order.
//!   F32/F16/BF16 follow the AVX-512F `ggml_vec_dot_{f32,f16,bf16}` layout
//!   (4x16 FMA accumulators, `_mm512_reduce_add_ps` tree).
//!
//! All functions read raw little-endian bytes, so blocks may sit at any
//! alignment inside a memory-mapped file. Nothing here allocates.
//!
//! Each format file implements [`BlockFormat`] once; `formats!` generates `GgmlType`
//! and every dispatch (`name`, `block_len`, `block_bytes`, `vec_dot_type`, `dequantize_row`,
//! `quantize_row`, `quantize_row_ref`, `vec_dot`) from one table of them. Adding a type: its
//! file with the `BlockFormat` impl, one line in `formats!`, and its SIMD kernels (optional)
//! in `kernels/simd/` keyed by the same `GgmlType`.

/// Implements [`BlockFormat`] for a format file's `Format` (or the named struct) from its
/// items: name, block length, block bytes, paired activation type, weight or not, dequantize,
/// reference quantizer, activation quantizer, dot product.
macro_rules! block_format {
    ($doc:literal, $st:ident, $name:literal, $len:expr, $bytes:expr, $vdt:ident, $weight:literal, $deq:expr, $qref:expr, $qact:expr, $dot:expr) => {
        #[doc = $doc]
        pub(crate) struct $st;

        impl super::BlockFormat for $st {
            const NAME: &'static str = $name;
            const BLOCK_LEN: usize = $len;
            const BLOCK_BYTES: usize = $bytes;
            const VEC_DOT_TYPE: super::GgmlType = super::GgmlType::$vdt;
            const IS_WEIGHT: bool = $weight;
            const DEQUANTIZE: super::DequantizeFn = $deq;
            const QUANTIZE_REF: Option<super::QuantizeFn> = $qref;
            const QUANTIZE_ACT: Option<super::QuantizeFn> = $qact;
            const VEC_DOT: Option<super::VecDotFn> = $dot;
        }
    };
}

mod common;
pub(crate) mod fp4;
#[cfg(test)]
mod golden;
#[cfg(test)]
mod golden_iq;
pub mod interleave;
mod half;
mod iq1_m;
mod iq1_s;
mod iq2_s;
mod iq2_xs;
mod iq2_xxs;
mod iq3_s;
mod iq3_xxs;
mod iq4_nl;
mod iq4_xs;
pub(crate) mod iq_tables;
mod iquant;
mod lanes;
mod legacy;
mod kquant;
mod mxfp4;
mod nvfp4;
mod q1_0;
mod q2_0;
mod q2_k;
mod q3_k;
mod q4_0;
mod q4_1;
mod q4_k;
mod q5_0;
mod q5_1;
mod q5_k;
mod q6_k;
mod q8_0;
mod q8_1;
mod q8_k;
#[cfg(test)]
pub(crate) mod test_util;
pub(crate) mod tiled;
mod tq1_0;
mod tq2_0;

pub use tiled::tiled_order;
pub(crate) use tiled::TILED_MIN_ROWS;
pub use half::{bf16_to_f32, f16_bytes, f16_slice, f16_to_f32, f32_to_bf16, f32_to_f16};

/// Elements per K-quant super-block.
pub(crate) const QK_K: usize = 256;

/// One row's conversion to f32 (`dst.len()` elements from exactly their bytes).
pub(crate) type DequantizeFn = fn(&[u8], &mut [f32]);
/// One row's quantization (`src.len()` elements into exactly their bytes).
pub(crate) type QuantizeFn = fn(&[f32], &mut [u8]);
/// A weight row's dot product with an activation row in its `VEC_DOT_TYPE`.
pub(crate) type VecDotFn = fn(&[u8], &[u8]) -> f32;

/// A GGML block format: its layout and its scalar reference operations. Each format file
/// implements it once (`q4_0::Format`, `half::F16`, ...); `formats!` below builds `GgmlType`
/// and every dispatch from one table of them, so a format that lacks an item does not
/// compile. What a format cannot do (a dot product of an activation-only format, a reference
/// quantizer of an integer type) is `None`, not a missing match arm.
pub(crate) trait BlockFormat {
    /// ggml's type name ("f32", "q4_0", "q4_K", ...).
    const NAME: &'static str;
    /// Elements per block.
    const BLOCK_LEN: usize;
    /// Bytes per block.
    const BLOCK_BYTES: usize;
    /// The activation format a weight row is multiplied with (ggml-cpu's `vec_dot_type` on
    /// x86-64); the type itself for types without a dot product.
    const VEC_DOT_TYPE: GgmlType;
    /// Whether a weight matrix may have this type.
    const IS_WEIGHT: bool;
    const DEQUANTIZE: DequantizeFn;
    /// ggml's `quantize_row_*_ref` (what llama-quantize writes without an importance matrix).
    const QUANTIZE_REF: Option<QuantizeFn>;
    /// The activation quantizer ggml-cpu uses on x86 (activation formats only).
    const QUANTIZE_ACT: Option<QuantizeFn>;
    const VEC_DOT: Option<VecDotFn>;
}

/// The table every `GgmlType` property and dispatch is generated from.
macro_rules! formats {
    ($($variant:ident = $id:literal => $fmt:path),* $(,)?) => {
        /// GGML tensor types, discriminants = ggml's enum ggml_type values.
        #[allow(non_camel_case_types)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u32)]
        pub enum GgmlType {
            $($variant = $id),*
        }

        impl GgmlType {
            /// All supported types, in discriminant order.
            pub(crate) const ALL: [GgmlType; [$($id),*].len()] = [$(GgmlType::$variant),*];

            /// ggml's type name ("f32", "q4_0", "q4_K", "bf16", ...).
            pub const fn name(self) -> &'static str {
                match self { $(GgmlType::$variant => <$fmt as BlockFormat>::NAME),* }
            }

            /// Elements per block.
            pub const fn block_len(self) -> usize {
                match self { $(GgmlType::$variant => <$fmt as BlockFormat>::BLOCK_LEN),* }
            }

            /// Bytes per block.
            pub const fn block_bytes(self) -> usize {
                match self { $(GgmlType::$variant => <$fmt as BlockFormat>::BLOCK_BYTES),* }
            }

            /// The activation format a weight row of this type is multiplied with
            /// (ggml-cpu's `vec_dot_type` on x86-64). Types without a dot product
            /// map to themselves.
            pub const fn vec_dot_type(self) -> GgmlType {
                match self { $(GgmlType::$variant => <$fmt as BlockFormat>::VEC_DOT_TYPE),* }
            }

            /// True for the types a weight matrix may have.
            pub const fn is_weight_type(self) -> bool {
                match self { $(GgmlType::$variant => <$fmt as BlockFormat>::IS_WEIGHT),* }
            }

            fn dequantize_fn(self) -> DequantizeFn {
                match self { $(GgmlType::$variant => <$fmt as BlockFormat>::DEQUANTIZE),* }
            }

            fn quantize_ref_fn(self) -> Option<QuantizeFn> {
                match self { $(GgmlType::$variant => <$fmt as BlockFormat>::QUANTIZE_REF),* }
            }

            fn quantize_act_fn(self) -> Option<QuantizeFn> {
                match self { $(GgmlType::$variant => <$fmt as BlockFormat>::QUANTIZE_ACT),* }
            }

            fn vec_dot_fn(self) -> Option<VecDotFn> {
                match self { $(GgmlType::$variant => <$fmt as BlockFormat>::VEC_DOT),* }
            }
        }
    };
}

formats! {
    F32 = 0 => half::F32,
    F16 = 1 => half::F16,
    Q4_0 = 2 => q4_0::Format,
    Q4_1 = 3 => q4_1::Format,
    Q5_0 = 6 => q5_0::Format,
    Q5_1 = 7 => q5_1::Format,
    Q8_0 = 8 => q8_0::Format,
    Q8_1 = 9 => q8_1::Format,
    Q2K = 10 => q2_k::Format,
    Q3K = 11 => q3_k::Format,
    Q4K = 12 => q4_k::Format,
    Q5K = 13 => q5_k::Format,
    Q6K = 14 => q6_k::Format,
    Q8K = 15 => q8_k::Format,
    IQ2_XXS = 16 => iq2_xxs::Format,
    IQ2_XS = 17 => iq2_xs::Format,
    IQ3_XXS = 18 => iq3_xxs::Format,
    IQ1_S = 19 => iq1_s::Format,
    IQ4_NL = 20 => iq4_nl::Format,
    IQ3_S = 21 => iq3_s::Format,
    IQ2_S = 22 => iq2_s::Format,
    IQ4_XS = 23 => iq4_xs::Format,
    I8 = 24 => half::I8,
    I16 = 25 => half::I16,
    I32 = 26 => half::I32,
    I64 = 27 => half::I64,
    F64 = 28 => half::F64,
    IQ1_M = 29 => iq1_m::Format,
    BF16 = 30 => half::BF16,
    TQ1_0 = 34 => tq1_0::Format,
    TQ2_0 = 35 => tq2_0::Format,
    MXFP4 = 39 => mxfp4::Format,
    NVFP4 = 40 => nvfp4::Format,
    Q1_0 = 41 => q1_0::Format,
    Q2_0 = 42 => q2_0::Format,
}

impl GgmlType {
    /// Whether `quantize_row_ref` can write this type (the IQ, ternary, FP4 and 1/2-bit
    /// formats have no reference quantizer here: they are read, not written).
    pub fn has_quantize_ref(self) -> bool {
        self.quantize_ref_fn().is_some()
    }

    /// The type with ggml id `v`; None for unknown or unsupported ids.
    pub fn from_u32(v: u32) -> Option<GgmlType> {
        GgmlType::ALL.iter().copied().find(|t| *t as u32 == v)
    }

    /// Bytes of a row of `n` elements; None if `n` is not a multiple of
    /// `block_len` or on overflow.
    pub fn row_bytes(self, n: usize) -> Option<usize> {
        let bl = self.block_len();
        if !n.is_multiple_of(bl) {
            return None;
        }
        (n / bl).checked_mul(self.block_bytes())
    }
}

fn expect_row_bytes(ty: GgmlType, n: usize, bytes: usize, what: &str) {
    match ty.row_bytes(n) {
        Some(b) if b == bytes => {}
        Some(b) => panic!(
            "{what}: {} row of {n} elements needs {b} bytes, got {bytes}",
            ty.name()
        ),
        None => panic!(
            "{what}: {n} is not a multiple of the {} block size {}",
            ty.name(),
            ty.block_len()
        ),
    }
}

/// Convert one row of `dst.len()` elements stored in `src` (exactly
/// `row_bytes(dst.len())` bytes) to f32.
///
/// Panics if the sizes do not match.
pub fn dequantize_row(ty: GgmlType, src: &[u8], dst: &mut [f32]) {
    expect_row_bytes(ty, dst.len(), src.len(), "dequantize_row");
    (ty.dequantize_fn())(src, dst)
}

/// Quantize an activation row to `ty` (F32, F16, BF16, Q8_0, Q8_1, Q8K),
/// exactly as ggml-cpu does for vec_dot on x86.
/// `dst.len()` must be `ty.row_bytes(src.len())`.
///
/// Panics for other types or mismatched sizes.
pub fn quantize_row(ty: GgmlType, src: &[f32], dst: &mut [u8]) {
    expect_row_bytes(ty, src.len(), dst.len(), "quantize_row");
    match ty.quantize_act_fn() {
        Some(f) => f(src, dst),
        None => panic!("quantize_row: {} is not an activation format", ty.name()),
    }
}

/// Dot product of a weight row (type `ty`, `n` elements, bytes `w`) with an
/// activation row already quantized to `ty.vec_dot_type()` (bytes `a`).
///
/// Panics if `ty` is not a weight type or the sizes do not match.
pub fn vec_dot(ty: GgmlType, n: usize, w: &[u8], a: &[u8]) -> f32 {
    expect_row_bytes(ty, n, w.len(), "vec_dot (weights)");
    expect_row_bytes(ty.vec_dot_type(), n, a.len(), "vec_dot (activations)");
    match ty.vec_dot_fn() {
        Some(f) => f(w, a),
        None => panic!("vec_dot: {} is not a weight type", ty.name()),
    }
}

/// Whether llama.cpp b11312 on x86 (AVX2 and up, `ggml_repack_get_optimal_repack_type`)
/// repacks a weight matrix of type `ty` with `rows` rows into interleaved 8-row blocks at load
/// (its default `use_extra_bufts`) and so multiplies it in its repacked kernels' order, which
/// [`vec_dot_repacked`] follows. Only Q4_K so far: upstream repacks Q4_0, IQ4_NL and MXFP4 too
/// (and Q2_K with AVX-512), whose repacked order we do not follow yet.
pub fn repacked_order(ty: GgmlType, rows: usize) -> bool {
    ty == GgmlType::Q4K && rows % 8 == 0
}

/// How llama.cpp multiplies a weight matrix on x86 (see [`repacked_order`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Repacked {
    /// Not repacked: `vec_dot` (or tinyBLAS, which sums alike) for every activation row.
    No,
    /// A repacked 2-D matrix of `ggml_mul_mat`: its GEMM for the activation rows in whole
    /// groups of four, its GEMV for the last `n % 4`.
    MulMat,
    /// A repacked expert stack of `ggml_mul_mat_id`: its GEMV for every row.
    MulMatId,
    /// Not repacked, multiplied by `ggml_mul_mat` and of a type whose llamafile tinyBLAS order
    /// differs from `vec_dot`'s ([`sgemm_order`]): upstream's `ggml_compute_forward_mul_mat`
    /// hands a product of two or more activation rows to tinyBLAS (`llamafile_sgemm`, which
    /// declines one row), a single row to `vec_dot`.
    Sgemm,
    /// Not repacked and of a type llama.cpp's tiled matmul serves ([`tiled_order`]): a product of
    /// 8 (`TILED_MIN_ROWS`) or more activation rows (of `ggml_mul_mat`, or an expert's routed rows
    /// of `ggml_mul_mat_id`) goes in its order ([`vec_dot_tiled`]), fewer in `vec_dot`'s.
    Tiled,
}

impl Repacked {
    /// For a matrix of type `ty` with `rows` rows, `experts` if upstream multiplies it with
    /// `ggml_mul_mat_id`.
    pub fn of(ty: GgmlType, rows: usize, experts: bool) -> Repacked {
        match (repacked_order(ty, rows), experts) {
            (false, _) if tiled_order(ty) => Repacked::Tiled,
            (false, false) if sgemm_order(ty) => Repacked::Sgemm,
            (false, _) => Repacked::No,
            (true, false) => Repacked::MulMat,
            (true, true) => Repacked::MulMatId,
        }
    }

    /// For a 3-D stack of `ggml_mul_mat` (per-head matrices), which upstream never repacks, or a
    /// matrix it keeps out of its repacked buffers (a tied output read from `token_embd`).
    pub fn of_heads(ty: GgmlType) -> Repacked {
        if tiled_order(ty) {
            Repacked::Tiled
        } else if sgemm_order(ty) {
            Repacked::Sgemm
        } else {
            Repacked::No
        }
    }

    /// How many of `n` activation rows of one product upstream multiplies with its GEMM (for
    /// `Sgemm`, tinyBLAS; for `Tiled`, its tiled matmul).
    pub fn gemm_rows(self, n: usize) -> usize {
        match self {
            Repacked::MulMat => n - n % 4,
            Repacked::Sgemm if n >= 2 => n,
            Repacked::Tiled if n >= TILED_MIN_ROWS => n,
            Repacked::No | Repacked::MulMatId | Repacked::Sgemm | Repacked::Tiled => 0,
        }
    }

    /// Whether upstream repacked the matrix at load.
    pub fn is_repacked(self) -> bool {
        matches!(self, Repacked::MulMat | Repacked::MulMatId)
    }
}

/// Whether llama.cpp b11312's x86 tinyBLAS (`llamafile/sgemm.cpp`, `tinyBLAS_Q0_AVX`: one 8-lane
/// accumulator, one FMA per block with `d_w · d_a`, `hsum` at the end) sums a type's products in
/// another order than its `vec_dot`. Q4_0, Q5_0 and Q8_0 sum alike in both; IQ4_NL's `vec_dot`
/// takes the blocks in pairs into two accumulators (and an odd last block in scalar): its
/// several-row products follow [`vec_dot_sgemm`].
pub fn sgemm_order(ty: GgmlType) -> bool {
    ty == GgmlType::IQ4_NL
}

/// [`vec_dot`] in the order of llama.cpp's tiled matmul, for the types of [`tiled_order`].
pub fn vec_dot_tiled(ty: GgmlType, n: usize, w: &[u8], a: &[u8]) -> f32 {
    expect_row_bytes(ty, n, w.len(), "vec_dot_tiled (weights)");
    expect_row_bytes(ty.vec_dot_type(), n, a.len(), "vec_dot_tiled (activations)");
    tiled::vec_dot(ty, w, a)
}

/// [`vec_dot`] in the order of llama.cpp's tinyBLAS, for the types of [`sgemm_order`].
pub fn vec_dot_sgemm(ty: GgmlType, n: usize, w: &[u8], a: &[u8]) -> f32 {
    expect_row_bytes(ty, n, w.len(), "vec_dot_sgemm (weights)");
    expect_row_bytes(ty.vec_dot_type(), n, a.len(), "vec_dot_sgemm (activations)");
    match ty {
        GgmlType::IQ4_NL => iq4_nl::vec_dot_sgemm(w, a),
        _ => panic!("vec_dot_sgemm: {} sums as vec_dot in tinyBLAS", ty.name()),
    }
}

/// [`vec_dot`] in the order of llama.cpp's repacked kernels, for matrices where
/// [`repacked_order`] holds: its GEMM's (`gemm`: the activation rows of a `ggml_mul_mat` in whole
/// groups of four) or its GEMV's (the last `n % 4` rows, and `ggml_mul_mat_id`'s). Panics for
/// other types or mismatched sizes.
pub fn vec_dot_repacked(ty: GgmlType, n: usize, w: &[u8], a: &[u8], gemm: bool) -> f32 {
    expect_row_bytes(ty, n, w.len(), "vec_dot_repacked (weights)");
    expect_row_bytes(ty.vec_dot_type(), n, a.len(), "vec_dot_repacked (activations)");
    match ty {
        GgmlType::Q4K => q4_k::vec_dot_repacked(w, a, gemm),
        _ => panic!("vec_dot_repacked: llama.cpp does not repack {} as we follow", ty.name()),
    }
}

/// Quantize a row into `ty` with ggml's reference quantizers
/// (`quantize_row_*_ref`, i.e. what `llama-quantize` writes without an
/// importance matrix). Supports F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
/// Q8_1, Q2K..Q6K and Q8K.
///
/// Panics for other types or mismatched sizes.
pub fn quantize_row_ref(ty: GgmlType, src: &[f32], dst: &mut [u8]) {
    expect_row_bytes(ty, src.len(), dst.len(), "quantize_row_ref");
    match ty.quantize_ref_fn() {
        Some(f) => f(src, dst),
        None => panic!("quantize_row_ref: cannot quantize to {}", ty.name()),
    }
}

/// Fills `dst` (whole blocks of `ty`) with pseudo-random but valid blocks: random bytes with
/// the scale fields set to moderate values. For benchmarks of the types that have no reference
/// quantizer (`quantize_row_ref` cannot write them).
#[doc(hidden)]
pub fn random_blocks(ty: GgmlType, seed: u64, dst: &mut [u8]) {
    let mut s = seed | 1;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    for b in dst.iter_mut() {
        *b = next() as u8;
    }
    let bb = ty.block_bytes();
    for blk in dst.chunks_exact_mut(bb) {
        let h = f32_to_f16(((next() % 1000) as f32 / 1000.0 + 0.1) * 0.01);
        match ty {
            GgmlType::IQ1_M => {
                for i in 0..4 {
                    blk[49 + 2 * i] = (blk[49 + 2 * i] & 0x0f) | ((((h >> (4 * i)) & 0xf) as u8) << 4);
                }
            }
            GgmlType::MXFP4 => blk[0] = 118 + (next() % 12) as u8,
            GgmlType::NVFP4 => blk[..4].iter_mut().for_each(|b| *b = 0x08 + (next() % 0x70) as u8),
            GgmlType::TQ1_0 | GgmlType::TQ2_0 => blk[bb - 2..].copy_from_slice(&h.to_le_bytes()),
            // d and dmin
            GgmlType::Q4K | GgmlType::Q5K => {
                blk[..2].copy_from_slice(&h.to_le_bytes());
                blk[2..4].copy_from_slice(&h.to_le_bytes());
            }
            _ if ty.block_len() > 1 => blk[..2].copy_from_slice(&h.to_le_bytes()),
            _ => {}
        }
    }
}

/// Read the little-endian f16 at `off` as f32.
#[inline(always)]
pub(crate) fn f16_at(b: &[u8], off: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([b[off], b[off + 1]]))
}

/// Write `x` as a little-endian f16 (round to nearest even) at `off`.
#[inline(always)]
pub(crate) fn put_f16(b: &mut [u8], off: usize, x: f32) {
    b[off..off + 2].copy_from_slice(&f32_to_f16(x).to_le_bytes());
}

/// The `N` bytes at `off` as an array reference.
#[inline(always)]
pub(crate) fn arr<const N: usize>(b: &[u8], off: usize) -> &[u8; N] {
    b[off..off + N].try_into().expect("slice of length N")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_table() {
        let expect: [(GgmlType, u32, &str, usize, usize); 35] = [
            (GgmlType::F32, 0, "f32", 1, 4),
            (GgmlType::F16, 1, "f16", 1, 2),
            (GgmlType::Q4_0, 2, "q4_0", 32, 18),
            (GgmlType::Q4_1, 3, "q4_1", 32, 20),
            (GgmlType::Q5_0, 6, "q5_0", 32, 22),
            (GgmlType::Q5_1, 7, "q5_1", 32, 24),
            (GgmlType::Q8_0, 8, "q8_0", 32, 34),
            (GgmlType::Q8_1, 9, "q8_1", 32, 36),
            (GgmlType::Q2K, 10, "q2_K", 256, 84),
            (GgmlType::Q3K, 11, "q3_K", 256, 110),
            (GgmlType::Q4K, 12, "q4_K", 256, 144),
            (GgmlType::Q5K, 13, "q5_K", 256, 176),
            (GgmlType::Q6K, 14, "q6_K", 256, 210),
            (GgmlType::Q8K, 15, "q8_K", 256, 292),
            (GgmlType::I8, 24, "i8", 1, 1),
            (GgmlType::I16, 25, "i16", 1, 2),
            (GgmlType::I32, 26, "i32", 1, 4),
            (GgmlType::I64, 27, "i64", 1, 8),
            (GgmlType::F64, 28, "f64", 1, 8),
            (GgmlType::BF16, 30, "bf16", 1, 2),
            // upstream's type_traits (ggml/src/ggml.c of b11312)
            (GgmlType::IQ2_XXS, 16, "iq2_xxs", 256, 66),
            (GgmlType::IQ2_XS, 17, "iq2_xs", 256, 74),
            (GgmlType::IQ3_XXS, 18, "iq3_xxs", 256, 98),
            (GgmlType::IQ1_S, 19, "iq1_s", 256, 50),
            (GgmlType::IQ4_NL, 20, "iq4_nl", 32, 18),
            (GgmlType::IQ3_S, 21, "iq3_s", 256, 110),
            (GgmlType::IQ2_S, 22, "iq2_s", 256, 82),
            (GgmlType::IQ4_XS, 23, "iq4_xs", 256, 136),
            (GgmlType::IQ1_M, 29, "iq1_m", 256, 56),
            (GgmlType::TQ1_0, 34, "tq1_0", 256, 54),
            (GgmlType::TQ2_0, 35, "tq2_0", 256, 66),
            (GgmlType::MXFP4, 39, "mxfp4", 32, 17),
            (GgmlType::NVFP4, 40, "nvfp4", 64, 36),
            (GgmlType::Q1_0, 41, "q1_0", 128, 18),
            (GgmlType::Q2_0, 42, "q2_0", 64, 18),
        ];
        for (t, id, name, bl, bb) in expect {
            assert_eq!(t as u32, id);
            assert_eq!(GgmlType::from_u32(id), Some(t));
            assert_eq!(t.name(), name);
            assert_eq!(t.block_len(), bl, "{name}");
            assert_eq!(t.block_bytes(), bb, "{name}");
        }
        for id in [4u32, 5, 31, 32, 33, 36, 37, 38, 43, 1000, u32::MAX] {
            assert_eq!(GgmlType::from_u32(id), None, "{id}");
        }
    }

    #[test]
    fn row_bytes_rules() {
        assert_eq!(GgmlType::Q4_0.row_bytes(64), Some(36));
        assert_eq!(GgmlType::Q4_0.row_bytes(0), Some(0));
        assert_eq!(GgmlType::Q4_0.row_bytes(33), None);
        assert_eq!(GgmlType::Q6K.row_bytes(4096), Some(16 * 210));
        assert_eq!(GgmlType::Q6K.row_bytes(128), None);
        assert_eq!(GgmlType::F32.row_bytes(7), Some(28));
        assert_eq!(GgmlType::F32.row_bytes(usize::MAX), None);
        assert_eq!(GgmlType::Q8_0.row_bytes(usize::MAX / 32 * 32), None);
    }

    #[test]
    fn vec_dot_types() {
        use GgmlType::*;
        let pairs = [
            (F32, F32),
            (F16, F16),
            (BF16, BF16),
            (Q4_0, Q8_0),
            (Q5_0, Q8_0),
            (Q8_0, Q8_0),
            (Q4_1, Q8_1),
            (Q5_1, Q8_1),
            (Q2K, Q8K),
            (Q3K, Q8K),
            (Q4K, Q8K),
            (Q5K, Q8K),
            (Q6K, Q8K),
            (IQ2_XXS, Q8K),
            (IQ2_XS, Q8K),
            (IQ2_S, Q8K),
            (IQ3_XXS, Q8K),
            (IQ3_S, Q8K),
            (IQ1_S, Q8K),
            (IQ1_M, Q8K),
            (IQ4_XS, Q8K),
            (TQ1_0, Q8K),
            (TQ2_0, Q8K),
            (IQ4_NL, Q8_0),
            (MXFP4, Q8_0),
            (NVFP4, Q8_0),
            (Q1_0, Q8_0),
            (Q2_0, Q8_0),
        ];
        for (w, a) in pairs {
            assert!(w.is_weight_type());
            assert_eq!(w.vec_dot_type(), a);
        }
        for t in [Q8_1, Q8K, I8, I16, I32, I64, F64] {
            assert!(!t.is_weight_type(), "{}", t.name());
        }
    }

    #[test]
    #[should_panic]
    fn dequantize_wrong_size_panics() {
        let src = [0u8; 17];
        let mut dst = [0f32; 32];
        dequantize_row(GgmlType::Q4_0, &src, &mut dst);
    }

    #[test]
    #[should_panic]
    fn vec_dot_non_weight_panics() {
        let w = [0u8; 36];
        vec_dot(GgmlType::Q8_1, 32, &w, &w);
    }
}
