//! Block: DeepSeek V4's attention (`deepseek4`; upstream b11312 `build_attention_impl`,
//! `src/models/deepseek4.cpp:590-1220`). One shared key/value head: a token's normed, roped key
//! row is its value too. Queries come through a low-rank bottleneck, each head RMS-normed
//! without weight. Every block attends to the raw keys of a sliding window; a block with a
//! compressor (ratio 128, "HCA") also to one compressed row per complete block of 128 positions
//! before the query, and a ratio-4 block ("CSA") to the compressed rows of 4-position blocks its
//! lightning indexer chooses (the `top_k` it scores highest). Compressed rows are a per-channel
//! softmax-weighted sum of their block's per-token compressor values (ratio 4: overlapping the
//! previous block), RMS-normed and roped at the block's first position. A per-head sink logit
//! joins each softmax's sum. The heads' outputs are de-roped at the query's position and go
//! through a grouped low-rank output projection. RoPE is NORM on the last `n_rot` dims; blocks
//! with a compressor use the compressed base with YaRN, the others the plain base unscaled.
//! Owns `Dsv4AttnScratch`; allocates nothing per pass.

use std::sync::atomic::{AtomicUsize, Ordering};

use super::hparams::{Dsv4Params, IndexerParams, CSA_RATIO};
use super::proj::{project, project_all};
use super::weights::{mat, vector, Mat, Stack};
use super::{Common, HParams, Model, UBatch};
use crate::gguf::GgufFile;
use crate::kernels::attention::{Accumulator, TileScratch, TILED_FROM_ROWS};
use crate::kernels::indexer::{hadamard, IndexerTile, BLOCK};
use crate::kernels::norm::{rms_norm, rms_norm_bare};
use crate::kernels::rope::{self, RopeMode, RopeParams};
use crate::kv::dsv4::Part;
use crate::kv::KvCache;
use crate::quant::{self, f32_to_f16};
use crate::sys::alloc::try_zeroed;
use crate::threads::{SharedOut, ThreadPool};

/// A compressor: per-token values and scores (`coff` × width each: ratio 4 overlaps two
/// halves), the scores' positional bias per slot of the block (`ape`), and the row norm.
pub struct Compressor {
    pub kv: Mat,
    pub gate: Mat,
    pub ape: Mat,
    pub norm: Vec<f32>,
}

impl Compressor {
    fn load(f: &GgufFile, prefix: &str, e: usize, width: usize, ratio: usize) -> Result<Compressor, String> {
        let coff = if ratio == CSA_RATIO { 2 } else { 1 };
        Ok(Compressor {
            kv: mat(f, &format!("{prefix}_kv.weight"), e, coff * width)?,
            gate: mat(f, &format!("{prefix}_gate.weight"), e, coff * width)?,
            ape: mat(f, &format!("{prefix}_ape.weight"), coff * width, ratio)?,
            norm: vector(f, &format!("{prefix}_norm.weight"), width)?,
        })
    }
}

/// The lightning indexer of a CSA block: head weights from the block input, queries from the
/// query bottleneck, keys from its own compressor.
pub struct Lid {
    pub proj: Mat,
    pub q_b: Mat,
    pub comp: Compressor,
}

pub struct Dsv4Attn {
    pub ratio: usize,
    pub q_a: Mat,
    pub q_a_norm: Vec<f32>,
    pub q_b: Mat,
    pub kv: Mat,
    pub kv_norm: Vec<f32>,
    pub sinks: Vec<f32>,
    /// Per output group: o_lora_rank rows × (heads per group · head) columns.
    pub out_a: Stack,
    pub out_b: Mat,
    pub comp: Option<Compressor>,
    pub lid: Option<Lid>,
}

