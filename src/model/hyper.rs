//! Block: DeepSeek V4's hyper-connections (`deepseek4`; upstream b11312
//! `src/models/deepseek4.cpp:289-468` and the fused CPU kernels `ggml_dsv4_hc_pre/comb/post`,
//! ggml-cpu/ops.cpp:11339-11630). Each token carries `hc` residual streams instead of one. Before
//! a sub-block, `pre` mixes the streams into its input with weights from a projection of all of
//! them (RMS-normed), and also yields the post weights and a Sinkhorn-normalised stream mixing
//! matrix; after it, `post` writes each stream as post·output + Σ_src comb[src][dst]·stream_src.
//! The head folds the streams into one with its own weights. All f32; allocates nothing.

use super::proj::project;
use super::weights::{mat, vector, Mat};
use super::{Common, Model};
use crate::gguf::GgufFile;
use crate::kernels::norm::rms_norm_bare;
use crate::sys::alloc::try_zeroed;
use crate::threads::ThreadPool;

/// One mixing site's weights: `fn_` {hc·n_embd → mixes}, its `base` (mixes values) and `scale`.
pub struct HcWeights {
    pub fn_: Mat,
    pub base: Vec<f32>,
    pub scale: Vec<f32>,
}

impl HcWeights {
    /// `{prefix}_fn/base/scale.weight`: a block's site (mixes = (2 + hc)·hc, three scales) or
    /// the head's (`head`: mixes = hc, one scale).
    pub fn load(f: &GgufFile, prefix: &str, hc: usize, n_embd: usize, head: bool) -> Result<HcWeights, String> {
        let (mixes, scales) = if head { (hc, 1) } else { ((2 + hc) * hc, 3) };
        Ok(HcWeights {
            fn_: mat(f, &format!("{prefix}_fn.weight"), hc * n_embd, mixes)?,
            base: vector(f, &format!("{prefix}_base.weight"), mixes)?,
            scale: vector(f, &format!("{prefix}_scale.weight"), scales)?,
        })
    }
}

pub struct HcScratch {
    hc: usize,
    /// Per token: the `hc` streams (hc × n_embd).
    pub x: Vec<f32>,
    normed: Vec<f32>,
    mixes: Vec<f32>,
    /// Per token: the pre / post weights (hc) and the mixing matrix (hc × hc, [src][dst]).
    pre: Vec<f32>,
    post: Vec<f32>,
    comb: Vec<f32>,
    /// One token's new streams.
    row: Vec<f32>,
}

impl HcScratch {
    pub fn new(hc: usize, n_embd: usize, n_ubatch: usize) -> Result<HcScratch, String> {
        let n = n_ubatch;
        Ok(HcScratch {
            hc,
            x: try_zeroed(n * hc * n_embd, "scratch")?,
            normed: try_zeroed(n * hc * n_embd, "scratch")?,
            mixes: try_zeroed(n * (2 + hc) * hc, "scratch")?,
            pre: try_zeroed(n * hc, "scratch")?,
            post: try_zeroed(n * hc, "scratch")?,
            comb: try_zeroed(n * hc * hc, "scratch")?,
            row: try_zeroed(hc * n_embd, "scratch")?,
        })
    }

    pub fn bytes(&self) -> usize {
        4 * [&self.x, &self.normed, &self.mixes, &self.pre, &self.post, &self.comb, &self.row].iter().map(|v| v.capacity()).sum::<usize>()
    }

    /// Every stream of the first `n` tokens = their embedding rows in `c.x`.
    pub fn start(&mut self, c: &Common, e: usize, n: usize) {
        for t in 0..n {
            for s in 0..self.hc {
                self.x[(t * self.hc + s) * e..(t * self.hc + s + 1) * e].copy_from_slice(&c.x[t * e..(t + 1) * e]);
            }
        }
    }

    /// `mixes` = w.fn_ · rms(streams) per token.
    fn mix(&mut self, model: &Model, pool: &ThreadPool, act: &mut [u8], w: &HcWeights, n: usize) {
        let d = self.hc * model.hp.n_embd;
        for t in 0..n {
            self.normed[t * d..(t + 1) * d].copy_from_slice(&self.x[t * d..(t + 1) * d]);
            rms_norm_bare(&mut self.normed[t * d..(t + 1) * d], model.hp.rms_eps);
        }
        project(model, pool, act, &w.fn_, &self.normed, n, &mut self.mixes);
    }

