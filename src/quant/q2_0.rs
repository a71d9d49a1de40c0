//! Q2_0: blocks of 64 weights, 2.25 bpw, `x = (q − 1) · d`, q ∈ 0..=3.
//!
//! Layout (18 bytes): `d: f16` | `qs: [u8; 16]`, bits `2(j % 4)..` of byte `j / 4` for weight
//! `j`. One block spans two Q8_0 activation blocks. `dequantize_row_q2_0`
//! (ggml-quants.c:439); x86 has no kernel of its own: `ggml_vec_dot_q2_0_q8_0_generic`
//! (ggml-cpu/quants.c:177), whose float steps the compiler keeps apart (no FMA; checked in
//! the disassembly of the reference build).

use super::{arr, f16_at, q8_0};

pub(crate) const QK: usize = 64;
pub(crate) const BYTES: usize = 2 + QK / 4;

#[inline(always)]
fn quants(b: &[u8; BYTES]) -> [i8; QK] {
    std::array::from_fn(|j| ((b[2 + j / 4] >> (2 * (j % 4))) & 3) as i8 - 1)
}

pub(crate) fn dequantize(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.as_chunks::<BYTES>().0.iter().zip(dst.as_chunks_mut::<QK>().0) {
        let d = f16_at(b, 0);
        for (y, q) in y.iter_mut().zip(quants(b)) {
            *y = q as f32 * d;
        }
    }
}

/// `ggml_vec_dot_q2_0_q8_0_generic`: per Q8_0 block `sumi += d_a · Σ q·y`, per block
/// `sumf += d_w · sumi`, each a multiply then an add.
pub(crate) fn vec_dot(w: &[u8], a: &[u8]) -> f32 {
    let mut sumf = 0f32;
    let ab = a.as_chunks::<{ q8_0::BYTES }>().0;
    for (wb, ab) in w.as_chunks::<BYTES>().0.iter().zip(ab.as_chunks::<2>().0) {
        let q = quants(wb);
        let mut sumi = 0f32;
        for (qk, y) in q.as_chunks::<32>().0.iter().zip(ab) {
            let yq: &[u8; 32] = arr(y, 2);
            let s: i32 = qk.iter().zip(yq).map(|(&q, &y)| q as i32 * y as i8 as i32).sum();
            sumi += f16_at(y, 0) * s as f32;
        }
        sumf += f16_at(wb, 0) * sumi;
    }
    sumf
}

block_format!("Q2_0 as a [`BlockFormat`](super::BlockFormat).", Format, "q2_0", QK, BYTES, Q8_0, true, dequantize, None, None, Some(vec_dot));
