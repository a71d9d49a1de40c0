//! Which tokens a grammar state allows, without looking at every token: a depth-first walk of the
//! vocabulary's piece trie (`Vocab::grammar_trie`) that carries the grammar state along the path,
//! so a prefix the grammar rejects cuts off every token that starts with it. Work is proportional
//! to the part of the trie the grammar allows.
//!
//! States met on the way are interned in a `SetTable` (per sampler) with their transitions by
//! code point, so the walk mostly looks transitions up (an array per state for ASCII, a list of
//! intervals for the rest). A state visited often also gets its main successor and the code
//! points that lead there (`Uni`); a child of the trie whose text (the trie's per-node summary)
//! stays on the chain of main successors for as many code points as its longest path — a
//! fixpoint such as the inside of a JSON string, or a bounded repetition — is allowed whole.
//! The table is a cache: `SetTable::trim` empties it when it outgrows its budget.
//!
//! The decisions are upstream's `llama_grammar_reject_candidates` for each token, including its
//! quirks: a token whose text reaches a token element (`<[id]>` / `!<[id]>`) with text left over
//! is decided by its id alone; a piece ending inside a UTF-8 sequence is allowed where some
//! completion could match; an invalid sequence rejects the token.

use std::collections::HashMap;

use super::stacks::{match_token, Partial, StackSet, Step, Utf8};
use super::{Elem, Grammar, Ty};
use crate::tokenizer::piece_trie::{PieceTrie, CLEAN, HIGH};

pub(crate) const EMPTY: u32 = 0;
const UNKNOWN: u32 = u32::MAX;

struct SetInfo {
    set: StackSet,
    /// Some stack's top is a character class.
    has_char: bool,
    /// The token elements at the top of some stack.
    token_elems: Vec<Elem>,
    /// Fresh nodes the walks reached in this state (`uni` is computed once it is hot).
    visits: u32,
    /// The code points that all lead to one successor state (computed once the state is hot).
    uni: Option<Uni>,
}

/// The main successor of a state and the code points that lead to it: ASCII ones as a mask,
/// larger ones per interval of the state's `bounds`. When `succ` is the state itself these are
/// its fixpoints; otherwise a run of such code points walks a chain of states (a bounded
/// repetition such as a JSON string with a maximum length).
struct Uni {
    succ: u32,
    ascii: u128,
    high: Vec<bool>,
}

/// Visits of a state before its successor classes are worth computing (129 transitions).
const HOT: u32 = 16;
/// Code points tried, in order, as the representative whose successor is the main one.
const REPRESENTATIVES: [u32; 6] = ['a' as u32, 'e' as u32, ' ' as u32, '0' as u32, 0x4E00, 0x80];
/// The largest code point upstream's decoder can produce (4-byte lead, 3 continuations).
const MAX_CP: u32 = 0x3F_FFFF;

/// Interned grammar states and the transitions found between them.
pub struct SetTable {
    sets: Vec<SetInfo>,
    index: HashMap<StackSet, u32>,
    ascii: Vec<[u32; 128]>,
    /// Per state, code points ≥ 128: the boundaries between which every top class decides
    /// alike, and the state after each interval.
    bounds: Vec<Vec<u32>>,
    by_interval: Vec<Vec<u32>>,
    /// (state, which of its stacks take the code point) → next state.
    by_signature: HashMap<Vec<u64>, u32>,
    /// Per state, the state of its stacks that are not empty (UNKNOWN until asked).
    non_empty: Vec<u32>,
    sig_buf: Vec<u64>,
    /// Stack positions held (the budget's measure).
    held: usize,
}

/// Words (u32) a table may hold before `trim` empties it (16 MB) at the next apply.
const TABLE_BUDGET: usize = 4 << 20;
/// Words a table may reach during one walk (64 MB): beyond, the walk gives up (`TABLE_FULL`)
/// and the sampler decides the candidates one by one instead.
const TABLE_LIMIT: usize = 16 << 20;
/// The error a walk ends with when the table reaches `TABLE_LIMIT`.
pub const TABLE_FULL: &str = "the grammar's state table is full";

impl Default for SetTable {
    fn default() -> SetTable {
        let mut t = SetTable { sets: Vec::new(), index: HashMap::new(), ascii: Vec::new(), bounds: Vec::new(), by_interval: Vec::new(), by_signature: HashMap::new(), non_empty: Vec::new(), sig_buf: Vec::new(), held: 0 };
        t.push(StackSet::default(), &[]);
        t
    }
}

