//! The grammar sampler (upstream's "grammar"): `apply` sends every candidate the grammar does not
//! allow to -inf, `accept` advances the grammar by the chosen token; lazy grammars wait for a
//! trigger token or pattern, then replay the text from the trigger on.
//!
//! Where upstream aborts or throws (an end-of-generation token accepted where the grammar cannot
//! end, a token that leaves no stack alive, a state beyond the bounds), this sampler logs an error
//! and the grammar becomes dead: from then on it allows only end-of-generation tokens, so a chain
//! ends its generation instead of crashing.
//!
//! The current state lives in the sampler's `SetTable` (as the id of its interned stacks), and
//! accepting a token or deciding a few candidates follows the table's cached transitions by
//! code point, so once a grammar's states have been met a step allocates nothing (the serving
//! engine samples on its decode thread). Where the table cannot say (a token element on top of
//! a stack, the table full or over its bounds) the stacks are computed directly, as before.

use std::ffi::CStr;
use std::sync::Arc;

use super::matcher::{self, SetTable, TokenBits, EMPTY};
use super::regex::Regex;
use super::stacks::{decode, match_token, Limits, Partial, StackSet};
use super::Grammar;
use crate::model::Model;
use crate::sampling::{Candidates, Sampler};

/// Bytes of output a lazy grammar with trigger words keeps while it waits, before the part no
/// word can start in any more is dropped.
const WORD_BUFFER: usize = 4096;

/// Up to this many candidates, `apply` decides each directly instead of walking the trie.
const FEW_CANDIDATES: usize = 64;

/// What a sampler and its clones share: the grammar and its triggers.
pub struct Config {
    pub grammar: Grammar,
    pub lazy: bool,
    pub trigger_tokens: Vec<i32>,
    pub patterns: Vec<Regex>,
    /// Trigger words, when given (then `patterns` is empty): upstream turns them into the
    /// pattern `[\s\S]*?(w1|w2|…)[\s\S]*`, whose match is the leftmost place a word starts
    /// (the first word listed at a tie); found here by searching only the text a token adds,
    /// so the wait costs each token its own length, not the output's.
    pub words: Vec<Vec<u8>>,
    /// Words count only after this text has appeared (empty: from the start); e.g. `</think>`,
    /// so that a tool call's marker inside the reasoning does not start the grammar.
    pub gate: Vec<u8>,
}

/// Where the leftmost of `words` starts in `buf`, looking only at starts from `from` on.
fn find_word(buf: &[u8], from: usize, words: &[Vec<u8>]) -> Option<usize> {
    (from..=buf.len()).find(|&p| words.iter().any(|w| buf[p..].starts_with(w)))
}

pub struct GrammarSampler {
    model: Arc<Model>,
    /// None: the empty grammar, which constrains nothing (upstream's sampler without a grammar).
    cfg: Option<Arc<Config>>,
    /// The current stacks unless `in_table`; then they are `table.set(state)`.
    stacks: StackSet,
    state: u32,
    in_table: bool,
    partial: Partial,
    awaiting: bool,
    /// Waiting for the trigger words' gate.
    gated: bool,
    buffer: Vec<u8>,
    /// (token, start, end) of each token in `buffer`.
    positions: Vec<(i32, usize, usize)>,
    dead: bool,
    table: SetTable,
    bits: TokenBits,
    cps: Vec<u32>,
}

impl GrammarSampler {
    /// A sampler over `src` (GBNF) from rule `root`; `src` None or empty gives the sampler that
    /// constrains nothing. Trigger words are turned into one pattern, as upstream does.
    pub fn new(model: Arc<Model>, src: Option<&[u8]>, root: &[u8], lazy: bool, words: &[&[u8]], patterns: &[&[u8]], tokens: &[i32]) -> Result<GrammarSampler, String> {
        Self::with_limits(model, src, root, lazy, words, patterns, tokens, Limits::default())
    }

