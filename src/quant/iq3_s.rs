//! IQ3_S: super-blocks of 256 weights, 3.4375 bpw, `x = d · (1 + 2·ls) · ±grid`.
//!
//! Layout (110 bytes): `d: f16` | `qs: [u8; 64]` (low 8 bits of a 9-bit `iq3s_grid` index per 4
//! weights) | `qh: [u8; 8]` (the 9th bits, one byte per 32 weights) | `signs: [u8; 32]` (one
//! bit per weight) | `scales: [u8; 4]` (two 4-bit `ls`, one per 32 weights, low nibble first).
//! `dequantize_row_iq3_s` (ggml-quants.c:2607), `ggml_vec_dot_iq3_s_q8_K`
//! (ggml-cpu/arch/x86/quants.c:3384).

use super::iq_tables::IQ3S_GRID;
use super::iquant::{self, per32};
use super::{f16_at, kquant, QK_K};

pub(crate) const BYTES: usize = 2 + 13 * (QK_K / 32) + QK_K / 64;
const QH: usize = 2 + QK_K / 4;
const SIGNS: usize = QH + QK_K / 32;
const SCALES: usize = SIGNS + QK_K / 8;

/// The 256 signed grid values and the 8 factors `1 + 2·ls` (per 32).
#[inline(always)]
fn decode(b: &[u8; BYTES]) -> ([i8; QK_K], [i32; 8]) {
    let mut q = [0i8; QK_K];
    for (k, q8) in q.as_chunks_mut::<8>().0.iter_mut().enumerate() {
        let qh = b[QH + k / 4] as usize;
        let index = |n: usize| b[2 + 2 * k + n] as usize | ((qh << (8 - (2 * (k % 4) + n))) & 256);
        let mut grid = [0u8; 8];
        grid[..4].copy_from_slice(&IQ3S_GRID[index(0)].to_le_bytes());
        grid[4..].copy_from_slice(&IQ3S_GRID[index(1)].to_le_bytes());
        iquant::put_signed(q8, &grid, b[SIGNS + k]);
    }
    (q, std::array::from_fn(|g| 1 + 2 * ((b[SCALES + g / 2] >> (4 * (g % 2))) & 15) as i32))
}

pub(crate) fn dequantize(src: &[u8], dst: &mut [f32]) {
    kquant::dequantize::<BYTES, 8>(src, dst, |b| {
        let (q, sc) = decode(b);
        let d = f16_at(b, 0);
        (q, sc.map(|s| (d * s as f32, 0.0)))
    })
}

/// `ggml_vec_dot_iq3_s_q8_K`, AVX2 order: per-32 scales `2·ls + 1`, plain hsum.
pub(crate) fn vec_dot(w: &[u8], a: &[u8]) -> f32 {
    iquant::vec_dot::<BYTES>(w, a, 1.0, |b, aq| {
        let (q, sc) = decode(b);
        iquant::scaled_dot(&q, aq, &per32(sc))
    })
}

block_format!("IQ3_S as a [`BlockFormat`](super::BlockFormat).", Format, "iq3_s", QK_K, BYTES, Q8K, true, dequantize, None, None, Some(vec_dot));
