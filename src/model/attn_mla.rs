//! Block: Multi-head Latent Attention in its absorbed form (DeepSeek V2, V2-Lite, V3, R1;
//! upstream b11312's `src/models/deepseek2.cpp`): the query directly or through a low-rank
//! bottleneck, the compressed KV (the normed latent and the shared rope key part, one cached
//! row per token; values are the latent itself), W_UK absorbed into the query per head, scores
//! against the cached rows, the output latent decompressed by W_UV per head, then the output
//! projection into the common scratch's `proj`. Owns `MlaScratch`; allocates nothing per pass.

use std::sync::atomic::{AtomicUsize, Ordering};

use super::attn_mha::{self, MhaScratch};
use super::hparams::{IndexerParams, MlaParams};
use super::indexer::{self, IndexerScratch, IndexerWeights};
use super::proj::{project, project_all, project_heads};
use super::weights::{mat, stack, vector, Mat, Stack};
use super::{Common, HParams, Model, UBatch};
use crate::gguf::GgufFile;
use crate::kernels::attention::{attend_tokens, split_tiles, tile_tokens, Accumulator, TileScratch, TILED_FROM_ROWS, TILE_ROWS};
use crate::kernels::matmul::activation_bytes;
use crate::kernels::norm::rms_norm;
use crate::kernels::rope::{self, RopeParams};
use crate::kv::KvCache;
use crate::quant::GgmlType;
use crate::sys::alloc::try_zeroed;
use crate::threads::{SharedOut, ThreadPool};

pub enum Query {
    Direct(Mat),
    LowRank { a: Mat, norm: Vec<f32>, b: Mat },
}

/// How the latent becomes per-head keys and values.
pub enum Decompress {
    /// The absorbed layout (`attn_k_b`, `attn_v_b`).
    Absorbed {
        /// Per head: kv_lora_rank rows × qk_nope (absorbs W_UK into the query).
        k_b: Stack,
        /// Per head: v_head rows × kv_lora_rank (decompresses the attention output).
        v_b: Stack,
    },
    /// A legacy file run as upstream runs it (`MlaParams::expanded`): `attn_kv_b`,
    /// n_head·(qk_nope + v_head) rows × kv_lora_rank, decompresses each token's latent into its
    /// keys' nope part and its values, which are cached per head.
    Expanded { kv_b: Mat },
}

pub struct MlaWeights {
    pub q: Query,
    pub kv_a: Mat,
    pub kv_a_norm: Vec<f32>,
    pub decompress: Decompress,
    pub wo: Mat,
}

impl MlaWeights {
    pub fn load(f: &GgufFile, hp: &HParams, m: &MlaParams, i: usize) -> Result<MlaWeights, String> {
        let (e, h, c, r) = (hp.n_embd, hp.n_head, m.kv_lora_rank, hp.n_rot);
        let n = |s: &str| format!("blk.{i}.{s}");
        let q = if f.tensor(&n("attn_q.weight")).is_some() {
            Query::Direct(mat(f, &n("attn_q.weight"), e, h * m.qk_head)?)
        } else {
            if m.q_lora_rank == 0 {
                return Err(format!("blk.{i}: neither attn_q nor a q_lora_rank for attn_q_a/attn_q_b"));
            }
            Query::LowRank {
                a: mat(f, &n("attn_q_a.weight"), e, m.q_lora_rank)?,
                norm: vector(f, &n("attn_q_a_norm.weight"), m.q_lora_rank)?,
                b: mat(f, &n("attn_q_b.weight"), m.q_lora_rank, h * m.qk_head)?,
            }
        };
        Ok(MlaWeights {
            q,
            kv_a: mat(f, &n("attn_kv_a_mqa.weight"), e, c + r)?,
            kv_a_norm: vector(f, &n("attn_kv_a_norm.weight"), c)?,
            decompress: if m.expanded {
                Decompress::Expanded { kv_b: mat(f, &n("attn_kv_b.weight"), c, h * (m.qk_nope + m.v_head))? }
            } else {
                Decompress::Absorbed { k_b: stack(f, &n("attn_k_b.weight"), m.qk_nope, c, h)?, v_b: stack(f, &n("attn_v_b.weight"), c, m.v_head, h)? }
            },
            wo: mat(f, &n("attn_output.weight"), h * m.v_head, e)?,
        })
    }

