//! Causal attention of a tile of query rows over the cached keys and values (F16) they share,
//! with the online softmax of ggml's flash-attention kernel for fewer than 64 query rows (its
//! decode path, and the one its goldens are made with): Q rounded to F16 for the K dot product,
//! scores and the softmax sum in f32, the running sum of values in F16 — rounded to F16 after
//! each cell's multiply-add and after each rescale by a new maximum, cell by cell. That F16
//! accumulator is what the quantized-MoE models are sensitive to: an f32 one moved their
//! expert choices away from llama.cpp's.
//!
//! In the recipes that follow upstream's F16 accumulator, a micro-batch with at least 64 query
//! tokens per stream over F16 keys and values takes ggml's other kernel, as upstream does ([`TileScratch::set_tiled`], [`TileScratch::run_tiled`]):
//! cells in tiles of 64 by their place in the cache view, a tile's scores for every row first,
//! masked cells at −∞, one rescale per tile, exponentials by `ggml_v_expf`, and f32 accumulators.
//! (Its split-KV decode path — one token over 512 cells or more — splits the cells by thread
//! count, so its bits depend on the thread count; that one is not reproduced.)
//! Cells are taken a block at a time: the block's keys and values are widened to f32 once for
//! every query row of the tile, then per row the block's scores, the per-cell maxima and
//! exponentials, and its values added into the row's accumulator in order.
//!
//! A tile is the query heads that share a K/V head (GQA, MLA) for one or several consecutive
//! tokens of a sequence; each row stops at its own causal limit. A row's arithmetic depends
//! only on its own query and the cells it attends to (and, on the tiled path, which tile of 64
//! holds each cell), so it gets the same result bit for bit whichever tile of rows it is in.

use super::simd::{self, DotFn, Level};
use crate::quant::{self, f16_to_f32, f32_to_f16, GgmlType};
use crate::sys::alloc::try_zeroed;

/// Cells per block of the online softmax.
const BLOCK: usize = 32;

/// The precision of the running sum of values. `F16` is ggml's, cell by cell (rounded to F16
/// after every rescale and multiply-add): the recipes whose results follow its roundings — the
/// MoE models, where an expert choice flips on them — use it. `F32`: a block's cells rescale
/// the sum once when the block raises the maximum and add in f32 — more exact, and far less
/// sensitive to how a batch was composed (a rounding flip of the F16 sum is 2^-11 of it), for
/// the dense models, whose logits meet the tolerances either way.
///
/// `F32Cells` is ggml's f32 accumulator for values that are not F16 (a quantized or BF16 V
/// cache): the same cell-by-cell steps as `F16` without the roundings. Every tile over such
/// values uses it, as upstream does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accumulator {
    F32,
    F16,
    F32Cells,
}

/// Cells per KV tile of upstream's tiled flash attention (`GGML_FA_TILE_KV`, ggml-cpu/common.h),
/// and the query rows per stream from which upstream takes it (`GGML_FA_TILE_Q`): it computes a
/// micro-batch's attention with that kernel when its query tensor holds at least 64 tokens per
/// stream (`neq1 >= GGML_FA_TILE_Q`, ops.cpp:9549) and the cache's keys and values are F16 (or
/// F32, cast to F16 before the flash attention) of one type ([`TileScratch::set_tiled`]).
pub(crate) const KV_TILE: usize = 64;
pub(crate) const TILED_FROM_ROWS: usize = 64;

/// Cells of the view from which upstream decodes one query row per stream by its split-KV
/// kernel (ops.cpp:9490: `neq1 == 1 && neq3 == 1`, F16 or F32 keys and values of one type,
/// `nek1 >= 512`): the view's cells in one chunk per thread, each chunk's online softmax as
/// the one-chunk kernel computes it, the partials then merged ([`TileScratch::run_split`]).
pub(crate) const SPLIT_FROM_CELLS: usize = 512;

/// Query rows a tile aims at: enough that widening a block of cells costs little next to the
/// rows' dot products, few enough that the rows' queries and accumulators stay in L2.
pub(crate) const TILE_ROWS: usize = 64;

/// Tokens per tile when each token has `heads` query rows on one K/V head.
pub fn tile_tokens(heads: usize) -> usize {
    (TILE_ROWS / heads.max(1)).max(1)
}

/// Splits a micro-batch's tokens (`seq[t]`: the sequence token t attends in) into tiles: runs
/// of at most `per_tile` consecutive tokens of one sequence. Tile i is tokens
/// `starts[i]..starts[i + 1]`; returns the number of tiles. `starts` needs `seq.len() + 1`
/// entries.
pub fn split_tiles(seq: &[usize], per_tile: usize, starts: &mut [usize]) -> usize {
    let mut n = 0;
    let mut t = 0;
    while t < seq.len() {
        starts[n] = t;
        n += 1;
        let end = (t + per_tile.max(1)).min(seq.len());
        t += 1;
        while t < end && seq[t] == seq[t - 1] {
            t += 1;
        }
    }
    starts[n] = seq.len();
    n
}

/// The attention of one tile: tokens `tokens` (positions `pos[t]`) of one sequence, with
/// `rows_per_token` query rows each (`query(t, j)`, `dk` values). `cells(limit)` yields the
/// sequence's cells up to position `limit` in stream order (index in the cache's view,
/// position, key row, value row). With the tiled kernel on ([`TileScratch::set_tiled`]) the
/// whole tile goes through the cells once, each row masking the cells past its position. Else,
/// when the cells' positions never decrease the whole tile goes through the cells once, each
/// row taking a prefix; else each token goes alone over its own cells. `output(t, j, result)`
/// receives each row's `dv` values.
#[allow(clippy::too_many_arguments)]
pub fn attend_tokens<'a, I: Iterator<Item = (usize, i32, &'a [u8], &'a [u8])>>(
    tile: &mut TileScratch,
    tokens: std::ops::Range<usize>,
    pos: &[i32],
    rows_per_token: usize,
    scale: f32,
    query: impl Fn(usize, usize) -> &'a [f32],
    cells: impl Fn(i32) -> I,
    mut output: impl FnMut(usize, usize, &TileScratch, usize),
) {
    let limit_of = |ts: &std::ops::Range<usize>| ts.clone().map(|t| pos[t]).max().expect("tiles are not empty");
    let tiled = tile.tiled;
    let together = tiled || tokens.len() == 1 || cells(limit_of(&tokens)).map(|(_, p, _, _)| p).is_sorted();
    let runs = if together { 1 } else { tokens.len() };
    for run in 0..runs {
        let run_tokens = if together { tokens.clone() } else { tokens.start + run..tokens.start + run + 1 };
        for (k, t) in run_tokens.clone().enumerate() {
            for j in 0..rows_per_token {
                tile.set_query(k * rows_per_token + j, query(t, j), pos[t]);
            }
        }
        let cells = cells(limit_of(&run_tokens));
        if tiled {
            tile.run_tiled(run_tokens.len() * rows_per_token, scale, cells);
        } else if let (Some((n_view, n_chunks)), 1) = (tile.split, run_tokens.len()) {
            tile.run_split(rows_per_token, scale, cells, n_view, n_chunks, None);
        } else {
            tile.run(run_tokens.len() * rows_per_token, scale, cells.map(|(_, p, k, v)| (p, k, v)));
        }
        for (k, t) in run_tokens.enumerate() {
            for j in 0..rows_per_token {
                output(t, j, tile, k * rows_per_token + j);
            }
        }
    }
}

/// One thread's buffers for a tile of up to `max_rows` query rows: the queries (F16-rounded,
/// padded with zeros to a multiple of 16), the accumulators, each row's causal limit, running
/// maximum and sum, and the current block's cells widened to f32.
///
/// Cells are rows of bytes in the cache's key and value types. F16 keys (and F32 ones, which
/// upstream casts to F16 before its flash attention) are widened and multiplied with the
/// F16-rounded query; other keys (BF16, the block types) are multiplied as ggml does, by their
/// `vec_dot` with the query converted to their `vec_dot_type` (`q_dot`). Values that are not
/// F16 or F32 are converted to f32 (exact for every cache type) and summed in f32.
pub struct TileScratch {
    level: Level,
    accumulator: Accumulator,
    k_type: GgmlType,
    v_type: GgmlType,
    /// the keys' SIMD dot kernel at `level` (None: the scalar reference), when not F16
    kdot: Option<DotFn>,
    /// per row, the query in the keys' `vec_dot_type` (keys that are not F16)
    q_dot: Vec<u8>,
    q_dot_bytes: usize,
    /// the block's key rows as stored (keys that are not F16)
    k_blk: Vec<u8>,
    k_bytes: usize,
    dk: usize,
    dv: usize,
    /// dk and dv rounded up to a multiple of 16 (the padding stays zero)
    dkp: usize,
    dvp: usize,
    max_rows: usize,
    q: Vec<f32>,
    acc: Vec<f32>,
    limit: Vec<i32>,
    max: Vec<f32>,
    sum: Vec<f32>,
    open: Vec<bool>,
    /// BLOCK key rows of dkp, then BLOCK value rows of dvp
    cells: Vec<f32>,
    /// per row, for the current block: the cells' weights e^(s − M), the rescale factors of
    /// the cells that raise the maximum, which cells those are, and how many cells it takes
    weight: Vec<f32>,
    rescale_by: Vec<f32>,
    rescale: Vec<u32>,
    taken: Vec<usize>,
    pos: [i32; BLOCK],
    /// where each cell's value row starts in `cells` (its key row when the values are the
    /// keys' first dv elements, as in MLA)
    value_at: [usize; BLOCK],
    /// upstream's tiled kernel ([`TileScratch::run_tiled`]) for this tile's rows: the queries
    /// kept in f32
    tiled: bool,
    /// per row, the scores of the KV tile's present cells, then their weights
    kq: Vec<f32>,
    tw: Vec<f32>,
    /// the KV tile's present keys widened and transposed: kt[d·64 + c] for the tile's c-th
    /// present cell (columns past the present cells zero)
    kt: Vec<f32>,
    /// one key row widened (dkp)
    krow: Vec<f32>,
    /// the KV tile's present value rows widened (64 rows of dvp)
    tvals: Vec<f32>,
    /// per present cell of the KV tile: its slot in the tile (cell index mod 64) and position
    tslot: [usize; KV_TILE],
    tpos: [i32; KV_TILE],
    /// the merged partials of [`TileScratch::run_split`]: per row its accumulator (dvp), maximum
    /// and sum
    split_acc: Vec<f32>,
    split_max: Vec<f32>,
    split_sum: Vec<f32>,
    /// [`TileScratch::set_split`]: the view's cells and the chunks of upstream's split-KV kernel
    split: Option<(usize, usize)>,
    /// the previous cell's key and value rows, whose distance to the current ones predicts
    /// where the cells ahead are ([`Prefetch`])
    ahead: Prefetch,
}

