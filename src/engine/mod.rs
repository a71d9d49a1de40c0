//! engine: the serving engine (`ds_engine`). Many threads submit requests; one decode-loop
//! thread owns a context with `n_seq_max` slots and serves them all by continuous batching:
//! every step decodes each running sequence's next token together with a budgeted chunk of
//! pending prompt tokens, so a long prompt never stalls the others for more than one chunk.
//!
//! Nothing on the path from submission to output takes a lock:
//! - submissions go through a lock-free bounded MPSC queue (`queue`);
//! - the table of live requests that submitters, cancellers, pollers and the loop share is
//!   published copy-on-write through crossbeam-epoch (`table`), replaced versions reclaimed
//!   by `defer_destroy` and counted;
//! - each request's events go to a bounded ring of atomic words (`ring`) or, for requests with
//!   a callback, straight to the callback on the decode thread;
//! - sleeping (the idle loop, a blocked `wait`) is a futex on an atomic word (`sync`).
//! The loom tests (`loom_tests.rs`, `--cfg loom`) model-check the queue, the table and the
//! rings. The loop allocates per request (its prompt, its ring), never per token.
//!
//! A request may carry a GBNF grammar (`GrammarSpec`): it is parsed on the submitting thread
//! (a bad grammar is refused there, with the parser's reason) and each of the request's tokens
//! is sampled under it as llama.cpp's common sampler does (`sampling::chain::sample_constrained`).

mod control;
mod queue;
mod ring;
mod scheduler;
mod stop;
pub(crate) mod sync;
mod table;
#[cfg(all(test, loom))]
mod loom_tests;

use std::sync::Arc as StdArc;
use std::time::{Duration, Instant};

pub use crate::sys::stats::FinishKind;
pub use control::{ControlError, ControlReply, Reply, SlotAction, SlotInfo, SlotTask};
pub use ring::Event;

use crate::model::Model;
use crate::sampling::grammar::sampler::GrammarSampler;
use crate::sampling::Sampler;
use crate::sys::stats::{self, EngineMetrics, ENGINES_ALL};
use queue::SubmitQueue;
use sync::{Arc, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Notify, Ordering};
use table::Table;

/// How an engine is set up (`ds_engine_params`).
#[derive(Clone, Debug)]
pub struct EngineParams {
    /// Sequences decoded at once (slots).
    pub n_seq_max: u32,
    /// One KV pool shared by every slot (llama-server's default unified KV): any sequence may
    /// hold up to `n_ctx` cells (or `kv_unified_per_slot`), requests are admitted by free
    /// cells and idle slots' cached prefixes are evicted, least recently used first, when a
    /// request needs their room. False (`--no-kv-unified`): each slot has its own stream of
    /// `n_ctx_seq` cells. deepseek4 keeps a stream per sequence whatever is asked (its
    /// compressed caches are per sequence), so for it the engine always runs per-slot streams.
    pub kv_unified: bool,
    /// The KV cells of all slots together (rounded up to a multiple of 256; non-unified: split
    /// evenly between the slots); 0: `n_ctx_seq` × `n_seq_max`.
    pub n_ctx: u32,
    /// Context of each slot, in tokens (rounded up to a multiple of 256), when `n_ctx` is 0:
    /// the pool is `n_ctx_seq` × `n_seq_max` cells; 0: the model's training context, at most
    /// 4096.
    pub n_ctx_seq: u32,
    /// Unified: the most cells one sequence may hold (upstream's `--kv-unified-per-slot`);
    /// 0: the whole pool.
    pub kv_unified_per_slot: u32,
    /// Tokens per decode step (at least `n_seq_max`), and per micro-batch.
    pub n_batch: u32,
    pub n_ubatch: u32,
    pub n_threads: i32,
    /// Requests submitted and not yet started beyond which `submit` refuses (backpressure).
    pub queue_limit: u32,
    /// The most prompt tokens one step takes while other sequences are generating.
    pub prefill_chunk: u32,
    /// When > 1, the prompt tokens of a step are also limited so that the step is predicted to
    /// take at most this multiple of a step without prompt tokens (measured while serving);
    /// 0 turns the time budget off (only `prefill_chunk` limits).
    pub max_step_slowdown: f32,
    /// Events a polled request's buffer holds; when full, the request pauses until read.
    pub event_capacity: u32,
    /// Render special (control) tokens in pieces, as `llama_token_to_piece(.., special = true)`.
    pub special: bool,
    /// Reuse the KV cells of a prompt's longest prefix held by any slot.
    pub prefix_reuse: bool,
    /// The KV cache's key and value types (F16 by default; `kv::CacheType`).
    pub type_k: crate::kv::CacheType,
    pub type_v: crate::kv::CacheType,
}