    #[allow(clippy::too_many_arguments)]
    pub fn with_limits(model: Arc<Model>, src: Option<&[u8]>, root: &[u8], lazy: bool, words: &[&[u8]], patterns: &[&[u8]], tokens: &[i32], limits: Limits) -> Result<GrammarSampler, String> {
        let cfg = match src {
            Some(src) if !src.is_empty() => {
                let grammar = Grammar::new(src, root, Some(&model.vocab), limits).map_err(|e| e.0)?;
                let mut texts: Vec<String> = Vec::new();
                if words.is_empty() {
                    for p in patterns {
                        texts.push(std::str::from_utf8(p).map_err(|_| "a trigger pattern is not valid UTF-8".to_string())?.to_string());
                    }
                }
                let patterns = texts.iter().map(|t| Regex::new(t)).collect::<Result<Vec<_>, _>>()?;
                let words = words.iter().map(|w| w.to_vec()).collect();
                Some(Arc::new(Config { grammar, lazy, trigger_tokens: tokens.to_vec(), patterns, words, gate: Vec::new() }))
            }
            _ => None,
        };
        let mut s = GrammarSampler {
            model,
            cfg,
            stacks: StackSet::default(),
            state: EMPTY,
            in_table: false,
            partial: Partial::default(),
            awaiting: false,
            gated: false,
            buffer: Vec::new(),
            positions: Vec::new(),
            dead: false,
            table: SetTable::default(),
            bits: TokenBits::default(),
            cps: Vec::new(),
        };
        s.reset();
        Ok(s)
    }

    /// Whether the sampler is waiting for a trigger (lazy grammars).
    /// A lazy grammar whose trigger words count only once `gate` has appeared in the output
    /// (no effect without trigger words).
    pub fn gated(mut self, gate: &[u8]) -> GrammarSampler {
        if let Some(cfg) = self.cfg.as_mut().and_then(Arc::get_mut) {
            if !cfg.words.is_empty() {
                cfg.gate = gate.to_vec();
            }
        }
        self.reset();
        self
    }

    /// Drops the first `cut` bytes of the waiting buffer, keeping the tokens that reach past it.
    fn drop_front(&mut self, cut: usize) {
        self.buffer.drain(..cut);
        self.positions.retain(|&(_, _, e)| e > cut);
        for p in &mut self.positions {
            p.1 = p.1.saturating_sub(cut);
            p.2 -= cut;
        }
    }

    pub fn awaiting_trigger(&self) -> bool {
        self.awaiting
    }

    /// The current stacks (for tests and the fuzzer).
    pub fn stacks(&self) -> &StackSet {
        if self.in_table {
            self.table.set(self.state)
        } else {
            &self.stacks
        }
    }

    /// The current state's id in the table (interned when it is not there yet).
    fn state_id(&mut self, g: &super::Grammar) -> u32 {
        if !self.in_table {
            self.state = self.table.intern(g, &self.stacks);
            self.in_table = true;
        }
        self.state
    }

    /// Empties the table (or only when over its budget), keeping the current state.
    fn clear_table(&mut self, always: bool) {
        if !always && !self.table.over_budget() {
            return;
        }
        if self.in_table {
            self.stacks.clone_from(self.table.set(self.state));
            self.in_table = false;
        }
        self.table.clear();
    }

    /// The state after the code points in `cps` from state `s`, by the table's transitions (as
    /// `Grammar::accept_token`: no code point drops the empty stacks); None where the table
    /// cannot say: a token element on top of a stack of `s` (upstream matches it by id), or the
    /// table full.
    fn walk_cps(&mut self, g: &super::Grammar, s: u32) -> Result<Option<u32>, String> {
        if !self.table.token_elems(s).is_empty() {
            return Ok(None);
        }
        if self.cps.is_empty() {
            return Ok(Some(self.table.non_empty(g, s)));
        }
        let mut t = s;
        for &c in &self.cps {
            if t == EMPTY {
                break;
            }
            t = match self.table.next(g, t, c) {
                Ok(n) => n,
                Err(e) if e == matcher::TABLE_FULL => return Ok(None),
                Err(e) => return Err(e),
            };
        }
        Ok(Some(t))
    }

