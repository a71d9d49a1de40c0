//! One model + context + sampler chain: feeds text, streams sampled pieces, counts time. It
//! knows the tokens its context holds, so a chat's whole prompt can be given each turn and only
//! what differs from them is decoded.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use deepseek::batch::BatchInput;
use deepseek::context::{Context, ContextParams};
use deepseek::model::Model;
use deepseek::sampling::chain::{sample, BoxChain};
use deepseek::sampling::penalties::Penalties;
use deepseek::sampling::pick::{Dist, Greedy};
use deepseek::sampling::temp::Temp;
use deepseek::sampling::truncate::{MinP, TopK, TopP};
use deepseek::sampling::TokenData;

use crate::args::Args;

#[derive(Default, Clone, Copy)]
pub struct Stats {
    pub prompt_tokens: usize,
    pub prompt_time: Duration,
    pub gen_tokens: usize,
    pub gen_time: Duration,
}

pub struct Session {
    pub model: Arc<Model>,
    pub ctx: Context,
    chain: BoxChain,
    candidates: Vec<TokenData>,
    n_batch: usize,
    /// The tokens the context holds, at positions 0.. (prompts and sampled tokens).
    tokens: Vec<i32>,
    pub stats: Stats,
}

/// llama.cpp's usual CPU chain: penalties, top-k, top-p, min-p, temperature, then a seeded
/// draw; temperature 0 means greedy.
fn build_chain(a: &Args) -> BoxChain {
    let mut c = BoxChain::new(false);
    if a.temp <= 0.0 {
        c.members.push(Box::new(Greedy));
        return c;
    }
    if !Penalties::is_disabled(64, a.repeat_penalty, 0.0, 0.0) {
        c.members.push(Box::new(Penalties::new(64, a.repeat_penalty, 0.0, 0.0)));
    }
    if a.top_k > 0 {
        c.members.push(Box::new(TopK { k: a.top_k }));
    }
    if a.top_p < 1.0 {
        c.members.push(Box::new(TopP { p: a.top_p, min_keep: 1 }));
    }
    if a.min_p > 0.0 {
        c.members.push(Box::new(MinP { p: a.min_p, min_keep: 1 }));
    }
    c.members.push(Box::new(Temp { temp: a.temp }));
    c.members.push(Box::new(Dist::new(a.seed)));
    c
}

impl Session {
    pub fn new(model: Arc<Model>, a: &Args) -> Result<Session, String> {
        let params = ContextParams {
            n_ctx: a.n_ctx,
            n_batch: a.n_batch,
            n_ubatch: a.n_batch,
            n_seq_max: 1,
            n_threads: a.threads,
            n_threads_batch: a.threads,
            ..ContextParams::default()
        };
        let ctx = Context::new(Arc::clone(&model), &params)?;
        let n_batch = ctx.n_batch as usize;
        Ok(Session { model, ctx, chain: build_chain(a), candidates: Vec::new(), n_batch, tokens: Vec::new(), stats: Stats::default() })
    }

    fn decode(&mut self, tokens: &[i32]) -> Result<(), String> {
        if self.tokens.len() + tokens.len() > self.ctx.n_ctx_seq as usize {
            return Err(format!("the context is full ({} tokens); use a larger --ctx-size", self.ctx.n_ctx_seq));
        }
        self.ctx.decode(&BatchInput { tokens, pos: None, seq_ids: None, logits: None }, None).map_err(|e| format!("decode failed: {e:?}"))?;
        self.tokens.extend_from_slice(tokens);
        Ok(())
    }

    /// Evaluates prompt tokens in batches, counting them and their time.
    fn decode_prompt(&mut self, tokens: &[i32]) -> Result<(), String> {
        let t0 = Instant::now();
        for chunk in tokens.chunks(self.n_batch) {
            self.decode(chunk)?;
        }
        self.stats.prompt_tokens += tokens.len();
        self.stats.prompt_time += t0.elapsed();
        Ok(())
    }

    /// Tokenizes and evaluates `text` after what the context holds (special tokens parsed; BOS
    /// only at the very start). Returns the number of tokens.
    pub fn feed(&mut self, text: &str) -> Result<usize, String> {
        let mut tokens = Vec::new();
        self.model.vocab.tokenize(text.as_bytes(), self.tokens.is_empty(), true, &mut tokens);
        self.decode_prompt(&tokens)?;
        Ok(tokens.len())
    }

    /// Makes the context hold exactly `prompt` (a chat's whole conversation, tokenized with BOS
    /// as the model wants it): the longest common prefix with what it holds is kept, the rest
    /// removed from the cache, and the remainder decoded — at least the last token, whose logits
    /// the next token is sampled from. A template that re-renders an earlier turn differently
    /// (R1's drops past answers' reasoning) costs a re-decode from there, never a wrong
    /// context. Returns (prompt tokens, tokens decoded).
    pub fn set_prompt(&mut self, prompt: &str) -> Result<(usize, usize), String> {
        let mut want = Vec::new();
        self.model.vocab.tokenize(prompt.as_bytes(), true, true, &mut want);
        if want.is_empty() {
            return Err("the chat's prompt tokenized to nothing".into());
        }
        let common = self.tokens.iter().zip(&want).take_while(|(a, b)| a == b).count();
        let mut keep = common.min(want.len() - 1);
        if keep < self.tokens.len() {
            // deepseek4's compressed cache cannot be cut inside a sequence: it starts over.
            if !self.ctx.kv.seq_rm(0, keep as i32, -1) {
                keep = 0;
                if !self.ctx.kv.seq_rm(0, 0, -1) {
                    return Err("cannot clear the context's cache for the next turn".into());
                }
            }
            self.tokens.truncate(keep);
        }
        self.decode_prompt(&want[keep..])?;
        Ok((want.len(), want.len() - keep))
    }

    /// Samples up to `n` tokens, calling `on_piece` with each piece's bytes; stops at an
    /// end-of-generation token or when `stop` is set. Returns the generated bytes.
    pub fn generate(&mut self, n: usize, stop: &AtomicBool, mut on_piece: impl FnMut(&[u8])) -> Result<Vec<u8>, String> {
        let t0 = Instant::now();
        let mut text = Vec::new();
        let mut piece = Vec::new();
        for _ in 0..n {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let logits = self.ctx.logits_row(-1)?;
            let token = sample(&mut self.chain, logits, &mut self.candidates)?;
            if self.model.vocab.is_eog(token) {
                break;
            }
            self.model.vocab.token_to_piece(token, 0, false, &mut piece);
            on_piece(&piece);
            text.extend_from_slice(&piece);
            self.stats.gen_tokens += 1;
            self.decode(&[token])?;
        }
        self.stats.gen_time += t0.elapsed();
        Ok(text)
    }
}
