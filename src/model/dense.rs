//! The dense decoder's forward pass (llama and qwen2; they differ in RoPE mode and Q/K/V
//! biases). It reads top to bottom as the architecture's recipe; all buffers come from one
//! `DenseScratch` sized at context creation, so a forward pass allocates nothing.

use std::sync::atomic::{AtomicUsize, Ordering};

use super::weights::Mat;
use super::Model;
use crate::kernels::attention::{attend_tokens, split_tiles, tile_tokens, TileScratch, TILE_ROWS};
use crate::kernels::matmul::{activation_bytes, matmul, matmul_all, quantize_activations, Product};
use crate::kernels::norm::rms_norm;
use crate::kernels::rope::{self, RopeParams};
use crate::kernels::{add_assign, swiglu_on};
use crate::kv::KvCache;
use crate::quant::{self, GgmlType};
use crate::sys::alloc::try_zeroed;
use crate::threads::{SharedOut, ThreadPool};

/// One micro-batch as the forward pass sees it: per token its id, position, KV cell and the
/// (first) sequence whose cells it attends to; `out_rows` are the tokens that produce outputs.
pub struct UBatch<'a> {
    pub tokens: &'a [i32],
    pub pos: &'a [i32],
    pub cells: &'a [usize],
    pub seq: &'a [usize],
    pub out_rows: &'a [usize],
}

pub struct DenseScratch {
    n_ubatch: usize,
    x: Vec<f32>,
    xn: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    att: Vec<f32>,
    proj: Vec<f32>,
    gate: Vec<f32>,
    up: Vec<f32>,
    act: Vec<u8>,
    act_ty: Option<GgmlType>,
    rope_cache: Vec<f32>,
    /// Per thread, the attention tile's buffers.
    tiles: Vec<TileScratch>,
    /// First token of each attention tile (and the end).
    tile_starts: Vec<usize>,
}

impl DenseScratch {
    pub fn new(model: &Model, n_ubatch: usize, n_threads: usize) -> Result<DenseScratch, String> {
        let hp = &model.hp;
        let w = &model.weights;
        let widest = hp.n_embd.max(hp.n_ff).max(hp.q_dim()).max(hp.n_head * hp.head_dim_v);
        let group = hp.n_head / hp.n_head_kv;
        let mats = w.layers.iter().flat_map(|l| [&l.wq, &l.wk, &l.wv, &l.wo, &l.ffn_gate, &l.ffn_up, &l.ffn_down]).chain([&w.output]);
        let act_bytes = mats.map(|m| activation_bytes(m.ty, m.cols, n_ubatch)).max().unwrap_or(0);
        Ok(DenseScratch {
            n_ubatch,
            x: try_zeroed(n_ubatch * hp.n_embd, "scratch")?,
            xn: try_zeroed(n_ubatch * widest, "scratch")?,
            q: try_zeroed(n_ubatch * hp.q_dim(), "scratch")?,
            k: try_zeroed(n_ubatch * hp.kv_dim_k(), "scratch")?,
            v: try_zeroed(n_ubatch * hp.kv_dim_v(), "scratch")?,
            att: try_zeroed(n_ubatch * hp.n_head * hp.head_dim_v, "scratch")?,
            proj: try_zeroed(n_ubatch * hp.n_embd, "scratch")?,
            gate: try_zeroed(n_ubatch * hp.n_ff, "scratch")?,
            up: try_zeroed(n_ubatch * hp.n_ff, "scratch")?,
            act: try_zeroed(act_bytes, "scratch")?,
            act_ty: None,
            rope_cache: try_zeroed(n_ubatch * hp.n_rot.max(2), "scratch")?,
            tiles: (0..n_threads.max(1)).map(|_| TileScratch::new(TILE_ROWS.max(group), hp.head_dim_k, hp.head_dim_v)).collect::<Result<_, _>>()?,
            tile_starts: try_zeroed(n_ubatch + 1, "scratch")?,
        })
    }

    /// Bytes held by this scratch.
    pub fn bytes(&self) -> usize {
        4 * (self.x.len() + self.xn.len() + self.q.len() + self.k.len() + self.v.len() + self.att.len() + self.proj.len() + self.gate.len() + self.up.len())
            + self.act.len()
    }
}

