//! The element types a KV cache can hold (`llama_context_params.type_k` / `type_v`), with what
//! llama.cpp b11312's CPU backend does with each: how a row is written into the cache
//! (`ggml_set_rows` through ggml-cpu's `from_float`), how the flash-attention kernel reads it
//! back (`ggml_compute_forward_flash_attn_ext_f16_one_chunk`, ops.cpp:8843), and whether the
//! rows are Hadamard-rotated first (`attn_rot_k` / `attn_rot_v`, llama-kv-cache.cpp:321).

use crate::kernels::indexer::hadamard;
use crate::quant::{self, f32_to_f16, GgmlType};

/// A KV cache element type upstream's CPU flash attention reads (ggml's names).
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheType {
    F32,
    F16,
    BF16,
    Q8_0,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    IQ4_NL,
}

impl CacheType {
    /// The types llama.cpp's `--cache-type-k/-v` accept, as ggml type ids.
    pub(crate) const ALL: [CacheType; 9] = [
        CacheType::F32,
        CacheType::F16,
        CacheType::BF16,
        CacheType::Q8_0,
        CacheType::Q4_0,
        CacheType::Q4_1,
        CacheType::Q5_0,
        CacheType::Q5_1,
        CacheType::IQ4_NL,
    ];

    /// From a `ggml_type` value; None for the types a cache cannot hold.
    pub fn from_ggml(id: i32) -> Option<CacheType> {
        CacheType::ALL.into_iter().find(|t| t.ggml() as i32 == id)
    }

    pub fn ggml(self) -> GgmlType {
        match self {
            CacheType::F32 => GgmlType::F32,
            CacheType::F16 => GgmlType::F16,
            CacheType::BF16 => GgmlType::BF16,
            CacheType::Q8_0 => GgmlType::Q8_0,
            CacheType::Q4_0 => GgmlType::Q4_0,
            CacheType::Q4_1 => GgmlType::Q4_1,
            CacheType::Q5_0 => GgmlType::Q5_0,
            CacheType::Q5_1 => GgmlType::Q5_1,
            CacheType::IQ4_NL => GgmlType::IQ4_NL,
        }
    }

    pub fn name(self) -> &'static str {
        self.ggml().name()
    }

    /// By ggml's name ("q8_0", "f16", ...; llama.cpp's `--cache-type-k` values).
    pub fn by_name(name: &str) -> Option<CacheType> {
        CacheType::ALL.into_iter().find(|t| t.name() == name)
    }

    /// `ggml_is_quantized`: the block types (rotated, and needing flash attention for V).
    pub fn is_quantized(self) -> bool {
        !matches!(self, CacheType::F32 | CacheType::F16 | CacheType::BF16)
    }

    /// Elements per block (1 for the float types).
    pub fn block_len(self) -> usize {
        self.ggml().block_len()
    }

    /// Bytes of a row of `n` elements (`n` a multiple of the block length).
    pub fn row_bytes(self, n: usize) -> usize {
        n / self.block_len() * self.ggml().block_bytes()
    }

    /// How the attention reads a key of this type: F32 is cast to F16 before upstream's flash
    /// attention (llama-graph.cpp `build_attn_mha`), so F16 and F32 keys are F16 there; the
    /// others are multiplied with the query converted to their `vec_dot_type` by their `vec_dot`.
    pub fn key_is_f16(self) -> bool {
        matches!(self, CacheType::F32 | CacheType::F16)
    }

    /// Likewise for values: F16 and F32 (cast) values take ggml's F16 accumulator; the others
    /// are converted to f32 (`to_float`, exact for every type here) into an f32 accumulator.
    pub fn value_is_f16(self) -> bool {
        self.key_is_f16()
    }

    /// Writes `src` into a cache row of this type as ggml-cpu's `from_float` does for
    /// `ggml_set_rows`: F16/BF16 rounded to nearest even, Q8_0 with the x86 activation
    /// quantizer (`quantize_row_q8_0`), the others with the reference quantizers
    /// (`quantize_row_*_ref`, which ggml-cpu calls for them).
    pub fn store(self, src: &[f32], dst: &mut [u8]) {
        match self {
            CacheType::F32 => {
                for (d, x) in dst.chunks_exact_mut(4).zip(src) {
                    d.copy_from_slice(&x.to_le_bytes());
                }
            }
            CacheType::F16 => {
                for (d, &x) in dst.chunks_exact_mut(2).zip(src) {
                    d.copy_from_slice(&f32_to_f16(x).to_le_bytes());
                }
            }
            CacheType::Q8_0 => quant::quantize_row(GgmlType::Q8_0, src, dst),
            t => quant::quantize_row_ref(t.ggml(), src, dst),
        }
    }

    /// A row of this type as f32 (`to_float`).
    pub fn load(self, src: &[u8], dst: &mut [f32]) {
        quant::dequantize_row(self.ggml(), src, dst)
    }
}

