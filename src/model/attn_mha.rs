//! Block: multi-head attention with grouped K/V heads (llama, qwen2, DeepSeek V1): Q/K/V
//! projections (+ optional biases), RoPE on Q and K, K/V stored in the tokens' cells in the
//! cache's types (quantized ones Hadamard-rotated first, as upstream: `kv::types`),
//! causal attention over each token's sequence, output projection. Leaves the block's output
//! in the common scratch's `proj`; owns its own buffers (`MhaScratch`), allocates nothing per
//! pass, and knows nothing of the feed-forward that follows.

use std::sync::atomic::{AtomicUsize, Ordering};

use super::proj::{project, project_all};
use super::weights::{mat, opt_vector, Mat};
use super::{Common, HParams, Model, UBatch};
use crate::gguf::GgufFile;
use crate::kernels::add_assign;
pub use crate::kernels::attention::Accumulator;
use crate::kernels::attention::{attend_tokens, split_tiles, tile_tokens, TileScratch, TILED_FROM_ROWS, TILE_ROWS};
use crate::kernels::rope::{self, RopeParams};
use crate::kv::types::{fwht, key_rotation, value_rotation, CacheType};
use crate::kv::KvCache;
use crate::quant::GgmlType;
use crate::sys::alloc::try_zeroed;
use crate::threads::{SharedOut, ThreadPool};

pub struct MhaWeights {
    pub wq: Mat,
    pub wk: Mat,
    pub wv: Mat,
    pub bq: Option<Vec<f32>>,
    pub bk: Option<Vec<f32>>,
    pub bv: Option<Vec<f32>>,
    pub wo: Mat,
}

impl MhaWeights {
    /// Block `i`'s `attn_q/k/v/output` (and biases where the file has them).
    pub fn load(f: &GgufFile, hp: &HParams, i: usize) -> Result<MhaWeights, String> {
        let n = |s: &str| format!("blk.{i}.{s}");
        let e = hp.n_embd;
        Ok(MhaWeights {
            wq: mat(f, &n("attn_q.weight"), e, hp.q_dim())?,
            wk: mat(f, &n("attn_k.weight"), e, hp.kv_dim_k())?,
            wv: mat(f, &n("attn_v.weight"), e, hp.kv_dim_v())?,
            bq: opt_vector(f, &n("attn_q.bias"), hp.q_dim())?,
            bk: opt_vector(f, &n("attn_k.bias"), hp.kv_dim_k())?,
            bv: opt_vector(f, &n("attn_v.bias"), hp.kv_dim_v())?,
            wo: mat(f, &n("attn_output.weight"), hp.n_head * hp.head_dim_v, e)?,
        })
    }

    pub fn mats(&self) -> [&Mat; 4] {
        [&self.wq, &self.wk, &self.wv, &self.wo]
    }
}

pub struct MhaScratch {
    pub(super) q: Vec<f32>,
    pub(super) k: Vec<f32>,
    pub(super) v: Vec<f32>,
    pub(super) att: Vec<f32>,
    /// Per thread, the attention tile's buffers.
    tiles: Vec<TileScratch>,
    /// First token of each attention tile (and the end).
    tile_starts: Vec<usize>,
    /// The orders of the Hadamard rotations of keys (with the queries) and values (with the
    /// attention's output) for a quantized cache; 0 for none.
    k_rot: usize,
    v_rot: usize,
}

