//! A byte trie of token pieces, laid out in preorder so that a node's subtree is one range of
//! nodes and the tokens ending in it one range of `tokens`. Built once per vocabulary (see
//! `Vocab::grammar_trie`) and read by every grammar sampler on that model; immutable.
//!
//! Each node also keeps a summary of what the text from the byte into it down decodes to, with
//! upstream's lenient UTF-8 decoder of grammar pieces starting afresh at that byte: which ASCII code points occur, whether
//! larger ones do, and whether every token below decodes validly and completely. A grammar state
//! that no such code point changes then allows the whole subtree at once.

/// A partially decoded UTF-8 sequence (upstream's `llama_partial_utf8`): the bits so far and
/// how many bytes remain; `n_remain < 0` marks an invalid sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Hash)]
pub struct Partial {
    pub value: u32,
    pub n_remain: i32,
}

/// Upstream's lenient UTF-8 decoder of grammar pieces (`decode_utf8` of llama-grammar.cpp),
/// between two bytes: a lead byte fixes the length, continuation bytes are not checked except
/// those that finish a sequence a previous token left open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Utf8 {
    pub value: u32,
    pub n_remain: i32,
    /// Still continuing the sequence a previous token left open (its bytes are validated).
    pub carried: bool,
}

pub enum Step {
    /// The piece is invalid from here on (upstream rejects the whole token).
    Invalid,
    More(Utf8),
    Complete(u32, Utf8),
}

impl Utf8 {
    pub(crate) const FRESH: Utf8 = Utf8 { value: 0, n_remain: 0, carried: false };

    /// The decoder at the start of a piece, after `p`.
    pub fn start(p: Partial) -> Utf8 {
        if p.n_remain > 0 {
            Utf8 { value: p.value, n_remain: p.n_remain, carried: true }
        } else {
            Utf8::FRESH
        }
    }

    pub fn partial(self) -> Partial {
        Partial { value: self.value, n_remain: self.n_remain }
    }

    #[inline]
    pub fn step(self, b: u8) -> Step {
        if self.n_remain > 0 {
            if self.carried && (b >> 6) != 2 {
                return Step::Invalid;
            }
            let value = (self.value << 6) + (b as u32 & 0x3F);
            let n_remain = self.n_remain - 1;
            let s = Utf8 { value, n_remain, carried: self.carried && n_remain > 0 };
            return if n_remain == 0 { Step::Complete(value, s) } else { Step::More(s) };
        }
        const LOOKUP: [i32; 16] = [1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 2, 2, 3, 4];
        let n_remain = LOOKUP[(b >> 4) as usize] - 1;
        if n_remain < 0 {
            return Step::Invalid;
        }
        let value = b as u32 & ((1u32 << (7 - n_remain)) - 1);
        let s = Utf8 { value, n_remain, carried: false };
        if n_remain == 0 {
            Step::Complete(value, s)
        } else {
            Step::More(s)
        }
    }
}

pub struct PieceTrie {
    /// Per node: its children are `edges[child_start[n]..child_start[n + 1]]`, sorted by byte.
    child_start: Vec<u32>,
    /// (byte, child node)
    edges: Vec<(u8, u32)>,
    /// Per node: the tokens whose piece ends here are `tokens[tok_start[n]..tok_start[n + 1]]`.
    tok_start: Vec<u32>,
    tokens: Vec<i32>,
    /// Per node: one past the last node of its subtree.
    subtree_end: Vec<u32>,
    /// Per node: the code points below 128 that the text from the byte into it down decodes to
    /// (fresh from that byte).
    ascii_below: Vec<u128>,
    /// Per node: `HIGH` (a code point ≥ 128 below), `CLEAN` (every token below decodes validly
    /// and ends on a complete code point).
    flags: Vec<u8>,
    /// Per node: the smallest and largest code point ≥ 128 below (when `HIGH`).
    high_range: Vec<(u32, u32)>,
    /// Per node: the most complete code points on one path from the byte into it down (255: as
    /// many or more).
    max_cps: Vec<u8>,
}

pub(crate) const HIGH: u8 = 1;
pub(crate) const CLEAN: u8 = 2;

