//! Q3_K: super-blocks of 256 weights in 16 sub-blocks of 16,
//! `x = d * (sc - 32) * q` with 3-bit signed `q` (-4..=3) and 6-bit `sc`.
//!
//! Layout (110 bytes): `hmask: [u8; 32]` | `qs: [u8; 64]` | `scales: [u8; 12]`
//! | `d: f16`. Element `e = 128*n + 32*s + l` has low bits `2s..2s+2` of
//! `qs[32*n + l]` and high bit `4n + s` of `hmask[l]`; a *clear* high bit
//! subtracts 4. Scale `j` has its low nibble in `scales[j % 8]` (low half for
//! j < 8, high half otherwise) and its top 2 bits at `2*(j/4)` of
//! `scales[8 + j%4]`.

use super::common::{make_q3_quants_rmse, nearest_int};
use super::lanes::{dot32, Acc8};
use super::{arr, f16_at, put_f16, q8_k, QK_K};

pub(crate) const BYTES: usize = QK_K / 8 + QK_K / 4 + 12 + 2;
const QS: usize = 32;
const SCALES: usize = 96;
const D: usize = 108;

/// The 16 sub-block scales, -32..=31.
#[inline(always)]
fn scales(b: &[u8; BYTES]) -> [i8; 16] {
    let s: &[u8; 12] = arr(b, SCALES);
    std::array::from_fn(|j| {
        let low = if j < 8 { s[j] & 0x0f } else { s[j - 8] >> 4 };
        let high = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
        (low | (high << 4)) as i8 - 32
    })
}

