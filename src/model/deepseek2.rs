//! deepseek2's forward pass (DeepSeek V2, V2-Lite, V3, R1): Multi-head Latent Attention in its
//! absorbed form (the cache holds the normed latent and the roped key part, one row per token;
//! values are the latent itself) and a routed Mixture-of-Experts FFN with shared experts.
//! Follows upstream b11312's `src/models/deepseek2.cpp` and `build_moe_ffn`; buffers come from
//! one `MlaScratch` sized at context creation.

use std::sync::atomic::{AtomicUsize, Ordering};

use super::deepseek2_weights::{FeedForward, Ffn, MlaLayer, Moe, Query, Stack};
use super::dense::UBatch;
use super::hparams::{Gating, MlaParams};
use super::weights::Mat;
use super::Model;
use crate::kernels::attention::{attend_tokens, split_tiles, tile_tokens, TileScratch, TILE_ROWS};
use crate::kernels::matmul::{activation_bytes, matmul, matmul_all, matmul_batch, quantize_activations, Product};
use crate::kernels::norm::rms_norm;
use crate::kernels::rope::{self, RopeParams};
use crate::kernels::{add_assign, swiglu_on};
use crate::kv::KvCache;
use crate::quant;
use crate::sys::alloc::try_zeroed;
use crate::threads::{SharedOut, ThreadPool};

/// Most expert groups a model may have (V3/R1 have 8); checked when the model loads.
pub(crate) const MAX_GROUPS: usize = 64;

pub struct MlaScratch {
    n_ubatch: usize,
    x: Vec<f32>,
    xn: Vec<f32>,
    qa: Vec<f32>,
    qa_normed: Vec<f32>,
    q: Vec<f32>,
    kv: Vec<f32>,
    krow: Vec<f32>,
    head_in: Vec<f32>,
    head_out: Vec<f32>,
    q_full: Vec<f32>,
    o_lat: Vec<f32>,
    o: Vec<f32>,
    proj: Vec<f32>,
    gate: Vec<f32>,
    up: Vec<f32>,
    moe: Vec<f32>,
    /// Decode: the chosen experts' outputs, then the shared expert's.
    moe_rows: Vec<f32>,
    gather: Vec<f32>,
    /// Prefill: every token's FFN input quantized for the experts' gate matrices.
    xq: Vec<u8>,
    router: Vec<f32>,
    /// Per token: the selected experts and their weights.
    chosen: Vec<(usize, f32)>,
    /// Per expert: the (token, weight) pairs routed to it in this micro-batch.
    routed: Vec<Vec<(usize, f32)>>,
    act: Vec<u8>,
    rope_cache: Vec<f32>,
    /// Per thread, the attention tile's buffers.
    tiles: Vec<TileScratch>,
    /// First token of each attention tile (and the end).
    tile_starts: Vec<usize>,
}

impl MlaScratch {
    /// Bytes held by this scratch.
    pub fn bytes(&self) -> usize {
        let floats = [&self.x, &self.xn, &self.qa, &self.qa_normed, &self.q, &self.kv, &self.krow, &self.head_in, &self.head_out, &self.q_full, &self.o_lat, &self.o, &self.proj, &self.gate, &self.up, &self.moe, &self.gather, &self.router];
        4 * floats.iter().map(|v| v.capacity()).sum::<usize>()
            + self.chosen.capacity() * std::mem::size_of::<(usize, f32)>()
            + self.routed.iter().map(|r| r.capacity() * std::mem::size_of::<(usize, f32)>()).sum::<usize>()
            + self.act.capacity()
            + self.xq.capacity()
    }

