//! context: one inference session on a shared model: KV cache, scratch, output buffers and
//! worker threads, all owned here and freed on drop. Used by one thread at a time (llama.h's
//! contract), so `decode` takes `&mut self` and needs no lock. What other threads may read
//! while it decodes is in its `ContextMonitor`.

pub mod monitor;

use std::sync::Arc;
use std::time::Instant;

use crate::batch::{Batch, BatchInput};
use crate::kernels::rope::RopeParams;
use crate::kv::{CacheType, KvCache, KvShape};
use crate::model::{Scratch, UBatch};
use crate::model::hparams::{Pooling, RopeScaling};
use crate::model::Model;
use crate::sys::stats::{self, Held};
use crate::threads::ThreadPool;
pub use monitor::{ContextMonitor, ContextReading};

/// What a caller may configure (the engine's view of llama_context_params).
#[derive(Clone, Debug)]
pub struct ContextParams {
    pub n_ctx: u32,
    pub n_batch: u32,
    pub n_ubatch: u32,
    pub n_seq_max: u32,
    pub n_threads: i32,
    pub n_threads_batch: i32,
    pub rope_scaling: Option<RopeScaling>,
    pub rope_freq_base: f32,
    pub rope_freq_scale: f32,
    pub yarn_ext_factor: f32,
    pub yarn_attn_factor: f32,
    pub yarn_beta_fast: f32,
    pub yarn_beta_slow: f32,
    pub yarn_orig_ctx: u32,
    pub embeddings: bool,
    pub kv_unified: bool,
    /// None: as the model says (`{arch}.pooling_type`, NONE when it does not).
    pub pooling: Option<Pooling>,
    /// None: as the model says (`{arch}.attention.causal`).
    pub causal_attn: Option<bool>,
    /// The KV cache's key and value types (`type_k`, `type_v`; F16 by default).
    pub type_k: CacheType,
    pub type_v: CacheType,
}

impl Default for ContextParams {
    /// llama_context_default_params' sizes; 0 and -1 mean "as the model says".
    fn default() -> ContextParams {
        ContextParams {
            n_ctx: 512,
            n_batch: 2048,
            n_ubatch: 512,
            n_seq_max: 1,
            n_threads: 4,
            n_threads_batch: 4,
            rope_scaling: None,
            rope_freq_base: 0.0,
            rope_freq_scale: 0.0,
            yarn_ext_factor: -1.0,
            yarn_attn_factor: -1.0,
            yarn_beta_fast: -1.0,
            yarn_beta_slow: -1.0,
            yarn_orig_ctx: 0,
            embeddings: false,
            kv_unified: false,
            pooling: None,
            causal_attn: None,
            type_k: CacheType::F16,
            type_v: CacheType::F16,
        }
    }
}

/// Outcome of a decode, with llama_decode's return values.
#[derive(Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// -1: the batch is invalid (reason logged).
    Invalid(String),
    /// 1: no KV slot for the batch.
    NoSlot,
    /// 2: aborted by the abort callback.
    Aborted,
}

pub type AbortCheck<'a> = &'a dyn Fn() -> bool;

