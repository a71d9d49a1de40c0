//! The caches DeepSeek V4 (`deepseek4`) keeps beside its raw keys, per sequence stream, as
//! upstream b11312's `llama_kv_cache_dsv4` (`src/llama-kv-cache-dsv4.cpp:1210-1336`) does:
//! - per block with a compressor (ratio 4 or 128): one compressed key row of `head` values per
//!   complete block of `ratio` positions (F16), indexed by the block number;
//! - per ratio-4 block also the lightning indexer's compressed key (`idx_head` values, F16);
//! - the compressor states (F32): the per-token compressor inputs (values and scores) of the
//!   last 8 (ratio 4: a row also mixes the previous block's tokens) or 128 positions, in rings
//!   indexed by position, so that a block whose tokens arrive in several micro-batches or decode
//!   calls is compressed as if they had come together.
//!
//! Everything is zero until written and zeroed again when its stream is cleared. Nothing is
//! allocated after creation.

use crate::sys::pages::Pages;

/// The compressor state of one kind of block: ring slots and the width of a slot's value and
/// score rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ring {
    pub slots: usize,
    pub width: usize,
}

#[derive(Clone, Debug)]
pub struct Dsv4Shape {
    /// Per block: 0, 4 or 128.
    pub ratios: Vec<usize>,
    pub head: usize,
    pub idx_head: usize,
    pub n_stream: usize,
    /// Cells (positions) of one stream.
    pub n_cells: usize,
}

impl Dsv4Shape {
    /// Compressed rows per stream for `ratio` (upstream's `dsv4_comp_size`).
    pub fn n_rows(&self, ratio: usize) -> usize {
        self.n_cells.div_ceil(ratio).max(1)
    }

    /// The compressor ring of a block of `ratio` (and, with `indexer`, of its indexer).
    pub fn ring(&self, ratio: usize, indexer: bool) -> Ring {
        let d = if indexer { self.idx_head } else { self.head };
        if ratio == 4 {
            Ring { slots: 8, width: 2 * d }
        } else {
            Ring { slots: ratio, width: d }
        }
    }
}

/// One block's buffers.
struct Layer {
    ratio: usize,
    rows: Pages<u16>,
    idx_rows: Option<Pages<u16>>,
    /// values then scores, per stream and slot
    state: Pages<f32>,
    idx_state: Option<Pages<f32>>,
}

pub struct Dsv4Cache {
    pub shape: Dsv4Shape,
    layers: Vec<Option<Layer>>,
}

/// Which compressor a state or row belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    Attn,
    Indexer,
}

