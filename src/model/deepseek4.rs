//! Recipe: DeepSeek V4 (`deepseek4`; upstream b11312 `src/models/deepseek4.cpp:1222-1359`).
//! Every token carries four hyper-connection streams (`hyper`): before each sub-block they are
//! mixed into its input, after it its output is written back into every stream through a
//! Sinkhorn-normalised mixing matrix. The sub-blocks are V4's attention (`attn_dsv4`: shared
//! key/value head, sliding window, compressed blocks, sinks, grouped low-rank output) and the
//! routed experts (`moe`: sqrt-softplus gating, hash routing in the first blocks, SwiGLU clamp)
//! with the shared expert. The head folds the streams into one before the output norm.

use super::attn_dsv4::{self, Dsv4Attn, Dsv4AttnScratch};
use super::hyper::{HcScratch, HcWeights};
use super::moe::MoeScratch;
use super::weights::{layer_count, vector, Mat};
use super::{head, proj, FeedForward, HParams, Model, Scratch, UBatch};
use crate::gguf::GgufFile;
use crate::kernels::rope::{self, RopeParams};
use crate::kv::KvCache;
use crate::sys::alloc::try_zeroed;
use crate::threads::ThreadPool;

pub struct Block {
    pub hc_attn: HcWeights,
    pub attn_norm: Vec<f32>,
    pub attn: Dsv4Attn,
    pub hc_ffn: HcWeights,
    pub ffn_norm: Vec<f32>,
    pub ffn: FeedForward,
}

pub struct Layers {
    pub blocks: Vec<Block>,
    /// The head's fold of the streams (`output_hc_*`).
    pub head: HcWeights,
}

/// What a context needs beyond the common scratch: the attention's buffers and the streams.
pub struct Dsv4Scratch {
    pub attn: Dsv4AttnScratch,
    pub hc: HcScratch,
    /// Per token: the RoPE tables of the plain and of the compressed blocks' parameters.
    rope_plain: Vec<f32>,
    rope_comp: Vec<f32>,
}

impl Dsv4Scratch {
    pub fn bytes(&self) -> usize {
        self.attn.bytes() + self.hc.bytes() + 4 * (self.rope_plain.capacity() + self.rope_comp.capacity())
    }
}

