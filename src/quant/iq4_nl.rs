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

/// `ggml_vec_dot_iq4_nl_q8_0`, AVX2 order (blocks in pairs).
pub(crate) fn vec_dot(w: &[u8], a: &[u8]) -> f32 {
    legacy::vec_dot_q8_0_pairs::<BYTES>(w, a, quants, |b| f16_at(b, 0))
}

block_format!("IQ4_NL as a [`BlockFormat`](super::BlockFormat).", Format, "iq4_nl", QK, BYTES, Q8_0, true, dequantize, None, None, Some(vec_dot));