/// Software prefetch of the cells ahead: cached rows are read once per token and layer, from
/// memory at depth (a 4,096-cell cache is megabytes per layer), one row per cell, and the next
/// cell's rows are usually one stride further. Each cell prefetches the rows `AHEAD` strides
/// past it (where the stride is the distance from the previous cell's: a guess that costs a
/// wasted prefetch when wrong, never a fault).
#[derive(Clone, Copy, Default)]
struct Prefetch {
    k: usize,
    v: usize,
}

impl Prefetch {
    const AHEAD: usize = 8;

    #[inline(always)]
    fn cell(&mut self, k: &[u8], v: &[u8]) {
        Self::row(&mut self.k, k);
        if !std::ptr::eq(k.as_ptr(), v.as_ptr()) {
            Self::row(&mut self.v, v);
        }
    }

    #[inline(always)]
    fn row(prev: &mut usize, row: &[u8]) {
        let at = row.as_ptr() as usize;
        let stride = at.wrapping_sub(*prev);
        *prev = at;
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            let ahead = row.as_ptr().wrapping_add(stride.wrapping_mul(Self::AHEAD));
            for line in (0..row.len()).step_by(64) {
                // SAFETY: a prefetch reads nothing and cannot fault, whatever the address.
                unsafe { _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(line) as *const i8) };
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = stride;
    }
}

impl TileScratch {
    pub fn new(max_rows: usize, dk: usize, dv: usize, accumulator: Accumulator) -> Result<TileScratch, String> {
        Self::with_types(max_rows, dk, dv, accumulator, GgmlType::F16, GgmlType::F16)
    }

    /// As [`TileScratch::new`] for cells of keys of `k_type` and values of `v_type` (F32, F16,
    /// BF16 or a block type whose blocks divide `dk` and `dv`).
    pub fn with_types(max_rows: usize, dk: usize, dv: usize, accumulator: Accumulator, k_type: GgmlType, v_type: GgmlType) -> Result<TileScratch, String> {
        Self::at_level(simd::level(), max_rows, dk, dv, accumulator, k_type, v_type)
    }

    /// As [`TileScratch::with_types`] with the kernels of `level` (which the CPU must support).
    pub(crate) fn at_level(level: Level, max_rows: usize, dk: usize, dv: usize, accumulator: Accumulator, k_type: GgmlType, v_type: GgmlType) -> Result<TileScratch, String> {
        let (dkp, dvp) = (dk.next_multiple_of(16), dv.next_multiple_of(16));
        // values that are not F16: upstream's f32 accumulator, cell by cell, whatever the recipe
        // asks for F16 values
        let accumulator = if is_f16_kind(v_type) { accumulator } else { Accumulator::F32Cells };
        let key_dot = !is_f16_kind(k_type);
        let row = |t: GgmlType, n: usize| t.row_bytes(n).ok_or_else(|| format!("attention rows of {n} values cannot be {}", t.name()));
        let (q_dot_bytes, k_bytes) = if key_dot { (row(k_type.vec_dot_type(), dk)?, row(k_type, dk)?) } else { (0, 0) };
        row(v_type, dv)?;
        Ok(TileScratch {
            level,
            accumulator,
            k_type,
            v_type,
            kdot: if key_dot { simd::dot_fns_at(level, k_type).map(|f| f[0]) } else { None },
            q_dot: try_zeroed(max_rows * q_dot_bytes, "attention queries")?,
            q_dot_bytes,
            k_blk: try_zeroed(BLOCK * k_bytes, "attention block")?,
            k_bytes,
            dk,
            dv,
            dkp,
            dvp,
            max_rows,
            q: try_zeroed(max_rows * dkp, "attention queries")?,
            acc: try_zeroed(max_rows * dvp, "attention accumulators")?,
            limit: try_zeroed(max_rows, "attention limits")?,
            max: try_zeroed(max_rows, "attention maxima")?,
            sum: try_zeroed(max_rows, "attention sums")?,
            open: vec![false; max_rows],
            cells: try_zeroed(BLOCK * (dkp + dvp), "attention block")?,
            weight: try_zeroed(max_rows * BLOCK, "attention weights")?,
            rescale_by: try_zeroed(max_rows * BLOCK, "attention rescales")?,
            rescale: try_zeroed(max_rows, "attention rescale masks")?,
            taken: try_zeroed(max_rows, "attention block counts")?,
            pos: [0; BLOCK],
            value_at: [0; BLOCK],
            tiled: false,
            kq: if key_dot { Vec::new() } else { try_zeroed(max_rows * KV_TILE, "attention tile scores")? },
            tw: if key_dot { Vec::new() } else { try_zeroed(max_rows * KV_TILE, "attention tile weights")? },
            kt: if key_dot { Vec::new() } else { try_zeroed(dkp * KV_TILE, "attention key tile")? },
            krow: if key_dot { Vec::new() } else { try_zeroed(dkp, "attention key row")? },
            tvals: if key_dot { Vec::new() } else { try_zeroed(KV_TILE * dvp, "attention value tile")? },
            tslot: [0; KV_TILE],
            tpos: [0; KV_TILE],
            split_acc: if key_dot { Vec::new() } else { try_zeroed(max_rows * dvp, "attention split accumulators")? },
            split_max: if key_dot { Vec::new() } else { try_zeroed(max_rows, "attention split maxima")? },
            split_sum: if key_dot { Vec::new() } else { try_zeroed(max_rows, "attention split sums")? },
            split: None,
            ahead: Prefetch::default(),
        })
    }

    /// Whether the next tiles run upstream's tiled kernel ([`TileScratch::run_tiled`]): `on`
    /// when the micro-batch takes it ([`takes_tiled`]); set before the rows' queries.
    pub fn set_tiled(&mut self, on: bool) {
        // Only where this tile follows upstream's kernels (the F16-accumulator recipes): the dense
        // recipes' f32 accumulator keeps a row's result close to the same whatever its batch,
        // which the serving engine's batched-vs-alone test (c_tests/engine_stress.c) holds them
        // to; with the tiled kernel there a request's first token moved past that bound.
        self.tiled = on && self.k_bytes == 0 && is_f16_kind(self.v_type) && self.k_type == self.v_type && self.accumulator == Accumulator::F16;
    }

    /// Whether this tile's cache types are those upstream's split-KV decode kernel takes (F16
    /// keys and values of one type; see [`SPLIT_FROM_CELLS`]).
    /// (Only where this tile follows upstream's one-chunk kernel, its F16 accumulator: the
    /// recipes whose results follow upstream's roundings.)
    pub fn can_split(&self) -> bool {
        self.k_bytes == 0 && is_f16_kind(self.v_type) && self.k_type == self.v_type && self.accumulator == Accumulator::F16
    }

    /// For a micro-batch of one token (upstream's `neq1 == 1 && neq3 == 1`) over a view of
    /// `n_view` cells computed by `n_threads` threads: [`attend_tokens`] takes upstream's
    /// split-KV kernel ([`TileScratch::run_split`]) when the view holds [`SPLIT_FROM_CELLS`]
    /// cells or more and the tile [`can_split`](TileScratch::can_split). `None`: never.
    pub fn set_split(&mut self, view: Option<(usize, usize)>) {
        self.split = view.filter(|&(n_view, _)| n_view >= SPLIT_FROM_CELLS && self.can_split());
    }

    /// The split-KV view and chunks [`TileScratch::set_split`] turned on, if any.
    pub fn split(&self) -> Option<(usize, usize)> {
        self.split
    }

    /// Whether [`TileScratch::set_tiled`] turned the tiled kernel on.
    pub fn is_tiled(&self) -> bool {
        self.tiled
    }

    /// Sets query row `row` (`dk` values) and its causal limit: it attends to cells at
    /// positions up to `limit`.
    pub fn set_query(&mut self, row: usize, q: &[f32], limit: i32) {
        if self.q_dot_bytes > 0 {
            let b = self.q_dot_bytes;
            quant::quantize_row(self.k_type.vec_dot_type(), &q[..self.dk], &mut self.q_dot[row * b..(row + 1) * b]);
        } else if self.tiled {
            // the tiled kernel multiplies the query as it is (f32) with the widened keys
            self.q[row * self.dkp..row * self.dkp + self.dk].copy_from_slice(&q[..self.dk]);
        } else {
            for (d, &x) in self.q[row * self.dkp..row * self.dkp + self.dk].iter_mut().zip(q) {
                *d = f16_to_f32(f32_to_f16(x));
            }
        }
        self.limit[row] = limit;
    }

