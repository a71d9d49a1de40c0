//! batch: turns a caller's batch (llama_batch, already read into slices) into validated
//! per-token arrays: positions filled in where the caller left them out, sequence sets, output
//! flags. Checks follow upstream's llama_batch_allocr::init and return its reasons.

use crate::kv::{KvCache, SeqSet};

/// A caller's batch as borrowed slices (None = the caller passed NULL for that array).
pub struct BatchInput<'a, 'f> {
    pub tokens: &'a [i32],
    pub pos: Option<&'a [i32]>,
    /// Per token, the sequence ids it belongs to.
    pub seq_ids: Option<&'f dyn Fn(usize) -> &'a [i32]>,
    pub logits: Option<&'a [i8]>,
}

/// The validated batch; its vectors are reused from one decode to the next.
#[derive(Default)]
pub struct Batch {
    pub tokens: Vec<i32>,
    pub pos: Vec<i32>,
    pub seqs: Vec<SeqSet>,
    /// The first sequence id of each token: the one whose cells it attends to (as upstream).
    pub seq: Vec<usize>,
    pub output: Vec<bool>,
    /// Per sequence seen in the batch: (seq, min pos, max pos, count); reused scratch.
    per_seq: Vec<(usize, i32, i32, usize)>,
}

impl Batch {
    /// The sequences the tokens belong to first (each token's `seq`).
    pub fn primary_seqs(&self) -> SeqSet {
        let mut set = SeqSet::EMPTY;
        self.seq.iter().for_each(|&s| set.insert(s));
        set
    }

    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Fills `self` from `input`, or returns the reason the batch is invalid.
    pub fn load(&mut self, input: &BatchInput<'_, '_>, n_vocab: usize, n_seq_max: usize, unified: bool, kv: &KvCache, embeddings: bool) -> Result<(), String> {
        let n = input.tokens.len();
        self.tokens.clear();
        self.pos.clear();
        self.seqs.clear();
        self.seq.clear();
        self.output.clear();
        for (i, &t) in input.tokens.iter().enumerate() {
            if t < 0 || t as usize >= n_vocab {
                return Err(format!("invalid token[{i}] = {t} (n_vocab = {n_vocab})"));
            }
            self.tokens.push(t);
        }
        for i in 0..n {
            let ids: &[i32] = match input.seq_ids {
                Some(f) => f(i),
                None => &[0],
            };
            if ids.is_empty() {
                return Err(format!("token {i} belongs to no sequence (n_seq_id = 0)"));
            }
            if ids.len() > 1 && !unified {
                return Err(format!("token {i} belongs to {} sequences; shared tokens need kv_unified = true", ids.len()));
            }
            let mut set = SeqSet::EMPTY;
            for &s in ids {
                if s < 0 || s as usize >= n_seq_max {
                    return Err(format!("invalid seq_id[{i}] = {s} >= n_seq_max ({n_seq_max})"));
                }
                set.insert(s as usize);
            }
            self.seqs.push(set);
            self.seq.push(ids[0] as usize);
        }
        // Positions: the caller's, or continuing each sequence from what the cache holds.
        match input.pos {
            Some(p) => self.pos.extend_from_slice(p),
            None => {
                self.per_seq.clear();
                for i in 0..n {
                    let s = self.seq[i];
                    let p = match self.per_seq.iter_mut().find(|e| e.0 == s) {
                        Some(e) => {
                            e.1 += 1;
                            e.1
                        }
                        None => {
                            let p = kv.seq_pos_max(s) + 1;
                            self.per_seq.push((s, p, 0, 0));
                            p
                        }
                    };
                    self.pos.push(p);
                }
            }
        }
        if let Some(i) = self.pos.iter().position(|&p| p < 0) {
            return Err(format!("invalid pos[{i}] = {}", self.pos[i]));
        }
        match input.logits {
            Some(l) if !embeddings => self.output.extend(l.iter().map(|&f| f != 0)),
            _ if embeddings => self.output.resize(n, true),
            _ => {
                self.output.resize(n, false);
                if let Some(last) = self.output.last_mut() {
                    *last = true;
                }
            }
        }
        self.check_positions(kv)
    }

    /// Each sequence must continue where the cache leaves off (Y = X + 1) and have no gaps.
    fn check_positions(&mut self, kv: &KvCache) -> Result<(), String> {
        let seen = &mut self.per_seq;
        seen.clear();
        for i in 0..self.tokens.len() {
            for s in 0..crate::kv::seqset::MAX_SEQ {
                if !self.seqs[i].contains(s) {
                    continue;
                }
                let p = self.pos[i];
                match seen.iter_mut().find(|e| e.0 == s) {
                    Some(e) => {
                        if p < e.2 {
                            return Err(format!("sequence {s} positions are decreasing (not allowed)"));
                        }
                        e.1 = e.1.min(p);
                        e.2 = e.2.max(p);
                        e.3 += 1;
                    }
                    None => seen.push((s, p, p, 1)),
                }
            }
        }
        for &(s, min, max, count) in seen.iter() {
            let last = kv.seq_pos_max(s);
            if last >= 0 && min != last + 1 {
                return Err(format!(
                    "the tokens of sequence {s} in the input batch have inconsistent sequence positions: the last position stored in the KV cache is X = {last}, the batch starts at Y = {min}; it is required that Y = X + 1"
                ));
            }
            if (max - min + 1) as usize > count {
                return Err(format!("sequence {s} positions are not continuous"));
            }
            if kv.dsv4.is_some() && max as usize >= kv.shape.n_cells {
                return Err(format!("sequence {s} reaches position {max}: deepseek4's compressed caches hold the positions below the {} cells of a sequence", kv.shape.n_cells));
            }
        }
        Ok(())
    }
}
