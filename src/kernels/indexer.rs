//! The lightning indexer of DeepSeek Sparse Attention (deepseek32; upstream b11312's
//! `ggml_lightning_indexer`, ggml-cpu/ops.cpp:12355, and `ggml_top_k`): the Hadamard rotation
//! of its queries and keys, the scores of one token's heads against cached keys, and the choice
//! of the `k` highest-scoring cells without sorting them all. Allocates nothing.

use super::attention::widen;
use super::simd::{self, Level};
use crate::sys::alloc::try_zeroed;

/// Keys scored per block (the widest SIMD level's rows per call).
pub(crate) const BLOCK: usize = 16;

/// In place: x = H·x, H the orthonormal Sylvester–Hadamard matrix of order x.len() (a power of
/// two): H[i][j] = (−1)^popcount(i & j) / √n, the matrix upstream's `ggml_gen_hadamard` builds
/// (llama-kv-cache.cpp:23). H is symmetric and H·H = I, so applying it twice gives x back (to
/// rounding), and dot products of rotated vectors equal those of the originals: it only changes
/// the basis the F16 cache rounds the keys in. Computed as ggml-cpu computes the `mul_mat` that
/// `llama_mul_mat_hadamard` marks (`ggml_compute_forward_fwht`, ops.cpp:12256): scaled by 1/√n
/// first, then butterflies of span 1, 2, 4, … (sums and differences).
pub fn hadamard(x: &mut [f32]) {
    let n = x.len();
    debug_assert!(n.is_power_of_two());
    let s = 1.0 / (n as f32).sqrt();
    x.iter_mut().for_each(|v| *v *= s);
    let mut h = 1;
    while h < n {
        for i in (0..n).step_by(2 * h) {
            for j in i..i + h {
                let (a, b) = (x[j], x[j + h]);
                x[j] = a + b;
                x[j + h] = a - b;
            }
        }
        h *= 2;
    }
}

/// One thread's buffers: a block of keys widened to f32, and the candidate list of a top-k.
pub struct IndexerTile {
    level: Level,
    d: usize,
    keys: Vec<f32>,
    cand: Vec<u32>,
}

impl IndexerTile {
    /// For keys of `d` values (a multiple of 16) and top-k choices among up to `n_cells` cells.
    pub fn new(d: usize, n_cells: usize) -> Result<IndexerTile, String> {
        Self::at_level(simd::level(), d, n_cells)
    }

    /// As [`IndexerTile::new`] with the kernels of `level` (which the CPU must support).
    pub(crate) fn at_level(level: Level, d: usize, n_cells: usize) -> Result<IndexerTile, String> {
        assert!(d % 16 == 0 && d > 0);
        Ok(IndexerTile { level, d, keys: try_zeroed(BLOCK * d, "indexer keys")?, cand: try_zeroed(n_cells, "indexer candidates")? })
    }

    pub fn bytes(&self) -> usize {
        4 * (self.keys.capacity() + self.cand.capacity())
    }

    /// out[c] = Σ_h w[h] · max(0, q_h · k_c) for the F16 key rows `keys` (at most BLOCK, `d`
    /// values each), with q_h = q[h·d..(h + 1)·d]: upstream's score of one query token against
    /// one cached key (f32 dot products of the F32 query and the widened key, the weights
    /// pre-scaled by 1/√(d·heads)).
    pub fn score(&mut self, q: &[f32], w: &[f32], keys: &[&[u16]], out: &mut [f32]) {
        let (d, m) = (self.d, keys.len());
        assert!(m <= BLOCK && q.len() >= w.len() * d && out.len() >= m);
        for (c, k) in keys.iter().enumerate() {
            widen(self.level, &k[..d], &mut self.keys[c * d..(c + 1) * d]);
        }
        out[..m].iter_mut().for_each(|o| *o = 0.0);
        let mut dots = [0f32; BLOCK];
        for (h, &wh) in w.iter().enumerate() {
            let qh = &q[h * d..(h + 1) * d];
            self.dots(qh, m, &mut dots);
            for c in 0..m {
                out[c] += dots[c].max(0.0) * wh;
            }
        }
    }

    fn dots(&self, q: &[f32], m: usize, out: &mut [f32; BLOCK]) {
        let d = self.d;
        match self.level {
            #[cfg(target_arch = "x86_64")]
            Level::Avx512 => {
                // SAFETY: the AVX-512 level was detected; q holds d values and the widened keys
                // m rows of d (a multiple of 16), 1 ≤ m ≤ 16.
                unsafe { simd::attn::scores_512(q.as_ptr(), self.keys.as_ptr(), d, m, d, 1.0, out) };
            }
            #[cfg(target_arch = "x86_64")]
            Level::Avx2 => {
                for c0 in (0..m).step_by(8) {
                    let mut s = [0f32; 8];
                    // SAFETY: the AVX2/FMA level was detected; as above, rows c0..m (≤ 8 of them).
                    unsafe { simd::attn::scores_256(q.as_ptr(), self.keys[c0 * d..].as_ptr(), d, (m - c0).min(8), d, 1.0, &mut s) };
                    out[c0..(c0 + 8).min(m)].copy_from_slice(&s[..(m - c0).min(8)]);
                }
            }
            _ => {
                for (c, k) in self.keys[..m * d].chunks_exact(d).enumerate() {
                    out[c] = crate::kernels::attention::dot_ggml(q, k);
                }
            }
        }
    }