    /// Attention of query rows `0..n_rows` over `cells` (position, key row, value row), in
    /// blocks of 32. Each row takes the cells up to the first one past its limit; the caller
    /// guarantees that no later cell is within it (positions that never decrease, or a single
    /// limit that every cell is within). Results are read with [`TileScratch::output`].
    pub fn run<'a>(&mut self, n_rows: usize, scale: f32, mut cells: impl Iterator<Item = (i32, &'a [u8], &'a [u8])>) {
        assert!(n_rows <= self.max_rows);
        self.acc[..n_rows * self.dvp].iter_mut().for_each(|a| *a = 0.0);
        self.max[..n_rows].iter_mut().for_each(|m| *m = f32::NEG_INFINITY);
        self.sum[..n_rows].iter_mut().for_each(|s| *s = 0.0);
        self.open[..n_rows].iter_mut().for_each(|o| *o = true);
        let mut open = n_rows;
        while open > 0 {
            let n = self.widen_block(&mut cells);
            if n == 0 {
                break;
            }
            for row in 0..n_rows {
                if !self.open[row] {
                    continue;
                }
                let limit = self.limit[row];
                let m = self.pos[..n].iter().take_while(|&&p| p <= limit).count();
                if m < n {
                    self.open[row] = false;
                    open -= 1;
                }
                self.taken[row] = m;
                if m > 0 {
                    match self.accumulator {
                        Accumulator::F16 | Accumulator::F32Cells => self.weigh(row, m, scale),
                        Accumulator::F32 => self.weigh_block(row, m, scale),
                    }
                }
            }
            // the value rows into the accumulators, up to four rows that take as many cells at once
            let mut row = 0;
            while row < n_rows {
                let m = self.taken[row];
                let mut end = row + 1;
                while end < n_rows && end - row < 4 && self.taken[end] == m {
                    end += 1;
                }
                if m > 0 {
                    self.accumulate(row, end - row, m);
                }
                self.taken[row..end].iter_mut().for_each(|t| *t = 0);
                row = end;
            }
            if n < BLOCK {
                break;
            }
        }
    }

    /// Attention of query rows `0..n_rows` over `cells` (cell index in the cache's view,
    /// position, key row, value row) as upstream's tiled flash attention computes it for a
    /// micro-batch of 64 query rows per stream and more (`ggml_compute_forward_flash_attn_ext_tiled`,
    /// ops.cpp:9081 in b11312). The view's cells go in tiles of 64 by index (tile j: cells 64j ..
    /// 64j + 64), and per tile and row:
    /// - each score s = (q·k as one chain of fused multiply-adds over d ascending, from 0, the
    ///   query in f32 and the key widened from F16) · scale, −∞ for the cells the row does not
    ///   see (later positions, other sequences, empty cells: upstream's mask);
    /// - the tile's maximum raises the row's running maximum M (M_new = max(M, tile max)); when it
    ///   does, the accumulator and the sum are scaled by libm's expf(M − M_new);
    /// - the weights w = ggml_v_expf(s − M) (its AVX-512 vector exp) over the tile's 64 slots, the
    ///   sum gaining, in f64, the 16-slot groups' sums as `_mm512_reduce_add_ps` adds them
    ///   (`ggml_vec_soft_max_f32`), rounded to f32 once added;
    /// - acc[d] = fma(w_c, v_c[d], acc[d]) over the tile's cells in index order (its `simd_gemm`).
    ///
    /// A row's arithmetic depends only on its query and the cells (and their indices): the same
    /// in any tile of rows. Cells must come in ascending index order (a cell whose tile is not
    /// the current one starts the next tile). Results are read with [`TileScratch::output`] and
    /// [`TileScratch::output_with_sink`], as for [`TileScratch::run`].
    pub fn run_tiled<'a>(&mut self, n_rows: usize, scale: f32, mut cells: impl Iterator<Item = (usize, i32, &'a [u8], &'a [u8])>) {
        assert!(n_rows <= self.max_rows && self.tiled);
        self.acc[..n_rows * self.dvp].iter_mut().for_each(|a| *a = 0.0);
        self.max[..n_rows].iter_mut().for_each(|m| *m = f32::NEG_INFINITY);
        self.sum[..n_rows].iter_mut().for_each(|s| *s = 0.0);
        self.rescale[..n_rows].iter_mut().for_each(|r| *r = 0);
        let (dk, dv, dvp) = (self.dk, self.dv, self.dvp);
        let mut next = cells.next();
        while let Some((first, _, _, _)) = next {
            let tile = first / KV_TILE;
            let mut n = 0;
            while let Some((idx, pos, k, v)) = next {
                if idx / KV_TILE != tile || n == KV_TILE {
                    break;
                }
                self.ahead.cell(k, v);
                self.tslot[n] = idx % KV_TILE;
                self.tpos[n] = pos;
                widen_any(self.level, self.k_type, k, &mut self.krow[..dk]);
                for (d, &x) in self.krow[..dk].iter().enumerate() {
                    self.kt[d * KV_TILE + n] = x;
                }
                let at = n * dvp;
                if std::ptr::eq(v.as_ptr(), k.as_ptr()) && dv <= dk {
                    // MLA's values: the first dv of the key row
                    self.tvals[at..at + dv].copy_from_slice(&self.krow[..dv]);
                } else {
                    widen_any(self.level, self.v_type, v, &mut self.tvals[at..at + dv]);
                }
                n += 1;
                next = cells.next();
            }
            self.tile_step(n_rows, n, scale);
        }
    }

    /// Attention of query rows `0..n_rows` (one token's heads) over `cells` (cell index in the
    /// cache's view, position, key row, value row; ascending index) as upstream's split-KV decode
    /// kernel computes it (ops.cpp:9490–9520, `ggml_flash_attn_ext_reduce_partials` :9371) for a
    /// view of `n_view` cells and `n_chunks` threads: chunk j holds the cells of index
    /// j·⌈n_view / n_chunks⌉ up to the next chunk's; each chunk's softmax is the one-chunk kernel's
    /// ([`TileScratch::run`], with this tile's accumulator), the sink `sinks[row]` (when given) joins
    /// chunk 0's, and the chunks with a nonzero sum merge in order:
    /// M = max(M, M_j), acc = fma(acc, e^(M_old − M), acc_j · e^(M_j − M)), and the sum alike.
    /// Results are read with [`TileScratch::output`] (the sink is already in the sum).
    pub fn run_split<'a>(&mut self, n_rows: usize, scale: f32, cells: impl Iterator<Item = (usize, i32, &'a [u8], &'a [u8])>, n_view: usize, n_chunks: usize, sinks: Option<&[f32]>) {
        assert!(n_rows <= self.max_rows && self.can_split() && n_chunks > 0);
        let dvp = self.dvp;
        self.split_acc[..n_rows * dvp].iter_mut().for_each(|a| *a = 0.0);
        self.split_max[..n_rows].iter_mut().for_each(|m| *m = f32::NEG_INFINITY);
        self.split_sum[..n_rows].iter_mut().for_each(|s| *s = 0.0);
        let chunk = n_view.div_ceil(n_chunks);
        let mut cells = cells.peekable();
        for j in 0..n_chunks {
            let start = j * chunk;
            if start >= n_view {
                break;
            }
            let end = start + chunk;
            self.run(n_rows, scale, std::iter::from_fn(|| cells.next_if(|c| c.0 < end)).map(|(_, p, k, v)| (p, k, v)));
            for row in 0..n_rows {
                let acc = &mut self.acc[row * dvp..(row + 1) * dvp];
                let (mut m, mut s) = (self.max[row], self.sum[row]);
                if let (0, Some(sinks)) = (j, sinks) {
                    let sink = sinks[row];
                    let (mut ms, mut vs) = (1.0f32, 1.0f32);
                    if sink > m {
                        ms = (m - sink).exp();
                        m = sink;
                        acc.iter_mut().for_each(|a| *a *= ms);
                    } else {
                        vs = (sink - m).exp();
                    }
                    s = s.mul_add(ms, vs);
                }
                if s == 0.0 {
                    continue;
                }
                let m_old = self.split_max[row];
                let m_new = m_old.max(m);
                let (scale_old, scale_new) = ((m_old - m_new).exp(), (m - m_new).exp());
                // GCC contracts upstream's `VKQ_final*scale_old + VKQ_chunk*scale_new` into an FMA
                // over the first product (and the sum's likewise)
                rescale_add(self.level, &mut self.split_acc[row * dvp..(row + 1) * dvp], scale_old, acc, scale_new);
                self.split_sum[row] = self.split_sum[row].mul_add(scale_old, s * scale_new);
                self.split_max[row] = m_new;
            }
        }
        self.acc[..n_rows * dvp].copy_from_slice(&self.split_acc[..n_rows * dvp]);
        self.max[..n_rows].copy_from_slice(&self.split_max[..n_rows]);
        self.sum[..n_rows].copy_from_slice(&self.split_sum[..n_rows]);
    }

    /// One KV tile of [`TileScratch::run_tiled`] for rows `0..n_rows`: its `n` present cells
    /// are in `kt`, `tvals`, `tslot` and `tpos`.
    fn tile_step(&mut self, n_rows: usize, n: usize, scale: f32) {
        let ncols = n.next_multiple_of(16);
        for d in 0..self.dk {
            self.kt[d * KV_TILE + n..d * KV_TILE + ncols].iter_mut().for_each(|x| *x = 0.0);
        }
        tiled_scores(self.level, &self.q, self.dkp, n_rows, &self.kt, self.dk, ncols, &mut self.kq);
        // the usual tile: its cells fill slots 0..n in order
        let in_order = self.tslot[..n].iter().enumerate().all(|(c, &t)| t == c);
        for row in 0..n_rows {
            let limit = self.limit[row];
            let mut s = [f32::NEG_INFINITY; KV_TILE];
            let kq = &self.kq[row * KV_TILE..row * KV_TILE + n];
            let tile_max = if in_order {
                masked_scores(self.level, kq, &self.tpos[..n], limit, scale, &mut s)
            } else {
                for c in 0..n {
                    if self.tpos[c] <= limit {
                        s[self.tslot[c]] = kq[c] * scale;
                    }
                }
                s.iter().fold(f32::NEG_INFINITY, |m, &x| if x > m { x } else { m })
            };
            let w = &mut self.tw[row * KV_TILE..(row + 1) * KV_TILE];
            if tile_max == f32::NEG_INFINITY {
                w[..n].iter_mut().for_each(|x| *x = 0.0);
                continue;
            }
            let old = self.max[row];
            let new = old.max(tile_max);
            if new > old {
                let ms = (old - new).exp();
                self.acc[row * self.dvp..(row + 1) * self.dvp].iter_mut().for_each(|a| *a *= ms);
                self.sum[row] *= ms;
            }
            self.max[row] = new;
            v_expf_shifted(self.level, &mut s, new);
            let mut sum = 0f64;
            for g in s.chunks_exact(16) {
                sum += reduce_add_16(g) as f64;
            }
            self.sum[row] = (self.sum[row] as f64 + sum) as f32;
            if in_order {
                w[..n].copy_from_slice(&s[..n]);
            } else {
                for c in 0..n {
                    w[c] = s[self.tslot[c]];
                }
            }
        }
        // acc += w · V over the present cells in order, up to four rows and BLOCK cells a call
        let dvp = self.dvp;
        for c0 in (0..n).step_by(BLOCK) {
            let m = (n - c0).min(BLOCK);
            let v: [*const f32; BLOCK] = std::array::from_fn(|c| if c < m { self.tvals[(c0 + c) * dvp..].as_ptr() } else { std::ptr::null() });
            let mut row = 0;
            while row < n_rows {
                let r = (n_rows - row).min(4);
                let mut stage = [0f32; 4 * BLOCK];
                for i in 0..r {
                    let src = (row + i) * KV_TILE + c0;
                    stage[i * BLOCK..i * BLOCK + m].copy_from_slice(&self.tw[src..src + m]);
                }
                accumulate(self.level, Accumulator::F32Cells, &mut self.acc[row * dvp..(row + r) * dvp], dvp, &v[..m], &stage, &stage, &self.rescale[row..row + r]);
                row += r;
            }
        }
    }

    /// Row `row`'s result (`dv` values): the accumulated values over the softmax's sum.
    pub fn output(&self, row: usize, out: &mut [f32]) {
        let inv = if self.sum[row] == 0.0 { 0.0 } else { 1.0 / self.sum[row] };
        for (o, &a) in out[..self.dv].iter_mut().zip(&self.acc[row * self.dvp..]) {
            *o = a * inv;
        }
    }

    /// As [`TileScratch::output`] with an attention sink: the per-head logit `sink` joins the
    /// softmax's sum but adds no value, as ggml's flash attention applies it after the cells
    /// (ops.cpp:9040: the accumulator in f32 rescaled when the sink exceeds the maximum).
    pub fn output_with_sink(&self, row: usize, sink: f32, out: &mut [f32]) {
        let (m, s) = (self.max[row], self.sum[row]);
        let (ms, vs) = if sink > m { ((m - sink).exp(), 1.0) } else { (1.0, (sink - m).exp()) };
        // GCC contracts upstream's `S = S*ms + vs` (ops.cpp, its -ffp-contract=fast default)
        let sum = s.mul_add(ms, vs);
        let inv = if sum == 0.0 { 0.0 } else { 1.0 / sum };
        for (o, &a) in out[..self.dv].iter_mut().zip(&self.acc[row * self.dvp..]) {
            *o = (a * ms) * inv;
        }
    }

    /// Takes up to BLOCK cells, widening their keys (or keeping them as stored, for keys that
    /// are not F16) and values; returns how many.
    fn widen_block<'a>(&mut self, cells: &mut impl Iterator<Item = (i32, &'a [u8], &'a [u8])>) -> usize {
        let (dk, dv, dkp, dvp) = (self.dk, self.dv, self.dkp, self.dvp);
        let key_dot = self.k_bytes > 0;
        let mut n = 0;
        while n < BLOCK {
            let Some((pos, k, v)) = cells.next() else { break };
            self.ahead.cell(k, v);
            self.pos[n] = pos;
            if key_dot {
                let b = self.k_bytes;
                self.k_blk[n * b..(n + 1) * b].copy_from_slice(&k[..b]);
            } else {
                widen_any(self.level, self.k_type, k, &mut self.cells[n * dkp..n * dkp + dk]);
            }
            self.value_at[n] = if std::ptr::eq(v.as_ptr(), k.as_ptr()) && dv <= dk && !key_dot {
                n * dkp
            } else {
                // MLA's values are the first dv of the key row, also when it is quantized
                let at = BLOCK * dkp + n * dvp;
                widen_any(self.level, self.v_type, v, &mut self.cells[at..at + dv]);
                at
            };
            n += 1;
        }
        n
    }

    /// Row `row` takes in the block's first `m` cells, one at a time as ggml's flash attention
    /// does (`ggml_compute_forward_flash_attn_ext_f16_one_chunk`, ops.cpp:8843 in b11312): a
    /// cell whose score s exceeds the running maximum M scales the accumulator and the sum by
    /// e^(M − s) and becomes the maximum; every cell adds its value row times e^(s − M) (1 for
    /// a new maximum). Here the sum, the maximum and the cells' factors; the accumulator (F16,
    /// rounded at each of those steps) follows in [`TileScratch::accumulate`].
    fn weigh(&mut self, row: usize, m: usize, scale: f32) {
        let mut p = [0f32; BLOCK];
        self.scores(row, m, scale, &mut p);
        let ms = &mut self.rescale_by[row * BLOCK..row * BLOCK + m];
        let mut rescale = 0u32;
        let mut mx = self.max[row];
        for c in 0..m {
            let s = p[c];
            ms[c] = 1.0;
            if s > mx {
                ms[c] = (mx - s).exp();
                mx = s;
                rescale |= 1 << c;
            }
            p[c] = s - mx;
        }
        expf_libm(self.level, &mut p[..m]);
        let mut sum = self.sum[row];
        for c in 0..m {
            if rescale >> c & 1 == 1 {
                p[c] = 1.0;
            }
            sum = sum.mul_add(ms[c], p[c]);
        }
        self.sum[row] = sum;
        self.max[row] = mx;
        self.rescale[row] = rescale;
        self.weight[row * BLOCK..row * BLOCK + m].copy_from_slice(&p[..m]);
    }

    /// The f32 accumulator's steps for row `row` and the block's first `m` cells: one rescale of
    /// the sum and the accumulator when the block raises the maximum, then the block's
    /// exponentials against the new maximum (the cells' weights; no per-cell rescales).
    fn weigh_block(&mut self, row: usize, m: usize, scale: f32) {
        let mut p = [0f32; BLOCK];
        self.scores(row, m, scale, &mut p);
        let p = &mut p[..m];
        let block_max = p.iter().fold(f32::NEG_INFINITY, |a, &x| a.max(x));
        if block_max > self.max[row] {
            let ms = (self.max[row] - block_max).exp();
            self.acc[row * self.dvp..(row + 1) * self.dvp].iter_mut().for_each(|a| *a *= ms);
            self.sum[row] *= ms;
            self.max[row] = block_max;
        }
        exp_shifted(self.level, p, self.max[row]);
        for &x in p.iter() {
            self.sum[row] += x;
        }
        self.rescale[row] = 0;
        self.weight[row * BLOCK..row * BLOCK + m].copy_from_slice(p);
    }

    /// Rows `row..row + n` (n ≤ 4, each weighed over the block's first `m` cells) add those
    /// cells' value rows into their accumulators.
    fn accumulate(&mut self, row: usize, n: usize, m: usize) {
        let dvp = self.dvp;
        let v: [*const f32; BLOCK] = std::array::from_fn(|c| if c < m { self.cells[self.value_at[c]..self.value_at[c] + dvp].as_ptr() } else { std::ptr::null() });
        let accs = &mut self.acc[row * dvp..(row + n) * dvp];
        let w = &self.weight[row * BLOCK..(row + n) * BLOCK];
        let ms = &self.rescale_by[row * BLOCK..(row + n) * BLOCK];
        accumulate(self.level, self.accumulator, accs, dvp, &v[..m], w, ms, &self.rescale[row..row + n]);
    }

    /// p[c] = scale · q_row · k_c for the block's first `m` cells.
    fn scores(&self, row: usize, m: usize, scale: f32, p: &mut [f32; BLOCK]) {
        if self.k_bytes > 0 {
            // ggml: `kq_vec_dot(DK, &s, 0, k_data, 0, Q_q, 0, 1); s = s*scale`
            let (kb, qb) = (self.k_bytes, self.q_dot_bytes);
            let q = &self.q_dot[row * qb..(row + 1) * qb];
            let nb = self.dk / self.k_type.block_len();
            for (c, s) in p[..m].iter_mut().enumerate() {
                let k = &self.k_blk[c * kb..(c + 1) * kb];
                let dot = match self.kdot {
                    Some(f) => {
                        let mut out = 0f32;
                        // SAFETY: the kernel is the keys' type's at a level the CPU has; k holds
                        // nb blocks of it and q nb blocks of its vec_dot_type; one result.
                        unsafe { f(nb, k.as_ptr(), q.as_ptr(), 0, &mut out, 0) };
                        out
                    }
                    None => quant::vec_dot(self.k_type, self.dk, k, q),
                };
                *s = dot * scale;
            }
            return;
        }
        let q = &self.q[row * self.dkp..(row + 1) * self.dkp];
        let keys = &self.cells[..m * self.dkp];
        match self.level {
            #[cfg(target_arch = "x86_64")]
            Level::Avx512 => {
                // (straight into p: BLOCK is a multiple of 16, the slots past m are scratch)
                for c0 in (0..m).step_by(16) {
                    let s: &mut [f32; 16] = (&mut p[c0..c0 + 16]).try_into().expect("BLOCK is a multiple of 16");
                    // SAFETY: the AVX-512 level was detected; q holds dkp values and keys rows
                    // c0..m of dkp ≥ dk values.
                    unsafe { simd::attn::scores_512(q.as_ptr(), keys[c0 * self.dkp..].as_ptr(), self.dkp, (m - c0).min(16), self.dk, scale, s) };
                }
            }
            #[cfg(target_arch = "x86_64")]
            Level::Avx2 => {
                for c0 in (0..m).step_by(8) {
                    let s: &mut [f32; 8] = (&mut p[c0..c0 + 8]).try_into().expect("BLOCK is a multiple of 8");
                    // SAFETY: the AVX2/FMA level was detected; as above with multiples of 8.
                    unsafe { simd::attn::scores_256(q.as_ptr(), keys[c0 * self.dkp..].as_ptr(), self.dkp, (m - c0).min(8), self.dk, scale, s) };
                }
            }
            _ => {
                for (c, k) in keys.chunks_exact(self.dkp).enumerate() {
                    p[c] = dot_ggml(&q[..self.dk], &k[..self.dk]) * scale;
                }
            }
        }
    }
}