impl Default for EngineParams {
    fn default() -> EngineParams {
        EngineParams {
            n_seq_max: 8,
            kv_unified: true,
            n_ctx: 0,
            n_ctx_seq: 4096,
            kv_unified_per_slot: 0,
            n_batch: 2048,
            n_ubatch: 512,
            n_threads: std::thread::available_parallelism().map_or(4, |n| n.get() as i32),
            queue_limit: 256,
            prefill_chunk: 512,
            max_step_slowdown: 1.5,
            event_capacity: 256,
            special: false,
            prefix_reuse: true,
            type_k: crate::kv::CacheType::F16,
            type_v: crate::kv::CacheType::F16,
        }
    }
}

/// What a request starts from.
pub enum Prompt {
    Tokens(Vec<i32>),
    /// Tokenized on the submitting thread, as `llama_tokenize(.., add_special, parse_special)`.
    Text { text: Vec<u8>, add_special: bool, parse_special: bool },
}

/// What a callback receives: the request, one event, and for a token the bytes of its piece
/// that belong to the output.
pub struct EventView<'a> {
    pub id: u64,
    pub user_data: usize,
    pub event: Event,
    pub piece: &'a [u8],
    /// Set on the final event.
    pub finish: Option<FinishInfo>,
    /// For a token event of a request with `n_probs` > 0.
    pub probs: Option<&'a TokenProbs>,
}

/// Called on the decode thread for each event; returning false cancels the request.
pub type Callback = Box<dyn FnMut(&EventView<'_>) -> bool + Send>;

/// A grammar every generated token must keep to (llama-server's `grammar`): GBNF text and the
/// rule it starts from. The request's tokens are sampled as llama.cpp samples under a grammar:
/// the sampler's pick is checked against it and, when it breaks it, the row is sampled again
/// with the grammar applied first; end-of-generation is allowed only where the grammar may end.
///
/// A lazy grammar (llama.cpp's `llama_sampler_init_grammar_lazy_patterns`) leaves the output
/// free until a trigger appears in it (a word, a pattern over the output so far, or a token),
/// then holds from the trigger's start on: how a tool call is constrained only once the model
/// begins one.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct GrammarSpec {
    pub text: String,
    pub root: String,
    pub lazy: bool,
    pub trigger_words: Vec<String>,
    pub trigger_patterns: Vec<String>,
    pub trigger_tokens: Vec<i32>,
    /// Trigger words count only after this text (e.g. `</think>` when the prompt opened the
    /// reasoning, so a call's marker written while thinking does not start the grammar).
    pub trigger_after: Option<String>,
}

impl GrammarSpec {
    /// A grammar that holds from the first token.
    pub fn new(text: impl Into<String>) -> GrammarSpec {
        GrammarSpec { text: text.into(), root: "root".into(), ..GrammarSpec::default() }
    }
}

pub struct Request {
    pub prompt: Prompt,
    /// The engine owns it from submission on and drops it when the request ends.
    pub sampler: Box<dyn Sampler + Send>,
    /// Tokens to generate at most; negative: until the slot's context is full.
    pub max_tokens: i32,
    pub stop_tokens: Vec<i32>,
    pub stop_strings: Vec<Vec<u8>>,
    /// Keep generating past end-of-generation tokens.
    pub ignore_eos: bool,
    /// None: events are polled (`poll`, `wait`).
    pub callback: Option<Callback>,
    pub user_data: usize,
    /// For requests with a callback: give each token event its log-probability and the
    /// `n_probs` most likely tokens' (at most `MAX_TOP_PROBS`; 0: none), from the softmax of the
    /// model's logits before sampling, as llama-server's `n_probs`.
    pub n_probs: u32,
    /// None (or empty text): unconstrained.
    pub grammar: Option<GrammarSpec>,
    /// Whether the KV cells of a prompt prefix some slot holds may be reused (llama-server's
    /// `cache_prompt`); false computes the whole prompt. The answer is the same either way.
    pub reuse_prefix: bool,
    /// The slot the request must run in (llama-server's `id_slot`); None: the engine chooses
    /// (the free one holding the longest prefix of its prompt). A request for a busy slot
    /// waits for it, and the requests queued after it wait too (first come, first served).
    pub slot: Option<u32>,
    /// Anything the application wants `slots` to report with the request (llama-server puts
    /// its sampling parameters there).
    pub tag: Option<StdArc<str>>,
    /// llama-server's `t_max_predict_ms`: once generation (from the first generated token)
    /// has run this long, the request ends with `Length` at the next token whose piece holds a
    /// newline (that token included).
    pub t_max_predict: Option<Duration>,
    /// Called on the decode thread as the prompt is computed (llama-server's
    /// `return_progress`): once when the request takes its slot (`processed` = the cached
    /// prefix) and after each step that computed some of its prompt; the last call has
    /// `processed == total` and comes before the first token's event.
    pub progress: Option<ProgressCallback>,
}

/// How far a request's prompt is (llama-server's `prompt_progress`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PromptProgress {
    pub total: u32,
    /// Prompt tokens whose cells were reused.
    pub cache: u32,
    /// Prompt tokens in the slot so far (reused and computed).
    pub processed: u32,
    /// Since the request took its slot.
    pub time_ms: f64,
}

pub type ProgressCallback = Box<dyn FnMut(&PromptProgress) + Send>;

