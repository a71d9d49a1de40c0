//! Q4_K: super-blocks of 256 weights in 8 sub-blocks of 32,
//! `x = d * sc * q - dmin * m` with 4-bit `q` and 6-bit `sc`, `m`.
//!
//! Layout (144 bytes): `d: f16` | `dmin: f16` | `scales: [u8; 12]` (see
//! `scale_min_k4`) | `qs: [u8; 128]`. Element `e = 64*c + 32*h + l` is the
//! low (h = 0) or high (h = 1) nibble of `qs[32*c + l]`.

use super::common::{nearest_int, pack_scale_min_k4, scale_min_k4, Qkx2};
use super::kquant;
use super::lanes::Acc8;
use super::{arr, f16_at, q8_k, QK_K};

pub(crate) const BYTES: usize = 4 + 12 + QK_K / 2;
const SCALES: usize = 4;
const QS: usize = 16;

/// All 256 quants, 0..=15, in element order.
#[inline(always)]
fn quants(b: &[u8; BYTES]) -> [i8; QK_K] {
    let qs: &[u8; 128] = arr(b, QS);
    let mut q = [0i8; QK_K];
    for (chunk, src) in q.chunks_exact_mut(64).zip(qs.chunks_exact(32)) {
        let (lo, hi) = chunk.split_at_mut(32);
        for ((l, h), &byte) in lo.iter_mut().zip(hi).zip(src) {
            *l = (byte & 0x0f) as i8;
            *h = (byte >> 4) as i8;
        }
    }
    q
}

/// The 8 sub-blocks' (d·sc, dmin·m) of a Q4_K / Q5_K block (d, dmin, scales at 0, 2, 4).
#[inline(always)]
pub(crate) fn sub_scales(b: &[u8]) -> [(f32, f32); 8] {
    let (d, min) = (f16_at(b, 0), f16_at(b, 2));
    let sm: &[u8; 12] = arr(b, SCALES);
    std::array::from_fn(|j| {
        let (sc, m) = scale_min_k4(j, sm);
        (d * sc as f32, min * m as f32)
    })
}

pub(crate) fn dequantize(src: &[u8], dst: &mut [f32]) {
    kquant::dequantize::<BYTES, 8>(src, dst, |b| (quants(b), sub_scales(b)))
}

/// The shared part of `quantize_row_q4_K_ref` / `quantize_row_q5_K_ref`:
/// per-32 (scale, min) by `make_qkx2_quants` with weights `av_x + |x|`,
/// then 6-bit scales (written with d and dmin into the block's first 16 bytes), then
/// requantization. Returns the quants, in `0..=nmax`.
pub(crate) fn quantize_scales_ref(x: &[f32; QK_K], params: &Qkx2, b: &mut [u8]) -> [u8; QK_K] {
    let mut l = [0u8; QK_K];
    let (scales, mins, max_scale, max_min) = kquant::qkx2_sub_blocks::<8>(x, params, &mut l, |xs, w| {
        let mut sum_x2 = 0f32;
        for &v in xs {
            sum_x2 += v * v;
        }
        let av_x = (sum_x2 / 32.0).sqrt();
        for (w, v) in w.iter_mut().zip(xs) {
            *w = av_x + v.abs();
        }
    });

    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let ls: [u8; 8] = std::array::from_fn(|j| (nearest_int(inv_scale * scales[j]) as u8).min(63));
    let lm: [u8; 8] = std::array::from_fn(|j| (nearest_int(inv_min * mins[j]) as u8).min(63));
    let packed = pack_scale_min_k4(&ls, &lm);
    let d_h = super::f32_to_f16(max_scale / 63.0);
    let dmin_h = super::f32_to_f16(max_min / 63.0);
    let (d_all, dmin_all) = (super::f16_to_f32(d_h), super::f16_to_f32(dmin_h));

    let dm: [(f32, f32); 8] = std::array::from_fn(|j| {
        let (sc, m) = scale_min_k4(j, &packed);
        (d_all * sc as f32, dmin_all * m as f32)
    });
    kquant::requantize(x, &dm, (0, params.nmax), |i, q| l[i] = q as u8);
    b[0..2].copy_from_slice(&d_h.to_le_bytes());
    b[2..4].copy_from_slice(&dmin_h.to_le_bytes());
    b[SCALES..SCALES + 12].copy_from_slice(&packed);
    l
}