    pub fn mats(&self) -> Vec<&Mat> {
        let mut v = match &self.q {
            Query::Direct(q) => vec![q],
            Query::LowRank { a, b, .. } => vec![a, b],
        };
        match &self.decompress {
            Decompress::Absorbed { k_b, v_b } => v.extend([&self.kv_a, &k_b.first, &v_b.first, &self.wo]),
            Decompress::Expanded { kv_b } => v.extend([&self.kv_a, kv_b, &self.wo]),
        }
        v
    }

    /// Activation bytes of decode's per-head batches (every head's row at once).
    pub fn decode_act_bytes(&self, hp: &HParams, m: &MlaParams) -> usize {
        match &self.decompress {
            Decompress::Absorbed { k_b, v_b } => (hp.n_head * activation_bytes(k_b.first.ty, m.qk_nope, 1)).max(hp.n_head * activation_bytes(v_b.first.ty, m.kv_lora_rank, 1)),
            Decompress::Expanded { .. } => 0,
        }
    }
}

/// Legacy deepseek2 files (converted before absorption) carry per block one `attn_kv_b`
/// {kv_lora_rank, n_head·(qk_nope + v_head)}: per head qk_nope rows of W_UK, then v_head rows
/// of W_UV, each of kv_lora_rank columns (HF's `kv_b_proj`). Upstream b11312 runs them as plain
/// multi-head attention over heads decompressed from the latent (its non-MLA branch, caching
/// n_head·(qk_head + v_head) values per token), as `forward_expanded` does by default. With
/// `DEEPSEEK_LEGACY_MLA=absorb`, as ik_llama.cpp does, the loader splits the matrix into the
/// absorbed layout instead — `attn_k_b` {qk_nope, kv_lora_rank, n_head}: W_UK
/// per head transposed, dequantized exactly and stored as F16 (the precision upstream's
/// decompressed keys are cached in); `attn_v_b` {kv_lora_rank, v_head, n_head}: W_UV's rows
/// copied as they are — so legacy files run this block with its cache of kv_lora_rank + rope
/// dims per token (for V3/R1 576 against 40,960 values). The derived tensors are owned by the
/// model's file set and freed with it.
pub fn absorb_legacy(f: &mut GgufFile, hp: &HParams) -> Result<(), String> {
    let m = hp.mla.as_ref().ok_or("absorb_legacy: not an MLA model")?;
    let (h, c, nope, v) = (hp.n_head, m.kv_lora_rank, m.qk_nope, m.v_head);
    let mut derived = Vec::new();
    let mut row = vec![0f32; c];
    for i in 0..super::weights::layer_count(f, hp)? {
        let name = format!("blk.{i}.attn_kv_b.weight");
        let kv_b = mat(f, &name, c, h * (nope + v)).map_err(|e| format!("{e} (a deepseek2 file without key_length_mla / value_length_mla has the legacy layout)"))?;
        let data = f.tensor_data(super::weights::find(f, &name)?);
        let row_bytes = kv_b.n_bytes / kv_b.rows;
        let rows = |r: usize, n: usize| &data[r * row_bytes..(r + n) * row_bytes];
        let mut k_b = vec![0u8; 2 * h * c * nope];
        let mut v_b = Vec::with_capacity(h * v * row_bytes);
        for head in 0..h {
            let first = head * (nope + v);
            for n in 0..nope {
                crate::quant::dequantize_row(kv_b.ty, rows(first + n, 1), &mut row);
                for (ci, &x) in row.iter().enumerate() {
                    let at = 2 * ((head * c + ci) * nope + n);
                    k_b[at..at + 2].copy_from_slice(&crate::quant::f32_to_f16(x).to_le_bytes());
                }
            }
            v_b.extend_from_slice(rows(first + nope, v));
        }
        derived.push((format!("blk.{i}.attn_k_b.weight"), vec![nope, c, h], crate::quant::GgmlType::F16, k_b));
        derived.push((format!("blk.{i}.attn_v_b.weight"), vec![c, v, h], kv_b.ty, v_b));
    }
    f.append_owned(derived)
}