    /// `allowed_slow`'s decision through the table (no allocation once the states are known):
    /// the token's code points from the current state, a token element on top of a stack before
    /// the last code point decides by id, and at the end a stack must remain (a partial UTF-8
    /// sequence must fit a character class on top). None where the table cannot say.
    fn allowed_fast(&mut self, g: &super::Grammar, id: i32) -> Option<Result<bool, String>> {
        let model = Arc::clone(&self.model);
        let vocab = &model.vocab;
        if id < 0 || id as usize >= vocab.n_tokens() {
            return Some(Ok(false));
        }
        if vocab.is_eog(id) {
            return Some(Ok(self.dead || self.stacks().can_end()));
        }
        if self.dead {
            return Some(Ok(false));
        }
        let piece = vocab.piece(id);
        let piece = &piece[..piece.iter().position(|&b| b == 0).unwrap_or(piece.len())];
        if piece.is_empty() {
            return Some(Ok(false));
        }
        let p = decode(piece, self.partial, &mut self.cps);
        if p.n_remain < 0 {
            return Some(Ok(false));
        }
        let mut t = self.state_id(g);
        for k in 0..self.cps.len() {
            if t == EMPTY {
                return Some(Ok(false));
            }
            if self.table.token_elems(t).iter().any(|&e| match_token(e, id)) {
                return Some(Ok(true));
            }
            t = self.table.next(g, t, self.cps[k]).ok()?;
        }
        if t == EMPTY {
            return Some(Ok(false));
        }
        if p.n_remain == 0 {
            return Some(Ok(true));
        }
        Some(Ok(self.table.set(t).0.iter().any(|st| st.last().is_some_and(|&top| !g.elem(top).is_token() && g.match_partial(top, p)))))
    }

    /// Whether an error has ended the grammar (it then allows only end-of-generation).
    pub fn is_dead(&self) -> bool {
        self.dead
    }

    /// upstream's decision for token `id` in the current state, computed without the trie (the
    /// reference for tests and the fuzzer); None while the sampler does not constrain.
    pub fn allowed_slow(&self, id: i32) -> Option<Result<bool, String>> {
        let cfg = self.cfg.as_ref()?;
        if self.awaiting {
            return None;
        }
        let vocab = &self.model.vocab;
        if id < 0 || id as usize >= vocab.n_tokens() {
            return Some(Ok(false));
        }
        if vocab.is_eog(id) {
            return Some(Ok(self.dead || self.stacks().can_end()));
        }
        if self.dead {
            return Some(Ok(false));
        }
        Some(matcher::allowed_one(&cfg.grammar, self.stacks(), self.partial, id, vocab.piece(id)))
    }

    fn die(&mut self, why: String) {
        crate::log_error!("grammar: {why}; the grammar allows only end-of-generation tokens from now on");
        self.dead = true;
    }

    /// upstream's llama_grammar_accept_token.
    fn accept_piece(&mut self, token: i32, piece: &[u8]) {
        let Some(cfg) = self.cfg.clone() else { return };
        if self.dead {
            return;
        }
        let g = &cfg.grammar;
        let p = decode(piece, self.partial, &mut self.cps);
        self.clear_table(false);
        let s = self.state_id(g);
        let next = match self.walk_cps(g, s) {
            Ok(Some(t)) => {
                self.state = t;
                Ok(t == EMPTY)
            }
            Ok(None) => {
                // from the stacks, as upstream computes it
                self.clear_table(false);
                let stacks = self.stacks().clone();
                g.accept_token(&stacks, token, &self.cps).map(|next| {
                    self.stacks = next;
                    self.in_table = false;
                    self.stacks.is_empty()
                })
            }
            Err(e) => Err(e),
        };
        match next {
            Ok(empty) => {
                self.partial = p;
                if empty {
                    self.die(format!("unexpected empty grammar stack after accepting piece '{}' ({token})", String::from_utf8_lossy(piece)));
                }
            }
            Err(e) => self.die(e),
        }
    }