/// The most top log-probabilities a token event carries (OpenAI's `top_logprobs` limit).
pub const MAX_TOP_PROBS: usize = 20;

/// A generated token's log-probability and the most likely tokens' at its position.
#[derive(Clone, Copy, Debug)]
pub struct TokenProbs {
    pub token: i32,
    pub logprob: f32,
    pub n_top: usize,
    /// (token, log-probability), most likely first; the first `n_top` are set.
    pub top: [(i32, f32); MAX_TOP_PROBS],
}

impl TokenProbs {
    pub fn top(&self) -> &[(i32, f32)] {
        &self.top[..self.n_top]
    }

    /// Computes the log-softmax of `logits` at `token` and the `n` largest (no allocation).
    pub fn compute(logits: &[f32], token: i32, n: usize) -> TokenProbs {
        let n = n.min(MAX_TOP_PROBS).min(logits.len());
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let sum: f64 = logits.iter().map(|&l| ((l - max) as f64).exp()).sum();
        let lse = max as f64 + sum.ln();
        let mut top = [(0i32, f32::NEG_INFINITY); MAX_TOP_PROBS];
        let mut n_top = 0usize;
        for (i, &l) in logits.iter().enumerate() {
            if n == 0 || (n_top == n && l <= top[n - 1].1) {
                continue;
            }
            // Insert, keeping the list sorted by logit (ties: the lower id first, as a stable sort).
            let mut at = n_top.min(n - 1);
            if n_top < n {
                n_top += 1;
            }
            while at > 0 && top[at - 1].1 < l {
                top[at] = top[at - 1];
                at -= 1;
            }
            top[at] = (i as i32, l);
        }
        for t in &mut top[..n_top] {
            t.1 = (t.1 as f64 - lse) as f32;
        }
        let logprob = logits.get(token as usize).map_or(f32::NEG_INFINITY, |&l| (l as f64 - lse) as f32);
        TokenProbs { token, logprob, n_top, top }
    }
}

/// A request's totals, readable with its final event.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FinishInfo {
    pub reason: Option<FinishKind>,
    pub n_prompt: u32,
    /// Prompt tokens whose KV cells were reused from an earlier sequence.
    pub n_cached: u32,
    pub n_generated: u32,
    pub ttft_us: u64,
    pub total_us: u64,
}

#[derive(Debug, PartialEq, Eq)]
pub enum SubmitError {
    /// The queue holds `queue_limit` requests that have not started.
    Full(String),
    Invalid(String),
    Closed,
}

impl std::fmt::Display for SubmitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SubmitError::Full(s) | SubmitError::Invalid(s) => f.write_str(s),
            SubmitError::Closed => f.write_str("the engine is shutting down"),
        }
    }
}

pub const MAX_STOP_STRINGS: usize = 16;
/// Slot operations queued and not yet answered beyond which `slots` / `slot_action` refuse.
pub(crate) const MAX_PENDING_CONTROLS: usize = 1024;
pub const MAX_STOP_STRING_BYTES: usize = 256;
pub const MAX_STOP_TOKENS: usize = 64;

/// The part of a request every thread may touch (through the table).
pub(crate) struct RequestShared {
    pub(crate) id: u64,
    pub(crate) user_data: usize,
    pub(crate) cancel: AtomicBool,
    /// The final event has reached the application (read by a poller or given to the
    /// callback): the table entry may go.
    pub(crate) drained: AtomicBool,
    /// Set by the loop while the request waits for room in its ring.
    pub(crate) paused: AtomicBool,
    /// None for requests with a callback.
    pub(crate) ring: Option<ring::EventRing>,
    pub(crate) notify: Notify,
    info: [AtomicU64; 6],
}

impl RequestShared {
    fn new(id: u64, user_data: usize, ring: Option<ring::EventRing>) -> RequestShared {
        RequestShared {
            id,
            user_data,
            cancel: AtomicBool::new(false),
            drained: AtomicBool::new(false),
            paused: AtomicBool::new(false),
            ring,
            notify: Notify::new(),
            info: [(); 6].map(|_| AtomicU64::new(0)),
        }
    }

    /// Written by the loop before the final event is published (whose Release store orders it).
    pub(crate) fn set_info(&self, i: &FinishInfo) {
        let reason = i.reason.map_or(0, |r| r as u64 + 1);
        for (slot, v) in self.info.iter().zip([reason, i.n_prompt as u64, i.n_cached as u64, i.n_generated as u64, i.ttft_us, i.total_us]) {
            slot.store(v, Ordering::Relaxed);
        }
    }

    pub(crate) fn info(&self) -> FinishInfo {
        let v: [u64; 6] = std::array::from_fn(|i| self.info[i].load(Ordering::Relaxed));
        // 0: not set; else the kind's index + 1.
        let reason = v[0].checked_sub(1).and_then(FinishKind::from_index);
        FinishInfo { reason, n_prompt: v[1] as u32, n_cached: v[2] as u32, n_generated: v[3] as u32, ttft_us: v[4], total_us: v[5] }
    }
}

