//! Block: the routed Mixture-of-Experts feed-forward with shared experts (DeepSeek V1, V2,
//! V3/R1), upstream b11312's `build_moe_ffn`: router → softmax or sigmoid → selection bias
//! (selection only) → group-limited choice → top-k → weights from the unbiased probabilities →
//! optional renormalisation → scale; each chosen expert a SwiGLU, plus the shared experts
//! unweighted. Over the common scratch's `xn` into its `proj`; its own buffers are
//! `MoeScratch`, the experts' gate/up rows go through the FFN block's `FfnScratch`.

use super::ffn::{self, glu, Ffn, FfnScratch};
use super::hparams::{Gating, MoeParams};
use super::proj::project;
use super::weights::{expert_stack, mat, opt_vector, Mat, Stack};
use super::{Common, Model, MAX_GROUPS};
use crate::gguf::GgufFile;
use crate::kernels::matmul::{activation_bytes, matmul_all, matmul_batch, quantize_activations, Product};
use crate::kernels::add_assign;
use crate::sys::alloc::try_zeroed;
use crate::threads::ThreadPool;

pub struct Moe {
    /// The block's index (for routing traces).
    pub layer: usize,
    pub router: Mat,
    pub bias: Option<Vec<f32>>,
    pub gate: Stack,
    pub up: Stack,
    pub down: Stack,
    pub shared: Ffn,
    /// deepseek4's hash routing (blocks below `hash_layer_count`): per token id its
    /// `n_expert_used` experts (`ffn_gate_tid2eid`, checked at load).
    pub tid2eid: Option<Vec<i32>>,
    /// The routed experts' SwiGLU clamp (0: none).
    pub clamp: f32,
}

impl Moe {
    /// Block `i`'s router, expert stacks and shared experts.
    pub fn load(f: &GgufFile, p: &MoeParams, i: usize, n_embd: usize) -> Result<Moe, String> {
        let n = |s: &str| format!("blk.{i}.{s}");
        let e = n_embd;
        let shared_ff = p.n_ff_exp * p.n_expert_shared;
        if shared_ff == 0 {
            return Err("MoE blocks need at least one shared expert".into());
        }
        Ok(Moe {
            layer: i,
            router: mat(f, &n("ffn_gate_inp.weight"), e, p.n_expert)?,
            bias: opt_vector(f, &n("exp_probs_b.bias"), p.n_expert)?,
            gate: expert_stack(f, &n("ffn_gate_exps.weight"), e, p.n_ff_exp, p.n_expert)?,
            up: expert_stack(f, &n("ffn_up_exps.weight"), e, p.n_ff_exp, p.n_expert)?,
            down: expert_stack(f, &n("ffn_down_exps.weight"), p.n_ff_exp, e, p.n_expert)?,
            shared: Ffn { clamp: p.clamp_shexp.get(i).copied().unwrap_or(0.0), ..Ffn::load(f, i, "_shexp", e, shared_ff)? },
            tid2eid: if i < p.n_hash { Some(tid2eid(f, p, i)?) } else { None },
            clamp: p.clamp_exp.get(i).copied().unwrap_or(0.0),
        })
    }

    pub fn mats(&self) -> [&Mat; 7] {
        [&self.router, &self.gate.first, &self.up.first, &self.down.first, &self.shared.gate, &self.shared.up, &self.shared.down]
    }

    /// Activation bytes beyond the plain projections': decode batches the chosen experts'
    /// and the shared expert's down-projection inputs side by side.
    pub fn decode_act_bytes(&self, p: &MoeParams) -> usize {
        p.n_expert_used * activation_bytes(self.down.first.ty, p.n_ff_exp, 1) + activation_bytes(self.shared.down.ty, p.n_ff_exp * p.n_expert_shared, 1)
    }
}

/// Block `i`'s hash-routing table `ffn_gate_tid2eid` {n_expert_used, n_vocab} (I32): each
/// entry an expert index.
fn tid2eid(f: &GgufFile, p: &MoeParams, i: usize) -> Result<Vec<i32>, String> {
    let name = format!("blk.{i}.ffn_gate_tid2eid.weight");
    let t = super::weights::find(f, &name)?;
    if t.ty != crate::quant::GgmlType::I32 || t.dims.len() != 2 || t.dims[0] != p.n_expert_used {
        return Err(format!("tensor '{name}' must be I32 of shape [{}, n_vocab], it is {} {:?}", p.n_expert_used, t.ty.name(), t.dims));
    }
    let v: Vec<i32> = f.tensor_data(t).chunks_exact(4).map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
    if let Some(bad) = v.iter().find(|&&x| x < 0 || x as usize >= p.n_expert) {
        return Err(format!("tensor '{name}' routes to expert {bad} of {}", p.n_expert));
    }
    Ok(v)
}

