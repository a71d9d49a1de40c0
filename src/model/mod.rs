//! model: an immutable loaded model: the file (mapped or owned), hyper-parameters, views of
//! every weight, and how it runs. Shared by any number of contexts on any threads (`Send +
//! Sync`, no locks). Weight matrices are byte ranges into the file, or (`use_extra_bufts`,
//! [`Model::repack`]) into one huge-page buffer they are moved to at load, Q4_K ones interleaved
//! four rows at a time; they are never dequantized whole.
//!
//! How a model runs is decided here, at load, and nowhere else: `Layers` holds one recipe's
//! blocks (`llama.rs` for llama/qwen2, `deepseek.rs` for DeepSeek V1 MoE, `deepseek2.rs` for
//! V2/V3/R1 and V3.2), `Model::new_scratch` sizes that recipe's buffers and `Model::forward` runs it.
//! Recipes compose blocks (`attn_mha`, `attn_mla`, `indexer`, `ffn`, `moe`, `head`, through `proj`); no
//! recipe imports another, and no block knows which recipe uses it.

pub mod attn_dsv4;
pub mod attn_mha;
pub mod attn_mla;
pub mod deepseek;
pub mod deepseek2;
pub mod deepseek4;
pub mod ffn;
pub mod head;
pub mod hparams;
pub mod hyper;
pub mod indexer;
pub mod llama;
pub mod moe;
pub mod proj;
pub mod weights;

use std::path::Path;

use crate::gguf::{GgufFile, Source};
use crate::kernels::rope::RopeParams;
use crate::kv::KvCache;
use crate::sys::alloc::try_zeroed;
use crate::threads::ThreadPool;
use crate::tokenizer::Vocab;
pub use hparams::{Arch, HParams};
pub use weights::{Mat, Weights};

/// Most expert groups a model may have (V3/R1 have 8); checked when the model loads.
pub(crate) const MAX_GROUPS: usize = 64;

/// One micro-batch as the forward pass sees it: per token its id, position, KV cell and the
/// (first) sequence whose cells it attends to; `out_rows` are the tokens that produce outputs.
pub struct UBatch<'a> {
    pub tokens: &'a [i32],
    pub pos: &'a [i32],
    /// Each token attends to its sequence's cells at positions up to this: its own position
    /// (causal attention), or `i32::MAX` (non-causal, read by the recipes that support it:
    /// [`Model::supports_non_causal`]).
    pub limits: &'a [i32],
    pub cells: &'a [usize],
    pub seq: &'a [usize],
    pub out_rows: &'a [usize],
}

/// The feed-forward half of a block: dense SwiGLU, or routed experts.
pub enum FeedForward {
    Dense(ffn::Ffn),
    Moe(moe::Moe),
}

impl FeedForward {
    /// Block `i`'s: dense in the first `n_dense_lead` blocks, routed experts after.
    pub fn load(f: &GgufFile, hp: &HParams, p: &hparams::MoeParams, i: usize) -> Result<FeedForward, String> {
        Ok(if i < p.n_dense_lead { FeedForward::Dense(ffn::Ffn::load(f, i, "", hp.n_embd, hp.n_ff)?) } else { FeedForward::Moe(moe::Moe::load(f, p, i, hp.n_embd)?) })
    }

    /// The feed-forward of `c.xn` (`n` rows) into `c.proj`.
    #[allow(clippy::too_many_arguments)]
    pub fn forward(&self, model: &Model, p: &hparams::MoeParams, c: &mut Common, f: &mut ffn::FfnScratch, m: &mut moe::MoeScratch, pool: &ThreadPool, n: usize) {
        match self {
            FeedForward::Dense(x) => ffn::forward(model, x, c, f, pool, n),
            FeedForward::Moe(x) => moe::forward(model, p, x, c, f, m, pool, n),
        }
    }

    pub fn mats(&self) -> Vec<&Mat> {
        match self {
            FeedForward::Dense(f) => f.mats().to_vec(),
            FeedForward::Moe(m) => m.mats().to_vec(),
        }
    }
}

