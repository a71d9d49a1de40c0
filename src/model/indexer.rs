//! Block: the lightning indexer of DeepSeek V3.2's sparse attention (`deepseek32`; upstream
//! b11312 `src/models/deepseek32.cpp:226-321`). Per token: `n_head` indexer queries from the
//! normed query bottleneck, one key from the block's input (LayerNorm), both NEOX-roped on their
//! first rope dims and Hadamard-rotated; the key is cached beside the token's MLA row (F16).
//! Each query token scores every cell it may see, Σ_h w_h · max(0, q_h · k), with per-head
//! weights from the block's input, and attends only to the `top_k` best (`attn_mla` reads the
//! choice). A token that sees at most `top_k` cells keeps them all and is not scored. Owns
//! `IndexerScratch`; allocates nothing per pass.

use super::hparams::IndexerParams;
use super::weights::{mat, vector, Mat};
use super::{HParams, UBatch};
use crate::gguf::GgufFile;
use crate::kernels::indexer::{hadamard, IndexerTile, BLOCK};
use crate::kernels::norm::layer_norm;
use crate::kernels::rope::{self, RopeMode};
use crate::kv::KvCache;
use crate::sys::alloc::try_zeroed;
use crate::threads::{SharedOut, ThreadPool};

/// `sel_len` of a token that keeps every cell it sees.
const ALL: u32 = u32::MAX;
/// `sel_len` of a token whose choice this block still has to make.
const PENDING: u32 = u32::MAX - 1;
/// Cells per scoring work item.
const CHUNK: usize = 256;
/// Score floats held at once (token rows × cells); bounds the scratch for long contexts.
const SCORE_FLOATS: usize = 1 << 20;
/// The indexer key's LayerNorm epsilon (hard-coded upstream, deepseek32.cpp:9).
const K_NORM_EPS: f32 = 1e-6;

pub struct IndexerWeights {
    /// q_lora_rank → n_head · head_size
    pub q_b: Mat,
    /// n_embd → head_size
    pub k: Mat,
    pub k_norm: Vec<f32>,
    pub k_norm_b: Vec<f32>,
    /// n_embd → n_head (the per-head weights)
    pub proj: Mat,
}

impl IndexerWeights {
    pub fn load(f: &GgufFile, hp: &HParams, x: &IndexerParams, q_lora_rank: usize, i: usize) -> Result<IndexerWeights, String> {
        let n = |s: &str| format!("blk.{i}.indexer.{s}");
        Ok(IndexerWeights {
            q_b: mat(f, &n("attn_q_b.weight"), q_lora_rank, x.n_head * x.head_size)?,
            k: mat(f, &n("attn_k.weight"), hp.n_embd, x.head_size)?,
            k_norm: vector(f, &n("k_norm.weight"), x.head_size)?,
            k_norm_b: vector(f, &n("k_norm.bias"), x.head_size)?,
            proj: mat(f, &n("proj.weight"), hp.n_embd, x.n_head)?,
        })
    }

    pub fn mats(&self) -> [&Mat; 3] {
        [&self.q_b, &self.k, &self.proj]
    }
}

pub struct IndexerScratch {
    /// Per token: the key projection (n × head_size), the head weights (n × n_head), the
    /// queries (n × n_head × head_size).
    pub k: Vec<f32>,
    pub w: Vec<f32>,
    pub q: Vec<f32>,
    /// `group` token rows of one stream's cells.
    score: Vec<f32>,
    group: usize,
    /// Tokens still to choose for, in order.
    pending: Vec<u32>,
    tiles: Vec<IndexerTile>,
    /// Per token: `top_k` slots of chosen cells (global indices, ascending), and how many are
    /// used (`ALL`: every cell the token sees).
    sel: Vec<u32>,
    sel_len: Vec<u32>,
    top_k: usize,
}

impl IndexerScratch {
    /// For micro-batches of `n_ubatch` tokens, `n_threads` threads and streams of `n_cells`.
    pub fn new(x: &IndexerParams, n_ubatch: usize, n_threads: usize, n_cells: usize) -> Result<IndexerScratch, String> {
        let n = n_ubatch;
        let group = (SCORE_FLOATS / n_cells.max(1)).clamp(1, n);
        let top_k = x.top_k.min(n_cells.max(1));
        Ok(IndexerScratch {
            k: try_zeroed(n * x.head_size, "scratch")?,
            w: try_zeroed(n * x.n_head, "scratch")?,
            q: try_zeroed(n * x.n_head * x.head_size, "scratch")?,
            score: try_zeroed(group * n_cells, "indexer scores")?,
            group,
            pending: try_zeroed(n, "scratch")?,
            tiles: (0..n_threads.max(1)).map(|_| IndexerTile::new(x.head_size, n_cells)).collect::<Result<_, _>>()?,
            sel: try_zeroed(n * top_k, "indexer choices")?,
            sel_len: try_zeroed(n, "scratch")?,
            top_k,
        })
    }

    pub fn bytes(&self) -> usize {
        4 * [&self.k, &self.w, &self.q, &self.score].iter().map(|v| v.capacity()).sum::<usize>()
            + 4 * (self.pending.capacity() + self.sel.capacity() + self.sel_len.capacity())
            + self.tiles.iter().map(|t| t.bytes()).sum::<usize>()
    }

    /// The cells token `t` attends to (global indices in stream order), or None for every cell
    /// it sees.
    pub fn chosen(&self, t: usize) -> Option<&[u32]> {
        match self.sel_len[t] {
            ALL => None,
            len => Some(&self.sel[t * self.top_k..t * self.top_k + len as usize]),
        }
    }

