//! RMSNorm as ggml computes it: the sum of squares accumulates f32 products in f64, the scale
//! is applied in f32, then the weight multiplies in a separate f32 step. The SIMD level sums in
//! f64 lanes (a different order, within f64 rounding); the scaling is bit for bit the same.

use super::simd::{self, Level};

pub fn rms_norm(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    rms_norm_at(simd::level(), x, weight, eps, out)
}

/// The bare `ggml_rms_norm` (no weight), in place: x · 1/√(mean(x²) + eps), the same scale as
/// [`rms_norm`]'s.
pub fn rms_norm_bare(x: &mut [f32], eps: f32) {
    let scale = rms_scale(simd::level(), x, eps);
    x.iter_mut().for_each(|v| *v *= scale);
}

/// 1/√(mean(x²) + eps), the squares summed in f64.
fn rms_scale(level: Level, x: &[f32], eps: f32) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if level >= Level::Avx2 {
        // SAFETY: the AVX2/FMA/F16C level was detected.
        let sum = unsafe { simd::vmath::sum_squares_f64(x) };
        return 1.0 / ((sum / x.len() as f64) as f32 + eps).sqrt();
    }
    let _ = level;
    let sum: f64 = x.iter().map(|&v| (v * v) as f64).sum();
    1.0 / ((sum / x.len() as f64) as f32 + eps).sqrt()
}

fn rms_norm_at(level: Level, x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    let scale = rms_scale(level, x, eps);
    #[cfg(target_arch = "x86_64")]
    if level >= Level::Avx2 {
        // SAFETY: the AVX2/FMA/F16C level was detected.
        unsafe { simd::vmath::scale_mul(x, scale, weight, out) };
        return;
    }
    for ((o, &v), &w) in out.iter_mut().zip(x).zip(weight) {
        *o = (v * scale) * w;
    }
}

/// LayerNorm as ggml_norm then the weight and bias (separate f32 steps): the mean and the
/// variance summed in f64, the scale 1/√(variance + eps) applied in f32.
pub fn layer_norm(x: &[f32], weight: &[f32], bias: &[f32], eps: f32, out: &mut [f32]) {
    let n = x.len() as f64;
    let mean = (x.iter().map(|&v| v as f64).sum::<f64>() / n) as f32;
    let var = (x.iter().map(|&v| ((v - mean) * (v - mean)) as f64).sum::<f64>() / n) as f32;
    let scale = 1.0 / (var + eps).sqrt();
    for (((o, &v), &w), &b) in out.iter_mut().zip(x).zip(weight).zip(bias) {
        *o = (v - mean) * scale * w + b;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_f64_reference_at_every_level() {
        for level in simd::tested_levels(&[Level::Scalar, Level::Avx2]) {
            for n in [96, 1536, 2051] {
                let x: Vec<f32> = (0..n).map(|i| ((i * 37 % 17) as f32 - 8.0) * 0.37).collect();
                let w: Vec<f32> = (0..n).map(|i| 0.5 + (i % 7) as f32 * 0.1).collect();
                let mut out = vec![0.0; n];
                rms_norm_at(level, &x, &w, 1e-6, &mut out);
                let ms = x.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / n as f64;
                for i in 0..n {
                    let r = x[i] as f64 / (ms + 1e-6).sqrt() * w[i] as f64;
                    assert!((out[i] as f64 - r).abs() < 1e-5 * r.abs().max(1.0), "{level:?} {i}: {} vs {r}", out[i]);
                }
            }
        }
    }
}
