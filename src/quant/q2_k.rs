//! Q2_K: super-blocks of 256 weights in 16 sub-blocks of 16,
//! `x = d * sc * q - dmin * m` with 2-bit `q` and 4-bit `sc`, `m`.
//!
//! Layout (84 bytes): `scales: [u8; 16]` (low nibble = sc, high = m of
//! sub-block `j`) | `qs: [u8; 64]` | `d: f16` | `dmin: f16`.
//! Element `e = 128*n + 32*s + l` (`s` in 0..4, `l` in 0..32) is bits
//! `2s..2s+2` of `qs[32*n + l]`.

use super::common::{make_qkx2_quants, nearest_int, Qkx2};
use super::lanes::{dot32, Acc8};
use super::{arr, f16_at, put_f16, q8_k, QK_K};

pub(crate) const BYTES: usize = QK_K / 16 + QK_K / 4 + 4;
const QS: usize = 16;
const D: usize = 80;
const DMIN: usize = 82;

/// All 256 quants, 0..=3, in element order.
#[inline(always)]
fn quants(b: &[u8; BYTES]) -> [i8; QK_K] {
    let qs: &[u8; 64] = arr(b, QS);
    let mut q = [0i8; QK_K];
    for (n, chunk) in q.chunks_exact_mut(128).enumerate() {
        for (s, part) in chunk.chunks_exact_mut(32).enumerate() {
            for (l, v) in part.iter_mut().enumerate() {
                *v = ((qs[32 * n + l] >> (2 * s)) & 3) as i8;
            }
        }
    }
    q
}

pub(crate) fn dequantize(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src
        .as_chunks::<BYTES>()
        .0
        .iter()
        .zip(dst.as_chunks_mut::<QK_K>().0)
    {
        let d = f16_at(b, D);
        let min = f16_at(b, DMIN);
        let q = quants(b);
        for ((ys, qs), &sc) in y.chunks_exact_mut(16).zip(q.chunks_exact(16)).zip(&b[..16]) {
            let dl = d * (sc & 0x0f) as f32;
            let ml = min * (sc >> 4) as f32;
            for (y, &q) in ys.iter_mut().zip(qs) {
                *y = dl * q as f32 - ml;
            }
        }
    }
}

/// `quantize_row_q2_K_ref`.
pub(crate) fn quantize_ref(src: &[f32], dst: &mut [u8]) {
    const Q4SCALE: f32 = 15.0;
    let params = Qkx2 {
        nmax: 3,
        rmin: -0.5,
        rdelta: 0.1,
        nstep: 15,
        use_mad: true,
    };
    for (x, b) in src
        .as_chunks::<QK_K>()
        .0
        .iter()
        .zip(dst.as_chunks_mut::<BYTES>().0)
    {
        let mut l = [0u8; QK_K];
        let mut laux = [0u8; 16];
        let mut scales = [0f32; 16];
        let mut mins = [0f32; 16];
        let (mut max_scale, mut max_min) = (0f32, 0f32);
        for j in 0..16 {
            let xs = &x[16 * j..16 * j + 16];
            let weights: [f32; 16] = std::array::from_fn(|i| xs[i].abs());
            let (scale, min) = make_qkx2_quants(
                &params,
                xs,
                &weights,
                &mut l[16 * j..16 * j + 16],
                &mut laux,
            );
            scales[j] = scale;
            mins[j] = min;
            if scale > max_scale {
                max_scale = scale;
            }
            if min > max_min {
                max_min = min;
            }
        }

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

        let d_all = f16_at(b, D);
        let dmin_all = f16_at(b, DMIN);
        for j in 0..16 {
            let d = d_all * (packed[j] & 0x0f) as f32;
            if d == 0.0 {
                continue;
            }
            let dm = dmin_all * (packed[j] >> 4) as f32;
            for ii in 0..16 {
                let q = nearest_int((x[16 * j + ii] + dm) / d);
                l[16 * j + ii] = q.clamp(0, 3) as u8;
            }
        }

        for n in 0..2 {
            for i in 0..32 {
                let e = 128 * n + i;
                b[QS + 32 * n + i] = l[e] | (l[e + 32] << 2) | (l[e + 64] << 4) | (l[e + 96] << 6);
            }
        }
    }
}

/// `ggml_vec_dot_q2_K_q8_K`, AVX2 order: the min terms go into the lane
/// accumulator first (lane k: sub-blocks 2k, 2k+1), then the quant sums.
pub(crate) fn vec_dot(w: &[u8], a: &[u8]) -> f32 {
    let mut acc = Acc8::new();
    for (wb, ab) in w
        .as_chunks::<BYTES>()
        .0
        .iter()
        .zip(a.as_chunks::<{ q8_k::BYTES }>().0)
    {
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

        let q = quants(wb);
        let aq = q8_k::qs(ab);
        let mut sumi = [0i32; 8];
        for (g, (qg, ag)) in q
            .as_chunks::<32>()
            .0
            .iter()
            .zip(aq.as_chunks::<32>().0)
            .enumerate()
        {
            let lanes = dot32(qg, ag);
            let (lo, hi) = ((sc[2 * g] & 0x0f) as i32, (sc[2 * g + 1] & 0x0f) as i32);
            for k in 0..8 {
                sumi[k] += if k < 4 { lo } else { hi } * lanes[k];
            }
        }
        acc.fma(d, &sumi);
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
    fn dequantize_matches_layout() {
        weight::check_dequantize(GgmlType::Q2K, 71, randomize, decode);
    }

    #[test]
    fn vec_dot_matches_f64() {
        weight::check_vec_dot(GgmlType::Q2K, 72, randomize, decode);
    }

    #[test]
    fn roundtrip_error() {
        // per element: at most about one step of the largest sub-block scale
        weight::check_roundtrip(GgmlType::Q2K, 73, |x| {
            let (mn, mx) = x
                .iter()
                .fold((0f32, 0f32), |(a, b), &v| (a.min(v), b.max(v)));
            ((mx - mn) / 3.0) as f64 * 1.5
        });
        let e = weight::rms_rel_error(GgmlType::Q2K, 74);
        assert!(e < 0.40, "rms rel error {e}");
    }
}