impl SetTable {
    fn push(&mut self, set: StackSet, elems: &[Elem]) -> u32 {
        let id = self.sets.len() as u32;
        let has_char = set.0.iter().any(|s| s.last().is_some_and(|&t| !elems[t as usize].is_token()));
        let mut token_elems: Vec<Elem> = set.0.iter().filter_map(|s| s.last().map(|&t| elems[t as usize])).filter(|e| e.is_token()).collect();
        token_elems.sort_unstable_by_key(|e| (e.ty as u8, e.value));
        token_elems.dedup();
        // the stacks twice (the set and its index key), the ASCII transitions, the bookkeeping
        self.held += 2 * set.0.iter().map(|s| s.len() + 6).sum::<usize>() + 128 + 32;
        self.index.insert(set.clone(), id);
        self.sets.push(SetInfo { set, has_char, token_elems, visits: 0, uni: None });
        self.ascii.push([UNKNOWN; 128]);
        let mut b = Vec::new();
        for s in &self.sets[id as usize].set.0 {
            if let Some(&t) = s.last() {
                class_bounds(elems, t, &mut b);
            }
        }
        b.retain(|&x| x > 128);
        b.sort_unstable();
        b.dedup();
        self.held += b.len() * 2;
        self.by_interval.push(vec![UNKNOWN; b.len() + 1]);
        self.bounds.push(b);
        self.non_empty.push(UNKNOWN);
        id
    }

    pub fn intern(&mut self, g: &Grammar, set: &StackSet) -> u32 {
        if set.is_empty() {
            return EMPTY;
        }
        match self.index.get(set) {
            Some(&id) => id,
            None => self.push(set.clone(), &g.elems),
        }
    }

    pub fn set(&self, id: u32) -> &StackSet {
        &self.sets[id as usize].set
    }

    /// Empties the cache when it holds more than its budget.
    pub fn trim(&mut self) {
        if self.over_budget() {
            self.clear();
        }
    }

    /// Whether the table holds more than its budget (`trim` would empty it).
    pub fn over_budget(&self) -> bool {
        self.held > TABLE_BUDGET
    }

    /// State `id` without its empty stacks (what accepting a token without a whole code point
    /// leaves: a piece that ends inside a UTF-8 sequence).
    pub fn non_empty(&mut self, g: &Grammar, id: u32) -> u32 {
        let n = self.non_empty[id as usize];
        if n != UNKNOWN {
            return n;
        }
        let set = &self.sets[id as usize].set;
        let n = if set.0.iter().all(|s| !s.is_empty()) {
            id
        } else {
            let kept = StackSet(set.0.iter().filter(|s| !s.is_empty()).cloned().collect());
            self.intern(g, &kept)
        };
        self.non_empty[id as usize] = n;
        n
    }

    /// The token elements on top of state `id`'s stacks.
    pub fn token_elems(&self, id: u32) -> &[Elem] {
        &self.sets[id as usize].token_elems
    }

    pub fn clear(&mut self) {
        *self = SetTable::default();
    }

    /// The state after code point `cp` from state `id`.
    #[inline]
    pub fn next(&mut self, g: &Grammar, id: u32, cp: u32) -> Result<u32, String> {
        let slot = if cp < 128 {
            &mut self.ascii[id as usize][cp as usize]
        } else {
            let k = self.bounds[id as usize].partition_point(|&b| b <= cp);
            &mut self.by_interval[id as usize][k]
        };
        if *slot != UNKNOWN {
            return Ok(*slot);
        }
        // The next state depends only on which stacks' top classes take `cp`: code points with
        // the same signature share one computation.
        let mut sig = std::mem::take(&mut self.sig_buf);
        sig.clear();
        sig.push(id as u64);
        let stacks = &self.sets[id as usize].set.0;
        for chunk in stacks.chunks(64) {
            let mut w = 0u64;
            for (i, st) in chunk.iter().enumerate() {
                if let Some(&t) = st.last() {
                    if !g.elem(t).is_token() && g.match_char(t, cp).0 {
                        w |= 1 << i;
                    }
                }
            }
            sig.push(w);
        }
        let nid = match self.by_signature.get(&sig) {
            Some(&n) => {
                self.sig_buf = sig;
                n
            }
            None => {
                let next = g.accept_char(&self.sets[id as usize].set, cp)?;
                if self.held > TABLE_LIMIT {
                    return Err(TABLE_FULL.into());
                }
                let n = self.intern(g, &next);
                self.held += sig.len() * 2 + 8;
                self.by_signature.insert(sig, n);
                n
            }
        };
        if cp < 128 {
            self.ascii[id as usize][cp as usize] = nid;
        } else {
            let k = self.bounds[id as usize].partition_point(|&b| b <= cp);
            self.by_interval[id as usize][k] = nid;
        }
        Ok(nid)
    }
}

