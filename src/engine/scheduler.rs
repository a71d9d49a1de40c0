//! The decode loop: the one thread that owns the engine's context. Each turn it takes new
//! submissions, ends cancelled requests, gives free slots to waiting requests (reusing the
//! KV cells of the longest prompt prefix any slot holds), decodes one step — every generating
//! sequence's next token plus a budgeted chunk of prompt tokens — samples, delivers events,
//! and retires finished requests. It sleeps on a futex when there is nothing to do.
//!
//! In the unified pool (one KV stream for every slot) cells are the resource: a waiting
//! request starts when its prompt, less the prefix it shares, fits in the cells no running
//! request holds or has reserved for the rest of its prompt (idle slots' cached prefixes are
//! evicted for it, least recently used first); the queue is served first come, first served,
//! so a big request waits for room rather than being passed forever. A request shares the
//! cells of its longest cached prefix with the slot holding them (`seq_cp` in one stream adds
//! the sequence to the cells). When generating sequences want more cells than are free, the
//! earliest admitted decode first and the others wait a step, their sampled tokens kept; when
//! none can, the latest admitted generating request ends with `Length` (its tokens so far
//! delivered whole, as llama-server ends a request that fills its context) and its cells go to
//! the others.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc as StdArc;
use std::time::{Duration, Instant};

use super::ring::Event;
use super::stop::StopMatcher;
use super::sync::{Arc, Ordering};
use super::control::{Control, ControlError, ControlReply, Op, SlotAction, SlotInfo, SlotTask};
use super::{Callback, EventView, FinishInfo, Inner, RequestShared, Submitted, TokenProbs};
use crate::batch::BatchInput;
use crate::context::Context;
use crate::sampling::chain::{sample, sample_constrained};
use crate::sampling::grammar::sampler::GrammarSampler;
use crate::sampling::{Sampler, TokenData};
use crate::sys::stats::FinishKind;

/// Fewest prompt tokens a step takes under the time budget (so a prompt always advances).
const MIN_CHUNK: usize = 8;
/// Copying another slot's whole stream of cells pays off from this many reused tokens on.
const MIN_COPY_GAIN: usize = 32;

/// A request holding a slot.
struct Active {
    shared: Arc<RequestShared>,
    prompt: Vec<i32>,
    /// Prompt tokens whose KV cells are in the slot (reused or computed).
    n_done: usize,
    n_cached: usize,
    /// The sampled token to decode next.
    pending: Option<i32>,
    sampler: Box<dyn Sampler + Send>,
    /// The request's grammar, its state advanced by every token.
    grammar: Option<GrammarSampler>,
    max_tokens: i32,
    n_generated: u32,
    stop_tokens: Vec<i32>,
    stop: StopMatcher,
    ignore_eos: bool,
    callback: Option<Callback>,
    /// Top probabilities per token event (0: none), and those of the tokens sampled and not yet
    /// delivered (held by the stop matcher), oldest first.
    n_probs: u32,
    probs: VecDeque<TokenProbs>,
    t_submit: Instant,
    /// When the request took its slot.
    t_admit: Instant,
    t_first: Option<Instant>,
    t_last: Option<Instant>,
    /// Admission order (prefill is first come, first served).
    order: u64,
    tag: Option<StdArc<str>>,
    /// Some generated piece held a newline (`slots`' `has_new_line`).
    has_new_line: bool,
    t_max_predict: Option<Duration>,
    progress: Option<super::ProgressCallback>,
}

struct Slot {
    /// The tokens whose KV cells this slot's sequence holds, in position order.
    cache: Vec<i32>,
    req: Option<Active>,
    /// Step at which the slot was last released (least recently used slots are taken first).
    last_used: u64,
    /// The last request that ran here, as `slots` reports it once it has ended.
    last_task: Option<SlotTask>,
}

/// What a batch row is for.
#[derive(Clone, Copy)]
enum Row {
    /// A generating slot's pending token.
    Next(usize),
    /// `n` prompt tokens of a slot starting at its `n_done`; the last row of the run.
    Prompt { slot: usize, n: usize, last: bool },
}

/// The step-time model behind the prompt budget: step time ≈ a + b·(generating rows) +
/// c·(prompt rows), fitted by least squares over the steps served, older steps weighing less
/// (each new step multiplies the sums by `FORGET`).
#[derive(Default)]
struct Cost {
    /// Σ w·x·xᵀ (upper triangle: 11 12 13 22 23 33) and Σ w·x·y for x = (1, n_next, n_prompt).
    xx: [f64; 6],
    xy: [f64; 3],
    steps: u64,
}

const FORGET: f64 = 0.97;

impl Cost {
    fn observe(&mut self, n_next: usize, n_prompt: usize, us: f64) {
        let x = [1.0, n_next as f64, n_prompt as f64];
        self.xx.iter_mut().for_each(|v| *v *= FORGET);
        self.xy.iter_mut().for_each(|v| *v *= FORGET);
        let mut k = 0;
        for i in 0..3 {
            for j in i..3 {
                self.xx[k] += x[i] * x[j];
                k += 1;
            }
            self.xy[i] += x[i] * us;
        }
        self.steps += 1;
    }

