//! Weight views: every tensor found by name, its shape checked against the hyper-parameters.
//! Small vectors (norms, biases) are copied to f32; matrices (`Mat`) and stacks of equal
//! matrices (`Stack`: per head, per expert) stay where they are in the file. `Weights` holds
//! what every architecture has (embeddings, output head, RoPE factors); the blocks' weights
//! belong to the block files that use them.

use super::hparams::HParams;
use crate::gguf::{GgufFile, TensorInfo};
use crate::quant::{self, GgmlType};

/// A matrix of `rows` × `cols` stored row-major in the file (ggml: ne0 = cols, ne1 = rows).
#[derive(Clone, Debug)]
pub struct Mat {
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    /// The file of a split model that holds it (0 for an unsplit file), and where in it.
    pub shard: usize,
    pub offset: usize,
    pub n_bytes: usize,
    /// Whether llama.cpp repacks it at load and multiplies it in its repacked kernels' order,
    /// which we then follow (`quant::repacked_order`: only 2-D matrices of `ggml_mul_mat` and
    /// the 3-D expert stacks of `ggml_mul_mat_id` are repacked, not per-head stacks).
    pub repacked: quant::Repacked,
}

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

pub struct Weights {
    pub token_embd: Mat,
    pub output_norm: Vec<f32>,
    /// `output.weight`, or `token_embd.weight` when the output is tied to the embeddings.
    pub output: Mat,
    pub rope_freqs: Option<Vec<f32>>,
}

pub fn find<'a>(f: &'a GgufFile, name: &str) -> Result<&'a TensorInfo, String> {
    f.tensor(name).ok_or_else(|| format!("missing required tensor '{name}'"))
}

fn check_dims(t: &TensorInfo, want: &[usize]) -> Result<(), String> {
    if t.dims != want {
        return Err(format!("tensor '{}' has shape {:?}, expected {:?}", t.name, t.dims, want));
    }
    Ok(())
}

pub fn mat(f: &GgufFile, name: &str, cols: usize, rows: usize) -> Result<Mat, String> {
    let t = find(f, name)?;
    check_dims(t, &[cols, rows])?;
    if !t.ty.is_weight_type() {
        return Err(format!("tensor '{name}' has type {} which is not supported for weights", t.ty.name()));
    }
    Ok(Mat { ty: t.ty, rows, cols, shard: t.shard, offset: t.file_offset, n_bytes: t.n_bytes, repacked: quant::Repacked::of(t.ty, rows, false) })
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
pub fn layer_count(f: &GgufFile, hp: &HParams) -> Result<usize, String> {
    let n_tensors = f.tensors().len();
    if hp.n_layer > n_tensors {
        return Err(format!("block_count = {} but the file has only {n_tensors} tensors", hp.n_layer));
    }
    Ok(hp.n_layer)
}

/// A stack of `count` matrices of `rows` × `cols` (GGUF dims [cols, rows, count]) that upstream
/// multiplies with `ggml_mul_mat` as a 3-D tensor (per-head matrices: never repacked).
pub fn stack(f: &GgufFile, name: &str, cols: usize, rows: usize, count: usize) -> Result<Stack, String> {
    stack_of(f, name, cols, rows, count, false)
}

/// A stack of experts (`ggml_mul_mat_id`, which upstream's repacked kernels serve).
pub fn expert_stack(f: &GgufFile, name: &str, cols: usize, rows: usize, count: usize) -> Result<Stack, String> {
    stack_of(f, name, cols, rows, count, true)
}

fn stack_of(f: &GgufFile, name: &str, cols: usize, rows: usize, count: usize, experts: bool) -> Result<Stack, String> {
    let t = find(f, name)?;
    if t.dims != [cols, rows, count] {
        return Err(format!("tensor '{name}' has shape {:?}, expected {:?}", t.dims, [cols, rows, count]));
    }
    if !t.ty.is_weight_type() {
        return Err(format!("tensor '{name}' has type {} which is not supported for weights", t.ty.name()));
    }
    let n_bytes = t.n_bytes / count;
    // per-head stacks are 3-D tensors of ggml_mul_mat, which upstream does not repack
    let repacked = if experts { quant::Repacked::of(t.ty, rows, true) } else { quant::Repacked::of_heads(t.ty) };
    Ok(Stack { first: Mat { ty: t.ty, rows, cols, shard: t.shard, offset: t.file_offset, n_bytes, repacked }, count })
}

pub fn vector(f: &GgufFile, name: &str, len: usize) -> Result<Vec<f32>, String> {
    vector_of(f, find(f, name)?, len)
}

pub fn opt_vector(f: &GgufFile, name: &str, len: usize) -> Result<Option<Vec<f32>>, String> {
    f.tensor(name).map(|t| vector_of(f, t, len)).transpose()
}

impl Weights {
    /// No weights (a vocab-only model).
    pub fn absent() -> Weights {
        let none = Mat { ty: GgmlType::F32, rows: 0, cols: 0, shard: 0, offset: 0, n_bytes: 0, repacked: quant::Repacked::No };
        Weights { token_embd: none.clone(), output_norm: Vec::new(), output: none, rope_freqs: None }
    }

    pub fn from_file(f: &GgufFile, hp: &HParams) -> Result<Weights, String> {
        let (e, v) = (hp.n_embd, hp.n_vocab);
        let token_embd = mat(f, "token_embd.weight", e, v)?;
        // a tied output is upstream's token_embd tensor, placed for GET_ROWS: never repacked
        let output = if f.tensor("output.weight").is_some() { mat(f, "output.weight", e, v)? } else { Mat { repacked: quant::Repacked::of_heads(token_embd.ty), ..token_embd.clone() } };
        Ok(Weights {
            token_embd,
            output_norm: vector(f, "output_norm.weight", e)?,
            output,
            // MLA's rope part never takes frequency factors (upstream passes none).
            rope_freqs: if hp.mla.is_some() { None } else { opt_vector(f, "rope_freqs.weight", hp.n_rot / 2)? },
        })
    }
}