/// The blocks of a model, by recipe.
pub enum Layers {
    /// A vocab-only model.
    None,
    Llama(Vec<llama::Block>),
    Deepseek(Vec<deepseek::Block>),
    Deepseek2(Vec<deepseek2::Block>),
    Deepseek4(deepseek4::Layers),
}

impl Layers {
    /// Every weight matrix the blocks multiply by (experts' stacks by their first matrix).
    pub fn mats(&self) -> Vec<&Mat> {
        match self {
            Layers::None => Vec::new(),
            Layers::Llama(b) => b.iter().flat_map(|b| b.attn.mats().into_iter().chain(b.ffn.mats())).collect(),
            Layers::Deepseek(b) => b.iter().flat_map(|b| b.attn.mats().into_iter().chain(b.ffn.mats())).collect(),
            Layers::Deepseek2(b) => b.iter().flat_map(|b| b.attn.mats().into_iter().chain(b.ffn.mats()).chain(b.indexer.iter().flat_map(|x| x.mats()))).collect(),
            Layers::Deepseek4(l) => l.blocks.iter().flat_map(|b| b.attn.mats().into_iter().chain(b.ffn.mats()).chain([&b.hc_attn.fn_, &b.hc_ffn.fn_])).chain([&l.head.fn_]).collect(),
        }
    }

    /// Every routed-expert stack (gate, up, down of each MoE block).
    pub fn stacks(&self) -> Vec<&weights::Stack> {
        let ffns: Vec<&FeedForward> = match self {
            Layers::None | Layers::Llama(_) => Vec::new(),
            Layers::Deepseek(b) => b.iter().map(|b| &b.ffn).collect(),
            Layers::Deepseek2(b) => b.iter().map(|b| &b.ffn).collect(),
            Layers::Deepseek4(l) => l.blocks.iter().map(|b| &b.ffn).collect(),
        };
        ffns.into_iter()
            .flat_map(|f| match f {
                FeedForward::Moe(m) => vec![&m.gate, &m.up, &m.down],
                FeedForward::Dense(_) => Vec::new(),
            })
            .collect()
    }
}

/// Weight matrices moved at load into one owned buffer on huge pages, the Q4_K ones repacked
/// into the layout of our several-row decode kernels (`quant::interleave`, where the level has
/// them: `simd::gemv_fns_interleaved`); the file's pages of those matrices are given back to
/// the OS as each is moved, so the model's resident memory does not grow. Done when
/// `use_extra_bufts` (llama.h's default, under which upstream repacks too); the results are
/// bit for bit the file layout's. Routed-expert stacks (`ggml_mul_mat_id`, which upstream
/// repacks too) move with them when all of it fits in the memory available (else they stay
/// in the file: a model larger than RAM still runs from the page cache).
pub struct Packed {
    bytes: crate::sys::bytes::FileBytes,
    /// (shard, offset in the shard, bytes, offset in `bytes`, interleaved) of every repacked
    /// tensor (a matrix, or a stack of experts, each of whole four-row groups), sorted.
    index: Vec<(usize, usize, usize, usize, bool)>,
    /// How many of them are expert stacks, and how many of those are interleaved.
    stacks: (usize, usize),
}

