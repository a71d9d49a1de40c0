//! Causal attention of query heads over the cached keys and values (F16), with an online
//! softmax as ggml's flash-attention kernel does (Q rounded to F16 for the K dot product, scores
//! and the running V sum in f32), taken a block of cells at a time: the block's scores, one
//! rescale of the running sum when the block raises the maximum, the block's exponentials
//! together, then its values added into the accumulator held in registers. Query heads that
//! share a K/V head (GQA, MLA) go through the cache together, so each cached row is read once
//! for all of them.

use crate::quant::{f16_to_f32, f32_to_f16, GgmlType};

use super::simd;

/// Cells per block of the online softmax.
const BLOCK: usize = 32;

/// Scratch for one head: the query in F16, the f32 accumulator, the running max and sum, the
/// scores of the current block.
pub struct HeadScratch {
    pub q16: Vec<u16>,
    pub acc: Vec<f32>,
    max: f32,
    sum: f32,
    p: [f32; BLOCK],
}

impl HeadScratch {
    pub fn new(head_dim: usize) -> Self {
        HeadScratch { q16: vec![0; head_dim], acc: vec![0.0; head_dim], max: f32::NEG_INFINITY, sum: 0.0, p: [0.0; BLOCK] }
    }

    /// Takes in one block of key/value rows.
    fn absorb(&mut self, keys: &[&[u16]], values: &[&[u16]], scale: f32, dot: Option<simd::DotFn>) {
        let dk = self.q16.len();
        let n = keys.len();
        for (p, k) in self.p.iter_mut().zip(keys) {
            *p = dot_f16(dot, &k[..dk], &self.q16) * scale;
        }
        let block_max = self.p[..n].iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
        if block_max > self.max {
            let ms = (self.max - block_max).exp();
            self.acc.iter_mut().for_each(|a| *a *= ms);
            self.sum *= ms;
            self.max = block_max;
        }
        exp_shifted(&mut self.p[..n], self.max);
        for &p in &self.p[..n] {
            self.sum += p;
        }
        let dv = values.first().map_or(0, |v| v.len());
        accumulate_f16(&mut self.acc[..dv], values, &self.p[..n]);
    }
}

fn dot_f16(kernel: Option<simd::DotFn>, a: &[u16], b: &[u16]) -> f32 {
    let n = a.len().min(b.len());
    if let Some(k) = kernel {
        let mut out = 0f32;
        // SAFETY: both slices hold n F16 values; the kernel came from simd::dot_fns, which
        // checked its CPU features.
        unsafe { k(n, a.as_ptr() as *const u8, b.as_ptr() as *const u8, 0, &mut out, 0) };
        return out;
    }
    a.iter().zip(b).map(|(&x, &y)| f16_to_f32(x) * f16_to_f32(y)).sum()
}

/// x[i] = e^(x[i] - shift)
fn exp_shifted(x: &mut [f32], shift: f32) {
    #[cfg(target_arch = "x86_64")]
    if simd::level() >= simd::Level::Avx2 {
        // SAFETY: the AVX2/FMA/F16C level was detected.
        unsafe { simd::vmath::exp_shifted(x, shift) };
        return;
    }
    x.iter_mut().for_each(|v| *v = (*v - shift).exp());
}

/// acc[d] += Σ_j p[j] · v_j[d], j ascending.
fn accumulate_f16(acc: &mut [f32], v: &[&[u16]], p: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if simd::level() >= simd::Level::Avx2 {
        // SAFETY: the AVX2/FMA/F16C level was detected.
        unsafe { simd::vmath::accumulate_f16(acc, v, p) };
        return;
    }
    for (row, &w) in v.iter().zip(p) {
        for (a, &h) in acc.iter_mut().zip(row.iter()) {
            *a = f16_to_f32(h).mul_add(w, *a);
        }
    }
}

/// out = softmax(scale · q·Kᵀ) V over the key/value rows `cells` yields (each a slice of
/// head_dim F16 values).
pub fn attend<'a>(q: &[f32], scale: f32, cells: impl Iterator<Item = (&'a [u16], &'a [u16])>, s: &mut HeadScratch, out: &mut [f32]) {
    attend_group(q, scale, cells, std::slice::from_mut(s), out);
}