/// A submitted request on its way to the loop.
pub(crate) struct Submitted {
    pub(crate) shared: Arc<RequestShared>,
    pub(crate) prompt: Vec<i32>,
    pub(crate) sampler: Box<dyn Sampler + Send>,
    pub(crate) max_tokens: i32,
    pub(crate) stop_tokens: Vec<i32>,
    pub(crate) stop_strings: Vec<Vec<u8>>,
    pub(crate) ignore_eos: bool,
    pub(crate) callback: Option<Callback>,
    pub(crate) n_probs: u32,
    pub(crate) grammar: Option<GrammarSampler>,
    pub(crate) reuse_prefix: bool,
    pub(crate) slot: Option<u32>,
    pub(crate) tag: Option<StdArc<str>>,
    pub(crate) t_max_predict: Option<Duration>,
    pub(crate) progress: Option<ProgressCallback>,
    pub(crate) t_submit: Instant,
}

/// Every token's piece, rendered once at creation (immutable; events point into it).
pub(crate) struct Pieces {
    bytes: Vec<u8>,
    offsets: Vec<u32>,
}

impl Pieces {
    fn new(model: &Model, special: bool) -> Result<Pieces, String> {
        let n = model.vocab.n_tokens();
        let mut offsets = Vec::new();
        offsets.try_reserve_exact(n + 1).map_err(|_| "cannot allocate the piece table")?;
        let (mut bytes, mut buf) = (Vec::new(), Vec::new());
        offsets.push(0);
        for t in 0..n as i32 {
            buf.clear();
            model.vocab.token_to_piece(t, 0, special, &mut buf);
            bytes.extend_from_slice(&buf);
            offsets.push(u32::try_from(bytes.len()).map_err(|_| "the vocabulary's pieces exceed 4 GiB")?);
        }
        bytes.shrink_to_fit();
        Ok(Pieces { bytes, offsets })
    }

    pub(crate) fn get(&self, token: i32) -> &[u8] {
        let t = token as usize;
        match (self.offsets.get(t), self.offsets.get(t + 1)) {
            (Some(&a), Some(&b)) => &self.bytes[a as usize..b as usize],
            _ => &[],
        }
    }

    fn bytes(&self) -> usize {
        self.bytes.capacity() + 4 * self.offsets.capacity()
    }
}

/// What the engine's threads share.
pub(crate) struct Inner {
    pub(crate) model: StdArc<Model>,
    pub(crate) queue: SubmitQueue<Submitted>,
    /// Slot operations (`control`), answered by the loop at its next turn.
    pub(crate) controls: SubmitQueue<control::Control>,
    pub(crate) table: Table<RequestShared>,
    /// Wakes the loop: submissions, cancellations, room made in a paused request's ring.
    pub(crate) wake: Notify,
    pub(crate) closing: AtomicBool,
    next_id: AtomicU64,
    /// Final events read by pollers whose table entries the loop has not removed yet.
    pub(crate) drained_pending: AtomicU32,
    /// API calls in progress, which `Drop` waits for.
    active_calls: AtomicUsize,
    pub(crate) metrics: StdArc<EngineMetrics>,
    pub(crate) pieces: Pieces,
    /// The decode thread's kernel thread id (0 until it runs).
    pub(crate) loop_tid: std::sync::atomic::AtomicI32,
    /// Set by the decode thread when it has ended every request and stops.
    pub(crate) loop_done: AtomicBool,
    /// The most cells one sequence can hold.
    pub(crate) n_ctx_seq: u32,
    /// The KV cells of all slots together.
    pub(crate) n_ctx: u32,
    /// The slots' cells are one stream (the unified pool).
    pub(crate) unified: bool,
    pub(crate) n_seq_max: u32,
    pub(crate) params: EngineParams,
}

impl Inner {
    /// Applies `f` to this engine's metrics and to the process-wide sum.
    pub(crate) fn record(&self, f: impl Fn(&EngineMetrics)) {
        f(&self.metrics);
        f(&ENGINES_ALL);
    }
}

/// Counts an API call in progress for as long as it lives.
struct CallGuard<'a>(&'a AtomicUsize);

