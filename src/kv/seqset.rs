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
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|&w| w == 0)
    }
}
