//! Helpers shared by the reference quantizers (ggml-quants.c), written so
//! every float operation happens in the same order and precision as the C.

/// ggml's `GROUP_MAX_EPS`: groups whose largest |x| is below are all-zero.
pub(crate) const GROUP_MAX_EPS: f32 = 1e-15;

/// ggml's `nearest_int`: round to nearest, ties to even, via the 1.5 * 2^23
/// magic constant. Valid for |f| <= 4194303 (as in ggml).
#[inline(always)]
#[allow(clippy::neg_cmp_op_on_partial_ord)] // NaN passes, as in ggml release builds
pub(crate) fn nearest_int(f: f32) -> i32 {
    debug_assert!(!(f.abs() > 4_194_303.0), "nearest_int({f}) out of range");
    let v = f + 12_582_912.0;
    (v.to_bits() & 0x007f_ffff) as i32 - 0x0040_0000
}

/// (largest |x|, the x that has it); the first one wins ties; (0, 0) when
/// all are zero.
#[inline(always)]
pub(crate) fn signed_absmax(x: &[f32]) -> (f32, f32) {
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    (amax, max)
}

/// (min, max) as ggml's Q4_1/Q5_1 quantizers find them (start at
/// +FLT_MAX / -FLT_MAX).
#[inline(always)]
pub(crate) fn min_max(x: &[f32]) -> (f32, f32) {
    let (mut min, mut max) = (f32::MAX, -f32::MAX);
    for &v in x {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    (min, max)
}

/// `make_qx_quants(n, nmax, x, L, rmse_type = 1, qw = NULL)` (the Q6_K
/// use): signed quants `L[i] + nmax` in `0..2*nmax`, returns the scale.
pub(crate) fn make_qx_quants_rmse1(nmax: i32, x: &[f32], l_out: &mut [i8]) -> f32 {
    let (amax, max) = signed_absmax(x);
    if amax < GROUP_MAX_EPS {
        l_out.fill(0);
        return 0.0;
    }
    let quant = |iscale: f32, v: f32| nearest_int(iscale * v).clamp(-nmax, nmax - 1);
    let mut iscale = -(nmax as f32) / max;
    let (mut sumlx, mut suml2) = (0f32, 0f32);
    for (l_i, &xi) in l_out.iter_mut().zip(x) {
        let l = quant(iscale, xi);
        *l_i = (l + nmax) as i8;
        let w = xi * xi;
        sumlx += w * xi * l as f32;
        suml2 += w * l as f32 * l as f32;
    }
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in -9..=9 {
        if is == 0 {
            continue;
        }
        iscale = -(nmax as f32 + 0.1 * is as f32) / max;
        let (mut sumlx, mut suml2) = (0f32, 0f32);
        for &xi in x {
            let l = quant(iscale, xi);
            let w = xi * xi;
            sumlx += w * xi * l as f32;
            suml2 += w * l as f32 * l as f32;
        }
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for (l_i, &xi) in l_out.iter_mut().zip(x) {
                *l_i = (nmax + quant(iscale, xi)) as i8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// `make_q3_quants(n, nmax, x, L, do_rmse = true)`: quants `L[i] + nmax`
/// in `0..2*nmax` refined by coordinate descent; returns the scale.
pub(crate) fn make_q3_quants_rmse(nmax: i32, x: &[f32], l_out: &mut [i8]) -> f32 {
    let (amax, max) = signed_absmax(x);
    if amax < GROUP_MAX_EPS {
        l_out.fill(0);
        return 0.0;
    }
    let iscale = -(nmax as f32) / max;
    let (mut sumlx, mut suml2) = (0f32, 0f32);
    for (l_i, &xi) in l_out.iter_mut().zip(x) {
        let l = nearest_int(iscale * xi).clamp(-nmax, nmax - 1);
        *l_i = l as i8;
        let w = xi * xi;
        sumlx += w * xi * l as f32;
        suml2 += w * l as f32 * l as f32;
    }
    for _ in 0..5 {
        let mut n_changed = 0;
        for (l_i, &xi) in l_out.iter_mut().zip(x) {
            let w = xi * xi;
            let cur = *l_i as f32;
            let mut slx = sumlx - w * xi * cur;
            if slx > 0.0 {
                let mut sl2 = suml2 - w * cur * cur;
                let new_l = nearest_int(xi * sl2 / slx).clamp(-nmax, nmax - 1);
                if new_l != *l_i as i32 {
                    slx += w * xi * new_l as f32;
                    sl2 += w * new_l as f32 * new_l as f32;
                    if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                        *l_i = new_l as i8;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed += 1;
                    }
                }
            }
        }
        if n_changed == 0 {
            break;
        }
    }
    for l_i in l_out.iter_mut() {
        *l_i += nmax as i8;
    }
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}

/// Parameters of ggml's `make_qkx2_quants` search.
pub(crate) struct Qkx2 {
    pub nmax: i32,
    pub rmin: f32,
    pub rdelta: f32,
    pub nstep: i32,
    pub use_mad: bool,
}

/// `make_qkx2_quants`: unsigned quants in `0..=nmax` for x ~ scale*L - min
/// with weighted error; returns (scale, min) where min >= 0 is subtracted.
pub(crate) fn make_qkx2_quants(
    p: &Qkx2,
    x: &[f32],
    weights: &[f32],
    l_out: &mut [u8],
    l_aux: &mut [u8],
) -> (f32, f32) {
    let n = x.len();
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l_out.fill(0);
        return (0.0, -min);
    }
    let nmax_f = p.nmax as f32;
    let err = |diff: f32| if p.use_mad { diff.abs() } else { diff * diff };
    let mut iscale = nmax_f / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0f32;
    for i in 0..n {
        let l = nearest_int(iscale * (x[i] - min)).clamp(0, p.nmax);
        l_out[i] = l as u8;
        let diff = scale * l as f32 + min - x[i];
        best_error += weights[i] * err(diff);
    }
    if p.nstep < 1 {
        return (scale, -min);
    }
    for is in 0..=p.nstep {
        iscale = (p.rmin + p.rdelta * is as f32 + nmax_f) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0f32, 0f32, 0f32);
        for i in 0..n {
            let l = nearest_int(iscale * (x[i] - min)).clamp(0, p.nmax);
            l_aux[i] = l as u8;
            let w = weights[i];
            let lf = l as f32;
            sum_l += w * lf;
            sum_l2 += w * lf * lf;
            sum_xl += w * lf * x[i];
        }
        let d = sum_w * sum_l2 - sum_l * sum_l;
        if d > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / d;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / d;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0f32;
            for i in 0..n {
                let diff = this_scale * l_aux[i] as f32 + this_min - x[i];
                cur_error += weights[i] * err(diff);
            }
            if cur_error < best_error {
                l_out[..n].copy_from_slice(&l_aux[..n]);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// Scale and min of sub-block `j` (0..8) from the 12 packed 6-bit bytes of
/// Q4_K / Q5_K (ggml's `get_scale_min_k4`).
#[inline(always)]
pub(crate) fn scale_min_k4(j: usize, q: &[u8; 12]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// Pack 8 (scale, min) pairs of 6 bits into Q4_K / Q5_K's 12 bytes.
pub(crate) fn pack_scale_min_k4(ls: &[u8; 8], lm: &[u8; 8]) -> [u8; 12] {
    let mut s = [0u8; 12];
    for j in 0..8 {
        if j < 4 {
            s[j] = ls[j];
            s[j + 4] = lm[j];
        } else {
            s[j + 4] = (ls[j] & 0x0f) | ((lm[j] & 0x0f) << 4);
            s[j - 4] |= (ls[j] >> 4) << 6;
            s[j] |= (lm[j] >> 4) << 6;
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_int_ties_to_even() {
        let cases = [
            (0.5f32, 0),
            (1.5, 2),
            (2.5, 2),
            (-0.5, 0),
            (-1.5, -2),
            (-2.5, -2),
            (0.49999997, 0),
            (0.50000006, 1),
            (126.5, 126),
            (127.5, 128),
            (-127.49, -127),
            (4194303.0, 4194303),
            (-4194303.0, -4194303),
        ];
        for (f, want) in cases {
            assert_eq!(nearest_int(f), want, "{f}");
            assert_eq!(nearest_int(f), f.round_ties_even() as i32, "{f}");
        }
    }

    #[test]
    fn scale_min_pack_roundtrip() {
        for seed in 0..64u8 {
            let ls: [u8; 8] =
                std::array::from_fn(|j| seed.wrapping_mul(7).wrapping_add(13 * j as u8) & 63);
            let lm: [u8; 8] = std::array::from_fn(|j| {
                seed.wrapping_mul(11)
                    .wrapping_add(29u8.wrapping_mul(j as u8))
                    & 63
            });
            let packed = pack_scale_min_k4(&ls, &lm);
            for j in 0..8 {
                assert_eq!(scale_min_k4(j, &packed), (ls[j], lm[j]));
            }
        }
    }

    #[test]
    fn absmax_first_wins() {
        assert_eq!(signed_absmax(&[1.0, -3.0, 3.0, 2.0]), (3.0, -3.0));
        assert_eq!(signed_absmax(&[0.0, -0.0]), (0.0, 0.0));
        assert_eq!(min_max(&[2.0, -1.0, 5.0]), (-1.0, 5.0));
    }
}