    /// (a, b, c) solving the normal equations (with a little ridge so that a spell of steps
    /// all alike stays solvable), or None before there is enough to go on.
    fn fit(&self) -> Option<[f64; 3]> {
        if self.steps < 8 {
            return None;
        }
        let [s11, s12, s13, s22, s23, s33] = self.xx;
        let r = 1e-3 * s11.max(1.0);
        let m = [[s11 + r, s12, s13], [s12, s22 + r, s23], [s13, s23, s33 + r]];
        let det3 = |m: &[[f64; 3]; 3]| m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1]) - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0]) + m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0]);
        let d = det3(&m);
        if d.abs() < 1e-9 {
            return None;
        }
        let mut out = [0.0; 3];
        for (c, o) in out.iter_mut().enumerate() {
            let mut mc = m;
            for row in 0..3 {
                mc[row][c] = self.xy[row];
            }
            *o = det3(&mc) / d;
        }
        Some(out)
    }

    /// Prompt tokens a step with `n_next` generating sequences may take, `n_occupied` slots
    /// holding a request (generating or still taking their prompt): as many as keep its
    /// predicted time within `slowdown` times a step in which every occupied slot generates —
    /// the step the prefilling requests are about to join. (Measured against the generating
    /// rows alone, the budget shrank as requests queued for their prompts, and a busy server
    /// settled into prefilling a dozen tokens per step while few slots generated.)
    fn budget(&self, n_next: usize, n_occupied: usize, chunk: usize, slowdown: f32) -> usize {
        if slowdown <= 1.0 {
            return chunk;
        }
        match self.fit() {
            Some([a, b, c]) if c > 0.0 => {
                let step = |rows: usize| (a + b * rows as f64).max(c);
                let room = slowdown as f64 * step(n_occupied.max(n_next)) - step(n_next);
                ((room / c).max(0.0) as usize).clamp(MIN_CHUNK, chunk.max(MIN_CHUNK))
            }
            // Until the model has seen enough steps: the smallest chunk.
            _ => MIN_CHUNK.min(chunk),
        }
    }
}

pub(crate) struct Loop {
    inner: StdArc<Inner>,
    /// The admitted request's `reuse_prefix` (set for each request at the head of the queue).
    reuse_head: bool,
    ctx: Context,
    slots: Vec<Slot>,
    waiting: VecDeque<Submitted>,
    taken: Vec<Submitted>,
    /// Slot operations not yet answered (those on a busy slot wait for it).
    controls: Vec<Control>,
    /// Reused buffer of a slot save.
    state_buf: Vec<u8>,
    tokens: Vec<i32>,
    pos: Vec<i32>,
    seq_ids: Vec<i32>,
    logits: Vec<i8>,
    rows: Vec<(Row, usize)>,
    /// (admission order, slot) of the slots with prompt left; reused scratch.
    order: Vec<(u64, usize)>,
    candidates: Vec<TokenData>,
    cost: Cost,
    step: u64,
    next_order: u64,
    /// Generated tokens and the start of the current throughput window.
    window: (u64, Instant),
    tps_milli: i64,
    kv_used: i64,
    /// The largest sequence length reported to `n_tokens_max`.
    n_tokens_max: i64,
    /// The decode thread's allocation counter at the last reading.
    allocated: u64,
    /// The slots share one stream of `n_cells` cells (the unified pool).
    pooled: bool,
    n_cells: usize,
}