impl MhaScratch {
    /// `types`: the cache's key and value types.
    pub fn new(hp: &HParams, n_ubatch: usize, n_threads: usize, accumulator: Accumulator, types: (GgmlType, GgmlType)) -> Result<MhaScratch, String> {
        let n = n_ubatch;
        let group = hp.n_head / hp.n_head_kv;
        let cache_type = |t: GgmlType| CacheType::from_ggml(t as i32).ok_or_else(|| format!("{} is not a KV cache type", t.name()));
        let (k_rot, v_rot) = (key_rotation(cache_type(types.0)?, hp.head_dim_k), value_rotation(cache_type(types.1)?, hp.head_dim_v));
        Ok(MhaScratch {
            q: try_zeroed(n * hp.q_dim(), "scratch")?,
            k: try_zeroed(n * hp.kv_dim_k(), "scratch")?,
            v: try_zeroed(n * hp.kv_dim_v(), "scratch")?,
            att: try_zeroed(n * hp.n_head * hp.head_dim_v, "scratch")?,
            tiles: (0..n_threads.max(1)).map(|_| TileScratch::with_types(TILE_ROWS.max(group), hp.head_dim_k, hp.head_dim_v, accumulator, types.0, types.1)).collect::<Result<_, _>>()?,
            tile_starts: try_zeroed(n + 1, "scratch")?,
            k_rot,
            v_rot,
        })
    }

    pub fn bytes(&self) -> usize {
        4 * (self.q.len() + self.k.len() + self.v.len() + self.att.len())
    }
}

fn add_bias(rows: &mut [f32], bias: &Option<Vec<f32>>) {
    if let Some(b) = bias {
        for row in rows.chunks_exact_mut(b.len()) {
            add_assign(row, b);
        }
    }
}

/// Attention of block `il` over `c.xn` (the normed input, `n` rows); result in `c.proj`.
#[allow(clippy::too_many_arguments)]
pub fn forward(model: &Model, w: &MhaWeights, il: usize, ub: &UBatch<'_>, kv: &mut KvCache, c: &mut Common, s: &mut MhaScratch, pool: &ThreadPool, rope: &RopeParams) {
    let hp = &model.hp;
    let n = ub.tokens.len();
    let hd_k = hp.head_dim_k;
    project_all(model, pool, &mut c.act, &c.xn, n, [(&w.wq, &mut s.q), (&w.wk, &mut s.k), (&w.wv, &mut s.v)]);
    add_bias(&mut s.q[..n * hp.q_dim()], &w.bq);
    add_bias(&mut s.k[..n * hp.kv_dim_k()], &w.bk);
    add_bias(&mut s.v[..n * hp.kv_dim_v()], &w.bv);

    let nr = hp.n_rot.max(2);
    for t in 0..n {
        let cache = &c.rope_cache[t * nr..(t + 1) * nr];
        for head in s.q[t * hp.q_dim()..(t + 1) * hp.q_dim()].chunks_exact_mut(hd_k) {
            rope::apply(rope.mode, hp.n_rot, cache, head);
        }
        for head in s.k[t * hp.kv_dim_k()..(t + 1) * hp.kv_dim_k()].chunks_exact_mut(hd_k) {
            rope::apply(rope.mode, hp.n_rot, cache, head);
        }
    }
    store_and_attend(hp, kv, il, ub, s, pool, n, 1.0 / (hd_k as f32).sqrt());
    project(model, pool, &mut c.act, &w.wo, &s.att, n, &mut c.proj);
}

/// The cache's part of multi-head attention over the roped queries, keys and values in `s`
/// (`n` tokens): each token's key and value stored in its cell, every query head's attention
/// (scores scaled by `scale`) into `s.att`.
#[allow(clippy::too_many_arguments)]
pub fn store_and_attend(hp: &HParams, kv: &mut KvCache, il: usize, ub: &UBatch<'_>, s: &mut MhaScratch, pool: &ThreadPool, n: usize, scale: f32) {
    for t in 0..n {
        // a quantized cache: queries and keys rotated alike (their dot products unchanged),
        // values rotated and the output rotated back (llama-graph.cpp `build_attn`)
        if s.k_rot > 0 {
            fwht(&mut s.q[t * hp.q_dim()..(t + 1) * hp.q_dim()], s.k_rot);
            fwht(&mut s.k[t * hp.kv_dim_k()..(t + 1) * hp.kv_dim_k()], s.k_rot);
        }
        if s.v_rot > 0 {
            fwht(&mut s.v[t * hp.kv_dim_v()..(t + 1) * hp.kv_dim_v()], s.v_rot);
        }
        kv.store(il, ub.cells[t], &s.k[t * hp.kv_dim_k()..(t + 1) * hp.kv_dim_k()], &s.v[t * hp.kv_dim_v()..(t + 1) * hp.kv_dim_v()]);
    }

    attention(hp, kv, il, ub, &s.q, &mut s.att, &mut s.tiles, &mut s.tile_starts, pool, n, scale);
    if s.v_rot > 0 {
        fwht(&mut s.att[..n * hp.n_head * hp.head_dim_v], s.v_rot);
    }
}