/// All 256 quants, -4..=3, in element order.
#[inline(always)]
fn quants(b: &[u8; BYTES]) -> [i8; QK_K] {
    let hmask: &[u8; 32] = arr(b, 0);
    let qs: &[u8; 64] = arr(b, QS);
    let mut q = [0i8; QK_K];
    for (n, chunk) in q.chunks_exact_mut(128).enumerate() {
        for (s, part) in chunk.chunks_exact_mut(32).enumerate() {
            let bit = 4 * n + s;
            for (l, v) in part.iter_mut().enumerate() {
                let low = ((qs[32 * n + l] >> (2 * s)) & 3) as i8;
                let high_clear = (hmask[l] >> bit) & 1 == 0;
                *v = low - if high_clear { 4 } else { 0 };
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
        let d_all = f16_at(b, D);
        let q = quants(b);
        for ((ys, qs), &sc) in y
            .chunks_exact_mut(16)
            .zip(q.chunks_exact(16))
            .zip(&scales(b))
        {
            let dl = d_all * sc as f32;
            for (y, &q) in ys.iter_mut().zip(qs) {
                *y = dl * q as f32;
            }
        }
    }
}

/// `quantize_row_q3_K_ref`.
pub(crate) fn quantize_ref(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src
        .as_chunks::<QK_K>()
        .0
        .iter()
        .zip(dst.as_chunks_mut::<BYTES>().0)
    {
        let mut l = [0i8; QK_K];
        let mut scales_f = [0f32; 16];
        let (mut max_scale, mut amax) = (0f32, 0f32);
        for j in 0..16 {
            scales_f[j] =
                make_q3_quants_rmse(4, &x[16 * j..16 * j + 16], &mut l[16 * j..16 * j + 16]);
            let scale = scales_f[j].abs();
            if scale > amax {
                amax = scale;
                max_scale = scales_f[j];
            }
        }

        let mut packed = [0u8; 12];
        if max_scale != 0.0 {
            let iscale = -32.0 / max_scale;
            for (j, &s) in scales_f.iter().enumerate() {
                // C: int8_t l = nearest_int(...); clamp; + 32
                let li = (nearest_int(iscale * s) as i8).clamp(-32, 31) + 32;
                let lu = li as u8;
                if j < 8 {
                    packed[j] = lu & 0x0f;
                } else {
                    packed[j - 8] |= (lu & 0x0f) << 4;
                }
                packed[j % 4 + 8] |= (lu >> 4) << (2 * (j / 4));
            }
            put_f16(b, D, 1.0 / iscale);
        } else {
            put_f16(b, D, 0.0);
        }
        b[SCALES..SCALES + 12].copy_from_slice(&packed);

        let d_all = f16_at(b, D);
        let sc = scales(b);
        for j in 0..16 {
            let d = d_all * sc[j] as f32;
            if d == 0.0 {
                continue;
            }
            for ii in 0..16 {
                let q = nearest_int(x[16 * j + ii] / d).clamp(-4, 3);
                l[16 * j + ii] = (q + 4) as i8;
            }
        }

        let mut hmask = [0u8; 32];
        for (e, v) in l.iter_mut().enumerate() {
            if *v > 3 {
                hmask[e % 32] |= 1 << (e / 32);
                *v -= 4;
            }
        }
        b[..32].copy_from_slice(&hmask);
        for n in 0..2 {
            for i in 0..32 {
                let e = 128 * n + i;
                let q = |k: usize| l[e + 32 * k] as u8;
                b[QS + 32 * n + i] = q(0) | (q(1) << 2) | (q(2) << 4) | (q(3) << 6);
            }
        }
    }
}

/// `ggml_vec_dot_q3_K_q8_K`, AVX2 order.
pub(crate) fn vec_dot(w: &[u8], a: &[u8]) -> f32 {
    let mut acc = Acc8::new();
    for (wb, ab) in w
        .as_chunks::<BYTES>()
        .0
        .iter()
        .zip(a.as_chunks::<{ q8_k::BYTES }>().0)
    {
        let d = q8_k::d(ab) * f16_at(wb, D);
        let sc = scales(wb);
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
            let (lo, hi) = (sc[2 * g] as i32, sc[2 * g + 1] as i32);
            for k in 0..8 {
                sumi[k] += if k < 4 { lo } else { hi } * lanes[k];
            }
        }
        acc.fma(d, &sumi);
    }
    acc.hsum()
}

block_format!("Q3_K as a [`BlockFormat`](super::BlockFormat).", Format, "q3_K", QK_K, BYTES, Q8K, true, dequantize, Some(quantize_ref), None, Some(vec_dot));

#[cfg(test)]
mod tests {
    use crate::quant::test_util::{f16_field, set_f16_field, weight, Rng, F32_REL};
    use crate::quant::GgmlType;

    fn randomize(rng: &mut Rng, b: &mut [u8]) {
        let d = rng.f16_bits(-12, -4, true);
        set_f16_field(b, 108, d);
    }

    /// Independent decoding following dequantize_row_q3_K: the 12 scale
    /// bytes are unpacked as four little-endian u32 words with kmask logic.
    fn decode(b: &[u8]) -> Vec<(f64, f64)> {
        let d = f16_field(b, 108);
        let w = |i: usize| {
            u32::from_le_bytes([b[96 + 4 * i], b[97 + 4 * i], b[98 + 4 * i], b[99 + 4 * i]])
        };
        let (a0, a1, tmp) = (w(0), w(1), w(2));
        let (k1, k2) = (0x0303_0303u32, 0x0f0f_0f0fu32);
        let aux = [
            (a0 & k2) | ((tmp & k1) << 4),
            (a1 & k2) | (((tmp >> 2) & k1) << 4),
            ((a0 >> 4) & k2) | (((tmp >> 4) & k1) << 4),
            ((a1 >> 4) & k2) | (((tmp >> 6) & k1) << 4),
        ];
        let scale = |j: usize| (aux[j / 4] >> (8 * (j % 4))) as u8 as i8 as i32 - 32;
        let mut out = vec![(0.0, 0.0); 256];
        let mut is = 0;
        let mut m = 1u8;
        for half in 0..2 {
            for shift in 0..4 {
                for sub in 0..2 {
                    let dl = d * scale(is) as f64;
                    is += 1;
                    for l in 0..16 {
                        let idx = 16 * sub + l;
                        let low = (b[32 + 32 * half + idx] >> (2 * shift)) & 3;
                        let q = low as i32 - if b[idx] & m != 0 { 0 } else { 4 };
                        let v = dl * q as f64;
                        out[128 * half + 32 * shift + idx] = (v, v.abs() * F32_REL);
                    }
                }
                m <<= 1;
            }
        }
        out
    }

    #[test]
    fn dequantize_matches_layout() {
        weight::check_dequantize(GgmlType::Q3K, 81, randomize, decode);
    }

    #[test]
    fn vec_dot_matches_f64() {
        weight::check_vec_dot(GgmlType::Q3K, 82, randomize, decode);
    }

    #[test]
    fn roundtrip_error() {
        weight::check_roundtrip(GgmlType::Q3K, 83, |x| {
            let amax = x.iter().fold(0f32, |m, v| m.max(v.abs())) as f64;
            amax / 4.0 * 1.5
        });
        let e = weight::rms_rel_error(GgmlType::Q3K, 84);
        assert!(e < 0.25, "rms rel error {e}");
    }
}