    /// The allowed tokens of the current state into `self.bits` (end-of-generation included).
    fn compute_allowed(&mut self) {
        let Some(cfg) = self.cfg.clone() else { return };
        let model = Arc::clone(&self.model);
        let vocab = &model.vocab;
        self.bits.reset(vocab.n_tokens());
        let mut eog_ok = self.dead || self.stacks().can_end();
        if !self.dead {
            self.clear_table(false);
            let g = &cfg.grammar;
            let id = self.state_id(g);
            if let Err(e) = matcher::allowed(g, &mut self.table, vocab.grammar_trie(), id, self.partial, &mut self.bits) {
                self.bits.reset(vocab.n_tokens());
                if e == matcher::TABLE_FULL {
                    // too many distinct states for the cache: this apply decides each token
                    // directly (upstream's way), the table starts afresh
                    self.clear_table(true);
                    crate::log_info!("grammar: more distinct states than the cache holds; this step decides each token directly");
                    for t in 0..vocab.n_tokens() as i32 {
                        match self.allowed_slow(t) {
                            Some(Ok(true)) => self.bits.set(t),
                            Some(Ok(false)) | None => {}
                            Some(Err(e)) => {
                                self.bits.reset(vocab.n_tokens());
                                self.die(e);
                                eog_ok = true;
                                break;
                            }
                        }
                    }
                } else {
                    self.die(e);
                    eog_ok = true;
                }
            }
        }
        if eog_ok {
            for id in vocab.eog_ids() {
                self.bits.set(id);
            }
        }
    }

    /// The tokens allowed now, for tests and benchmarks; None when the sampler does not constrain
    /// (the empty grammar, or a lazy grammar waiting for its trigger).
    pub fn allowed(&mut self) -> Option<&TokenBits> {
        if self.cfg.is_none() || self.awaiting {
            return None;
        }
        self.compute_allowed();
        Some(&self.bits)
    }
}