impl Packed {
    /// Locks the buffer in RAM (`use_mlock`).
    pub fn lock(&self) -> Result<(), String> {
        self.bytes.lock(0..self.len())
    }
    /// How many of the tensors are interleaved.
    pub fn interleaved(&self) -> usize {
        self.index.iter().filter(|e| e.4).count()
    }
    /// How many of the tensors are expert stacks, and how many of those are interleaved.
    pub fn stacks(&self) -> (usize, usize) {
        self.stacks
    }
    /// Bytes held.
    pub fn len(&self) -> usize {
        self.bytes.as_slice().len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Whether the tensor at `offset` of shard `shard` was repacked.
    pub fn contains(&self, shard: usize, offset: usize) -> bool {
        self.index.binary_search_by(|&(s, o, _, _, _)| (s, o).cmp(&(shard, offset))).is_ok()
    }
    /// The repacked bytes of `m` (a matrix, or one expert of a stack), if it was repacked.
    fn get(&self, m: &Mat) -> Option<(&[u8], crate::kernels::matmul::Layout)> {
        use crate::kernels::matmul::Layout;
        let i = self.index.partition_point(|&(s, o, _, _, _)| (s, o) <= (m.shard, m.offset)).checked_sub(1)?;
        let (shard, offset, n_bytes, at, il) = self.index[i];
        if shard != m.shard || m.offset + m.n_bytes > offset + n_bytes {
            return None;
        }
        // (an expert's rows are whole groups: its bytes are where the file's were)
        let at = at + (m.offset - offset);
        Some((&self.bytes.as_slice()[at..at + m.n_bytes], if il { Layout::Interleaved4 } else { Layout::Rows }))
    }
}

/// What every recipe's forward pass shares: the residual stream, the normed input of a
/// block, a block's output, the quantized activations, the RoPE tables.
pub struct Common {
    pub n_ubatch: usize,
    pub x: Vec<f32>,
    pub xn: Vec<f32>,
    pub proj: Vec<f32>,
    pub act: Vec<u8>,
    pub rope_cache: Vec<f32>,
}

/// A context's buffers for its model's forward pass, sized at creation.
pub struct Scratch {
    pub common: Common,
    pub mha: Option<attn_mha::MhaScratch>,
    pub mla: Option<attn_mla::MlaScratch>,
    pub ffn: ffn::FfnScratch,
    pub moe: Option<moe::MoeScratch>,
    pub indexer: Option<indexer::IndexerScratch>,
    pub dsv4: Option<deepseek4::Dsv4Scratch>,
    /// The panel buffer each pool thread needs for the model's products
    /// (`kernels::matmul::panel_bytes`), reserved when the context is made.
    pub panel_bytes: usize,
}

/// The panel buffer the products of `mats` need (see [`Scratch::panel_bytes`]).
pub fn panel_bytes<'a>(mats: impl IntoIterator<Item = &'a Mat>) -> usize {
    mats.into_iter().map(|m| crate::kernels::matmul::panel_bytes(m.ty, m.cols)).max().unwrap_or(0)
}

impl Scratch {
    /// `widest`: the widest row `xn` must hold; `act_bytes`: the quantized activations'
    /// room; `ffn_floats`: gate/up room.
    fn new(hp: &HParams, n_ubatch: usize, widest: usize, act_bytes: usize, ffn_floats: usize) -> Result<Scratch, String> {
        let n = n_ubatch;
        Ok(Scratch {
            common: Common {
                n_ubatch,
                x: try_zeroed(n * hp.n_embd, "scratch")?,
                xn: try_zeroed(n * widest.max(hp.n_embd), "scratch")?,
                proj: try_zeroed(n * hp.n_embd, "scratch")?,
                act: try_zeroed(act_bytes, "scratch")?,
                rope_cache: try_zeroed(n * hp.n_rot.max(2), "scratch")?,
            },
            mha: None,
            mla: None,
            ffn: ffn::FfnScratch::new(ffn_floats)?,
            moe: None,
            indexer: None,
            dsv4: None,
            panel_bytes: 0,
        })
    }

    /// Bytes held by this scratch.
    pub fn bytes(&self) -> usize {
        let c = &self.common;
        4 * (c.x.len() + c.xn.len() + c.proj.len() + c.rope_cache.len())
            + c.act.len()
            + self.mha.as_ref().map_or(0, |s| s.bytes())
            + self.mla.as_ref().map_or(0, |s| s.bytes())
            + self.ffn.bytes()
            + self.moe.as_ref().map_or(0, |s| s.bytes())
            + self.indexer.as_ref().map_or(0, |s| s.bytes())
            + self.dsv4.as_ref().map_or(0, |s| s.bytes())
    }
}

