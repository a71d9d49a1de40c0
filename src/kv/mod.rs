//! kv: the context's KV cache. Keys and values per layer in the context's cache types (F16 by
//! default; `types`), cells that carry a position and a set of sequence ids, and the memory operations of llama.h. With `kv_unified = false` (the
//! default) every sequence owns a stream of `n_cells` cells; unified means one shared stream.
//! All buffers are allocated once at creation (fallibly, K/V in page mappings); nothing grows
//! afterwards. The per-sequence table (`SeqTable`) mirrors the cells for readers on other
//! threads and is kept current by every operation here.

pub mod dsv4;
pub mod seqset;
pub mod seqtable;
pub mod types;

#[cfg(all(test, loom))]
mod loom_tests;

use std::sync::Arc;

use crate::kernels::indexer::hadamard;
use crate::kernels::rope::{self, RopeParams};
use crate::sys::pages::Pages;
use crate::sys::stats::{self, Held};
pub use seqset::SeqSet;
pub use seqtable::SeqTable;
pub use types::CacheType;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cell {
    /// -1 when the cell is empty.
    pub pos: i32,
    pub seqs: SeqSet,
}

impl Cell {
    const EMPTY: Cell = Cell { pos: -1, seqs: SeqSet::EMPTY };
    pub fn is_empty(&self) -> bool {
        self.seqs.is_empty()
    }
}

pub struct KvShape {
    pub n_layer: usize,
    pub n_head_kv: usize,
    /// Values per head of a key.
    pub head_dim: usize,
    /// Values per head of a value (with `with_v`; a legacy deepseek2 file run expanded has
    /// values shorter than its keys).
    pub head_dim_v: usize,
    pub n_stream: usize,
    pub n_cells: usize,
    pub n_seq_max: usize,
    /// False for MLA: values are read from the key rows, no V buffer exists.
    pub with_v: bool,
    /// Where the rotated dimensions start inside a head's key (MLA: after the latent).
    pub rope_offset: usize,
    /// deepseek32: where each row's indexer key starts and its size. It is stored
    /// Hadamard-rotated with NEOX rope on its first rope dims, and re-roped that way on a shift.
    pub indexer_key: Option<(usize, usize)>,
    /// deepseek4: its compressed caches and compressor states beside the raw keys.
    pub dsv4: Option<dsv4::Dsv4Shape>,
    /// The element types of keys and values (`type_k`, `type_v`).
    pub k_type: CacheType,
    pub v_type: CacheType,
    /// The order of the Hadamard rotation the keys are stored in (0: none; `types::key_rotation`).
    pub k_rot: usize,
}

pub struct KvCache {
    pub shape: KvShape,
    /// deepseek4's compressed caches (`shape.dsv4`).
    pub dsv4: Option<dsv4::Dsv4Cache>,
    kv_dim: usize,
    /// Bytes of a cell's key row (kv_dim values of k_type) and value row (n_head_kv ·
    /// head_dim_v values of v_type).
    k_row_bytes: usize,
    v_row_bytes: usize,
    cells: Vec<Cell>,
    /// Per layer: n_stream * n_cells key rows and value rows.
    k: Vec<Pages<u8>>,
    v: Vec<Pages<u8>>,
    /// Where the next slot search in each stream starts.
    head: Vec<usize>,
    /// Per stream, one past its highest used cell (upstream's `used_max_p1`).
    used_hi: Vec<usize>,
    /// Per sequence, one past the highest cell (index in its stream) it holds.
    seq_hi: Vec<usize>,
    /// Place a sequence's new tokens after its own cells when there is room there
    /// (`find_free_for`), so that in a shared stream each sequence's cells stay in position
    /// order: attention then takes them in the order (and blocks) it would alone. Set by the
    /// serving engine for its unified pool; llama.h contexts place as upstream.
    pub place_in_order: bool,
    rope: RopeParams,
    rope_freq_factors: Option<Vec<f32>>,
    /// The owner's copy of each sequence's (pos_min, pos_max); the table publishes it.
    ranges: Vec<(i32, i32)>,
    /// The owner's copy of the registered set (sequences holding cells).
    registered: SeqSet,
    n_used: usize,
    table: Arc<SeqTable>,
    _data_bytes: Held,
    _meta_bytes: Held,
}