pub struct Context {
    pub model: Arc<Model>,
    pub n_ctx: u32,
    pub n_ctx_seq: u32,
    pub n_batch: u32,
    pub n_ubatch: u32,
    pub n_seq_max: u32,
    pub n_threads: i32,
    pub n_threads_batch: i32,
    pub embeddings: bool,
    /// How embeddings are pooled per sequence.
    pub pooling: Pooling,
    /// Causal attention (false: every token of a sequence sees all of its cells; only where
    /// [`Model::supports_non_causal`]).
    causal_attn: bool,
    /// llama_set_warmup: the next decodes are warm-up runs (see [`Context::decode`]).
    pub warmup: bool,
    pub kv: KvCache,
    rope: RopeParams,
    scratch: Scratch,
    pool: ThreadPool,
    batch: Batch,
    /// Logits of the last decode's outputs, row-major n_outputs × n_vocab.
    logits: Vec<f32>,
    /// Final hidden states of the last decode's outputs (when embeddings are on).
    embd: Vec<f32>,
    /// The pooled embedding of each sequence the last decode had (n_seq_max × n_embd), and
    /// which sequences have one.
    embd_seq: Vec<f32>,
    embd_seq_set: Vec<bool>,
    /// Per sequence, during a decode: its tokens in the batch (MEAN), the position pooled so
    /// far (CLS, LAST).
    embd_seq_count: Vec<u32>,
    embd_seq_pos: Vec<i32>,
    /// Each micro-batch token's attention limit (its position, or i32::MAX when non-causal).
    ub_limits: Vec<i32>,
    /// Batch index → output row, -1 for tokens without output.
    output_ids: Vec<i32>,
    n_outputs: usize,
    /// Cells claimed by the decode in progress (to roll back on failure).
    claimed: Vec<usize>,
    ub_cells: Vec<usize>,
    ub_out: Vec<usize>,
    pub n_decode_calls: u64,
    pub n_tokens_processed: u64,
    monitor: Arc<ContextMonitor>,
    /// Scratch plus output buffers, on the scratch gauge.
    held_scratch: Held,
}

const PAD: u32 = 256;

/// upstream's get_mscale: YaRN's magnitude correction for a scale factor.
fn yarn_mscale(scale: f32, mscale: f32) -> f32 {
    if scale <= 1.0 {
        1.0
    } else {
        0.1 * mscale * scale.ln() + 1.0
    }
}

/// The KV cache types a model can have, as upstream's `llama_init_from_model` allows them: MLA
/// models (their values are part of the key rows) need equal types; a block type must divide
/// the heads (for MLA also the latent the values are read from). deepseek32's indexer keys and
/// deepseek4's compressed caches live beside the keys in F16 here, so those two take F16 only.
fn check_cache_types(model: &Model, k: CacheType, v: CacheType) -> Result<(), String> {
    let hp = &model.hp;
    if k == CacheType::F16 && v == CacheType::F16 {
        return Ok(());
    }
    if hp.indexer.is_some() || hp.dsv4.is_some() {
        return Err(format!("{} keeps its indexer keys in the KV cache's rows, which this library holds in F16 only: type_k = {} / type_v = {} are not supported for it (use F16)", hp.arch.name(), k.name(), v.name()));
    }
    if !hp.kv_with_v() && k != v {
        return Err(format!("the model does not support different K ({}) and V ({}) cache types (its attention reads values from the key rows)", k.name(), v.name()));
    }
    let (_, head_dim) = hp.kv_cache_heads();
    let v_dim = if hp.kv_with_v() { hp.head_dim_v } else { hp.mla.as_ref().map_or(head_dim, |m| m.kv_lora_rank) };
    for (what, t, n) in [("K", k, head_dim), ("V", v, v_dim)] {
        if n % t.block_len() != 0 {
            return Err(format!("{what} cache type {} with block size {} does not divide n_embd_head_{}={n}", t.name(), t.block_len(), what.to_lowercase()));
        }
    }
    Ok(())
}

/// `n` rounded up to the cache's padding, or an error when that does not fit in a u32.
fn pad(n: u32) -> Result<u32, String> {
    n.checked_next_multiple_of(PAD).ok_or_else(|| format!("n_ctx = {n} is too large"))
}

