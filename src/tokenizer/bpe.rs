//! Byte-level BPE merging of one pre-tokenized word (upstream's `llm_tokenizer_bpe_session`).
//!
//! Symbols are interned strings: every token text, every merge side and every merge result gets
//! a small integer, so a merge lookup is a hash of two u32s instead of two strings. The merge
//! loop is upstream's: a priority queue of adjacent pairs ordered by (rank, left position),
//! symbols in a doubly linked list, stale queue entries skipped — O(n log n) in the word length.
//! Owns no mutable state: the per-call scratch lives in [`Scratch`].

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

use super::unicode::{encode_utf8, BYTE_TO_CPT};

/// Interned symbol id.
pub(super) type Sym = u32;

pub(super) struct BpeTable {
    /// (left, right) → (rank, merged symbol)
    merges: HashMap<(Sym, Sym), (u32, Sym), BuildHasherDefault<PairHasher>>,
    /// symbol → token id, or -1 when the symbol's text is not a token
    sym_token: Vec<i32>,
    /// symbol → its text
    sym_text: Vec<Box<[u8]>>,
    /// raw byte → symbol of its GPT-2 byte-encoded character
    byte_sym: [Sym; 256],
    /// one-byte text → token id (upstream's per-byte fallback for symbols that are no token)
    single_byte_token: [i32; 256],
}

struct Interner {
    map: HashMap<Box<[u8]>, Sym>,
    texts: Vec<Box<[u8]>>,
}

impl Interner {
    fn intern(&mut self, s: &[u8]) -> Sym {
        if let Some(&id) = self.map.get(s) {
            return id;
        }
        let id = self.texts.len() as Sym;
        self.texts.push(s.into());
        self.map.insert(s.into(), id);
        id
    }
}

impl BpeTable {
    /// `merges` are upstream's `"left right"` strings (split at the first space after byte 0);
    /// the first occurrence of a pair keeps its rank.
    pub(super) fn new(token_to_id: &HashMap<Box<[u8]>, i32>, merges: &[String]) -> BpeTable {
        let mut int = Interner { map: HashMap::with_capacity(token_to_id.len() + merges.len()), texts: Vec::new() };
        let mut byte_sym = [0; 256];
        let mut buf = Vec::with_capacity(4);
        for (b, sym) in byte_sym.iter_mut().enumerate() {
            buf.clear();
            encode_utf8(BYTE_TO_CPT[b], &mut buf);
            *sym = int.intern(&buf);
        }
        let mut table = HashMap::with_capacity_and_hasher(merges.len(), Default::default());
        let mut joined = Vec::new();
        for (rank, m) in merges.iter().enumerate() {
            let m = m.as_bytes();
            let Some(sp) = m.iter().skip(1).position(|&c| c == b' ').map(|p| p + 1) else { continue };
            let (l, r) = (&m[..sp], &m[sp + 1..]);
            if l.is_empty() || r.is_empty() {
                continue; // an empty side never matches a symbol
            }
            let (li, ri) = (int.intern(l), int.intern(r));
            joined.clear();
            joined.extend_from_slice(l);
            joined.extend_from_slice(r);
            let ji = int.intern(&joined);
            table.entry((li, ri)).or_insert((rank as u32, ji));
        }
        let sym_token = int.texts.iter().map(|t| token_to_id.get(t).copied().unwrap_or(-1)).collect();
        let mut single_byte_token = [-1; 256];
        for (b, t) in single_byte_token.iter_mut().enumerate() {
            *t = token_to_id.get(&[b as u8][..]).copied().unwrap_or(-1);
        }
        BpeTable { merges: table, sym_token, sym_text: int.texts, byte_sym, single_byte_token }
    }

    pub(super) fn n_merges(&self) -> usize {
        self.merges.len()
    }

    /// Tokenizes one word given as raw UTF-8 bytes (upstream byte-encodes the word and starts
    /// from one symbol per byte-encoded character, i.e. one per raw byte).
    ///
    /// Queue entries are just (rank, left position) packed in a u64; each live symbol remembers
    /// the rank of the pair it currently forms with its right neighbour, so an entry is current
    /// iff its left symbol is alive and still forms a pair of that rank. (A pair's rank identifies
    /// its two strings, so this accepts exactly the entries upstream's string comparison accepts,
    /// up to identical duplicates.)
    pub(super) fn encode_word(&self, word: &[u8], scratch: &mut Scratch, out: &mut Vec<i32>) {
        self.encode_word_with(word, scratch, out, word.len() >= LONG_WORD)
    }

