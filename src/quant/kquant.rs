//! What the 256-element K-quant weight formats share (Q2_K, Q3_K, Q6_K with 16 sub-blocks of
//! 16; Q4_K, Q5_K with 8 sub-blocks of 32): the super-block loops of dequantization, of the
//! dot product with Q8_K activations (in the AVX2 kernels' lane order) and of the reference
//! quantizers' requantization step. Each format supplies only its layout: how its quants and
//! scales unpack and pack. Must never change a float operation's order: the SIMD kernels and
//! llama.cpp's goldens are compared against these loops bit for bit.

use super::common::{make_qkx2_quants, nearest_int, Qkx2};
use super::lanes::dot32;
use super::{q8_k, QK_K};

/// The super-blocks of a weight row (`B` bytes each) paired with the Q8_K blocks of the
/// activation row.
#[inline(always)]
pub(crate) fn blocks<'a, const B: usize>(
    w: &'a [u8],
    a: &'a [u8],
) -> impl Iterator<Item = (&'a [u8; B], &'a [u8; q8_k::BYTES])> {
    w.as_chunks::<B>().0.iter().zip(a.as_chunks::<{ q8_k::BYTES }>().0)
}

/// The 256-element groups of a row to quantize paired with their `B`-byte super-blocks.
#[inline(always)]
pub(crate) fn groups<'a, const B: usize>(
    src: &'a [f32],
    dst: &'a mut [u8],
) -> impl Iterator<Item = (&'a [f32; QK_K], &'a mut [u8; B])> {
    src.as_chunks::<QK_K>().0.iter().zip(dst.as_chunks_mut::<B>().0)
}

/// Dequantizes super-blocks of `B` bytes as `y = d_j · q − m_j` in each of the `N`
/// sub-blocks `j` (`QK_K / N` elements); `block` gives a block's 256 quants (already offset
/// where the format is symmetric) and its `N` pairs `(d_j, m_j)` (`m_j = 0` without mins).
#[inline(always)]
pub(crate) fn dequantize<const B: usize, const N: usize>(
    src: &[u8],
    dst: &mut [f32],
    block: impl Fn(&[u8; B]) -> ([i8; QK_K], [(f32, f32); N]),
) {
    for (b, y) in src.as_chunks::<B>().0.iter().zip(dst.as_chunks_mut::<QK_K>().0) {
        let (q, dm) = block(b);
        for ((ys, qs), &(d, m)) in y.chunks_exact_mut(QK_K / N).zip(q.chunks_exact(QK_K / N)).zip(&dm) {
            for (y, &q) in ys.iter_mut().zip(qs) {
                *y = d * q as f32 - m;
            }
        }
    }
}

/// The integer part of a super-block's dot product: the 8 groups of 32 elements each give
/// `dot32`'s 8 lane sums, lanes 0..4 (the group's first 16 elements) scaled by `sc16[2g]` and
/// lanes 4..8 by `sc16[2g + 1]`, accumulated per lane — the AVX2 kernels' `madd` of the
/// per-16 scales. Formats with sub-blocks of 32 pass each scale twice.
#[inline(always)]
pub(crate) fn scaled_dot(q: &[i8; QK_K], aq: &[u8; QK_K], sc16: &[i32; 16]) -> [i32; 8] {
    scaled_dot_with(q, aq, sc16, dot32)
}

/// [`scaled_dot`] with the 32-element lane sums of `lanes` (the IQ formats' `sign_epi8`
/// products, `iquant::dot32_sign`).
#[inline(always)]
pub(crate) fn scaled_dot_with(
    q: &[i8; QK_K],
    aq: &[u8; QK_K],
    sc16: &[i32; 16],
    lanes: impl Fn(&[i8; 32], &[u8; 32]) -> [i32; 8],
) -> [i32; 8] {
    let mut sumi = [0i32; 8];
    for (g, (qg, ag)) in q.as_chunks::<32>().0.iter().zip(aq.as_chunks::<32>().0).enumerate() {
        let lanes = lanes(qg, ag);
        let (lo, hi) = (sc16[2 * g], sc16[2 * g + 1]);
        for k in 0..8 {
            sumi[k] += if k < 4 { lo } else { hi } * lanes[k];
        }
    }
    sumi
}

/// The reference quantizers' last step: with the stored (rounded) sub-block scales `d_j` and
/// mins `m_j`, element `i` of sub-block `j` becomes `nearest((x_i + m_j) / d_j)` clamped to
/// `lo..=hi`, stored (through `store`) as `q − lo`. Sub-blocks with `d_j = 0` are skipped,
/// keeping the first pass's quants as ggml does.
#[inline(always)]
pub(crate) fn requantize<const N: usize>(
    x: &[f32; QK_K],
    dm: &[(f32, f32); N],
    (lo, hi): (i32, i32),
    mut store: impl FnMut(usize, i32),
) {
    let sub = QK_K / N;
    for (j, &(d, m)) in dm.iter().enumerate() {
        if d == 0.0 {
            continue;
        }
        for i in sub * j..sub * (j + 1) {
            let q = nearest_int((x[i] + m) / d).clamp(lo, hi);
            store(i, q - lo);
        }
    }
}

/// Packs four 2-bit planes: byte `i` of each 32-byte run `n` holds elements
/// `128n + i + 32k` (k = 0..4) at bits `2k..2k+2` — the `qs` of Q2_K and Q3_K.
#[inline(always)]
pub(crate) fn pack_2bit(l: impl Fn(usize) -> u8, qs: &mut [u8]) {
    for n in 0..2 {
        for i in 0..32 {
            let e = 128 * n + i;
            qs[32 * n + i] = l(e) | (l(e + 32) << 2) | (l(e + 64) << 4) | (l(e + 96) << 6);
        }
    }
}

/// The inverse of [`pack_2bit`]: all 256 2-bit quants in element order.
#[inline(always)]
pub(crate) fn unpack_2bit(qs: &[u8; 64]) -> [i8; QK_K] {
    std::array::from_fn(|e| {
        let (n, s, l) = (e / 128, e % 128 / 32, e % 32);
        ((qs[32 * n + l] >> (2 * s)) & 3) as i8
    })
}

/// The first pass of the Q2_K / Q4_K / Q5_K reference quantizers: `make_qkx2_quants` on each
/// of the `N` sub-blocks with the weights `weights` writes for it (quants into `l`). Returns
/// the sub-blocks' scales and mins and the largest of each (0 when none is positive).
#[inline(always)]
pub(crate) fn qkx2_sub_blocks<const N: usize>(
    x: &[f32; QK_K],
    params: &Qkx2,
    l: &mut [u8; QK_K],
    weights: impl Fn(&[f32], &mut [f32]),
) -> ([f32; N], [f32; N], f32, f32) {
    let sub = QK_K / N;
    let (mut laux, mut w) = ([0u8; 32], [0f32; 32]);
    let (mut scales, mut mins) = ([0f32; N], [0f32; N]);
    let (mut max_scale, mut max_min) = (0f32, 0f32);
    for j in 0..N {
        let xs = &x[sub * j..sub * (j + 1)];
        weights(xs, &mut w[..sub]);
        let (scale, min) =
            make_qkx2_quants(params, xs, &w[..sub], &mut l[sub * j..sub * (j + 1)], &mut laux[..sub]);
        scales[j] = scale;
        mins[j] = min;
        if scale > max_scale {
            max_scale = scale;
        }
        if min > max_min {
            max_min = min;
        }
    }
    (scales, mins, max_scale, max_min)
}