/// `quantize_row_q4_K_ref`.
pub(crate) fn quantize_ref(src: &[f32], dst: &mut [u8]) {
    let params = Qkx2 {
        nmax: 15,
        rmin: -1.0,
        rdelta: 0.1,
        nstep: 20,
        use_mad: false,
    };
    for (x, b) in kquant::groups::<BYTES>(src, dst) {
        let l = quantize_scales_ref(x, &params, b);
        for (c, out) in b[QS..].chunks_exact_mut(32).enumerate() {
            for (i, o) in out.iter_mut().enumerate() {
                *o = l[64 * c + i] | (l[64 * c + 32 + i] << 4);
            }
        }
    }
}

/// The min correction of Q4_K / Q5_K: `mins[j] * (sum of the 32 activation
/// quants of sub-block j)`, paired as `_mm_madd_epi16` does (4 lanes).
#[inline(always)]
pub(crate) fn min_products(sm: &[u8; 12], bsums: &[i16; 16]) -> [i32; 4] {
    std::array::from_fn(|k| {
        let term = |j: usize| {
            scale_min_k4(j, sm).1 as i32 * (bsums[2 * j] as i32 + bsums[2 * j + 1] as i32)
        };
        term(2 * k) + term(2 * k + 1)
    })
}

/// The integer quant sums of a Q4_K / Q5_K block: [`kquant::scaled_dot`] with each 6-bit
/// sub-block scale (one per 32) applied to both its 16-element halves.
#[inline(always)]
pub(crate) fn scaled_dot(q: &[i8; QK_K], sm: &[u8; 12], aq: &[u8; QK_K]) -> [i32; 8] {
    kquant::scaled_dot(q, aq, &std::array::from_fn(|i| scale_min_k4(i / 2, sm).0 as i32))
}

/// `ggml_vec_dot_q4_K_q8_K`, AVX2 order: 8-lane FMA accumulator for the
/// quants, a separate 4-lane one for the mins, added at the end.
pub(crate) fn vec_dot(w: &[u8], a: &[u8]) -> f32 {
    let mut acc = Acc8::new();
    let mut acc_m = [0f32; 4];
    for (wb, ab) in kquant::blocks::<BYTES>(w, a) {
        let yd = q8_k::d(ab);
        let d = yd * f16_at(wb, 0);
        let dmin = -yd * f16_at(wb, 2);
        let sm: &[u8; 12] = arr(wb, SCALES);
        let prod = min_products(sm, &q8_k::bsums(ab));
        for (m, &p) in acc_m.iter_mut().zip(&prod) {
            *m = dmin.mul_add(p as f32, *m);
        }
        acc.fma(d, &scaled_dot(&quants(wb), sm, q8_k::qs(ab)));
    }
    acc.hsum() + ((acc_m[0] + acc_m[2]) + (acc_m[1] + acc_m[3]))
}

