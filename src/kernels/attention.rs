//! Causal attention of a tile of query rows over the cached keys and values (F16) they share,
//! with an online softmax as ggml's flash-attention kernel does (Q rounded to F16 for the K dot
//! product, scores and the running V sum in f32), taken a block of cells at a time: the
//! block's keys and values are widened to f32 once for every query row of the tile, then per
//! row the block's scores, one rescale of the running sum when the block raises the maximum,
//! the block's exponentials together, and its values added into the row's accumulator.
//!
//! A tile is the query heads that share a K/V head (GQA, MLA) for one or several consecutive
//! tokens of a sequence; each row stops at its own causal limit. A row's arithmetic depends
//! only on its own query and the cells it attends to, so it gets the same result bit for bit
//! whichever tile it is in: a prefill tile of many tokens, or decode alone.

use super::simd::{self, Level};
use crate::quant::{f16_to_f32, f32_to_f16};
use crate::sys::alloc::try_zeroed;

/// Cells per block of the online softmax.
const BLOCK: usize = 32;

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
/// sequence's cells up to position `limit` in stream order. When their positions never decrease
/// the whole tile goes through the cells once, each row taking a prefix; else each token goes
/// alone over its own cells. `output(t, j, result)` receives each row's `dv` values.
#[allow(clippy::too_many_arguments)]
pub fn attend_tokens<'a, I: Iterator<Item = (i32, &'a [u16], &'a [u16])>>(
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
    let together = tokens.len() == 1 || cells(limit_of(&tokens)).map(|(p, _, _)| p).is_sorted();
    let runs = if together { 1 } else { tokens.len() };
    for run in 0..runs {
        let run_tokens = if together { tokens.clone() } else { tokens.start + run..tokens.start + run + 1 };
        for (k, t) in run_tokens.clone().enumerate() {
            for j in 0..rows_per_token {
                tile.set_query(k * rows_per_token + j, query(t, j), pos[t]);
            }
        }
        tile.run(run_tokens.len() * rows_per_token, scale, cells(limit_of(&run_tokens)));
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
pub struct TileScratch {
    level: Level,
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
    pos: [i32; BLOCK],
    /// where each cell's value row starts in `cells` (its key row when the values are the
    /// keys' first dv elements, as in MLA)
    value_at: [usize; BLOCK],
}

impl TileScratch {
    pub fn new(max_rows: usize, dk: usize, dv: usize) -> Result<TileScratch, String> {
        Self::at_level(simd::level(), max_rows, dk, dv)
    }

    /// As [`TileScratch::new`] with the kernels of `level` (which the CPU must support).
    pub(crate) fn at_level(level: Level, max_rows: usize, dk: usize, dv: usize) -> Result<TileScratch, String> {
        let (dkp, dvp) = (dk.next_multiple_of(16), dv.next_multiple_of(16));
        Ok(TileScratch {
            level,
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
            pos: [0; BLOCK],
            value_at: [0; BLOCK],
        })
    }

    /// Sets query row `row` (`dk` values) and its causal limit: it attends to cells at
    /// positions up to `limit`.
    pub fn set_query(&mut self, row: usize, q: &[f32], limit: i32) {
        for (d, &x) in self.q[row * self.dkp..row * self.dkp + self.dk].iter_mut().zip(q) {
            *d = f16_to_f32(f32_to_f16(x));
        }
        self.limit[row] = limit;
    }

    /// Attention of query rows `0..n_rows` over `cells` (position, key row, value row), in
    /// blocks of 32. Each row takes the cells up to the first one past its limit; the caller
    /// guarantees that no later cell is within it (positions that never decrease, or a single
    /// limit that every cell is within). Results are read with [`TileScratch::output`].
    pub fn run<'a>(&mut self, n_rows: usize, scale: f32, mut cells: impl Iterator<Item = (i32, &'a [u16], &'a [u16])>) {
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
                if m > 0 {
                    self.absorb(row, m, scale);
                }
            }
            if n < BLOCK {
                break;
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

    /// Takes up to BLOCK cells, widening their keys and values; returns how many.
    fn widen_block<'a>(&mut self, cells: &mut impl Iterator<Item = (i32, &'a [u16], &'a [u16])>) -> usize {
        let (dk, dv, dkp, dvp) = (self.dk, self.dv, self.dkp, self.dvp);
        let mut n = 0;
        while n < BLOCK {
            let Some((pos, k, v)) = cells.next() else { break };
            self.pos[n] = pos;
            widen(self.level, &k[..dk], &mut self.cells[n * dkp..n * dkp + dk]);
            self.value_at[n] = if std::ptr::eq(v.as_ptr(), k.as_ptr()) && dv <= dk {
                n * dkp
            } else {
                let at = BLOCK * dkp + n * dvp;
                widen(self.level, &v[..dv], &mut self.cells[at..at + dv]);
                at
            };
            n += 1;
        }
        n
    }

    /// Row `row` takes in the block's first `m` cells.
    fn absorb(&mut self, row: usize, m: usize, scale: f32) {
        let mut p = [0f32; BLOCK];
        self.scores(row, m, scale, &mut p);
        let p = &mut p[..m];
        let block_max = p.iter().fold(f32::NEG_INFINITY, |a, &x| a.max(x));
        let acc = &mut self.acc[row * self.dvp..(row + 1) * self.dvp];
        if block_max > self.max[row] {
            let ms = (self.max[row] - block_max).exp();
            acc.iter_mut().for_each(|a| *a *= ms);
            self.sum[row] *= ms;
            self.max[row] = block_max;
        }
        exp_shifted(self.level, p, self.max[row]);
        for &x in p.iter() {
            self.sum[row] += x;
        }
        let rows: [&[f32]; BLOCK] = std::array::from_fn(|c| if c < m { &self.cells[self.value_at[c]..self.value_at[c] + self.dvp] } else { &[] });
        accumulate(self.level, acc, &rows[..m], p);
    }

    /// p[c] = scale · q_row · k_c for the block's first `m` cells.
    fn scores(&self, row: usize, m: usize, scale: f32, p: &mut [f32; BLOCK]) {
        let q = &self.q[row * self.dkp..(row + 1) * self.dkp];
        let keys = &self.cells[..m * self.dkp];
        match self.level {
            #[cfg(target_arch = "x86_64")]
            Level::Avx512 => {
                for c0 in (0..m).step_by(16) {
                    let mut s = [0f32; 16];
                    // SAFETY: the AVX-512 level was detected; q holds dkp values and keys rows
                    // c0..m of dkp (a multiple of 16).
                    unsafe { simd::attn::scores_512(q.as_ptr(), keys[c0 * self.dkp..].as_ptr(), self.dkp, (m - c0).min(16), self.dkp, scale, &mut s) };
                    p[c0..(c0 + 16).min(m)].copy_from_slice(&s[..(m - c0).min(16)]);
                }
            }
            #[cfg(target_arch = "x86_64")]
            Level::Avx2 => {
                for c0 in (0..m).step_by(8) {
                    let mut s = [0f32; 8];
                    // SAFETY: the AVX2/FMA level was detected; as above with multiples of 8.
                    unsafe { simd::attn::scores_256(q.as_ptr(), keys[c0 * self.dkp..].as_ptr(), self.dkp, (m - c0).min(8), self.dkp, scale, &mut s) };
                    p[c0..(c0 + 8).min(m)].copy_from_slice(&s[..(m - c0).min(8)]);
                }
            }
            _ => {
                for (c, k) in keys.chunks_exact(self.dkp).enumerate() {
                    p[c] = q.iter().zip(k).fold(0.0, |s, (&x, &y)| s + x * y) * scale;
                }
            }
        }
    }
}

