//! What the 256-element IQ weight formats share (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S,
//! IQ4_XS; IQ1_S and IQ1_M for the sign products): grid lookups with sign bits, the
//! `sign_epi8` products of ggml-cpu's AVX2 kernels, and their super-block dot-product loop.
//! The tables are in `iq_tables.rs` (upstream's, verbatim). Each format supplies only its
//! layout. Must never change a float operation's order: the SIMD kernels and llama.cpp's
//! outputs are compared against these loops bit for bit.
//!
//! The x86 kernels multiply a weight byte `w` with an activation byte `a` as
//! `maddubs(|w|, sign_epi8(a, w))` (directly, or with the sign bits applied to the
//! activations by `sign_epi8` / `xor`+`sub`): a negated `-128` stays `-128`. The
//! Q8_K / Q8_0 quantizers never produce `-128`, but arbitrary activation bytes can, so the
//! reference does the same wrapping negation.

use super::kquant;
use super::lanes::Acc8;
use super::{f16_at, q8_k, QK_K};

/// `_mm256_sign_epi8(a, w)` on one byte: `a` where `w > 0`, `-a` (wrapping) where `w < 0`,
/// 0 where `w == 0`.
#[inline(always)]
pub(crate) fn sign_i8(a: i8, w: i8) -> i8 {
    match w.signum() {
        1 => a,
        -1 => a.wrapping_neg(),
        _ => 0,
    }
}

/// Per-lane sums of `|w| · sign_epi8(a, w)` over 32 elements: lane `k` = elements
/// `4k..4k+4` (the `maddubs` + `madd` of the AVX2 kernels).
#[inline(always)]
pub(crate) fn dot32_sign(w: &[i8; 32], a: &[u8; 32]) -> [i32; 8] {
    let mut out = [0i32; 8];
    for ((o, wc), ac) in out.iter_mut().zip(w.as_chunks::<4>().0).zip(a.as_chunks::<4>().0) {
        *o = wc
            .iter()
            .zip(ac)
            .map(|(&x, &y)| x.unsigned_abs() as i32 * sign_i8(y as i8, x) as i32)
            .sum();
    }
    out
}

/// [`kquant::scaled_dot`] with the `sign_epi8` products: lanes 0..4 of 32-element group `g`
/// scaled by `sc16[2g]`, lanes 4..8 by `sc16[2g + 1]`.
#[inline(always)]
pub(crate) fn scaled_dot(q: &[i8; QK_K], aq: &[u8; QK_K], sc16: &[i32; 16]) -> [i32; 8] {
    kquant::scaled_dot_with(q, aq, sc16, dot32_sign)
}

/// Each of 8 per-32 scales for both 16-element halves of its group.
#[inline(always)]
pub(crate) fn per32(sc: [i32; 8]) -> [i32; 16] {
    std::array::from_fn(|i| sc[i / 2])
}

/// The IQ kernels' super-block loop: per block one lane FMA with `d_w · d_a` (`block` gives
/// the weight block's f16 scale and its integer lane sums), then `factor · hsum`.
#[inline(always)]
pub(crate) fn vec_dot<const B: usize>(
    w: &[u8],
    a: &[u8],
    factor: f32,
    block: impl Fn(&[u8; B], &[u8; QK_K]) -> [i32; 8],
) -> f32 {
    let mut acc = Acc8::new();
    for (wb, ab) in kquant::blocks::<B>(w, a) {
        let d = f16_at(wb, 0) * q8_k::d(ab);
        acc.fma(d, &block(wb, q8_k::qs(ab)));
    }
    factor * acc.hsum()
}

/// Writes the 8 grid bytes `grid` into `q`, negated where bit `j` of `signs` is set.
#[inline(always)]
pub(crate) fn put_signed(q: &mut [i8], grid: &[u8], signs: u8) {
    for (j, (q, &g)) in q.iter_mut().zip(grid).enumerate() {
        let g = g as i8;
        *q = if signs >> j & 1 == 1 { -g } else { g };
    }
}

/// Two 4-bit scales per byte, low nibble first (IQ2_XS, IQ2_S: one per 16 weights).
#[inline(always)]
pub(crate) fn nibbles16(sc: &[u8; 8]) -> [u8; 16] {
    std::array::from_fn(|i| (sc[i / 2] >> (4 * (i % 2))) & 15)
}

/// The 4-bit scales `(0.5 + ls) · d · f` of IQ2_XXS / IQ2_XS / IQ2_S / IQ3_XXS as
/// ggml's dequantizers compute them: `d * (0.5f + ls) * f`.
#[inline(always)]
pub(crate) fn half_scales<const N: usize>(d: f32, ls: &[u8; N], f: f32) -> [(f32, f32); N] {
    ls.map(|s| (d * (0.5 + s as f32) * f, 0.0))
}

/// The formats with 4-bit `ls` per 32 or 16 weights (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS; `decode`
/// gives a block's signed grid values and its `N` scales): dequantized as
/// `d · (0.5 + ls) · f · q` ...
#[inline(always)]
pub(crate) fn dequantize_half<const B: usize, const N: usize>(src: &[u8], dst: &mut [f32], f: f32, decode: impl Fn(&[u8; B]) -> ([i8; QK_K], [u8; N])) {
    kquant::dequantize::<B, N>(src, dst, |b| {
        let (q, ls) = decode(b);
        (q, half_scales(f16_at(b, 0), &ls, f))
    })
}

/// ... and multiplied with the factors `2·ls + 1`, `factor · hsum` ([`vec_dot`]).
#[inline(always)]
pub(crate) fn vec_dot_half<const B: usize, const N: usize>(w: &[u8], a: &[u8], factor: f32, decode: impl Fn(&[u8; B]) -> ([i8; QK_K], [u8; N])) -> f32 {
    vec_dot::<B>(w, a, factor, |b, aq| {
        let (q, ls) = decode(b);
        scaled_dot(&q, aq, &std::array::from_fn(|i| 2 * ls[i * N / 16] as i32 + 1))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sign_wraps_like_sign_epi8() {
        assert_eq!(sign_i8(-128, -1), -128);
        assert_eq!(sign_i8(-128, 1), -128);
        assert_eq!(sign_i8(5, -3), -5);
        assert_eq!(sign_i8(5, 0), 0);
        let mut w = [0i8; 32];
        let mut a = [0u8; 32];
        w[0] = -3;
        a[0] = 0x80; // -128: AVX2 gives 3 * -128, not 3 * 128
        w[5] = 7;
        a[5] = 10;
        let l = dot32_sign(&w, &a);
        assert_eq!(l[0], -384);
        assert_eq!(l[1], 70);
    }
}