pub struct MoeScratch {
    moe: Vec<f32>,
    /// Decode: the chosen experts' outputs, then the shared expert's.
    moe_rows: Vec<f32>,
    gather: Vec<f32>,
    /// Prefill: every token's FFN input quantized for the experts' gate matrices.
    xq: Vec<u8>,
    router: Vec<f32>,
    /// Per token: the selected experts and their weights.
    chosen: Vec<(usize, f32)>,
    /// Per expert: the (token · n_expert_used + slot, weight) pairs routed to it in this
    /// micro-batch (slot: the expert's place in the token's selection).
    routed: Vec<Vec<(usize, f32)>>,
    /// Prefill with three or more experts per token: every token's weighted expert outputs by
    /// slot (n_ubatch × n_expert_used × n_embd), summed in slot order once all are in; empty
    /// for one or two (where the order of the sum cannot change it).
    slots: Vec<f32>,
    /// When on (tests comparing expert choices with llama.cpp's): every routing decision.
    pub trace: Option<Vec<RouteRecord>>,
    /// The micro-batch's token ids (hash-routed blocks read them).
    pub tokens: Vec<i32>,
}

/// One token's routing in one MoE block: its row in the micro-batch, the selection scores
/// (gating probabilities plus the selection bias, before the group limit) and the experts
/// chosen, ascending.
#[derive(Clone, Debug)]
pub struct RouteRecord {
    pub layer: usize,
    pub row: usize,
    pub scores: Vec<f32>,
    pub chosen: Vec<usize>,
}

fn record(trace: &mut Option<Vec<RouteRecord>>, moe: &Moe, row: usize, probs: &[f32], chosen: &[(usize, f32)]) {
    if let Some(t) = trace {
        let scores = probs.iter().enumerate().map(|(i, &p)| p + moe.bias.as_ref().map_or(0.0, |b| b[i])).collect();
        let mut ids: Vec<usize> = chosen.iter().map(|&(x, _)| x).collect();
        ids.sort_unstable();
        t.push(RouteRecord { layer: moe.layer, row, scores, chosen: ids });
    }
}

impl MoeScratch {
    pub fn new<'a>(p: &MoeParams, layers: impl Iterator<Item = &'a Moe>, n_embd: usize, n_ubatch: usize) -> Result<MoeScratch, String> {
        let (n, e) = (n_ubatch, n_embd);
        let xq = layers.map(|m| activation_bytes(m.gate.first.ty, e, n)).max().unwrap_or(0);
        Ok(MoeScratch {
            moe: try_zeroed(n * e, "scratch")?,
            moe_rows: try_zeroed((p.n_expert_used + 1) * e, "scratch")?,
            gather: try_zeroed(n * e, "scratch")?,
            xq: try_zeroed(xq, "scratch")?,
            router: try_zeroed(n * p.n_expert, "scratch")?,
            chosen: try_zeroed(n * p.n_expert_used, "scratch")?,
            routed: (0..p.n_expert).map(|_| Vec::with_capacity(n)).collect(),
            slots: if p.n_expert_used > 2 { try_zeroed(n * p.n_expert_used * e, "scratch")? } else { Vec::new() },
            trace: None,
            tokens: try_zeroed(n, "scratch")?,
        })
    }

    /// The FFN rows the experts need in gate/up: a micro-batch's routed rows, or in decode the
    /// chosen experts' and the shared expert's side by side.
    pub fn ffn_floats(p: &MoeParams, n_ubatch: usize) -> usize {
        (n_ubatch * p.n_ff_exp.max(p.n_ff_exp * p.n_expert_shared)).max(p.n_expert_used * p.n_ff_exp + p.n_ff_exp * p.n_expert_shared)
    }

    pub fn bytes(&self) -> usize {
        4 * (self.moe.capacity() + self.moe_rows.capacity() + self.gather.capacity() + self.router.capacity() + self.slots.capacity())
            + self.chosen.capacity() * std::mem::size_of::<(usize, f32)>()
            + self.routed.iter().map(|r| r.capacity() * std::mem::size_of::<(usize, f32)>()).sum::<usize>()
            + self.xq.capacity()
    }
}