    pub fn new(model: &Model, n_ubatch: usize, n_threads: usize) -> Result<MlaScratch, String> {
        let hp = &model.hp;
        let m = hp.mla.as_ref().expect("deepseek2 model");
        let (n, e, h, c, r) = (n_ubatch, hp.n_embd, hp.n_head, m.kv_lora_rank, hp.n_rot);
        let ff = hp.n_ff.max(m.n_ff_exp * m.n_expert_shared).max(m.n_ff_exp);
        let mut mats: Vec<&Mat> = vec![&model.weights.output];
        for l in &model.mla_layers {
            match &l.q {
                Query::Direct(q) => mats.push(q),
                Query::LowRank { a, b, .. } => mats.extend([a, b]),
            }
            mats.extend([&l.kv_a, &l.k_b.first, &l.v_b.first, &l.wo]);
            match &l.ffn {
                FeedForward::Dense(f) => mats.extend([&f.gate, &f.up, &f.down]),
                FeedForward::Moe(moe) => mats.extend([&moe.router, &moe.gate.first, &moe.up.first, &moe.down.first, &moe.shared.gate, &moe.shared.up, &moe.shared.down]),
            }
        }
        let mut act = mats.iter().map(|w| activation_bytes(w.ty, w.cols, n)).max().unwrap_or(0);
        // decode batches: every head's row at once; the chosen experts' and the shared
        // expert's down-projection inputs side by side
        let k = m.n_expert_used;
        let ff_shared = m.n_ff_exp * m.n_expert_shared;
        let mut moe_rows = 0;
        let mut xq = 0;
        for l in &model.mla_layers {
            act = act.max(h * activation_bytes(l.k_b.first.ty, m.qk_nope, 1)).max(h * activation_bytes(l.v_b.first.ty, c, 1));
            if let FeedForward::Moe(moe) = &l.ffn {
                act = act.max(k * activation_bytes(moe.down.first.ty, m.n_ff_exp, 1) + activation_bytes(moe.shared.down.ty, ff_shared, 1));
                moe_rows = (k + 1) * e;
                xq = xq.max(activation_bytes(moe.gate.first.ty, e, n));
            }
        }
        let heads_in = n.max(h) * c.max(m.qk_nope);
        let heads_out = n.max(h) * c.max(m.v_head);
        let ffn_rows = (n * ff).max(k * m.n_ff_exp + ff_shared);
        let widest = e.max(m.q_lora_rank).max(h * m.v_head).max(ff);
        Ok(MlaScratch {
            n_ubatch,
            x: try_zeroed(n * e, "scratch")?,
            xn: try_zeroed(n * widest, "scratch")?,
            qa: try_zeroed(n * m.q_lora_rank, "scratch")?,
            qa_normed: try_zeroed(n * m.q_lora_rank, "scratch")?,
            q: try_zeroed(n * h * m.qk_head, "scratch")?,
            kv: try_zeroed(n * (c + r), "scratch")?,
            krow: try_zeroed(c + r, "scratch")?,
            head_in: try_zeroed(heads_in, "scratch")?,
            head_out: try_zeroed(heads_out, "scratch")?,
            q_full: try_zeroed(n * h * (c + r), "scratch")?,
            o_lat: try_zeroed(n * h * c, "scratch")?,
            o: try_zeroed(n * h * m.v_head, "scratch")?,
            proj: try_zeroed(n * e, "scratch")?,
            gate: try_zeroed(ffn_rows, "scratch")?,
            up: try_zeroed(ffn_rows, "scratch")?,
            moe_rows: try_zeroed(moe_rows, "scratch")?,
            moe: try_zeroed(n * e, "scratch")?,
            gather: try_zeroed(n * e, "scratch")?,
            xq: try_zeroed(xq, "scratch")?,
            router: try_zeroed(n * m.n_expert, "scratch")?,
            chosen: try_zeroed(n * m.n_expert_used, "scratch")?,
            routed: (0..m.n_expert).map(|_| Vec::with_capacity(n)).collect(),
            act: try_zeroed(act, "scratch")?,
            rope_cache: try_zeroed(n * r.max(2), "scratch")?,
            tiles: (0..n_threads.max(1)).map(|_| TileScratch::new(TILE_ROWS.max(h), c + r, c)).collect::<Result<_, _>>()?,
            tile_starts: try_zeroed(n + 1, "scratch")?,
        })
    }
}

/// out[n × m.rows] = input[n × m.cols] · mᵀ.
fn project(model: &Model, pool: &ThreadPool, act: &mut [u8], m: &Mat, input: &[f32], n: usize, out: &mut [f32]) {
    quantize_activations(pool, m.ty, &input[..n * m.cols], m.cols, n, act);
    matmul(pool, &model.mat(m), act, n, &mut out[..n * m.rows]);
}

