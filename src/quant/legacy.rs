//! What the 32-element "legacy" weight formats share (Q4_0, Q5_0 with a scale; Q4_1, Q5_1 with
//! a scale and a min): the block loops of dequantization and of the dot products with their
//! activation formats, in the AVX2 kernels' order, and of the reference quantizers; the
//! nibble + high-bit packing of the quants. Each format supplies only where its fields are
//! (`quants`: the block's 32 values, already offset where the format is symmetric). Must never
//! change a float operation's order: the SIMD kernels and llama.cpp's goldens are compared
//! against these loops bit for bit.

use super::common::{min_max, signed_absmax};
use super::iquant::dot32_sign;
use super::lanes::{dot32, Acc8};
use super::{arr, f16_at, put_f16, q8_0, q8_1};
// `x = d · q` and the dot product with Q8_0 activations are Q8_0's own loops (`q8_0.rs`), which
// the formats with a scale share; they live there so that Q8_0 and Q8_1 need nothing from here.
pub(crate) use super::q8_0::{dequantize_scaled, vec_dot_q8_0};

pub(crate) const QK: usize = 32;

/// The 32 quants of a block: element `j` in the low nibble of `qs[j]`, element `j + 16` in
/// its high nibble, and (5-bit formats) bit `e` of `qh` the 5th bit of element `e`.
#[inline(always)]
pub(crate) fn unpack(qs: &[u8; 16], qh: u32, offset: i8) -> [i8; QK] {
    std::array::from_fn(|e| {
        let nibble = if e < 16 { qs[e] & 0x0f } else { qs[e - 16] >> 4 };
        (nibble | ((((qh >> e) & 1) as u8) << 4)) as i8 - offset
    })
}

/// The inverse of [`unpack`] (offset 0): the `qs` nibbles and the `qh` high bits.
#[inline(always)]
pub(crate) fn pack(q: &[u8; QK]) -> ([u8; 16], u32) {
    let qs = std::array::from_fn(|j| (q[j] & 0x0f) | ((q[j + 16] & 0x0f) << 4));
    let qh = q.iter().enumerate().fold(0u32, |h, (e, &v)| h | (((v >> 4) & 1) as u32) << e);
    (qs, qh)
}

/// `quantize_row_q{4,5}_0_ref`: `d = max / -(nmax + 1)/2` with the signed extreme (written
/// at 0), quants `trunc(x / d + (nmax + 1)/2 + 0.5)` capped at `nmax`, handed to `write`.
#[inline(always)]
pub(crate) fn quantize_scaled<const B: usize>(src: &[f32], dst: &mut [u8], nmax: i8, write: impl Fn(&mut [u8; B], [u8; QK])) {
    let half = (nmax as f32 + 1.0) / 2.0;
    for (x, b) in src.as_chunks::<QK>().0.iter().zip(dst.as_chunks_mut::<B>().0) {
        let (_, max) = signed_absmax(x);
        let d = max / -half;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        put_f16(b, 0, d);
        let round = half + 0.5;
        write(b, x.map(|v| ((v * id + round) as i8).min(nmax) as u8));
    }
}

