//! Weight views of deepseek2 (DeepSeek V2/V2-Lite/V3/R1): MLA attention tensors, dense FFN in the
//! leading blocks, routed and shared experts in the others. Stacked tensors (per head, per
//! expert) are `Stack`s: `count` matrices of equal shape, one after another in the file.

use super::hparams::{HParams, MlaParams};
use super::weights::{find, layer_count, mat, opt_vector, vector, Mat};
use crate::gguf::GgufFile;

/// `count` matrices of `rows` × `cols`, contiguous in the file.
#[derive(Clone, Debug)]
pub struct Stack {
    pub first: Mat,
    pub count: usize,
}

impl Stack {
    pub fn get(&self, i: usize) -> Mat {
        assert!(i < self.count);
        Mat { offset: self.first.offset + i * self.first.n_bytes, ..self.first.clone() }
    }
}

fn stack(f: &GgufFile, name: &str, cols: usize, rows: usize, count: usize) -> Result<Stack, String> {
    let t = find(f, name)?;
    if t.dims != [cols, rows, count] {
        return Err(format!("tensor '{name}' has shape {:?}, expected {:?}", t.dims, [cols, rows, count]));
    }
    if !t.ty.is_weight_type() {
        return Err(format!("tensor '{name}' has type {} which is not supported for weights", t.ty.name()));
    }
    let n_bytes = t.n_bytes / count;
    Ok(Stack { first: Mat { ty: t.ty, rows, cols, offset: t.file_offset, n_bytes }, count })
}

pub enum Query {
    Direct(Mat),
    LowRank { a: Mat, norm: Vec<f32>, b: Mat },
}

pub struct Ffn {
    pub gate: Mat,
    pub up: Mat,
    pub down: Mat,
}

pub struct Moe {
    pub router: Mat,
    pub bias: Option<Vec<f32>>,
    pub gate: Stack,
    pub up: Stack,
    pub down: Stack,
    pub shared: Ffn,
}

pub enum FeedForward {
    Dense(Ffn),
    Moe(Moe),
}

pub struct MlaLayer {
    pub attn_norm: Vec<f32>,
    pub q: Query,
    pub kv_a: Mat,
    pub kv_a_norm: Vec<f32>,
    /// Per head: kv_lora_rank rows × qk_nope (absorbs W_UK into the query).
    pub k_b: Stack,
    /// Per head: v_head rows × kv_lora_rank (decompresses the attention output).
    pub v_b: Stack,
    pub wo: Mat,
    pub ffn_norm: Vec<f32>,
    pub ffn: FeedForward,
}

pub fn load_layers(f: &GgufFile, hp: &HParams, m: &MlaParams) -> Result<Vec<MlaLayer>, String> {
    let (e, h, c, r) = (hp.n_embd, hp.n_head, m.kv_lora_rank, hp.n_rot);
    let n_layer = layer_count(f, hp)?;
    let mut layers = Vec::with_capacity(n_layer);
    for i in 0..n_layer {
        let n = |s: &str| format!("blk.{i}.{s}");
        let q = if f.tensor(&n("attn_q.weight")).is_some() {
            Query::Direct(mat(f, &n("attn_q.weight"), e, h * m.qk_head)?)
        } else {
            if m.q_lora_rank == 0 {
                return Err(format!("blk.{i}: neither attn_q nor a q_lora_rank for attn_q_a/attn_q_b"));
            }
            Query::LowRank {
                a: mat(f, &n("attn_q_a.weight"), e, m.q_lora_rank)?,
                norm: vector(f, &n("attn_q_a_norm.weight"), m.q_lora_rank)?,
                b: mat(f, &n("attn_q_b.weight"), m.q_lora_rank, h * m.qk_head)?,
            }
        };
        let ffn = if i < m.n_dense_lead {
            FeedForward::Dense(Ffn { gate: mat(f, &n("ffn_gate.weight"), e, hp.n_ff)?, up: mat(f, &n("ffn_up.weight"), e, hp.n_ff)?, down: mat(f, &n("ffn_down.weight"), hp.n_ff, e)? })
        } else {
            let shared_ff = m.n_ff_exp * m.n_expert_shared;
            if shared_ff == 0 {
                return Err("deepseek2 MoE blocks need at least one shared expert".into());
            }
            FeedForward::Moe(Moe {
                router: mat(f, &n("ffn_gate_inp.weight"), e, m.n_expert)?,
                bias: opt_vector(f, &n("exp_probs_b.bias"), m.n_expert)?,
                gate: stack(f, &n("ffn_gate_exps.weight"), e, m.n_ff_exp, m.n_expert)?,
                up: stack(f, &n("ffn_up_exps.weight"), e, m.n_ff_exp, m.n_expert)?,
                down: stack(f, &n("ffn_down_exps.weight"), m.n_ff_exp, e, m.n_expert)?,
                shared: Ffn {
                    gate: mat(f, &n("ffn_gate_shexp.weight"), e, shared_ff)?,
                    up: mat(f, &n("ffn_up_shexp.weight"), e, shared_ff)?,
                    down: mat(f, &n("ffn_down_shexp.weight"), shared_ff, e)?,
                },
            })
        };
        layers.push(MlaLayer {
            attn_norm: vector(f, &n("attn_norm.weight"), e)?,
            q,
            kv_a: mat(f, &n("attn_kv_a_mqa.weight"), e, c + r)?,
            kv_a_norm: vector(f, &n("attn_kv_a_norm.weight"), c)?,
            k_b: stack(f, &n("attn_k_b.weight"), m.qk_nope, c, h)?,
            v_b: stack(f, &n("attn_v_b.weight"), c, m.v_head, h)?,
            wo: mat(f, &n("attn_output.weight"), h * m.v_head, e)?,
            ffn_norm: vector(f, &n("ffn_norm.weight"), e)?,
            ffn,
        });
    }
    Ok(layers)
}