/// Two projections of the same input: quantized once and run as one batch when the matrices
/// share an activation format, else one after the other.
fn project_two(model: &Model, pool: &ThreadPool, act: &mut [u8], input: &[f32], n: usize, first: (&Mat, &mut [f32]), second: (&Mat, &mut [f32])) {
    let ((m1, out1), (m2, out2)) = (first, second);
    if m1.ty.vec_dot_type() != m2.ty.vec_dot_type() {
        project(model, pool, act, m1, input, n, out1);
        project(model, pool, act, m2, input, n, out2);
        return;
    }
    quantize_activations(pool, m1.ty, &input[..n * m1.cols], m1.cols, n, act);
    let act = &*act;
    matmul_all(pool, n, [Product { w: model.mat(m1), act, out: &mut out1[..n * m1.rows] }, Product { w: model.mat(m2), act, out: &mut out2[..n * m2.rows] }]);
}

/// Decode: `input` holds one row per matrix of `stack` (`cols` each); out row x = stack[x] ·
/// input row x, all in one batch.
fn project_heads(model: &Model, pool: &ThreadPool, act: &mut [u8], stack: &Stack, input: &[f32], out: &mut [f32]) {
    let (w0, count) = (&stack.first, stack.count);
    let arb = activation_bytes(w0.ty, w0.cols, 1);
    quantize_activations(pool, w0.ty, &input[..count * w0.cols], w0.cols, count, act);
    let act = &*act;
    let outs = out[..count * w0.rows].chunks_exact_mut(w0.rows);
    matmul_all(pool, 1, outs.enumerate().map(|(x, out)| Product { w: model.mat(&stack.get(x)), act: &act[x * arb..(x + 1) * arb], out }));
}

/// The softmax scale of MLA: mscale² / √(qk head size), with YaRN's magnitude correction
/// (upstream pre-scales kq_scale because it cancels the RoPE attention factor).
pub fn kq_scale(rope: &RopeParams, yarn_log_mul: f32, qk_head: usize) -> f32 {
    let ln_f = (1.0 / rope.freq_scale).ln();
    let attn_factor_org = rope.attn_factor * (1.0 + 0.1 * ln_f);
    let mscale = attn_factor_org * (1.0 + 0.1 * yarn_log_mul * ln_f);
    mscale * mscale / (qk_head as f32).sqrt()
}

pub fn forward(model: &Model, ub: &UBatch<'_>, kv: &mut KvCache, s: &mut MlaScratch, pool: &ThreadPool, rope: &RopeParams, logits: &mut [f32], embd: Option<&mut [f32]>) {
    let hp = &model.hp;
    let m = hp.mla.as_ref().expect("deepseek2 model");
    let w = &model.weights;
    let n = ub.tokens.len();
    assert!(n <= s.n_ubatch);
    let e = hp.n_embd;

    let emb = model.mat(&w.token_embd);
    for (t, &tok) in ub.tokens.iter().enumerate() {
        quant::dequantize_row(emb.ty, emb.row(tok as usize), &mut s.x[t * e..(t + 1) * e]);
    }
    let scale = kq_scale(rope, hp.rope_yarn_log_mul, m.qk_head);
    // Each token's rotation table, the same for every layer.
    let nr = hp.n_rot.max(2);
    for t in 0..n {
        rope::fill_cache(rope, ub.pos[t] as f32, None, &mut s.rope_cache[t * nr..(t + 1) * nr]);
    }

    for (il, layer) in model.mla_layers.iter().enumerate() {
        for t in 0..n {
            rms_norm(&s.x[t * e..(t + 1) * e], &layer.attn_norm, hp.rms_eps, &mut s.xn[t * e..(t + 1) * e]);
        }
        attention(model, m, layer, il, ub, kv, s, pool, rope, scale, n);
        add_assign(&mut s.x[..n * e], &s.proj[..n * e]);

        for t in 0..n {
            rms_norm(&s.x[t * e..(t + 1) * e], &layer.ffn_norm, hp.rms_eps, &mut s.xn[t * e..(t + 1) * e]);
        }
        match &layer.ffn {
            FeedForward::Dense(f) => {
                swiglu_ffn(model, pool, s, f, n);
            }
            FeedForward::Moe(moe) if n == 1 && decode_batches_fit(moe) => moe_decode(model, m, pool, s, moe),
            FeedForward::Moe(moe) => {
                experts(model, m, pool, s, moe, n);
                swiglu_ffn(model, pool, s, &moe.shared, n);
                add_assign(&mut s.proj[..n * e], &s.moe[..n * e]);
            }
        }
        add_assign(&mut s.x[..n * e], &s.proj[..n * e]);
    }

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
    project(model, pool, &mut s.act, &w.output, &s.xn, n_out, logits);
}

