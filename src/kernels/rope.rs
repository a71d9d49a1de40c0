//! Rotary position embedding as ggml_rope_ext computes it, including YaRN and per-dimension
//! frequency factors. The cos/sin values for a position are computed into a caller buffer
//! (one per context scratch, never shared between threads or contexts). The rotation has an
//! AVX2 kernel with the scalar code's roundings.

use super::simd::{self, Level};

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RopeMode {
    /// Adjacent pairs (x[2i], x[2i+1]): llama.
    Norm,
    /// Halves (x[i], x[i + n_dims/2]): qwen2 (GPT-NeoX style).
    Neox,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RopeParams {
    pub n_dims: usize,
    pub freq_base: f32,
    pub freq_scale: f32,
    pub ext_factor: f32,
    pub attn_factor: f32,
    pub beta_fast: f32,
    pub beta_slow: f32,
    pub n_ctx_orig: u32,
    pub mode: RopeMode,
}

fn corr_dim(n_dims: usize, n_ctx_orig: u32, n_rot: f32, base: f32) -> f32 {
    n_dims as f32 * (n_ctx_orig as f32 / (n_rot * 2.0 * std::f32::consts::PI)).ln() / (2.0 * base.ln())
}

/// ggml_rope_yarn_corr_dims
fn corr_dims(p: &RopeParams) -> [f32; 2] {
    let start = corr_dim(p.n_dims, p.n_ctx_orig, p.beta_fast, p.freq_base).floor();
    let end = corr_dim(p.n_dims, p.n_ctx_orig, p.beta_slow, p.freq_base).ceil();
    [start.max(0.0), end.min(p.n_dims as f32 - 1.0)]
}

fn yarn_ramp(low: f32, high: f32, i0: usize) -> f32 {
    let y = ((i0 / 2) as f32 - low) / (high - low).max(0.001);
    1.0 - y.clamp(0.0, 1.0)
}

/// Fills `cache[0..n_dims]` with (cos, sin) pairs for position `pos`, the way ggml's
/// rope_cache_init does (theta advanced by repeated f32 multiplication, ggml's roundings).
pub fn fill_cache(p: &RopeParams, pos: f32, freq_factors: Option<&[f32]>, cache: &mut [f32]) {
    let theta_scale = p.freq_base.powf(-2.0 / p.n_dims as f32);
    let corr = corr_dims(p);
    let mut theta = pos;
    for i0 in (0..p.n_dims).step_by(2) {
        let ff = freq_factors.map_or(1.0, |f| f[i0 / 2]);
        let theta_extrap = theta / ff;
        let theta_interp = p.freq_scale * theta_extrap;
        let mut t = theta_interp;
        let mut mscale = p.attn_factor;
        if p.ext_factor != 0.0 {
            let ramp_mix = yarn_ramp(corr[0], corr[1], i0) * p.ext_factor;
            // GCC contracts these (its -ffp-contract=fast default) as written here: checked
            // bit for bit against upstream's ROPE output
            t = theta_interp.mul_add(1.0 - ramp_mix, theta_extrap * ramp_mix);
            mscale *= 0.1f32.mul_add((1.0 / p.freq_scale).ln(), 1.0);
        }
        cache[i0] = t.cos() * mscale;
        cache[i0 + 1] = t.sin() * mscale;
        theta *= theta_scale;
    }
}

/// Rotates one head vector in place with a cache from `fill_cache`.
pub fn apply(mode: RopeMode, n_dims: usize, cache: &[f32], x: &mut [f32]) {
    apply_at(simd::level(), mode, n_dims, cache, x)
}

/// [`apply`] with the kernels of `level`; every level gives the same bits.
fn apply_at(level: Level, mode: RopeMode, n_dims: usize, cache: &[f32], x: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if level >= Level::Avx2 {
        // SAFETY: the AVX2/FMA/F16C level was detected; the kernels check the lengths.
        unsafe {
            match mode {
                RopeMode::Norm => simd::vmath::rope_pairs(n_dims, cache, x),
                RopeMode::Neox => simd::vmath::rope_halves(n_dims, cache, x),
            }
        }
        return;
    }
    let _ = level;
    match mode {
        RopeMode::Norm => {
            for i0 in (0..n_dims).step_by(2) {
                let (c, s) = (cache[i0], cache[i0 + 1]);
                let (a, b) = (x[i0], x[i0 + 1]);
                x[i0] = a.mul_add(c, -(b * s));
                x[i0 + 1] = a.mul_add(s, b * c);
            }
        }
        RopeMode::Neox => {
            let half = n_dims / 2;
            for i in 0..half {
                let (c, s) = (cache[2 * i], cache[2 * i + 1]);
                let (a, b) = (x[i], x[i + half]);
                x[i] = a.mul_add(c, -(b * s));
                x[i + half] = a.mul_add(s, b * c);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(mode: RopeMode) -> RopeParams {
        RopeParams { n_dims: 64, freq_base: 10000.0, freq_scale: 1.0, ext_factor: 0.0, attn_factor: 1.0, beta_fast: 32.0, beta_slow: 1.0, n_ctx_orig: 4096, mode }
    }

    #[test]
    fn every_level_rotates_alike() {
        for mode in [RopeMode::Norm, RopeMode::Neox] {
            for n_dims in [16, 64, 72, 128] {
                let p = RopeParams { n_dims, ..params(mode) };
                let mut cache = vec![0.0; n_dims];
                fill_cache(&p, 37.0, None, &mut cache);
                let x: Vec<f32> = (0..n_dims + 8).map(|i| ((i * 13 % 11) as f32 - 5.0) * 0.3).collect();
                let mut want = x.clone();
                apply_at(Level::Scalar, mode, n_dims, &cache, &mut want);
                for level in simd::tested_levels(&[Level::Avx2, Level::Avx512]) {
                    let mut got = x.clone();
                    apply_at(level, mode, n_dims, &cache, &mut got);
                    assert_eq!(got, want, "{mode:?} {n_dims} {level:?}");
                }
            }
        }
    }

    #[test]
    fn rotation_matches_f64_formula_and_preserves_norm() {
        for mode in [RopeMode::Norm, RopeMode::Neox] {
            let p = params(mode);
            let mut cache = vec![0.0; 64];
            fill_cache(&p, 37.0, None, &mut cache);
            let x0: Vec<f32> = (0..64).map(|i| ((i * 13 % 11) as f32 - 5.0) * 0.2).collect();
            let mut x = x0.clone();
            apply(mode, 64, &cache, &mut x);
            for i in 0..32 {
                let theta = 37.0f64 * 10000f64.powf(-2.0 * i as f64 / 64.0);
                let (ia, ib) = if mode == RopeMode::Norm { (2 * i, 2 * i + 1) } else { (i, i + 32) };
                let (a, b) = (x0[ia] as f64, x0[ib] as f64);
                let ra = a * theta.cos() - b * theta.sin();
                let rb = a * theta.sin() + b * theta.cos();
                assert!((x[ia] as f64 - ra).abs() < 1e-4 && (x[ib] as f64 - rb).abs() < 1e-4, "{mode:?} pair {i}");
            }
        }
    }

    #[test]
    fn rotating_by_a_then_b_equals_a_plus_b() {
        let p = params(RopeMode::Neox);
        let (mut ca, mut cb, mut cab) = (vec![0.0; 64], vec![0.0; 64], vec![0.0; 64]);
        fill_cache(&p, 5.0, None, &mut ca);
        fill_cache(&p, 9.0, None, &mut cb);
        fill_cache(&p, 14.0, None, &mut cab);
        let x0: Vec<f32> = (0..64).map(|i| (i as f32).sin()).collect();
        let (mut x1, mut x2) = (x0.clone(), x0);
        apply(RopeMode::Neox, 64, &ca, &mut x1);
        apply(RopeMode::Neox, 64, &cb, &mut x1);
        apply(RopeMode::Neox, 64, &cab, &mut x2);
        for i in 0..64 {
            assert!((x1[i] - x2[i]).abs() < 1e-4);
        }
    }
}