/// q·k summed as ggml's `ggml_vec_dot_f16` sums an F16 key against the F16-rounded query on
/// AVX-512 (vec.cpp, b11312; the order llama.cpp's goldens come from, kept at every level):
/// over the first `len & !63` elements four 16-lane accumulators, accumulator j taking the
/// products of elements 16j..16j + 16 of each 64 by fused multiply-adds; then (0 + 2) + (1 + 3)
/// lane-wise, the 16 lanes reduced as GCC's `_mm512_reduce_add_ps` does — lanes (j, j + 8),
/// (j, j + 4), (j, j + 2), (j, j + 1) added pairwise — and widened to f64; the remaining
/// products (exact in f32) added one by one in f64; rounded to f32.
pub fn dot_ggml(q: &[f32], k: &[f32]) -> f32 {
    let n = q.len().min(k.len());
    let np = n & !63;
    let mut acc = [[0f32; 16]; 4];
    for i in (0..np).step_by(64) {
        for (j, a) in acc.iter_mut().enumerate() {
            for (l, a) in a.iter_mut().enumerate() {
                let d = i + 16 * j + l;
                *a = k[d].mul_add(q[d], *a);
            }
        }
    }
    let lanes: [f32; 16] = std::array::from_fn(|l| (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]));
    let h: [f32; 8] = std::array::from_fn(|l| lanes[l] + lanes[l + 8]);
    let g: [f32; 4] = std::array::from_fn(|l| h[l] + h[l + 4]);
    let mut sum = ((g[0] + g[2]) + (g[1] + g[3])) as f64;
    for d in np..n {
        sum += (q[d] * k[d]) as f64;
    }
    sum as f32
}

/// out[r·64 + c] = Σ_d q_r[d] · kt[d·64 + c] for rows r < `rows` (q_r at `q[r·qstride..]`) and
/// columns c < `ncols` (a multiple of 16, at most 64): per element one chain of fused
/// multiply-adds over d ascending from 0, as upstream's `simd_gemm` computes its tiles'
/// scores (simd-gemm.h). The same bits at every level.
#[allow(clippy::too_many_arguments)]
fn tiled_scores(level: Level, q: &[f32], qstride: usize, rows: usize, kt: &[f32], dk: usize, ncols: usize, out: &mut [f32]) {
    assert!(ncols % 16 == 0 && ncols <= KV_TILE && kt.len() >= dk * KV_TILE && out.len() >= rows * KV_TILE);
    assert!(rows == 0 || q.len() >= (rows - 1) * qstride + dk);
    match level {
        #[cfg(target_arch = "x86_64")]
        Level::Avx512 => {
            // SAFETY: the AVX-512 level was detected; the asserts above cover every access.
            unsafe { simd::attn::tiled_scores_512(q.as_ptr(), qstride, rows, kt.as_ptr(), dk, ncols, out.as_mut_ptr()) }
        }
        #[cfg(target_arch = "x86_64")]
        Level::Avx2 => {
            // SAFETY: the AVX2/FMA level was detected; as above.
            unsafe { simd::attn::tiled_scores_256(q.as_ptr(), qstride, rows, kt.as_ptr(), dk, ncols, out.as_mut_ptr()) }
        }
        _ => {
            for r in 0..rows {
                for c in 0..ncols {
                    let mut acc = 0f32;
                    for d in 0..dk {
                        acc = q[r * qstride + d].mul_add(kt[d * KV_TILE + c], acc);
                    }
                    out[r * KV_TILE + c] = acc;
                }
            }
        }
    }
}

/// x[i] = ggml_v_expf(x[i] − shift) (ggml's AVX-512 vector exp, as `ggml_vec_soft_max_f32`
/// applies it), the same bits at every level.
fn v_expf_shifted(level: Level, x: &mut [f32; KV_TILE], shift: f32) {
    #[cfg(target_arch = "x86_64")]
    if level >= Level::Avx2 {
        // SAFETY: the AVX2/FMA level was detected.
        unsafe { simd::vmath::ggml_v_expf_shifted(x, shift) };
        return;
    }
    let _ = level;
    x.iter_mut().for_each(|v| *v = super::ggml_v_expf(*v - shift));
}

