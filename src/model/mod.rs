//! model: an immutable loaded model: the file (mapped or owned), hyper-parameters and views of
//! every weight. Shared by any number of contexts on any threads (`Send + Sync`, no locks).
//! Weight matrices are byte ranges into the file; they are never copied or dequantized whole.

pub mod deepseek2;
pub mod deepseek2_weights;
pub mod dense;
pub mod hparams;
pub mod weights;

use std::path::Path;

use crate::gguf::GgufFile;
use crate::tokenizer::Vocab;
pub use hparams::{Arch, HParams};
pub use weights::{Mat, Weights};

pub struct Model {
    pub file: GgufFile,
    pub hp: HParams,
    /// Embeddings, output head and (for llama/qwen2) the layers.
    pub weights: Weights,
    /// deepseek2's MLA/MoE layers (empty for the dense architectures).
    pub mla_layers: Vec<deepseek2_weights::MlaLayer>,
    pub vocab: Vocab,
    /// Total parameter count (all tensors).
    pub n_params: u64,
    /// Bytes of tensor data.
    pub size_bytes: u64,
    /// Loaded with `vocab_only`: hyper-parameters and vocabulary, no weights (no contexts).
    pub vocab_only: bool,
}

impl Model {
    pub fn load(path: &Path, mmap: bool) -> Result<Model, String> {
        Self::from_file(GgufFile::open(path, mmap)?)
    }

    /// Only the vocabulary and hyper-parameters (llama.h's `vocab_only`): tensors are neither
    /// needed nor read, and no context can be made from the result.
    pub fn load_vocab_only(path: &Path, mmap: bool) -> Result<Model, String> {
        let file = GgufFile::open(path, mmap)?;
        let vocab = Vocab::from_gguf(&file)?;
        let hp = HParams::from_gguf(&file, vocab.n_tokens())?;
        crate::sys::stats::MODELS.add(1);
        Ok(Model { file, hp, weights: Weights::absent(), mla_layers: Vec::new(), vocab, n_params: 0, size_bytes: 0, vocab_only: true })
    }

    /// Loads and brings every tensor's bytes into memory (page by page, in file order),
    /// reporting the fraction done to `progress`; a `false` from it cancels the load.
    /// Reading the weights up front is what makes a progress report honest for a mapped
    /// file, and it takes the page faults off the first decode.
    pub fn load_with_progress(path: &Path, mmap: bool, progress: &mut dyn FnMut(f32) -> bool) -> Result<Model, String> {
        let model = Self::load(path, mmap)?;
        if !progress(0.0) {
            return Err("loading cancelled by the progress callback".into());
        }
        let total = model.size_bytes.max(1) as f64;
        let mut done = 0u64;
        let mut last_report = 0.0f32;
        for t in model.file.tensors() {
            let data = model.file.tensor_data(t);
            let mut sum = 0u8;
            for page in data.chunks(4096) {
                sum = sum.wrapping_add(page[0]);
            }
            std::hint::black_box(sum);
            done += t.n_bytes as u64;
            let frac = (done as f64 / total) as f32;
            if frac - last_report >= 0.01 || done as f64 >= total {
                last_report = frac;
                if !progress(frac.min(1.0)) {
                    return Err("loading cancelled by the progress callback".into());
                }
            }
        }
        Ok(model)
    }

    pub fn from_file(file: GgufFile) -> Result<Model, String> {
        let embd = file.tensor("token_embd.weight").ok_or("missing required tensor 'token_embd.weight'")?;
        if embd.dims.len() != 2 {
            return Err(format!("token_embd.weight has {} dimensions, expected 2", embd.dims.len()));
        }
        let n_vocab = embd.dims[1];
        let vocab = Vocab::from_gguf(&file)?;
        if vocab.n_tokens() != n_vocab {
            return Err(format!("vocabulary has {} tokens but token_embd.weight has {n_vocab} rows", vocab.n_tokens()));
        }
        let mut hp = HParams::from_gguf(&file, n_vocab)?;
        let weights = Weights::from_file(&file, &hp)?;
        let mla_layers = match &hp.mla {
            Some(m) => deepseek2_weights::load_layers(&file, &hp, m)?,
            None => Vec::new(),
        };
        // A q_lora_rank that no tensor uses (plain attn_q everywhere) must not size buffers:
        // the file could claim any value.
        if let Some(m) = hp.mla.as_mut() {
            if mla_layers.iter().all(|l| matches!(l.q, deepseek2_weights::Query::Direct(_))) {
                m.q_lora_rank = 0;
            }
        }
        let n_params = file.tensors().iter().map(|t| t.n_elements() as u64).sum();
        let size_bytes = file.tensors().iter().map(|t| t.n_bytes as u64).sum();
        crate::sys::stats::MODELS.add(1);
        Ok(Model { file, hp, weights, mla_layers, vocab, n_params, size_bytes, vocab_only: false })
    }

    /// A weight matrix view.
    pub fn mat(&self, m: &Mat) -> crate::kernels::matmul::WeightMatrix<'_> {
        crate::kernels::matmul::WeightMatrix { ty: m.ty, rows: m.rows, cols: m.cols, data: &self.file.bytes()[m.offset..m.offset + m.n_bytes] }
    }
}

impl Drop for Model {
    fn drop(&mut self) {
        crate::sys::stats::MODELS.add(-1);
    }
}