pub struct Model {
    pub file: GgufFile,
    pub hp: HParams,
    /// Embeddings, output head, RoPE frequency factors.
    pub weights: Weights,
    pub layers: Layers,
    pub vocab: Vocab,
    /// Total parameter count (all tensors).
    pub n_params: u64,
    /// Bytes of tensor data.
    pub size_bytes: u64,
    /// Loaded with `vocab_only`: hyper-parameters and vocabulary, no weights (no contexts).
    pub vocab_only: bool,
    /// The matrices repacked at load ([`Model::repack`]), if any.
    pub packed: Option<Packed>,
}

impl Model {
    /// Loads a model file (the first shard of a split model brings the others).
    pub fn load(path: &Path, mmap: bool) -> Result<Model, String> {
        Self::load_source(Source::File(path), mmap)
    }

    pub fn load_source(source: Source<'_>, mmap: bool) -> Result<Model, String> {
        Self::load_source_opts(source, mmap, true)
    }

    /// As [`Model::load_source`]; `repack`: llama.h's `use_extra_bufts` ([`Model::repack`]).
    pub fn load_source_opts(source: Source<'_>, mmap: bool, repack: bool) -> Result<Model, String> {
        let mut model = Self::from_file(GgufFile::open_source(source, mmap)?)?;
        if repack {
            model.repack()?;
        }
        Ok(model)
    }

    /// Only the vocabulary and hyper-parameters (llama.h's `vocab_only`): tensors are neither
    /// needed nor read, and no context can be made from the result.
    pub fn load_vocab_only(source: Source<'_>, mmap: bool) -> Result<Model, String> {
        let file = GgufFile::open_source(source, mmap)?;
        let vocab = Vocab::from_gguf(&file)?;
        let hp = HParams::from_gguf(&file, vocab.n_tokens())?;
        crate::sys::stats::MODELS.add(1);
        Ok(Model { file, hp, weights: Weights::absent(), layers: Layers::None, vocab, n_params: 0, size_bytes: 0, vocab_only: true, packed: None })
    }

    /// Loads and brings every tensor's bytes into memory (page by page, in file order),
    /// reporting the fraction done to `progress`; a `false` from it cancels the load.
    /// Reading the weights up front is what makes a progress report honest for a mapped
    /// file, and it takes the page faults off the first decode.
    /// `repack`: as in [`Model::load_source_opts`] (repacked matrices are read by the repack,
    /// their file pages not touched again).
    pub fn load_with_progress(source: Source<'_>, mmap: bool, repack: bool, progress: &mut dyn FnMut(f32) -> bool) -> Result<Model, String> {
        let model = Self::load_source_opts(source, mmap, repack)?;
        if !progress(0.0) {
            return Err("loading cancelled by the progress callback".into());
        }
        let total = model.size_bytes.max(1) as f64;
        let mut done = 0u64;
        let mut last_report = 0.0f32;
        for t in model.file.tensors() {
            // (a repacked tensor's file pages were read by the repack and given back: not again)
            if !model.packed.as_ref().is_some_and(|p| p.contains(t.shard, t.file_offset)) {
                let data = model.file.tensor_data(t);
                let mut sum = 0u8;
                for page in data.chunks(4096) {
                    sum = sum.wrapping_add(page[0]);
                }
                std::hint::black_box(sum);
            }
            done += t.n_bytes as u64;
            let frac = (done as f64 / total) as f32;
            if frac - last_report >= 0.01 || done as f64 >= total {
                last_report = frac;
                if !progress(frac.min(1.0)) {
                    return Err("loading cancelled by the progress callback".into());
                }
            }
        }
        Ok(model)
    }