impl KvCache {
    pub fn new(shape: KvShape, rope: RopeParams, rope_freq_factors: Option<Vec<f32>>) -> Result<KvCache, String> {
        for (t, d) in [(shape.k_type, shape.head_dim), (shape.v_type, shape.head_dim_v)] {
            if d % t.block_len() != 0 {
                return Err(format!("KV cache type {} has blocks of {} values, which do not divide the heads of {d}", t.name(), t.block_len()));
            }
        }
        let kv_dim = shape.n_head_kv * shape.head_dim;
        let (k_row_bytes, v_row_bytes) = (shape.k_type.row_bytes(kv_dim), shape.v_type.row_bytes(shape.n_head_kv * shape.head_dim_v));
        let total_cells = shape.n_stream.checked_mul(shape.n_cells).ok_or("KV cache size overflows")?;
        let k_layer = total_cells.checked_mul(k_row_bytes).ok_or("KV cache size overflows")?;
        let v_layer = total_cells.checked_mul(v_row_bytes).ok_or("KV cache size overflows")?;
        let mut k = Vec::with_capacity(shape.n_layer);
        let mut v = Vec::with_capacity(shape.n_layer);
        for _ in 0..shape.n_layer {
            k.push(Pages::zeroed(k_layer, "the KV cache")?);
            v.push(Pages::zeroed(if shape.with_v { v_layer } else { 0 }, "the KV cache")?);
        }
        let mut cells = Vec::new();
        cells.try_reserve_exact(total_cells).map_err(|_| "cannot allocate KV cell metadata".to_string())?;
        cells.resize(total_cells, Cell::EMPTY);
        let head = vec![0; shape.n_stream];
        let ranges = vec![(-1, -1); shape.n_seq_max];
        let table = Arc::new(SeqTable::new(shape.n_seq_max));
        let dsv4 = shape.dsv4.clone().map(dsv4::Dsv4Cache::new).transpose()?;
        let data_bytes = k.iter().chain(&v).map(|b| b.bytes()).sum::<usize>() + dsv4.as_ref().map_or(0, |d| d.bytes());
        let mut kv = KvCache {
            dsv4,
            kv_dim,
            k_row_bytes,
            v_row_bytes,
            cells,
            k,
            v,
            used_hi: vec![0; shape.n_stream],
            seq_hi: vec![0; shape.n_seq_max],
            place_in_order: false,
            head,
            rope,
            rope_freq_factors,
            ranges,
            registered: SeqSet::EMPTY,
            n_used: 0,
            table,
            _data_bytes: Held::new(&stats::KV_BYTES, data_bytes),
            _meta_bytes: Held::new(&stats::KV_META_BYTES, 0),
            shape,
        };
        kv._meta_bytes = Held::new(&stats::KV_META_BYTES, kv.metadata_bytes());
        kv.table.set_metadata_bytes(kv.metadata_bytes());
        Ok(kv)
    }

    /// Bytes of K and V data.
    pub fn bytes(&self) -> usize {
        self._data_bytes.amount()
    }

    /// Bytes of metadata: cells, search heads, per-sequence ranges and the shared table, as
    /// they are allocated now (nothing here may grow after creation).
    pub fn metadata_bytes(&self) -> usize {
        self.cells.capacity() * std::mem::size_of::<Cell>()
            + (self.head.capacity() + self.used_hi.capacity() + self.seq_hi.capacity()) * std::mem::size_of::<usize>()
            + self.ranges.capacity() * std::mem::size_of::<(i32, i32)>()
            + self.table.bytes()
    }

    /// The table other threads read (shared with the context's monitor).
    pub fn seq_table(&self) -> &Arc<SeqTable> {
        &self.table
    }

