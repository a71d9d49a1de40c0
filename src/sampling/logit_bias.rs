//! logit_bias: adds a fixed bias to chosen tokens' logits.

use std::ffi::CStr;

use super::{Candidates, Sampler};

#[derive(Clone)]
pub struct LogitBias {
    /// (token, bias) pairs, as given.
    pub biases: Vec<(i32, f32)>,
    to_search: Vec<(i32, f32)>,
}

impl LogitBias {
    pub fn new(biases: Vec<(i32, f32)>) -> LogitBias {
        LogitBias { biases, to_search: Vec::new() }
    }
}

impl Sampler for LogitBias {
    fn name(&self) -> &'static CStr {
        c"logit-bias"
    }
    fn apply(&mut self, cur: &mut Candidates<'_>) {
        self.to_search.clear();
        // Fast path: the candidate at index `token` is still that token (unshuffled vocabulary).
        for &(token, bias) in &self.biases {
            match usize::try_from(token).ok().filter(|&i| i < cur.len() && cur.data[i].id == token) {
                Some(i) => cur.data[i].logit += bias,
                None => self.to_search.push((token, bias)),
            }
        }
        if self.to_search.is_empty() {
            return;
        }
        for t in cur.data.iter_mut() {
            if let Some(&(_, bias)) = self.to_search.iter().find(|(tok, _)| *tok == t.id) {
                t.logit += bias;
            }
        }
    }
    fn clone_box(&self) -> Box<dyn Sampler + Send> {
        Box::new(self.clone())
    }
}
