//! IQ4_NL: blocks of 32 weights, 4.5 bpw, `x = d · kvalues_iq4nl[q]` (a non-linear 4-bit
//! codebook, −127 … 113).
//!
//! Layout (18 bytes): `d: f16` | `qs: [u8; 16]` — element `j` in the low nibble of `qs[j]`,
//! `j + 16` in the high one. `dequantize_row_iq4_nl` (ggml-quants.c:2725),
//! `ggml_vec_dot_iq4_nl_q8_0` (ggml-cpu/arch/x86/quants.c:3920).

use super::fp4::lookup32;
use super::iq_tables::KVALUES_IQ4NL;
use super::{arr, f16_at, legacy};

pub(crate) const QK: usize = 32;
pub(crate) const BYTES: usize = 2 + QK / 2;

#[inline(always)]
fn quants(b: &[u8; BYTES]) -> [i8; QK] {
    lookup32(arr(b, 2), &KVALUES_IQ4NL)
}

/// `d * kvalues_iq4nl[q]`.
pub(crate) fn dequantize(src: &[u8], dst: &mut [f32]) {
    legacy::dequantize_scaled::<BYTES>(src, dst, quants)
}

/// The codebook index nearest to `x` (`best_index_int8`, ggml-quants.c:28): below the first
/// value 0, above the last 15, else by bisection, the lower one unless the upper is strictly
/// nearer.
fn best_index(x: f32) -> usize {
    let v = &KVALUES_IQ4NL;
    if x <= v[0] as f32 {
        return 0;
    }
    if x >= v[15] as f32 {
        return 15;
    }
    let (mut lo, mut hi) = (0, 15);
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if x < v[mid] as f32 {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    if x - (v[hi - 1] as f32) < v[hi] as f32 - x {
        hi - 1
    } else {
        hi
    }
}

/// `quantize_row_iq4_nl_ref` (ggml-quants.c:5071; what ggml-cpu's `from_float` writes, e.g.
/// into an IQ4_NL KV cache): per block, weights x², the index of each x at scale
/// `max / kvalues[0]` (`max` the signed extreme), then the least-squares scale Σwqx / Σwq² for
/// those indices (`ntry = -1`: no further search). A block below 1e-15 gets d = 0 and keeps the
/// previous block's indices (upstream's reused buffer; the values are 0 either way).
pub(crate) fn quantize_ref(src: &[f32], dst: &mut [u8]) {
    let mut l = [0u8; QK];
    for (x, b) in src.as_chunks::<QK>().0.iter().zip(dst.as_chunks_mut::<BYTES>().0) {
        let (amax, max) = super::common::signed_absmax(x);
        let mut d = 0.0f32;
        if amax >= 1e-15 {
            let id = 1.0 / (max / KVALUES_IQ4NL[0] as f32);
            let (mut sumqx, mut sumq2) = (0f32, 0f32);
            for (j, &xj) in x.iter().enumerate() {
                let i = best_index(id * xj);
                l[j] = i as u8;
                let q = KVALUES_IQ4NL[i] as f32;
                let w = xj * xj;
                sumqx += w * q * xj;
                sumq2 += w * q * q;
            }
            d = if sumq2 > 0.0 { sumqx / sumq2 } else { 0.0 };
        }
        super::put_f16(b, 0, d);
        for j in 0..16 {
            b[2 + j] = l[j] | (l[j + 16] << 4);
        }
    }
}

/// `ggml_vec_dot_iq4_nl_q8_0`, AVX2 order (blocks in pairs).
pub(crate) fn vec_dot(w: &[u8], a: &[u8]) -> f32 {
    legacy::vec_dot_q8_0_pairs::<BYTES>(w, a, quants, |b| f16_at(b, 0))
}

/// llamafile's tinyBLAS order (`tinyBLAS_Q0_AVX<block_iq4_nl, block_q8_0>`, which upstream
/// uses for products of two or more activation rows): one 8-lane accumulator, one FMA per
/// block with `d_w · d_a`, `hsum` at the end — Q4_0's `vec_dot` order over IQ4_NL's values.
pub(crate) fn vec_dot_sgemm(w: &[u8], a: &[u8]) -> f32 {
    legacy::vec_dot_q8_0::<BYTES>(w, a, quants)
}

block_format!("IQ4_NL as a [`BlockFormat`](super::BlockFormat).", Format, "iq4_nl", QK, BYTES, Q8_0, true, dequantize, Some(quantize_ref), None, Some(vec_dot));