impl Dsv4Attn {
    pub fn load(f: &GgufFile, hp: &HParams, d4: &Dsv4Params, i: usize) -> Result<Dsv4Attn, String> {
        let (e, h, d) = (hp.n_embd, hp.n_head, hp.head_dim_k);
        let n = |s: &str| format!("blk.{i}.{s}");
        let ratio = d4.ratios[i];
        let (g, ol) = (d4.o_groups, d4.o_lora_rank);
        let out_a = mat(f, &n("attn_output_a.weight"), h * d / g, ol * g)?;
        // upstream makes it 3-D ({.., o_lora_rank, o_groups}) for ggml_mul_mat: not repacked
        // (its tiled matmul takes 8 or more tokens)
        let out_a = Stack { first: Mat { rows: ol, n_bytes: out_a.n_bytes / g, repacked: crate::quant::Repacked::of_heads(out_a.ty), ..out_a }, count: g };
        let lid = if ratio == CSA_RATIO {
            let x = hp.indexer.as_ref().ok_or("deepseek4: a ratio-4 block needs the indexer keys")?;
            Some(Lid {
                proj: mat(f, &n("indexer.proj.weight"), e, x.n_head)?,
                q_b: mat(f, &n("indexer.attn_q_b.weight"), d4.q_lora_rank, x.n_head * x.head_size)?,
                comp: Compressor::load(f, &n("indexer_compressor"), e, x.head_size, ratio)?,
            })
        } else {
            None
        };
        Ok(Dsv4Attn {
            ratio,
            q_a: mat(f, &n("attn_q_a.weight"), e, d4.q_lora_rank)?,
            q_a_norm: vector(f, &n("attn_q_a_norm.weight"), d4.q_lora_rank)?,
            q_b: mat(f, &n("attn_q_b.weight"), d4.q_lora_rank, h * d)?,
            kv: mat(f, &n("attn_kv.weight"), e, d)?,
            kv_norm: vector(f, &n("attn_kv_a_norm.weight"), d)?,
            sinks: vector(f, &n("attn_sinks.weight"), h)?,
            out_a,
            out_b: mat(f, &n("attn_output_b.weight"), g * ol, e)?,
            comp: if ratio != 0 { Some(Compressor::load(f, &n("attn_compressor"), e, d, ratio)?) } else { None },
            lid,
        })
    }

    pub fn mats(&self) -> Vec<&Mat> {
        let mut v = vec![&self.q_a, &self.q_b, &self.kv, &self.out_a.first, &self.out_b];
        if let Some(c) = &self.comp {
            v.extend([&c.kv, &c.gate]);
        }
        if let Some(l) = &self.lid {
            v.extend([&l.proj, &l.q_b, &l.comp.kv, &l.comp.gate]);
        }
        v
    }
}

/// `sel_len` of a token that keeps every compressed row it sees.
const ALL: u32 = u32::MAX;

pub struct Dsv4AttnScratch {
    qr: Vec<f32>,
    qr_n: Vec<f32>,
    q: Vec<f32>,
    kv: Vec<f32>,
    krow: Vec<f32>,
    ckv: Vec<f32>,
    cgate: Vec<f32>,
    lkv: Vec<f32>,
    lgate: Vec<f32>,
    lw: Vec<f32>,
    iq: Vec<f32>,
    /// One compressed row being made, and one APE row.
    row: Vec<f32>,
    ape: Vec<f32>,
    /// One RoPE table.
    table: Vec<f32>,
    o: Vec<f32>,
    og: Vec<f32>,
    oa: Vec<f32>,
    otmp: Vec<f32>,
    tiles: Vec<TileScratch>,
    /// Per thread: an indexer tile and one token's scores.
    lid_tiles: Vec<IndexerTile>,
    lid_scores: Vec<f32>,
    /// Per token: the chosen CSA rows (top_k slots) and how many (`ALL`: every visible one).
    sel: Vec<u32>,
    sel_len: Vec<u32>,
    top_k: usize,
    n_rows4: usize,
}

