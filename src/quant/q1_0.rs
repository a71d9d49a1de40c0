//! Q1_0: blocks of 128 weights, 1.125 bpw, `x = ±d` (bit set: `+d`).
//!
//! Layout (18 bytes): `d: f16` | `qs: [u8; 16]`, bit `j % 8` of byte `j / 8` for weight `j`.
//! One block spans four Q8_0 activation blocks. `dequantize_row_q1_0` (ggml-quants.c:419),
//! `ggml_vec_dot_q1_0_q8_0` (ggml-cpu/arch/x86/quants.c:555).

use super::iquant::sign_i8;
use super::lanes::Acc8;
use super::{arr, f16_at, q8_0};

pub(crate) const QK: usize = 128;
pub(crate) const BYTES: usize = 2 + QK / 8;

#[inline(always)]
fn bit(b: &[u8; BYTES], j: usize) -> bool {
    (b[2 + j / 8] >> (j % 8)) & 1 == 1
}

pub(crate) fn dequantize(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.as_chunks::<BYTES>().0.iter().zip(dst.as_chunks_mut::<QK>().0) {
        let d = f16_at(b, 0);
        for (j, y) in y.iter_mut().enumerate() {
            *y = if bit(b, j) { d } else { -d };
        }
    }
}

/// `ggml_vec_dot_q1_0_q8_0`, AVX2 order: per Q8_0 block the activations negated (wrapping)
/// where the bit is clear and summed in lanes; the four blocks' lanes scaled by their `d_a`
/// into a block accumulator (a multiply, then three FMAs), which one FMA with `d_w` adds to
/// the row's; `hsum`.
pub(crate) fn vec_dot(w: &[u8], a: &[u8]) -> f32 {
    let mut acc = Acc8::new();
    let ab = a.as_chunks::<{ q8_0::BYTES }>().0;
    for (wb, ab) in w.as_chunks::<BYTES>().0.iter().zip(ab.as_chunks::<4>().0) {
        let lanes = |k: usize| -> [i32; 8] {
            let y: &[u8; 32] = arr(&ab[k], 2);
            std::array::from_fn(|l| {
                (4 * l..4 * l + 4).map(|i| sign_i8(y[i] as i8, if bit(wb, 32 * k + i) { 1 } else { -1 }) as i32).sum()
            })
        };
        let mut blk = Acc8::mul(f16_at(&ab[0], 0), &lanes(0));
        for (k, y) in ab.iter().enumerate().skip(1) {
            blk.fma(f16_at(y, 0), &lanes(k));
        }
        acc.fma_acc(f16_at(wb, 0), &blk);
    }
    acc.hsum()
}

block_format!("Q1_0 as a [`BlockFormat`](super::BlockFormat).", Format, "q1_0", QK, BYTES, Q8_0, true, dequantize, None, None, Some(vec_dot));