impl Dsv4Cache {
    pub fn new(shape: Dsv4Shape) -> Result<Dsv4Cache, String> {
        let s = shape.n_stream;
        let layers = shape
            .ratios
            .iter()
            .map(|&ratio| -> Result<Option<Layer>, String> {
                if ratio == 0 {
                    return Ok(None);
                }
                let nb = shape.n_rows(ratio);
                let ring = shape.ring(ratio, false);
                let csa = ratio == 4;
                let rows = |d: usize| s.checked_mul(nb).and_then(|x| x.checked_mul(d)).ok_or("deepseek4 cache size overflows".to_string());
                let idx_ring = shape.ring(ratio, true);
                Ok(Some(Layer {
                    ratio,
                    rows: Pages::zeroed(rows(shape.head)?, "deepseek4's compressed cache")?,
                    idx_rows: if csa { Some(Pages::zeroed(rows(shape.idx_head)?, "deepseek4's indexer cache")?) } else { None },
                    state: Pages::zeroed(s * ring.slots * 2 * ring.width, "deepseek4's compressor state")?,
                    idx_state: if csa { Some(Pages::zeroed(s * idx_ring.slots * 2 * idx_ring.width, "deepseek4's compressor state")?) } else { None },
                }))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Dsv4Cache { shape, layers })
    }

    pub fn bytes(&self) -> usize {
        self.layers.iter().flatten().map(|l| l.rows.bytes() + l.state.bytes() + l.idx_rows.as_ref().map_or(0, |p| p.bytes()) + l.idx_state.as_ref().map_or(0, |p| p.bytes())).sum()
    }

    fn layer(&self, il: usize) -> &Layer {
        self.layers[il].as_ref().expect("a block with a compressor")
    }

    fn layer_mut(&mut self, il: usize) -> &mut Layer {
        self.layers[il].as_mut().expect("a block with a compressor")
    }

    fn width(&self, part: Part) -> usize {
        match part {
            Part::Attn => self.shape.head,
            Part::Indexer => self.shape.idx_head,
        }
    }

    /// Compressed row `b` of block `il` in `stream`.
    pub fn row(&self, il: usize, part: Part, stream: usize, b: usize) -> &[u16] {
        let (l, d) = (self.layer(il), self.width(part));
        let at = (stream * self.shape.n_rows(l.ratio) + b) * d;
        let rows = match part {
            Part::Attn => &l.rows,
            Part::Indexer => l.idx_rows.as_ref().expect("a CSA block"),
        };
        &rows.as_slice()[at..at + d]
    }

    pub fn row_mut(&mut self, il: usize, part: Part, stream: usize, b: usize) -> &mut [u16] {
        let d = self.width(part);
        let nb = self.shape.n_rows(self.layer(il).ratio);
        let l = self.layer_mut(il);
        let at = (stream * nb + b) * d;
        let rows = match part {
            Part::Attn => &mut l.rows,
            Part::Indexer => l.idx_rows.as_mut().expect("a CSA block"),
        };
        &mut rows.as_mut_slice()[at..at + d]
    }

    /// The ring slot of position `pos`: (values, scores).
    pub fn slot(&self, il: usize, part: Part, stream: usize, pos: usize) -> (&[f32], &[f32]) {
        let l = self.layer(il);
        let ring = self.shape.ring(l.ratio, part == Part::Indexer);
        let state = match part {
            Part::Attn => &l.state,
            Part::Indexer => l.idx_state.as_ref().expect("a CSA block"),
        };
        let at = (stream * ring.slots + pos % ring.slots) * 2 * ring.width;
        state.as_slice()[at..at + 2 * ring.width].split_at(ring.width)
    }

    pub fn slot_mut(&mut self, il: usize, part: Part, stream: usize, pos: usize) -> (&mut [f32], &mut [f32]) {
        let ratio = self.layer(il).ratio;
        let ring = self.shape.ring(ratio, part == Part::Indexer);
        let l = self.layer_mut(il);
        let state = match part {
            Part::Attn => &mut l.state,
            Part::Indexer => l.idx_state.as_mut().expect("a CSA block"),
        };
        let at = (stream * ring.slots + pos % ring.slots) * 2 * ring.width;
        state.as_mut_slice()[at..at + 2 * ring.width].split_at_mut(ring.width)
    }

    /// Every buffer of one stream as (block, buffer, per-stream range), in a fixed order (buffer
    /// 0: rows, 1: ring, 2: indexer rows, 3: indexer ring). Allocates nothing.
    fn stream_ranges(&self, stream: usize) -> impl Iterator<Item = (usize, usize, std::ops::Range<usize>)> + '_ {
        self.layers.iter().enumerate().filter_map(|(il, l)| l.as_ref().map(|l| (il, l))).flat_map(move |(il, l)| {
            let nb = self.shape.n_rows(l.ratio);
            let (ring, iring) = (self.shape.ring(l.ratio, false), self.shape.ring(l.ratio, true));
            let csa = l.idx_rows.is_some();
            let per = [nb * self.shape.head, ring.slots * 2 * ring.width, nb * self.shape.idx_head, iring.slots * 2 * iring.width];
            (0..if csa { 4 } else { 2 }).map(move |which| (il, which, stream * per[which]..(stream + 1) * per[which]))
        })
    }

    fn nth_range(&self, stream: usize, k: usize) -> Option<(usize, usize, std::ops::Range<usize>)> {
        self.stream_ranges(stream).nth(k)
    }

    /// Zeroes one stream (every stream for None).
    pub fn clear(&mut self, stream: Option<usize>) {
        let streams = match stream {
            Some(s) => s..s + 1,
            None => 0..self.shape.n_stream,
        };
        for s in streams {
            for k in 0.. {
                let Some((il, which, r)) = self.nth_range(s, k) else { break };
                let l = self.layers[il].as_mut().expect("listed");
                match which {
                    0 => l.rows.as_mut_slice()[r].fill(0),
                    1 => l.state.as_mut_slice()[r].fill(0.0),
                    2 => l.idx_rows.as_mut().expect("listed").as_mut_slice()[r].fill(0),
                    _ => l.idx_state.as_mut().expect("listed").as_mut_slice()[r].fill(0.0),
                }
            }
        }
    }