/// out[n × m.rows] = input[n × m.cols] · mᵀ, quantizing the input unless the scratch already
/// holds it in the right format (`same_input` says the input is what was quantized last).
fn project(model: &Model, pool: &ThreadPool, act: &mut Vec<u8>, act_ty: &mut Option<GgmlType>, same_input: bool, m: &Mat, input: &[f32], n: usize, out: &mut [f32]) {
    let vt = m.ty.vec_dot_type();
    if !same_input || *act_ty != Some(vt) {
        quantize_activations(pool, m.ty, &input[..n * m.cols], m.cols, n, act);
        *act_ty = Some(vt);
    }
    matmul(pool, &model.mat(m), act, n, &mut out[..n * m.rows]);
}

/// Several projections of the same input (Q, K, V; gate, up): quantized once and run as one
/// batch when the matrices share an activation format, else one by one.
fn project_all<const N: usize>(model: &Model, pool: &ThreadPool, act: &mut Vec<u8>, act_ty: &mut Option<GgmlType>, input: &[f32], n: usize, targets: [(&Mat, &mut [f32]); N]) {
    let vt = targets[0].0.ty.vec_dot_type();
    if targets.iter().any(|(m, _)| m.ty.vec_dot_type() != vt) {
        for (i, (m, out)) in targets.into_iter().enumerate() {
            project(model, pool, act, act_ty, i > 0, m, input, n, out);
        }
        return;
    }
    let m0 = targets[0].0;
    quantize_activations(pool, m0.ty, &input[..n * m0.cols], m0.cols, n, act);
    *act_ty = Some(vt);
    let act = &act[..];
    matmul_all(pool, n, targets.into_iter().map(|(m, out)| Product { w: model.mat(m), act, out: &mut out[..n * m.rows] }));
}

fn add_bias(rows: &mut [f32], bias: &Option<Vec<f32>>) {
    if let Some(b) = bias {
        for row in rows.chunks_exact_mut(b.len()) {
            add_assign(row, b);
        }
    }
}

/// Runs the micro-batch through the model: writes K/V of its tokens into their cells, and the
/// logits (and, if asked, the final hidden states) of `ub.out_rows` into `logits`/`embd`.
#[allow(clippy::too_many_arguments)]
pub fn forward(model: &Model, ub: &UBatch<'_>, kv: &mut KvCache, s: &mut DenseScratch, pool: &ThreadPool, rope: &RopeParams, logits: &mut [f32], embd: Option<&mut [f32]>) {
    let hp = &model.hp;
    let w = &model.weights;
    let n = ub.tokens.len();
    assert!(n <= s.n_ubatch);
    let (e, hd_k) = (hp.n_embd, hp.head_dim_k);

    // Token embeddings.
    let emb = model.mat(&w.token_embd);
    for (t, &tok) in ub.tokens.iter().enumerate() {
        quant::dequantize_row(emb.ty, emb.row(tok as usize), &mut s.x[t * e..(t + 1) * e]);
    }

    // Each token's rotation table, the same for every layer.
    let nr = hp.n_rot.max(2);
    for t in 0..n {
        rope::fill_cache(rope, ub.pos[t] as f32, w.rope_freqs.as_deref(), &mut s.rope_cache[t * nr..(t + 1) * nr]);
    }

    for (il, layer) in w.layers.iter().enumerate() {
        // Attention block.
        for t in 0..n {
            rms_norm(&s.x[t * e..(t + 1) * e], &layer.attn_norm, hp.rms_eps, &mut s.xn[t * e..(t + 1) * e]);
        }
        project_all(model, pool, &mut s.act, &mut s.act_ty, &s.xn, n, [(&layer.wq, &mut s.q), (&layer.wk, &mut s.k), (&layer.wv, &mut s.v)]);
        add_bias(&mut s.q[..n * hp.q_dim()], &layer.bq);
        add_bias(&mut s.k[..n * hp.kv_dim_k()], &layer.bk);
        add_bias(&mut s.v[..n * hp.kv_dim_v()], &layer.bv);

        for t in 0..n {
            let cache = &s.rope_cache[t * nr..(t + 1) * nr];
            for head in s.q[t * hp.q_dim()..(t + 1) * hp.q_dim()].chunks_exact_mut(hd_k) {
                rope::apply(rope.mode, hp.n_rot, cache, head);
            }
            for head in s.k[t * hp.kv_dim_k()..(t + 1) * hp.kv_dim_k()].chunks_exact_mut(hd_k) {
                rope::apply(rope.mode, hp.n_rot, cache, head);
            }
            kv.store(il, ub.cells[t], &s.k[t * hp.kv_dim_k()..(t + 1) * hp.kv_dim_k()], &s.v[t * hp.kv_dim_v()..(t + 1) * hp.kv_dim_v()]);
        }

        attention(hp, kv, il, ub, &s.q, &mut s.att, &mut s.tiles, &mut s.tile_starts, pool, n);

        project(model, pool, &mut s.act, &mut s.act_ty, false, &layer.wo, &s.att, n, &mut s.proj);
        add_assign(&mut s.x[..n * e], &s.proj[..n * e]);

        // Feed-forward block.
        for t in 0..n {
            rms_norm(&s.x[t * e..(t + 1) * e], &layer.ffn_norm, hp.rms_eps, &mut s.xn[t * e..(t + 1) * e]);
        }
        project_all(model, pool, &mut s.act, &mut s.act_ty, &s.xn, n, [(&layer.ffn_gate, &mut s.gate), (&layer.ffn_up, &mut s.up)]);
        swiglu_on(pool, &mut s.gate[..n * hp.n_ff], &s.up[..n * hp.n_ff]);
        project(model, pool, &mut s.act, &mut s.act_ty, false, &layer.ffn_down, &s.gate, n, &mut s.proj);
        add_assign(&mut s.x[..n * e], &s.proj[..n * e]);
    }

    // Output head, for the rows that asked for it.
    let n_out = ub.out_rows.len();
    if n_out == 0 {
        return;
    }
    for (o, &t) in ub.out_rows.iter().enumerate() {
        rms_norm(&s.x[t * e..(t + 1) * e], &w.output_norm, hp.rms_eps, &mut s.xn[o * e..(o + 1) * e]);
    }
    if let Some(embd) = embd {
        embd[..n_out * e].copy_from_slice(&s.xn[..n_out * e]);
    }
    project(model, pool, &mut s.act, &mut s.act_ty, false, &w.output, &s.xn, n_out, logits);
}

