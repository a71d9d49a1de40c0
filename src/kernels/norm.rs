//! RMSNorm as ggml computes it: the sum of squares accumulates f32 products in f64, the scale
//! is applied in f32, then the weight multiplies in a separate f32 step.

pub fn rms_norm(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    let sum: f64 = x.iter().map(|&v| (v * v) as f64).sum();
    let mean = (sum / x.len() as f64) as f32;
    let scale = 1.0 / (mean + eps).sqrt();
    for ((o, &v), &w) in out.iter_mut().zip(x).zip(weight) {
        *o = (v * scale) * w;
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn matches_f64_reference() {
        let x: Vec<f32> = (0..96).map(|i| ((i * 37 % 17) as f32 - 8.0) * 0.37).collect();
        let w: Vec<f32> = (0..96).map(|i| 0.5 + (i % 7) as f32 * 0.1).collect();
        let mut out = vec![0.0; 96];
        super::rms_norm(&x, &w, 1e-6, &mut out);
        let ms = x.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / 96.0;
        for i in 0..96 {
            let r = x[i] as f64 / (ms + 1e-6).sqrt() * w[i] as f64;
            assert!((out[i] as f64 - r).abs() < 1e-5 * r.abs().max(1.0), "{i}: {} vs {r}", out[i]);
        }
    }
}