/// The order of the Hadamard rotation upstream applies to keys of `head_dim` values in a cache
/// of type `ty` (`attn_rot_k`): the largest power of two dividing `head_dim`, for quantized
/// types and head sizes that are multiples of 64; 0 for none. Values (`attn_rot_v`) use 64.
/// Upstream rotates only through the standard KV cache, not MLA's key-only cache.
pub fn key_rotation(ty: CacheType, head_dim: usize) -> usize {
    if !ty.is_quantized() || head_dim == 0 || head_dim % 64 != 0 {
        return 0;
    }
    1 << head_dim.trailing_zeros()
}

/// See [`key_rotation`]: 64 for quantized values whose heads are multiples of 64, else 0.
pub fn value_rotation(ty: CacheType, head_dim: usize) -> usize {
    if ty.is_quantized() && head_dim > 0 && head_dim % 64 == 0 {
        64
    } else {
        0
    }
}

/// In place: each consecutive `n` values of `x` times the orthonormal Sylvester–Hadamard matrix
/// of order `n` (`kernels::indexer::hadamard`, ggml-cpu's fast transform). Self-inverse up to
/// rounding.
pub fn fwht(x: &mut [f32], n: usize) {
    debug_assert!(n.is_power_of_two() && x.len() % n == 0);
    x.chunks_exact_mut(n).for_each(hadamard);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `fwht` is the product with upstream's matrix (`ggml_gen_hadamard`: H[i][j] =
    /// (−1)^popcount(i & j) / √n), computed here in f64.
    #[test]
    fn fwht_is_the_hadamard_product() {
        for n in [64usize, 128] {
            let x: Vec<f32> = (0..2 * n).map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0).collect();
            let mut y = x.clone();
            fwht(&mut y, n);
            for r in 0..2 {
                for i in 0..n {
                    let want: f64 = (0..n).map(|j| if (i & j).count_ones() % 2 == 0 { 1.0 } else { -1.0 } * x[r * n + j] as f64).sum::<f64>() / (n as f64).sqrt();
                    assert!((y[r * n + i] as f64 - want).abs() < 1e-4, "n {n} row {r} [{i}]: {} vs {want}", y[r * n + i]);
                }
            }
            let mut z = y.clone();
            fwht(&mut z, n);
            for (a, b) in z.iter().zip(&x) {
                assert!((a - b).abs() < 1e-4);
            }
        }
    }

    #[test]
    fn rotations_follow_upstreams_rule() {
        assert_eq!(key_rotation(CacheType::Q8_0, 128), 128);
        assert_eq!(key_rotation(CacheType::Q8_0, 192), 64);
        assert_eq!(key_rotation(CacheType::Q4_0, 64), 64);
        assert_eq!(key_rotation(CacheType::Q4_0, 96), 0);
        assert_eq!(key_rotation(CacheType::F16, 128), 0);
        assert_eq!(key_rotation(CacheType::BF16, 128), 0);
        assert_eq!(value_rotation(CacheType::IQ4_NL, 128), 64);
        assert_eq!(value_rotation(CacheType::F32, 128), 0);
    }

    /// Every type's row round-trips through store/load within its precision, and the float
    /// types exactly where they can.
    #[test]
    fn store_load() {
        let x: Vec<f32> = (0..64).map(|i| ((i * 29 % 61) as f32 - 30.0) / 16.0).collect();
        for t in CacheType::ALL {
            let mut b = vec![0u8; t.row_bytes(64)];
            t.store(&x, &mut b);
            let mut y = vec![0f32; 64];
            t.load(&b, &mut y);
            let err = x.iter().zip(&y).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
            let bound = match t {
                CacheType::F32 => 0.0,
                CacheType::F16 => 1e-3,
                CacheType::BF16 => 1e-2,
                CacheType::Q8_0 => 0.02,
                _ => 0.25,
            };
            assert!(err <= bound, "{}: max error {err}", t.name());
            assert_eq!(CacheType::from_ggml(t.ggml() as i32), Some(t));
        }
        assert_eq!(CacheType::from_ggml(GgmlType::Q4K as i32), None);
    }
}