/// The order llama.cpp b11312 multiplies a Q4_K matrix in on x86 once it has repacked it at
/// load (`super::repacked_order`), `arch/x86/repack.cpp`, AVX2 and AVX-512 alike. Per pair of
/// sub-blocks (`gemm`, `ggml_gemm_q4_K_8x8_q8_K`: the activation rows of a `ggml_mul_mat` in
/// whole groups of four) or per super-block (`ggml_gemv_q4_K_8x8_q8_K`: the last `n % 4` rows,
/// and every row of `ggml_mul_mat_id`) the scaled quant sum and the mins' sum, exact in 32 bits,
/// are converted and added by one FMA with `d · d_a` and one with `dmin · d_a` into two
/// accumulators, subtracted at the end.
pub(crate) fn vec_dot_repacked(w: &[u8], a: &[u8], gemm: bool) -> f32 {
    let (mut acc, mut acc_m) = (0f32, 0f32);
    for (wb, ab) in kquant::blocks::<BYTES>(w, a) {
        let (d, dmin) = (f16_at(wb, 0) * q8_k::d(ab), f16_at(wb, 2) * q8_k::d(ab));
        let sm: &[u8; 12] = arr(wb, SCALES);
        let (q, aq, bsums) = (quants(wb), q8_k::qs(ab), q8_k::bsums(ab));
        let (mut isum, mut imin) = (0i32, 0i32);
        for sb in 0..4 {
            for j in 2 * sb..2 * sb + 2 {
                let (sc, m) = scale_min_k4(j, sm);
                let dot: i32 = (32 * j..32 * j + 32).map(|e| q[e] as i32 * aq[e] as i8 as i32).sum();
                isum += sc as i32 * dot;
                imin += m as i32 * (bsums[2 * j] as i32 + bsums[2 * j + 1] as i32);
            }
            if gemm {
                acc = (isum as f32).mul_add(d, acc);
                acc_m = (imin as f32).mul_add(dmin, acc_m);
                (isum, imin) = (0, 0);
            }
        }
        if !gemm {
            acc = (isum as f32).mul_add(d, acc);
            acc_m = (imin as f32).mul_add(dmin, acc_m);
        }
    }
    acc - acc_m
}

block_format!("Q4_K as a [`BlockFormat`](super::BlockFormat).", Format, "q4_K", QK_K, BYTES, Q8K, true, dequantize, Some(quantize_ref), None, Some(vec_dot));

#[cfg(test)]
pub(crate) mod tests {
    use crate::quant::test_util::{f16_field, set_f16_field, weight, Rng, F32_REL};
    use crate::quant::GgmlType;

    fn randomize(rng: &mut Rng, b: &mut [u8]) {
        let d = rng.f16_bits(-12, -4, false);
        let dmin = rng.f16_bits(-12, -4, false);
        set_f16_field(b, 0, d);
        set_f16_field(b, 2, dmin);
    }

    /// Independent decoding of the 12 scale bytes, the way the x86 kernels
    /// do it (three little-endian u32 words and kmask shuffles):
    /// returns (scales, mins).
    pub(crate) fn unpack_scales(s: &[u8]) -> ([u8; 8], [u8; 8]) {
        let w = |i: usize| u32::from_le_bytes([s[4 * i], s[4 * i + 1], s[4 * i + 2], s[4 * i + 3]]);
        let (k1, k2, k3) = (0x3f3f_3f3fu32, 0x0f0f_0f0fu32, 0x0303_0303u32);
        let (u0, u1, u2) = (w(0), w(1), w(2));
        let scales = [u0 & k1, (u2 & k2) | (((u0 >> 6) & k3) << 4)];
        let mins = [u1 & k1, ((u2 >> 4) & k2) | (((u1 >> 6) & k3) << 4)];
        let bytes = |v: [u32; 2]| {
            let mut o = [0u8; 8];
            o[..4].copy_from_slice(&v[0].to_le_bytes());
            o[4..].copy_from_slice(&v[1].to_le_bytes());
            o
        };
        (bytes(scales), bytes(mins))
    }

    fn decode(b: &[u8]) -> Vec<(f64, f64)> {
        let d = f16_field(b, 0);
        let dmin = f16_field(b, 2);
        let (sc, mn) = unpack_scales(&b[4..16]);
        (0..256)
            .map(|e| {
                let byte = b[16 + 32 * (e / 64) + e % 32];
                let q = if e % 64 < 32 { byte & 15 } else { byte >> 4 };
                let a = d * sc[e / 32] as f64 * q as f64;
                let m = dmin * mn[e / 32] as f64;
                (a - m, (a.abs() + m.abs()) * F32_REL)
            })
            .collect()
    }

    #[test]
    fn layout_dot_and_roundtrip() {
        weight::check_format(GgmlType::Q4K, 91, randomize, decode, |x| {
                        weight::span0(x) / 15.0
        });
        let e = weight::rms_rel_error(GgmlType::Q4K, 94);
        assert!(e < 0.12, "rms rel error {e}");
    }
}
