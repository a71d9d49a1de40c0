//! Hyper-parameters of the dense decoder architectures, read from GGUF keys the way upstream's
//! llama-model.cpp reads them, with upstream's defaults.

use crate::gguf::GgufFile;
use crate::kernels::rope::RopeMode;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    Llama,
    Qwen2,
}

impl Arch {
    pub fn from_name(name: &str) -> Option<Arch> {
        match name {
            "llama" => Some(Arch::Llama),
            "qwen2" => Some(Arch::Qwen2),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
        }
    }
    pub fn rope_mode(self) -> RopeMode {
        match self {
            Arch::Llama => RopeMode::Norm,
            Arch::Qwen2 => RopeMode::Neox,
        }
    }
}

/// RoPE scaling kinds (values of llama.h's enum llama_rope_scaling_type).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeScaling {
    None = 0,
    Linear = 1,
    Yarn = 2,
}

#[derive(Clone, Debug)]
pub struct HParams {
    pub arch: Arch,
    pub n_vocab: usize,
    pub n_ctx_train: u32,
    pub n_embd: usize,
    pub n_layer: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim_k: usize,
    pub head_dim_v: usize,
    pub n_ff: usize,
    pub rms_eps: f32,
    pub n_rot: usize,
    pub rope_freq_base: f32,
    pub rope_freq_scale: f32,
    pub rope_scaling: RopeScaling,
    pub n_ctx_orig_yarn: u32,
    pub yarn_ext_factor: f32,
    pub yarn_attn_factor: f32,
    pub yarn_beta_fast: f32,
    pub yarn_beta_slow: f32,
}

fn required_u32(f: &GgufFile, key: &str) -> Result<u32, String> {
    f.get_u32(key).ok_or_else(|| format!("missing or invalid required key '{key}'"))
}

fn positive(v: u32, key: &str) -> Result<usize, String> {
    if v == 0 {
        return Err(format!("key '{key}' must be positive"));
    }
    Ok(v as usize)
}

impl HParams {
    pub fn from_gguf(f: &GgufFile, n_vocab: usize) -> Result<HParams, String> {
        let arch_name = f.get_str("general.architecture").ok_or("missing required key 'general.architecture'")?;
        let arch = Arch::from_name(arch_name).ok_or_else(|| format!("unsupported architecture '{arch_name}' (supported: llama, qwen2)"))?;
        let a = arch.name();
        let k = |s: &str| format!("{a}.{s}");
        let n_embd = positive(required_u32(f, &k("embedding_length"))?, &k("embedding_length"))?;
        let n_layer = positive(required_u32(f, &k("block_count"))?, &k("block_count"))?;
        let n_ctx_train = required_u32(f, &k("context_length"))?;
        let n_ff = positive(required_u32(f, &k("feed_forward_length"))?, &k("feed_forward_length"))?;
        let n_head = positive(required_u32(f, &k("attention.head_count"))?, &k("attention.head_count"))?;
        let n_head_kv = positive(f.get_u32(&k("attention.head_count_kv")).unwrap_or(n_head as u32), &k("attention.head_count_kv"))?;
        if n_head % n_head_kv != 0 {
            return Err(format!("head_count {n_head} is not a multiple of head_count_kv {n_head_kv}"));
        }
        let default_hd = (n_embd / n_head) as u32;
        let head_dim_k = positive(f.get_u32(&k("attention.key_length")).unwrap_or(default_hd), &k("attention.key_length"))?;
        let head_dim_v = positive(f.get_u32(&k("attention.value_length")).unwrap_or(default_hd), &k("attention.value_length"))?;
        if head_dim_k != head_dim_v {
            return Err(format!("key length {head_dim_k} differs from value length {head_dim_v}: not supported for {a}"));
        }
        let n_rot = f.get_u32(&k("rope.dimension_count")).unwrap_or(head_dim_k as u32) as usize;
        if n_rot % 2 != 0 || n_rot > head_dim_k {
            return Err(format!("rope.dimension_count {n_rot} must be even and at most the head size {head_dim_k}"));
        }
        let rms_eps = f.get_f32(&k("attention.layer_norm_rms_epsilon")).ok_or_else(|| format!("missing required key '{}'", k("attention.layer_norm_rms_epsilon")))?;
        let rope_freq_base = f.get_f32(&k("rope.freq_base")).unwrap_or(10000.0);
        let linear = f.get_f32(&k("rope.scale_linear")).unwrap_or(0.0);
        let mut rope_freq_scale = if linear == 0.0 { 1.0 } else { 1.0 / linear };
        if let Some(factor) = f.get_f32(&k("rope.scaling.factor")) {
            if factor != 0.0 {
                rope_freq_scale = 1.0 / factor;
            }
        }
        let rope_scaling = match f.get_str(&k("rope.scaling.type")) {
            None | Some("none") => if rope_freq_scale != 1.0 { RopeScaling::Linear } else { RopeScaling::None },
            Some("linear") => RopeScaling::Linear,
            Some("yarn") => RopeScaling::Yarn,
            Some(other) => return Err(format!("unsupported rope scaling type '{other}'")),
        };
        let n_ctx_orig_yarn = f.get_u32(&k("rope.scaling.original_context_length")).unwrap_or(n_ctx_train);
        for (v, name) in [(rms_eps, "rms epsilon"), (rope_freq_base, "rope freq_base"), (rope_freq_scale, "rope freq scale")] {
            if !v.is_finite() || v <= 0.0 {
                return Err(format!("invalid {name} {v}"));
            }
        }
        Ok(HParams {
            arch,
            n_vocab,
            n_ctx_train,
            n_embd,
            n_layer,
            n_head,
            n_head_kv,
            head_dim_k,
            head_dim_v,
            n_ff,
            rms_eps,
            n_rot,
            rope_freq_base,
            rope_freq_scale,
            rope_scaling,
            n_ctx_orig_yarn,
            yarn_ext_factor: f.get_f32(&k("rope.scaling.yarn_ext_factor")).unwrap_or(-1.0),
            yarn_attn_factor: f.get_f32(&k("rope.scaling.yarn_attn_factor")).unwrap_or(1.0),
            yarn_beta_fast: f.get_f32(&k("rope.scaling.yarn_beta_fast")).unwrap_or(32.0),
            yarn_beta_slow: f.get_f32(&k("rope.scaling.yarn_beta_slow")).unwrap_or(1.0),
        })
    }

    pub fn q_dim(&self) -> usize {
        self.n_head * self.head_dim_k
    }
    pub fn kv_dim_k(&self) -> usize {
        self.n_head_kv * self.head_dim_k
    }
    pub fn kv_dim_v(&self) -> usize {
        self.n_head_kv * self.head_dim_v
    }
}