/// A tiled row's scores for a tile whose `n = kq.len()` cells fill slots 0..n: s[c] = kq[c] ·
/// scale where the cell's position is within `limit`, −∞ elsewhere (and past n); returns their
/// maximum. (Branch-free, so that the levels' builds vectorize it; a maximum is exact in any
/// order.)
fn masked_scores(level: Level, kq: &[f32], tpos: &[i32], limit: i32, scale: f32, s: &mut [f32; KV_TILE]) -> f32 {
    #[inline(always)]
    fn body(kq: &[f32], tpos: &[i32], limit: i32, scale: f32, s: &mut [f32; KV_TILE]) -> f32 {
        let n = kq.len();
        let mut m = [f32::NEG_INFINITY; 16];
        for c in 0..KV_TILE {
            let x = if c < n && tpos[c.min(n - 1)] <= limit { kq[c.min(n - 1)] * scale } else { f32::NEG_INFINITY };
            s[c] = x;
            let l = c % 16;
            m[l] = if x > m[l] { x } else { m[l] };
        }
        m.iter().fold(f32::NEG_INFINITY, |a, &x| if x > a { x } else { a })
    }
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f")]
        unsafe fn at_512(kq: &[f32], tpos: &[i32], limit: i32, scale: f32, s: &mut [f32; KV_TILE]) -> f32 {
            body(kq, tpos, limit, scale, s)
        }
        #[target_feature(enable = "avx2")]
        unsafe fn at_256(kq: &[f32], tpos: &[i32], limit: i32, scale: f32, s: &mut [f32; KV_TILE]) -> f32 {
            body(kq, tpos, limit, scale, s)
        }
        if kq.is_empty() {
            s.iter_mut().for_each(|x| *x = f32::NEG_INFINITY);
            return f32::NEG_INFINITY;
        }
        // SAFETY: the level's instructions were detected.
        if level >= Level::Avx512 {
            return unsafe { at_512(kq, tpos, limit, scale, s) };
        }
        if level >= Level::Avx2 {
            return unsafe { at_256(kq, tpos, limit, scale, s) };
        }
    }
    if kq.is_empty() {
        s.iter_mut().for_each(|x| *x = f32::NEG_INFINITY);
        return f32::NEG_INFINITY;
    }
    body(kq, tpos, limit, scale, s)
}

/// The sum of 16 values as GCC's `_mm512_reduce_add_ps` adds them: lanes (j, j + 8), then
/// (j, j + 4), then (0 + 2) + (1 + 3).
fn reduce_add_16(x: &[f32]) -> f32 {
    let h: [f32; 8] = std::array::from_fn(|l| x[l] + x[l + 8]);
    let g: [f32; 4] = std::array::from_fn(|l| h[l] + h[l + 4]);
    (g[0] + g[2]) + (g[1] + g[3])
}

/// Whether upstream's flash attention reads a cache of `t` as F16 (F16, and F32, which it casts
/// to F16 first).
fn is_f16_kind(t: GgmlType) -> bool {
    matches!(t, GgmlType::F16 | GgmlType::F32)
}

/// The first `dst.len()` values of a row of `t` as f32, as upstream's flash attention sees
/// them: F16 widened, F32 rounded to F16 (its cast), the others converted exactly.
fn widen_any(level: Level, t: GgmlType, src: &[u8], dst: &mut [f32]) {
    let n = dst.len();
    match t {
        GgmlType::F16 => widen(level, quant::f16_slice(&src[..2 * n]), dst),
        GgmlType::F32 => {
            for (d, b) in dst.iter_mut().zip(src.chunks_exact(4)) {
                *d = f16_to_f32(f32_to_f16(f32::from_le_bytes([b[0], b[1], b[2], b[3]])));
            }
        }
        _ => {
            let bytes = t.row_bytes(n).expect("checked at creation");
            quant::dequantize_row(t, &src[..bytes], dst);
        }
    }
}

/// F16 values widened to f32 with the kernels of `level` (the same bits at every level).
pub(crate) fn widen(level: Level, src: &[u16], dst: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if level >= Level::Avx2 {
        // SAFETY: the AVX2/F16C level was detected.
        unsafe { simd::attn::widen_f16(src, dst) };
        return;
    }
    let _ = level;
    for (d, &h) in dst.iter_mut().zip(src) {
        *d = f16_to_f32(h);
    }
}

/// x[i] = libm's expf(x[i]), bit for bit at every level (ggml's flash attention calls `expf`
/// for each cell's weight).
fn expf_libm(level: Level, x: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if level >= Level::Avx2 {
        // SAFETY: the AVX2/FMA/F16C level was detected.
        unsafe { simd::vmath::expf_libm(x) };
        return;
    }
    let _ = level;
    x.iter_mut().for_each(|v| *v = v.exp());
}

/// f[i] = fma(f[i], scale_f, a[i] · scale_a)
fn rescale_add(level: Level, f: &mut [f32], scale_f: f32, a: &[f32], scale_a: f32) {
    #[cfg(target_arch = "x86_64")]
    if level >= Level::Avx2 {
        // SAFETY: the AVX2/FMA/F16C level was detected.
        unsafe { simd::vmath::rescale_add(f, scale_f, a, scale_a) };
        return;
    }
    let _ = level;
    for (f, &a) in f.iter_mut().zip(a) {
        *f = f.mul_add(scale_f, a * scale_a);
    }
}

/// x[i] = e^(x[i] - shift)
fn exp_shifted(level: Level, x: &mut [f32], shift: f32) {
    #[cfg(target_arch = "x86_64")]
    if level >= Level::Avx2 {
        // SAFETY: the AVX2/FMA/F16C level was detected.
        unsafe { simd::vmath::exp_shifted(x, shift) };
        return;
    }
    let _ = level;
    x.iter_mut().for_each(|v| *v = (*v - shift).exp());
}