    pub fn from_file(mut file: GgufFile) -> Result<Model, String> {
        let embd = file.tensor("token_embd.weight").ok_or("missing required tensor 'token_embd.weight'")?;
        if embd.dims.len() != 2 {
            return Err(format!("token_embd.weight has {} dimensions, expected 2", embd.dims.len()));
        }
        let n_vocab = embd.dims[1];
        // The architecture and its hyper-parameters first, as upstream: a file of another
        // architecture is refused for that, not for a vocabulary it lacks.
        let mut hp = HParams::from_gguf(&file, n_vocab)?;
        let vocab = Vocab::from_gguf(&file)?;
        if vocab.n_tokens() != n_vocab {
            return Err(format!("vocabulary has {} tokens but token_embd.weight has {n_vocab} rows", vocab.n_tokens()));
        }
        // Counted as the file has them (before any derived tensor).
        let n_params = file.tensors().iter().map(|t| t.n_elements() as u64).sum();
        let size_bytes = file.tensors().iter().map(|t| t.n_bytes as u64).sum();
        // A legacy deepseek2 file runs as upstream b11312 runs it (llama.cpp's numerics, its
        // cache size), or absorbed into MLA's layout with a cache of kv_lora_rank + rope dims
        // per token (for V3/R1 576 values against 40,960) when DEEPSEEK_LEGACY_MLA=absorb.
        if let Some(c) = hp.mla.as_ref().filter(|m| m.legacy).map(|m| m.kv_lora_rank) {
            let absorb = std::env::var("DEEPSEEK_LEGACY_MLA").is_ok_and(|v| v.eq_ignore_ascii_case("absorb"));
            let expanded = hp.n_head * (hp.head_dim_k + hp.head_dim_v);
            if absorb {
                attn_mla::absorb_legacy(&mut file, &hp)?;
                crate::log_info!("llama_model_load: legacy deepseek2 layout (attn_kv_b): split into attn_k_b / attn_v_b and run as MLA (DEEPSEEK_LEGACY_MLA=absorb): {} cached values per token and layer instead of {expanded}", c + hp.n_rot);
            } else {
                if hp.n_head_kv != hp.n_head {
                    return Err(format!("legacy deepseek2 layout: head_count_kv = {} must equal head_count = {} (the keys and values are decompressed per query head)", hp.n_head_kv, hp.n_head));
                }
                hp.mla.as_mut().expect("legacy MLA").expanded = true;
                crate::log_info!("llama_model_load: legacy deepseek2 layout (attn_kv_b): run as llama.cpp runs it, keys and values decompressed per head and cached ({expanded} values per token and layer; DEEPSEEK_LEGACY_MLA=absorb caches {})", c + hp.n_rot);
            }
        }
        let weights = Weights::from_file(&file, &hp)?;
        let layers = match hp.arch {
            Arch::Llama | Arch::Qwen2 => Layers::Llama(llama::load(&file, &hp)?),
            Arch::Deepseek => Layers::Deepseek(deepseek::load(&file, &hp)?),
            Arch::Deepseek2 | Arch::Deepseek32 => {
                let blocks = deepseek2::load(&file, &hp)?;
                // A q_lora_rank that no tensor uses (plain attn_q everywhere) must not size
                // buffers: the file could claim any value.
                if let Some(m) = hp.mla.as_mut() {
                    if blocks.iter().all(|b| matches!(b.attn.q, attn_mla::Query::Direct(_))) {
                        m.q_lora_rank = 0;
                    }
                }
                Layers::Deepseek2(blocks)
            }
            Arch::Deepseek4 => Layers::Deepseek4(deepseek4::load(&file, &hp)?),
        };
        crate::sys::stats::MODELS.add(1);
        Ok(Model { file, hp, weights, layers, vocab, n_params, size_bytes, vocab_only: false, packed: None })
    }

