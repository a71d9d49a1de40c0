//! Q2_K: super-blocks of 256 weights in 16 sub-blocks of 16,
//! `x = d * sc * q - dmin * m` with 2-bit `q` and 4-bit `sc`, `m`.
//!
//! Layout (84 bytes): `scales: [u8; 16]` (low nibble = sc, high = m of
//! sub-block `j`) | `qs: [u8; 64]` | `d: f16` | `dmin: f16`.
//! Element `e = 128*n + 32*s + l` (`s` in 0..4, `l` in 0..32) is bits
//! `2s..2s+2` of `qs[32*n + l]`.

use super::common::{nearest_int, Qkx2};
use super::kquant::{self, pack_2bit, unpack_2bit};
use super::lanes::Acc8;
use super::{arr, f16_at, put_f16, q8_k, QK_K};

pub(crate) const BYTES: usize = QK_K / 16 + QK_K / 4 + 4;
const QS: usize = 16;
const D: usize = 80;
const DMIN: usize = 82;

/// The 16 sub-blocks' (d·sc, dmin·m).
#[inline(always)]
fn scales_mins(sc: &[u8; 16], d: f32, dmin: f32) -> [(f32, f32); 16] {
    sc.map(|s| (d * (s & 0x0f) as f32, dmin * (s >> 4) as f32))
}

pub(crate) fn dequantize(src: &[u8], dst: &mut [f32]) {
    kquant::dequantize::<BYTES, 16>(src, dst, |b| {
        (unpack_2bit(arr(b, QS)), scales_mins(arr(b, 0), f16_at(b, D), f16_at(b, DMIN)))
    })
}

/// `quantize_row_q2_K_ref`: per-16 (scale, min) by `make_qkx2_quants` with weights |x|,
/// 4-bit scales and mins, then requantization.
pub(crate) fn quantize_ref(src: &[f32], dst: &mut [u8]) {
    const Q4SCALE: f32 = 15.0;
    let params = Qkx2 {
        nmax: 3,
        rmin: -0.5,
        rdelta: 0.1,
        nstep: 15,
        use_mad: true,
    };
    for (x, b) in kquant::groups::<BYTES>(src, dst) {
        let mut l = [0u8; QK_K];
        let (scales, mins, max_scale, max_min) =
            kquant::qkx2_sub_blocks::<16>(x, &params, &mut l, |xs, w| {
                for (w, v) in w.iter_mut().zip(xs) {
                    *w = v.abs();
                }
            });

        let mut packed = [0u8; 16];
        if max_scale > 0.0 {
            let iscale = Q4SCALE / max_scale;
            for (p, &s) in packed.iter_mut().zip(&scales) {
                *p = nearest_int(iscale * s) as u8;
            }
            put_f16(b, D, max_scale / Q4SCALE);
        } else {
            put_f16(b, D, 0.0);
        }
        if max_min > 0.0 {
            let iscale = Q4SCALE / max_min;
            for (p, &m) in packed.iter_mut().zip(&mins) {
                *p |= (nearest_int(iscale * m) << 4) as u8;
            }
            put_f16(b, DMIN, max_min / Q4SCALE);
        } else {
            put_f16(b, DMIN, 0.0);
        }
        b[..16].copy_from_slice(&packed);

        let dm = scales_mins(&packed, f16_at(b, D), f16_at(b, DMIN));
        kquant::requantize(x, &dm, (0, 3), |i, q| l[i] = q as u8);
        pack_2bit(|e| l[e], &mut b[QS..QS + 64]);
    }
}

/// `ggml_vec_dot_q2_K_q8_K`, AVX2 order: the min products `m_j · bsum_j` (lane k: sub-blocks
/// 2k, 2k+1) in one FMA with `-d_a·dmin`, then the scaled quants in one with `d_a·d`.
pub(crate) fn vec_dot(w: &[u8], a: &[u8]) -> f32 {
    let mut acc = Acc8::new();
    for (wb, ab) in kquant::blocks::<BYTES>(w, a) {
        let yd = q8_k::d(ab);
        let d = yd * f16_at(wb, D);
        let dmin = -yd * f16_at(wb, DMIN);
        let sc: &[u8; 16] = arr(wb, 0);
        let bsums = q8_k::bsums(ab);

        let mut prod = [0i32; 8];
        for (k, p) in prod.iter_mut().enumerate() {
            *p = (sc[2 * k] >> 4) as i32 * bsums[2 * k] as i32
                + (sc[2 * k + 1] >> 4) as i32 * bsums[2 * k + 1] as i32;
        }
        acc.fma(dmin, &prod);
        let sc16 = sc.map(|s| (s & 0x0f) as i32);
        acc.fma(d, &kquant::scaled_dot(&unpack_2bit(arr(wb, QS)), q8_k::qs(ab), &sc16));
    }
    acc.hsum()
}

block_format!("Q2_K as a [`BlockFormat`](super::BlockFormat).", Format, "q2_K", QK_K, BYTES, Q8K, true, dequantize, Some(quantize_ref), None, Some(vec_dot));

#[cfg(test)]
mod tests {
    use crate::quant::test_util::{f16_field, set_f16_field, weight, Rng, F32_REL};
    use crate::quant::GgmlType;

    fn randomize(rng: &mut Rng, b: &mut [u8]) {
        let d = rng.f16_bits(-10, -2, false);
        let dmin = rng.f16_bits(-10, -2, false);
        set_f16_field(b, 80, d);
        set_f16_field(b, 82, dmin);
    }

    /// Independent decoding from ggml-common.h's block_q2_K and
    /// dequantize_row_q2_K's traversal (128-element halves, 4 shifts, 2x16).
    fn decode(b: &[u8]) -> Vec<(f64, f64)> {
        let d = f16_field(b, 80);
        let dmin = f16_field(b, 82);
        let mut out = vec![(0.0, 0.0); 256];
        let mut is = 0;
        for half in 0..2 {
            for shift in 0..4 {
                for sub in 0..2 {
                    let sc = b[is];
                    is += 1;
                    for l in 0..16 {
                        let byte = b[16 + 32 * half + 16 * sub + l];
                        let q = (byte >> (2 * shift)) & 3;
                        let e = 128 * half + 32 * shift + 16 * sub + l;
                        let a = d * (sc & 15) as f64 * q as f64;
                        let m = dmin * (sc >> 4) as f64;
                        out[e] = (a - m, (a.abs() + m.abs()) * F32_REL);
                    }
                }
            }
        }
        out
    }

    #[test]
    fn layout_dot_and_roundtrip() {
        // per element: at most about one step of the largest sub-block scale
        weight::check_format(GgmlType::Q2K, 71, randomize, decode, |x| {
                        weight::span0(x) / 3.0 * 1.5
        });
        let e = weight::rms_rel_error(GgmlType::Q2K, 74);
        assert!(e < 0.40, "rms rel error {e}");
    }
}
