//! Recipe: DeepSeek-MoE 16B / DeepSeek V1 (`deepseek`; upstream b11312 `src/models/deepseek.cpp`):
//! multi-head attention with NORM RoPE over the whole head, then a dense SwiGLU in the first
//! `leading_dense_block_count` blocks and the routed experts (softmax gating, no groups, no
//! renormalisation) plus shared experts in the others; then the output head.

use super::attn_mha::{self, Accumulator, MhaScratch, MhaWeights};
use super::moe::MoeScratch;
use super::weights::{layer_count, vector, Mat};
use super::{head, proj, FeedForward, HParams, Model, Scratch, UBatch};
use crate::gguf::GgufFile;
use crate::kernels::rope::RopeParams;
use crate::kv::KvCache;
use crate::quant::GgmlType;
use crate::threads::ThreadPool;

pub struct Block {
    pub attn_norm: Vec<f32>,
    pub attn: MhaWeights,
    pub ffn_norm: Vec<f32>,
    pub ffn: FeedForward,
}

pub fn load(f: &GgufFile, hp: &HParams) -> Result<Vec<Block>, String> {
    let e = hp.n_embd;
    let p = hp.moe.as_ref().ok_or("deepseek needs its expert parameters")?;
    if hp.n_rot != hp.head_dim_k {
        return Err(format!("deepseek rotates the whole head: rope.dimension_count {} must equal the head size {}", hp.n_rot, hp.head_dim_k));
    }
    (0..layer_count(f, hp)?)
        .map(|i| {
            Ok(Block {
                attn_norm: vector(f, &format!("blk.{i}.attn_norm.weight"), e)?,
                attn: MhaWeights::load(f, hp, i)?,
                ffn_norm: vector(f, &format!("blk.{i}.ffn_norm.weight"), e)?,
                ffn: FeedForward::load(f, hp, p, i)?,
            })
        })
        .collect()
}

pub fn scratch(model: &Model, blocks: &[Block], n_ubatch: usize, n_threads: usize, types: (GgmlType, GgmlType)) -> Result<Scratch, String> {
    let hp = &model.hp;
    let p = hp.moe.as_ref().expect("checked at load");
    let widest = hp.n_ff.max(hp.q_dim()).max(hp.n_head * hp.head_dim_v);
    let mats: Vec<&Mat> = blocks.iter().flat_map(|b| b.attn.mats().into_iter().chain(b.ffn.mats())).chain([&model.weights.output]).collect();
    let moes = || blocks.iter().filter_map(|b| if let FeedForward::Moe(m) = &b.ffn { Some(m) } else { None });
    let act = proj::act_bytes(mats.iter().copied(), n_ubatch).max(moes().map(|m| m.decode_act_bytes(p)).max().unwrap_or(0));
    let mut s = Scratch::new(hp, n_ubatch, widest, act, (n_ubatch * hp.n_ff).max(MoeScratch::ffn_floats(p, n_ubatch)))?;
    s.panel_bytes = super::panel_bytes(mats.iter().copied());
    s.mha = Some(MhaScratch::new(hp, n_ubatch, n_threads, Accumulator::F16, types)?);
    s.moe = Some(MoeScratch::new(p, moes(), hp.n_embd, n_ubatch)?);
    Ok(s)
}

#[allow(clippy::too_many_arguments)]
pub fn forward(model: &Model, blocks: &[Block], ub: &UBatch<'_>, kv: &mut KvCache, s: &mut Scratch, pool: &ThreadPool, rope: &RopeParams, logits: &mut [f32], embd: Option<&mut [f32]>) {
    let n = ub.tokens.len();
    let p = model.hp.moe.as_ref().expect("checked at load");
    let (c, mha, ms) = (&mut s.common, s.mha.as_mut().expect("deepseek scratch"), s.moe.as_mut().expect("deepseek scratch"));
    head::embed(model, ub, c, rope);
    for (il, b) in blocks.iter().enumerate() {
        head::norm_rows(model, c, &b.attn_norm, n);
        attn_mha::forward(model, &b.attn, il, ub, kv, c, mha, pool, rope);
        head::residual(model, c, n);
        // the last block's feed-forward only for the rows with outputs, as upstream
        let n = if il + 1 == blocks.len() { head::keep_out_rows(model, ub, c) } else { n };
        head::norm_rows(model, c, &b.ffn_norm, n);
        b.ffn.forward(model, p, c, &mut s.ffn, ms, pool, n);
        head::residual(model, c, n);
    }
    head::output(model, ub, c, pool, logits, embd, true);
}
