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

    /// Every buffer of one stream as (buffer, per-stream range) pairs, in a fixed order.
    fn stream_ranges(&self, stream: usize) -> Vec<(usize, usize, std::ops::Range<usize>)> {
        let mut v = Vec::new();
        for (il, l) in self.layers.iter().enumerate() {
            let Some(l) = l else { continue };
            let nb = self.shape.n_rows(l.ratio);
            let (ring, iring) = (self.shape.ring(l.ratio, false), self.shape.ring(l.ratio, true));
            v.push((il, 0, stream * nb * self.shape.head..(stream + 1) * nb * self.shape.head));
            v.push((il, 1, stream * ring.slots * 2 * ring.width..(stream + 1) * ring.slots * 2 * ring.width));
            if l.idx_rows.is_some() {
                v.push((il, 2, stream * nb * self.shape.idx_head..(stream + 1) * nb * self.shape.idx_head));
                v.push((il, 3, stream * iring.slots * 2 * iring.width..(stream + 1) * iring.slots * 2 * iring.width));
            }
        }
        v
    }

    /// Zeroes one stream (every stream for None).
    pub fn clear(&mut self, stream: Option<usize>) {
        let streams = match stream {
            Some(s) => s..s + 1,
            None => 0..self.shape.n_stream,
        };
        for s in streams {
            for (il, which, r) in self.stream_ranges(s) {
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
        let to = self.stream_ranges(dst);
        for ((il, which, r), (_, _, rd)) in self.stream_ranges(src).into_iter().zip(to) {
            let l = self.layers[il].as_mut().expect("listed");
            match which {
                0 => l.rows.as_mut_slice().copy_within(r, rd.start),
                1 => l.state.as_mut_slice().copy_within(r, rd.start),
                2 => l.idx_rows.as_mut().expect("listed").as_mut_slice().copy_within(r, rd.start),
                _ => l.idx_state.as_mut().expect("listed").as_mut_slice().copy_within(r, rd.start),
            }
        }
    }

    /// Bytes of one stream's buffers (what a state file carries per stream).
    pub fn stream_bytes(&self) -> usize {
        self.stream_ranges(0).iter().map(|(_, which, r)| r.len() * if *which % 2 == 0 { 2 } else { 4 }).sum()
    }

    /// Appends one stream's buffers to `out` (little-endian).
    pub fn save_stream(&self, stream: usize, out: &mut Vec<u8>) {
        for (il, which, r) in self.stream_ranges(stream) {
            let l = self.layers[il].as_ref().expect("listed");
            match which {
                0 => l.rows.as_slice()[r].iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
                1 => l.state.as_slice()[r].iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
                2 => l.idx_rows.as_ref().expect("listed").as_slice()[r].iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
                _ => l.idx_state.as_ref().expect("listed").as_slice()[r].iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
            }
        }
    }

    /// Restores one stream from `bytes` (exactly [`Dsv4Cache::stream_bytes`] of them).
    pub fn load_stream(&mut self, stream: usize, bytes: &[u8]) {
        assert_eq!(bytes.len(), self.stream_bytes());
        let mut at = 0;
        for (il, which, r) in self.stream_ranges(stream) {
            let l = self.layers[il].as_mut().expect("listed");
            let u16s = |dst: &mut [u16], at: &mut usize| {
                for x in dst {
                    *x = u16::from_le_bytes([bytes[*at], bytes[*at + 1]]);
                    *at += 2;
                }
            };
            let f32s = |dst: &mut [f32], at: &mut usize| {
                for x in dst {
                    *x = f32::from_le_bytes([bytes[*at], bytes[*at + 1], bytes[*at + 2], bytes[*at + 3]]);
                    *at += 4;
                }
            };
            match which {
                0 => u16s(&mut l.rows.as_mut_slice()[r], &mut at),
                1 => f32s(&mut l.state.as_mut_slice()[r], &mut at),
                2 => u16s(&mut l.idx_rows.as_mut().expect("listed").as_mut_slice()[r], &mut at),
                _ => f32s(&mut l.idx_state.as_mut().expect("listed").as_mut_slice()[r], &mut at),
            }
        }
    }
}