impl PieceTrie {
    /// A trie of the given (token, piece) pairs; empty pieces are left out.
    pub fn build<'a>(pieces: impl Iterator<Item = (i32, &'a [u8])>) -> PieceTrie {
        let mut all: Vec<(&[u8], i32)> = pieces.filter(|(_, p)| !p.is_empty()).map(|(id, p)| (p, id)).collect();
        all.sort_unstable();
        // Nodes are created in sorted (= preorder) order; `path[d]` is the node at depth d of the
        // previous piece.
        let mut children: Vec<Vec<(u8, u32)>> = vec![Vec::new()];
        let mut node_tokens: Vec<Vec<i32>> = vec![Vec::new()];
        let mut parent: Vec<u32> = vec![u32::MAX];
        let mut path: Vec<u32> = vec![0];
        let mut prev: &[u8] = &[];
        for &(piece, id) in &all {
            let common = prev.iter().zip(piece).take_while(|(a, b)| a == b).count();
            path.truncate(common + 1);
            for &b in &piece[common..] {
                let n = children.len() as u32;
                let p = *path.last().unwrap();
                children[p as usize].push((b, n));
                children.push(Vec::new());
                node_tokens.push(Vec::new());
                parent.push(p);
                path.push(n);
            }
            node_tokens[*path.last().unwrap() as usize].push(id);
            prev = piece;
        }
        let n = children.len();
        let mut subtree_end: Vec<u32> = (1..=n as u32).collect();
        for v in (1..n).rev() {
            let p = parent[v] as usize;
            subtree_end[p] = subtree_end[p].max(subtree_end[v]);
        }
        let mut child_start = Vec::with_capacity(n + 1);
        let mut edges = Vec::new();
        let mut tok_start = Vec::with_capacity(n + 1);
        let mut tokens = Vec::new();
        for v in 0..n {
            child_start.push(edges.len() as u32);
            edges.extend_from_slice(&children[v]);
            tok_start.push(tokens.len() as u32);
            tokens.extend_from_slice(&node_tokens[v]);
        }
        child_start.push(edges.len() as u32);
        tok_start.push(tokens.len() as u32);
        let mut t = PieceTrie { child_start, edges, tok_start, tokens, subtree_end, ascii_below: vec![0; n], flags: vec![0; n], high_range: vec![(0, 0); n], max_cps: vec![0; n] };
        t.summarize();
        t
    }

    /// Fills `ascii_below` and `flags`: for each node but the root, a walk of its subtree
    /// decoding afresh from the byte that leads into it (the total work is the sum of the
    /// nodes' depths).
    fn summarize(&mut self) {
        let mut todo: Vec<(u32, Utf8, u32)> = Vec::new();
        for p in 0..self.n_nodes() as u32 {
            for k in 0..self.children(p).len() {
                let (b0, n) = self.children(p)[k];
                let mut ascii = 0u128;
                let mut high = (u32::MAX, 0u32);
                let mut clean = true;
                let mut depth = 0u32;
                let first = |st: Step, todo: &mut Vec<(u32, Utf8, u32)>, ascii: &mut u128, high: &mut (u32, u32), clean: &mut bool, c: u32, d: u32| match st {
                    Step::Invalid => *clean = false,
                    Step::More(s) => todo.push((c, s, d)),
                    Step::Complete(cp, s) => {
                        if cp < 128 {
                            *ascii |= 1u128 << cp;
                        } else {
                            *high = (high.0.min(cp), high.1.max(cp));
                        }
                        todo.push((c, s, d + 1));
                    }
                };
                first(Utf8::FRESH.step(b0), &mut todo, &mut ascii, &mut high, &mut clean, n, 0);
                while let Some((v, st, d)) = todo.pop() {
                    depth = depth.max(d);
                    if st.n_remain != 0 && !self.tokens_at(v).is_empty() {
                        clean = false;
                    }
                    for &(b, c) in self.children(v) {
                        first(st.step(b), &mut todo, &mut ascii, &mut high, &mut clean, c, d);
                    }
                }
                self.max_cps[n as usize] = depth.min(255) as u8;
                let has_high = high.0 != u32::MAX;
                self.ascii_below[n as usize] = ascii;
                self.high_range[n as usize] = if has_high { high } else { (0, 0) };
                self.flags[n as usize] = if has_high { HIGH } else { 0 } | if clean { CLEAN } else { 0 };
            }
        }
    }

    /// The summary of `node` (not the root), decoding afresh from the byte into it: the ASCII
    /// code points of the text from there down, and its flags.
    #[inline]
    pub fn summary(&self, node: u32) -> (u128, u8) {
        (self.ascii_below[node as usize], self.flags[node as usize])
    }

    /// The most complete code points on one path from the byte into `node` down (255: as many
    /// or more).
    #[inline]
    pub fn max_cps(&self, node: u32) -> u32 {
        self.max_cps[node as usize] as u32
    }

    /// The smallest and largest code point ≥ 128 in the text from the byte into `node` down
    /// (meaningful when its flags have `HIGH`).
    #[inline]
    pub fn high_range(&self, node: u32) -> (u32, u32) {
        self.high_range[node as usize]
    }

    pub(crate) const ROOT: u32 = 0;

    pub fn n_nodes(&self) -> usize {
        self.subtree_end.len()
    }

    #[inline]
    pub fn children(&self, node: u32) -> &[(u8, u32)] {
        &self.edges[self.child_start[node as usize] as usize..self.child_start[node as usize + 1] as usize]
    }

    /// The tokens whose piece ends at `node`.
    #[inline]
    pub fn tokens_at(&self, node: u32) -> &[i32] {
        &self.tokens[self.tok_start[node as usize] as usize..self.tok_start[node as usize + 1] as usize]
    }

    /// The tokens whose piece goes through `node` (ends at it or below).
    pub fn tokens_below(&self, node: u32) -> &[i32] {
        let end = self.subtree_end[node as usize] as usize;
        &self.tokens[self.tok_start[node as usize] as usize..self.tok_start[end] as usize]
    }

    /// Bytes held (for statistics).
    pub fn bytes(&self) -> usize {
        self.child_start.len() * 4 + self.edges.len() * 8 + self.tok_start.len() * 4 + self.tokens.len() * 4 + self.subtree_end.len() * 4 + self.ascii_below.len() * 26
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preorder_ranges() {
        let pieces: Vec<(i32, &[u8])> = vec![(0, b"ab"), (1, b"a"), (2, b"b"), (3, b"abc"), (4, b""), (5, b"ab")];
        let t = PieceTrie::build(pieces.into_iter());
        let a = t.children(PieceTrie::ROOT)[0];
        assert_eq!(a.0, b'a');
        assert_eq!(t.tokens_at(a.1), &[1]);
        let mut below = t.tokens_below(a.1).to_vec();
        below.sort();
        assert_eq!(below, vec![0, 1, 3, 5]);
        assert_eq!(t.tokens_below(PieceTrie::ROOT).len(), 5);
    }
}
