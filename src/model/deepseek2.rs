//! Recipe: DeepSeek V2, V2-Lite, V3, R1 (`deepseek2`; upstream b11312 `src/models/deepseek2.cpp`,
//! absorbed layout) and V3.2 (`deepseek32`, `src/models/deepseek32.cpp`): Multi-head Latent
//! Attention — for V3.2 sparse, over the cells its lightning indexer chooses — then a dense
//! SwiGLU in the first `leading_dense_block_count` blocks and the routed experts plus shared
//! experts in the others; then the output head.

use super::attn_mla::{self, Dsa, MlaScratch, MlaWeights, Query};
use super::indexer::{IndexerScratch, IndexerWeights};
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
    pub attn: MlaWeights,
    /// deepseek32's lightning indexer.
    pub indexer: Option<IndexerWeights>,
    pub ffn_norm: Vec<f32>,
    pub ffn: FeedForward,
}

pub fn load(f: &GgufFile, hp: &HParams) -> Result<Vec<Block>, String> {
    let e = hp.n_embd;
    let (m, p) = (hp.mla.as_ref().ok_or("deepseek2 needs its MLA parameters")?, hp.moe.as_ref().ok_or("deepseek2 needs its expert parameters")?);
    (0..layer_count(f, hp)?)
        .map(|i| {
            let attn = MlaWeights::load(f, hp, m, i)?;
            let indexer = match &hp.indexer {
                None => None,
                Some(_) if matches!(attn.q, Query::Direct(_)) => return Err(format!("blk.{i}: deepseek32 needs attn_q_a / attn_q_b (its indexer reads the query bottleneck)")),
                Some(x) => Some(IndexerWeights::load(f, hp, x, m.q_lora_rank, i)?),
            };
            Ok(Block {
                attn_norm: vector(f, &format!("blk.{i}.attn_norm.weight"), e)?,
                attn,
                indexer,
                ffn_norm: vector(f, &format!("blk.{i}.ffn_norm.weight"), e)?,
                ffn: FeedForward::load(f, hp, p, i)?,
            })
        })
        .collect()
}

/// `n_cells`: the cells of one KV stream (the indexer scores up to that many per token).
pub fn scratch(model: &Model, blocks: &[Block], n_ubatch: usize, n_threads: usize, n_cells: usize, types: (GgmlType, GgmlType)) -> Result<Scratch, String> {
    let hp = &model.hp;
    let (m, p) = (hp.mla.as_ref().expect("checked at load"), hp.moe.as_ref().expect("checked at load"));
    let ff = hp.n_ff.max(p.n_ff_exp * p.n_expert_shared).max(p.n_ff_exp);
    let widest = m.q_lora_rank.max(hp.n_head * m.v_head).max(ff);
    let indexer_mats = blocks.iter().filter_map(|b| b.indexer.as_ref()).flat_map(|x| x.mats());
    let mats: Vec<&Mat> = blocks.iter().flat_map(|b| b.attn.mats().into_iter().chain(b.ffn.mats())).chain(indexer_mats).chain([&model.weights.output]).collect();
    let moes = || blocks.iter().filter_map(|b| if let FeedForward::Moe(x) = &b.ffn { Some(x) } else { None });
    let decode = blocks.iter().map(|b| b.attn.decode_act_bytes(hp, m)).chain(moes().map(|x| x.decode_act_bytes(p))).max().unwrap_or(0);
    let act = proj::act_bytes(mats.iter().copied(), n_ubatch).max(decode);
    let mut s = Scratch::new(hp, n_ubatch, widest, act, (n_ubatch * ff).max(MoeScratch::ffn_floats(p, n_ubatch)))?;
    s.panel_bytes = super::panel_bytes(mats.iter().copied());
    s.mla = Some(MlaScratch::new(hp, m, n_ubatch, n_threads, types)?);
    s.moe = Some(MoeScratch::new(p, moes(), hp.n_embd, n_ubatch)?);
    if let Some(x) = &hp.indexer {
        s.indexer = Some(IndexerScratch::new(x, n_ubatch, n_threads, n_cells)?);
    }
    Ok(s)
}

#[allow(clippy::too_many_arguments)]
pub fn forward(model: &Model, blocks: &[Block], ub: &UBatch<'_>, kv: &mut KvCache, s: &mut Scratch, pool: &ThreadPool, rope: &RopeParams, logits: &mut [f32], embd: Option<&mut [f32]>) {
    let n = ub.tokens.len();
    let (m, p) = (model.hp.mla.as_ref().expect("checked at load"), model.hp.moe.as_ref().expect("checked at load"));
    let (c, mla, ms) = (&mut s.common, s.mla.as_mut().expect("deepseek2 scratch"), s.moe.as_mut().expect("deepseek2 scratch"));
    if let Some(x) = s.indexer.as_mut() {
        x.plan(ub, kv);
    }
    head::embed(model, ub, c, rope);
    for (il, b) in blocks.iter().enumerate() {
        head::norm_rows(model, c, &b.attn_norm, n);
        let dsa = match (&b.indexer, model.hp.indexer.as_ref(), s.indexer.as_mut()) {
            (Some(weights), Some(params), Some(scratch)) => Some(Dsa { params, weights, scratch }),
            _ => None,
        };
        attn_mla::forward(model, m, &b.attn, il, ub, kv, c, mla, pool, rope, dsa);
        head::residual(model, c, n);
        // the last block's feed-forward only for the rows with outputs, as upstream
        let n = if il + 1 == blocks.len() { head::keep_out_rows(model, ub, c) } else { n };
        head::norm_rows(model, c, &b.ffn_norm, n);
        b.ffn.forward(model, p, c, &mut s.ffn, ms, pool, n);
        head::residual(model, c, n);
    }
    head::output(model, ub, c, pool, logits, embd, true);
}