    /// Before a sub-block: its input (`c.x`, n rows) = Σ_s pre_s · stream_s, and the post
    /// weights and Sinkhorn mixing matrix that [`HcScratch::post`] applies after it.
    #[allow(clippy::too_many_arguments)]
    pub fn pre(&mut self, model: &Model, pool: &ThreadPool, c: &mut Common, w: &HcWeights, eps: f32, iters: usize, n: usize) {
        let (hc, e) = (self.hc, model.hp.n_embd);
        self.mix(model, pool, &mut c.act, w, n);
        let m = (2 + hc) * hc;
        let sigmoid = |x: f32| 1.0 / (1.0 + (-x).exp());
        for t in 0..n {
            let mx = &self.mixes[t * m..(t + 1) * m];
            for s in 0..hc {
                self.pre[t * hc + s] = sigmoid(mx[s] * w.scale[0] + w.base[s]) + eps;
                self.post[t * hc + s] = sigmoid(mx[hc + s] * w.scale[1] + w.base[hc + s]) * 2.0;
            }
            sinkhorn(mx, w.scale[2], &w.base, hc, eps, iters, &mut self.comb[t * hc * hc..(t + 1) * hc * hc]);
            weigh_streams(&self.x[t * hc * e..(t + 1) * hc * e], &self.pre[t * hc..(t + 1) * hc], &mut c.x[t * e..(t + 1) * e]);
        }
    }

    /// After a sub-block whose output is `a` (n rows): stream_dst = post_dst · a +
    /// Σ_src comb[src][dst] · stream_src.
    pub fn post(&mut self, a: &[f32], e: usize, n: usize) {
        let hc = self.hc;
        for t in 0..n {
            let x = &self.x[t * hc * e..(t + 1) * hc * e];
            let comb = &self.comb[t * hc * hc..(t + 1) * hc * hc];
            let at = &a[t * e..(t + 1) * e];
            for dst in 0..hc {
                let post = self.post[t * hc + dst];
                let out = &mut self.row[dst * e..(dst + 1) * e];
                // per element: post · a, then + stream_src · comb in src order (one pass per
                // term, each element's sums in the same order: the loops vectorise)
                for (o, &a) in out.iter_mut().zip(at) {
                    *o = a * post;
                }
                for src in 0..hc {
                    let w = comb[src * hc + dst];
                    for (o, &v) in out.iter_mut().zip(&x[src * e..(src + 1) * e]) {
                        *o += v * w;
                    }
                }
            }
            self.x[t * hc * e..(t + 1) * hc * e].copy_from_slice(&self.row);
        }
    }

    /// The head's fold of the streams into `c.x` (n rows): Σ_s (sigmoid(mix_s · scale + base_s)
    /// + eps) · stream_s.
    pub fn head(&mut self, model: &Model, pool: &ThreadPool, c: &mut Common, w: &HcWeights, eps: f32, n: usize) {
        let (hc, e) = (self.hc, model.hp.n_embd);
        self.mix(model, pool, &mut c.act, w, n);
        for t in 0..n {
            for s in 0..hc {
                self.pre[t * hc + s] = 1.0 / (1.0 + (-(self.mixes[t * hc + s] * w.scale[0] + w.base[s])).exp()) + eps;
            }
            weigh_streams(&self.x[t * hc * e..(t + 1) * hc * e], &self.pre[t * hc..(t + 1) * hc], &mut c.x[t * e..(t + 1) * e]);
        }
    }
}

/// `out` = Σ_s weights_s · stream_s (the streams one after the other in `x`), each element
/// summed from 0 in stream order, one pass per stream (the loops vectorise).
fn weigh_streams(x: &[f32], weights: &[f32], out: &mut [f32]) {
    let e = out.len();
    out.fill(0.0);
    for (s, &w) in weights.iter().enumerate() {
        for (o, &v) in out.iter_mut().zip(&x[s * e..(s + 1) * e]) {
            *o += v * w;
        }
    }
}