impl Context {
    pub fn new(model: Arc<Model>, p: &ContextParams) -> Result<Context, String> {
        let hp = &model.hp;
        // A vocab-only model gets a context as upstream gives one (its tokenizer tests make
        // one): no cache and no scratch; decode refuses with the reason.
        if p.n_batch == 0 && p.n_ubatch == 0 {
            return Err("n_batch and n_ubatch cannot both be zero".into());
        }
        if p.n_seq_max == 0 || p.n_seq_max as usize > crate::kv::seqset::MAX_SEQ {
            return Err(format!("n_seq_max = {} must be between 1 and {}", p.n_seq_max, crate::kv::seqset::MAX_SEQ));
        }
        let n_ctx_req = if p.n_ctx == 0 { hp.n_ctx_train } else { p.n_ctx };
        if n_ctx_req == 0 {
            return Err("n_ctx and the model's context_length cannot both be zero".into());
        }
        let n_batch = n_ctx_req.min(p.n_batch);
        let n_ubatch = n_batch.min(if p.n_ubatch == 0 { p.n_batch } else { p.n_ubatch });
        let mut n_ctx = pad(n_ctx_req)?;
        // deepseek4's caches keep a stream per sequence even when asked for one unified stream
        // (upstream's llama_kv_cache_dsv4 does the same)
        let (n_ctx_seq, n_stream) = if p.kv_unified && hp.dsv4.is_none() {
            (n_ctx, 1)
        } else {
            let per = pad(n_ctx / p.n_seq_max)?;
            n_ctx = per.checked_mul(p.n_seq_max).ok_or("n_ctx overflows")?;
            (per, p.n_seq_max as usize)
        };
        let pooling = p.pooling.unwrap_or(hp.pooling);
        if p.pooling.is_some_and(|q| q != hp.pooling) {
            crate::log_warn!("llama_init_from_model: model default pooling_type is [{}], but [{}] was specified", hp.pooling as i32, pooling as i32);
        }
        if pooling == Pooling::Rank && hp.n_cls_out > hp.n_embd {
            return Err(format!("pooling_type RANK: the model declares {} classifier labels, more than its {} hidden values (it has no classification head)", hp.n_cls_out, hp.n_embd));
        }
        let causal_attn = p.causal_attn.unwrap_or(hp.causal_attn);
        if !causal_attn && !model.supports_non_causal() && !model.vocab_only {
            return Err(format!("non-causal attention is not supported for {} (only the multi-head attention architectures have it)", hp.arch.name()));
        }
        let max_threads = p.n_threads.max(p.n_threads_batch).max(1) as usize;
        if max_threads > 512 {
            return Err(format!("n_threads = {max_threads} is beyond what this library supports (512)"));
        }
        let scaling = p.rope_scaling.unwrap_or(hp.rope_scaling);
        let mut freq_scale = if p.rope_freq_scale == 0.0 { hp.rope_freq_scale } else { p.rope_freq_scale };
        if scaling == RopeScaling::None {
            freq_scale = 1.0;
        }
        let ext_factor = if p.yarn_ext_factor >= 0.0 {
            p.yarn_ext_factor
        } else if scaling == RopeScaling::Yarn {
            1.0
        } else {
            0.0
        };
        // As upstream's llama_context: with YaRN the magnitude factor is derived from the
        // model (mscale / mscale_all_dim) and the kernel's own 1 + 0.1·ln(f) is cancelled.
        let mut attn_factor = if p.yarn_attn_factor >= 0.0 { p.yarn_attn_factor } else { hp.yarn_attn_factor };
        if ext_factor != 0.0 {
            let factor = 1.0 / freq_scale;
            attn_factor = if hp.rope_yarn_log_mul != 0.0 {
                let all_dims = hp.rope_yarn_log_mul;
                let mscale = if hp.yarn_mscale_all_dims && all_dims != 1.0 { all_dims } else { 1.0 };
                yarn_mscale(factor, mscale) / yarn_mscale(factor, all_dims)
            } else {
                yarn_mscale(factor, 1.0)
            };
            attn_factor *= 1.0 / (1.0 + 0.1 * factor.ln());
        }
        attn_factor *= hp.rope_attn_factor;
        let rope = RopeParams {
            n_dims: hp.n_rot,
            freq_base: if p.rope_freq_base == 0.0 { hp.rope_freq_base } else { p.rope_freq_base },
            freq_scale,
            ext_factor,
            attn_factor,
            beta_fast: if p.yarn_beta_fast >= 0.0 { p.yarn_beta_fast } else { hp.yarn_beta_fast },
            beta_slow: if p.yarn_beta_slow >= 0.0 { p.yarn_beta_slow } else { hp.yarn_beta_slow },
            n_ctx_orig: if p.yarn_orig_ctx != 0 { p.yarn_orig_ctx } else { hp.n_ctx_orig_yarn },
            mode: hp.arch.rope_mode(),
        };
        let (n_head_kv, head_dim) = hp.kv_cache_heads();
        check_cache_types(&model, p.type_k, p.type_v)?;
        let shape = KvShape {
            n_layer: hp.n_layer,
            n_head_kv,
            head_dim,
            // MLA: no V buffer; its row size still sizes the (empty) V type check
            head_dim_v: if hp.kv_with_v() { hp.head_dim_v } else { head_dim },
            n_stream,
            n_cells: n_ctx_seq as usize,
            n_seq_max: p.n_seq_max as usize,
            with_v: hp.kv_with_v(),
            rope_offset: hp.kv_rope_offset(),
            indexer_key: hp.kv_indexer_key(),
            dsv4: hp.dsv4.as_ref().map(|d| crate::kv::dsv4::Dsv4Shape {
                ratios: d.ratios.clone(),
                head: hp.head_dim_k,
                idx_head: hp.indexer.as_ref().map_or(0, |x| x.head_size),
                n_stream,
                n_cells: n_ctx_seq as usize,
            }),
            k_type: p.type_k,
            v_type: p.type_v,
            // upstream rotates through its standard KV cache only, not MLA's key-only cache
            k_rot: if hp.kv_with_v() { crate::kv::types::key_rotation(p.type_k, hp.head_dim_k) } else { 0 },
        };
        let mut shape = shape;
        if model.vocab_only {
            shape.n_layer = 0;
            shape.dsv4 = None;
        }
        let kv = KvCache::new(shape, rope, model.weights.rope_freqs.clone())?;
        let scratch = model.new_scratch(n_ubatch as usize, max_threads, n_ctx_seq as usize, (p.type_k.ggml(), p.type_v.ggml()))?;
        let pool = ThreadPool::new(max_threads)?;
        crate::kernels::matmul::reserve_panels(&pool, scratch.panel_bytes);
        let scratch_bytes = scratch.bytes();
        let mut monitor = ContextMonitor::new(kv.seq_table().clone(), n_ctx, p.n_seq_max, kv.bytes());
        monitor.pos_min_is_max = kv.dsv4.is_some();
        let monitor = Arc::new(monitor);
        monitor.set_scratch_bytes(scratch_bytes);
        stats::CONTEXTS.add(1);
        Ok(Context {
            n_ctx,
            n_ctx_seq,
            n_batch,
            n_ubatch,
            n_seq_max: p.n_seq_max,
            n_threads: p.n_threads.max(1),
            n_threads_batch: p.n_threads_batch.max(1),
            embeddings: p.embeddings,
            pooling,
            causal_attn,
            warmup: false,
            kv,
            rope,
            scratch,
            pool,
            batch: Batch::default(),
            logits: Vec::new(),
            embd: Vec::new(),
            embd_seq: Vec::new(),
            embd_seq_set: vec![false; p.n_seq_max as usize],
            embd_seq_count: vec![0; p.n_seq_max as usize],
            embd_seq_pos: vec![0; p.n_seq_max as usize],
            ub_limits: Vec::with_capacity(n_ubatch as usize),
            output_ids: Vec::new(),
            n_outputs: 0,
            claimed: Vec::new(),
            ub_cells: Vec::new(),
            ub_out: Vec::new(),
            n_decode_calls: 0,
            n_tokens_processed: 0,
            monitor,
            held_scratch: Held::new(&stats::SCRATCH_BYTES, scratch_bytes),
            model,
        })
    }