impl Dsv4AttnScratch {
    /// For micro-batches of `n_ubatch` tokens, `n_threads` threads, streams of `n_cells`.
    pub fn new(hp: &HParams, d4: &Dsv4Params, n_ubatch: usize, n_threads: usize, n_cells: usize) -> Result<Dsv4AttnScratch, String> {
        let (n, h, d, r) = (n_ubatch, hp.n_head, hp.head_dim_k, hp.n_rot);
        let (ih, id, top_k) = hp.indexer.as_ref().map_or((0, 0, 0), |x| (x.n_head, x.head_size, x.top_k));
        let any_csa = d4.ratios.contains(&CSA_RATIO);
        let n_rows4 = n_cells.div_ceil(CSA_RATIO).max(1);
        let csa = |len: usize| if any_csa { len } else { 0 };
        let threads = n_threads.max(1);
        Ok(Dsv4AttnScratch {
            qr: try_zeroed(n * d4.q_lora_rank, "scratch")?,
            qr_n: try_zeroed(n * d4.q_lora_rank, "scratch")?,
            q: try_zeroed(n * h * d, "scratch")?,
            kv: try_zeroed(n * d, "scratch")?,
            krow: try_zeroed(d, "scratch")?,
            ckv: try_zeroed(n * 2 * d, "scratch")?,
            cgate: try_zeroed(n * 2 * d, "scratch")?,
            lkv: try_zeroed(csa(n * 2 * id), "scratch")?,
            lgate: try_zeroed(csa(n * 2 * id), "scratch")?,
            lw: try_zeroed(csa(n * ih), "scratch")?,
            iq: try_zeroed(csa(n * ih * id), "scratch")?,
            row: try_zeroed(d.max(id), "scratch")?,
            ape: try_zeroed(2 * d.max(id), "scratch")?,
            table: try_zeroed(r.max(2), "scratch")?,
            o: try_zeroed(n * h * d, "scratch")?,
            og: try_zeroed(n * h * d / d4.o_groups, "scratch")?,
            oa: try_zeroed(n * d4.o_groups * d4.o_lora_rank, "scratch")?,
            otmp: try_zeroed(n * d4.o_lora_rank, "scratch")?,
            tiles: (0..threads).map(|_| TileScratch::new(h, d, d, Accumulator::F16)).collect::<Result<_, _>>()?,
            lid_tiles: if any_csa { (0..threads).map(|_| IndexerTile::new(id, n_rows4)).collect::<Result<_, _>>()? } else { Vec::new() },
            lid_scores: try_zeroed(csa(threads * n_rows4), "indexer scores")?,
            sel: try_zeroed(csa(n * top_k), "indexer choices")?,
            sel_len: try_zeroed(n, "scratch")?,
            top_k,
            n_rows4,
        })
    }

    pub fn bytes(&self) -> usize {
        let floats = [
            &self.qr, &self.qr_n, &self.q, &self.kv, &self.krow, &self.ckv, &self.cgate, &self.lkv, &self.lgate, &self.lw, &self.iq, &self.row, &self.ape, &self.table, &self.o, &self.og, &self.oa, &self.otmp, &self.lid_scores,
        ];
        4 * (floats.iter().map(|v| v.capacity()).sum::<usize>() + self.sel.capacity() + self.sel_len.capacity()) + self.lid_tiles.iter().map(|t| t.bytes()).sum::<usize>()
    }
}

/// The RoPE parameters of a block: with a compressor the compressed base with the context's
/// YaRN (its magnitude cancelled to 1), else the plain base without scaling
/// (deepseek4.cpp:11-17, 902-909).
pub fn rope_params(ctx: &RopeParams, d4: &Dsv4Params, compressed: bool) -> RopeParams {
    if compressed {
        let attn_factor = if ctx.ext_factor == 0.0 { 1.0 } else { 1.0 / (1.0 + 0.1 * (1.0 / ctx.freq_scale).ln()) };
        RopeParams { freq_base: d4.compress_rope_base, attn_factor, mode: RopeMode::Norm, ..*ctx }
    } else {
        RopeParams { freq_scale: 1.0, ext_factor: 0.0, attn_factor: 1.0, beta_fast: 0.0, beta_slow: 0.0, n_ctx_orig: 0, mode: RopeMode::Norm, ..*ctx }
    }
}