    /// Before the blocks of a micro-batch (whose cells are claimed): which tokens see more
    /// cells than `top_k` and so need a choice in every block. The same in every block.
    pub fn plan(&mut self, ub: &UBatch<'_>, kv: &KvCache) {
        for t in 0..ub.tokens.len() {
            let (seq, limit) = (ub.seq[t], ub.pos[t]);
            let seen = kv.cells_in_use(kv.stream_of(seq)).filter(|(_, c)| c.pos >= 0 && c.pos <= limit && c.seqs.contains(seq)).count();
            self.sel_len[t] = if seen <= self.top_k { ALL } else { PENDING };
        }
    }
}

/// The indexer's projections are in `s.k` / `s.w` (from the block's normed input) and `s.q`
/// (from the normed query bottleneck): finishes token `t`'s key into `key` (LayerNorm, rope,
/// rotation) and its queries and weights in place. `cache` is the token's RoPE table.
pub fn prepare(hp: &HParams, x: &IndexerParams, layer: &IndexerWeights, s: &mut IndexerScratch, t: usize, cache: &[f32], key: &mut [f32]) {
    let (d, h, r) = (x.head_size, x.n_head, hp.n_rot);
    layer_norm(&s.k[t * d..(t + 1) * d], &layer.k_norm, &layer.k_norm_b, K_NORM_EPS, &mut key[..d]);
    rope::apply(RopeMode::Neox, r, cache, &mut key[..d]);
    hadamard(&mut key[..d]);
    for head in 0..h {
        let q = &mut s.q[(t * h + head) * d..(t * h + head + 1) * d];
        rope::apply(RopeMode::Neox, r, cache, q);
        hadamard(q);
    }
    // pre-scaled as upstream does (deepseek32.cpp:272)
    let scale = 1.0 / ((d * h) as f32).sqrt();
    s.w[t * h..(t + 1) * h].iter_mut().for_each(|w| *w *= scale);
}

/// After every token's key is in the cache (block `il`): each pending token's choice of the
/// `top_k` cells it scores highest among those it sees.
pub fn select(x: &IndexerParams, key_at: usize, il: usize, ub: &UBatch<'_>, kv: &KvCache, s: &mut IndexerScratch, pool: &ThreadPool) {
    let n = ub.tokens.len();
    let (d, h) = (x.head_size, x.n_head);
    let IndexerScratch { q, w, score, group: group_size, pending, tiles, sel, sel_len, top_k, .. } = s;
    let (group_size, top_k) = (*group_size, *top_k);
    let mut n_pending = 0;
    for t in 0..n {
        if sel_len[t] != ALL {
            sel_len[t] = PENDING;
            pending[n_pending] = t as u32;
            n_pending += 1;
        }
    }
    let n_cells = kv.shape.n_cells;
    let chunks = n_cells.div_ceil(CHUNK);
    for g0 in (0..n_pending).step_by(group_size) {
        let group = &pending[g0..(g0 + group_size).min(n_pending)];
        let (q, w) = (&*q, &*w);
        {
            let score = SharedOut::new(&mut score[..group.len() * n_cells]);
            let tiles = SharedOut::new(&mut tiles[..]);
            pool.run_chunks(group.len() * chunks, &|ith, item| {
                let (g, chunk) = (item / chunks, item % chunks);
                let t = group[g] as usize;
                let (seq, limit) = (ub.seq[t], ub.pos[t]);
                let base = kv.stream_of(seq) * n_cells;
                let cells = chunk * CHUNK..((chunk + 1) * CHUNK).min(n_cells);
                // SAFETY: thread ith alone uses tile ith; item (g, chunk) alone writes its
                // cells of row g.
                let (tile, out) = unsafe { (&mut tiles.slice(ith..ith + 1)[0], score.slice(g * n_cells + cells.start..g * n_cells + cells.end)) };
                let (qt, wt) = (&q[t * h * d..(t + 1) * h * d], &w[t * h..(t + 1) * h]);
                let mut keys: [&[u16]; BLOCK] = [&[]; BLOCK];
                let mut at = [0usize; BLOCK];
                let mut m = 0;
                let mut block = [0f32; BLOCK];
                for (j, c) in cells.clone().enumerate() {
                    let cell = kv.cell(base + c);
                    out[j] = f32::NEG_INFINITY;
                    if cell.pos < 0 || cell.pos > limit || !cell.seqs.contains(seq) {
                        continue;
                    }
                    keys[m] = &kv.k_row(il, base + c)[key_at..key_at + d];
                    at[m] = j;
                    m += 1;
                    if m == BLOCK {
                        tile.score(qt, wt, &keys, &mut block);
                        (0..m).for_each(|i| out[at[i]] = block[i]);
                        m = 0;
                    }
                }
                if m > 0 {
                    tile.score(qt, wt, &keys[..m], &mut block);
                    (0..m).for_each(|i| out[at[i]] = block[i]);
                }
            });
        }
        let score = &*score;
        let sel = SharedOut::new(&mut sel[..]);
        let lens = SharedOut::new(&mut sel_len[..]);
        let tiles = SharedOut::new(&mut tiles[..]);
        pool.run_chunks(group.len(), &|ith, g| {
            let t = group[g] as usize;
            let base = (kv.stream_of(ub.seq[t]) * n_cells) as u32;
            // SAFETY: thread ith alone uses tile ith; token t's slots are written by this item
            // alone.
            let (tile, out, len) = unsafe { (&mut tiles.slice(ith..ith + 1)[0], sel.slice(t * top_k..(t + 1) * top_k), &mut lens.slice(t..t + 1)[0]) };
            let taken = tile.top_k(&score[g * n_cells..(g + 1) * n_cells], top_k, out);
            out[..taken].iter_mut().for_each(|c| *c += base);
            *len = taken as u32;
        });
    }
}
