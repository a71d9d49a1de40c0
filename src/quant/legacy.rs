//! What the 32-element "legacy" weight formats share (Q4_0, Q5_0 with a scale; Q4_1, Q5_1 with
//! a scale and a min): the block loops of dequantization and of the dot products with their
//! activation formats, in the AVX2 kernels' order. Each format supplies only how its quants
//! unpack (`quants`: the block's 32 values, already offset where the format is symmetric).

use super::lanes::{dot32, Acc8};
use super::{arr, f16_at, q8_0, q8_1};

pub(crate) const QK: usize = 32;

/// `x = d · q` (Q4_0, Q5_0; `d` is the block's first f16).
#[inline(always)]
pub(crate) fn dequantize_scaled<const B: usize>(src: &[u8], dst: &mut [f32], quants: impl Fn(&[u8; B]) -> [i8; QK]) {
    for (b, y) in src.as_chunks::<B>().0.iter().zip(dst.as_chunks_mut::<QK>().0) {
        let d = f16_at(b, 0);
        for (y, q) in y.iter_mut().zip(quants(b)) {
            *y = q as f32 * d;
        }
    }
}

/// `x = d · q + m` (Q4_1, Q5_1; `d` and `m` the block's first two f16).
#[inline(always)]
pub(crate) fn dequantize_with_min<const B: usize>(src: &[u8], dst: &mut [f32], quants: impl Fn(&[u8; B]) -> [i8; QK]) {
    for (b, y) in src.as_chunks::<B>().0.iter().zip(dst.as_chunks_mut::<QK>().0) {
        let d = f16_at(b, 0);
        let m = f16_at(b, 2);
        for (y, q) in y.iter_mut().zip(quants(b)) {
            *y = q as f32 * d + m;
        }
    }
}

/// `ggml_vec_dot_q{4,5}_0_q8_0`, AVX2 order: one lane FMA per block with d_w·d_a.
#[inline(always)]
pub(crate) fn vec_dot_q8_0<const B: usize>(w: &[u8], a: &[u8], quants: impl Fn(&[u8; B]) -> [i8; QK]) -> f32 {
    let mut acc = Acc8::new();
    for (wb, ab) in w.as_chunks::<B>().0.iter().zip(a.as_chunks::<{ q8_0::BYTES }>().0) {
        let d = f16_at(wb, 0) * f16_at(ab, 0);
        acc.fma(d, &dot32(&quants(wb), arr(ab, 2)));
    }
    acc.hsum()
}

/// `ggml_vec_dot_q{4,5}_1_q8_1`, AVX2 order: lane FMAs with d_w·d_a, plus the scalar
/// `summs += m · s` (contracted to an FMA, as the compiler does upstream).
#[inline(always)]
pub(crate) fn vec_dot_q8_1<const B: usize>(w: &[u8], a: &[u8], quants: impl Fn(&[u8; B]) -> [i8; QK]) -> f32 {
    let mut acc = Acc8::new();
    let mut summs = 0f32;
    for (wb, ab) in w.as_chunks::<B>().0.iter().zip(a.as_chunks::<{ q8_1::BYTES }>().0) {
        summs = f16_at(wb, 2).mul_add(f16_at(ab, 2), summs);
        let d = f16_at(wb, 0) * f16_at(ab, 0);
        acc.fma(d, &dot32(&quants(wb), arr(ab, 4)));
    }
    acc.hsum() + summs
}