pub struct MlaScratch {
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
    /// Per thread, the attention tile's buffers.
    tiles: Vec<TileScratch>,
    /// First token of each attention tile (and the end).
    tile_starts: Vec<usize>,
    /// A legacy file run expanded: each token's decompressed [k_nope | v] per head, and the
    /// multi-head attention's buffers.
    kvb: Vec<f32>,
    mha: Option<MhaScratch>,
}

impl MlaScratch {
    /// `types`: the cache's key and value types (MLA reads both from the key rows: equal).
    pub fn new(hp: &HParams, m: &MlaParams, n_ubatch: usize, n_threads: usize, types: (GgmlType, GgmlType)) -> Result<MlaScratch, String> {
        let (n, h, c, r) = (n_ubatch, hp.n_head, m.kv_lora_rank, hp.n_rot);
        let row = hp.kv_cache_heads().1;
        if m.expanded {
            // the normed latents in o_lat; nothing of the absorbed path
            return Ok(MlaScratch {
                qa: try_zeroed(n * m.q_lora_rank, "scratch")?,
                qa_normed: try_zeroed(n * m.q_lora_rank, "scratch")?,
                q: try_zeroed(n * h * m.qk_head, "scratch")?,
                kv: try_zeroed(n * (c + r), "scratch")?,
                krow: Vec::new(),
                head_in: Vec::new(),
                head_out: Vec::new(),
                q_full: Vec::new(),
                o_lat: try_zeroed(n * c, "scratch")?,
                o: Vec::new(),
                tiles: Vec::new(),
                tile_starts: Vec::new(),
                kvb: try_zeroed(n * h * (m.qk_nope + m.v_head), "scratch")?,
                mha: Some(MhaScratch::new(hp, n, n_threads, Accumulator::F16, types)?),
            });
        }
        let heads_in = n.max(h) * c.max(m.qk_nope);
        let heads_out = n.max(h) * c.max(m.v_head);
        Ok(MlaScratch {
            qa: try_zeroed(n * m.q_lora_rank, "scratch")?,
            qa_normed: try_zeroed(n * m.q_lora_rank, "scratch")?,
            q: try_zeroed(n * h * m.qk_head, "scratch")?,
            kv: try_zeroed(n * (c + r), "scratch")?,
            krow: try_zeroed(row, "scratch")?,
            head_in: try_zeroed(heads_in, "scratch")?,
            head_out: try_zeroed(heads_out, "scratch")?,
            q_full: try_zeroed(n * h * (c + r), "scratch")?,
            o_lat: try_zeroed(n * h * c, "scratch")?,
            o: try_zeroed(n * h * m.v_head, "scratch")?,
            tiles: (0..n_threads.max(1)).map(|_| TileScratch::with_types(TILE_ROWS.max(h), c + r, c, Accumulator::F16, types.0, types.1)).collect::<Result<_, _>>()?,
            tile_starts: try_zeroed(n + 1, "scratch")?,
            kvb: Vec::new(),
            mha: None,
        })
    }

    pub fn bytes(&self) -> usize {
        let floats = [&self.qa, &self.qa_normed, &self.q, &self.kv, &self.krow, &self.head_in, &self.head_out, &self.q_full, &self.o_lat, &self.o, &self.kvb];
        4 * floats.iter().map(|v| v.capacity()).sum::<usize>() + self.mha.as_ref().map_or(0, |x| x.bytes())
    }
}