    /// Rebuilds every sequence's range, the registered set and the used-cell count from the
    /// cells, and publishes them (after operations that remove or move cells).
    pub fn sync_seqs(&mut self) {
        self.ranges.iter_mut().for_each(|r| *r = (-1, -1));
        let mut registered = SeqSet::EMPTY;
        let mut used = 0;
        let n_cells = self.shape.n_cells;
        self.used_hi.iter_mut().for_each(|u| *u = 0);
        self.seq_hi.iter_mut().for_each(|u| *u = 0);
        for (i, cell) in self.cells.iter().enumerate().filter(|(_, c)| !c.is_empty()) {
            used += 1;
            self.used_hi[i / n_cells] = i % n_cells + 1;
            for s in cell.seqs.iter() {
                self.seq_hi[s] = i % n_cells + 1;
                let r = &mut self.ranges[s];
                *r = if r.0 < 0 { (cell.pos, cell.pos) } else { (r.0.min(cell.pos), r.1.max(cell.pos)) };
                registered.insert(s);
            }
        }
        self.n_used = used;
        // Ranges first, then the set: a reader that sees a sequence registered sees its range.
        for (s, &r) in self.ranges.iter().enumerate() {
            self.table.set_range(s, r);
        }
        self.registered = registered;
        self.table.register(registered);
        self.table.set_used_cells(used);
        self.table.set_metadata_bytes(self.metadata_bytes());
    }

    pub fn kv_dim(&self) -> usize {
        self.kv_dim
    }

    /// The stream that holds sequence `seq` (caller has checked seq < n_seq_max).
    pub fn stream_of(&self, seq: usize) -> usize {
        if self.shape.n_stream == 1 {
            0
        } else {
            seq
        }
    }

    /// The cells of upstream's view of `stream` (`llama_kv_cache::get_n_kv`): one past its
    /// highest used cell, padded to 256, at least 256 and at most the stream's cells.
    pub fn view_cells(&self, stream: usize) -> usize {
        const PAD: usize = 256;
        self.shape.n_cells.min(PAD.max(self.used_hi[stream].next_multiple_of(PAD)))
    }

    /// Tokens per stream of a micro-batch whose tokens are in sequences `seqs`: how many rows
    /// upstream's attention of it has per stream (its query tensor's `ne[1]`; a micro-batch
    /// over several streams splits its tokens evenly between them).
    pub fn tokens_per_stream(&self, seqs: &[usize]) -> usize {
        // stream numbers are below n_seq_max, so a set of sequence numbers holds them
        let mut streams = SeqSet::EMPTY;
        seqs.iter().for_each(|&q| streams.insert(self.stream_of(q)));
        seqs.len() / streams.len().max(1)
    }

    fn stream_cells(&self, stream: usize) -> std::ops::Range<usize> {
        stream * self.shape.n_cells..(stream + 1) * self.shape.n_cells
    }

    pub fn cell(&self, idx: usize) -> &Cell {
        &self.cells[idx]
    }

    pub fn n_cells_total(&self) -> usize {
        self.cells.len()
    }

    /// Bytes of a cell's key row and of its value row (0 for MLA caches, which have no V).
    pub fn row_bytes(&self) -> (usize, usize) {
        (self.k_row_bytes, if self.shape.with_v { self.v_row_bytes } else { 0 })
    }

    /// The raw V row of a cell in the cache's type (empty for MLA caches, which have no V).
    pub fn v_bytes_raw(&self, layer: usize, cell: usize) -> &[u8] {
        if self.shape.with_v {
            self.v_bytes(layer, cell)
        } else {
            &[]
        }
    }

    /// Restores a cell's raw rows of `layer` in the cache's types (state loading).
    pub fn restore_rows(&mut self, layer: usize, cell: usize, k: &[u8], v: &[u8]) {
        let (kb, vb) = (self.k_row_bytes, self.v_row_bytes);
        self.k[layer].as_mut_slice()[cell * kb..(cell + 1) * kb].copy_from_slice(k);
        if self.shape.with_v {
            self.v[layer].as_mut_slice()[cell * vb..(cell + 1) * vb].copy_from_slice(v);
        }
    }

    /// Sets a cell's metadata (state loading; `sync_seqs` afterwards); the stream's search
    /// head moves past it.
    pub fn restore_cell(&mut self, idx: usize, cell: Cell) {
        self.cells[idx] = cell;
        let stream = idx / self.shape.n_cells;
        self.head[stream] = (idx - stream * self.shape.n_cells + 1) % self.shape.n_cells;
    }

