//! NVFP4: blocks of 64 weights, 4.5 bpw, `x = ue4m3(d_s) · kvalues_fp4[q]` with one UE4M3
//! scale per 16 weights (E2M1 doubled, the scale halved).
//!
//! Layout (36 bytes): `d: [u8; 4]` | `qs: [u8; 32]`, 8 per 16 weights: element `j` of
//! sub-block `s` in the low nibble of `qs[8s + j]`, `j + 8` in the high one.
//! `dequantize_row_nvfp4` (ggml-quants.c:589), `ggml_vec_dot_nvfp4_q8_0`
//! (ggml-cpu/arch/x86/quants.c:1004).

use super::fp4::{ue4m3, KVALUES_FP4};
use super::iquant::dot32_sign;
use super::lanes::Acc8;
use super::{arr, f16_at, q8_0};

pub(crate) const QK: usize = 64;
pub(crate) const BYTES: usize = 4 + QK / 2;

/// The 64 codebook values in element order.
#[inline(always)]
fn quants(b: &[u8; BYTES]) -> [i8; QK] {
    std::array::from_fn(|e| {
        let byte = b[4 + 8 * (e / 16) + e % 8];
        KVALUES_FP4[if e % 16 < 8 { byte & 15 } else { byte >> 4 } as usize]
    })
}

pub(crate) fn dequantize(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.as_chunks::<BYTES>().0.iter().zip(dst.as_chunks_mut::<QK>().0) {
        let q = quants(b);
        for (s, (ys, qs)) in y.chunks_exact_mut(16).zip(q.chunks_exact(16)).enumerate() {
            let d = ue4m3(b[s]);
            for (y, &q) in ys.iter_mut().zip(qs) {
                *y = q as f32 * d;
            }
        }
    }
}

/// `ggml_vec_dot_nvfp4_q8_0`, AVX2 order: per 32 weights one FMA whose lanes 0..4 carry the
/// first sub-block's scale `ue4m3(d_s) · d_a` and lanes 4..8 the second's.
pub(crate) fn vec_dot(w: &[u8], a: &[u8]) -> f32 {
    let mut acc = Acc8::new();
    let ab = a.as_chunks::<{ q8_0::BYTES }>().0;
    for (wb, ab) in w.as_chunks::<BYTES>().0.iter().zip(ab.as_chunks::<2>().0) {
        let q = quants(wb);
        for (h, (qh, y)) in q.as_chunks::<32>().0.iter().zip(ab).enumerate() {
            let dy = f16_at(y, 0);
            acc.fma_halves(ue4m3(wb[2 * h]) * dy, ue4m3(wb[2 * h + 1]) * dy, &dot32_sign(qh, arr(y, 2)));
        }
    }
    acc.hsum()
}

block_format!("NVFP4 as a [`BlockFormat`](super::BlockFormat).", Format, "nvfp4", QK, BYTES, Q8_0, true, dequantize, None, None, Some(vec_dot));