fn lcp(a: &[i32], b: &[i32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

impl Loop {
    pub(crate) fn new(inner: StdArc<Inner>, ctx: Context) -> Result<Loop, String> {
        let n_seq = inner.n_seq_max as usize;
        let n_ctx_seq = inner.n_ctx_seq as usize;
        let n_batch = ctx.n_batch as usize;
        let mut slots = Vec::with_capacity(n_seq);
        for _ in 0..n_seq {
            let mut cache = Vec::new();
            cache.try_reserve_exact(n_ctx_seq).map_err(|_| "cannot allocate the slots' token lists")?;
            slots.push(Slot { cache, req: None, last_used: 0, last_task: None });
        }
        let q = inner.params.queue_limit as usize;
        Ok(Loop {
            slots,
            waiting: VecDeque::with_capacity(q),
            taken: Vec::with_capacity(q),
            controls: Vec::new(),
            state_buf: Vec::new(),
            tokens: Vec::with_capacity(n_batch),
            pos: Vec::with_capacity(n_batch),
            seq_ids: Vec::with_capacity(n_batch),
            logits: Vec::with_capacity(n_batch),
            rows: Vec::with_capacity(n_batch),
            order: Vec::with_capacity(n_seq),
            candidates: Vec::with_capacity(inner.model.hp.n_vocab),
            cost: Cost::default(),
            step: 0,
            reuse_head: true,
            next_order: 0,
            window: (0, Instant::now()),
            tps_milli: 0,
            n_tokens_max: 0,
            kv_used: 0,
            allocated: 0,
            pooled: ctx.kv.shape.n_stream == 1,
            n_cells: ctx.kv.n_cells_total(),
            ctx,
            inner,
        })
    }

    pub(crate) fn run(mut self) {
        // SAFETY: gettid has no preconditions.
        self.inner.loop_tid.store(unsafe { libc::gettid() }, std::sync::atomic::Ordering::Release);
        self.allocated = crate::sys::alloc::thread_allocated_bytes();
        loop {
            let seen = self.inner.wake.seen();
            if self.inner.closing.load(Ordering::SeqCst) {
                if catch_unwind(AssertUnwindSafe(|| self.shut_down())).is_err() {
                    crate::log_error!("ds_engine: internal error while shutting down");
                }
                // The context (KV cache, scratch, workers) is freed before the engine learns
                // that the loop is done.
                let inner = self.inner.clone();
                drop(self);
                inner.loop_done.store(true, Ordering::SeqCst);
                return;
            }
            let worked = match catch_unwind(AssertUnwindSafe(|| self.turn())) {
                Ok(w) => w,
                Err(p) => {
                    let what = p.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| p.downcast_ref::<String>().cloned()).unwrap_or_default();
                    crate::log_error!("ds_engine: internal error in the decode loop: {what}; its running requests end with an error");
                    self.fail_all_running();
                    true
                }
            };
            if !worked {
                self.inner.wake.wait(seen, Duration::from_millis(250));
            }
        }
    }

    /// One turn of the loop; false when there was nothing to do.
    fn turn(&mut self) -> bool {
        self.take_submissions();
        let controlled = self.run_controls();
        self.end_cancelled();
        self.admit();
        let worked = self.decode_step();
        self.remove_drained();
        self.update_gauges();
        worked || controlled
    }

    /// Answers the slot operations that can run: `slots` at once, an action on an idle slot.
    /// True when one was answered.
    fn run_controls(&mut self) -> bool {
        let n = self.controls.len();
        self.inner.controls.take_all(&mut self.controls);
        if self.controls.is_empty() {
            return false;
        }
        let mut answered = 0;
        let mut i = 0;
        while i < self.controls.len() {
            let runnable = match &self.controls[i].op {
                Op::Slots => true,
                Op::Slot(id, _) => self.slots[*id as usize].req.is_none(),
            };
            if !runnable {
                i += 1;
                continue;
            }
            let c = self.controls.remove(i);
            let answer = match c.op {
                Op::Slots => ControlReply::Slots(self.slot_infos()),
                Op::Slot(id, action) => self.slot_action(id as usize, action),
            };
            (c.reply)(answer);
            answered += 1;
        }
        self.inner.controls.release(answered);
        answered > 0 || self.controls.len() > n
    }

    fn slot_infos(&self) -> Vec<SlotInfo> {
        self.slots
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let task = match &s.req {
                    Some(a) => Some(SlotTask {
                        id: a.shared.id,
                        tag: a.tag.clone(),
                        n_prompt_tokens: a.prompt.len() as u32,
                        n_prompt_processed: (a.n_done - a.n_cached) as u32,
                        n_prompt_cached: a.n_cached as u32,
                        n_decoded: a.n_generated,
                        n_remain: if a.max_tokens < 0 { -1 } else { a.max_tokens as i64 - a.n_generated as i64 },
                        has_next_token: true,
                        has_new_line: a.has_new_line,
                    }),
                    None => s.last_task.clone(),
                };
                SlotInfo { id: i as u32, n_ctx: self.inner.n_ctx_seq, is_processing: s.req.is_some(), task, n_cached_tokens: s.cache.len() }
            })
            .collect()
    }

    /// Runs `action` on idle slot `s`.
    fn slot_action(&mut self, s: usize, action: SlotAction) -> ControlReply {
        let t0 = Instant::now();
        match action {
            SlotAction::Erase => {
                let n_erased = self.slots[s].cache.len();
                self.ctx.kv.seq_rm(s as i32, -1, -1);
                self.slots[s].cache.clear();
                ControlReply::Erased { n_erased }
            }
            SlotAction::Save(path) => {
                crate::state::save(&self.ctx, Some(s), &mut self.state_buf);
                match crate::state::write_file(&path, crate::state::SEQ_FILE_MAGIC, crate::state::SEQ_FILE_VERSION, &self.slots[s].cache, &self.state_buf) {
                    Ok(n_bytes) => ControlReply::Saved { n_tokens: self.slots[s].cache.len(), n_bytes, ms: t0.elapsed().as_secs_f64() * 1e3 },
                    Err(e) => ControlReply::Error(ControlError::Failed(format!("Unable to save slot: {e}"))),
                }
            }
            SlotAction::Restore(path) => {
                // Whatever happens, the slot's old cache is gone (as upstream's failed restore
                // leaves the slot empty and usable).
                self.ctx.kv.seq_rm(s as i32, -1, -1);
                self.slots[s].cache.clear();
                match self.restore(s, &path) {
                    Ok((n_tokens, n_bytes)) => ControlReply::Restored { n_tokens, n_bytes, ms: t0.elapsed().as_secs_f64() * 1e3 },
                    Err(e) => {
                        self.ctx.kv.seq_rm(s as i32, -1, -1);
                        self.slots[s].cache.clear();
                        ControlReply::Error(ControlError::Failed(format!("Unable to restore slot: {e}")))
                    }
                }
            }
        }
    }

    fn restore(&mut self, s: usize, path: &std::path::Path) -> Result<(usize, usize), String> {
        let (tokens, state, n_bytes) = crate::state::read_file(path, crate::state::SEQ_FILE_MAGIC, crate::state::SEQ_FILE_VERSION)?;
        if tokens.len() > self.inner.n_ctx_seq as usize {
            return Err(format!("the file holds {} tokens; a slot holds at most {}", tokens.len(), self.inner.n_ctx_seq));
        }
        let n_vocab = self.inner.model.hp.n_vocab;
        if let Some(t) = tokens.iter().find(|&&t| t < 0 || t as usize >= n_vocab) {
            return Err(format!("token {t} in the file is not in the vocabulary (n_vocab = {n_vocab})"));
        }
        if self.pooled && !self.evict_idle(tokens.len(), Some(s)) {
            return Err(format!("no room in the KV pool for {} cells", tokens.len()));
        }
        crate::state::load(&mut self.ctx, &state, Some(s))?;
        // The cells must be the tokens' positions, 0 to n - 1, for prefix reuse to be right.
        let (lo, hi) = (self.ctx.kv.seq_pos_min(s), self.ctx.kv.seq_pos_max(s));
        let want = if tokens.is_empty() { (-1, -1) } else { (0, tokens.len() as i32 - 1) };
        let n_cells = (0..self.ctx.kv.n_cells_total()).filter(|&i| self.ctx.kv.cell(i).seqs.contains(s)).count();
        if (lo, hi) != want || n_cells != tokens.len() {
            return Err(format!("the file's {} tokens do not match its {n_cells} KV cells (positions {lo} to {hi})", tokens.len()));
        }
        self.slots[s].cache.extend_from_slice(&tokens);
        Ok((tokens.len(), n_bytes))
    }

    fn take_submissions(&mut self) {
        self.taken.clear();
        self.inner.queue.take_all(&mut self.taken);
        self.waiting.extend(self.taken.drain(..));
    }

    fn end_cancelled(&mut self) {
        let mut i = 0;
        while i < self.waiting.len() {
            if self.waiting[i].shared.cancel.load(Ordering::Acquire) {
                let sub = self.waiting.remove(i).expect("index in range");
                self.end_unstarted(sub, FinishKind::Cancelled);
            } else {
                i += 1;
            }
        }
        for s in 0..self.slots.len() {
            if self.slots[s].req.as_ref().is_some_and(|a| a.shared.cancel.load(Ordering::Acquire)) {
                self.finish(s, FinishKind::Cancelled);
            }
        }
    }

    /// Ends a request that never got a slot.
    fn end_unstarted(&mut self, mut sub: Submitted, kind: FinishKind) {
        self.inner.queue.release(1);
        self.inner.record(|m| m.queued.add(-1));
        let info = FinishInfo { reason: Some(kind), n_prompt: sub.prompt.len() as u32, total_us: sub.t_submit.elapsed().as_micros() as u64, ..Default::default() };
        // Counted before the final event is out, so whoever sees the event sees the count.
        self.inner.record(|m| m.finished[kind as usize].add(1));
        deliver_final(&self.inner, &sub.shared, &mut sub.callback, &info);
    }

    fn admit(&mut self) {
        while !self.waiting.is_empty() {
            // The request at the head decides whether prefixes may be reused for it.
            self.reuse_head = self.waiting[0].reuse_prefix;
            let slot = match self.waiting[0].slot {
                // A request for a busy slot waits for it (and the queue behind it).
                Some(p) if self.slots[p as usize].req.is_some() => return,
                Some(p) => p as usize,
                None => match self.choose_slot(&self.waiting[0].prompt) {
                    Some(s) => s,
                    None => return,
                },
            };
            if self.pooled && !self.fits(slot, &self.waiting[0].prompt) {
                // First come, first served: nothing passes the request at the head.
                return;
            }
            let sub = self.waiting.pop_front().expect("not empty");
            self.inner.queue.release(1);
            self.inner.record(|m| {
                m.queued.add(-1);
                m.running.add(1);
            });
            let reuse = self.reuse_prefix(slot, &sub.prompt);
            if self.pooled {
                let made = self.evict_idle(sub.prompt.len() - reuse, Some(slot));
                debug_assert!(made, "admission checked that eviction makes the room");
            }
            self.inner.record(|m| m.prompt_reused.add(reuse as u64));
            let order = self.next_order;
            self.next_order += 1;
            self.slots[slot].req = Some(Active {
                shared: sub.shared,
                n_done: reuse,
                n_cached: reuse,
                prompt: sub.prompt,
                pending: None,
                sampler: sub.sampler,
                grammar: sub.grammar,
                max_tokens: sub.max_tokens,
                n_generated: 0,
                stop_tokens: sub.stop_tokens,
                stop: StopMatcher::new(sub.stop_strings),
                ignore_eos: sub.ignore_eos,
                callback: sub.callback,
                n_probs: sub.n_probs,
                probs: VecDeque::with_capacity(if sub.n_probs > 0 { 64 } else { 0 }),
                t_submit: sub.t_submit,
                t_admit: Instant::now(),
                t_first: None,
                t_last: None,
                order,
                tag: sub.tag,
                has_new_line: false,
                t_max_predict: sub.t_max_predict,
                progress: sub.progress,
            });
            self.report_progress(slot);
        }
    }

    /// Whether the request being admitted may reuse cached prefixes.
    fn reuse_ok(&self) -> bool {
        self.inner.params.prefix_reuse && self.reuse_head
    }

    /// The free slot whose cached tokens share the longest prefix with `prompt` (the least
    /// recently used among equals), or None when every slot is busy. In the pool, where a
    /// prefix is shared from whichever slot holds it, an empty slot comes first (every cache
    /// stays for later requests), then the same order.
    fn choose_slot(&self, prompt: &[i32]) -> Option<usize> {
        let reuse = self.reuse_ok();
        let pooled = self.pooled;
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.req.is_none())
            .max_by_key(|(_, s)| (pooled && s.cache.is_empty(), if reuse { lcp(&s.cache, prompt) } else { 0 }, std::cmp::Reverse(s.last_used)))
            .map(|(i, _)| i)
    }

    /// The longest prefix of `prompt` (at most all but its last token) some slot holds, and
    /// that slot (`slot`, the one the request takes, among equals).
    fn best_prefix(&self, slot: usize, prompt: &[i32]) -> (usize, usize) {
        if !self.reuse_ok() {
            return (0, slot);
        }
        let limit = prompt.len() - 1;
        let own = (lcp(&self.slots[slot].cache, prompt).min(limit), slot);
        (0..self.slots.len()).filter(|&s| s != slot).map(|s| (lcp(&self.slots[s].cache, prompt).min(limit), s)).fold(own, |b, c| if c.0 > b.0 { c } else { b })
    }

    /// Prompt tokens of running requests that have no cells yet: the cells admission promised.
    fn reserved(&self) -> usize {
        self.slots.iter().filter_map(|s| s.req.as_ref()).map(|a| a.prompt.len() - a.n_done).sum()
    }

    /// Pool cells neither used nor promised to a running request's prompt.
    fn room(&self) -> usize {
        (self.n_cells - self.ctx.kv.used_cells()).saturating_sub(self.reserved())
    }

    /// The pool: whether `prompt`, taking `slot`, fits once idle slots' caches are evicted —
    /// its tokens past the prefix it shares against the cells that running requests hold
    /// (shared cells count once) or have reserved, and the shared prefix itself.
    fn fits(&self, slot: usize, prompt: &[i32]) -> bool {
        let (reuse, src) = self.best_prefix(slot, prompt);
        let need = prompt.len() - reuse;
        if need <= self.room() {
            return true;
        }
        let mut running = crate::kv::SeqSet::EMPTY;
        for (s, sl) in self.slots.iter().enumerate() {
            if sl.req.is_some() {
                running.insert(s);
            }
        }
        let running = running.words();
        let mut held = 0;
        for i in 0..self.ctx.kv.view_cells(0) {
            let c = self.ctx.kv.cell(i);
            if c.is_empty() {
                continue;
            }
            let by_running = c.seqs.words().iter().zip(&running).any(|(a, b)| a & b != 0);
            if by_running || (c.seqs.contains(src) && (c.pos as usize) < reuse) {
                held += 1;
            }
        }
        need + held + self.reserved() <= self.n_cells
    }

    /// The pool: evicts idle slots' cached cells, least recently used first (never `keep`'s),
    /// until `need` cells are free beyond those reserved; false when that cannot be reached.
    fn evict_idle(&mut self, need: usize, keep: Option<usize>) -> bool {
        loop {
            if self.room() >= need {
                return true;
            }
            let lru = (0..self.slots.len()).filter(|&s| Some(s) != keep && self.slots[s].req.is_none() && !self.slots[s].cache.is_empty()).min_by_key(|&s| self.slots[s].last_used);
            let Some(s) = lru else { return false };
            self.ctx.kv.seq_rm(s as i32, -1, -1);
            self.slots[s].cache.clear();
        }
    }

    /// The pool, before a step: makes room for the generating sequences' next tokens (`want`
    /// of them) by evicting idle caches and, while none can decode, ending the latest admitted
    /// generating request with `Length`. Returns the admission order from which generating
    /// sequences wait this step (None: all decode).
    fn room_for_generation(&mut self) -> Option<u64> {
        loop {
            let want = self.order_generating();
            if want == 0 {
                return None;
            }
            if !self.evict_idle(want, None) && self.room() == 0 {
                // No cell for any: the youngest ends; its cells (now an idle cache) go next turn
                // of this loop.
                let (_, s) = *self.order[..want].iter().max().expect("want > 0");
                crate::log_info!("ds_engine: the KV pool is full ({} cells); request {} ends at its length so that the earlier ones go on", self.n_cells, self.slots[s].req.as_ref().map_or(0, |a| a.shared.id));
                self.finish(s, FinishKind::Length);
                continue;
            }
            let room = self.room();
            if room >= want {
                return None;
            }
            self.order[..want].sort_unstable();
            return Some(self.order[room].0);
        }
    }

    /// Fills `order` with (admission order, slot) of the sequences with a token to decode whose
    /// event ring has room for it; returns their number.
    fn order_generating(&mut self) -> usize {
        self.order.clear();
        for (s, slot) in self.slots.iter().enumerate() {
            let Some(a) = &slot.req else { continue };
            if a.pending.is_none() {
                continue;
            }
            if let Some(ring) = &a.shared.ring {
                if (ring.capacity() - 1).saturating_sub(ring.len()) < a.stop.held() + 1 {
                    continue;
                }
            }
            self.order.push((a.order, s));
        }
        self.order.len()
    }

    /// Keeps the slot's cells of the longest prefix of `prompt` it (or, copied, another slot)
    /// holds, at most all but the prompt's last token (whose logits are needed); drops the
    /// rest. Returns the number of reused tokens.
    fn reuse_prefix(&mut self, slot: usize, prompt: &[i32]) -> usize {
        let limit = prompt.len() - 1;
        let mut keep = 0;
        if self.pooled && self.reuse_ok() {
            // One stream: the prefix's cells are shared, not copied (any gain is worth it).
            let (n, src) = self.best_prefix(slot, prompt);
            keep = n;
            if src != slot {
                self.ctx.kv.seq_rm(slot as i32, -1, -1);
                self.ctx.kv.seq_cp(src, slot, 0, n as i32);
                let (a, b) = if src < slot { let (x, y) = self.slots.split_at_mut(slot); (&x[src], &mut y[0]) } else { let (x, y) = self.slots.split_at_mut(src); (&y[0], &mut x[slot]) };
                b.cache.clear();
                b.cache.extend_from_slice(&a.cache[..n]);
            }
        } else if self.reuse_ok() {
            keep = lcp(&self.slots[slot].cache, prompt).min(limit);
            // A longer prefix in another slot (running or not): copy that slot's cells.
            let best = (0..self.slots.len()).filter(|&s| s != slot).map(|s| (lcp(&self.slots[s].cache, prompt).min(limit), s)).max();
            if let Some((n, src)) = best {
                if n >= keep + MIN_COPY_GAIN {
                    self.ctx.kv.seq_cp(src, slot, -1, -1);
                    let (a, b) = if src < slot { let (x, y) = self.slots.split_at_mut(slot); (&x[src], &mut y[0]) } else { let (x, y) = self.slots.split_at_mut(src); (&y[0], &mut x[slot]) };
                    b.cache.clear();
                    b.cache.extend_from_slice(&a.cache);
                    keep = n;
                }
            }
        }
        if !self.ctx.kv.seq_rm(slot as i32, keep as i32, -1) {
            // a cache that cannot cut a sequence (deepseek4's) starts the slot over
            self.ctx.kv.seq_rm(slot as i32, -1, -1);
            keep = 0;
        }
        self.slots[slot].cache.truncate(keep);
        keep
    }

    /// Builds and decodes one step; false when no slot had anything to decode.
    fn decode_step(&mut self) -> bool {
        self.tokens.clear();
        self.pos.clear();
        self.seq_ids.clear();
        self.logits.clear();
        self.rows.clear();
        let n_batch = self.ctx.n_batch as usize;
        let wait_from = if self.pooled { self.room_for_generation() } else { None };
        // Every generating sequence's next token (unless its ring has no room, or the pool has
        // no cell for it this step).
        for s in 0..self.slots.len() {
            let slot = &self.slots[s];
            let Some(a) = &slot.req else { continue };
            let Some(t) = a.pending else { continue };
            if wait_from.is_some_and(|o| a.order >= o) {
                continue;
            }
            if let Some(ring) = &a.shared.ring {
                // Room for the token and whatever the stop matcher may release with it. The
                // flag is raised before the check and a reader checks it after making room
                // (both behind SeqCst fences), so one of the two sees the other.
                a.shared.paused.store(true, Ordering::SeqCst);
                std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
                let room = (ring.capacity() - 1).saturating_sub(ring.len());
                if room < a.stop.held() + 1 {
                    continue;
                }
                a.shared.paused.store(false, Ordering::Relaxed);
            }
            self.rows.push((Row::Next(s), self.tokens.len()));
            self.tokens.push(t);
            self.pos.push(slot.cache.len() as i32);
            self.seq_ids.push(s as i32);
            self.logits.push(1);
        }
        let n_next = self.tokens.len();
        let n_occupied = self.slots.iter().filter(|s| s.req.is_some()).count();
        let mut budget = if n_next == 0 { n_batch } else { self.cost.budget(n_next, n_occupied, self.inner.params.prefill_chunk as usize, self.inner.params.max_step_slowdown) };
        budget = budget.min(n_batch - n_next);
        // Prompt chunks, first admitted first.
        self.order.clear();
        for (s, slot) in self.slots.iter().enumerate() {
            if let Some(a) = &slot.req {
                if a.n_done < a.prompt.len() {
                    self.order.push((a.order, s));
                }
            }
        }
        self.order.sort_unstable();
        for k in 0..self.order.len() {
            let s = self.order[k].1;
            if budget == 0 {
                break;
            }
            let a = self.slots[s].req.as_ref().expect("slot has a request");
            let n = (a.prompt.len() - a.n_done).min(budget);
            let last = a.n_done + n == a.prompt.len();
            self.rows.push((Row::Prompt { slot: s, n, last }, self.tokens.len()));
            for i in 0..n {
                self.tokens.push(a.prompt[a.n_done + i]);
                self.pos.push((a.n_done + i) as i32);
                self.seq_ids.push(s as i32);
                self.logits.push((last && i == n - 1) as i8);
            }
            budget -= n;
        }
        if self.tokens.is_empty() {
            return false;
        }
        let n_prompt = self.tokens.len() - n_next;
        let started = Instant::now();
        let seq_ids = &self.seq_ids;
        let seq_of = |i: usize| std::slice::from_ref(&seq_ids[i]);
        let input = BatchInput { tokens: &self.tokens, pos: Some(&self.pos), seq_ids: Some(&seq_of), logits: Some(&self.logits) };
        let result = self.ctx.decode(&input, None);
        self.step += 1;
        self.inner.record(|m| {
            m.steps.add(1);
            m.busy_slot_steps.add(n_occupied as u64);
        });
        if let Err(e) = result {
            crate::log_error!("ds_engine: a decode step of {} tokens failed: {e:?}; its requests end with an error", self.tokens.len());
            let slots: Vec<usize> = self.rows.iter().map(|(r, _)| match *r {
                Row::Next(s) | Row::Prompt { slot: s, .. } => s,
            }).collect();
            for s in slots {
                if self.slots[s].req.is_some() {
                    self.finish(s, FinishKind::Error);
                }
            }
            return true;
        }
        self.cost.observe(n_next, n_prompt, started.elapsed().as_secs_f64() * 1e6);
        self.inner.record(|m| m.prompt_computed.add(n_prompt as u64));
        // Advance every row's slot, then sample where there are logits.
        for r in 0..self.rows.len() {
            let (row, at) = self.rows[r];
            match row {
                Row::Next(s) => {
                    let slot = &mut self.slots[s];
                    let a = slot.req.as_mut().expect("slot has a request");
                    slot.cache.push(a.pending.take().expect("pending token"));
                    self.sample_and_emit(s, at);
                }
                Row::Prompt { slot: s, n, last } => {
                    let slot = &mut self.slots[s];
                    let a = slot.req.as_mut().expect("slot has a request");
                    slot.cache.extend_from_slice(&a.prompt[a.n_done..a.n_done + n]);
                    a.n_done += n;
                    self.report_progress(s);
                    if last {
                        self.sample_and_emit(s, at + n - 1);
                    }
                }
            }
        }
        true
    }

    /// Tells slot `s`'s request how far its prompt is, when it asked.
    fn report_progress(&mut self, s: usize) {
        let Some(a) = self.slots[s].req.as_mut() else { return };
        if let Some(cb) = a.progress.as_mut() {
            // The time spent on the prompt: none before any of it was computed.
            let time_ms = if a.n_done > a.n_cached { a.t_admit.elapsed().as_secs_f64() * 1e3 } else { 0.0 };
            cb(&super::PromptProgress { total: a.prompt.len() as u32, cache: a.n_cached as u32, processed: a.n_done as u32, time_ms });
        }
    }

    /// Samples slot `s`'s next token from batch row `at` and acts on it.
    fn sample_and_emit(&mut self, s: usize, at: usize) {
        let logits = match self.ctx.logits_row(at as i32) {
            Ok(l) => l,
            Err(e) => {
                crate::log_error!("ds_engine: no logits for row {at}: {e}");
                return self.finish(s, FinishKind::Error);
            }
        };
        let a = self.slots[s].req.as_mut().expect("slot has a request");
        let sampled = match &mut a.grammar {
            None => sample(&mut *a.sampler, logits, &mut self.candidates),
            Some(g) => sample_constrained(&mut *a.sampler, g, logits, &mut self.candidates),
        };
        let token = match sampled {
            Ok(t) => t,
            Err(e) => {
                crate::log_error!("ds_engine: request {}: {e}", a.shared.id);
                return self.finish(s, FinishKind::Error);
            }
        };
        if a.n_probs > 0 {
            a.probs.push_back(TokenProbs::compute(logits, token, a.n_probs as usize));
        }
        let now = Instant::now();
        match a.t_last {
            None => {
                a.t_first = Some(now);
                let ttft = now.duration_since(a.t_submit).as_nanos() as u64;
                self.inner.record(|m| m.ttft.observe(ttft, 1));
            }
            Some(prev) => {
                let itl = now.duration_since(prev).as_nanos() as u64;
                self.inner.record(|m| m.itl.observe(itl, 1));
            }
        }
        a.t_last = Some(now);
        let vocab = &self.inner.model.vocab;
        if !a.ignore_eos && vocab.is_eog(token) {
            return self.finish(s, FinishKind::Eog);
        }
        if a.stop_tokens.contains(&token) {
            return self.finish(s, FinishKind::Stop);
        }
        a.n_generated += 1;
        self.inner.record(|m| m.generated.add(1));
        self.window.0 += 1;
        let inner = &*self.inner;
        let piece = inner.pieces.get(token);
        let newline = piece.contains(&b'\n');
        a.has_new_line |= newline;
        // The generation time limit ends the request at a line's end (upstream's rule).
        let timed_out = newline && a.t_max_predict.is_some_and(|t| a.t_first.is_some_and(|f| now.duration_since(f) > t));
        let (shared, callback, probs) = (&a.shared, &mut a.callback, &mut a.probs);
        let mut keep_going = true;
        let stopped = a.stop.push(token, piece, |t, n| keep_going &= deliver_token(inner, shared, callback, probs, t, n));
        if let (Some(ring), false) = (&a.shared.ring, stopped) {
            // Never hold more than the ring could take at once with the final event.
            while a.stop.held() + 2 > ring.capacity() {
                a.stop.release_oldest(|t, n| keep_going &= deliver_token(inner, shared, callback, probs, t, n));
            }
        }
        if stopped {
            return self.finish(s, FinishKind::Stop);
        }
        if !keep_going {
            a.shared.cancel.store(true, Ordering::Release);
            return self.finish(s, FinishKind::Cancelled);
        }
        if timed_out || (a.max_tokens >= 0 && a.n_generated >= a.max_tokens as u32) {
            return self.finish(s, FinishKind::Length);
        }
        if self.slots[s].cache.len() >= self.inner.n_ctx_seq as usize {
            return self.finish(s, FinishKind::Length);
        }
        self.slots[s].req.as_mut().expect("slot has a request").pending = Some(token);
    }

    /// Ends slot `s`'s request with `kind`: releases what its stop matcher holds (unless it
    /// was cancelled or failed), delivers the final event, frees the slot (its cells stay for
    /// prefix reuse, except after an error).
    fn finish(&mut self, s: usize, kind: FinishKind) {
        let Some(mut a) = self.slots[s].req.take() else { return };
        let inner = &*self.inner;
        match kind {
            FinishKind::Length | FinishKind::Eog | FinishKind::Stop => {
                let (shared, callback, probs) = (&a.shared, &mut a.callback, &mut a.probs);
                a.stop.flush(|t, n| {
                    deliver_token(inner, shared, callback, probs, t, n);
                });
            }
            FinishKind::Cancelled | FinishKind::Error => a.stop.discard(),
        }
        let info = FinishInfo {
            reason: Some(kind),
            n_prompt: a.prompt.len() as u32,
            n_cached: a.n_cached as u32,
            n_generated: a.n_generated,
            ttft_us: a.t_first.map_or(0, |t| t.duration_since(a.t_submit).as_micros() as u64),
            total_us: a.t_submit.elapsed().as_micros() as u64,
        };
        // llama-server's prompt and generation times: admission to first token, first token to end.
        let now = Instant::now();
        let (prompt_us, gen_us) = match a.t_first {
            Some(f) => (f.duration_since(a.t_admit).as_micros() as u64, now.duration_since(f).as_micros() as u64),
            None => (now.duration_since(a.t_admit).as_micros() as u64, 0),
        };
        let n_tokens = self.slots[s].cache.len() as i64;
        if n_tokens > self.n_tokens_max {
            let d = n_tokens - self.n_tokens_max;
            self.n_tokens_max = n_tokens;
            inner.record(|m| m.n_tokens_max.add(d));
        }
        // Counted before the final event is out, so whoever sees the event sees the count.
        inner.record(|m| {
            m.finished[kind as usize].add(1);
            m.running.add(-1);
            m.prompt_us.add(prompt_us);
            m.generation_us.add(gen_us);
        });
        deliver_final(inner, &a.shared, &mut a.callback, &info);
        self.slots[s].last_used = self.step;
        // An idle slot reports its last request with no budget left (as upstream's).
        self.slots[s].last_task = Some(SlotTask {
            id: a.shared.id,
            tag: a.tag.clone(),
            n_prompt_tokens: a.prompt.len() as u32,
            n_prompt_processed: (a.n_done - a.n_cached) as u32,
            n_prompt_cached: a.n_cached as u32,
            n_decoded: 0,
            n_remain: -1,
            has_next_token: false,
            has_new_line: a.has_new_line,
        });
        if kind == FinishKind::Error {
            self.ctx.kv.seq_rm(s as i32, -1, -1);
            self.slots[s].cache.clear();
        }
        // The request's sampler, prompt and buffers are freed here, on the decode thread.
        drop(a);
    }

    fn fail_all_running(&mut self) {
        for s in 0..self.slots.len() {
            if self.slots[s].req.is_some() {
                self.finish(s, FinishKind::Error);
            }
        }
    }

    /// Removes the table entries whose final event has reached the application.
    fn remove_drained(&mut self) {
        if self.inner.drained_pending.swap(0, Ordering::AcqRel) > 0 {
            self.inner.table.remove_where(|_, r| r.drained.load(Ordering::Acquire));
        }
    }

    fn update_gauges(&mut self) {
        let allocated = crate::sys::alloc::thread_allocated_bytes();
        if allocated != self.allocated {
            let d = allocated.wrapping_sub(self.allocated);
            self.inner.record(|m| m.loop_allocated_bytes.add(d));
            self.allocated = allocated;
        }
        let used = self.ctx.kv.used_cells() as i64;
        let d = used - self.kv_used;
        if d != 0 {
            self.inner.record(|m| m.kv_cells_used.add(d));
            self.kv_used = used;
        }
        let elapsed = self.window.1.elapsed();
        if elapsed >= Duration::from_secs(1) {
            let tps = (self.window.0 as f64 / elapsed.as_secs_f64() * 1000.0) as i64;
            let d = tps - self.tps_milli;
            self.inner.record(|m| m.tokens_per_second_milli.add(d));
            self.tps_milli = tps;
            self.window = (0, Instant::now());
        }
    }

    /// The engine is closing: every queued and running request ends "cancelled" (callbacks
    /// receive their final event here), also those whose submission raced with the close.
    fn shut_down(&mut self) {
        loop {
            self.take_submissions();
            while let Some(sub) = self.waiting.pop_front() {
                self.end_unstarted(sub, FinishKind::Cancelled);
            }
            if self.inner.queue.is_empty() {
                break;
            }
            std::thread::yield_now();
        }
        for s in 0..self.slots.len() {
            if self.slots[s].req.is_some() {
                self.finish(s, FinishKind::Cancelled);
            }
        }
        // Slot operations still pending (also those whose push raced with the close) get
        // their answer: the engine closed.
        loop {
            self.inner.controls.take_all(&mut self.controls);
            let n = self.controls.len();
            for c in self.controls.drain(..) {
                (c.reply)(ControlReply::Error(ControlError::Closed));
            }
            self.inner.controls.release(n);
            if self.inner.controls.is_empty() {
                break;
            }
            std::thread::yield_now();
        }
        self.remove_drained();
        self.update_gauges();
    }
}

