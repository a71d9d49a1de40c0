//! Q5_K: super-blocks of 256 weights in 8 sub-blocks of 32,
//! `x = d * sc * q - dmin * m` with 5-bit `q` and 6-bit `sc`, `m`.
//!
//! Layout (176 bytes): `d: f16` | `dmin: f16` | `scales: [u8; 12]` (as Q4_K)
//! | `qh: [u8; 32]` | `qs: [u8; 128]`. Element `e = 64*c + 32*h + l` has its
//! low 4 bits in the low (h = 0) or high (h = 1) nibble of `qs[32*c + l]`
//! and its 5th bit at bit `e / 32` of `qh[l]`.

use super::common::Qkx2;
use super::kquant;
use super::lanes::Acc8;
use super::q4_k::{min_products, quantize_scales_ref, scaled_dot, sub_scales};
use super::{arr, f16_at, q8_k, QK_K};

pub(crate) const BYTES: usize = 4 + 12 + QK_K / 8 + QK_K / 2;
const SCALES: usize = 4;
const QH: usize = 16;
const QS: usize = 48;

/// All 256 quants, 0..=31, in element order.
#[inline(always)]
fn quants(b: &[u8; BYTES]) -> [i8; QK_K] {
    let qh: &[u8; 32] = arr(b, QH);
    let qs: &[u8; 128] = arr(b, QS);
    let mut q = [0i8; QK_K];
    for (c, (chunk, src)) in q.chunks_exact_mut(64).zip(qs.chunks_exact(32)).enumerate() {
        let (lo, hi) = chunk.split_at_mut(32);
        for (l, ((vl, vh), &byte)) in lo.iter_mut().zip(hi).zip(src).enumerate() {
            let h = qh[l] >> (2 * c);
            *vl = ((byte & 0x0f) | ((h & 1) << 4)) as i8;
            *vh = ((byte >> 4) | (((h >> 1) & 1) << 4)) as i8;
        }
    }
    q
}

pub(crate) fn dequantize(src: &[u8], dst: &mut [f32]) {
    kquant::dequantize::<BYTES, 8>(src, dst, |b| (quants(b), sub_scales(b)))
}

/// `quantize_row_q5_K_ref`.
pub(crate) fn quantize_ref(src: &[f32], dst: &mut [u8]) {
    let params = Qkx2 {
        nmax: 31,
        rmin: -0.5,
        rdelta: 0.1,
        nstep: 15,
        use_mad: false,
    };
    for (x, b) in kquant::groups::<BYTES>(src, dst) {
        let l = quantize_scales_ref(x, &params, b);
        let mut qh = [0u8; 32];
        for c in 0..4 {
            for j in 0..32 {
                let (mut l1, mut l2) = (l[64 * c + j], l[64 * c + 32 + j]);
                if l1 > 15 {
                    l1 -= 16;
                    qh[j] |= 1 << (2 * c);
                }
                if l2 > 15 {
                    l2 -= 16;
                    qh[j] |= 2 << (2 * c);
                }
                b[QS + 32 * c + j] = l1 | (l2 << 4);
            }
        }
        b[QH..QH + 32].copy_from_slice(&qh);
    }
}

/// `ggml_vec_dot_q5_K_q8_K`, AVX2 order: lane FMAs for the quants; the
/// min term is one integer per block added to a scalar `summs` with an FMA.
pub(crate) fn vec_dot(w: &[u8], a: &[u8]) -> f32 {
    let mut acc = Acc8::new();
    let mut summs = 0f32;
    for (wb, ab) in kquant::blocks::<BYTES>(w, a) {
        let yd = q8_k::d(ab);
        let d = yd * f16_at(wb, 0);
        let dmin = -yd * f16_at(wb, 2);
        let sm: &[u8; 12] = arr(wb, SCALES);
        let mins: i32 = min_products(sm, &q8_k::bsums(ab)).iter().sum();
        summs = dmin.mul_add(mins as f32, summs);
        acc.fma(d, &scaled_dot(&quants(wb), sm, q8_k::qs(ab)));
    }
    acc.hsum() + summs
}

block_format!("Q5_K as a [`BlockFormat`](super::BlockFormat).", Format, "q5_K", QK_K, BYTES, Q8K, true, dequantize, Some(quantize_ref), None, Some(vec_dot));

#[cfg(test)]
mod tests {
    use crate::quant::q4_k::tests::unpack_scales;
    use crate::quant::test_util::{f16_field, set_f16_field, weight, Rng, F32_REL};
    use crate::quant::GgmlType;

    fn randomize(rng: &mut Rng, b: &mut [u8]) {
        let d = rng.f16_bits(-12, -4, false);
        let dmin = rng.f16_bits(-12, -4, false);
        set_f16_field(b, 0, d);
        set_f16_field(b, 2, dmin);
    }

    /// Independent decoding following dequantize_row_q5_K (u1/u2 masks).
    fn decode(b: &[u8]) -> Vec<(f64, f64)> {
        let d = f16_field(b, 0);
        let dmin = f16_field(b, 2);
        let (sc, mn) = unpack_scales(&b[4..16]);
        let mut out = vec![(0.0, 0.0); 256];
        let (mut u1, mut u2) = (1u8, 2u8);
        for c in 0..4 {
            for l in 0..32 {
                let ql = b[48 + 32 * c + l];
                let qh = b[16 + l];
                let q1 = (ql & 15) as f64 + if qh & u1 != 0 { 16.0 } else { 0.0 };
                let q2 = (ql >> 4) as f64 + if qh & u2 != 0 { 16.0 } else { 0.0 };
                for (e, q, j) in [(64 * c + l, q1, 2 * c), (64 * c + 32 + l, q2, 2 * c + 1)] {
                    let a = d * sc[j] as f64 * q;
                    let m = dmin * mn[j] as f64;
                    out[e] = (a - m, (a.abs() + m.abs()) * F32_REL);
                }
            }
            u1 <<= 2;
            u2 <<= 2;
        }
        out
    }

    #[test]
    fn layout_dot_and_roundtrip() {
        weight::check_format(GgmlType::Q5K, 101, randomize, decode, |x| {
                        weight::span0(x) / 31.0
        });
        let e = weight::rms_rel_error(GgmlType::Q5K, 104);
        assert!(e < 0.06, "rms rel error {e}");
    }
}