pub fn load(f: &GgufFile, hp: &HParams) -> Result<Layers, String> {
    let e = hp.n_embd;
    let (d4, p) = (hp.dsv4.as_ref().ok_or("deepseek4 needs its V4 parameters")?, hp.moe.as_ref().ok_or("deepseek4 needs its expert parameters")?);
    if f.tensor("output.weight").is_none() {
        return Err("deepseek4 needs 'output.weight' (its output is never tied to the embeddings)".into());
    }
    let blocks = (0..layer_count(f, hp)?)
        .map(|i| {
            let n = |s: &str| format!("blk.{i}.{s}");
            Ok(Block {
                hc_attn: HcWeights::load(f, &n("hc_attn"), d4.hc, e, false)?,
                attn_norm: vector(f, &n("attn_norm.weight"), e)?,
                attn: Dsv4Attn::load(f, hp, d4, i)?,
                hc_ffn: HcWeights::load(f, &n("hc_ffn"), d4.hc, e, false)?,
                ffn_norm: vector(f, &n("ffn_norm.weight"), e)?,
                ffn: FeedForward::load(f, hp, p, i)?,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(Layers { blocks, head: HcWeights::load(f, "output_hc", d4.hc, e, true)? })
}

pub fn scratch(model: &Model, l: &Layers, n_ubatch: usize, n_threads: usize, n_cells: usize) -> Result<Scratch, String> {
    let hp = &model.hp;
    let (d4, p) = (hp.dsv4.as_ref().expect("checked at load"), hp.moe.as_ref().expect("checked at load"));
    let ff = (p.n_ff_exp * p.n_expert_shared).max(p.n_ff_exp);
    let blocks = &l.blocks;
    let mats: Vec<&Mat> = blocks
        .iter()
        .flat_map(|b| b.attn.mats().into_iter().chain(b.ffn.mats()).chain([&b.hc_attn.fn_, &b.hc_ffn.fn_]))
        .chain([&model.weights.output, &l.head.fn_])
        .collect();
    let moes = || blocks.iter().filter_map(|b| if let FeedForward::Moe(x) = &b.ffn { Some(x) } else { None });
    let decode = moes().map(|x| x.decode_act_bytes(p)).max().unwrap_or(0);
    let act = proj::act_bytes(mats.iter().copied(), n_ubatch).max(decode);
    let widest = d4.q_lora_rank.max(ff);
    let mut s = Scratch::new(hp, n_ubatch, widest, act, (n_ubatch * ff).max(MoeScratch::ffn_floats(p, n_ubatch)))?;
    s.panel_bytes = super::panel_bytes(mats.iter().copied());
    s.moe = Some(MoeScratch::new(p, moes(), hp.n_embd, n_ubatch)?);
    let rw = hp.n_rot.max(2);
    s.dsv4 = Some(Dsv4Scratch {
        attn: Dsv4AttnScratch::new(hp, d4, n_ubatch, n_threads, n_cells)?,
        hc: HcScratch::new(d4.hc, hp.n_embd, n_ubatch)?,
        rope_plain: try_zeroed(n_ubatch * rw, "scratch")?,
        rope_comp: try_zeroed(n_ubatch * rw, "scratch")?,
    });
    Ok(s)
}

#[allow(clippy::too_many_arguments)]
pub fn forward(model: &Model, l: &Layers, ub: &UBatch<'_>, kv: &mut KvCache, s: &mut Scratch, pool: &ThreadPool, rope: &RopeParams, logits: &mut [f32], embd: Option<&mut [f32]>) {
    let n = ub.tokens.len();
    let hp = &model.hp;
    let e = hp.n_embd;
    let (d4, p) = (hp.dsv4.as_ref().expect("checked at load"), hp.moe.as_ref().expect("checked at load"));
    let (c, ms, x) = (&mut s.common, s.moe.as_mut().expect("deepseek4 scratch"), s.dsv4.as_mut().expect("deepseek4 scratch"));
    head::embed(model, ub, c, rope);
    let (plain, comp) = (attn_dsv4::rope_params(rope, d4, false), attn_dsv4::rope_params(rope, d4, true));
    let rw = hp.n_rot.max(2);
    for t in 0..n {
        rope::fill_cache(&plain, ub.pos[t] as f32, None, &mut x.rope_plain[t * rw..(t + 1) * rw]);
        rope::fill_cache(&comp, ub.pos[t] as f32, None, &mut x.rope_comp[t * rw..(t + 1) * rw]);
    }
    ms.tokens[..n].copy_from_slice(ub.tokens);
    x.hc.start(c, e, n);
    for (il, b) in l.blocks.iter().enumerate() {
        x.hc.pre(model, pool, c, &b.hc_attn, d4.hc_eps, d4.sinkhorn_iters, n);
        head::norm_rows(model, c, &b.attn_norm, n);
        let tables = if b.attn.ratio != 0 { &x.rope_comp } else { &x.rope_plain };
        attn_dsv4::forward(model, d4, &b.attn, il, ub, kv, c, &mut x.attn, pool, rope, tables);
        x.hc.post(&c.proj, e, n);
        x.hc.pre(model, pool, c, &b.hc_ffn, d4.hc_eps, d4.sinkhorn_iters, n);
        head::norm_rows(model, c, &b.ffn_norm, n);
        b.ffn.forward(model, p, c, &mut s.ffn, ms, pool, n);
        x.hc.post(&c.proj, e, n);
    }
    x.hc.head(model, pool, c, &l.head, d4.hc_eps, n);
    head::output(model, ub, c, pool, logits, embd, false);
}