/// Attention of every token's query heads, one work item per (tile of consecutive tokens of a
/// sequence, K/V head): the item's query rows read each cached row once.
#[allow(clippy::too_many_arguments)]
fn attention(hp: &super::HParams, kv: &KvCache, il: usize, ub: &UBatch<'_>, q: &[f32], att: &mut [f32], tiles: &mut [TileScratch], starts: &mut [usize], pool: &ThreadPool, n: usize) {
    let (hd_k, hd_v) = (hp.head_dim_k, hp.head_dim_v);
    let group = hp.n_head / hp.n_head_kv;
    let scale = 1.0 / (hd_k as f32).sqrt();
    let n_tiles = split_tiles(&ub.seq[..n], tile_tokens(group), starts);
    let starts = &*starts;
    let out = SharedOut::new(&mut att[..n * hp.n_head * hd_v]);
    let scratch = SharedOut::new(tiles);
    let items = n_tiles * hp.n_head_kv;
    // items are claimed one by one, latest tokens first: a token's cost grows with the cells
    // it attends to, so a static split gave one thread three times the other's work in prefill
    let next = AtomicUsize::new(0);
    pool.run(&|ith, _nth| {
        // SAFETY: each thread uses only its own scratch slot.
        let tile = unsafe { &mut scratch.slice(ith..ith + 1)[0] };
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
                kv.cells_of_stream(stream)
                    .filter(move |(_, c)| c.pos >= 0 && c.pos <= limit && c.seqs.contains(seq))
                    .map(|(i, c)| (c.pos, &kv.k_row(il, i)[kvh * hd_k..(kvh + 1) * hd_k], &kv.v_row(il, i)[kvh * hd_v..(kvh + 1) * hd_v]))
            };
            let tokens = starts[i]..starts[i + 1];
            let query = |t: usize, g: usize| {
                let h = t * hp.n_head + kvh * group + g;
                &q[h * hd_k..(h + 1) * hd_k]
            };
            attend_tokens(tile, tokens, ub.pos, group, scale, query, cells, |t, g, tile, row| {
                let h = t * hp.n_head + kvh * group + g;
                // SAFETY: head h of token t is written by exactly one thread (the one with the
                // item of its tile and K/V head).
                tile.output(row, unsafe { out.slice(h * hd_v..(h + 1) * hd_v) });
            });
        }
    });
}