/// Row `b` of a compressor from its ring (block `il`, `part`, `stream`) into `out` (`width`
/// values): per channel the softmax over the block's tokens of their scores, times their
/// values (ratio 4: the previous block's first halves and this block's second halves).
#[allow(clippy::too_many_arguments)]
fn compress_row(kv: &KvCache, il: usize, part: Part, stream: usize, ratio: usize, b: usize, width: usize, out: &mut [f32]) {
    let d4 = kv.dsv4.as_ref().expect("deepseek4 cache");
    let out = &mut out[..width];
    let s0 = b * ratio;
    // candidates: (position, half offset)
    let overlap = ratio == CSA_RATIO;
    let n_cand = if overlap { 2 * ratio } else { ratio };
    for d in 0..width {
        let mut max = f32::NEG_INFINITY;
        let cand = |j: usize| -> Option<(f32, f32)> {
            if overlap {
                if j < ratio {
                    if b == 0 {
                        return None;
                    }
                    let (v, s) = d4.slot(il, part, stream, s0 - ratio + j);
                    Some((v[d], s[d]))
                } else {
                    let (v, s) = d4.slot(il, part, stream, s0 + j - ratio);
                    Some((v[width + d], s[width + d]))
                }
            } else {
                let (v, s) = d4.slot(il, part, stream, s0 + j);
                Some((v[d], s[d]))
            }
        };
        for j in 0..n_cand {
            if let Some((_, s)) = cand(j) {
                max = max.max(s);
            }
        }
        let (mut sum, mut acc) = (0.0f32, 0.0f32);
        for j in 0..n_cand {
            if let Some((v, s)) = cand(j) {
                let e = (s - max).exp();
                sum += e;
                acc += e * v;
            }
        }
        out[d] = acc / sum;
    }
}

/// Token `t`'s compressor inputs into its ring slot (scores plus the APE row of its place in
/// the block); when the token completes a block, that block's row is made, normed, roped at the
/// block's first position and stored (the indexer's also Hadamard-rotated).
#[allow(clippy::too_many_arguments)]
fn compress_token(model: &Model, c: &Compressor, kv: &mut KvCache, il: usize, part: Part, stream: usize, pos: usize, ratio: usize, width: usize, vals: &[f32], scores: &[f32], ape: &mut [f32], row: &mut [f32], table: &mut [f32], rp: &RopeParams) {
    let hp = &model.hp;
    let w = vals.len();
    let apem = model.mat(&c.ape);
    quant::dequantize_row(apem.ty, apem.row(pos % ratio), &mut ape[..w]);
    {
        let (v, s) = kv.dsv4.as_mut().expect("deepseek4 cache").slot_mut(il, part, stream, pos);
        v.copy_from_slice(vals);
        for ((d, &x), &a) in s.iter_mut().zip(scores).zip(&ape[..w]) {
            *d = x + a;
        }
    }
    if (pos + 1) % ratio != 0 {
        return;
    }
    let b = pos / ratio;
    compress_row(kv, il, part, stream, ratio, b, width, row);
    let r = hp.n_rot;
    // normed into `ape` (its APE row is in the ring now)
    rms_norm(&row[..width], &c.norm, hp.rms_eps, &mut ape[..width]);
    rope::fill_cache(rp, (b * ratio) as f32, None, &mut table[..r.max(2)]);
    rope::apply(RopeMode::Norm, r, table, &mut ape[width - r..width]);
    if part == Part::Indexer {
        hadamard(&mut ape[..width]);
    }
    let dst = kv.dsv4.as_mut().expect("deepseek4 cache").row_mut(il, part, stream, b);
    for (d, &x) in dst.iter_mut().zip(&ape[..width]) {
        *d = f32_to_f16(x);
    }
}