/// MLA attention of the micro-batch; leaves attn_output's result in `s.proj`.
#[allow(clippy::too_many_arguments)]
fn attention(model: &Model, m: &MlaParams, layer: &MlaLayer, il: usize, ub: &UBatch<'_>, kv: &mut KvCache, s: &mut MlaScratch, pool: &ThreadPool, rope: &RopeParams, scale: f32, n: usize) {
    let hp = &model.hp;
    let (h, c, r, nope, qk) = (hp.n_head, m.kv_lora_rank, hp.n_rot, m.qk_nope, m.qk_head);

    // Query: direct, or through the low-rank bottleneck with its own norm.
    // Compressed KV (`s.kv`): the latent (normed below) and the shared rope key part (not
    // normed), projected in the same batch as the query's first matrix.
    match &layer.q {
        Query::Direct(wq) => project_two(model, pool, &mut s.act, &s.xn, n, (wq, &mut s.q), (&layer.kv_a, &mut s.kv)),
        Query::LowRank { a, norm, b } => {
            project_two(model, pool, &mut s.act, &s.xn, n, (a, &mut s.qa), (&layer.kv_a, &mut s.kv));
            let ql = m.q_lora_rank;
            for t in 0..n {
                rms_norm(&s.qa[t * ql..(t + 1) * ql], norm, hp.rms_eps, &mut s.qa_normed[t * ql..(t + 1) * ql]);
            }
            project(model, pool, &mut s.act, b, &s.qa_normed, n, &mut s.q);
        }
    }
    for t in 0..n {
        let row = &s.kv[t * (c + r)..(t + 1) * (c + r)];
        rms_norm(&row[..c], &layer.kv_a_norm, hp.rms_eps, &mut s.krow[..c]);
        s.krow[c..].copy_from_slice(&row[c..]);
        let cache = &s.rope_cache[t * r.max(2)..(t + 1) * r.max(2)];
        rope::apply(rope.mode, r, cache, &mut s.krow[c..]);
        for head in 0..h {
            let q = &mut s.q[(t * h + head) * qk..(t * h + head + 1) * qk];
            rope::apply(rope.mode, r, cache, &mut q[nope..]);
            s.q_full[(t * h + head) * (c + r) + c..(t * h + head + 1) * (c + r)].copy_from_slice(&q[nope..]);
        }
        kv.store_k(il, ub.cells[t], &s.krow);
    }
    // Absorb W_UK into the query, head by head: q_abs = attn_k_b[h] · q_nope.
    if n == 1 {
        for head in 0..h {
            s.head_in[head * nope..(head + 1) * nope].copy_from_slice(&s.q[head * qk..head * qk + nope]);
        }
        project_heads(model, pool, &mut s.act, &layer.k_b, &s.head_in, &mut s.head_out);
        for head in 0..h {
            s.q_full[head * (c + r)..head * (c + r) + c].copy_from_slice(&s.head_out[head * c..(head + 1) * c]);
        }
    }
    for head in (0..h).filter(|_| n > 1) {
        for t in 0..n {
            let src = (t * h + head) * qk;
            s.head_in[t * nope..(t + 1) * nope].copy_from_slice(&s.q[src..src + nope]);
        }
        let wk = layer.k_b.get(head);
        project(model, pool, &mut s.act, &wk, &s.head_in, n, &mut s.head_out);
        for t in 0..n {
            let dst = (t * h + head) * (c + r);
            s.q_full[dst..dst + c].copy_from_slice(&s.head_out[t * c..(t + 1) * c]);
        }
    }
    // Scores against cached [latent | rope key] rows; values are the latents. Every head reads
    // the same rows, so a work item is a tile of tokens' heads (in decode the heads split in as
    // many parts as threads).
    {
        let kvr = &*kv;
        let q_full = &s.q_full;
        let out = SharedOut::new(&mut s.o_lat[..n * h * c]);
        let scratch = SharedOut::new(&mut s.tiles);
        let part = if n < pool.n_threads() { h.div_ceil(pool.n_threads()) } else { h };
        let parts = h.div_ceil(part);
        let n_tiles = split_tiles(&ub.seq[..n], tile_tokens(part), &mut s.tile_starts);
        let starts = &s.tile_starts;
        // claimed one by one, latest tokens first (see dense::attention)
        let next = AtomicUsize::new(0);
        pool.run(&|ith, _nth| {
            // SAFETY: each thread uses only its own scratch slot.
            let tile = unsafe { &mut scratch.slice(ith..ith + 1)[0] };
            loop {
                let claimed = next.fetch_add(1, Ordering::Relaxed);
                if claimed >= n_tiles * parts {
                    break;
                }
                let item = n_tiles * parts - 1 - claimed;
                let (i, p) = (item / parts, item % parts);
                let heads = p * part..((p + 1) * part).min(h);
                let seq = ub.seq[starts[i]];
                let stream = kvr.stream_of(seq);
                let cells = |limit: i32| {
                    kvr.cells_of_stream(stream).filter(move |(_, cell)| cell.pos >= 0 && cell.pos <= limit && cell.seqs.contains(seq)).map(|(i, cell)| {
                        let k = kvr.k_row(il, i);
                        (cell.pos, k, &k[..c])
                    })
                };
                let tokens = starts[i]..starts[i + 1];
                let query = |t: usize, j: usize| {
                    let at = (t * h + heads.start + j) * (c + r);
                    &q_full[at..at + c + r]
                };
                attend_tokens(tile, tokens, ub.pos, heads.len(), scale, query, cells, |t, j, tile, row| {
                    let at = (t * h + heads.start + j) * c;
                    // SAFETY: the heads of item (token t, part p) are written by exactly one
                    // thread.
                    tile.output(row, unsafe { out.slice(at..at + c) });
                });
            }
        });
    }
    // Decompress with W_UV per head, then the output projection.
    let v = m.v_head;
    if n == 1 {
        project_heads(model, pool, &mut s.act, &layer.v_b, &s.o_lat, &mut s.o);
    }
    for head in (0..h).filter(|_| n > 1) {
        for t in 0..n {
            let src = (t * h + head) * c;
            s.head_in[t * c..(t + 1) * c].copy_from_slice(&s.o_lat[src..src + c]);
        }
        let wv = layer.v_b.get(head);
        project(model, pool, &mut s.act, &wv, &s.head_in, n, &mut s.head_out);
        for t in 0..n {
            s.o[(t * h + head) * v..(t * h + head + 1) * v].copy_from_slice(&s.head_out[t * v..(t + 1) * v]);
        }
    }
    project(model, pool, &mut s.act, &layer.wo, &s.o, n, &mut s.proj);
}