/// [`attend`] for `s.len()` query heads sharing one K/V head: `q` and `out` hold the heads one
/// after the other. Each head's result is bit for bit what `attend` gives it alone.
pub fn attend_group<'a>(q: &[f32], scale: f32, mut cells: impl Iterator<Item = (&'a [u16], &'a [u16])>, s: &mut [HeadScratch], out: &mut [f32]) {
    let (dk, dv) = (q.len() / s.len(), out.len() / s.len());
    for (h, qh) in s.iter_mut().zip(q.chunks_exact(dk)) {
        for (d, &x) in h.q16.iter_mut().zip(qh) {
            *d = f32_to_f16(x);
        }
        h.acc.iter_mut().for_each(|a| *a = 0.0);
        h.max = f32::NEG_INFINITY;
        h.sum = 0.0;
    }
    let dot = simd::dot_fns(GgmlType::F16).map(|k| k[0]);
    let mut keys: [&[u16]; BLOCK] = [&[]; BLOCK];
    let mut values: [&[u16]; BLOCK] = [&[]; BLOCK];
    loop {
        let mut n = 0;
        while n < BLOCK {
            let Some((k, v)) = cells.next() else { break };
            keys[n] = k;
            values[n] = &v[..dv];
            n += 1;
        }
        if n == 0 {
            break;
        }
        for h in s.iter_mut() {
            h.absorb(&keys[..n], &values[..n], scale, dot);
        }
        if n < BLOCK {
            break;
        }
    }
    for (h, o) in s.iter().zip(out.chunks_exact_mut(dv)) {
        let inv = if h.sum == 0.0 { 0.0 } else { 1.0 / h.sum };
        for (o, &a) in o.iter_mut().zip(&h.acc) {
            *o = a * inv;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_two_pass_softmax_in_f64() {
        for hd in [16, 64, 72, 128] {
            check(hd);
        }
    }

    fn check(hd: usize) {
        let q: Vec<f32> = (0..hd).map(|i| (i as f32 * 0.7).sin()).collect();
        let keys: Vec<Vec<u16>> = (0..9).map(|j| (0..hd).map(|i| f32_to_f16(((i * j) as f32 * 0.3).cos())).collect()).collect();
        let vals: Vec<Vec<u16>> = (0..9).map(|j| (0..hd).map(|i| f32_to_f16((i + j) as f32 * 0.1 - 0.5)).collect()).collect();
        let mut s = HeadScratch::new(hd);
        let mut out = vec![0.0; hd];
        attend(&q, 0.25, keys.iter().zip(&vals).map(|(k, v)| (k.as_slice(), v.as_slice())), &mut s, &mut out);
        // three heads at once give each head's single-head result exactly
        let q3: Vec<f32> = [q.clone(), q.iter().map(|x| -x).collect(), q.iter().map(|x| x * 2.0).collect()].concat();
        let mut s3: Vec<HeadScratch> = (0..3).map(|_| HeadScratch::new(hd)).collect();
        let mut out3 = vec![0.0; 3 * hd];
        attend_group(&q3, 0.25, keys.iter().zip(&vals).map(|(k, v)| (k.as_slice(), v.as_slice())), &mut s3, &mut out3);
        for (i, qi) in q3.chunks_exact(hd).enumerate() {
            let mut one = vec![0.0; hd];
            attend(qi, 0.25, keys.iter().zip(&vals).map(|(k, v)| (k.as_slice(), v.as_slice())), &mut s, &mut one);
            assert_eq!(one, out3[i * hd..(i + 1) * hd], "head {i}");
        }
        let qh: Vec<f64> = q.iter().map(|&x| f16_to_f32(f32_to_f16(x)) as f64).collect();
        let scores: Vec<f64> = keys.iter().map(|k| k.iter().zip(&qh).map(|(&a, b)| f16_to_f32(a) as f64 * b).sum::<f64>() * 0.25).collect();
        let mx = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let w: Vec<f64> = scores.iter().map(|s| (s - mx).exp()).collect();
        let z: f64 = w.iter().sum();
        for d in 0..hd {
            let r: f64 = (0..9).map(|j| w[j] * f16_to_f32(vals[j][d]) as f64).sum::<f64>() / z;
            assert!((out[d] as f64 - r).abs() < 1e-5, "hd {hd} d {d}: {} vs {r}", out[d]);
        }
    }
}