/// The MoE FFN of `c.xn` (`n` rows) into `c.proj`: shared + Σ weight · expert.
pub fn forward(model: &Model, p: &MoeParams, moe: &Moe, c: &mut Common, f: &mut FfnScratch, s: &mut MoeScratch, pool: &ThreadPool, n: usize) {
    if n == 1 && decode_batches_fit(moe) {
        return moe_decode(model, p, pool, c, f, s, moe);
    }
    experts(model, p, pool, c, f, s, moe, n);
    ffn::forward(model, &moe.shared, c, f, pool, n);
    let e = model.hp.n_embd;
    add_assign(&mut c.proj[..n * e], &s.moe[..n * e]);
}

/// Whether the experts' and the shared expert's gate and up matrices take one activation format
/// (so that [`moe_decode`] quantizes the token once for all of them).
fn decode_batches_fit(moe: &Moe) -> bool {
    let vt = moe.gate.first.ty.vec_dot_type();
    [moe.up.first.ty, moe.shared.gate.ty, moe.shared.up.ty].iter().all(|t| t.vec_dot_type() == vt)
}

/// One token through the MoE FFN in two batches (gate and up of the chosen experts and the
/// shared expert, then their down projections); leaves shared + Σ weight · expert in `c.proj`,
/// summed in selection order as [`experts`] and upstream do, so results equal the batched
/// path's.
fn moe_decode(model: &Model, m: &MoeParams, pool: &ThreadPool, c: &mut Common, f: &mut FfnScratch, s: &mut MoeScratch, moe: &Moe) {
    let e = model.hp.n_embd;
    let (k, ffe, ffs) = (m.n_expert_used, m.n_ff_exp, moe.shared.gate.rows);
    project(model, pool, &mut c.act, &moe.router, &c.xn, 1, &mut s.router);
    let forced = moe.tid2eid.as_ref().map(|t| &t[s.tokens[0] as usize * k..(s.tokens[0] as usize + 1) * k]);
    route(m, moe.bias.as_deref(), forced, &mut s.router[..m.n_expert], &mut s.chosen[..k]);
    record(&mut s.trace, moe, 0, &s.router[..m.n_expert], &s.chosen[..k]);
    let chosen = &s.chosen[..k];

    quantize_activations(pool, moe.gate.first.ty, &c.xn[..e], e, 1, &mut c.act);
    {
        let act = &c.act[..];
        let (g_exp, g_sh) = f.gate.split_at_mut(k * ffe);
        let (u_exp, u_sh) = f.up.split_at_mut(k * ffe);
        let experts = g_exp.chunks_exact_mut(ffe).zip(u_exp.chunks_exact_mut(ffe)).zip(chosen);
        let products = experts.flat_map(|((g, u), &(x, _))| [Product { w: model.mat(&moe.gate.get(x)), act, out: g }, Product { w: model.mat(&moe.up.get(x)), act, out: u }]);
        let shared = [Product { w: model.mat(&moe.shared.gate), act, out: &mut g_sh[..ffs] }, Product { w: model.mat(&moe.shared.up), act, out: &mut u_sh[..ffs] }];
        matmul_all(pool, 1, products.chain(shared));
    }
    // per row, as ggml's swiglu: the experts' rows of ffe, then the shared experts' row
    glu(pool, &mut f.gate[..k * ffe], &f.up[..k * ffe], ffe, moe.clamp);
    if ffs > 0 {
        glu(pool, &mut f.gate[k * ffe..k * ffe + ffs], &f.up[k * ffe..k * ffe + ffs], ffs, moe.shared.clamp);
    }

    let arb = activation_bytes(moe.down.first.ty, ffe, 1);
    quantize_activations(pool, moe.down.first.ty, &f.gate[..k * ffe], ffe, k, &mut c.act[..k * arb]);
    let arb_shared = activation_bytes(moe.shared.down.ty, ffs, 1);
    quantize_activations(pool, moe.shared.down.ty, &f.gate[k * ffe..k * ffe + ffs], ffs, 1, &mut c.act[k * arb..k * arb + arb_shared]);
    {
        let act = &c.act[..];
        let (rows, shared_row) = s.moe_rows.split_at_mut(k * e);
        let products = rows.chunks_exact_mut(e).zip(chosen).enumerate().map(|(i, (out, &(x, _)))| Product { w: model.mat(&moe.down.get(x)), act: &act[i * arb..(i + 1) * arb], out });
        let shared = Product { w: model.mat(&moe.shared.down), act: &act[k * arb..], out: &mut shared_row[..e] };
        matmul_all(pool, 1, products.chain([shared]));
    }

    for (i, &(_, wt)) in chosen.iter().enumerate() {
        s.moe_rows[i * e..(i + 1) * e].iter_mut().for_each(|y| *y *= wt);
    }
    add_slots(&s.moe_rows[..k * e], &mut s.moe[..e]);
    c.proj[..e].copy_from_slice(&s.moe_rows[k * e..(k + 1) * e]);
    add_assign(&mut c.proj[..e], &s.moe[..e]);
}

