//! Q3_K: super-blocks of 256 weights in 16 sub-blocks of 16,
//! `x = d * (sc - 32) * q` with 3-bit signed `q` (-4..=3) and 6-bit `sc`.
//!
//! Layout (110 bytes): `hmask: [u8; 32]` | `qs: [u8; 64]` | `scales: [u8; 12]`
//! | `d: f16`. Element `e = 128*n + 32*s + l` has low bits `2s..2s+2` of
//! `qs[32*n + l]` and high bit `4n + s` of `hmask[l]`; a *clear* high bit
//! subtracts 4. Scale `j` has its low nibble in `scales[j % 8]` (low half for
//! j < 8, high half otherwise) and its top 2 bits at `2*(j/4)` of
//! `scales[8 + j%4]`.

use super::common::{make_q3_quants_rmse, nearest_int, signed_absmax};
use super::kquant::{self, pack_2bit, unpack_2bit};
use super::lanes::Acc8;
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

/// All 256 quants, -4..=3, in element order: the 2-bit planes of `qs`, minus 4 where the
/// element's `hmask` bit is clear.
#[inline(always)]
fn quants(b: &[u8; BYTES]) -> [i8; QK_K] {
    let hmask: &[u8; 32] = arr(b, 0);
    let mut q = unpack_2bit(arr(b, QS));
    for (e, v) in q.iter_mut().enumerate() {
        let high_clear = (hmask[e % 32] >> (e / 32)) & 1 == 0;
        *v -= if high_clear { 4 } else { 0 };
    }
    q
}

/// The 16 sub-blocks' (d·sc, 0).
#[inline(always)]
fn sub_scales(b: &[u8; BYTES]) -> [(f32, f32); 16] {
    let d = f16_at(b, D);
    scales(b).map(|sc| (d * sc as f32, 0.0))
}

pub(crate) fn dequantize(src: &[u8], dst: &mut [f32]) {
    kquant::dequantize::<BYTES, 16>(src, dst, |b| (quants(b), sub_scales(b)))
}

/// `quantize_row_q3_K_ref`.
pub(crate) fn quantize_ref(src: &[f32], dst: &mut [u8]) {
    for (x, b) in kquant::groups::<BYTES>(src, dst) {
        let mut l = [0i8; QK_K];
        let scales_f: [f32; 16] = std::array::from_fn(|j| {
            make_q3_quants_rmse(4, &x[16 * j..16 * j + 16], &mut l[16 * j..16 * j + 16])
        });
        let (_, max_scale) = signed_absmax(&scales_f);

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

        kquant::requantize(x, &sub_scales(b), (-4, 3), |i, q| l[i] = q as i8);

        let mut hmask = [0u8; 32];
        for (e, v) in l.iter_mut().enumerate() {
            if *v > 3 {
                hmask[e % 32] |= 1 << (e / 32);
                *v -= 4;
            }
        }
        b[..32].copy_from_slice(&hmask);
        pack_2bit(|e| l[e] as u8, &mut b[QS..QS + 64]);
    }
}

/// `ggml_vec_dot_q3_K_q8_K`, AVX2 order.
pub(crate) fn vec_dot(w: &[u8], a: &[u8]) -> f32 {
    let mut acc = Acc8::new();
    for (wb, ab) in kquant::blocks::<BYTES>(w, a) {
        let d = q8_k::d(ab) * f16_at(wb, D);
        let sc16 = scales(wb).map(i32::from);
        acc.fma(d, &kquant::scaled_dot(&quants(wb), q8_k::qs(ab), &sc16));
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
    fn layout_dot_and_roundtrip() {
        weight::check_format(GgmlType::Q3K, 81, randomize, decode, |x| {
            let amax = weight::amax(x);
            amax / 4.0 * 1.5
        });
        let e = weight::rms_rel_error(GgmlType::Q3K, 84);
        assert!(e < 0.25, "rms rel error {e}");
    }
}