/// Hands a token event to the request's callback or ring; false when the callback asks to
/// stop. The ring has room: the step checked it before decoding.
fn deliver_token(inner: &Inner, shared: &RequestShared, callback: &mut Option<Callback>, probs: &mut VecDeque<TokenProbs>, token: i32, n_piece: u32) -> bool {
    let event = Event::Token { token, n_piece };
    match callback {
        Some(cb) => {
            let piece = &inner.pieces.get(token)[..n_piece as usize];
            // The stop matcher releases tokens in the order they were sampled.
            let p = probs.pop_front();
            debug_assert!(p.is_none_or(|p| p.token == token));
            cb(&EventView { id: shared.id, user_data: shared.user_data, event, piece, finish: None, probs: p.as_ref() })
        }
        None => {
            let ring = shared.ring.as_ref().expect("polled requests have a ring");
            let pushed = ring.push(event);
            debug_assert!(pushed, "the step checked the ring's room");
            if !pushed {
                crate::log_error!("ds_engine: request {}: its event buffer overflowed (internal error)", shared.id);
            }
            shared.notify.notify();
            true
        }
    }
}

/// Publishes a request's totals and its final event (exactly once: only the loop calls this,
/// once per request).
fn deliver_final(inner: &Inner, shared: &RequestShared, callback: &mut Option<Callback>, info: &FinishInfo) {
    shared.set_info(info);
    let kind = info.reason.unwrap_or(FinishKind::Error);
    match callback {
        Some(cb) => {
            cb(&EventView { id: shared.id, user_data: shared.user_data, event: Event::Finish(kind), piece: &[], finish: Some(*info), probs: None });
            shared.drained.store(true, Ordering::Release);
            inner.drained_pending.fetch_add(1, Ordering::AcqRel);
        }
        None => {
            let ring = shared.ring.as_ref().expect("polled requests have a ring");
            let pushed = ring.push(Event::Finish(kind));
            debug_assert!(pushed, "the final event always fits");
            shared.notify.notify();
        }
    }
}