    fn encode_word_with(&self, word: &[u8], scratch: &mut Scratch, out: &mut Vec<i32>, buckets: bool) {
        let syms = &mut scratch.syms;
        syms.clear();
        let n = word.len();
        for (i, &b) in word.iter().enumerate() {
            syms.push(Symbol {
                sym: self.byte_sym[b as usize],
                prev: i as i32 - 1,
                next: if i + 1 == n { -1 } else { i as i32 + 1 },
                pair_rank: NO_PAIR,
                pair_merged: 0,
            });
        }
        if buckets {
            let mut q = std::mem::take(&mut scratch.buckets);
            q.clear();
            self.merge_loop(syms, &mut q);
            scratch.buckets = q;
        } else {
            let mut q = std::mem::take(&mut scratch.heap);
            q.clear();
            self.merge_loop(syms, &mut q);
            scratch.heap = q;
        }
        let mut i = if n > 0 { 0 } else { -1 };
        while i >= 0 {
            let s = &syms[i as usize];
            self.emit(s.sym, out);
            i = s.next;
        }
    }

    /// Upstream's loop: take the best pair, skip it if outdated, merge, queue the new neighbours.
    fn merge_loop(&self, syms: &mut [Symbol], q: &mut impl PairQueue) {
        for i in 1..syms.len() {
            if let Some(k) = self.set_pair(syms, i - 1) {
                q.push(k);
            }
        }
        while let Some(key) = q.pop() {
            let (rank, l) = ((key >> 32) as u32, (key & 0xFFFF_FFFF) as usize);
            if syms[l].pair_rank != rank {
                continue; // outdated (or the symbol was merged away: its rank is NO_PAIR)
            }
            let r = syms[l].next as usize;
            syms[l].sym = syms[l].pair_merged;
            syms[r].pair_rank = NO_PAIR;
            let rn = syms[r].next;
            syms[l].next = rn;
            if rn >= 0 {
                syms[rn as usize].prev = l as i32;
            }
            let lp = syms[l].prev;
            if lp >= 0 {
                if let Some(k) = self.set_pair(syms, lp as usize) {
                    q.push(k);
                }
            }
            if let Some(k) = self.set_pair(syms, l) {
                q.push(k);
            }
        }
    }

    /// Recomputes the pair symbol `left` forms with its right neighbour; returns its queue key.
    #[inline]
    fn set_pair(&self, syms: &mut [Symbol], left: usize) -> Option<u64> {
        let right = syms[left].next;
        let found = if right < 0 { None } else { self.merges.get(&(syms[left].sym, syms[right as usize].sym)) };
        match found {
            Some(&(rank, merged)) => {
                syms[left].pair_rank = rank;
                syms[left].pair_merged = merged;
                Some(((rank as u64) << 32) | left as u64)
            }
            None => {
                syms[left].pair_rank = NO_PAIR;
                None
            }
        }
    }

    /// Output for a finished symbol: its token, or else (upstream) each byte of its text looked
    /// up as a one-byte token, dropping bytes that are none.
    #[inline]
    pub(super) fn emit(&self, sym: Sym, out: &mut Vec<i32>) {
        let t = self.sym_token[sym as usize];
        if t >= 0 {
            out.push(t);
        } else {
            for &b in self.sym_text[sym as usize].iter() {
                let t = self.single_byte_token[b as usize];
                if t >= 0 {
                    out.push(t);
                }
            }
        }
    }
}

/// Multiplicative hash for the (u32, u32) merge keys (SipHash is several times slower here and
/// the keys are not attacker-chosen in a way that matters: they come from the model file).
#[derive(Default)]
pub(super) struct PairHasher(u64);

impl Hasher for PairHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u8(b);
        }
    }
    #[inline]
    fn write_u8(&mut self, b: u8) {
        self.write_u64(b as u64);
    }
    #[inline]
    fn write_u32(&mut self, v: u32) {
        self.write_u64(v as u64);
    }
    #[inline]
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.0 ^ (self.0 >> 29)
    }
}

const NO_PAIR: u32 = u32::MAX;

#[derive(Clone, Copy)]
struct Symbol {
    sym: Sym,
    prev: i32,
    next: i32,
    /// rank of the pair (self, next), NO_PAIR if none or if this symbol was merged away
    pair_rank: u32,
    /// the symbol that pair merges into
    pair_merged: Sym,
}

/// Per-call scratch buffers (kept by the caller across words of one text).
#[derive(Default)]
pub(super) struct Scratch {
    syms: Vec<Symbol>,
    heap: HeapQueue,
    buckets: RankBuckets,
}

/// Words at least this long use [`RankBuckets`]: a binary heap of millions of entries is
/// bound by cache misses.
const LONG_WORD: usize = 256;

/// A min-priority queue of (rank << 32 | left) keys.
trait PairQueue {
    fn push(&mut self, key: u64);
    fn pop(&mut self) -> Option<u64>;
}

#[derive(Default)]
struct HeapQueue(BinaryHeap<Reverse<u64>>);