impl<'a> CallGuard<'a> {
    fn new(n: &'a AtomicUsize) -> CallGuard<'a> {
        n.fetch_add(1, Ordering::SeqCst);
        CallGuard(n)
    }
}

impl Drop for CallGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A serving engine: owns its context (KV cache, scratch, thread pool) through its decode
/// loop thread. Every method may be called from any thread at once.
pub struct Engine {
    inner: StdArc<Inner>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Bytes the engine holds besides its context (piece table, slot token lists).
    _held: stats::Held,
}

impl Engine {
    pub fn new(model: StdArc<Model>, p: &EngineParams) -> Result<Engine, String> {
        if model.vocab_only {
            return Err("the model was loaded with vocab_only: it has no weights to run".into());
        }
        if p.n_seq_max == 0 || p.n_seq_max as usize > crate::kv::seqset::MAX_SEQ {
            return Err(format!("n_seq_max = {} must be between 1 and {}", p.n_seq_max, crate::kv::seqset::MAX_SEQ));
        }
        if p.n_batch < p.n_seq_max {
            return Err(format!("n_batch = {} must be at least n_seq_max = {} (every running sequence decodes in each step)", p.n_batch, p.n_seq_max));
        }
        if p.n_ubatch == 0 {
            return Err("n_ubatch must be at least 1".into());
        }
        if p.n_threads < 1 || p.n_threads > 512 {
            return Err(format!("n_threads = {} must be between 1 and 512", p.n_threads));
        }
        if p.queue_limit == 0 || p.queue_limit > 1 << 20 {
            return Err(format!("queue_limit = {} must be between 1 and {}", p.queue_limit, 1 << 20));
        }
        if p.event_capacity < 2 || p.event_capacity > 1 << 20 {
            return Err(format!("event_capacity = {} must be between 2 and {}", p.event_capacity, 1 << 20));
        }
        if p.prefill_chunk == 0 {
            return Err("prefill_chunk must be at least 1".into());
        }
        if !p.max_step_slowdown.is_finite() || p.max_step_slowdown < 0.0 || (p.max_step_slowdown > 0.0 && p.max_step_slowdown <= 1.0) {
            return Err(format!("max_step_slowdown = {} must be 0 (off) or above 1", p.max_step_slowdown));
        }
        let n_ctx_seq = if p.n_ctx_seq == 0 { model.hp.n_ctx_train.clamp(1, 4096) } else { p.n_ctx_seq };
        let n_ctx = if p.n_ctx != 0 {
            p.n_ctx.checked_next_multiple_of(256).ok_or_else(|| format!("n_ctx = {} is too large", p.n_ctx))?
        } else {
            n_ctx_seq.checked_next_multiple_of(256).and_then(|c| c.checked_mul(p.n_seq_max)).ok_or_else(|| format!("n_ctx_seq = {n_ctx_seq} × n_seq_max = {} is too large", p.n_seq_max))?
        };
        // deepseek4's caches keep a stream per sequence even when one is asked for (as
        // upstream's llama_kv_cache_dsv4): the engine runs per-slot streams for it.
        let unified = p.kv_unified && model.hp.dsv4.is_none();
        if p.kv_unified && !unified {
            crate::log_info!("ds_engine: {} keeps a KV stream per sequence; the engine's unified pool falls back to {} slots of {} cells", model.hp.arch.name(), p.n_seq_max, n_ctx / p.n_seq_max);
        }
        if !unified && n_ctx / p.n_seq_max == 0 {
            return Err(format!("n_ctx = {n_ctx} gives each of the n_seq_max = {} slots no cells", p.n_seq_max));
        }
        let cp = crate::context::ContextParams {
            n_ctx,
            kv_unified: unified,
            n_batch: p.n_batch,
            n_ubatch: p.n_ubatch,
            n_seq_max: p.n_seq_max,
            n_threads: p.n_threads,
            n_threads_batch: p.n_threads,
            type_k: p.type_k,
            type_v: p.type_v,
            ..Default::default()
        };
        let mut ctx = crate::context::Context::new(model.clone(), &cp)?;
        // A shared stream keeps each sequence's cells in position order where it can, so that
        // a sequence's attention is what it is alone (the "same answer" promise).
        ctx.kv.place_in_order = ctx.kv.shape.n_stream == 1;
        let pieces = Pieces::new(&model, p.special)?;
        let metrics = StdArc::new(EngineMetrics::new());
        // The most cells one sequence can hold: its stream, or the pool under the per-slot cap.
        let n_ctx_total = ctx.kv.n_cells_total() as u32;
        let n_ctx_seq = if ctx.kv.shape.n_stream == 1 && p.kv_unified_per_slot > 0 { ctx.n_ctx_seq.min(p.kv_unified_per_slot) } else { ctx.n_ctx_seq };
        let held = stats::Held::new(&stats::SCRATCH_BYTES, pieces.bytes() + 4 * n_ctx_seq as usize * p.n_seq_max as usize);
        let inner = StdArc::new(Inner {
            queue: SubmitQueue::new(p.queue_limit as usize),
            controls: SubmitQueue::new(MAX_PENDING_CONTROLS),
            table: Table::new(metrics.clone()),
            wake: Notify::new(),
            closing: AtomicBool::new(false),
            next_id: AtomicU64::new(1),
            drained_pending: AtomicU32::new(0),
            active_calls: AtomicUsize::new(0),
            metrics,
            pieces,
            loop_tid: std::sync::atomic::AtomicI32::new(0),
            loop_done: AtomicBool::new(false),
            n_ctx_seq,
            n_ctx: n_ctx_total,
            unified: ctx.kv.shape.n_stream == 1,
            n_seq_max: p.n_seq_max,
            params: p.clone(),
            model,
        });
        let cells = ctx.kv.n_cells_total() as i64;
        let lp = scheduler::Loop::new(inner.clone(), ctx)?;
        inner.record(|m| m.kv_cells_total.add(cells));
        let thread = match std::thread::Builder::new().name("ds-engine".into()).spawn(move || lp.run()) {
            Ok(t) => t,
            Err(e) => {
                inner.record(|m| m.kv_cells_total.add(-cells));
                return Err(format!("cannot start the decode thread: {e}"));
            }
        };
        stats::ENGINES.add(1);
        Ok(Engine { inner, thread: Some(thread), _held: held })
    }