/// The softmax scale of MLA: mscale² / √(qk head size), with YaRN's magnitude correction
/// (upstream pre-scales kq_scale because it cancels the RoPE attention factor).
pub fn kq_scale(rope: &RopeParams, yarn_log_mul: f32, qk_head: usize) -> f32 {
    let ln_f = (1.0 / rope.freq_scale).ln();
    let attn_factor_org = rope.attn_factor * (1.0 + 0.1 * ln_f);
    let mscale = attn_factor_org * (1.0 + 0.1 * yarn_log_mul * ln_f);
    mscale * mscale / (qk_head as f32).sqrt()
}

/// deepseek32's sparse attention for one block: the lightning indexer's parameters, weights and
/// buffers.
pub struct Dsa<'a> {
    pub params: &'a IndexerParams,
    pub weights: &'a IndexerWeights,
    pub scratch: &'a mut IndexerScratch,
}

/// The cells a tile's rows attend to: every cell of the sequence up to a limit, or the
/// indexer's choice.
enum Cells<A, B> {
    Causal(A),
    Chosen(B),
}

impl<T, A: Iterator<Item = T>, B: Iterator<Item = T>> Iterator for Cells<A, B> {
    type Item = T;
    fn next(&mut self) -> Option<T> {
        match self {
            Cells::Causal(a) => a.next(),
            Cells::Chosen(b) => b.next(),
        }
    }
}