/// SwiGLU FFN of `s.xn` into `s.proj`.
fn swiglu_ffn(model: &Model, pool: &ThreadPool, s: &mut MlaScratch, f: &Ffn, n: usize) {
    let ff = f.gate.rows;
    if f.gate.ty.vec_dot_type() == f.up.ty.vec_dot_type() {
        quantize_activations(pool, f.gate.ty, &s.xn[..n * f.gate.cols], f.gate.cols, n, &mut s.act);
        let act = &s.act[..];
        matmul_all(pool, n, [Product { w: model.mat(&f.gate), act, out: &mut s.gate[..n * ff] }, Product { w: model.mat(&f.up), act, out: &mut s.up[..n * ff] }]);
    } else {
        project(model, pool, &mut s.act, &f.gate, &s.xn, n, &mut s.gate);
        project(model, pool, &mut s.act, &f.up, &s.xn, n, &mut s.up);
    }
    swiglu_on(pool, &mut s.gate[..n * ff], &s.up[..n * ff]);
    project(model, pool, &mut s.act, &f.down, &s.gate, n, &mut s.proj);
}

/// Whether the experts' and the shared expert's gate and up matrices take one activation format
/// (so that [`moe_decode`] quantizes the token once for all of them).
fn decode_batches_fit(moe: &Moe) -> bool {
    let vt = moe.gate.first.ty.vec_dot_type();
    [moe.up.first.ty, moe.shared.gate.ty, moe.shared.up.ty].iter().all(|t| t.vec_dot_type() == vt)
}