/// V4 attention of block `il` over `c.xn` (the normed input); the output projection's result
/// in `c.proj`. `tables`: per token the RoPE table of this block's parameters.
#[allow(clippy::too_many_arguments)]
pub fn forward(model: &Model, d4: &Dsv4Params, layer: &Dsv4Attn, il: usize, ub: &UBatch<'_>, kv: &mut KvCache, cs: &mut Common, s: &mut Dsv4AttnScratch, pool: &ThreadPool, rope_ctx: &RopeParams, tables: &[f32]) {
    let hp = &model.hp;
    let n = ub.tokens.len();
    let (h, d, r, ql) = (hp.n_head, hp.head_dim_k, hp.n_rot, d4.q_lora_rank);
    let nope = d - r;
    let ratio = layer.ratio;
    let rp = rope_params(rope_ctx, d4, ratio != 0);
    let rw = r.max(2);

    // projections of the block input
    match (&layer.comp, &layer.lid) {
        (None, _) => project_all(model, pool, &mut cs.act, &cs.xn, n, [(&layer.q_a, &mut s.qr), (&layer.kv, &mut s.kv)]),
        (Some(c), None) => project_all(model, pool, &mut cs.act, &cs.xn, n, [(&layer.q_a, &mut s.qr), (&layer.kv, &mut s.kv), (&c.kv, &mut s.ckv), (&c.gate, &mut s.cgate)]),
        (Some(c), Some(l)) => project_all(
            model,
            pool,
            &mut cs.act,
            &cs.xn,
            n,
            [(&layer.q_a, &mut s.qr), (&layer.kv, &mut s.kv), (&c.kv, &mut s.ckv), (&c.gate, &mut s.cgate), (&l.comp.kv, &mut s.lkv), (&l.comp.gate, &mut s.lgate), (&l.proj, &mut s.lw)],
        ),
    }
    for t in 0..n {
        rms_norm(&s.qr[t * ql..(t + 1) * ql], &layer.q_a_norm, hp.rms_eps, &mut s.qr_n[t * ql..(t + 1) * ql]);
    }
    match &layer.lid {
        None => project(model, pool, &mut cs.act, &layer.q_b, &s.qr_n, n, &mut s.q),
        Some(l) => project_all(model, pool, &mut cs.act, &s.qr_n, n, [(&layer.q_b, &mut s.q), (&l.q_b, &mut s.iq)]),
    }
    let (ih, id) = hp.indexer.as_ref().map_or((0, 0), |x| (x.n_head, x.head_size));
    // per token: queries, the raw key, the compressors (in order, so a block completes after
    // all of its tokens are in the ring), the indexer's queries and weights
    for t in 0..n {
        let table = &tables[t * rw..(t + 1) * rw];
        for head in 0..h {
            let q = &mut s.q[(t * h + head) * d..(t * h + head + 1) * d];
            rms_norm_bare(q, hp.rms_eps);
            rope::apply(RopeMode::Norm, r, table, &mut q[nope..]);
        }
        rms_norm(&s.kv[t * d..(t + 1) * d], &layer.kv_norm, hp.rms_eps, &mut s.krow);
        rope::apply(RopeMode::Norm, r, table, &mut s.krow[nope..]);
        kv.store_k(il, ub.cells[t], &s.krow);
        let (stream, pos) = (kv.stream_of(ub.seq[t]), ub.pos[t] as usize);
        if let Some(c) = &layer.comp {
            let w = if ratio == CSA_RATIO { 2 * d } else { d };
            compress_token(model, c, kv, il, Part::Attn, stream, pos, ratio, d, &s.ckv[t * w..(t + 1) * w], &s.cgate[t * w..(t + 1) * w], &mut s.ape, &mut s.row, &mut s.table, &rp);
        }
        if let Some(l) = &layer.lid {
            let w = 2 * id;
            compress_token(model, &l.comp, kv, il, Part::Indexer, stream, pos, ratio, id, &s.lkv[t * w..(t + 1) * w], &s.lgate[t * w..(t + 1) * w], &mut s.ape, &mut s.row, &mut s.table, &rp);
            for head in 0..ih {
                let q = &mut s.iq[(t * ih + head) * id..(t * ih + head + 1) * id];
                rope::apply(RopeMode::Norm, r, table, &mut q[id - r..]);
                hadamard(q);
            }
            let scale = 1.0 / ((id * ih) as f32).sqrt();
            s.lw[t * ih..(t + 1) * ih].iter_mut().for_each(|w| *w *= scale);
        }
    }
    // the indexer's choice of compressed rows, for tokens that see more than top_k of them
    if let Some(x) = hp.indexer.as_ref().filter(|_| layer.lid.is_some()) {
        select(x, il, ub, kv, s, pool);
    }
    attend(hp, d4, layer, il, ub, kv, s, pool);
    // de-rope each head's output at its query position, then the grouped low-rank output
    for t in 0..n {
        s.table[..rw].copy_from_slice(&tables[t * rw..(t + 1) * rw]);
        for i in (1..r).step_by(2) {
            s.table[i] = -s.table[i];
        }
        for head in 0..h {
            rope::apply(RopeMode::Norm, r, &s.table, &mut s.o[(t * h + head) * d + nope..(t * h + head + 1) * d]);
        }
    }
    let (g, ol) = (d4.o_groups, d4.o_lora_rank);
    let gw = h * d / g;
    for gi in 0..g {
        for t in 0..n {
            s.og[t * gw..(t + 1) * gw].copy_from_slice(&s.o[t * h * d + gi * gw..t * h * d + (gi + 1) * gw]);
        }
        let wa = layer.out_a.get(gi);
        project(model, pool, &mut cs.act, &wa, &s.og, n, &mut s.otmp);
        for t in 0..n {
            s.oa[t * g * ol + gi * ol..t * g * ol + (gi + 1) * ol].copy_from_slice(&s.otmp[t * ol..(t + 1) * ol]);
        }
    }
    project(model, pool, &mut cs.act, &layer.out_b, &s.oa, n, &mut cs.proj);
}