/// MLA attention of block `il` over `c.xn` (the normed input); attn_output's result in `c.proj`.
/// With `dsa` (deepseek32) each token attends only to the cells its indexer chooses.
#[allow(clippy::too_many_arguments)]
pub fn forward(model: &Model, m: &MlaParams, layer: &MlaWeights, il: usize, ub: &UBatch<'_>, kv: &mut KvCache, cs: &mut Common, s: &mut MlaScratch, pool: &ThreadPool, rope: &RopeParams, mut dsa: Option<Dsa<'_>>) {
    let n = ub.tokens.len();
    let scale = kq_scale(rope, model.hp.rope_yarn_log_mul, m.qk_head);
    let hp = &model.hp;
    let (h, c, r, nope, qk) = (hp.n_head, m.kv_lora_rank, hp.n_rot, m.qk_nope, m.qk_head);

    // Query: direct, or through the low-rank bottleneck with its own norm.
    // Compressed KV (`s.kv`): the latent (normed below) and the shared rope key part (not
    // normed), projected in the same batch as the query's first matrix.
    // With the indexer: its key and head weights from the same input, its queries from the
    // normed bottleneck with the main query.
    match (&layer.q, dsa.as_mut()) {
        (Query::Direct(wq), None) => project_all(model, pool, &mut cs.act, &cs.xn, n, [(wq, &mut s.q), (&layer.kv_a, &mut s.kv)]),
        (Query::Direct(_), Some(_)) => unreachable!("deepseek32 blocks always have the q bottleneck (checked at load)"),
        (Query::LowRank { a, norm, b }, mut dsa) => {
            match dsa.as_deref_mut() {
                None => project_all(model, pool, &mut cs.act, &cs.xn, n, [(a, &mut s.qa), (&layer.kv_a, &mut s.kv)]),
                Some(x) => project_all(model, pool, &mut cs.act, &cs.xn, n, [(a, &mut s.qa), (&layer.kv_a, &mut s.kv), (&x.weights.k, &mut x.scratch.k), (&x.weights.proj, &mut x.scratch.w)]),
            }
            let ql = m.q_lora_rank;
            for t in 0..n {
                rms_norm(&s.qa[t * ql..(t + 1) * ql], norm, hp.rms_eps, &mut s.qa_normed[t * ql..(t + 1) * ql]);
            }
            match dsa {
                None => project(model, pool, &mut cs.act, b, &s.qa_normed, n, &mut s.q),
                Some(x) => project_all(model, pool, &mut cs.act, &s.qa_normed, n, [(b, &mut s.q), (&x.weights.q_b, &mut x.scratch.q)]),
            }
        }
    }
    let (k_b, v_b) = match &layer.decompress {
        Decompress::Absorbed { k_b, v_b } => (k_b, v_b),
        Decompress::Expanded { kv_b } => return forward_expanded(model, m, layer, kv_b, il, ub, kv, cs, s, pool, rope),
    };
    for t in 0..n {
        let row = &s.kv[t * (c + r)..(t + 1) * (c + r)];
        rms_norm(&row[..c], &layer.kv_a_norm, hp.rms_eps, &mut s.krow[..c]);
        s.krow[c..c + r].copy_from_slice(&row[c..]);
        let cache = &cs.rope_cache[t * r.max(2)..(t + 1) * r.max(2)];
        rope::apply(rope.mode, r, cache, &mut s.krow[c..c + r]);
        if let Some(x) = dsa.as_mut() {
            indexer::prepare(hp, x.params, x.weights, x.scratch, t, cache, &mut s.krow[c + r..]);
        }
        for head in 0..h {
            let q = &mut s.q[(t * h + head) * qk..(t * h + head + 1) * qk];
            rope::apply(rope.mode, r, cache, &mut q[nope..]);
            s.q_full[(t * h + head) * (c + r) + c..(t * h + head + 1) * (c + r)].copy_from_slice(&q[nope..]);
        }
        kv.store_k(il, ub.cells[t], &s.krow);
    }
    if let Some(x) = dsa.as_mut() {
        indexer::select(x.params, c + r, il, ub, kv, x.scratch, pool);
    }
    let chosen = dsa.as_ref().map(|x| &*x.scratch);
    // Absorb W_UK into the query, head by head: q_abs = attn_k_b[h] · q_nope.
    if n == 1 {
        for head in 0..h {
            s.head_in[head * nope..(head + 1) * nope].copy_from_slice(&s.q[head * qk..head * qk + nope]);
        }
        project_heads(model, pool, &mut cs.act, k_b, &s.head_in, &mut s.head_out);
        for head in 0..h {
            s.q_full[head * (c + r)..head * (c + r) + c].copy_from_slice(&s.head_out[head * c..(head + 1) * c]);
        }
    }
    for head in (0..h).filter(|_| n > 1) {
        for t in 0..n {
            let src = (t * h + head) * qk;
            s.head_in[t * nope..(t + 1) * nope].copy_from_slice(&s.q[src..src + nope]);
        }
        let wk = k_b.get(head);
        project(model, pool, &mut cs.act, &wk, &s.head_in, n, &mut s.head_out);
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
        // a row's bytes of [latent | rope key] and of the latent, in the cache's key type
        let (kb, vb) = (kvr.shape.k_type.row_bytes(c + r), kvr.shape.k_type.row_bytes(c));
        let q_full = &s.q_full;
        let out = SharedOut::new(&mut s.o_lat[..n * h * c]);
        let scratch = SharedOut::new(&mut s.tiles);
        let part = if n < pool.n_threads() { h.div_ceil(pool.n_threads()) } else { h };
        let parts = h.div_ceil(part);
        // the indexer chooses per token: a tile is one token's heads
        let per_tile = if chosen.is_some() { 1 } else { tile_tokens(part) };
        let n_tiles = split_tiles(&ub.seq[..n], per_tile, &mut s.tile_starts);
        let starts = &s.tile_starts;
        let tiled = kvr.tokens_per_stream(&ub.seq[..n]) >= TILED_FROM_ROWS;
        // one token: upstream's split-KV kernel over its view when that holds 512 cells or more
        let split = (n == 1).then(|| (kvr.view_cells(kvr.stream_of(ub.seq[0])), pool.n_threads()));
        let n_cells = kvr.shape.n_cells;
        // claimed one by one, latest tokens first (see dense::attention)
        let next = AtomicUsize::new(0);
        pool.run(&|ith, _nth| {
            // SAFETY: each thread uses only its own scratch slot.
            let tile = unsafe { &mut scratch.slice(ith..ith + 1)[0] };
            tile.set_tiled(tiled);
            tile.set_split(split);
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
                let tokens = starts[i]..starts[i + 1];
                let choice = chosen.and_then(|x| x.chosen(tokens.start));
                let cells = |limit: i32| match choice {
                    None => Cells::Causal(kvr.cells_in_use(stream).filter(move |(_, cell)| cell.pos >= 0 && cell.pos <= limit && cell.seqs.contains(seq)).map(|(i, cell)| {
                        let k = kvr.k_bytes(il, i);
                        (i % n_cells, cell.pos, &k[..kb], &k[..vb])
                    })),
                    Some(list) => Cells::Chosen(list.iter().map(|&i| {
                        let k = kvr.k_bytes(il, i as usize);
                        (i as usize % n_cells, kvr.cell(i as usize).pos, &k[..kb], &k[..vb])
                    })),
                };
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
        project_heads(model, pool, &mut cs.act, v_b, &s.o_lat, &mut s.o);
    }
    for head in (0..h).filter(|_| n > 1) {
        for t in 0..n {
            let src = (t * h + head) * c;
            s.head_in[t * c..(t + 1) * c].copy_from_slice(&s.o_lat[src..src + c]);
        }
        let wv = v_b.get(head);
        project(model, pool, &mut cs.act, &wv, &s.head_in, n, &mut s.head_out);
        for t in 0..n {
            s.o[(t * h + head) * v..(t * h + head + 1) * v].copy_from_slice(&s.head_out[t * v..(t + 1) * v]);
        }
    }
    project(model, pool, &mut cs.act, &layer.wo, &s.o, n, &mut cs.proj);
}


/// A legacy file's attention as upstream b11312 runs it (`deepseek2.cpp`, its non-MLA branch),
/// after the query and compressed-KV projections of `forward`: the normed latent of each token
/// decompressed by `attn_kv_b` into every head's key (nope part) and value, the shared rope key
/// appended to each head's key, the query roped on its trailing dims, then multi-head attention
/// over the cached per-head K/V with MLA's `kq_scale`, then `attn_output`.
#[allow(clippy::too_many_arguments)]
fn forward_expanded(model: &Model, m: &MlaParams, layer: &MlaWeights, kv_b: &Mat, il: usize, ub: &UBatch<'_>, kv: &mut KvCache, cs: &mut Common, s: &mut MlaScratch, pool: &ThreadPool, rope: &RopeParams) {
    let hp = &model.hp;
    let n = ub.tokens.len();
    let (h, c, r, nope, qk, v) = (hp.n_head, m.kv_lora_rank, hp.n_rot, m.qk_nope, m.qk_head, m.v_head);
    let scale = kq_scale(rope, hp.rope_yarn_log_mul, qk);
    for t in 0..n {
        let row = &mut s.kv[t * (c + r)..(t + 1) * (c + r)];
        rms_norm(&row[..c], &layer.kv_a_norm, hp.rms_eps, &mut s.o_lat[t * c..(t + 1) * c]);
        let cache = &cs.rope_cache[t * r.max(2)..(t + 1) * r.max(2)];
        rope::apply(rope.mode, r, cache, &mut row[c..]);
        for head in 0..h {
            rope::apply(rope.mode, r, cache, &mut s.q[(t * h + head) * qk + nope..(t * h + head + 1) * qk]);
        }
    }
    project(model, pool, &mut cs.act, kv_b, &s.o_lat[..n * c], n, &mut s.kvb);
    let mha = s.mha.as_mut().expect("a legacy file's expanded scratch");
    let w = nope + v;
    mha.q[..n * h * qk].copy_from_slice(&s.q[..n * h * qk]);
    for t in 0..n {
        let k_pe = &s.kv[t * (c + r) + c..(t + 1) * (c + r)];
        for head in 0..h {
            let src = &s.kvb[(t * h + head) * w..(t * h + head + 1) * w];
            let k = &mut mha.k[(t * h + head) * qk..(t * h + head + 1) * qk];
            k[..nope].copy_from_slice(&src[..nope]);
            k[nope..].copy_from_slice(k_pe);
            mha.v[(t * h + head) * v..(t * h + head + 1) * v].copy_from_slice(&src[nope..]);
        }
    }
    attn_mha::store_and_attend(hp, kv, il, ub, mha, pool, n, scale);
    project(model, pool, &mut cs.act, &layer.wo, &mha.att, n, &mut cs.proj);
}