/// One token through the MoE FFN in two batches (gate and up of the chosen experts and the
/// shared expert, then their down projections); leaves shared + Σ weight · expert in `s.proj`,
/// summed in the order of [`experts`] (ascending expert index), so results equal the batched
/// path's.
fn moe_decode(model: &Model, m: &MlaParams, pool: &ThreadPool, s: &mut MlaScratch, moe: &Moe) {
    let e = model.hp.n_embd;
    let (k, ffe, ffs) = (m.n_expert_used, m.n_ff_exp, moe.shared.gate.rows);
    project(model, pool, &mut s.act, &moe.router, &s.xn, 1, &mut s.router);
    route(m, moe.bias.as_deref(), &mut s.router[..m.n_expert], &mut s.chosen[..k]);
    s.chosen[..k].sort_unstable_by_key(|&(x, _)| x);
    let chosen = &s.chosen[..k];

    quantize_activations(pool, moe.gate.first.ty, &s.xn[..e], e, 1, &mut s.act);
    {
        let act = &s.act[..];
        let (g_exp, g_sh) = s.gate.split_at_mut(k * ffe);
        let (u_exp, u_sh) = s.up.split_at_mut(k * ffe);
        let experts = g_exp.chunks_exact_mut(ffe).zip(u_exp.chunks_exact_mut(ffe)).zip(chosen);
        let products = experts.flat_map(|((g, u), &(x, _))| [Product { w: model.mat(&moe.gate.get(x)), act, out: g }, Product { w: model.mat(&moe.up.get(x)), act, out: u }]);
        let shared = [Product { w: model.mat(&moe.shared.gate), act, out: &mut g_sh[..ffs] }, Product { w: model.mat(&moe.shared.up), act, out: &mut u_sh[..ffs] }];
        matmul_all(pool, 1, products.chain(shared));
    }
    swiglu_on(pool, &mut s.gate[..k * ffe + ffs], &s.up[..k * ffe + ffs]);

    let arb = activation_bytes(moe.down.first.ty, ffe, 1);
    quantize_activations(pool, moe.down.first.ty, &s.gate[..k * ffe], ffe, k, &mut s.act[..k * arb]);
    let arb_shared = activation_bytes(moe.shared.down.ty, ffs, 1);
    quantize_activations(pool, moe.shared.down.ty, &s.gate[k * ffe..k * ffe + ffs], ffs, 1, &mut s.act[k * arb..k * arb + arb_shared]);
    {
        let act = &s.act[..];
        let (rows, shared_row) = s.moe_rows.split_at_mut(k * e);
        let products = rows.chunks_exact_mut(e).zip(chosen).enumerate().map(|(i, (out, &(x, _)))| Product { w: model.mat(&moe.down.get(x)), act: &act[i * arb..(i + 1) * arb], out });
        let shared = Product { w: model.mat(&moe.shared.down), act: &act[k * arb..], out: &mut shared_row[..e] };
        matmul_all(pool, 1, products.chain([shared]));
    }

    s.moe[..e].iter_mut().for_each(|v| *v = 0.0);
    for (i, &(_, wt)) in chosen.iter().enumerate() {
        for (acc, &y) in s.moe[..e].iter_mut().zip(&s.moe_rows[i * e..(i + 1) * e]) {
            *acc += wt * y;
        }
    }
    s.proj[..e].copy_from_slice(&s.moe_rows[k * e..(k + 1) * e]);
    add_assign(&mut s.proj[..e], &s.moe[..e]);
}