    /// Bytes this context's worker threads have allocated since they started (see
    /// [`ThreadPool::workers_allocated_bytes`]); with the caller's own counter
    /// (`sys::alloc::thread_allocated_bytes`) it covers every thread a decode runs on.
    pub fn workers_allocated_bytes(&self) -> u64 {
        self.pool.workers_allocated_bytes()
    }

    pub fn set_n_threads(&mut self, n_threads: i32, n_threads_batch: i32) {
        let max = self.pool.n_threads() as i32;
        self.n_threads = n_threads.clamp(1, max);
        self.n_threads_batch = n_threads_batch.clamp(1, max);
    }

    /// Pins worker thread i (1..n_threads) to the i-th CPU, wrapping, of the CPUs the calling
    /// thread may run on (so with as many threads as CPUs each worker has one to itself and
    /// the caller, thread 0, is left on the first one by the scheduler); `false` gives the
    /// workers that whole set again. The calling thread's own affinity is not changed.
    pub fn pin_threads(&mut self, pin: bool) -> Result<(), String> {
        let cpus = crate::sys::affinity::allowed_cpus()?;
        if cpus.is_empty() {
            return Err("the calling thread may run on no CPU".into());
        }
        let failure = std::sync::OnceLock::new();
        self.pool.run_on_workers(&|ith| {
            let r = if pin { crate::sys::affinity::set_current_thread_cpus(&[cpus[ith % cpus.len()]]) } else { crate::sys::affinity::set_current_thread_cpus(&cpus) };
            if let Err(e) = r {
                let _ = failure.set(format!("worker {ith}: {e}"));
            }
        });
        match failure.into_inner() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// The part of this context other threads may read while it decodes.
    pub fn monitor(&self) -> &Arc<ContextMonitor> {
        &self.monitor
    }

    pub fn n_outputs(&self) -> usize {
        self.n_outputs
    }

    /// Batch index → output row of the last decode (-1 = no output).
    pub fn output_ids(&self) -> &[i32] {
        &self.output_ids
    }

    /// Puts back the outputs of a saved state.
    pub fn restore_outputs(&mut self, n_outputs: usize, ids: &[i32], logits: &[f32], embd: &[f32]) -> Result<(), String> {
        self.reserve_outputs(n_outputs)?;
        self.logits[..logits.len()].copy_from_slice(logits);
        if self.embeddings && embd.len() == n_outputs * self.model.hp.n_embd {
            self.embd[..embd.len()].copy_from_slice(embd);
        }
        self.output_ids.clear();
        self.output_ids.extend_from_slice(ids);
        self.n_outputs = n_outputs;
        Ok(())
    }

    /// All logits of the last decode (n_outputs × n_vocab).
    pub fn logits(&self) -> &[f32] {
        &self.logits[..self.n_outputs * self.model.hp.n_vocab]
    }

    pub fn embeddings_all(&self) -> &[f32] {
        &self.embd[..if self.embeddings { self.n_outputs * self.model.hp.n_embd } else { 0 }]
    }

    /// The pooled embedding of sequence `seq` from the last decode (None when the context does
    /// not pool, or the last decode had no token of that sequence), as upstream's
    /// `llama_get_embeddings_seq`.
    pub fn embeddings_seq(&self, seq: i32) -> Option<&[f32]> {
        let e = self.model.hp.n_embd;
        let s = usize::try_from(seq).ok()?;
        // RANK: n_cls_out values per sequence (upstream's `llama_get_embeddings_seq` contract),
        // each sequence's own (upstream, for a model without a classification head, reads them
        // at offset `n_cls_out * seq_idx` of the pooled [n_embd, n_seqs] tensor: from the first
        // sequence's vector for all but the first of a micro-batch's sequences)
        let n = if self.pooling == Pooling::Rank { self.model.hp.n_cls_out } else { e };
        (self.embeddings && self.pooling != Pooling::None && *self.embd_seq_set.get(s)?).then(|| &self.embd_seq[s * e..s * e + n])
    }

    pub fn causal_attn(&self) -> bool {
        self.causal_attn
    }

    /// llama_set_causal_attn: takes effect from the next decode.
    pub fn set_causal_attn(&mut self, causal: bool) -> Result<(), String> {
        if !causal && !self.model.supports_non_causal() {
            return Err(format!("non-causal attention is not supported for {} (only the multi-head attention architectures have it)", self.model.hp.arch.name()));
        }
        self.causal_attn = causal;
        Ok(())
    }

    /// The output row of batch index `i` (negative counts from the last output, as upstream).
    pub fn output_row(&self, i: i32) -> Result<usize, String> {
        if i < 0 {
            let j = self.n_outputs as i64 + i as i64;
            if j < 0 {
                return Err(format!("negative index out of range [-{}, 0)", self.n_outputs));
            }
            return Ok(j as usize);
        }
        match self.output_ids.get(i as usize) {
            None => Err(format!("out of range [0, {})", self.output_ids.len())),
            Some(&r) if r < 0 => Err(format!("batch.logits[{i}] != true")),
            Some(&r) => Ok(r as usize),
        }
    }

    pub fn logits_row(&self, i: i32) -> Result<&[f32], String> {
        let r = self.output_row(i)?;
        let v = self.model.hp.n_vocab;
        Ok(&self.logits[r * v..(r + 1) * v])
    }

    pub fn embeddings_row(&self, i: i32) -> Result<&[f32], String> {
        if !self.embeddings {
            return Err("embeddings are not enabled for this context".into());
        }
        let r = self.output_row(i)?;
        let e = self.model.hp.n_embd;
        Ok(&self.embd[r * e..(r + 1) * e])
    }

    fn reserve_outputs(&mut self, n_outputs: usize) -> Result<(), String> {
        let hp = &self.model.hp;
        let need = n_outputs.checked_mul(hp.n_vocab).ok_or("output buffer size overflows")?;
        if self.logits.len() < need {
            self.logits.try_reserve_exact(need - self.logits.len()).map_err(|_| format!("cannot allocate logits for {n_outputs} outputs"))?;
            self.logits.resize(need, 0.0);
        }
        if self.embeddings && self.embd.len() < n_outputs * hp.n_embd {
            let need = n_outputs * hp.n_embd;
            self.embd.try_reserve_exact(need - self.embd.len()).map_err(|_| "cannot allocate the embeddings buffer".to_string())?;
            self.embd.resize(need, 0.0);
        }
        let pooled = self.embd_seq_set.len() * hp.n_embd;
        if self.embeddings && self.pooling != Pooling::None && self.embd_seq.len() < pooled {
            self.embd_seq.try_reserve_exact(pooled).map_err(|_| "cannot allocate the pooled embeddings".to_string())?;
            self.embd_seq.resize(pooled, 0.0);
        }
        let bytes = self.scratch_bytes() + 4 * (self.logits.capacity() + self.embd.capacity() + self.embd_seq.capacity()) + 4 * self.output_ids.capacity();
        if bytes != self.held_scratch.amount() {
            self.held_scratch = Held::new(&stats::SCRATCH_BYTES, bytes);
            self.monitor.set_scratch_bytes(bytes);
        }
        Ok(())
    }

    fn scratch_bytes(&self) -> usize {
        self.scratch.bytes()
    }

    /// llama_decode: validates the batch, places its tokens in the KV cache and runs the model
    /// over it in micro-batches. On failure the cache is left as it was.
    /// Starts (or stops) recording every MoE routing decision of the following decodes (for
    /// tests that compare expert choices with llama.cpp's); a model without MoE records none.
    pub fn trace_routing(&mut self, on: bool) {
        if let Some(m) = self.scratch.moe.as_mut() {
            m.trace = on.then(Vec::new);
        }
    }

    /// The routing decisions recorded since the last call, in the order they were made (per
    /// micro-batch: block by block, rows ascending within a block).
    pub fn take_routing(&mut self) -> Vec<crate::model::moe::RouteRecord> {
        self.scratch.moe.as_mut().and_then(|m| m.trace.as_mut()).map(std::mem::take).unwrap_or_default()
    }

    pub fn decode(&mut self, input: &BatchInput<'_, '_>, abort: Option<AbortCheck<'_>>) -> Result<(), DecodeError> {
        let started = Instant::now();
        if self.model.vocab_only {
            return Err(DecodeError::Invalid("the model was loaded with vocab_only: this context cannot decode".into()));
        }
        let n = input.tokens.len();
        if n == 0 {
            return Err(DecodeError::Invalid("n_tokens == 0".into()));
        }
        if n > self.n_batch as usize {
            return Err(DecodeError::Invalid(format!("n_tokens = {n} exceeds n_batch = {}", self.n_batch)));
        }
        // Upstream's warm-up runs use every expert, so that all of a MoE model's weights are read
        // once; ours reads every page of the weights before the (normal) decode.
        if self.warmup && self.model.hp.moe.is_some() {
            self.model.file.touch();
        }
        if !self.causal_attn && n > self.n_ubatch as usize {
            return Err(DecodeError::Invalid(format!("non-causal attention requires n_ubatch >= n_tokens (n_ubatch = {}, n_tokens = {n})", self.n_ubatch)));
        }
        let hp = &self.model.hp;
        self.batch
            .load(input, hp.n_vocab, self.n_seq_max as usize, self.kv.shape.n_stream == 1 && self.n_seq_max > 1, &self.kv, self.embeddings)
            .map_err(DecodeError::Invalid)?;
        let n_outputs = self.batch.output.iter().filter(|&&o| o).count();
        self.reserve_outputs(n_outputs).map_err(DecodeError::Invalid)?;
        self.output_ids.clear();
        let mut row = 0;
        for &o in &self.batch.output {
            self.output_ids.push(if o { row } else { -1 });
            row += o as i32;
        }
        self.n_outputs = 0;
        self.embd_seq_set.fill(false);
        if self.embeddings && self.pooling != Pooling::None {
            self.embd_seq_count.fill(0);
            for seqs in &self.batch.seqs {
                for s in seqs.iter() {
                    self.embd_seq_count[s] += 1;
                }
            }
        }
        self.n_decode_calls += 1;
        self.claimed.clear();
        let threads = if n == 1 { self.n_threads } else { self.n_threads_batch };
        self.pool.set_active(threads as usize);

        let ub_size = self.n_ubatch as usize;
        let mut out_row = 0usize;
        for start in (0..n).step_by(ub_size) {
            let end = (start + ub_size).min(n);
            if let Some(check) = abort {
                if check() {
                    self.rollback();
                    return Err(DecodeError::Aborted);
                }
            }
            // Place the micro-batch in the cache.
            self.ub_cells.clear();
            for t in start..end {
                let stream = self.kv.stream_of(self.batch.seq[t]);
                match self.kv.find_free_for(stream, self.batch.seq[t], &self.ub_cells) {
                    Some(c) => self.ub_cells.push(c),
                    None => {
                        self.rollback();
                        return Err(DecodeError::NoSlot);
                    }
                }
            }
            for (i, t) in (start..end).enumerate() {
                self.kv.occupy(self.ub_cells[i], self.batch.pos[t], self.batch.seqs[t]);
                self.claimed.push(self.ub_cells[i]);
            }
            self.ub_out.clear();
            self.ub_out.extend((start..end).filter(|&t| self.batch.output[t]).map(|t| t - start));
            let n_out = self.ub_out.len();
            let v = self.model.hp.n_vocab;
            let e = self.model.hp.n_embd;
            self.ub_limits.clear();
            let causal = self.causal_attn;
            self.ub_limits.extend(self.batch.pos[start..end].iter().map(|&p| if causal { p } else { i32::MAX }));
            let ub = UBatch {
                tokens: &self.batch.tokens[start..end],
                pos: &self.batch.pos[start..end],
                limits: &self.ub_limits,
                cells: &self.ub_cells,
                seq: &self.batch.seq[start..end],
                out_rows: &self.ub_out,
            };
            let logits = &mut self.logits[out_row * v..(out_row + n_out) * v];
            let embd = if self.embeddings { Some(&mut self.embd[out_row * e..(out_row + n_out) * e]) } else { None };
            self.model.forward(&ub, &mut self.kv, &mut self.scratch, &self.pool, &self.rope, logits, embd);
            if self.embeddings && self.pooling != Pooling::None {
                self.pool_ubatch(start..end, out_row);
            }
            out_row += n_out;
            self.n_outputs = out_row;
            self.n_tokens_processed += (end - start) as u64;
        }
        let generation = self.batch.primary_seqs().len() == n;
        self.monitor.record_decode(n, generation, started.elapsed().as_nanos() as u64);
        Ok(())
    }

    /// Pools the micro-batch's hidden states (rows `first_row..` of `embd`, one per token:
    /// embedding contexts output every token) into each sequence's vector, over the whole
    /// batch: MEAN averages the sequence's tokens, CLS takes its lowest position (the first such
    /// token), LAST its highest (the last such token). Upstream pools each micro-batch alone
    /// (the last one a sequence was in wins), which differs only where its split puts a
    /// sequence in several micro-batches (docs/ARCHITECTURE.md, Embeddings).
    fn pool_ubatch(&mut self, tokens: std::ops::Range<usize>, first_row: usize) {
        let e = self.model.hp.n_embd;
        let start = tokens.start;
        for s in 0..self.embd_seq_set.len() {
            let in_seq = |t: &usize| self.batch.seqs[*t].contains(s);
            if !tokens.clone().any(|t| in_seq(&t)) {
                continue;
            }
            let out = &mut self.embd_seq[s * e..(s + 1) * e];
            match self.pooling {
                Pooling::Mean => {
                    let div = 1.0 / self.embd_seq_count[s] as f32;
                    if !self.embd_seq_set[s] {
                        out.fill(0.0);
                    }
                    for t in tokens.clone().filter(in_seq) {
                        let row = &self.embd[(first_row + t - start) * e..][..e];
                        for (o, &x) in out.iter_mut().zip(row) {
                            *o += x * div;
                        }
                    }
                }
                Pooling::Cls | Pooling::Last | Pooling::Rank => {
                    // RANK: upstream pools as LAST under causal attention, as CLS otherwise, and
                    // (no architecture here has a classification head) keeps the pooled hidden
                    // state as it is; `embeddings_seq` returns its first n_cls_out values
                    let last = self.pooling == Pooling::Last || (self.pooling == Pooling::Rank && self.causal_attn);
                    let mut target: Option<(i32, usize)> = None;
                    let pooled = self.embd_seq_set[s].then_some(self.embd_seq_pos[s]);
                    for t in tokens.clone().filter(in_seq) {
                        let p = self.batch.pos[t];
                        let best = target.map(|(tp, _)| tp).or(pooled);
                        if best.is_none_or(|tp| if last { p >= tp } else { p < tp }) {
                            target = Some((p, t));
                        }
                    }
                    if let Some((p, t)) = target {
                        out.copy_from_slice(&self.embd[(first_row + t - start) * e..][..e]);
                        self.embd_seq_pos[s] = p;
                    }
                }
                Pooling::None => unreachable!("not pooled here"),
            }
            self.embd_seq_set[s] = true;
        }
    }

    fn rollback(&mut self) {
        self.kv.free_cells(&self.claimed);
        self.claimed.clear();
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        stats::CONTEXTS.add(-1);
    }
}