    pub fn model(&self) -> &StdArc<Model> {
        &self.inner.model
    }

    /// The most tokens one sequence can hold (its prompt and what it generates): its slot's
    /// stream, or in the unified pool the pool under the per-slot cap.
    pub fn n_ctx_seq(&self) -> u32 {
        self.inner.n_ctx_seq
    }

    /// The KV cells of all slots together (the unified pool, or the sum of the slots' streams).
    pub fn n_ctx(&self) -> u32 {
        self.inner.n_ctx
    }

    /// Whether the slots share one KV pool (false with `kv_unified` off, and for deepseek4).
    pub fn kv_unified(&self) -> bool {
        self.inner.unified
    }

    pub fn n_seq_max(&self) -> u32 {
        self.inner.n_seq_max
    }

    pub fn metrics(&self) -> &EngineMetrics {
        &self.inner.metrics
    }

    /// The piece of `token` as events render it (empty for ids outside the vocabulary).
    /// Valid as long as the engine.
    pub fn piece(&self, token: i32) -> &[u8] {
        self.inner.pieces.get(token)
    }

    /// Whether the calling thread is the engine's decode thread (callbacks run there). Compares
    /// kernel thread ids: `std::thread::current()` would give a C thread a handle that is
    /// never freed.
    pub fn on_decode_thread(&self) -> bool {
        // SAFETY: gettid has no preconditions.
        self.inner.loop_tid.load(Ordering::Acquire) == unsafe { libc::gettid() }
    }

    /// Any thread: queues a request; returns its id (≥ 1). Never waits for other submitters
    /// or for the decode loop.
    pub fn submit(&self, r: Request) -> Result<u64, SubmitError> {
        let _call = CallGuard::new(&self.inner.active_calls);
        let inner = &*self.inner;
        let fail = |e: SubmitError| {
            inner.record(|m| m.rejected.add(1));
            Err(e)
        };
        if inner.closing.load(Ordering::SeqCst) {
            return fail(SubmitError::Closed);
        }
        let prompt = match r.prompt {
            Prompt::Tokens(t) => t,
            Prompt::Text { text, add_special, parse_special } => {
                let mut t = Vec::new();
                inner.model.vocab.tokenize(&text, add_special, parse_special, &mut t);
                t
            }
        };
        if let Err(e) = self.validate(&prompt, &r.stop_tokens, &r.stop_strings) {
            return fail(SubmitError::Invalid(e));
        }
        if let Some(s) = r.slot.filter(|&s| s >= inner.n_seq_max) {
            return fail(SubmitError::Invalid(format!("slot {s} does not exist: the engine has {} slots (0 to {})", inner.n_seq_max, inner.n_seq_max - 1)));
        }
        if r.n_probs > 0 && r.callback.is_none() {
            return fail(SubmitError::Invalid("token probabilities (n_probs) are given to callbacks only; polled events carry none".into()));
        }
        if r.n_probs as usize > MAX_TOP_PROBS {
            return fail(SubmitError::Invalid(format!("n_probs = {} is above the limit of {MAX_TOP_PROBS}", r.n_probs)));
        }
        let grammar = match r.grammar.as_ref().filter(|g| !g.text.is_empty()) {
            None => None,
            Some(g) => match GrammarSampler::new(
                inner.model.clone(),
                Some(g.text.as_bytes()),
                g.root.as_bytes(),
                g.lazy,
                &g.trigger_words.iter().map(|w| w.as_bytes()).collect::<Vec<_>>(),
                &g.trigger_patterns.iter().map(|p| p.as_bytes()).collect::<Vec<_>>(),
                &g.trigger_tokens,
            )
            .map(|s| match &g.trigger_after {
                Some(gate) => s.gated(gate.as_bytes()),
                None => s,
            }) {
                Ok(s) => {
                    // The vocabulary's token trie is built on first use: here, not on the decode thread.
                    inner.model.vocab.grammar_trie();
                    Some(s)
                }
                Err(e) => return fail(SubmitError::Invalid(format!("failed to parse grammar: {e}"))),
            },
        };
        if !inner.queue.try_reserve() {
            return fail(SubmitError::Full(format!("the queue holds {} requests that have not started (queue_limit)", inner.params.queue_limit)));
        }
        if inner.closing.load(Ordering::SeqCst) {
            inner.queue.release(1);
            return fail(SubmitError::Closed);
        }
        let id = inner.next_id.fetch_add(1, Ordering::Relaxed);
        let ring = r.callback.is_none().then(|| ring::EventRing::new(inner.params.event_capacity as usize));
        let shared = Arc::new(RequestShared::new(id, r.user_data, ring));
        inner.table.insert(id, shared.clone());
        inner.record(|m| {
            m.submitted.add(1);
            m.queued.add(1);
        });
        inner.queue.link(Submitted {
            shared,
            prompt,
            sampler: r.sampler,
            max_tokens: r.max_tokens,
            stop_tokens: r.stop_tokens,
            stop_strings: r.stop_strings,
            ignore_eos: r.ignore_eos,
            callback: r.callback,
            n_probs: r.n_probs,
            grammar,
            reuse_prefix: r.reuse_prefix,
            slot: r.slot,
            tag: r.tag,
            t_max_predict: r.t_max_predict,
            progress: r.progress,
            t_submit: Instant::now(),
        });
        inner.wake.notify();
        Ok(id)
    }