/// Routes each token to its experts and sums their weighted SwiGLU outputs into `s.moe`.
/// Tokens are grouped by expert so that each chosen expert's weights are read once per batch,
/// and experts are taken in groups of at most `n` routed rows in all (ascending expert index)
/// whose matrices share pool jobs: gate and up of the group in one, down in another.
#[allow(clippy::too_many_arguments)]
fn experts(model: &Model, m: &MoeParams, pool: &ThreadPool, c: &mut Common, f: &mut FfnScratch, s: &mut MoeScratch, moe: &Moe, n: usize) {
    let e = model.hp.n_embd;
    let (ne, ffe, k) = (m.n_expert, m.n_ff_exp, m.n_expert_used);
    project(model, pool, &mut c.act, &moe.router, &c.xn, n, &mut s.router);
    for list in s.routed.iter_mut() {
        list.clear();
    }
    for t in 0..n {
        let chosen = &mut s.chosen[t * k..(t + 1) * k];
        let forced = moe.tid2eid.as_ref().map(|x| &x[s.tokens[t] as usize * k..(s.tokens[t] as usize + 1) * k]);
        route(m, moe.bias.as_deref(), forced, &mut s.router[t * ne..(t + 1) * ne], chosen);
        record(&mut s.trace, moe, t, &s.router[t * ne..(t + 1) * ne], chosen);
        for (slot, &(x, wt)) in chosen.iter().enumerate() {
            s.routed[x].push((t * k + slot, wt));
        }
    }
    // every token's input quantized once; a group's rows are copied from it
    let (gate_ty, up_ty, down_ty) = (moe.gate.first.ty, moe.up.first.ty, moe.down.first.ty);
    let up_same = up_ty.vec_dot_type() == gate_ty.vec_dot_type();
    let arb = activation_bytes(gate_ty, e, 1);
    quantize_activations(pool, gate_ty, &c.xn[..n * e], e, n, &mut s.xq);
    s.moe[..n * e].iter_mut().for_each(|v| *v = 0.0);
    let mut next = 0;
    while next < ne {
        let group_start = next;
        let mut rows = 0;
        while next < ne && (next == group_start || rows + s.routed[next].len() <= n) {
            rows += s.routed[next].len();
            next += 1;
        }
        let group = group_start..next;
        let mut i = 0;
        for x in group.clone() {
            for &(ts, _) in &s.routed[x] {
                let t = ts / k;
                c.act[i * arb..(i + 1) * arb].copy_from_slice(&s.xq[t * arb..(t + 1) * arb]);
                if !up_same {
                    s.gather[i * e..(i + 1) * e].copy_from_slice(&c.xn[t * e..(t + 1) * e]);
                }
                i += 1;
            }
        }
        // gate and up of the group's experts, each on its own rows
        let (routed, g) = (&s.routed, group.clone());
        if up_same {
            let gates = expert_products(model, &moe.gate, routed, g.clone(), &c.act, arb, &mut f.gate[..rows * ffe], ffe);
            let ups = expert_products(model, &moe.up, routed, g.clone(), &c.act, arb, &mut f.up[..rows * ffe], ffe);
            matmul_batch(pool, gates.chain(ups));
        } else {
            matmul_batch(pool, expert_products(model, &moe.gate, routed, g.clone(), &c.act, arb, &mut f.gate[..rows * ffe], ffe));
            quantize_activations(pool, up_ty, &s.gather[..rows * e], e, rows, &mut c.act);
            let uarb = activation_bytes(up_ty, e, 1);
            matmul_batch(pool, expert_products(model, &moe.up, routed, g.clone(), &c.act, uarb, &mut f.up[..rows * ffe], ffe));
        }
        glu(pool, &mut f.gate[..rows * ffe], &f.up[..rows * ffe], ffe, moe.clamp);
        quantize_activations(pool, down_ty, &f.gate[..rows * ffe], ffe, rows, &mut c.act);
        let darb = activation_bytes(down_ty, ffe, 1);
        matmul_batch(pool, expert_products(model, &moe.down, routed, g, &c.act, darb, &mut c.proj[..rows * e], e));
        let mut i = 0;
        for x in group {
            for &(ts, wt) in &s.routed[x] {
                let y = &c.proj[i * e..(i + 1) * e];
                if k > 2 {
                    s.slots[ts * e..(ts + 1) * e].iter_mut().zip(y).for_each(|(o, &y)| *o = wt * y);
                } else {
                    let t = ts / k;
                    s.moe[t * e..(t + 1) * e].iter_mut().zip(y).for_each(|(acc, &y)| *acc += wt * y);
                }
                i += 1;
            }
        }
    }
    if k > 2 {
        for t in 0..n {
            add_slots(&s.slots[t * k * e..(t + 1) * k * e], &mut s.moe[t * e..(t + 1) * e]);
        }
    }
}