/// Per token that sees more than `top_k` compressed rows of this CSA block: their indexer
/// scores Σ_h w_h · max(0, q_h · k_b), and the `top_k` best (ascending).
fn select(x: &IndexerParams, il: usize, ub: &UBatch<'_>, kv: &KvCache, s: &mut Dsv4AttnScratch, pool: &ThreadPool) {
    let n = ub.tokens.len();
    let (ih, id, top_k, nr) = (x.n_head, x.head_size, s.top_k, s.n_rows4);
    for t in 0..n {
        let visible = (ub.pos[t] as usize + 1) / CSA_RATIO;
        s.sel_len[t] = if visible <= top_k { ALL } else { 0 };
    }
    let d4 = kv.dsv4.as_ref().expect("deepseek4 cache");
    let (iq, lw) = (&s.iq, &s.lw);
    let sel = SharedOut::new(&mut s.sel[..]);
    let lens = SharedOut::new(&mut s.sel_len[..]);
    let tiles = SharedOut::new(&mut s.lid_tiles[..]);
    let scores = SharedOut::new(&mut s.lid_scores[..]);
    pool.run_chunks(n, &|ith, t| {
        // SAFETY: token t's length slot is read and written by this item alone.
        let len = unsafe { &mut lens.slice(t..t + 1)[0] };
        if *len == ALL {
            return;
        }
        let visible = (ub.pos[t] as usize + 1) / CSA_RATIO;
        let stream = kv.stream_of(ub.seq[t]);
        // SAFETY: thread ith alone uses tile ith and score row ith; token t's choice slots are
        // written by this item alone.
        let (tile, out, chosen) = unsafe { (&mut tiles.slice(ith..ith + 1)[0], scores.slice(ith * nr..(ith + 1) * nr), sel.slice(t * top_k..(t + 1) * top_k)) };
        let (qt, wt) = (&iq[t * ih * id..(t + 1) * ih * id], &lw[t * ih..(t + 1) * ih]);
        let mut block = [0f32; BLOCK];
        for b0 in (0..visible).step_by(BLOCK) {
            let m = (visible - b0).min(BLOCK);
            let keys: [&[u16]; BLOCK] = std::array::from_fn(|j| if j < m { d4.row(il, Part::Indexer, stream, b0 + j) } else { &[] });
            tile.score(qt, wt, &keys[..m], &mut block);
            out[b0..b0 + m].copy_from_slice(&block[..m]);
        }
        *len = tile.top_k(&out[..visible], top_k, chosen) as u32;
    });
}