    /// Cells of a stream: (global index, cell).
    pub fn cells_of_stream(&self, stream: usize) -> impl Iterator<Item = (usize, &Cell)> {
        let r = self.stream_cells(stream);
        self.cells[r.clone()].iter().enumerate().map(move |(i, c)| (r.start + i, c))
    }

    /// The cells of a stream up to its highest used one (the rest are empty): what attention
    /// walks, so that a large stream (the serving engine's unified pool) costs the cells in use,
    /// not the whole stream.
    pub fn cells_in_use(&self, stream: usize) -> impl Iterator<Item = (usize, &Cell)> {
        let r = self.stream_cells(stream);
        let end = r.start + self.used_hi[stream].min(r.len());
        self.cells[r.start..end].iter().enumerate().map(move |(i, c)| (r.start + i, c))
    }

    /// A cell's key row of `layer` as F16 values (the caches of F16 keys only: deepseek32's
    /// and deepseek4's, whose parts read them as such).
    pub fn k_row(&self, layer: usize, cell: usize) -> &[u16] {
        assert_eq!(self.shape.k_type, CacheType::F16, "k_row reads F16 caches");
        crate::quant::f16_slice(self.k_bytes(layer, cell))
    }

    /// A cell's key row of `layer` in the cache's key type.
    pub fn k_bytes(&self, layer: usize, cell: usize) -> &[u8] {
        &self.k[layer].as_slice()[cell * self.k_row_bytes..(cell + 1) * self.k_row_bytes]
    }

    /// A cell's value row of `layer` in the cache's value type.
    pub fn v_bytes(&self, layer: usize, cell: usize) -> &[u8] {
        &self.v[layer].as_slice()[cell * self.v_row_bytes..(cell + 1) * self.v_row_bytes]
    }

    /// Stores one token's K and V (f32, converted to the cache's types) into `cell` of `layer`.
    pub fn store(&mut self, layer: usize, cell: usize, k: &[f32], v: &[f32]) {
        self.store_k(layer, cell, k);
        let vb = self.v_row_bytes;
        self.shape.v_type.store(v, &mut self.v[layer].as_mut_slice()[cell * vb..(cell + 1) * vb]);
    }

    /// Stores one token's key row (f32, converted to the key type) into `cell` of `layer`
    /// (MLA: no V).
    pub fn store_k(&mut self, layer: usize, cell: usize, k: &[f32]) {
        let kb = self.k_row_bytes;
        self.shape.k_type.store(k, &mut self.k[layer].as_mut_slice()[cell * kb..(cell + 1) * kb]);
    }

    /// Finds a free cell in `stream` that is not in `taken`, starting at the stream's head.
    pub fn find_free(&self, stream: usize, taken: &[usize]) -> Option<usize> {
        let r = self.stream_cells(stream);
        let n = r.len();
        (0..n)
            .map(|i| r.start + (self.head[stream] + i) % n)
            .find(|&c| self.cells[c].is_empty() && !taken.contains(&c))
    }

    /// As `find_free`, for a token of sequence `seq`: with `place_in_order`, the first free cell
    /// after the sequence's own (none there: anywhere, as `find_free`).
    pub fn find_free_for(&self, stream: usize, seq: usize, taken: &[usize]) -> Option<usize> {
        if self.place_in_order {
            let r = self.stream_cells(stream);
            let from = r.start + self.seq_hi[seq].min(r.len());
            if let Some(c) = (from..r.end).find(|&c| self.cells[c].is_empty() && !taken.contains(&c)) {
                return Some(c);
            }
        }
        self.find_free(stream, taken)
    }