    /// Moves the whole 2-D weight matrices into one buffer on huge pages, repacking those our
    /// kernels multiply faster in another layout (see [`Packed`]): what llama.h's
    /// `use_extra_bufts` (default true) asks for. Reads those matrices once; their file pages
    /// are then released.
    pub fn repack(&mut self) -> Result<(), String> {
        use crate::kernels::simd;
        use crate::quant::interleave;
        if self.packed.is_some() || self.vocab_only {
            return Ok(());
        }
        use crate::quant::Repacked;
        // (matrix, interleaved): whole 2-D matrices, then expert stacks, each stack as one
        // matrix of all its experts' rows (whole four-row groups when one expert's rows are)
        let interleaves = |m: &Mat| matches!(m.repacked, Repacked::MulMat | Repacked::MulMatId) && interleave::can_interleave(m.ty, m.rows) && simd::gemv_fns_interleaved(m.ty).is_some();
        let tensors: std::collections::HashSet<(usize, usize, usize)> = self.file.tensors().iter().map(|t| (t.shard, t.file_offset, t.n_bytes)).collect();
        // every other whole 2-D matrix too, copied as it is: streamed from huge pages, decode
        // reads it faster (the hardware prefetchers stop at 4 KiB page boundaries)
        let whole = |m: &Mat| m.repacked != Repacked::MulMatId && tensors.contains(&(m.shard, m.offset, m.n_bytes));
        let mut mats: Vec<(Mat, bool)> = self.layers.mats().into_iter().chain([&self.weights.output]).filter(|m| (m.repacked == Repacked::MulMat && interleaves(m)) || whole(m)).map(|m| (m.clone(), interleaves(m))).collect();
        let sum = |v: &[(Mat, bool)]| v.iter().try_fold(0usize, |a, (m, _)| a.checked_add(m.n_bytes.next_multiple_of(64)));
        // the expert stacks, if all of it fits in the memory available with a GiB to spare
        // (else they stay mapped: a model larger than RAM runs from the page cache)
        let stacks: Vec<(Mat, bool)> = self
            .layers
            .stacks()
            .into_iter()
            .filter(|s| tensors.contains(&(s.first.shard, s.first.offset, s.first.n_bytes * s.count)))
            .map(|s| (Mat { rows: s.first.rows * s.count, n_bytes: s.first.n_bytes * s.count, ..s.first.clone() }, interleaves(&s.first)))
            .collect();
        let (mats_bytes, stacks_bytes) = (sum(&mats).ok_or("repacked weights overflow")?, sum(&stacks).ok_or("repacked weights overflow")?);
        let (mut n_stacks, mut n_il_stacks) = (0, 0);
        if !stacks.is_empty() {
            let avail = crate::sys::pages::available_memory();
            let need = mats_bytes.saturating_add(stacks_bytes).saturating_add(1 << 30);
            match avail {
                Some(a) if need > a => crate::log_info!("llama_model_load: the expert stacks ({:.1} MiB) stay in the file: {:.1} MiB of memory available", stacks_bytes as f64 / (1u64 << 20) as f64, a as f64 / (1u64 << 20) as f64),
                _ => {
                    n_stacks = stacks.len();
                    n_il_stacks = stacks.iter().filter(|s| s.1).count();
                    mats.extend(stacks);
                }
            }
        }
        mats.sort_by_key(|(m, _)| (m.shard, m.offset));
        mats.dedup_by_key(|(m, _)| (m.shard, m.offset));
        if mats.is_empty() {
            return Ok(());
        }
        let total = sum(&mats).ok_or("repacked weights overflow")?;
        let buf = crate::sys::pages::Pages::<u8>::zeroed(total, "repacked weights")?;
        // (DEEPSEEK_HUGE_PAGES=0: 4 KiB pages, for a faster first load where fresh huge pages
        // are slow to come by — in a VM whose memory the host backs lazily, 1.8 against 0.7 s
        // for the 1.5B model — at the price of generation speed: 21 against 24–25 tok/s, one
        // thread, AVX2)
        if std::env::var("DEEPSEEK_HUGE_PAGES").map_or(true, |v| v != "0") {
            buf.advise_huge();
        }
        // (shard, offset, bytes, bytes per unit a thread takes whole, columns, interleaved, at)
        let mut at = 0;
        let jobs: Vec<(usize, usize, usize, usize, usize, bool, usize)> = mats
            .iter()
            .map(|&(ref m, il)| {
                let rb = m.n_bytes / m.rows.max(1);
                let job = (m.shard, m.offset, m.n_bytes, if il { interleave::GROUP_ROWS * rb } else { rb }, m.cols, il, at);
                at += m.n_bytes.next_multiple_of(64);
                job
            })
            .collect();
        // One thread per core (up to 8) for a large model: a matrix is read from the page cache
        // and written to fresh pages at a few GB/s per core. All take their share of each matrix,
        // then its file pages go (resident memory never holds both copies of more than one
        // matrix). The threads are made once per load.
        let threads = if total < 8 << 20 { 1 } else { std::thread::available_parallelism().map_or(1, |n| n.get()).min(8) };
        let barrier = std::sync::Barrier::new(threads);
        let dst_base = buf.as_ptr() as usize;
        let file = &self.file;
        let work = |k: usize| {
            for &(shard, offset, n_bytes, unit, cols, il, at) in &jobs {
                let units = n_bytes / unit.max(1);
                let per = units.div_ceil(threads);
                let (a, b) = ((k * per).min(units) * unit, ((k + 1) * per).min(units) * unit);
                if a < b {
                    let src = &file.shard_bytes(shard)[offset + a..offset + b];
                    // SAFETY: bytes at + a .. at + b of the buffer (inside `total`), written by
                    // this thread only: the threads' shares of a matrix are disjoint, the
                    // matrices' places too.
                    let dst = unsafe { std::slice::from_raw_parts_mut((dst_base as *mut u8).add(at + a), b - a) };
                    if il {
                        interleave::interleave_q4_k(src, (b - a) / unit * interleave::GROUP_ROWS, cols, dst);
                    } else {
                        dst.copy_from_slice(src);
                    }
                }
                if threads > 1 {
                    barrier.wait();
                }
                if k == 0 {
                    // SAFETY: every thread is done with this matrix's file bytes (the barrier),
                    // and from now on it is read from the buffer only (`Model::mat`).
                    unsafe { file.discard(shard, offset..offset + n_bytes) };
                }
            }
        };
        if threads == 1 {
            // (no scope: it would give the calling thread a std handle, kept until the
            // thread exits — a C program's main thread never frees it)
            work(0);
        } else {
            std::thread::scope(|s| {
                for k in 1..threads {
                    let work = &work;
                    s.spawn(move || work(k));
                }
                work(0);
            });
        }
        let ranges: Vec<(usize, std::ops::Range<usize>)> = jobs.iter().map(|j| (j.0, j.1..j.1 + j.2)).collect();
        self.file.mark_released(&ranges);
        let index: Vec<(usize, usize, usize, usize, bool)> = jobs.iter().map(|j| (j.0, j.1, j.2, j.6, j.5)).collect();
        let n_il = index.iter().filter(|e| e.4).count();
        crate::log_info!("llama_model_load: {} weight tensors ({n_stacks} of them expert stacks, {:.1} MiB) moved to huge pages, {n_il} of them (Q4_K) into 4-row interleaved groups (use_extra_bufts)", index.len(), total as f64 / (1u64 << 20) as f64);
        self.packed = Some(Packed { bytes: crate::sys::bytes::FileBytes::from_pages(buf), index, stacks: (n_stacks, n_il_stacks) });
        Ok(())
    }