/// `quantize_row_q{4,5}_1_ref`: `d = (max − min) / nmax` and `min` (written at 0 and 2),
/// quants `trunc((x − min) / d + 0.5)` capped at `nmax`, handed to `write`.
#[inline(always)]
pub(crate) fn quantize_with_min<const B: usize>(src: &[f32], dst: &mut [u8], nmax: i8, write: impl Fn(&mut [u8; B], [u8; QK])) {
    for (x, b) in src.as_chunks::<QK>().0.iter().zip(dst.as_chunks_mut::<B>().0) {
        let (min, max) = min_max(x);
        let d = (max - min) / nmax as f32;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        put_f16(b, 0, d);
        put_f16(b, 2, min);
        write(b, x.map(|v| (((v - min) * id + 0.5) as i8).min(nmax) as u8));
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

/// `ggml_vec_dot_iq4_nl_q8_0` / `ggml_vec_dot_mxfp4_q8_0`, AVX2 order: blocks in pairs, even
/// ones into one 8-lane FMA accumulator and odd ones into another (`sign_epi8` products, scale
/// `d_a · d_w` with `d_w = scale(block)`), `hsum(acc1 + acc2)`; an odd last block is added as
/// `sumf + d · sumi` (the scalar tail, not contracted upstream).
#[inline(always)]
pub(crate) fn vec_dot_q8_0_pairs<const B: usize>(
    w: &[u8],
    a: &[u8],
    quants: impl Fn(&[u8; B]) -> [i8; QK],
    scale: impl Fn(&[u8; B]) -> f32,
) -> f32 {
    let (wb, ab) = (w.as_chunks::<B>().0, a.as_chunks::<{ q8_0::BYTES }>().0);
    let mut acc = [Acc8::new(); 2];
    let pairs = wb.len() / 2 * 2;
    for (i, (wb, ab)) in wb[..pairs].iter().zip(ab).enumerate() {
        let d = f16_at(ab, 0) * scale(wb);
        acc[i % 2].fma(d, &dot32_sign(&quants(wb), arr(ab, 2)));
    }
    let mut sumf = acc[0].add(&acc[1]).hsum();
    if let (Some(wb), Some(ab)) = (wb[pairs..].first(), ab.get(pairs)) {
        let d = f16_at(ab, 0) * scale(wb);
        sumf += d * dot32(&quants(wb), arr(ab, 2)).iter().sum::<i32>() as f32;
    }
    sumf
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

#[cfg(test)]
mod tests {
    use crate::quant::common::min_max;
    use crate::quant::test_util::{f16_field, set_f16_field, weight, Rng, F32_REL};
    use crate::quant::GgmlType;

    /// A valid block: a finite `d` at 0 and, for Q4_1 / Q5_1, a finite `m` at 2.
    fn randomize(rng: &mut Rng, b: &mut [u8], with_min: bool) {
        if with_min {
            set_f16_field(b, 0, rng.f16_bits(-12, 0, false));
            set_f16_field(b, 2, rng.f16_bits(-8, 3, true));
        } else {
            set_f16_field(b, 0, rng.f16_bits(-12, 2, true));
        }
    }

    /// Independent decoding from ggml-common.h's block_q4_0 / q4_1 / q5_0 / q5_1: `d`, then
    /// `m` (`_1`), then `qh` (5-bit: bit `i` of the little-endian u32 is element `i`'s 5th
    /// bit), then `qs` (element `i < 16` in the low nibble of `qs[i]`, `i + 16` in its high
    /// one); the `_0` formats subtract half the range.
    fn decode(b: &[u8], with_min: bool, five_bit: bool) -> Vec<(f64, f64)> {
        let d = f16_field(b, 0);
        let m = if with_min { f16_field(b, 2) } else { 0.0 };
        let qh = if with_min { 4 } else { 2 };
        let qs = qh + if five_bit { 4 } else { 0 };
        let offset = match (with_min, five_bit) {
            (true, _) => 0,
            (false, false) => 8,
            (false, true) => 16,
        };
        (0..32)
            .map(|i| {
                let byte = b[qs + i % 16];
                let nib = if i < 16 { byte & 15 } else { byte >> 4 };
                let hi = if five_bit { (b[qh + i / 8] >> (i % 8)) & 1 } else { 0 };
                let dq = d * ((nib as i32 + 16 * hi as i32) - offset) as f64;
                (dq + m, (dq.abs() + m.abs()) * F32_REL)
            })
            .collect()
    }

    fn check(ty: GgmlType, seed: u64, with_min: bool, five_bit: bool, bound: impl Fn(&[f32]) -> f64) {
        let randomize = move |rng: &mut Rng, b: &mut [u8]| randomize(rng, b, with_min);
        let decode = move |b: &[u8]| decode(b, with_min, five_bit);
        weight::check_format(ty, seed, randomize, decode, bound);
    }

    /// Half a step (max − min)/nmax, plus the f16 rounding of d (× nmax) and m.
    fn min_bound(x: &[f32], nmax: f32) -> f64 {
        let (min, max) = min_max(x);
        let step = ((max - min) / nmax) as f64;
        0.5 * step + (max.abs() + min.abs()) as f64 * 2f64.powi(-10)
    }

    // The `_0` formats: step |d| = amax / (nmax + 1)/2; the value opposite the extreme may
    // clamp (error <= |d|).
    #[test]
    fn q4_0() {
        check(GgmlType::Q4_0, 1, false, false, |x| weight::amax(x) / 8.0 * 1.002);
    }

    #[test]
    fn q5_0() {
        check(GgmlType::Q5_0, 21, false, true, |x| weight::amax(x) / 16.0 * 1.002);
    }

    #[test]
    fn q4_1() {
        check(GgmlType::Q4_1, 11, true, false, |x| min_bound(x, 15.0));
    }

    #[test]
    fn q5_1() {
        check(GgmlType::Q5_1, 31, true, true, |x| min_bound(x, 31.0));
    }
}
