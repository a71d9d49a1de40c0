//! IQ4_XS: super-blocks of 256 weights, 4.25 bpw, `x = d · (ls − 32) · kvalues_iq4nl[q]`.
//!
//! Layout (136 bytes): `d: f16` | `scales_h: u16` (2 high bits of each 6-bit `ls`) |
//! `scales_l: [u8; 4]` (4 low bits, two per byte, low nibble first) | `qs: [u8; 128]`, 16 per
//! 32 weights: element `j` in the low nibble of byte `j`, `j + 16` in the high one.
//! `dequantize_row_iq4_xs` (ggml-quants.c:2743), `ggml_vec_dot_iq4_xs_q8_K`
//! (ggml-cpu/arch/x86/quants.c:4004).

use super::iq_tables::KVALUES_IQ4NL;
use super::iquant::{self, per32};
use super::{arr, f16_at, kquant, legacy, QK_K};

pub(crate) const BYTES: usize = 2 + 2 + QK_K / 64 + QK_K / 2;
const QS: usize = 8;

/// The 256 codebook values and the 8 scales `ls − 32` (per 32).
#[inline(always)]
fn decode(b: &[u8; BYTES]) -> ([i8; QK_K], [i32; 8]) {
    let mut q = [0i8; QK_K];
    for (g, qg) in q.as_chunks_mut::<32>().0.iter_mut().enumerate() {
        *qg = legacy::unpack(arr(b, QS + 16 * g), 0, 0).map(|n| KVALUES_IQ4NL[n as usize]);
    }
    let sh = u16::from_le_bytes(*arr(b, 2));
    let ls = std::array::from_fn(|g| {
        let lo = (b[4 + g / 2] >> (4 * (g % 2))) & 0xf;
        (lo as i32 | ((((sh >> (2 * g)) & 3) as i32) << 4)) - 32
    });
    (q, ls)
}

pub(crate) fn dequantize(src: &[u8], dst: &mut [f32]) {
    kquant::dequantize::<BYTES, 8>(src, dst, |b| {
        let (q, ls) = decode(b);
        let d = f16_at(b, 0);
        (q, ls.map(|s| (d * s as f32, 0.0)))
    })
}

/// `ggml_vec_dot_iq4_xs_q8_K`, AVX2 order: per-32 scales `ls − 32`, one lane FMA per block.
pub(crate) fn vec_dot(w: &[u8], a: &[u8]) -> f32 {
    iquant::vec_dot::<BYTES>(w, a, 1.0, |b, aq| {
        let (q, ls) = decode(b);
        iquant::scaled_dot(&q, aq, &per32(ls))
    })
}

block_format!("IQ4_XS as a [`BlockFormat`](super::BlockFormat).", Format, "iq4_xs", QK_K, BYTES, Q8K, true, dequantize, None, None, Some(vec_dot));