/// upstream's `ffn_moe_out` of one token: its `k` weighted expert outputs (`slots`, k × e, in
/// selection order: descending score, as `ggml_argsort_top_k` gives them) added in that order,
/// ((y0 + y1) + y2) + … (a sum in another order can round differently from three on).
fn add_slots(slots: &[f32], out: &mut [f32]) {
    let e = out.len();
    out.copy_from_slice(&slots[..e]);
    for y in slots[e..].chunks_exact(e) {
        add_assign(out, y);
    }
}

/// `(rows, product)` for each expert `x` of `group` with routed tokens: `stack[x]` × its rows of
/// `act` (`arb` bytes each; the experts' rows one after the other, in `routed` order) into its
/// rows of `out` (`width` floats each).
#[allow(clippy::too_many_arguments)]
fn expert_products<'a>(model: &'a Model, stack: &'a Stack, routed: &'a [Vec<(usize, f32)>], group: std::ops::Range<usize>, act: &'a [u8], arb: usize, out: &'a mut [f32], width: usize) -> impl Iterator<Item = (usize, Product<'a>)> + 'a {
    group.filter(move |&x| !routed[x].is_empty()).scan((0usize, out), move |(off, rest), x| {
        let k = routed[x].len();
        let (mine, others) = std::mem::take(rest).split_at_mut(k * width);
        *rest = others;
        let a = &act[*off * arb..(*off + k) * arb];
        *off += k;
        Some((k, Product { w: model.mat(&stack.get(x)), act: a, out: mine }))
    })
}

/// Upstream's build_moe_ffn selection for one token: gating probabilities, the selection bias
/// (selection only), group-limited choice, top-k, weights from the unbiased probabilities,
/// optional renormalisation, then scaling. `logits` is overwritten with the probabilities.
/// `forced`: the experts of a hash-routed block (deepseek4), which replace the selection.
pub fn route(m: &MoeParams, bias: Option<&[f32]>, forced: Option<&[i32]>, logits: &mut [f32], chosen: &mut [(usize, f32)]) {
    match m.gating {
        Gating::Softmax => {
            let mx = logits.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
            let mut sum = 0.0;
            for v in logits.iter_mut() {
                *v = (*v - mx).exp();
                sum += *v;
            }
            for v in logits.iter_mut() {
                *v /= sum;
            }
        }
        Gating::Sigmoid => logits.iter_mut().for_each(|v| *v = 1.0 / (1.0 + (-*v).exp())),
        Gating::SqrtSoftplus => logits.iter_mut().for_each(|v| *v = if *v > 20.0 { *v } else { (1.0 + v.exp()).ln() }.sqrt()),
    }
    let probs = &*logits;
    if let Some(experts) = forced {
        for (c, &x) in chosen.iter_mut().zip(experts) {
            *c = (x as usize, probs[x as usize]);
        }
        return finish_weights(m, chosen);
    }
    let sel = |i: usize| probs[i] + bias.map_or(0.0, |b| b[i]);
    let per_group = m.n_expert / m.n_group;
    // Groups kept: the n_group_used with the largest sum of their two best selection scores.
    let mut group_kept = [true; MAX_GROUPS];
    if m.n_group > 1 {
        let mut scores = [(f32::NEG_INFINITY, 0usize); MAX_GROUPS];
        for g in 0..m.n_group {
            let (mut a, mut b) = (f32::NEG_INFINITY, f32::NEG_INFINITY);
            for i in g * per_group..(g + 1) * per_group {
                let v = sel(i);
                if v > a {
                    b = a;
                    a = v;
                } else if v > b {
                    b = v;
                }
            }
            scores[g] = (a + b, g);
        }
        let groups = &mut scores[..m.n_group];
        // Descending with NaN last: a total order even for a model whose router yields NaN.
        let key = |v: f32| if v.is_nan() { f32::NEG_INFINITY } else { v };
        groups.sort_by(|x, y| key(y.0).partial_cmp(&key(x.0)).unwrap_or(std::cmp::Ordering::Equal));
        group_kept = [false; MAX_GROUPS];
        for &(_, g) in groups.iter().take(m.n_group_used) {
            group_kept[g] = true;
        }
    }
    // Top-k over the selection scores of the kept groups (k is small: selection by repeated max).
    let k = chosen.len();
    for slot in 0..k {
        let mut best = usize::MAX;
        let mut best_v = f32::NEG_INFINITY;
        for i in 0..m.n_expert {
            if !group_kept[i / per_group] {
                continue;
            }
            if chosen[..slot].iter().any(|&(c, _)| c == i) {
                continue;
            }
            let v = sel(i);
            if best == usize::MAX || v > best_v {
                best = i;
                best_v = v;
            }
        }
        chosen[slot] = (best, probs[best]);
    }
    finish_weights(m, chosen);
}

/// The chosen experts' weights: renormalised and scaled when the model asks.
fn finish_weights(m: &MoeParams, chosen: &mut [(usize, f32)]) {
    if m.weights_norm {
        // ggml_sum_rows (ggml_vec_sum_f32) accumulates in f64 and rounds once
        let sum = chosen.iter().map(|&(_, w)| w as f64).sum::<f64>() as f32;
        let d = sum.max(6.103515625e-5);
        chosen.iter_mut().for_each(|(_, w)| *w /= d);
    }
    if m.weights_scale != 0.0 && m.weights_scale != 1.0 {
        chosen.iter_mut().for_each(|(_, w)| *w *= m.weights_scale);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::hparams::Gating;
    use crate::model::{FeedForward, Layers};
    use crate::quant::GgmlType;

    use crate::quant::test_util::upstream_op as f32s;

    /// upstream's `ffn_moe_out` from its own weighted expert outputs (tests/data/upstream_ops:
    /// the V3-shaped model's block 1, four experts per token, 8 tokens), bit for bit. Summed in
    /// expert order instead (the order of the experts' ids, from upstream's masked selection
    /// scores) the same values give other bits, which this asserts too.
    #[test]
    fn slots_add_as_llama_cpps_moe_out() {
        let (k, e, n) = (4, 256, 8);
        let (weighted, want, scores) = (f32s("dsv3_moe_weighted_1.f32"), f32s("dsv3_moe_out_1.f32"), f32s("dsv3_moe_probs_masked_1.f32"));
        let mut expert_order_differs = false;
        for t in 0..n {
            let slots = &weighted[t * k * e..(t + 1) * k * e];
            let want = &want[t * e..(t + 1) * e];
            let mut out = vec![0f32; e];
            add_slots(slots, &mut out);
            for (i, (a, b)) in out.iter().zip(want).enumerate() {
                assert_eq!(a.to_bits(), b.to_bits(), "token {t} [{i}]: {a} vs llama.cpp's {b}");
            }
            // the slots' experts: upstream's top k of its selection scores, descending
            let sc = &scores[t * 16..(t + 1) * 16];
            let mut ids: Vec<usize> = (0..16).collect();
            ids.sort_by(|&a, &b| sc[b].partial_cmp(&sc[a]).unwrap());
            let mut by_expert: Vec<usize> = (0..k).collect();
            by_expert.sort_by_key(|&j| ids[j]);
            let mut acc = vec![0f32; e];
            for j in by_expert {
                add_assign(&mut acc, &slots[j * e..(j + 1) * e]);
            }
            expert_order_differs |= acc.iter().zip(want).any(|(a, b)| a.to_bits() != b.to_bits());
        }
        assert!(expert_order_differs, "a sum in expert order gave upstream's bits: the test would not see it");
    }

    /// A micro-batch's MoE output is, row for row and bit for bit, each token's alone (the decode
    /// path, which adds the weighted experts in selection order as upstream's `ffn_moe_out`
    /// does): the V3-shaped model with four experts per token, Q8_0 experts (whose products sum
    /// alike for one row and for many). With three or more experts the order of the sum shows.
    #[test]
    fn batch_rows_are_decode_rows() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/deepseek2/tiny-deepseek3-q8_0.gguf");
        let model = crate::model::Model::load(&path, true).unwrap();
        let p = model.hp.moe.clone().unwrap();
        assert_eq!(p.n_expert_used, 4);
        let Layers::Deepseek2(blocks) = &model.layers else { panic!("deepseek2 layers") };
        let ffn = blocks.iter().map(|b| &b.ffn).find(|f| matches!(f, FeedForward::Moe(_))).unwrap();
        let pool = ThreadPool::new(2).unwrap();
        let (n, e) = (24, model.hp.n_embd);
        let mut s = model.new_scratch(n, 2, 64, (GgmlType::F16, GgmlType::F16)).unwrap();
        let mut rng = crate::quant::test_util::Rng::new(24);
        let input: Vec<f32> = (0..n * e).map(|_| (rng.unit() - 0.5) * 4.0).collect();
        s.common.xn[..n * e].copy_from_slice(&input);
        ffn.forward(&model, &p, &mut s.common, &mut s.ffn, s.moe.as_mut().unwrap(), &pool, n);
        let batch = s.common.proj[..n * e].to_vec();
        for t in 0..n {
            s.common.xn[..e].copy_from_slice(&input[t * e..(t + 1) * e]);
            ffn.forward(&model, &p, &mut s.common, &mut s.ffn, s.moe.as_mut().unwrap(), &pool, 1);
            for (i, (a, b)) in batch[t * e..(t + 1) * e].iter().zip(&s.common.proj[..e]).enumerate() {
                assert_eq!(a.to_bits(), b.to_bits(), "row {t} [{i}]: batch {a}, alone {b}");
            }
        }
    }

    /// The renormalised weights of eight chosen experts (DeepSeek V3/R1's count) divide by the sum
    /// as ggml_sum_rows takes it (`ggml_vec_sum_f32`: accumulated in f64, rounded once), clamped
    /// below at 6.103515625e-5 as upstream's `ffn_moe_weights_sum_clamped`. Over these draws an
    /// f32 running sum differs in the last bit on some, which this asserts too so that the
    /// comparison can see that sum.
    #[test]
    fn weight_sum_is_ggmls() {
        let m = MoeParams { n_dense_lead: 0, n_expert: 64, n_expert_used: 8, n_expert_shared: 1, n_ff_exp: 8, n_group: 1, n_group_used: 1, gating: Gating::Sigmoid, weights_norm: true, weights_scale: 1.0, n_hash: 0, clamp_exp: Vec::new(), clamp_shexp: Vec::new() };
        let mut rng = crate::quant::test_util::Rng::new(8);
        let mut f32_sum_differs = 0;
        for _ in 0..1000 {
            let w: Vec<f32> = (0..8).map(|_| rng.unit()).collect();
            let mut chosen: Vec<(usize, f32)> = w.iter().enumerate().map(|(i, &v)| (i, v)).collect();
            finish_weights(&m, &mut chosen);
            let sum64 = (w.iter().map(|&v| v as f64).sum::<f64>() as f32).max(6.103515625e-5);
            for (&(_, got), &v) in chosen.iter().zip(&w) {
                assert_eq!(got.to_bits(), (v / sum64).to_bits(), "weight {v} of {w:?}");
            }
            f32_sum_differs += (w.iter().sum::<f32>() != sum64) as usize;
        }
        assert!(f32_sum_differs > 0, "an f32 running sum gave the f64 sum on every draw: the test would not see it");
    }
}