/// The code points where the class at `pos` may change its decision (a range's start and one
/// past its end, a character and the one after it).
fn class_bounds(elems: &[Elem], mut pos: u32, out: &mut Vec<u32>) {
    if elems[pos as usize].is_token() {
        return;
    }
    loop {
        let e = elems[pos as usize];
        let next = elems[pos as usize + 1];
        if next.ty == Ty::CharRngUpper {
            out.push(e.value);
            out.push(next.value.saturating_add(1));
            pos += 2;
        } else if e.ty == Ty::CharAny {
            pos += 1;
        } else {
            out.push(e.value);
            out.push(e.value.saturating_add(1));
            pos += 1;
        }
        if elems[pos as usize].ty != Ty::CharAlt {
            return;
        }
    }
}

impl SetTable {
    /// Computes `uni` of state `id` if it has none.
    fn ensure_uni(&mut self, g: &Grammar, id: u32) -> Result<(), String> {
        if self.sets[id as usize].uni.is_some() {
            return Ok(());
        }
        let mut succ = EMPTY;
        for &r in &REPRESENTATIVES {
            succ = self.next(g, id, r)?;
            if succ != EMPTY {
                break;
            }
        }
        let mut ascii = 0u128;
        let n = self.bounds[id as usize].len() + 1;
        let mut high = vec![false; n];
        if succ != EMPTY {
            for c in 0..128u32 {
                if self.next(g, id, c)? == succ {
                    ascii |= 1u128 << c;
                }
            }
            for (k, h) in high.iter_mut().enumerate() {
                // a code point of interval k (interval 0 starts at 128 for the code points ≥ 128)
                let cp = if k == 0 { 0x80 } else { self.bounds[id as usize][k - 1] };
                *h = cp <= MAX_CP && self.next(g, id, cp)? == succ;
            }
        }
        self.held += n + 8;
        self.sets[id as usize].uni = Some(Uni { succ, ascii, high });
        Ok(())
    }

    /// Whether state `id` is hot enough for whole-subtree acceptance (counts a visit).
    fn hot(&mut self, id: u32) -> bool {
        let info = &mut self.sets[id as usize];
        if info.uni.is_some() {
            return true;
        }
        info.visits += 1;
        info.visits >= HOT
    }

    /// Whether every text of at most `len` code points drawn from `ascii` (and, with `high`,
    /// from the range `hi_range` of larger ones) leads from state `id` through non-empty states
    /// only: each such code point goes to the state's main successor, along the chain.
    fn chain_accepts(&mut self, g: &Grammar, id: u32, ascii: u128, high: Option<(u32, u32)>, len: u32) -> Result<bool, String> {
        if len >= 255 {
            return Ok(false);
        }
        let mut t = id;
        for _ in 0..len {
            self.ensure_uni(g, t)?;
            let u = self.sets[t as usize].uni.as_ref().unwrap();
            if u.succ == EMPTY || ascii & !u.ascii != 0 {
                return Ok(false);
            }
            if let Some((lo, hi)) = high {
                let b = &self.bounds[t as usize];
                let (k0, k1) = (b.partition_point(|&x| x <= lo), b.partition_point(|&x| x <= hi));
                if !u.high[k0..=k1].iter().all(|&s| s) {
                    return Ok(false);
                }
            }
            if u.succ == t {
                return Ok(true); // a fixpoint: the rest of the chain is this state again
            }
            t = u.succ;
        }
        Ok(true)
    }
}

/// A set of token ids.
#[derive(Default, Clone)]
pub struct TokenBits(pub Vec<u64>);

impl TokenBits {
    pub fn reset(&mut self, n: usize) {
        self.0.clear();
        self.0.resize(n.div_ceil(64), 0);
    }
    #[inline]
    pub fn set(&mut self, id: i32) {
        if let Some(w) = self.0.get_mut(id as usize / 64) {
            *w |= 1 << (id as usize % 64);
        }
    }
    #[inline]
    pub fn get(&self, id: i32) -> bool {
        id >= 0 && self.0.get(id as usize / 64).is_some_and(|w| w >> (id as usize % 64) & 1 == 1)
    }
    pub fn count(&self) -> usize {
        self.0.iter().map(|w| w.count_ones() as usize).sum()
    }
}

struct Walk<'a> {
    g: &'a Grammar,
    table: &'a mut SetTable,
    trie: &'a PieceTrie,
    out: &'a mut TokenBits,
}