    /// A weight matrix view. Every recipe sums its products in the reference's (upstream's)
    /// order: the MoE routers pick experts on margins that a rounding can flip, so llama.cpp's
    /// numerics there means its bits; and a prompt's last token then gets the same logits in a
    /// prefill batch as decoded alone after a reused prefix (the serving engine's walkthrough
    /// checks that on a real Q4_1 model, whose fast AVX2 panel flipped a greedy token).
    pub fn mat(&self, m: &Mat) -> crate::kernels::matmul::WeightMatrix<'_> {
        use crate::kernels::simd::SumOrder;
        let order = match self.hp.arch {
            Arch::Llama | Arch::Qwen2 | Arch::Deepseek | Arch::Deepseek2 | Arch::Deepseek32 | Arch::Deepseek4 => SumOrder::Reference,
        };
        use crate::kernels::matmul::Layout;
        let packed = self.packed.as_ref().and_then(|p| p.get(m));
        let (data, layout) = match packed {
            Some(d) => d,
            None => (&self.file.shard_bytes(m.shard)[m.offset..m.offset + m.n_bytes], Layout::Rows),
        };
        crate::kernels::matmul::WeightMatrix { ty: m.ty, rows: m.rows, cols: m.cols, data, order, repacked: m.repacked, layout }
    }

    /// The buffers of this model's forward pass for micro-batches of up to `n_ubatch` tokens,
    /// `n_threads` threads and KV streams of `n_cells` cells.
    /// `types`: the KV cache's key and value types (deepseek4's cache is F16 only).
    pub fn new_scratch(&self, n_ubatch: usize, n_threads: usize, n_cells: usize, types: (crate::quant::GgmlType, crate::quant::GgmlType)) -> Result<Scratch, String> {
        match &self.layers {
            // a vocab-only model's context never decodes: no room at all
            Layers::None => Scratch::new(&self.hp, 0, 0, 0, 0),
            Layers::Llama(b) => llama::scratch(self, b, n_ubatch, n_threads, types),
            Layers::Deepseek(b) => deepseek::scratch(self, b, n_ubatch, n_threads, types),
            Layers::Deepseek2(b) => deepseek2::scratch(self, b, n_ubatch, n_threads, n_cells, types),
            Layers::Deepseek4(l) => deepseek4::scratch(self, l, n_ubatch, n_threads, n_cells),
        }
    }

    /// Whether the recipe can attend non-causally (`llama_set_causal_attn(false)`, embedding
    /// models): the multi-head attention recipes can; MLA and deepseek4 attention cannot.
    /// "ARCH SIZE FTYPE", as `llama_model_desc` writes it.
    pub fn description(&self) -> String {
        let size = if self.n_params >= 1_000_000_000 { format!("{:.1}B", self.n_params as f64 / 1e9) } else { format!("{}M", self.n_params / 1_000_000) };
        format!("{} {} {}", self.hp.arch.name(), size, self.ftype_name())
    }

    /// The file's `general.file_type` by llama.cpp's name ("Q4_K - Medium"), "unknown" without one.
    pub fn ftype_name(&self) -> &'static str {
        match self.file.get_u32("general.file_type") {
            Some(0) => "all F32",
            Some(1) => "F16",
            Some(2) => "Q4_0",
            Some(3) => "Q4_1",
            Some(7) => "Q8_0",
            Some(8) => "Q5_0",
            Some(9) => "Q5_1",
            Some(10) => "Q2_K - Medium",
            Some(11) => "Q3_K - Small",
            Some(12) => "Q3_K - Medium",
            Some(13) => "Q3_K - Large",
            Some(14) => "Q4_K - Small",
            Some(15) => "Q4_K - Medium",
            Some(16) => "Q5_K - Small",
            Some(17) => "Q5_K - Medium",
            Some(18) => "Q6_K",
            Some(32) => "BF16",
            _ => "unknown",
        }
    }

    pub fn supports_non_causal(&self) -> bool {
        matches!(self.layers, Layers::Llama(_) | Layers::Deepseek(_))
    }

    /// Runs the micro-batch through the model: writes K/V (or MLA rows) of its tokens into
    /// their cells, and the logits (and, if asked, the final hidden states) of `ub.out_rows`
    /// into `logits`/`embd`. `s` must come from `new_scratch` of this model.
    #[allow(clippy::too_many_arguments)]
    pub fn forward(&self, ub: &UBatch<'_>, kv: &mut KvCache, s: &mut Scratch, pool: &ThreadPool, rope: &RopeParams, logits: &mut [f32], embd: Option<&mut [f32]>) {
        assert!(ub.tokens.len() <= s.common.n_ubatch);
        match &self.layers {
            Layers::None => unreachable!("contexts are not made from vocab-only models"),
            Layers::Llama(b) => llama::forward(self, b, ub, kv, s, pool, rope, logits, embd),
            Layers::Deepseek(b) => deepseek::forward(self, b, ub, kv, s, pool, rope, logits, embd),
            Layers::Deepseek2(b) => deepseek2::forward(self, b, ub, kv, s, pool, rope, logits, embd),
            Layers::Deepseek4(l) => deepseek4::forward(self, l, ub, kv, s, pool, rope, logits, embd),
        }
    }
}

impl Drop for Model {
    fn drop(&mut self) {
        crate::sys::stats::MODELS.add(-1);
    }
}