/// The attention of every token's heads over the raw window and the compressed rows it sees,
/// with the sinks; each head's output (not yet de-roped) into `s.o`.
#[allow(clippy::too_many_arguments)]
fn attend(hp: &HParams, d4: &Dsv4Params, layer: &Dsv4Attn, il: usize, ub: &UBatch<'_>, kv: &KvCache, s: &mut Dsv4AttnScratch, pool: &ThreadPool) {
    let n = ub.tokens.len();
    let (h, d) = (hp.n_head, hp.head_dim_k);
    let scale = 1.0 / (d as f32).sqrt();
    let part = if n < pool.n_threads() { h.div_ceil(pool.n_threads()) } else { h };
    let parts = h.div_ceil(part);
    let ratio = layer.ratio;
    let dsv4 = kv.dsv4.as_ref().expect("deepseek4 cache");
    let (q, sel, sel_len, top_k) = (&s.q, &s.sel, &s.sel_len, s.top_k);
    let out = SharedOut::new(&mut s.o[..n * h * d]);
    let tiles = SharedOut::new(&mut s.tiles[..]);
    let next = AtomicUsize::new(0);
    let n_swa = d4.n_swa as i32;
    // upstream's view of a query's keys: the raw cells by their index, then the compressed rows
    // (`ggml_concat` at the raw view's padded length); its tiled kernel groups them by 64
    let n_cells = kv.shape.n_cells;
    let raw_view = (0..n).map(|t| kv.view_cells(kv.stream_of(ub.seq[t]))).max().unwrap_or(0);
    let comp_base = raw_view;
    // the compressed view (`dsv4_build_comp_plan`): the most rows a token sees, padded to 256,
    // at least 256
    let comp_view = if ratio == 0 { 0 } else { (0..n).map(|t| (ub.pos[t] as usize + 1) / ratio).max().unwrap_or(0).next_multiple_of(256).max(256) };
    let tiled = kv.tokens_per_stream(&ub.seq[..n]) >= TILED_FROM_ROWS;
    // one token: upstream's split-KV kernel over raw + compressed views of 512 cells or more
    let split = (n == 1).then(|| (raw_view + comp_view, pool.n_threads()));
    pool.run(&|ith, _| {
        // SAFETY: each thread uses only its own tile.
        let tile = unsafe { &mut tiles.slice(ith..ith + 1)[0] };
        tile.set_tiled(tiled);
        tile.set_split(split);
        loop {
            let item = next.fetch_add(1, Ordering::Relaxed);
            if item >= n * parts {
                break;
            }
            let (t, p) = (item / parts, item % parts);
            let heads = p * part..((p + 1) * part).min(h);
            let (seq, pos) = (ub.seq[t], ub.pos[t]);
            let stream = kv.stream_of(seq);
            for (j, head) in heads.clone().enumerate() {
                tile.set_query(j, &q[(t * h + head) * d..(t * h + head + 1) * d], pos);
            }
            let raw = kv.cells_in_use(stream).filter(move |(_, c)| c.pos <= pos && c.pos > pos - n_swa && c.seqs.contains(seq)).map(|(i, c)| {
                let k = crate::quant::f16_bytes(kv.k_row(il, i));
                (i % n_cells, c.pos, k, k)
            });
            let visible = if ratio == 0 { 0 } else { (pos as usize + 1) / ratio };
            let chosen: Option<&[u32]> = if ratio == CSA_RATIO && sel_len[t] != ALL { Some(&sel[t * top_k..t * top_k + sel_len[t] as usize]) } else { None };
            let n_comp = chosen.map_or(visible, |c| c.len());
            let comp = (0..n_comp).map(|j| {
                let b = chosen.map_or(j, |c| c[j] as usize);
                let k = crate::quant::f16_bytes(dsv4.row(il, Part::Attn, stream, b));
                (comp_base + b, pos, k, k)
            });
            if let Some((n_view, n_chunks)) = tile.split() {
                // the sinks join chunk 0's softmax
                tile.run_split(heads.len(), scale, raw.chain(comp), n_view, n_chunks, Some(&layer.sinks[heads.clone()]));
                for (j, head) in heads.enumerate() {
                    // SAFETY: the heads of item (token t, part p) are written by exactly one thread.
                    tile.output(j, unsafe { out.slice((t * h + head) * d..(t * h + head + 1) * d) });
                }
                continue;
            }
            if tiled {
                tile.run_tiled(heads.len(), scale, raw.chain(comp));
            } else {
                tile.run(heads.len(), scale, raw.chain(comp).map(|(_, p, k, v)| (p, k, v)));
            }
            for (j, head) in heads.enumerate() {
                // SAFETY: the heads of item (token t, part p) are written by exactly one thread.
                tile.output_with_sink(j, layer.sinks[head], unsafe { out.slice((t * h + head) * d..(t * h + head + 1) * d) });
            }
        }
    });
}