/// Routes each token to its experts and sums their weighted SwiGLU outputs into `s.moe`.
/// Tokens are grouped by expert so that each chosen expert's weights are read once per batch,
/// and experts are taken in groups of at most `n` routed rows in all (ascending expert index)
/// whose matrices share pool jobs: gate and up of the group in one, down in another.
fn experts(model: &Model, m: &MlaParams, pool: &ThreadPool, s: &mut MlaScratch, moe: &Moe, n: usize) {
    let e = model.hp.n_embd;
    let (ne, ffe) = (m.n_expert, m.n_ff_exp);
    project(model, pool, &mut s.act, &moe.router, &s.xn, n, &mut s.router);
    for list in s.routed.iter_mut() {
        list.clear();
    }
    for t in 0..n {
        let chosen = &mut s.chosen[t * m.n_expert_used..(t + 1) * m.n_expert_used];
        route(m, moe.bias.as_deref(), &mut s.router[t * ne..(t + 1) * ne], chosen);
        for &(x, wt) in chosen.iter() {
            s.routed[x].push((t, wt));
        }
    }
    // every token's input quantized once; a group's rows are copied from it
    let (gate_ty, up_ty, down_ty) = (moe.gate.first.ty, moe.up.first.ty, moe.down.first.ty);
    let up_same = up_ty.vec_dot_type() == gate_ty.vec_dot_type();
    let arb = activation_bytes(gate_ty, e, 1);
    quantize_activations(pool, gate_ty, &s.xn[..n * e], e, n, &mut s.xq);
    s.moe[..n * e].iter_mut().for_each(|v| *v = 0.0);
    let mut next = 0;
    while next < ne {
        let group_start = next;
        let mut rows = 0;
        while next < ne && (next == group_start || rows + s.routed[next].len() <= n) {
            rows += s.routed[next].len();
            next += 1;
        }
        let group = group_start..next;
        let mut i = 0;
        for x in group.clone() {
            for &(t, _) in &s.routed[x] {
                s.act[i * arb..(i + 1) * arb].copy_from_slice(&s.xq[t * arb..(t + 1) * arb]);
                if !up_same {
                    s.gather[i * e..(i + 1) * e].copy_from_slice(&s.xn[t * e..(t + 1) * e]);
                }
                i += 1;
            }
        }
        // gate and up of the group's experts, each on its own rows
        let (routed, g) = (&s.routed, group.clone());
        if up_same {
            let gates = expert_products(model, &moe.gate, routed, g.clone(), &s.act, arb, &mut s.gate[..rows * ffe], ffe);
            let ups = expert_products(model, &moe.up, routed, g.clone(), &s.act, arb, &mut s.up[..rows * ffe], ffe);
            matmul_batch(pool, gates.chain(ups));
        } else {
            matmul_batch(pool, expert_products(model, &moe.gate, routed, g.clone(), &s.act, arb, &mut s.gate[..rows * ffe], ffe));
            quantize_activations(pool, up_ty, &s.gather[..rows * e], e, rows, &mut s.act);
            let uarb = activation_bytes(up_ty, e, 1);
            matmul_batch(pool, expert_products(model, &moe.up, routed, g.clone(), &s.act, uarb, &mut s.up[..rows * ffe], ffe));
        }
        swiglu_on(pool, &mut s.gate[..rows * ffe], &s.up[..rows * ffe]);
        quantize_activations(pool, down_ty, &s.gate[..rows * ffe], ffe, rows, &mut s.act);
        let darb = activation_bytes(down_ty, ffe, 1);
        matmul_batch(pool, expert_products(model, &moe.down, routed, g, &s.act, darb, &mut s.proj[..rows * e], e));
        let mut i = 0;
        for x in group {
            for &(t, wt) in &s.routed[x] {
                for (acc, &y) in s.moe[t * e..(t + 1) * e].iter_mut().zip(&s.proj[i * e..(i + 1) * e]) {
                    *acc += wt * y;
                }
                i += 1;
            }
        }
    }
}