/// One token's stream mixing matrix (`comb`, hc × hc, [src][dst]) from its `mixes` (the block
/// site's (2 + hc)·hc values; the matrix's part follows the pre and post weights) as upstream's
/// fused `ggml_dsv4_hc_comb` computes it: per src, softmax over dst of mix·scale + base, plus
/// eps; then one column normalisation and `iters − 1` row-then-column ones. That kernel is
/// compiled with GCC's default FP contraction (`-std=gnu++17 -O3 -march=native`): the affine
/// step and the softmax's `·inv + eps` are single FMAs there (the AVX2 build's disassembly: 8
/// `vfmadd` for these 8 expressions; GCC contracts them wherever the target has FMA), so they
/// are `mul_add` here. `tests/data/upstream_ops` holds upstream's output on its own inputs.
pub fn sinkhorn(mixes: &[f32], scale: f32, base: &[f32], hc: usize, eps: f32, iters: usize, comb: &mut [f32]) {
    for src in 0..hc {
        let row = &mut comb[src * hc..(src + 1) * hc];
        let mut max = f32::NEG_INFINITY;
        for dst in 0..hc {
            let idx = 2 * hc + dst + hc * src;
            row[dst] = mixes[idx].mul_add(scale, base[idx]);
            max = max.max(row[dst]);
        }
        let mut sum = 0.0f32;
        for v in row.iter_mut() {
            *v = (*v - max).exp();
            sum += *v;
        }
        let inv = 1.0 / sum;
        row.iter_mut().for_each(|v| *v = v.mul_add(inv, eps));
    }
    norm_cols(comb, hc, eps);
    for _ in 1..iters {
        norm_rows(comb, hc, eps);
        norm_cols(comb, hc, eps);
    }
}

/// Each dst column divided by eps + its sum over src (ggml_dsv4_hc_comb_norm_cols).
fn norm_cols(comb: &mut [f32], hc: usize, eps: f32) {
    normalize(comb, hc, eps, 1, hc);
}

/// Each src row divided by eps + its sum over dst (ggml_dsv4_hc_comb_norm_rows).
fn norm_rows(comb: &mut [f32], hc: usize, eps: f32) {
    normalize(comb, hc, eps, hc, 1);
}

/// For each of the `hc` lines (line o: entries o·outer + i·inner), divides them by eps + their
/// sum, summed in order of i.
fn normalize(comb: &mut [f32], hc: usize, eps: f32, outer: usize, inner: usize) {
    for o in 0..hc {
        let sum = (0..hc).fold(eps, |s, i| s + comb[o * outer + i * inner]);
        let inv = 1.0 / sum;
        (0..hc).for_each(|i| comb[o * outer + i * inner] *= inv);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::quant::test_util::upstream_op as f32s;

    /// llama.cpp's fused DSV4_HC_COMB op (block 0's attention site of the tiny V4 model, scenario
    /// A's 40 tokens) on its own inputs (tests/data/upstream_ops: `hc_mixes-0` → `hc_comb-0`),
    /// bit for bit. The same computation without the two FMAs gives other bits on these inputs,
    /// which this asserts too so that the comparison can see them dropped.
    #[test]
    fn sinkhorn_is_llama_cpps() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/deepseek-family/tiny-deepseek4-q8_0.gguf");
        let f = GgufFile::open(&path, true).unwrap();
        let (hc, eps, iters) = (4, 1e-6f32, 20);
        let m = (2 + hc) * hc;
        let scale = vector(&f, "blk.0.hc_attn_scale.weight", 3).unwrap();
        let base = vector(&f, "blk.0.hc_attn_base.weight", m).unwrap();
        let (mixes, want) = (f32s("dsv4_hc_mixes_0.f32"), f32s("dsv4_hc_comb_0.f32"));
        assert_eq!((mixes.len(), want.len()), (40 * m, 40 * hc * hc));
        let mut unfused_differs = false;
        for t in 0..40 {
            let mx = &mixes[t * m..(t + 1) * m];
            let want = &want[t * hc * hc..(t + 1) * hc * hc];
            let mut comb = [0f32; 16];
            sinkhorn(mx, scale[2], &base, hc, eps, iters, &mut comb);
            for (i, (a, b)) in comb.iter().zip(want).enumerate() {
                assert_eq!(a.to_bits(), b.to_bits(), "token {t} [{i}]: {a} vs llama.cpp's {b}");
            }
            // without the contraction: the affine step and `·inv + eps` rounded twice
            for src in 0..hc {
                let row = &mut comb[src * hc..(src + 1) * hc];
                for dst in 0..hc {
                    let idx = 2 * hc + dst + hc * src;
                    row[dst] = mx[idx] * scale[2] + base[idx];
                }
                let max = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
                row.iter_mut().for_each(|v| *v = (*v - max).exp());
                let inv = 1.0 / row.iter().sum::<f32>();
                row.iter_mut().for_each(|v| *v = *v * inv + eps);
            }
            norm_cols(&mut comb, hc, eps);
            for _ in 1..iters {
                norm_rows(&mut comb, hc, eps);
                norm_cols(&mut comb, hc, eps);
            }
            unfused_differs |= comb.iter().zip(want).any(|(a, b)| a.to_bits() != b.to_bits());
        }
        assert!(unfused_differs, "the computation without FMAs gave the same bits: the test would not see them dropped");
    }
}