    /// The `k` highest of `scores` among the entries that are finite (the others are cells the
    /// query does not see), as indices in ascending order into `out`; returns how many (fewer
    /// than `k` only when fewer entries are finite). Linear time (a selection, not a sort of all
    /// the scores), then a sort of the k chosen. Equal scores go to the lower index (upstream's
    /// `std::partial_sort` leaves their order unspecified).
    pub fn top_k(&mut self, scores: &[f32], k: usize, out: &mut [u32]) -> usize {
        let mut n = 0;
        for (i, s) in scores.iter().enumerate() {
            if s.is_finite() {
                self.cand[n] = i as u32;
                n += 1;
            }
        }
        let cand = &mut self.cand[..n];
        if n > k {
            let higher = |a: &u32, b: &u32| scores[*b as usize].total_cmp(&scores[*a as usize]).then(a.cmp(b));
            cand.select_nth_unstable_by(k - 1, higher);
        }
        let taken = n.min(k);
        cand[..taken].sort_unstable();
        out[..taken].copy_from_slice(&cand[..taken]);
        taken
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::{f16_to_f32, f32_to_f16};

    fn rng(seed: &mut u64) -> f32 {
        *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((*seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    /// The fast transform equals the matrix product with upstream's matrix (built as
    /// ggml_gen_hadamard builds it), and is its own inverse.
    #[test]
    fn hadamard_is_upstreams_matrix() {
        for n in [64usize, 128, 256] {
            let mut m = vec![0f32; n * n];
            m[0] = 1.0 / (n as f32).sqrt();
            let mut s = 1;
            while s < n {
                for i in 0..s {
                    for j in 0..s {
                        let v = m[i * n + j];
                        m[(i + s) * n + j] = v;
                        m[i * n + j + s] = v;
                        m[(i + s) * n + j + s] = -v;
                    }
                }
                s *= 2;
            }
            let mut seed = n as u64;
            let x: Vec<f32> = (0..n).map(|_| rng(&mut seed)).collect();
            let mut y = x.clone();
            hadamard(&mut y);
            for i in 0..n {
                let want: f64 = (0..n).map(|j| m[i * n + j] as f64 * x[j] as f64).sum();
                assert!((y[i] as f64 - want).abs() < 1e-5, "n {n} row {i}: {} vs {want}", y[i]);
            }
            hadamard(&mut y);
            for i in 0..n {
                assert!((y[i] - x[i]).abs() < 1e-5);
            }
        }
    }

    /// Every level's scores equal a scalar f64 reference to f32 rounding, and the top-k is the
    /// reference's (a full sort) on random scores with ties and unseen cells.
    #[test]
    fn scores_and_top_k_match_references() {
        let (d, heads) = (64usize, 5usize);
        let mut seed = 7u64;
        let q: Vec<f32> = (0..heads * d).map(|_| rng(&mut seed)).collect();
        let w: Vec<f32> = (0..heads).map(|_| rng(&mut seed)).collect();
        let keys: Vec<Vec<u16>> = (0..BLOCK).map(|_| (0..d).map(|_| f32_to_f16(rng(&mut seed))).collect()).collect();
        let refs: Vec<&[u16]> = keys.iter().map(|k| &k[..]).collect();
        for level in simd::tested_levels(&[Level::Scalar, Level::Avx2, Level::Avx512]) {
            let mut tile = IndexerTile::at_level(level, d, 1000).unwrap();
            for m in [1, 7, 16] {
                let mut out = [0f32; BLOCK];
                tile.score(&q, &w, &refs[..m], &mut out);
                for c in 0..m {
                    let want: f64 = (0..heads)
                        .map(|h| w[h] as f64 * (0..d).map(|i| q[h * d + i] as f64 * f16_to_f32(keys[c][i]) as f64).sum::<f64>().max(0.0))
                        .sum();
                    assert!((out[c] as f64 - want).abs() < 1e-4, "{level:?} m {m} cell {c}: {} vs {want}", out[c]);
                }
            }
            let scores: Vec<f32> = (0..1000).map(|i| if i % 7 == 3 { f32::NEG_INFINITY } else { (rng(&mut seed) * 20.0).round() }).collect();
            for k in [1, 8, 100, 900, 1000] {
                let mut got = vec![0u32; k];
                let n = tile.top_k(&scores, k, &mut got);
                let mut all: Vec<u32> = (0..1000u32).filter(|&i| scores[i as usize].is_finite()).collect();
                all.sort_by(|a, b| scores[*b as usize].total_cmp(&scores[*a as usize]).then(a.cmp(b)));
                all.truncate(k);
                all.sort();
                assert_eq!(&got[..n], &all[..], "{level:?} k {k}");
            }
        }
    }
}