    /// Claims the free `cell` for a token at `pos` belonging to `seqs`, and publishes the
    /// sequences' new ranges (registering a sequence only when it is new).
    pub fn occupy(&mut self, cell: usize, pos: i32, seqs: SeqSet) {
        debug_assert!(self.cells[cell].is_empty(), "occupy takes free cells only");
        self.cells[cell] = Cell { pos, seqs };
        let stream = cell / self.shape.n_cells;
        self.head[stream] = (cell - stream * self.shape.n_cells + 1) % self.shape.n_cells;
        self.used_hi[stream] = self.used_hi[stream].max(cell - stream * self.shape.n_cells + 1);
        self.n_used += 1;
        for s in seqs.iter() {
            self.seq_hi[s] = self.seq_hi[s].max(cell - stream * self.shape.n_cells + 1);
            let r = &mut self.ranges[s];
            *r = if r.0 < 0 { (pos, pos) } else { (r.0.min(pos), r.1.max(pos)) };
            self.table.set_range(s, *r);
        }
        if seqs.iter().any(|s| !self.registered.contains(s)) {
            seqs.iter().for_each(|s| self.registered.insert(s));
            self.table.register(self.registered);
        }
        self.table.set_used_cells(self.n_used);
    }

    /// Empties cells (a failed decode's claims).
    pub fn free_cells(&mut self, cells: &[usize]) {
        for &c in cells {
            self.cells[c] = Cell::EMPTY;
        }
        self.sync_seqs();
    }

    pub fn clear(&mut self, data: bool) {
        self.cells.iter_mut().for_each(|c| *c = Cell::EMPTY);
        self.head.iter_mut().for_each(|h| *h = 0);
        if data {
            self.k.iter_mut().chain(self.v.iter_mut()).for_each(|b| b.clear());
        }
        // deepseek4's compressed rows never outlive their tokens (upstream clears them always)
        if let Some(d) = self.dsv4.as_mut() {
            d.clear(None);
        }
        self.sync_seqs();
    }

    /// The streams an operation on `seq` touches (all for seq < 0).
    fn streams_for(&self, seq: i32) -> std::ops::Range<usize> {
        if seq < 0 {
            0..self.shape.n_stream
        } else {
            let s = self.stream_of(seq as usize);
            s..s + 1
        }
    }

    fn pos_range(p0: i32, p1: i32) -> (i32, i32) {
        (p0.max(0), if p1 < 0 { i32::MAX } else { p1 })
    }

    /// Removes `seq` (every sequence when < 0) from cells with pos in [p0, p1). False when the
    /// cache cannot do it (nothing changed): deepseek4's compressed caches cannot be cut inside
    /// a sequence, so there only removals of whole sequences and of nothing (p0 past the end)
    /// succeed, as upstream's `llama_kv_cache_dsv4::seq_rm` without rollback snapshots.
    pub fn seq_rm(&mut self, seq: i32, p0: i32, p1: i32) -> bool {
        if self.dsv4.is_some() {
            if p1 >= 0 {
                return false;
            }
            if p0 > 0 {
                return seq >= 0 && (seq as usize) < self.shape.n_seq_max && p0 > self.ranges[seq as usize].1;
            }
            for s in self.streams_for(seq) {
                self.dsv4.as_mut().expect("checked").clear(Some(s));
            }
        }
        self.seq_rm_cells(seq, p0, p1);
        true
    }

    fn seq_rm_cells(&mut self, seq: i32, p0: i32, p1: i32) {
        let (p0, p1) = Self::pos_range(p0, p1);
        for s in self.streams_for(seq) {
            for c in self.stream_cells(s) {
                let cell = &mut self.cells[c];
                if cell.is_empty() || cell.pos < p0 || cell.pos >= p1 {
                    continue;
                }
                if seq < 0 {
                    cell.seqs = SeqSet::EMPTY;
                } else {
                    cell.seqs.remove(seq as usize);
                }
                if cell.seqs.is_empty() {
                    cell.pos = -1;
                }
            }
        }
        self.sync_seqs();
    }