fn widen(level: Level, src: &[u16], dst: &mut [f32]) {
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

/// acc[d] += Σ_c p[c] · v_c[d], c ascending, one fused multiply-add per term (every level
/// gives the same result).
fn accumulate(level: Level, acc: &mut [f32], v: &[&[f32]], p: &[f32]) {
    let dvp = acc.len();
    assert!(v.iter().all(|row| row.len() >= dvp) && p.len() >= v.len());
    let rows: [*const f32; BLOCK] = std::array::from_fn(|c| v.get(c).map_or(std::ptr::null(), |r| r.as_ptr()));
    match level {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the AVX-512 level was detected; acc and every row hold dvp values (a
        // multiple of 16, asserted above).
        Level::Avx512 => unsafe { simd::attn::accumulate_512(acc.as_mut_ptr(), dvp, &rows[..v.len()], p) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the AVX2/FMA level was detected; as above.
        Level::Avx2 => unsafe { simd::attn::accumulate_256(acc.as_mut_ptr(), dvp, &rows[..v.len()], p) },
        _ => {
            for (row, &w) in v.iter().zip(p) {
                for (a, &x) in acc.iter_mut().zip(row.iter()) {
                    *a = x.mul_add(w, *a);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn levels() -> Vec<Level> {
        [Level::Scalar, Level::Avx2, Level::Avx512].into_iter().filter(|&l| l <= simd::supported_level()).collect()
    }

    fn f16_rows(n: usize, d: usize, salt: usize) -> Vec<Vec<u16>> {
        (0..n).map(|j| (0..d).map(|i| f32_to_f16((((i + 3) * (j + salt)) as f32 * 0.37).sin() * 2.0)).collect()).collect()
    }

    fn query(d: usize, salt: f32) -> Vec<f32> {
        (0..d).map(|i| (i as f32 * 0.7 + salt).sin()).collect()
    }

    /// Softmax(scale · q·Kᵀ) V over the first `m` cells in f64, q rounded to F16 as the kernel does.
    fn reference(q: &[f32], keys: &[Vec<u16>], vals: &[Vec<u16>], m: usize, scale: f64) -> Vec<f64> {
        let qh: Vec<f64> = q.iter().map(|&x| f16_to_f32(f32_to_f16(x)) as f64).collect();
        let s: Vec<f64> = keys[..m].iter().map(|k| k.iter().zip(&qh).map(|(&a, b)| f16_to_f32(a) as f64 * b).sum::<f64>() * scale).collect();
        let mx = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let w: Vec<f64> = s.iter().map(|x| (x - mx).exp()).collect();
        let z: f64 = w.iter().sum();
        (0..vals[0].len()).map(|d| (0..m).map(|j| w[j] * f16_to_f32(vals[j][d]) as f64).sum::<f64>() / z).collect()
    }

    fn cells<'a>(pos: &'a [i32], keys: &'a [Vec<u16>], vals: &'a [Vec<u16>]) -> impl Iterator<Item = (i32, &'a [u16], &'a [u16])> {
        pos.iter().zip(keys.iter().zip(vals)).map(|(&p, (k, v))| (p, k.as_slice(), v.as_slice()))
    }

    #[test]
    fn matches_two_pass_softmax_in_f64_at_every_level() {
        for level in levels() {
            for (dk, dv) in [(16, 16), (64, 64), (72, 72), (128, 128), (576, 512)] {
                let n = 75;
                let (keys, vals) = (f16_rows(n, dk, 1), f16_rows(n, dv, 5));
                let pos: Vec<i32> = (0..n as i32).collect();
                let mut s = TileScratch::at_level(level, 4, dk, dv).unwrap();
                let limits = [74, 40, 31, 0];
                for (r, &l) in limits.iter().enumerate() {
                    s.set_query(r, &query(dk, r as f32), l);
                }
                let scale = 1.0 / (dk as f32).sqrt();
                s.run(4, scale, cells(&pos, &keys, &vals));
                for (r, &l) in limits.iter().enumerate() {
                    let mut out = vec![0.0; dv];
                    s.output(r, &mut out);
                    let want = reference(&query(dk, r as f32), &keys, &vals, l as usize + 1, scale as f64);
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
            let mut tile = TileScratch::at_level(level, limits.len(), dk, dv).unwrap();
            for (r, &l) in limits.iter().enumerate() {
                tile.set_query(r, &query(dk, r as f32 * 0.3), l);
            }
            tile.run(limits.len(), 0.1, cells(&pos, &keys, &vals));
            let mut alone = TileScratch::at_level(level, 1, dk, dv).unwrap();
            for (r, &l) in limits.iter().enumerate() {
                alone.set_query(0, &query(dk, r as f32 * 0.3), i32::MAX);
                alone.run(1, 0.1, cells(&pos[..=l as usize], &keys, &vals));
                let (mut a, mut b) = (vec![0.0; dv], vec![0.0; dv]);
                tile.output(r, &mut a);
                alone.output(0, &mut b);
                assert_eq!(a, b, "{level:?} row {r}");
            }
            let prefix: Vec<Vec<u16>> = keys.iter().map(|k| k[..96].to_vec()).collect();
            let mut shared = TileScratch::at_level(level, 1, dk, 96).unwrap();
            let mut copied = TileScratch::at_level(level, 1, dk, 96).unwrap();
            shared.set_query(0, &query(dk, 1.0), 99);
            copied.set_query(0, &query(dk, 1.0), 99);
            shared.run(1, 0.1, pos.iter().zip(&keys).map(|(&p, k)| (p, k.as_slice(), &k[..96])));
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
            let cells = |limit: i32| positions.iter().zip(keys.iter().zip(&vals)).filter(move |(&p, _)| p <= limit).map(|(&p, (k, v))| (p, k.as_slice(), v.as_slice()));
            let mut tile = TileScratch::new(4 * heads, dk, dv).unwrap();
            let mut got = vec![vec![0.0; dv]; 4 * heads];
            attend_tokens(&mut tile, 0..4, &pos, heads, 0.125, |t, j| &queries[t * heads + j], cells, |t, j, tile, row| tile.output(row, &mut got[t * heads + j]));
            let mut alone = TileScratch::new(1, dk, dv).unwrap();
            for t in 0..4 {
                for j in 0..heads {
                    alone.set_query(0, &queries[t * heads + j], pos[t]);
                    alone.run(1, 0.125, cells(pos[t]));
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
        for dv in [16, 64, 128, 144, 512] {
            let rows: Vec<Vec<f32>> = (0..7).map(|j| (0..dv).map(|d| ((d * 7 + j) as f32 * 0.01).sin()).collect()).collect();
            let refs: Vec<&[f32]> = rows.iter().map(|r| r.as_slice()).collect();
            let p = [0.5, 0.25, 1.0, 0.125, 2.0, 0.3, 0.7];
            let results: Vec<Vec<f32>> = levels
                .iter()
                .map(|&l| {
                    let mut acc: Vec<f32> = (0..dv).map(|d| d as f32 * 0.001).collect();
                    accumulate(l, &mut acc, &refs, &p);
                    acc
                })
                .collect();
            for r in &results[1..] {
                assert_eq!(r, &results[0], "dv {dv}");
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
}
