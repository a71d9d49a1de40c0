//! Q6_K: super-blocks of 256 weights in 16 sub-blocks of 16,
//! `x = d * sc * (q - 32)` with 6-bit `q` and int8 `sc`.
//!
//! Layout (210 bytes): `ql: [u8; 128]` | `qh: [u8; 64]` | `scales: [i8; 16]`
//! | `d: f16`. Element `e = 128*n + 32*s + l` has its low 4 bits in
//! `ql[64*n + 32*(s%2) + l]` (low nibble for s < 2, high otherwise) and its
//! top 2 bits at `2s` of `qh[32*n + l]`.

use super::common::{make_qx_quants_rmse1, nearest_int, signed_absmax, GROUP_MAX_EPS};
use super::kquant;
use super::lanes::Acc8;
use super::{arr, f16_at, put_f16, q8_k, QK_K};

pub(crate) const BYTES: usize = QK_K / 2 + QK_K / 4 + QK_K / 16 + 2;
const QH: usize = 128;
const SCALES: usize = 192;
const D: usize = 208;

/// All 256 quants, unsigned 0..=63 (the stored value, before the -32).
#[inline(always)]
fn quants(b: &[u8; BYTES]) -> [i8; QK_K] {
    let ql: &[u8; 128] = arr(b, 0);
    let qh: &[u8; 64] = arr(b, QH);
    std::array::from_fn(|e| {
        let (n, s, l) = (e / 128, e % 128 / 32, e % 32);
        let lowbyte = ql[64 * n + 32 * (s % 2) + l];
        let low = if s < 2 { lowbyte & 0x0f } else { lowbyte >> 4 };
        let high = (qh[32 * n + l] >> (2 * s)) & 3;
        (low | (high << 4)) as i8
    })
}

#[inline(always)]
fn scales(b: &[u8; BYTES]) -> [i8; 16] {
    arr::<16>(b, SCALES).map(|v| v as i8)
}

/// The 16 sub-blocks' (d·sc, 0).
#[inline(always)]
fn sub_scales(b: &[u8; BYTES]) -> [(f32, f32); 16] {
    let d = f16_at(b, D);
    scales(b).map(|sc| (d * sc as f32, 0.0))
}

pub(crate) fn dequantize(src: &[u8], dst: &mut [f32]) {
    kquant::dequantize::<BYTES, 16>(src, dst, |b| (quants(b).map(|q| q - 32), sub_scales(b)))
}

/// `quantize_row_q6_K_ref`.
pub(crate) fn quantize_ref(src: &[f32], dst: &mut [u8]) {
    for (x, b) in kquant::groups::<BYTES>(src, dst) {
        let mut l = [0i8; QK_K];
        let scales_f: [f32; 16] = std::array::from_fn(|ib| {
            make_qx_quants_rmse1(32, &x[16 * ib..16 * ib + 16], &mut l[16 * ib..16 * ib + 16])
        });
        let (max_abs_scale, max_scale) = signed_absmax(&scales_f);
        if max_abs_scale < GROUP_MAX_EPS {
            b.fill(0);
            continue;
        }

        let iscale = -128.0 / max_scale;
        put_f16(b, D, 1.0 / iscale);
        for (o, &f) in b[SCALES..SCALES + 16].iter_mut().zip(&scales_f) {
            *o = nearest_int(iscale * f).min(127) as i8 as u8;
        }

        kquant::requantize(x, &sub_scales(b), (-32, 31), |i, q| l[i] = q as i8);

        for n in 0..2 {
            for i in 0..32 {
                let e = 128 * n + i;
                let q = |k: usize| l[e + 32 * k] as u8;
                b[64 * n + i] = (q(0) & 0x0f) | ((q(2) & 0x0f) << 4);
                b[64 * n + 32 + i] = (q(1) & 0x0f) | ((q(3) & 0x0f) << 4);
                b[QH + 32 * n + i] =
                    (q(0) >> 4) | ((q(1) >> 4) << 2) | ((q(2) >> 4) << 4) | ((q(3) >> 4) << 6);
            }
        }
    }
}

/// `ggml_vec_dot_q6_K_q8_K`, AVX2 order: unsigned quants are multiplied
/// per lane, and `32 * sc * bsum` is subtracted per lane pair of
/// sub-blocks (lane k: sub-blocks 2k, 2k+1) before the FMA.
pub(crate) fn vec_dot(w: &[u8], a: &[u8]) -> f32 {
    let mut acc = Acc8::new();
    for (wb, ab) in kquant::blocks::<BYTES>(w, a) {
        let d = q8_k::d(ab) * f16_at(wb, D);
        let sc = scales(wb);
        let bsums = q8_k::bsums(ab);
        let mut sumi = kquant::scaled_dot(&quants(wb), q8_k::qs(ab), &sc.map(i32::from));
        for (k, s) in sumi.iter_mut().enumerate() {
            let sub = bsums[2 * k] as i32 * sc[2 * k] as i32
                + bsums[2 * k + 1] as i32 * sc[2 * k + 1] as i32;
            *s -= sub << 5;
        }
        acc.fma(d, &sumi);
    }
    acc.hsum()
}

block_format!("Q6_K as a [`BlockFormat`](super::BlockFormat).", Format, "q6_K", QK_K, BYTES, Q8K, true, dequantize, Some(quantize_ref), None, Some(vec_dot));

#[cfg(test)]
mod tests {
    use crate::quant::test_util::{f16_field, set_f16_field, weight, Rng, F32_REL};
    use crate::quant::GgmlType;

    fn randomize(rng: &mut Rng, b: &mut [u8]) {
        let d = rng.f16_bits(-14, -6, true);
        set_f16_field(b, 208, d);
    }

    /// Independent decoding following dequantize_row_q6_K's traversal.
    fn decode(b: &[u8]) -> Vec<(f64, f64)> {
        let d = f16_field(b, 208);
        let sc = |i: usize| b[192 + i] as i8 as f64;
        let mut out = vec![(0.0, 0.0); 256];
        for n in 0..2 {
            for l in 0..32 {
                let is = l / 16;
                let (ql0, ql32, qh) = (b[64 * n + l], b[64 * n + 32 + l], b[128 + 32 * n + l]);
                let q1 = ((ql0 & 15) | ((qh & 3) << 4)) as i32 - 32;
                let q2 = ((ql32 & 15) | (((qh >> 2) & 3) << 4)) as i32 - 32;
                let q3 = ((ql0 >> 4) | (((qh >> 4) & 3) << 4)) as i32 - 32;
                let q4 = ((ql32 >> 4) | (((qh >> 6) & 3) << 4)) as i32 - 32;
                for (k, q) in [q1, q2, q3, q4].into_iter().enumerate() {
                    let v = d * sc(8 * n + is + 2 * k) * q as f64;
                    out[128 * n + 32 * k + l] = (v, v.abs() * F32_REL);
                }
            }
        }
        out
    }

    #[test]
    fn layout_dot_and_roundtrip() {
        weight::check_format(GgmlType::Q6K, 111, randomize, decode, |x| {
            let amax = weight::amax(x);
            amax / 32.0
        });
        let e = weight::rms_rel_error(GgmlType::Q6K, 114);
        assert!(e < 0.03, "rms rel error {e}");
    }
}