/// ggml's F16 accumulator, cell by cell (c ascending), for the rows of `accs` (each `dvp`
/// values; row i's weights, rescale factors and mask at `w[i·BLOCK..]`, `ms[i·BLOCK..]`,
/// `rescale[i]`): where bit c of the mask is set, acc = f16(acc · ms[c]); then acc =
/// f16(fma(v_c, w[c], acc)). Every level gives the same result (the roundings are per element).
/// With `Accumulator::F32` the same steps without the roundings.
#[allow(clippy::too_many_arguments)]
fn accumulate(level: Level, accumulator: Accumulator, accs: &mut [f32], dvp: usize, v: &[*const f32], w: &[f32], ms: &[f32], rescale: &[u32]) {
    let round = accumulator == Accumulator::F16;
    let n = rescale.len();
    let m = v.len();
    assert!(dvp % 16 == 0 && accs.len() == n * dvp && (1..=4).contains(&n) && m <= BLOCK && w.len() >= n * BLOCK && ms.len() >= n * BLOCK);
    let at = |i: usize| i * BLOCK..i * BLOCK + m;
    match level {
        #[cfg(target_arch = "x86_64")]
        Level::Avx512 | Level::Avx2 => {
            let base = accs.as_mut_ptr();
            macro_rules! call {
                ($r:literal) => {{
                    let acc: [*mut f32; $r] = std::array::from_fn(|i| base.wrapping_add(i * dvp));
                    let p: [&[f32]; $r] = std::array::from_fn(|i| &w[at(i)]);
                    let s: [&[f32]; $r] = std::array::from_fn(|i| &ms[at(i)]);
                    let masks: [u32; $r] = std::array::from_fn(|i| rescale[i]);
                    // SAFETY: the level was detected (AVX-512, or AVX2/FMA/F16C); each accumulator
                    // row and each value row (the caller's widened cells) holds dvp values, a
                    // multiple of 16; p and s hold m values per row.
                    unsafe {
                        match (level == Level::Avx512, round) {
                            (true, true) => simd::attn::accumulate_512::<$r, true>(acc, dvp, v, p, s, masks),
                            (true, false) => simd::attn::accumulate_512::<$r, false>(acc, dvp, v, p, s, masks),
                            (false, true) => simd::attn::accumulate_256::<$r, true>(acc, dvp, v, p, s, masks),
                            (false, false) => simd::attn::accumulate_256::<$r, false>(acc, dvp, v, p, s, masks),
                        }
                    }
                }};
            }
            match n {
                1 => call!(1),
                2 => call!(2),
                3 => call!(3),
                _ => call!(4),
            }
        }
        _ => {
            let r16 = |x: f32| if round { f16_to_f32(f32_to_f16(x)) } else { x };
            for (i, acc) in accs.chunks_exact_mut(dvp).enumerate() {
                for (c, &row) in v.iter().enumerate() {
                    if rescale[i] >> c & 1 == 1 {
                        acc.iter_mut().for_each(|a| *a = r16(*a * ms[i * BLOCK + c]));
                    }
                    // SAFETY: each value row holds dvp values (the caller's widened cells).
                    let row = unsafe { std::slice::from_raw_parts(row, dvp) };
                    for (a, &x) in acc.iter_mut().zip(row) {
                        *a = r16(x.mul_add(w[i * BLOCK + c], *a));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn levels() -> Vec<Level> {
        simd::tested_levels(&[Level::Scalar, Level::Avx2, Level::Avx512])
    }

    fn f16_rows(n: usize, d: usize, salt: usize) -> Vec<Vec<u16>> {
        (0..n).map(|j| (0..d).map(|i| f32_to_f16((((i + 3) * (j + salt)) as f32 * 0.37).sin() * 2.0)).collect()).collect()
    }

    fn query(d: usize, salt: f32) -> Vec<f32> {
        (0..d).map(|i| (i as f32 * 0.7 + salt).sin()).collect()
    }

    /// ggml_vec_dot_f16 on AVX-512 without F16 arithmetic (vec.cpp, b11312), written from its
    /// macros: GGML_F16_STEP 64 / EPR 16 → four __m512 sums, sum[j] = fma(x, y, sum[j]) over
    /// x + i + 16j; GGML_F16_VEC_REDUCE: sum[0] += sum[2], sum[1] += sum[3], sum[0] += sum[1],
    /// then GCC's _mm512_reduce_add_ps (upper 256 + lower, upper 128 + lower, [0]+[2] and
    /// [1]+[3], then their sum) into a double; leftovers `sumf += (double)(x[i]*y[i])`.
    fn ggml_vec_dot_f16(x: &[f32], y: &[f32]) -> f32 {
        let n = x.len();
        let np = n & !63;
        let mut sum = [[0f32; 16]; 4];
        let mut i = 0;
        while i < np {
            for j in 0..4 {
                for l in 0..16 {
                    sum[j][l] = x[i + j * 16 + l].mul_add(y[i + j * 16 + l], sum[j][l]);
                }
            }
            i += 64;
        }
        for l in 0..16 {
            sum[0][l] += sum[2][l];
            sum[1][l] += sum[3][l];
        }
        for l in 0..16 {
            sum[0][l] += sum[1][l];
        }
        let t3: Vec<f32> = (0..8).map(|l| sum[0][8 + l] + sum[0][l]).collect();
        let t6: Vec<f32> = (0..4).map(|l| t3[4 + l] + t3[l]).collect();
        let t8 = [t6[0] + t6[2], t6[1] + t6[3]];
        let mut sumf = (t8[0] + t8[1]) as f64;
        for i in np..n {
            sumf += (x[i] * y[i]) as f64;
        }
        sumf as f32
    }

    /// ggml's one-chunk flash attention (ops.cpp:8843, b11312) for one row over the first `m`
    /// cells, written from upstream's loop: Q to F16, the dot product with each F16 key as
    /// ggml_vec_dot_f16 sums it on AVX-512, one cell at a time with libm's expf and an F16
    /// accumulator.
    fn ggml_one_chunk(q: &[f32], keys: &[Vec<u16>], vals: &[Vec<u16>], m: usize, scale: f32) -> Vec<f64> {
        let h = |x: f32| f16_to_f32(f32_to_f16(x));
        let qh: Vec<f32> = q.iter().map(|&x| h(x)).collect();
        let (mut big_s, mut big_m) = (0f32, f32::NEG_INFINITY);
        let mut vkq = vec![0f32; vals[0].len()];
        for j in 0..m {
            let k: Vec<f32> = keys[j].iter().map(|&a| f16_to_f32(a)).collect();
            let s = ggml_vec_dot_f16(&k, &qh) * scale;
            let (mut ms, mut vs) = (1f32, 1f32);
            if s > big_m {
                let old = big_m;
                big_m = s;
                ms = (old - big_m).exp();
                vkq.iter_mut().for_each(|a| *a = h(*a * ms));
            } else {
                vs = (s - big_m).exp();
            }
            for (a, &v) in vkq.iter_mut().zip(&vals[j]) {
                *a = h(f16_to_f32(v).mul_add(vs, *a));
            }
            // GCC contracts `S = S*ms + vs` (its -ffp-contract=fast default): one rounding
            big_s = big_s.mul_add(ms, vs);
        }
        let inv = if big_s == 0.0 { 0.0 } else { 1.0 / big_s };
        vkq.iter().map(|&a| (a * inv) as f64).collect()
    }

    /// Softmax(scale · q·Kᵀ) V over the first `m` cells in f64 (q rounded to F16).
    fn exact(q: &[f32], keys: &[Vec<u16>], vals: &[Vec<u16>], m: usize, scale: f64) -> Vec<f64> {
        let qh: Vec<f64> = q.iter().map(|&x| f16_to_f32(f32_to_f16(x)) as f64).collect();
        let s: Vec<f64> = keys[..m].iter().map(|k| k.iter().zip(&qh).map(|(&a, b)| f16_to_f32(a) as f64 * b).sum::<f64>() * scale).collect();
        let mx = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let w: Vec<f64> = s.iter().map(|x| (x - mx).exp()).collect();
        let z: f64 = w.iter().sum();
        (0..vals[0].len()).map(|d| (0..m).map(|j| w[j] * f16_to_f32(vals[j][d]) as f64).sum::<f64>() / z).collect()
    }

    fn cells<'a>(pos: &'a [i32], keys: &'a [Vec<u16>], vals: &'a [Vec<u16>]) -> impl Iterator<Item = (i32, &'a [u8], &'a [u8])> {
        pos.iter().zip(keys.iter().zip(vals)).map(|(&p, (k, v))| (p, quant::f16_bytes(k), quant::f16_bytes(v)))
    }

    /// Every level follows ggml's kernel bit for bit (its AVX-512 build's summation order and
    /// glibc's expf), and is on average ten times closer to it than to the exact softmax.
    #[test]
    fn matches_ggml_one_chunk_at_every_level() {
        for level in levels() {
            for (dk, dv) in [(16, 16), (64, 64), (72, 72), (128, 128), (160, 128), (576, 512)] {
                let n = 75;
                let (keys, vals) = (f16_rows(n, dk, 1), f16_rows(n, dv, 5));
                let pos: Vec<i32> = (0..n as i32).collect();
                let mut s = TileScratch::at_level(level, 4, dk, dv, Accumulator::F16, GgmlType::F16, GgmlType::F16).unwrap();
                let limits = [74, 40, 31, 0];
                for (r, &l) in limits.iter().enumerate() {
                    s.set_query(r, &query(dk, r as f32), l);
                }
                let scale = 1.0 / (dk as f32).sqrt();
                s.run(4, scale, cells(&pos, &keys, &vals));
                let (mut to_ggml, mut to_exact) = (0f64, 0f64);
                for (r, &l) in limits.iter().enumerate() {
                    let mut out = vec![0.0; dv];
                    s.output(r, &mut out);
                    let want = ggml_one_chunk(&query(dk, r as f32), &keys, &vals, l as usize + 1, scale);
                    let ex = exact(&query(dk, r as f32), &keys, &vals, l as usize + 1, scale as f64);
                    for d in 0..dv {
                        assert!(out[d] as f64 == want[d], "{level:?} dk {dk} row {r} d {d}: {} vs ggml's {}", out[d], want[d]);
                        to_ggml += (out[d] as f64 - want[d]).abs();
                        to_exact += (out[d] as f64 - ex[d]).abs();
                    }
                }
                assert!(to_ggml == 0.0 && to_exact > 0.0, "{level:?} dk {dk}: {to_ggml} from ggml's loop, {to_exact} from the exact softmax");
            }
        }
    }

    /// The f32 accumulator follows the exact softmax within f32 rounding, at every level.
    #[test]
    fn f32_accumulator_matches_the_exact_softmax_at_every_level() {
        for level in levels() {
            for (dk, dv) in [(16, 16), (64, 64), (72, 72), (128, 128), (576, 512)] {
                let n = 75;
                let (keys, vals) = (f16_rows(n, dk, 1), f16_rows(n, dv, 5));
                let pos: Vec<i32> = (0..n as i32).collect();
                let mut s = TileScratch::at_level(level, 4, dk, dv, Accumulator::F32, GgmlType::F16, GgmlType::F16).unwrap();
                let limits = [74, 40, 31, 0];
                for (r, &l) in limits.iter().enumerate() {
                    s.set_query(r, &query(dk, r as f32), l);
                }
                let scale = 1.0 / (dk as f32).sqrt();
                s.run(4, scale, cells(&pos, &keys, &vals));
                for (r, &l) in limits.iter().enumerate() {
                    let mut out = vec![0.0; dv];
                    s.output(r, &mut out);
                    let want = exact(&query(dk, r as f32), &keys, &vals, l as usize + 1, scale as f64);
                    for d in 0..dv {
                        assert!((out[d] as f64 - want[d]).abs() < 2e-5 * (1.0 + want[d].abs()), "{level:?} dk {dk} row {r} d {d}: {} vs {}", out[d], want[d]);
                    }
                }
            }
        }
    }

    /// A row's result is the same bit for bit whether it runs in a tile of rows with other
    /// limits or alone over exactly its own cells (decode), and when the values are the keys'
    /// first elements (MLA) it is the same as with a copy of them.
    #[test]
    fn a_row_does_not_depend_on_its_tile() {
        for level in levels() {
            let (dk, dv, n) = (128, 128, 100);
            let (keys, vals) = (f16_rows(n, dk, 2), f16_rows(n, dv, 7));
            let pos: Vec<i32> = (0..n as i32).collect();
            let limits = [99, 64, 63, 31, 32, 5, 0, 70];
            let mut tile = TileScratch::at_level(level, limits.len(), dk, dv, Accumulator::F16, GgmlType::F16, GgmlType::F16).unwrap();
            for (r, &l) in limits.iter().enumerate() {
                tile.set_query(r, &query(dk, r as f32 * 0.3), l);
            }
            tile.run(limits.len(), 0.1, cells(&pos, &keys, &vals));
            let mut alone = TileScratch::at_level(level, 1, dk, dv, Accumulator::F16, GgmlType::F16, GgmlType::F16).unwrap();
            for (r, &l) in limits.iter().enumerate() {
                alone.set_query(0, &query(dk, r as f32 * 0.3), i32::MAX);
                alone.run(1, 0.1, cells(&pos[..=l as usize], &keys, &vals));
                let (mut a, mut b) = (vec![0.0; dv], vec![0.0; dv]);
                tile.output(r, &mut a);
                alone.output(0, &mut b);
                assert_eq!(a, b, "{level:?} row {r}");
            }
            let prefix: Vec<Vec<u16>> = keys.iter().map(|k| k[..96].to_vec()).collect();
            let mut shared = TileScratch::at_level(level, 1, dk, 96, Accumulator::F16, GgmlType::F16, GgmlType::F16).unwrap();
            let mut copied = TileScratch::at_level(level, 1, dk, 96, Accumulator::F16, GgmlType::F16, GgmlType::F16).unwrap();
            shared.set_query(0, &query(dk, 1.0), 99);
            copied.set_query(0, &query(dk, 1.0), 99);
            shared.run(1, 0.1, pos.iter().zip(&keys).map(|(&p, k)| (p, quant::f16_bytes(k), quant::f16_bytes(&k[..96]))));
            copied.run(1, 0.1, cells(&pos, &keys, &prefix));
            let (mut a, mut b) = (vec![0.0; 96], vec![0.0; 96]);
            shared.output(0, &mut a);
            copied.output(0, &mut b);
            assert_eq!(a, b, "{level:?} values inside the keys");
        }
    }

    /// A tile of tokens gives each token what it gets alone over its own cells, whether the
    /// cells' positions are in order (one pass) or not (token by token).
    #[test]
    fn tokens_of_a_tile_match_each_alone() {
        let (dk, dv, heads) = (64, 64, 3);
        let (keys, vals) = (f16_rows(40, dk, 3), f16_rows(40, dv, 9));
        let queries: Vec<Vec<f32>> = (0..4 * heads).map(|i| query(dk, i as f32 * 0.7)).collect();
        let pos = [30, 31, 35, 39];
        for positions in [(0..40).collect::<Vec<i32>>(), (0..40).map(|i| if i % 7 == 3 { 39 - i } else { i }).collect()] {
            let cells = |limit: i32| positions.iter().zip(keys.iter().zip(&vals)).enumerate().filter(move |(_, (&p, _))| p <= limit).map(|(i, (&p, (k, v)))| (i, p, quant::f16_bytes(k), quant::f16_bytes(v)));
            let mut tile = TileScratch::new(4 * heads, dk, dv, Accumulator::F16).unwrap();
            let mut got = vec![vec![0.0; dv]; 4 * heads];
            attend_tokens(&mut tile, 0..4, &pos, heads, 0.125, |t, j| &queries[t * heads + j], cells, |t, j, tile, row| tile.output(row, &mut got[t * heads + j]));
            let mut alone = TileScratch::new(1, dk, dv, Accumulator::F16).unwrap();
            for t in 0..4 {
                for j in 0..heads {
                    alone.set_query(0, &queries[t * heads + j], pos[t]);
                    alone.run(1, 0.125, cells(pos[t]).map(|(_, p, k, v)| (p, k, v)));
                    let mut want = vec![0.0; dv];
                    alone.output(0, &mut want);
                    assert_eq!(got[t * heads + j], want, "token {t} head {j}");
                }
            }
        }
    }

    #[test]
    fn every_level_accumulates_alike() {
        let levels = levels();
        for dvp in [16, 64, 128, 144, 512] {
            let rows: Vec<Vec<f32>> = (0..7).map(|j| (0..dvp).map(|d| ((d * 7 + j) as f32 * 0.01).sin()).collect()).collect();
            let refs: Vec<&[f32]> = rows.iter().map(|r| r.as_slice()).collect();
            let p = [0.5, 0.25, 1.0, 0.125, 2.0, 0.3, 0.7];
            let ms = [0.0, 1.0, 0.37, 1.0, 1.0, 0.9, 1.0];
            let results: Vec<Vec<f32>> = levels
                .iter()
                .map(|&l| {
                    // three rows: the second without rescales, the third with others
                    let mut acc: Vec<f32> = (0..3 * dvp).map(|d| f16_to_f32(f32_to_f16(d as f32 * 0.001))).collect();
                    let (mut w, mut s) = (vec![0f32; 3 * BLOCK], vec![1f32; 3 * BLOCK]);
                    for i in 0..3 {
                        for c in 0..7 {
                            w[i * BLOCK + c] = p[c] * (i + 1) as f32;
                            s[i * BLOCK + c] = ms[(c + i) % 7];
                        }
                    }
                    let v: Vec<*const f32> = refs.iter().map(|r| r.as_ptr()).collect();
                    accumulate(l, Accumulator::F16, &mut acc, dvp, &v, &w, &s, &[0b100101, 0, 0b10010]);
                    // and without the roundings, at every level alike too
                    let mut acc32: Vec<f32> = (0..3 * dvp).map(|d| d as f32 * 0.001).collect();
                    accumulate(l, Accumulator::F32, &mut acc32, dvp, &v, &w, &s, &[0b100101, 0, 0b10010]);
                    acc.extend(acc32);
                    acc
                })
                .collect();
            for r in &results[1..] {
                assert_eq!(r, &results[0], "dv {dvp}");
            }
            assert!(results[0][..3 * dvp].iter().all(|&a| f16_to_f32(f32_to_f16(a)) == a), "the accumulator holds F16 values");
            assert!(results[0][3 * dvp..].iter().any(|&a| f16_to_f32(f32_to_f16(a)) != a), "the f32 accumulator is not rounded");
        }
    }

    /// upstream's tiled flash attention (ops.cpp:9081, b11312) for one query row over a view of
    /// cells (`None`: a cell the row does not see), written from its loop over the whole view in
    /// tiles of 64: the tile skipped when fully masked, the scores by `simd_gemm` (fma chains
    /// from 0, the query in f32), scaled, the mask added (padding −∞), the row's max and
    /// rescale, `ggml_vec_soft_max_f32` (AVX-512: 16 at a time, `_mm512_reduce_add_ps` into an
    /// f64 sum), the values by `simd_gemm` over all 64 slots, the sink, then 1/S.
    fn ggml_tiled(q: &[f32], view: &[Option<(Vec<u16>, Vec<u16>)>], dv: usize, scale: f32, sink: Option<f32>) -> Vec<f32> {
        let (mut big_s, mut big_m) = (0f32, f32::NEG_INFINITY);
        let mut vkq = vec![0f32; dv];
        let mut v32 = vec![vec![0f32; dv]; 64];
        for ic in (0..view.len()).step_by(64) {
            let kv_tile = (view.len() - ic).min(64);
            let mut mask = [f32::NEG_INFINITY; 64];
            for tk in 0..kv_tile {
                if view[ic + tk].is_some() {
                    mask[tk] = 0.0;
                }
            }
            if mask.iter().all(|&m| m == f32::NEG_INFINITY) {
                continue;
            }
            let mut kq = [0f32; 64];
            for tk in 0..kv_tile {
                // a masked cell's key is whatever the cache holds: its score is masked anyway
                let k: Vec<f32> = view[ic + tk].as_ref().map_or(vec![0.5; q.len()], |(k, _)| k.iter().map(|&x| f16_to_f32(x)).collect());
                let mut acc = 0f32;
                for d in 0..q.len() {
                    acc = k[d].mul_add(q[d], acc);
                }
                kq[tk] = acc;
            }
            for x in kq.iter_mut() {
                *x *= scale;
            }
            for tk in kv_tile..64 {
                kq[tk] = f32::NEG_INFINITY;
            }
            for tk in 0..64 {
                kq[tk] += mask[tk];
            }
            let mut tile_max = f32::NEG_INFINITY;
            for &x in &kq {
                tile_max = if tile_max > x { tile_max } else { x };
            }
            if tile_max == f32::NEG_INFINITY {
                continue;
            }
            let m_new = big_m.max(tile_max);
            if m_new > big_m {
                let ms = (big_m - m_new).exp();
                vkq.iter_mut().for_each(|a| *a *= ms);
                big_s *= ms;
            }
            big_m = m_new;
            let mut sum = 0f64;
            for g in 0..4 {
                let val: Vec<f32> = (0..16).map(|l| crate::kernels::ggml_v_expf(kq[16 * g + l] - m_new)).collect();
                kq[16 * g..16 * g + 16].copy_from_slice(&val);
                let t3: Vec<f32> = (0..8).map(|l| val[8 + l] + val[l]).collect();
                let t6: Vec<f32> = (0..4).map(|l| t3[4 + l] + t3[l]).collect();
                sum += ((t6[0] + t6[2]) + (t6[1] + t6[3])) as f64;
            }
            big_s = (big_s as f64 + sum) as f32;
            for tk in 0..kv_tile {
                if let Some((_, v)) = &view[ic + tk] {
                    v32[tk] = v.iter().map(|&x| f16_to_f32(x)).collect();
                }
            }
            for d in 0..dv {
                let mut acc = vkq[d];
                for tk in 0..64 {
                    acc = v32[tk][d].mul_add(kq[tk], acc);
                }
                vkq[d] = acc;
            }
        }
        if let Some(s) = sink {
            let (mut ms, mut vs) = (1f32, 1f32);
            if s > big_m {
                ms = (big_m - s).exp();
                vkq.iter_mut().for_each(|a| *a *= ms);
            } else {
                vs = (s - big_m).exp();
            }
            big_s = big_s.mul_add(ms, vs);
        }
        let inv = if big_s == 0.0 { 0.0 } else { 1.0 / big_s };
        vkq.iter().map(|&a| a * inv).collect()
    }

    /// The tiled kernel equals upstream's tiled loop bit for bit at every level: rows of
    /// different limits in one tile, cells missing from the view (other sequences, empty
    /// cells) and a last tile that is not full, the values inside the keys (MLA), a sink.
    #[test]
    fn tiled_matches_ggml_tiled_at_every_level() {
        for level in levels() {
            for (dk, dv, mla) in [(64, 64, false), (72, 72, false), (128, 128, false), (576, 512, true)] {
                let n_view = 150;
                let (keys, vals) = (f16_rows(n_view, dk, 3), f16_rows(n_view, dv, 11));
                // cells 20..30 and every 7th are another sequence's; positions follow the index
                let present = |i: usize| !(20..30).contains(&i) && i % 7 != 5;
                let limits = [149, 140, 127, 64, 63, 31, 3, 0, 100];
                let rows = limits.len();
                let mut s = TileScratch::at_level(level, rows, dk, dv, Accumulator::F16, GgmlType::F16, GgmlType::F16).unwrap();
                s.set_tiled(true);
                assert!(s.is_tiled());
                for (r, &l) in limits.iter().enumerate() {
                    s.set_query(r, &query(dk, r as f32 * 0.4), l);
                }
                let scale = 1.0 / (dk as f32).sqrt();
                let cells = (0..n_view).filter(|&i| present(i)).map(|i| {
                    let k = quant::f16_bytes(&keys[i]);
                    (i, i as i32, k, if mla { &k[..2 * dv] } else { quant::f16_bytes(&vals[i]) })
                });
                s.run_tiled(rows, scale, cells);
                for (r, &l) in limits.iter().enumerate() {
                    let view: Vec<Option<(Vec<u16>, Vec<u16>)>> = (0..n_view)
                        .map(|i| (present(i) && i as i32 <= l).then(|| (keys[i].clone(), if mla { keys[i][..dv].to_vec() } else { vals[i].clone() })))
                        .collect();
                    let want = ggml_tiled(&query(dk, r as f32 * 0.4), &view, dv, scale, None);
                    let mut out = vec![0.0; dv];
                    s.output(r, &mut out);
                    assert_eq!(out, want, "{level:?} dk {dk} row {r}");
                    let sink = if r % 2 == 0 { 9.0 } else { -1.0 };
                    let want = ggml_tiled(&query(dk, r as f32 * 0.4), &view, dv, scale, Some(sink));
                    s.output_with_sink(r, sink, &mut out);
                    assert_eq!(out, want, "{level:?} dk {dk} row {r} sink {sink}");
                }
            }
        }
    }

    /// The tiled kernel is not the one-chunk kernel: upstream's two kernels give different
    /// bits (the reason a micro-batch of 64 rows and more needs its own).
    #[test]
    fn tiled_differs_from_one_chunk() {
        let (dk, dv, n) = (128, 128, 100);
        let (keys, vals) = (f16_rows(n, dk, 2), f16_rows(n, dv, 7));
        let mut a = TileScratch::new(1, dk, dv, Accumulator::F16).unwrap();
        let mut b = TileScratch::new(1, dk, dv, Accumulator::F16).unwrap();
        b.set_tiled(true);
        a.set_query(0, &query(dk, 0.3), 99);
        b.set_query(0, &query(dk, 0.3), 99);
        let pos: Vec<i32> = (0..n as i32).collect();
        a.run(1, 0.1, cells(&pos, &keys, &vals));
        b.run_tiled(1, 0.1, cells(&pos, &keys, &vals).enumerate().map(|(i, (p, k, v))| (i, p, k, v)));
        let (mut x, mut y) = (vec![0.0; dv], vec![0.0; dv]);
        a.output(0, &mut x);
        b.output(0, &mut y);
        assert_ne!(x, y);
        let mut q8 = TileScratch::with_types(1, dk, dv, Accumulator::F16, GgmlType::Q8_0, GgmlType::Q8_0).unwrap();
        q8.set_tiled(true);
        assert!(!q8.is_tiled(), "a quantized cache keeps the one-chunk kernel, as upstream");
    }

    /// Upstream's own flash attention (`ggml_flash_attn_ext` of b11312's CPU backend on an
    /// AVX-512 Zen 4, `tests/data/upstream_ops/fa_dump.c`): 2 query heads over one F16 K/V head
    /// of 200 cells, some another sequence's, each row seeing the cells up to 120 + its token.
    /// 70 rows take its tiled kernel (with and without sinks), their first 40 alone its
    /// one-chunk kernel; every level gives its bits.
    #[test]
    fn upstream_flash_attention_bits_at_every_level() {
        use crate::quant::test_util::upstream_op;
        let (dk, dv, h, nkv) = (64, 64, 2, 200);
        let bytes = |name: &str| std::fs::read(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/upstream_ops").join(name)).unwrap();
        let q = upstream_op("fa_q.f32");
        let (k, v) = (bytes("fa_k.f16"), bytes("fa_v.f16"));
        let n_all = q.len() / (h * dk);
        let absent = |c: usize| c % 9 == 4 || (100..110).contains(&c);
        let cells = || (0..nkv).filter(|&c| !absent(c)).map(|c| (c, c as i32, &k[c * dk * 2..(c + 1) * dk * 2], &v[c * dv * 2..(c + 1) * dv * 2]));
        for (file, n, sinks) in [("fa_tiled_out.f32", 70, false), ("fa_tiled_sinks_out.f32", 70, true), ("fa_one_chunk_out.f32", 40, false)] {
            let want = upstream_op(file);
            assert_eq!(want.len(), n * h * dv);
            for level in levels() {
                let mut tile = TileScratch::at_level(level, n, dk, dv, Accumulator::F16, GgmlType::F16, GgmlType::F16).unwrap();
                tile.set_tiled(n >= TILED_FROM_ROWS);
                for head in 0..h {
                    for t in 0..n {
                        tile.set_query(t, &q[(head * n_all + t) * dk..(head * n_all + t + 1) * dk], 120 + t as i32);
                    }
                    if tile.is_tiled() {
                        tile.run_tiled(n, 1.0 / (dk as f32).sqrt(), cells());
                    } else {
                        tile.run(n, 1.0 / (dk as f32).sqrt(), cells().map(|(_, p, k, v)| (p, k, v)));
                    }
                    let sink = [0.5f32, -2.0][head];
                    for t in 0..n {
                        let mut out = vec![0f32; dv];
                        if sinks {
                            tile.output_with_sink(t, sink, &mut out);
                        } else {
                            tile.output(t, &mut out);
                        }
                        let at = (t * h + head) * dv;
                        assert_eq!(out, want[at..at + dv], "{level:?} {file} head {head} token {t}");
                    }
                }
            }
        }
    }

    /// ggml's split-KV decode kernel on one query row per head over 700 cells (some absent),
    /// with 2 and 3 threads, with and without sinks (`fa_dump.c`): every level gives its bits, and
    /// the one-chunk kernel over the same cells would not.
    #[test]
    fn upstream_split_kv_decode_bits_at_every_level() {
        use crate::quant::test_util::upstream_op;
        let (dk, dv, h, nkv) = (64, 64, 2, 700);
        let bytes = |name: &str| std::fs::read(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/upstream_ops").join(name)).unwrap();
        let q = upstream_op("fa_decode_q.f32");
        let (k, v) = (bytes("fa_decode_k.f16"), bytes("fa_decode_v.f16"));
        let absent = |c: usize| c % 9 == 4 || (300..340).contains(&c) || c > 650;
        let cells = || (0..nkv).filter(|&c| !absent(c)).map(|c| (c, c as i32, &k[c * dk * 2..(c + 1) * dk * 2], &v[c * dv * 2..(c + 1) * dv * 2]));
        let sinks = [0.5f32, -2.0];
        let scale = 1.0 / (dk as f32).sqrt();
        for (file, nth, with_sinks) in [("fa_split2_out.f32", 2, false), ("fa_split2_sinks_out.f32", 2, true), ("fa_split3_sinks_out.f32", 3, true)] {
            let want = upstream_op(file);
            assert_eq!(want.len(), h * dv);
            for level in levels() {
                let mut tile = TileScratch::at_level(level, h, dk, dv, Accumulator::F16, GgmlType::F16, GgmlType::F16).unwrap();
                for head in 0..h {
                    tile.set_query(head, &q[head * dk..(head + 1) * dk], nkv as i32);
                }
                tile.run_split(h, scale, cells(), nkv, nth, with_sinks.then_some(&sinks[..]));
                let mut out = vec![0f32; dv];
                for head in 0..h {
                    tile.output(head, &mut out);
                    assert_eq!(out, want[head * dv..(head + 1) * dv], "{level:?} {file} head {head}");
                }
                // one chunk over the same cells gives other bits
                tile.run(h, scale, cells().map(|(_, p, k, v)| (p, k, v)));
                let mut one = vec![0f32; dv];
                let differ = (0..h).any(|head| {
                    if with_sinks {
                        tile.output_with_sink(head, sinks[head], &mut one);
                    } else {
                        tile.output(head, &mut one);
                    }
                    one != want[head * dv..(head + 1) * dv]
                });
                assert!(differ, "{level:?} {file}: the one-chunk kernel gives the split kernel's bits");
            }
        }
    }

    #[test]
    fn tiles_are_runs_of_one_sequence() {
        let mut starts = [0; 9];
        assert_eq!(split_tiles(&[0, 0, 0, 0, 0, 1, 1, 0], 3, &mut starts), 4);
        assert_eq!(starts[..5], [0, 3, 5, 7, 8]);
        assert_eq!(split_tiles(&[], 3, &mut starts), 0);
        assert_eq!(starts[0], 0);
        assert_eq!(tile_tokens(6), 10);
        assert_eq!(tile_tokens(128), 1);
    }

    /// ggml's one-chunk flash attention over a cache of other types (ops.cpp:8843): the query
    /// converted to the keys' `vec_dot_type` and multiplied by their `vec_dot` (keys that are
    /// not F16), the values converted to f32 and summed cell by cell in f32 (values that are not
    /// F16) or in F16; F32 rows cast to F16 first. Written from upstream's loop with the scalar
    /// references (`quant::vec_dot`, which equal ggml's x86 kernels bit for bit).
    fn ggml_one_chunk_typed(q: &[f32], keys: &[Vec<u8>], vals: &[Vec<u8>], kt: GgmlType, vt: GgmlType, dk: usize, dv: usize, m: usize, scale: f32) -> Vec<f32> {
        let h = |x: f32| f16_to_f32(f32_to_f16(x));
        let as_f32 = |t: GgmlType, b: &[u8], n: usize| -> Vec<f32> {
            let mut y = vec![0f32; n];
            quant::dequantize_row(t, &b[..t.row_bytes(n).unwrap()], &mut y);
            if t == GgmlType::F32 {
                y.iter_mut().for_each(|x| *x = h(*x));
            }
            y
        };
        let f16_key = is_f16_kind(kt);
        let qh: Vec<f32> = q.iter().map(|&x| h(x)).collect();
        let mut qd = vec![0u8; kt.vec_dot_type().row_bytes(dk).unwrap()];
        if !f16_key {
            quant::quantize_row(kt.vec_dot_type(), q, &mut qd);
        }
        let f16_acc = is_f16_kind(vt);
        let (mut big_s, mut big_m) = (0f32, f32::NEG_INFINITY);
        let mut vkq = vec![0f32; dv];
        for j in 0..m {
            let s = if f16_key { ggml_vec_dot_f16(&as_f32(kt, &keys[j], dk), &qh) } else { quant::vec_dot(kt, dk, &keys[j][..kt.row_bytes(dk).unwrap()], &qd) } * scale;
            let r = |x: f32| if f16_acc { h(x) } else { x };
            let (mut ms, mut vs) = (1f32, 1f32);
            if s > big_m {
                let old = big_m;
                big_m = s;
                ms = (old - big_m).exp();
                vkq.iter_mut().for_each(|a| *a = r(*a * ms));
            } else {
                vs = (s - big_m).exp();
            }
            for (a, &v) in vkq.iter_mut().zip(&as_f32(vt, &vals[j], dv)) {
                *a = r(v.mul_add(vs, *a));
            }
            big_s = big_s.mul_add(ms, vs);
        }
        let inv = if big_s == 0.0 { 0.0 } else { 1.0 / big_s };
        vkq.iter().map(|&a| a * inv).collect()
    }

    /// Every cache type and pairing (and MLA's values inside quantized keys) at every level
    /// equals upstream's loop bit for bit.
    #[test]
    fn cache_types_match_ggml_one_chunk_at_every_level() {
        use GgmlType::*;
        let types = [F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL];
        let rows = |t: GgmlType, n: usize, d: usize, salt: usize| -> Vec<Vec<u8>> {
            (0..n)
                .map(|j| {
                    let x: Vec<f32> = (0..d).map(|i| (((i + 3) * (j + salt)) as f32 * 0.37).sin() * 2.0).collect();
                    let mut b = vec![0u8; t.row_bytes(d).unwrap()];
                    match t {
                        F32 | F16 | BF16 | Q8_0 => quant::quantize_row(t, &x, &mut b),
                        _ => quant::quantize_row_ref(t, &x, &mut b),
                    }
                    b
                })
                .collect()
        };
        for level in levels() {
            for (kt, vt) in types.iter().map(|&t| (t, t)).chain([(Q8_0, F16), (F16, Q4_0), (Q4_1, IQ4_NL), (BF16, Q5_1)]) {
                // F16 asked; a tile over values that are not F16 sums them in f32 (F32Cells)
                let acc = Accumulator::F16;
                let (dk, dv, n) = (128, 128, 45);
                let (keys, vals) = (rows(kt, n, dk, 1), rows(vt, n, dv, 5));
                let pos: Vec<i32> = (0..n as i32).collect();
                let mut s = TileScratch::at_level(level, 3, dk, dv, acc, kt, vt).unwrap();
                let limits = [44, 33, 0];
                for (r, &l) in limits.iter().enumerate() {
                    s.set_query(r, &query(dk, r as f32), l);
                }
                let scale = 1.0 / (dk as f32).sqrt();
                s.run(3, scale, pos.iter().zip(keys.iter().zip(&vals)).map(|(&p, (k, v))| (p, k.as_slice(), v.as_slice())));
                for (r, &l) in limits.iter().enumerate() {
                    let mut out = vec![0.0; dv];
                    s.output(r, &mut out);
                    let want = ggml_one_chunk_typed(&query(dk, r as f32), &keys, &vals, kt, vt, dk, dv, l as usize + 1, scale);
                    assert_eq!(out, want, "{level:?} {}/{} row {r}", kt.name(), vt.name());
                }
                // MLA: values are the first dv of the key rows
                if kt == vt {
                    let dv = 96;
                    let mut s = TileScratch::at_level(level, 1, dk, dv, acc, kt, vt).unwrap();
                    s.set_query(0, &query(dk, 0.5), 44);
                    s.run(1, 0.1, pos.iter().zip(&keys).map(|(&p, k)| (p, k.as_slice(), &k[..])));
                    let mut out = vec![0.0; dv];
                    s.output(0, &mut out);
                    let want = ggml_one_chunk_typed(&query(dk, 0.5), &keys, &keys, kt, vt, dk, dv, 45, 0.1);
                    assert_eq!(out, want, "{level:?} MLA {}", kt.name());
                }
            }
        }
    }
}