impl Sampler for GrammarSampler {
    fn name(&self) -> &'static CStr {
        c"grammar"
    }

    fn apply(&mut self, cur: &mut Candidates<'_>) {
        if self.cfg.is_none() || self.awaiting {
            return;
        }
        if cur.len() <= FEW_CANDIDATES {
            // A few candidates (llama.cpp's common sampler checks the one token it picked): each
            // decided alone, by the table's transitions or directly, instead of walking the trie.
            let cfg = Arc::clone(self.cfg.as_ref().expect("checked above"));
            self.clear_table(false);
            for i in 0..cur.len() {
                let id = cur.data[i].id;
                let decided = match self.allowed_fast(&cfg.grammar, id) {
                    Some(d) => Some(d),
                    None => self.allowed_slow(id),
                };
                let ok = match decided {
                    Some(Ok(ok)) => ok,
                    Some(Err(e)) => {
                        self.die(e);
                        let vocab = &self.model.vocab;
                        cur.data[..].iter_mut().filter(|c| !vocab.is_eog(c.id)).for_each(|c| c.logit = f32::NEG_INFINITY);
                        return;
                    }
                    None => true,
                };
                if !ok {
                    cur.data[i].logit = f32::NEG_INFINITY;
                }
            }
            return;
        }
        self.compute_allowed();
        for c in cur.data.iter_mut() {
            if !self.bits.get(c.id) {
                c.logit = f32::NEG_INFINITY;
            }
        }
    }

    fn accept(&mut self, token: i32) {
        let Some(cfg) = self.cfg.clone() else { return };
        let model = Arc::clone(&self.model);
        let vocab = &model.vocab;
        if token < 0 || token as usize >= vocab.n_tokens() {
            crate::log_error!("grammar: accepted token id {token} is out of range (vocabulary of {})", vocab.n_tokens());
            return;
        }
        let piece = vocab.piece(token);
        if self.awaiting {
            if cfg.trigger_tokens.contains(&token) {
                self.awaiting = false;
                self.buffer.clear();
                self.accept_piece(token, piece);
                return;
            }
            let start = self.buffer.len();
            self.positions.push((token, start, start + piece.len()));
            self.buffer.extend_from_slice(piece);
            let found = if cfg.words.is_empty() {
                cfg.patterns.iter().find_map(|pat| pat.find(&self.buffer))
            } else {
                let longest = cfg.words.iter().map(Vec::len).max().unwrap_or(0);
                let mut from = start.saturating_sub(longest.saturating_sub(1));
                let mut hit = None;
                if self.gated {
                    if let Some(p) = find_word(&self.buffer, start.saturating_sub(cfg.gate.len().saturating_sub(1)), std::slice::from_ref(&cfg.gate)) {
                        // The gate and what came before it are out of the words' reach.
                        self.gated = false;
                        self.drop_front(p + cfg.gate.len());
                        from = 0;
                    }
                }
                if !self.gated {
                    hit = find_word(&self.buffer, from, &cfg.words);
                }
                if hit.is_none() && self.buffer.len() > WORD_BUFFER {
                    // Only the last bytes can begin a word or the gate still: the rest goes.
                    let keep = if self.gated { cfg.gate.len() } else { longest };
                    self.drop_front(self.buffer.len() - keep.saturating_sub(1));
                }
                hit
            };
            if let Some(start) = found {
                self.awaiting = false;
                let buffer = std::mem::take(&mut self.buffer);
                let positions = std::mem::take(&mut self.positions);
                for (tok, s, e) in positions {
                    if e <= start {
                        continue;
                    }
                    self.accept_piece(tok, &buffer[s.max(start)..e]);
                }
            }
            return;
        }
        if vocab.is_eog(token) {
            if self.dead || self.stacks().can_end() {
                return;
            }
            self.die(format!("end-of-generation token {token} accepted where the grammar cannot end"));
            return;
        }
        self.accept_piece(token, piece);
    }

    fn reset(&mut self) {
        let Some(cfg) = &self.cfg else { return };
        self.gated = cfg.lazy && !cfg.gate.is_empty();
        self.stacks = cfg.grammar.initial.clone();
        self.in_table = false;
        self.partial = Partial::default();
        self.awaiting = cfg.lazy;
        self.buffer.clear();
        self.positions.clear();
        self.dead = false;
    }

    fn clone_box(&self) -> Box<dyn Sampler + Send> {
        Box::new(GrammarSampler {
            model: Arc::clone(&self.model),
            cfg: self.cfg.clone(),
            stacks: self.stacks().clone(),
            state: EMPTY,
            in_table: false,
            partial: self.partial,
            awaiting: self.awaiting,
            gated: self.gated,
            buffer: self.buffer.clone(),
            positions: self.positions.clone(),
            dead: self.dead,
            table: SetTable::default(),
            bits: TokenBits::default(),
            cps: Vec::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The word search finds what upstream's pattern for the words finds, wherever the text
    /// the last token added begins.
    #[test]
    fn word_search_is_upstreams_pattern() {
        let words: Vec<Vec<u8>> = vec![b"<tool_call>".to_vec(), b"<tool".to_vec(), b"[TOOL_CALLS]".to_vec(), b"ab".to_vec()];
        let alts: Vec<String> = words.iter().map(|w| super::super::regex::escape(w)).collect();
        let re = Regex::new(&format!("[\\s\\S]*?({})[\\s\\S]*", alts.join("|"))).unwrap();
        let texts: [&[u8]; 7] = [b"no trigger here", b"x <tool_call> y", b"aab", b"call [TOOL_CALLS][", b"<to", b"ab<tool_call>", "é <tool".as_bytes()];
        for t in texts {
            // Fed a byte at a time, as the shortest pieces would feed it.
            let mut first = None;
            for n in 1..=t.len() {
                let longest = words.iter().map(Vec::len).max().unwrap();
                if let Some(p) = find_word(&t[..n], (n - 1).saturating_sub(longest - 1), &words) {
                    first = Some(p);
                    break;
                }
            }
            let upstream = (1..=t.len()).find_map(|n| re.find(&t[..n]));
            assert_eq!(first, upstream, "{:?}", String::from_utf8_lossy(t));
        }
    }
}