/// Attention of every token's query heads, one work item per (tile of consecutive tokens of a
/// sequence, K/V head): the item's query rows read each cached row once.
#[allow(clippy::too_many_arguments)]
fn attention(hp: &HParams, kv: &KvCache, il: usize, ub: &UBatch<'_>, q: &[f32], att: &mut [f32], tiles: &mut [TileScratch], starts: &mut [usize], pool: &ThreadPool, n: usize, scale: f32) {
    let (hd_k, hd_v) = (hp.head_dim_k, hp.head_dim_v);
    let group = hp.n_head / hp.n_head_kv;
    // a head's bytes of key and of value
    let (kb, vb) = (kv.shape.k_type.row_bytes(hd_k), kv.shape.v_type.row_bytes(hd_v));
    let n_tiles = split_tiles(&ub.seq[..n], tile_tokens(group), starts);
    let starts = &*starts;
    let tiled = kv.tokens_per_stream(&ub.seq[..n]) >= TILED_FROM_ROWS;
    // one token: upstream's split-KV kernel over its view when that holds 512 cells or more
    let split = (n == 1).then(|| (kv.view_cells(kv.stream_of(ub.seq[0])), pool.n_threads()));
    let n_cells = kv.shape.n_cells;
    let out = SharedOut::new(&mut att[..n * hp.n_head * hd_v]);
    let scratch = SharedOut::new(tiles);
    let items = n_tiles * hp.n_head_kv;
    // items are claimed one by one, latest tokens first: a token's cost grows with the cells
    // it attends to, so a static split gave one thread three times the other's work in prefill
    let next = AtomicUsize::new(0);
    pool.run(&|ith, _nth| {
        // SAFETY: each thread uses only its own scratch slot.
        let tile = unsafe { &mut scratch.slice(ith..ith + 1)[0] };
        tile.set_tiled(tiled);
        tile.set_split(split);
        loop {
            let claimed = next.fetch_add(1, Ordering::Relaxed);
            if claimed >= items {
                break;
            }
            let item = items - 1 - claimed;
            let (i, kvh) = (item / hp.n_head_kv, item % hp.n_head_kv);
            let seq = ub.seq[starts[i]];
            let stream = kv.stream_of(seq);
            let cells = |limit: i32| {
                kv.cells_in_use(stream)
                    .filter(move |(_, c)| c.pos >= 0 && c.pos <= limit && c.seqs.contains(seq))
                    .map(move |(i, c)| (i % n_cells, c.pos, &kv.k_bytes(il, i)[kvh * kb..(kvh + 1) * kb], &kv.v_bytes(il, i)[kvh * vb..(kvh + 1) * vb]))
            };
            let tokens = starts[i]..starts[i + 1];
            let query = |t: usize, g: usize| {
                let h = t * hp.n_head + kvh * group + g;
                &q[h * hd_k..(h + 1) * hd_k]
            };
            attend_tokens(tile, tokens, ub.limits, group, scale, query, cells, |t, g, tile, row| {
                let h = t * hp.n_head + kvh * group + g;
                // SAFETY: head h of token t is written by exactly one thread (the one with the
                // item of its tile and K/V head).
                tile.output(row, unsafe { out.slice(h * hd_v..(h + 1) * hd_v) });
            });
        }
    });
}
