//! infill: for fill-in-the-middle. Picks end-of-generation when it is likely enough, merges
//! tokens that are prefixes of one another, and drops unlikely ones (upstream's heuristics).

use std::ffi::CStr;
use std::sync::Arc;

use super::ops::softmax;
use super::{Candidates, Sampler};
use crate::model::Model;

#[derive(Clone)]
pub struct Infill {
    /// The model whose vocabulary decides pieces and end-of-generation tokens.
    model: Arc<Model>,
    piece0: Vec<u8>,
    piece1: Vec<u8>,
}

impl Infill {
    pub fn new(model: Arc<Model>) -> Infill {
        Infill { model, piece0: Vec::new(), piece1: Vec::new() }
    }
}

/// Keeps the candidates `keep` accepts, in order; returns the sum of their p.
fn retain(cur: &mut Candidates<'_>, mut keep: impl FnMut(&super::TokenData) -> bool) -> f32 {
    let mut w = 0;
    let mut sum = 0.0f32;
    for r in 0..cur.len() {
        if keep(&cur.data[r]) {
            sum += cur.data[r].p;
            cur.data[w] = cur.data[r];
            w += 1;
        }
    }
    cur.truncate(w);
    sum
}

fn normalize(cur: &mut Candidates<'_>, sum: f32) {
    for t in cur.data.iter_mut() {
        t.p /= sum;
    }
}

impl Sampler for Infill {
    fn name(&self) -> &'static CStr {
        c"infill"
    }
    fn apply(&mut self, cur: &mut Candidates<'_>) {
        if cur.is_empty() {
            return;
        }
        let vocab = &self.model.vocab;
        softmax(cur, true);
        let (mut p_txt, mut p_eog) = (0.0f32, 0.0f32);
        for t in cur.data.iter() {
            if vocab.is_eog(t.id) {
                p_eog += t.p;
            } else {
                p_txt += t.p;
            }
        }
        if 3.0 * p_eog * cur.len() as f32 > p_txt {
            let sum = retain(cur, |t| vocab.is_eog(t.id));
            normalize(cur, sum);
            return;
        }
        // Merge each token into another that it is a prefix of (into the more likely one).
        for i0 in 0..cur.len() {
            for i1 in 0..cur.len() {
                if cur.data[i0].logit == f32::NEG_INFINITY {
                    break;
                }
                if i0 == i1 || cur.data[i1].logit == f32::NEG_INFINITY {
                    continue;
                }
                vocab.token_to_piece(cur.data[i0].id, 0, false, &mut self.piece0);
                vocab.token_to_piece(cur.data[i1].id, 0, false, &mut self.piece1);
                if !self.piece0.is_empty() && self.piece1.starts_with(&self.piece0) {
                    let (dst, src) = if cur.data[i1].p > cur.data[i0].p { (i1, i0) } else { (i0, i1) };
                    cur.data[dst].p += cur.data[src].p;
                    cur.data[src].logit = f32::NEG_INFINITY;
                    cur.data[src].p = 0.0;
                }
            }
        }
        let keep_first = |t: &super::TokenData| vocab.is_eog(t.id) || t.p >= 0.2;
        let n_non_eog = cur.data.iter().filter(|t| keep_first(t) && !vocab.is_eog(t.id)).count();
        if n_non_eog == 0 {
            // Nothing but end-of-generation would be left: answer EOT (or EOS).
            cur.truncate(1);
            if let Some(first) = cur.data.first_mut() {
                first.id = if vocab.eot() != -1 { vocab.eot() } else { vocab.eos() };
                first.logit = 1.0;
            }
            return;
        }
        let sum = retain(cur, keep_first);
        normalize(cur, sum);
        let thold = (1.0 / (n_non_eog as f64 + 1.0)) as f32;
        let sum = retain(cur, |t| vocab.is_eog(t.id) || t.p >= thold);
        normalize(cur, sum);
    }
    fn clone_box(&self) -> Box<dyn Sampler + Send> {
        Box::new(Infill::new(Arc::clone(&self.model)))
    }
}