/// `(rows, product)` for each expert `x` of `group` with routed tokens: `stack[x]` × its rows of
/// `act` (`arb` bytes each; the experts' rows one after the other, in `routed` order) into its
/// rows of `out` (`width` floats each).
#[allow(clippy::too_many_arguments)]
fn expert_products<'a>(model: &'a Model, stack: &'a Stack, routed: &'a [Vec<(usize, f32)>], group: std::ops::Range<usize>, act: &'a [u8], arb: usize, out: &'a mut [f32], width: usize) -> impl Iterator<Item = (usize, Product<'a>)> + 'a {
    group.filter(move |&x| !routed[x].is_empty()).scan((0usize, out), move |(off, rest), x| {
        let k = routed[x].len();
        let (mine, others) = std::mem::take(rest).split_at_mut(k * width);
        *rest = others;
        let a = &act[*off * arb..(*off + k) * arb];
        *off += k;
        Some((k, Product { w: model.mat(&stack.get(x)), act: a, out: mine }))
    })
}

/// Upstream's build_moe_ffn selection for one token: gating probabilities, the selection bias
/// (selection only), group-limited choice, top-k, weights from the unbiased probabilities,
/// optional renormalisation, then scaling. `logits` is overwritten with the probabilities.
pub fn route(m: &MlaParams, bias: Option<&[f32]>, logits: &mut [f32], chosen: &mut [(usize, f32)]) {
    match m.gating {
        Gating::Softmax => {
            let mx = logits.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
            let mut sum = 0.0;
            for v in logits.iter_mut() {
                *v = (*v - mx).exp();
                sum += *v;
            }
            for v in logits.iter_mut() {
                *v /= sum;
            }
        }
        Gating::Sigmoid => logits.iter_mut().for_each(|v| *v = 1.0 / (1.0 + (-*v).exp())),
    }
    let probs = &*logits;
    let sel = |i: usize| probs[i] + bias.map_or(0.0, |b| b[i]);
    let per_group = m.n_expert / m.n_group;
    // Groups kept: the n_group_used with the largest sum of their two best selection scores.
    let mut group_kept = [true; MAX_GROUPS];
    if m.n_group > 1 {
        let mut scores = [(f32::NEG_INFINITY, 0usize); MAX_GROUPS];
        for g in 0..m.n_group {
            let (mut a, mut b) = (f32::NEG_INFINITY, f32::NEG_INFINITY);
            for i in g * per_group..(g + 1) * per_group {
                let v = sel(i);
                if v > a {
                    b = a;
                    a = v;
                } else if v > b {
                    b = v;
                }
            }
            scores[g] = (a + b, g);
        }
        let groups = &mut scores[..m.n_group];
        // Descending with NaN last: a total order even for a model whose router yields NaN.
        let key = |v: f32| if v.is_nan() { f32::NEG_INFINITY } else { v };
        groups.sort_by(|x, y| key(y.0).partial_cmp(&key(x.0)).unwrap_or(std::cmp::Ordering::Equal));
        group_kept = [false; MAX_GROUPS];
        for &(_, g) in groups.iter().take(m.n_group_used) {
            group_kept[g] = true;
        }
    }
    // Top-k over the selection scores of the kept groups (k is small: selection by repeated max).
    let k = chosen.len();
    for slot in 0..k {
        let mut best = usize::MAX;
        let mut best_v = f32::NEG_INFINITY;
        for i in 0..m.n_expert {
            if !group_kept[i / per_group] {
                continue;
            }
            if chosen[..slot].iter().any(|&(c, _)| c == i) {
                continue;
            }
            let v = sel(i);
            if best == usize::MAX || v > best_v {
                best = i;
                best_v = v;
            }
        }
        chosen[slot] = (best, probs[best]);
    }
    if m.weights_norm {
        let sum: f32 = chosen.iter().map(|&(_, w)| w).sum();
        let d = sum.max(6.103515625e-5);
        chosen.iter_mut().for_each(|(_, w)| *w /= d);
    }
    if m.weights_scale != 0.0 && m.weights_scale != 1.0 {
        chosen.iter_mut().for_each(|(_, w)| *w *= m.weights_scale);
    }
}