impl HeapQueue {
    fn clear(&mut self) {
        self.0.clear();
    }
}

impl PairQueue for HeapQueue {
    #[inline]
    fn push(&mut self, key: u64) {
        self.0.push(Reverse(key));
    }
    #[inline]
    fn pop(&mut self) -> Option<u64> {
        self.0.pop().map(|r| r.0)
    }
}

/// The same queue for long words, organised by rank: a small heap of the ranks present, and per
/// rank its positions — appended in increasing order into a list read front to back (the usual
/// case: pairs are found left to right), or into a small heap when out of order.
#[derive(Default)]
struct RankBuckets {
    ranks: BinaryHeap<Reverse<u32>>,
    index: HashMap<u32, usize, BuildHasherDefault<PairHasher>>,
    buckets: Vec<Bucket>,
    n_used: usize,
}

#[derive(Default)]
struct Bucket {
    sorted: Vec<u32>,
    cursor: usize,
    extra: BinaryHeap<Reverse<u32>>,
}

impl Bucket {
    fn is_empty(&self) -> bool {
        self.cursor == self.sorted.len() && self.extra.is_empty()
    }
}

impl RankBuckets {
    fn clear(&mut self) {
        self.ranks.clear();
        self.index.clear();
        for b in &mut self.buckets[..self.n_used] {
            b.sorted.clear();
            b.cursor = 0;
            b.extra.clear();
        }
        self.n_used = 0;
    }
}

impl PairQueue for RankBuckets {
    fn push(&mut self, key: u64) {
        let (rank, left) = ((key >> 32) as u32, key as u32);
        let i = *self.index.entry(rank).or_insert_with(|| {
            if self.n_used == self.buckets.len() {
                self.buckets.push(Bucket::default());
            }
            self.n_used += 1;
            self.n_used - 1
        });
        let b = &mut self.buckets[i];
        if b.is_empty() {
            self.ranks.push(Reverse(rank));
        }
        if b.sorted.last().map_or(true, |&last| left >= last) {
            b.sorted.push(left);
        } else {
            b.extra.push(Reverse(left));
        }
    }

    fn pop(&mut self) -> Option<u64> {
        let Reverse(rank) = *self.ranks.peek()?;
        let b = &mut self.buckets[self.index[&rank]];
        let from_sorted = b.sorted.get(b.cursor).copied();
        let from_extra = b.extra.peek().map(|r| r.0);
        let left = match (from_sorted, from_extra) {
            (Some(a), Some(e)) if e < a => {
                b.extra.pop();
                e
            }
            (Some(a), _) => {
                b.cursor += 1;
                a
            }
            (None, Some(e)) => {
                b.extra.pop();
                e
            }
            (None, None) => unreachable!("empty bucket in the rank heap"),
        };
        if b.is_empty() {
            b.sorted.clear();
            b.cursor = 0;
            self.ranks.pop();
        }
        Some(((rank as u64) << 32) | left as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// xorshift, deterministic
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    /// The bucketed queue must merge exactly like the heap, including ties and pairs that form
    /// with a lower rank than the one being processed.
    #[test]
    fn buckets_match_heap() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let alphabet = ["a", "b", "c", "d"];
        let mut strings: Vec<String> = alphabet.iter().map(|s| s.to_string()).collect();
        let mut merges = Vec::new();
        for _ in 0..200 {
            let l = strings[(rng.next() % strings.len() as u64) as usize].clone();
            let r = strings[(rng.next() % strings.len() as u64) as usize].clone();
            if l.len() + r.len() > 6 {
                continue;
            }
            merges.push(format!("{l} {r}"));
            strings.push(format!("{l}{r}"));
        }
        // shuffle the ranks so that merge results can have lower ranks than their parts
        for i in (1..merges.len()).rev() {
            let j = (rng.next() % (i as u64 + 1)) as usize;
            merges.swap(i, j);
        }
        let mut token_to_id: HashMap<Box<[u8]>, i32> = HashMap::new();
        for s in &strings {
            let n = token_to_id.len() as i32;
            token_to_id.entry(s.as_bytes().into()).or_insert(n);
        }
        let table = BpeTable::new(&token_to_id, &merges);
        let mut scratch = Scratch::default();
        for len in [2usize, 7, 300, 1000, 5000] {
            for _ in 0..20 {
                let skew = rng.next() % 4 + 1; // fewer letters → long runs
                let word: Vec<u8> = (0..len).map(|_| b'a' + (rng.next() % skew) as u8).collect();
                let (mut a, mut b) = (Vec::new(), Vec::new());
                table.encode_word_with(&word, &mut scratch, &mut a, false);
                table.encode_word_with(&word, &mut scratch, &mut b, true);
                assert_eq!(a, b, "word {:?}", String::from_utf8_lossy(&word));
            }
        }
    }
}