    /// Makes `dst` share `src`'s cells with pos in [p0, p1). Across streams the whole stream's
    /// data is copied, as upstream does. False (nothing changed) for a part of a deepseek4
    /// sequence: its compressed caches are copied whole or not at all.
    pub fn seq_cp(&mut self, src: usize, dst: usize, p0: i32, p1: i32) -> bool {
        if self.dsv4.is_some() && (p0 > 0 || p1 >= 0) {
            return false;
        }
        if src == dst {
            return true;
        }
        let (s0, s1) = (self.stream_of(src), self.stream_of(dst));
        if let Some(d) = self.dsv4.as_mut() {
            d.copy_stream(s0, s1);
        }
        let (s0, s1) = (self.stream_of(src), self.stream_of(dst));
        let (p0, p1) = Self::pos_range(p0, p1);
        if s0 == s1 {
            for c in self.stream_cells(s0) {
                let cell = &mut self.cells[c];
                if !cell.is_empty() && cell.pos >= p0 && cell.pos < p1 && cell.seqs.contains(src) {
                    cell.seqs.insert(dst);
                }
            }
            self.sync_seqs();
            return true;
        }
        let (r0, r1) = (self.stream_cells(s0), self.stream_cells(s1));
        for i in 0..self.shape.n_cells {
            let from = self.cells[r0.start + i];
            self.cells[r1.start + i] = if from.seqs.contains(src) { Cell { pos: from.pos, seqs: SeqSet::single(dst) } } else { Cell::EMPTY };
        }
        for (buf, d) in self.k.iter_mut().map(|b| (b, self.k_row_bytes)).chain(self.v.iter_mut().map(|b| (b, self.v_row_bytes))).filter(|(b, _)| !b.is_empty()) {
            buf.as_mut_slice().copy_within(r0.start * d..r0.end * d, r1.start * d);
        }
        self.head[s1] = self.head[s0];
        self.sync_seqs();
        true
    }

    /// Removes every sequence but `seq` from the cells of `seq`'s stream (deepseek4: and empties
    /// every other stream, compressed caches included, as upstream).
    pub fn seq_keep(&mut self, seq: usize) {
        let s = self.stream_of(seq);
        if self.dsv4.is_some() {
            for other in (0..self.shape.n_stream).filter(|&o| o != s) {
                self.stream_cells(other).for_each(|c| self.cells[c] = Cell::EMPTY);
                self.dsv4.as_mut().expect("checked").clear(Some(other));
            }
        }
        for c in self.stream_cells(s) {
            let cell = &mut self.cells[c];
            if cell.seqs.contains(seq) {
                cell.seqs = SeqSet::single(seq);
            } else {
                *cell = Cell::EMPTY;
            }
        }
        self.sync_seqs();
    }

    /// Applies `f(old_pos) -> new_pos` to the cells of `seq` in [p0, p1), re-rotating their keys
    /// by the position change; cells whose position becomes negative are freed.
    fn seq_move(&mut self, seq: usize, p0: i32, p1: i32, f: impl Fn(i32) -> i32) {
        let (p0, p1) = Self::pos_range(p0, p1);
        let s = self.stream_of(seq);
        let hd = self.shape.head_dim;
        let (k_type, k_rot) = (self.shape.k_type, self.shape.k_rot);
        let head_bytes = k_type.row_bytes(hd);
        let mut cache = vec![0.0f32; self.rope.n_dims];
        let mut row = vec![0.0f32; hd];
        let n_rot = self.rope.n_dims;
        for c in self.stream_cells(s) {
            let cell = self.cells[c];
            if cell.is_empty() || !cell.seqs.contains(seq) || cell.pos < p0 || cell.pos >= p1 {
                continue;
            }
            let new_pos = f(cell.pos);
            if new_pos < 0 {
                self.cells[c] = Cell::EMPTY;
                continue;
            }
            let delta = new_pos - cell.pos;
            self.cells[c].pos = new_pos;
            if delta == 0 {
                continue;
            }
            rope::fill_cache(&self.rope, delta as f32, self.rope_freq_factors.as_deref(), &mut cache);
            for layer in 0..self.shape.n_layer {
                for h in 0..self.shape.n_head_kv {
                    let base = c * self.k_row_bytes + h * head_bytes;
                    let k = &mut self.k[layer].as_mut_slice()[base..base + head_bytes];
                    // a quantized key: dequantized, rotated back, roped, rotated and quantized
                    // again (upstream's `build_rope_shift`)
                    k_type.load(k, &mut row);
                    if k_rot > 0 {
                        types::fwht(&mut row, k_rot);
                    }
                    rope::apply(self.rope.mode, n_rot, &cache, &mut row[self.shape.rope_offset..]);
                    if let Some((at, n)) = self.shape.indexer_key {
                        let key = &mut row[at..at + n];
                        hadamard(key);
                        rope::apply(rope::RopeMode::Neox, n_rot, &cache, key);
                        hadamard(key);
                    }
                    if k_rot > 0 {
                        types::fwht(&mut row, k_rot);
                    }
                    k_type.store(&row, k);
                }
            }
        }
        self.sync_seqs();
    }

