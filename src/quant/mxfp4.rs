//! MXFP4: blocks of 32 weights, 4.25 bpw, `x = 2^(e − 128) · kvalues_fp4[q]` (E2M1 doubled,
//! E8M0 scale halved).
//!
//! Layout (17 bytes): `e: u8` | `qs: [u8; 16]` — element `j` in the low nibble of `qs[j]`,
//! `j + 16` in the high one. `dequantize_row_mxfp4` (ggml-quants.c:569),
//! `ggml_vec_dot_mxfp4_q8_0` (ggml-cpu/arch/x86/quants.c:918).

use super::fp4::{e8m0_half, lookup32, KVALUES_FP4};
use super::{arr, legacy};

pub(crate) const QK: usize = 32;
pub(crate) const BYTES: usize = 1 + QK / 2;

#[inline(always)]
fn quants(b: &[u8; BYTES]) -> [i8; QK] {
    lookup32(arr(b, 1), &KVALUES_FP4)
}

pub(crate) fn dequantize(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.as_chunks::<BYTES>().0.iter().zip(dst.as_chunks_mut::<QK>().0) {
        let d = e8m0_half(b[0]);
        for (y, q) in y.iter_mut().zip(quants(b)) {
            *y = q as f32 * d;
        }
    }
}

/// `ggml_vec_dot_mxfp4_q8_0`, AVX2 order (blocks in pairs).
pub(crate) fn vec_dot(w: &[u8], a: &[u8]) -> f32 {
    legacy::vec_dot_q8_0_pairs::<BYTES>(w, a, quants, |b| e8m0_half(b[0]))
}

block_format!("MXFP4 as a [`BlockFormat`](super::BlockFormat).", Format, "mxfp4", QK, BYTES, Q8_0, true, dequantize, None, None, Some(vec_dot));