impl Walk<'_> {
    /// Whether some stack of `set` could take a code point that completes `p`.
    fn partial_ok(&self, set: u32, p: Partial) -> bool {
        self.table.set(set).0.iter().any(|s| s.last().is_some_and(|&t| !self.g.elem(t).is_token() && self.g.match_partial(t, p)))
    }

    /// At `node`, with the complete code points of the path consumed into state `set` and the
    /// decoder at `st`. `armed`: token elements met earlier with a complete code point since
    /// (they decide by id every token below); `pending`: those met at the last code point.
    fn walk(&mut self, node: u32, set: u32, st: Utf8, armed: &[Elem], pending: &[Elem]) -> Result<(), String> {
        let toks = self.trie.tokens_at(node);
        if !toks.is_empty() {
            let ok_by_text = if st.n_remain == 0 { set != EMPTY } else { set != EMPTY && self.partial_ok(set, st.partial()) };
            for &id in toks {
                if ok_by_text || armed.iter().any(|&e| match_token(e, id)) {
                    self.out.set(id);
                }
            }
        }
        let has_char = self.table.sets[set as usize].has_char;
        if !has_char && armed.is_empty() && pending.is_empty() {
            return Ok(());
        }
        // From a fresh decoder, a child whose every text keeps the state on its chain of main
        // successors (for a fixpoint: leaves it unchanged) is allowed whole.
        let bulk = st.n_remain == 0 && set != EMPTY && armed.is_empty() && pending.is_empty() && self.table.hot(set);
        for &(b, child) in self.trie.children(node) {
            if bulk {
                let (ascii, flags) = self.trie.summary(child);
                let high = (flags & HIGH != 0).then(|| self.trie.high_range(child));
                if flags & CLEAN != 0 && self.table.chain_accepts(self.g, set, ascii, high, self.trie.max_cps(child))? {
                    for &id in self.trie.tokens_below(child) {
                        self.out.set(id);
                    }
                    continue;
                }
            }
            match st.step(b) {
                Step::Invalid => {}
                Step::More(s) => self.walk(child, if has_char { set } else { EMPTY }, s, armed, pending)?,
                Step::Complete(cp, s) => {
                    let next = if has_char { self.table.next(self.g, set, cp)? } else { EMPTY };
                    if pending.is_empty() {
                        if next == EMPTY && armed.is_empty() {
                            continue;
                        }
                        if self.table.sets[next as usize].token_elems.is_empty() {
                            self.walk(child, next, s, armed, &[])?;
                        } else {
                            let np = self.table.sets[next as usize].token_elems.clone();
                            self.walk(child, next, s, armed, &np)?;
                        }
                    } else {
                        let mut a = armed.to_vec();
                        a.extend_from_slice(pending);
                        let np = self.table.sets[next as usize].token_elems.clone();
                        self.walk(child, next, s, &a, &np)?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// Marks in `out` (already sized and cleared) every token of `trie` that state `set` allows after
/// the partial sequence `partial`.
pub fn allowed(g: &Grammar, table: &mut SetTable, trie: &PieceTrie, set: u32, partial: Partial, out: &mut TokenBits) -> Result<(), String> {
    let pending = table.sets[set as usize].token_elems.clone();
    let mut w = Walk { g, table, trie, out };
    w.walk(PieceTrie::ROOT, set, Utf8::start(partial), &[], &pending)
}

/// upstream's decision for one token that is not end-of-generation, computed directly from the
/// stacks as `llama_grammar_reject_candidates` does (no trie, no cache): the reference the
/// fuzzer and the unit tests hold the walk to. The token's code points are taken one at a time
/// over the whole set of stacks (distinct stacks kept once), so an ambiguous grammar costs at
/// most `max_stacks` stacks per code point, and more than that ends in the walk's error.
pub fn allowed_one(g: &Grammar, set: &StackSet, partial: Partial, id: i32, piece: &[u8]) -> Result<bool, String> {
    let piece = &piece[..piece.iter().position(|&b| b == 0).unwrap_or(piece.len())];
    if piece.is_empty() {
        return Ok(false);
    }
    let mut cps = Vec::new();
    let p = super::stacks::decode(piece, partial, &mut cps);
    let mut cur: Vec<Vec<u32>> = set.0.clone();
    for &c in &cps {
        let mut next = Vec::new();
        for stack in &cur {
            // an empty stack takes no more text
            let Some(&top) = stack.last() else { continue };
            let e = g.elem(top);
            if e.is_token() {
                // text left over at a token element: decided by the token's id
                if match_token(e, id) {
                    return Ok(true);
                }
                continue;
            }
            let (ok, after) = g.match_char(top, c);
            if !ok {
                continue;
            }
            let mut st = stack[..stack.len() - 1].to_vec();
            if !g.elem(after).is_end_of_sequence() {
                st.push(after);
            }
            g.advance(st, &mut next)?;
        }
        next.sort_unstable();
        next.dedup();
        if next.len() > g.limits.max_stacks {
            return Err(format!("the grammar is too ambiguous: more than {} parses are alive at once", g.limits.max_stacks));
        }
        if next.is_empty() {
            return Ok(false);
        }
        cur = next;
    }
    Ok(cur.iter().any(|stack| match stack.last() {
        None => p.n_remain == 0,
        Some(&top) if g.elem(top).is_token() => p.n_remain == 0,
        Some(&top) => p.n_remain == 0 || g.match_partial(top, p),
    }))
}
