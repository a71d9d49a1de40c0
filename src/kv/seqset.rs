//! A fixed-size set of sequence ids (0..256, llama.h's LLAMA_MAX_SEQ): one cell's owners.

pub(crate) const MAX_SEQ: usize = 256;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SeqSet([u64; MAX_SEQ / 64]);

impl SeqSet {
    pub const EMPTY: SeqSet = SeqSet([0; MAX_SEQ / 64]);

    pub fn single(seq: usize) -> SeqSet {
        let mut s = SeqSet::EMPTY;
        s.insert(seq);
        s
    }
    pub fn insert(&mut self, seq: usize) {
        self.0[seq / 64] |= 1 << (seq % 64);
    }
    pub fn remove(&mut self, seq: usize) {
        self.0[seq / 64] &= !(1 << (seq % 64));
    }
    pub fn contains(&self, seq: usize) -> bool {
        seq < MAX_SEQ && self.0[seq / 64] & (1 << (seq % 64)) != 0
    }
    pub fn words(&self) -> [u64; MAX_SEQ / 64] {
        self.0
    }
    pub fn from_words(words: [u64; MAX_SEQ / 64]) -> SeqSet {
        SeqSet(words)
    }
    pub fn len(&self) -> usize {
        self.0.iter().map(|w| w.count_ones() as usize).sum()
    }
    /// The ids in the set, ascending.
    pub fn iter(&self) -> impl Iterator<Item = usize> {
        let words = self.0;
        (0..words.len()).flat_map(move |i| {
            let mut w = words[i];
            std::iter::from_fn(move || {
                (w != 0).then(|| {
                    let bit = w.trailing_zeros() as usize;
                    w &= w - 1;
                    i * 64 + bit
                })
            })
        })
    }
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|&w| w == 0)
    }
}