    /// Any thread: asks the loop for every slot's state; `reply` runs on the decode thread at
    /// its next turn (or here, with `ControlError::Closed`, when the engine is closing).
    pub fn slots(&self, reply: Reply) {
        self.control(control::Op::Slots, reply)
    }

    /// Any thread: erases, saves or restores slot `id`'s cached prompt (llama-server's
    /// `/slots/{id}?action=`); on a busy slot it runs when the slot's request ends. `reply`
    /// runs on the decode thread.
    pub fn slot_action(&self, id: u32, action: SlotAction, reply: Reply) {
        if id >= self.inner.n_seq_max {
            return reply(ControlReply::Error(ControlError::InvalidSlot(format!("slot {id} does not exist: the engine has {} slots", self.inner.n_seq_max))));
        }
        self.control(control::Op::Slot(id, action), reply)
    }

    /// `slots` / `slot_action`, waiting for the answer (not from the decode thread: a callback
    /// that waited here would wait for itself).
    pub fn control_wait(&self, slot: Option<(u32, SlotAction)>) -> ControlReply {
        if self.on_decode_thread() {
            return ControlReply::Error(ControlError::Failed("slot operations cannot wait on the decode thread (from a callback)".into()));
        }
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let reply: Reply = Box::new(move |r| {
            let _ = tx.send(r);
        });
        match slot {
            None => self.slots(reply),
            Some((id, action)) => self.slot_action(id, action, reply),
        }
        rx.recv().unwrap_or(ControlReply::Error(ControlError::Closed))
    }

    fn control(&self, op: control::Op, reply: Reply) {
        let _call = CallGuard::new(&self.inner.active_calls);
        let inner = &*self.inner;
        if inner.closing.load(Ordering::SeqCst) {
            return reply(ControlReply::Error(ControlError::Closed));
        }
        if !inner.controls.try_reserve() {
            return reply(ControlReply::Error(ControlError::Failed(format!("{MAX_PENDING_CONTROLS} slot operations are pending already"))));
        }
        inner.controls.link(control::Control { op, reply });
        inner.wake.notify();
    }

    /// Counts a submission refused before it reached `submit` (a malformed C request).
    pub fn note_rejected(&self) {
        self.inner.record(|m| m.rejected.add(1));
    }

    fn validate(&self, prompt: &[i32], stop_tokens: &[i32], stop_strings: &[Vec<u8>]) -> Result<(), String> {
        let n_vocab = self.inner.model.hp.n_vocab;
        if prompt.is_empty() {
            return Err("the prompt is empty".into());
        }
        if prompt.len() >= self.inner.n_ctx_seq as usize {
            return Err(format!("the prompt has {} tokens; a sequence holds at most {} (the prompt must leave room for one generated token)", prompt.len(), self.inner.n_ctx_seq));
        }
        if let Some((i, t)) = prompt.iter().enumerate().find(|(_, &t)| t < 0 || t as usize >= n_vocab) {
            return Err(format!("prompt token {i} = {t} is not in the vocabulary (n_vocab = {n_vocab})"));
        }
        if stop_tokens.len() > MAX_STOP_TOKENS {
            return Err(format!("{} stop tokens; at most {MAX_STOP_TOKENS}", stop_tokens.len()));
        }
        if let Some(t) = stop_tokens.iter().find(|&&t| t < 0 || t as usize >= n_vocab) {
            return Err(format!("stop token {t} is not in the vocabulary (n_vocab = {n_vocab})"));
        }
        if stop_strings.len() > MAX_STOP_STRINGS {
            return Err(format!("{} stop strings; at most {MAX_STOP_STRINGS}", stop_strings.len()));
        }
        if let Some(s) = stop_strings.iter().find(|s| s.is_empty() || s.len() > MAX_STOP_STRING_BYTES) {
            return Err(format!("a stop string has {} bytes; each must have 1 to {MAX_STOP_STRING_BYTES}", s.len()));
        }
        Ok(())
    }

    fn lookup(&self, id: u64) -> Result<Option<Arc<RequestShared>>, String> {
        if id == 0 || id >= self.inner.next_id.load(Ordering::Relaxed) {
            return Err(format!("unknown request id {id}"));
        }
        Ok(self.inner.table.get(id))
    }

