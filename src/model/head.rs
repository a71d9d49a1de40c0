//! Blocks at both ends of every decoder: token embeddings and the per-token RoPE tables in,
//! the final norm and output projection out (for the rows that asked for outputs).

use super::proj::project;
use super::{Common, Model, UBatch};
use crate::kernels::norm::rms_norm;
use crate::kernels::rope::{self, RopeParams};
use crate::quant;
use crate::threads::ThreadPool;

/// `c.x` = the tokens' embedding rows; `c.rope_cache` = each token's rotation table (the same
/// for every block).
pub fn embed(model: &Model, ub: &UBatch<'_>, c: &mut Common, rope: &RopeParams) {
    let e = model.hp.n_embd;
    let emb = model.mat(&model.weights.token_embd);
    for (t, &tok) in ub.tokens.iter().enumerate() {
        quant::dequantize_row(emb.ty, emb.row(tok as usize), &mut c.x[t * e..(t + 1) * e]);
    }
    let nr = model.hp.n_rot.max(2);
    for t in 0..ub.tokens.len() {
        rope::fill_cache(rope, ub.pos[t] as f32, model.weights.rope_freqs.as_deref(), &mut c.rope_cache[t * nr..(t + 1) * nr]);
    }
}

/// `out` (n × n_embd of `c.xn`) = RMSNorm of `c.x`'s first `n` rows with `weight`.
pub fn norm_rows(model: &Model, c: &mut Common, weight: &[f32], n: usize) {
    let e = model.hp.n_embd;
    for t in 0..n {
        rms_norm(&c.x[t * e..(t + 1) * e], weight, model.hp.rms_eps, &mut c.xn[t * e..(t + 1) * e]);
    }
}

/// `c.x += c.proj` over `n` rows (a block's residual).
pub fn residual(model: &Model, c: &mut Common, n: usize) {
    let e = model.hp.n_embd;
    crate::kernels::add_assign(&mut c.x[..n * e], &c.proj[..n * e]);
}

/// Moves the rows of `c.x` that produce outputs (`ub.out_rows`, ascending) to its first
/// `ub.out_rows.len()` rows and returns that count: what upstream's recipes do before the last
/// block's feed-forward (`ggml_get_rows(cur, inp_out_ids)`), which then runs on those rows only.
pub fn keep_out_rows(model: &Model, ub: &UBatch<'_>, c: &mut Common) -> usize {
    let e = model.hp.n_embd;
    for (o, &t) in ub.out_rows.iter().enumerate() {
        // (ascending: row t >= o is still in place when it moves)
        assert!(t >= o && (o == 0 || t > ub.out_rows[o - 1]), "output rows ascend");
        if t != o {
            c.x.copy_within(t * e..(t + 1) * e, o * e);
        }
    }
    ub.out_rows.len()
}

/// Final norm and output projection of `ub.out_rows` into `logits` (and the normed hidden
/// states into `embd` when asked); `kept`: those rows are already the first of `c.x`
/// ([`keep_out_rows`]).
pub fn output(model: &Model, ub: &UBatch<'_>, c: &mut Common, pool: &ThreadPool, logits: &mut [f32], embd: Option<&mut [f32]>, kept: bool) {
    let (hp, w) = (&model.hp, &model.weights);
    let e = hp.n_embd;
    let n_out = ub.out_rows.len();
    if n_out == 0 {
        return;
    }
    for (o, &t) in ub.out_rows.iter().enumerate() {
        let t = if kept { o } else { t };
        rms_norm(&c.x[t * e..(t + 1) * e], &w.output_norm, hp.rms_eps, &mut c.xn[o * e..(o + 1) * e]);
    }
    if let Some(embd) = embd {
        embd[..n_out * e].copy_from_slice(&c.xn[..n_out * e]);
    }
    project(model, pool, &mut c.act, &w.output, &c.xn, n_out, logits);
}
