//! Weight views of the dense decoder (llama, qwen2): every tensor found by name, its shape
//! checked against the hyper-parameters. Small vectors (norms, biases) are copied to f32;
//! matrices stay where they are in the file.

use super::hparams::HParams;
use crate::gguf::{GgufFile, TensorInfo};
use crate::quant::{self, GgmlType};

/// A matrix of `rows` × `cols` stored row-major in the file (ggml: ne0 = cols, ne1 = rows).
#[derive(Clone, Debug)]
pub struct Mat {
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    pub offset: usize,
    pub n_bytes: usize,
}

pub struct Layer {
    pub attn_norm: Vec<f32>,
    pub wq: Mat,
    pub wk: Mat,
    pub wv: Mat,
    pub bq: Option<Vec<f32>>,
    pub bk: Option<Vec<f32>>,
    pub bv: Option<Vec<f32>>,
    pub wo: Mat,
    pub ffn_norm: Vec<f32>,
    pub ffn_gate: Mat,
    pub ffn_up: Mat,
    pub ffn_down: Mat,
}

pub struct Weights {
    pub token_embd: Mat,
    pub output_norm: Vec<f32>,
    /// `output.weight`, or `token_embd.weight` when the output is tied to the embeddings.
    pub output: Mat,
    pub rope_freqs: Option<Vec<f32>>,
    pub layers: Vec<Layer>,
}

pub(super) fn find<'a>(f: &'a GgufFile, name: &str) -> Result<&'a TensorInfo, String> {
    f.tensor(name).ok_or_else(|| format!("missing required tensor '{name}'"))
}

fn check_dims(t: &TensorInfo, want: &[usize]) -> Result<(), String> {
    if t.dims != want {
        return Err(format!("tensor '{}' has shape {:?}, expected {:?}", t.name, t.dims, want));
    }
    Ok(())
}

pub(super) fn mat(f: &GgufFile, name: &str, cols: usize, rows: usize) -> Result<Mat, String> {
    let t = find(f, name)?;
    check_dims(t, &[cols, rows])?;
    if !t.ty.is_weight_type() {
        return Err(format!("tensor '{name}' has type {} which is not supported for weights", t.ty.name()));
    }
    Ok(Mat { ty: t.ty, rows, cols, offset: t.file_offset, n_bytes: t.n_bytes })
}

fn vector_of(f: &GgufFile, t: &TensorInfo, len: usize) -> Result<Vec<f32>, String> {
    check_dims(t, &[len])?;
    if !matches!(t.ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16) {
        return Err(format!("tensor '{}' has type {}; vectors must be f32, f16 or bf16", t.name, t.ty.name()));
    }
    let mut v = vec![0.0; len];
    quant::dequantize_row(t.ty, f.tensor_data(t), &mut v);
    Ok(v)
}

/// The model's `block_count`, checked against the file before anything is sized by it: every
/// block has tensors of its own, so a count beyond the file's tensors is a lie (and a
/// `Vec::with_capacity` of it could ask for terabytes).
pub(super) fn layer_count(f: &GgufFile, hp: &HParams) -> Result<usize, String> {
    let n_tensors = f.tensors().len();
    if hp.n_layer > n_tensors {
        return Err(format!("block_count = {} but the file has only {n_tensors} tensors", hp.n_layer));
    }
    Ok(hp.n_layer)
}

pub(super) fn vector(f: &GgufFile, name: &str, len: usize) -> Result<Vec<f32>, String> {
    vector_of(f, find(f, name)?, len)
}

pub(super) fn opt_vector(f: &GgufFile, name: &str, len: usize) -> Result<Option<Vec<f32>>, String> {
    f.tensor(name).map(|t| vector_of(f, t, len)).transpose()
}

impl Weights {
    /// No weights (a vocab-only model).
    pub fn absent() -> Weights {
        let none = Mat { ty: GgmlType::F32, rows: 0, cols: 0, offset: 0, n_bytes: 0 };
        Weights { token_embd: none.clone(), output_norm: Vec::new(), output: none, rope_freqs: None, layers: Vec::new() }
    }

    pub fn from_file(f: &GgufFile, hp: &HParams) -> Result<Weights, String> {
        let (e, v) = (hp.n_embd, hp.n_vocab);
        let token_embd = mat(f, "token_embd.weight", e, v)?;
        let output = if f.tensor("output.weight").is_some() { mat(f, "output.weight", e, v)? } else { token_embd.clone() };
        let dense_layers = if hp.mla.is_some() { 0 } else { layer_count(f, hp)? };
        let mut layers = Vec::with_capacity(dense_layers);
        for i in 0..dense_layers {
            let n = |s: &str| format!("blk.{i}.{s}");
            layers.push(Layer {
                attn_norm: vector(f, &n("attn_norm.weight"), e)?,
                wq: mat(f, &n("attn_q.weight"), e, hp.q_dim())?,
                wk: mat(f, &n("attn_k.weight"), e, hp.kv_dim_k())?,
                wv: mat(f, &n("attn_v.weight"), e, hp.kv_dim_v())?,
                bq: opt_vector(f, &n("attn_q.bias"), hp.q_dim())?,
                bk: opt_vector(f, &n("attn_k.bias"), hp.kv_dim_k())?,
                bv: opt_vector(f, &n("attn_v.bias"), hp.kv_dim_v())?,
                wo: mat(f, &n("attn_output.weight"), hp.n_head * hp.head_dim_v, e)?,
                ffn_norm: vector(f, &n("ffn_norm.weight"), e)?,
                ffn_gate: mat(f, &n("ffn_gate.weight"), e, hp.n_ff)?,
                ffn_up: mat(f, &n("ffn_up.weight"), e, hp.n_ff)?,
                ffn_down: mat(f, &n("ffn_down.weight"), hp.n_ff, e)?,
            });
        }
        Ok(Weights {
            token_embd,
            output_norm: vector(f, "output_norm.weight", e)?,
            output,
            rope_freqs: if hp.mla.is_some() { None } else { opt_vector(f, "rope_freqs.weight", hp.n_rot / 2)? },
            layers,
        })
    }
}