    /// Any thread, any moment: asks the loop to end request `id` (its slot and KV cells are
    /// freed at the next step; its final event says "cancelled" unless it had already ended).
    /// Idempotent; a request that has ended is left as it is.
    pub fn cancel(&self, id: u64) -> Result<(), String> {
        let _call = CallGuard::new(&self.inner.active_calls);
        if let Some(r) = self.lookup(id)? {
            if !r.cancel.swap(true, Ordering::AcqRel) {
                self.inner.wake.notify();
            }
        }
        Ok(())
    }

    /// Any thread: moves up to `out.len()` of request `id`'s events into `out`, oldest first,
    /// without waiting. `info` receives the request's totals when the final event is among
    /// them. After the final event has been read the id is no longer known.
    pub fn poll(&self, id: u64, out: &mut [Event], info: &mut Option<FinishInfo>) -> Result<usize, String> {
        let _call = CallGuard::new(&self.inner.active_calls);
        let r = self.polled(id)?;
        Ok(self.take(&r, out, info))
    }

    fn polled(&self, id: u64) -> Result<Arc<RequestShared>, String> {
        match self.lookup(id)? {
            Some(r) if r.ring.is_none() => Err(format!("request {id} delivers its events to its callback")),
            Some(r) if !r.drained.load(Ordering::Acquire) => Ok(r),
            _ => Err(format!("request {id} has ended and its final event was read")),
        }
    }

    fn take(&self, r: &RequestShared, out: &mut [Event], info: &mut Option<FinishInfo>) -> usize {
        let Some(ring) = &r.ring else { return 0 };
        let n = ring.pop(out);
        if n > 0 {
            if matches!(out[n - 1], Event::Finish(_)) {
                *info = Some(r.info());
                r.drained.store(true, Ordering::Release);
                self.inner.drained_pending.fetch_add(1, Ordering::AcqRel);
                self.inner.wake.notify();
            } else {
                // Pairs with the loop's fence between raising `paused` and checking for room.
                std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
                if r.paused.load(Ordering::SeqCst) {
                    self.inner.wake.notify();
                }
            }
        }
        n
    }

    /// As `poll`, but waits up to `timeout` for at least one event. Returns 0 on timeout.
    pub fn wait(&self, id: u64, out: &mut [Event], info: &mut Option<FinishInfo>, timeout: Duration) -> Result<usize, String> {
        let _call = CallGuard::new(&self.inner.active_calls);
        if self.on_decode_thread() {
            return Err("called from a callback (the decode thread), which would wait for itself; use poll there".into());
        }
        let r = self.polled(id)?;
        let deadline = Instant::now().checked_add(timeout);
        loop {
            let seen = r.notify.seen();
            let n = self.take(&r, out, info);
            if n > 0 || out.is_empty() {
                return Ok(n);
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return Ok(0);
            }
            if self.inner.loop_done.load(Ordering::SeqCst) && r.ring.as_ref().is_some_and(|g| g.is_empty()) {
                return Err("the engine is shutting down".into());
            }
            r.notify.wait(seen, deadline.map_or(Duration::from_millis(100), |d| (d - now).min(Duration::from_millis(100))));
        }
    }

    /// Requests in the table (running, queued, or ended with their final event unread).
    pub fn n_requests(&self) -> usize {
        self.inner.table.len()
    }
}

impl Engine {
    /// Ends every request (queued and running ones get a final "cancelled" event, delivered to
    /// their callbacks on the decode thread before it stops), waits until the decode thread has
    /// stopped, wakes blocked waiters and waits for API calls still in progress on other
    /// threads. Idempotent; the engine refuses submissions from then on. Takes `&self`, so the
    /// C API can run it while other threads still hold the handle.
    pub fn shutdown(&self) {
        self.inner.closing.store(true, Ordering::SeqCst);
        self.inner.wake.notify();
        while !self.inner.loop_done.load(Ordering::SeqCst) {
            self.inner.wake.notify();
            std::thread::sleep(Duration::from_micros(200));
        }
        // Wake blocked waiters so they see the engine closing.
        self.inner.table.for_each(|_, r| r.notify.notify());
        while self.inner.active_calls.load(Ordering::SeqCst) > 0 {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

impl Drop for Engine {
    /// `shutdown`, then joins the decode thread (which has freed the context: KV cache,
    /// scratch, workers) and frees the rest.
    fn drop(&mut self) {
        self.shutdown();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let m = &self.inner.metrics;
        let (queued, running, used, total, tps) = (m.queued.get(), m.running.get(), m.kv_cells_used.get(), m.kv_cells_total.get(), m.tokens_per_second_milli.get());
        self.inner.record(|m| {
            m.queued.add(-queued);
            m.running.add(-running);
            m.kv_cells_used.add(-used);
            m.kv_cells_total.add(-total);
            m.tokens_per_second_milli.add(-tps);
        });
        stats::ENGINES.add(-1);
    }
}