    /// Copies stream `src` over stream `dst`.
    pub fn copy_stream(&mut self, src: usize, dst: usize) {
        if src == dst {
            return;
        }
        for k in 0.. {
            let (Some((il, which, r)), Some((_, _, rd))) = (self.nth_range(src, k), self.nth_range(dst, k)) else { break };
            let l = self.layers[il].as_mut().expect("listed");
            match which {
                0 => l.rows.as_mut_slice().copy_within(r, rd.start),
                1 => l.state.as_mut_slice().copy_within(r, rd.start),
                2 => l.idx_rows.as_mut().expect("listed").as_mut_slice().copy_within(r, rd.start),
                _ => l.idx_state.as_mut().expect("listed").as_mut_slice().copy_within(r, rd.start),
            }
        }
    }

    /// Copies every stream of `src` (a cache of the same blocks and rows) over this cache's
    /// streams from `first` on.
    pub fn copy_streams_from(&mut self, src: &Dsv4Cache, first: usize) {
        for s in 0..src.shape.n_stream {
            for (il, which, r) in src.stream_ranges(s) {
                let (a, l) = (src.layers[il].as_ref().expect("listed"), self.layers[il].as_mut().expect("same blocks"));
                let len = r.len();
                let at = (first + s) * len;
                match which {
                    0 => l.rows.as_mut_slice()[at..at + len].copy_from_slice(&a.rows.as_slice()[r]),
                    1 => l.state.as_mut_slice()[at..at + len].copy_from_slice(&a.state.as_slice()[r]),
                    2 => l.idx_rows.as_mut().expect("listed").as_mut_slice()[at..at + len].copy_from_slice(&a.idx_rows.as_ref().expect("listed").as_slice()[r]),
                    _ => l.idx_state.as_mut().expect("listed").as_mut_slice()[at..at + len].copy_from_slice(&a.idx_state.as_ref().expect("listed").as_slice()[r]),
                }
            }
        }
    }

    /// Appends one stream's caches to `out` (little-endian): per block with a compressor the
    /// number of its complete rows for a sequence whose last position is `pos_max`, those rows,
    /// then the compressor rings (whose size does not depend on the context). So a state moves
    /// between contexts of different sizes.
    pub fn save_stream(&self, stream: usize, pos_max: i32, out: &mut Vec<u8>) {
        for (il, l) in self.layers.iter().enumerate() {
            let Some(l) = l else { continue };
            let used = ((pos_max + 1).max(0) as usize / l.ratio).min(self.shape.n_rows(l.ratio));
            out.extend_from_slice(&(used as u32).to_le_bytes());
            for part in [Part::Attn, Part::Indexer] {
                if part == Part::Indexer && l.idx_rows.is_none() {
                    continue;
                }
                for b in 0..used {
                    self.row(il, part, stream, b).iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes()));
                }
                let ring = self.shape.ring(l.ratio, part == Part::Indexer);
                for slot in 0..ring.slots {
                    let (v, sc) = self.slot(il, part, stream, slot);
                    v.iter().chain(sc).for_each(|x| out.extend_from_slice(&x.to_le_bytes()));
                }
            }
        }
    }

    /// Restores one stream from what [`Dsv4Cache::save_stream`] wrote (the stream was cleared).
    pub fn load_stream(&mut self, stream: usize, c: &mut crate::gguf::cursor::Cursor<'_>) -> Result<(), String> {
        for il in 0..self.layers.len() {
            let Some(ratio) = self.layers[il].as_ref().map(|l| l.ratio) else { continue };
            let csa = self.layers[il].as_ref().is_some_and(|l| l.idx_rows.is_some());
            let used = c.u32("deepseek4 compressed rows")? as usize;
            if used > self.shape.n_rows(ratio) {
                return Err(format!("the state holds {used} compressed rows of block {il}, this context has room for {}", self.shape.n_rows(ratio)));
            }
            for part in [Part::Attn, Part::Indexer] {
                if part == Part::Indexer && !csa {
                    continue;
                }
                let d = self.width(part);
                for b in 0..used {
                    let bytes = c.take(2 * d, "deepseek4 compressed row")?;
                    for (x, h) in self.row_mut(il, part, stream, b).iter_mut().zip(bytes.chunks_exact(2)) {
                        *x = u16::from_le_bytes([h[0], h[1]]);
                    }
                }
                let ring = self.shape.ring(ratio, part == Part::Indexer);
                for slot in 0..ring.slots {
                    let bytes = c.take(8 * ring.width, "deepseek4 compressor state")?;
                    let (v, sc) = self.slot_mut(il, part, stream, slot);
                    for (x, f) in v.iter_mut().chain(sc.iter_mut()).zip(bytes.chunks_exact(4)) {
                        *x = f32::from_le_bytes([f[0], f[1], f[2], f[3]]);
                    }
                }
            }
        }
        Ok(())
    }
}
