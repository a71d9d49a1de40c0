//! Recipe: the dense decoder of llama and qwen2 (also R1-Distill-Llama/Qwen, DeepSeek-LLM,
//! DeepSeek-Coder). They differ in RoPE mode (the context's `RopeParams`) and Q/K/V biases
//! (present in qwen2 files). Per block: RMSNorm → multi-head attention → residual → RMSNorm →
//! SwiGLU → residual; then the output head.

use super::attn_mha::{self, Accumulator, MhaScratch, MhaWeights};
use super::ffn::{self, Ffn};
use super::weights::{layer_count, vector};
use super::{head, proj, HParams, Mat, Model, Scratch, UBatch};
use crate::gguf::GgufFile;
use crate::kernels::rope::RopeParams;
use crate::kv::KvCache;
use crate::quant::GgmlType;
use crate::threads::ThreadPool;

pub struct Block {
    pub attn_norm: Vec<f32>,
    pub attn: MhaWeights,
    pub ffn_norm: Vec<f32>,
    pub ffn: Ffn,
}

pub fn load(f: &GgufFile, hp: &HParams) -> Result<Vec<Block>, String> {
    let e = hp.n_embd;
    (0..layer_count(f, hp)?)
        .map(|i| {
            Ok(Block {
                attn_norm: vector(f, &format!("blk.{i}.attn_norm.weight"), e)?,
                attn: MhaWeights::load(f, hp, i)?,
                ffn_norm: vector(f, &format!("blk.{i}.ffn_norm.weight"), e)?,
                ffn: Ffn::load(f, i, "", e, hp.n_ff)?,
            })
        })
        .collect()
}

pub fn scratch(model: &Model, blocks: &[Block], n_ubatch: usize, n_threads: usize, types: (GgmlType, GgmlType)) -> Result<Scratch, String> {
    let hp = &model.hp;
    let widest = hp.n_ff.max(hp.q_dim()).max(hp.n_head * hp.head_dim_v);
    let mats: Vec<&Mat> = blocks.iter().flat_map(|b| b.attn.mats().into_iter().chain(b.ffn.mats())).chain([&model.weights.output]).collect();
    let mut s = Scratch::new(hp, n_ubatch, widest, proj::act_bytes(mats.iter().copied(), n_ubatch), n_ubatch * hp.n_ff)?;
    s.panel_bytes = super::panel_bytes(mats);
    s.mha = Some(MhaScratch::new(hp, n_ubatch, n_threads, Accumulator::F32, types)?);
    Ok(s)
}

#[allow(clippy::too_many_arguments)]
pub fn forward(model: &Model, blocks: &[Block], ub: &UBatch<'_>, kv: &mut KvCache, s: &mut Scratch, pool: &ThreadPool, rope: &RopeParams, logits: &mut [f32], embd: Option<&mut [f32]>) {
    let n = ub.tokens.len();
    let (c, mha) = (&mut s.common, s.mha.as_mut().expect("llama scratch"));
    head::embed(model, ub, c, rope);
    for (il, b) in blocks.iter().enumerate() {
        head::norm_rows(model, c, &b.attn_norm, n);
        attn_mha::forward(model, &b.attn, il, ub, kv, c, mha, pool, rope);
        head::residual(model, c, n);
        // the last block's feed-forward only for the rows with outputs, as upstream
        let n = if il + 1 == blocks.len() { head::keep_out_rows(model, ub, c) } else { n };
        head::norm_rows(model, c, &b.ffn_norm, n);
        ffn::forward(model, &b.ffn, c, &mut s.ffn, pool, n);
        head::residual(model, c, n);
    }
    head::output(model, ub, c, pool, logits, embd, true);
}