    /// Whether positions can be shifted (`seq_add`, `seq_div`): not in deepseek4's cache, whose
    /// compressed rows belong to fixed blocks of positions (upstream's `get_can_shift` false).
    pub fn can_shift(&self) -> bool {
        self.dsv4.is_none()
    }

    /// False (nothing changed) when the cache cannot shift.
    pub fn seq_add(&mut self, seq: usize, p0: i32, p1: i32, shift: i32) -> bool {
        if !self.can_shift() {
            return false;
        }
        if shift != 0 {
            self.seq_move(seq, p0, p1, |p| p.saturating_add(shift));
        }
        true
    }

    pub fn seq_div(&mut self, seq: usize, p0: i32, p1: i32, d: i32) -> bool {
        if !self.can_shift() {
            return false;
        }
        if d > 1 {
            self.seq_move(seq, p0, p1, |p| p / d);
        }
        true
    }

    pub fn seq_pos_min(&self, seq: usize) -> i32 {
        self.ranges[seq].0
    }

    pub fn seq_pos_max(&self, seq: usize) -> i32 {
        self.ranges[seq].1
    }

    /// Cells in use across all streams.
    pub fn used_cells(&self) -> usize {
        self.n_used
    }
}


#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::rope::RopeMode;

    fn cache(n_stream: usize, n_cells: usize) -> KvCache {
        let shape = KvShape {
            n_layer: 1,
            n_head_kv: 1,
            head_dim: 32,
            head_dim_v: 32,
            n_stream,
            n_cells,
            n_seq_max: 4,
            with_v: true,
            rope_offset: 0,
            indexer_key: None,
            dsv4: None,
            k_type: CacheType::F16,
            v_type: CacheType::F16,
            k_rot: 0,
        };
        let rope = RopeParams { n_dims: 32, freq_base: 10000.0, freq_scale: 1.0, ext_factor: 0.0, attn_factor: 1.0, beta_fast: 32.0, beta_slow: 1.0, n_ctx_orig: 4096, mode: RopeMode::Norm };
        KvCache::new(shape, rope, None).unwrap()
    }

    /// upstream's `get_n_kv`: one past the highest used cell, padded to 256, at least 256, at
    /// most the stream's cells; removals lower it again.
    #[test]
    fn view_cells_are_upstreams_n_kv() {
        let mut kv = cache(2, 1024);
        assert_eq!(kv.view_cells(0), 256);
        for pos in 0..300 {
            let c = kv.find_free(0, &[]).unwrap();
            kv.occupy(c, pos, SeqSet::single(0));
        }
        assert_eq!((kv.view_cells(0), kv.view_cells(1)), (512, 256));
        assert!(kv.seq_rm(0, 200, -1));
        assert_eq!(kv.view_cells(0), 256);
        let small = cache(1, 128);
        assert_eq!(small.view_cells(0), 128);
    }

    /// The query rows per stream of upstream's attention: a micro-batch's tokens split evenly
    /// over the streams its sequences are in.
    #[test]
    fn tokens_per_stream_splits_over_streams() {
        let (unified, per_seq) = (cache(1, 256), cache(4, 256));
        assert_eq!(unified.tokens_per_stream(&[0, 1, 2, 3, 0, 1, 2, 3]), 8);
        assert_eq!(per_seq.tokens_per_stream(&[0, 1, 2, 3, 0, 1, 2, 3]), 2);
        assert_eq!(per_seq.tokens_per_stream(&[2; 70]), 70);
        assert_eq!(per_seq.tokens_per_stream(&[]), 0);
    }
}
