//! Hyper-parameters, read from GGUF keys the way upstream's llama-model.cpp reads them, with
//! upstream's defaults: the decoder's (every architecture), MLA's (deepseek2) and the
//! experts' (deepseek, deepseek2).

use crate::gguf::GgufFile;
use crate::kernels::rope::RopeMode;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    Llama,
    Qwen2,
    Deepseek,
    Deepseek2,
    /// DeepSeek V3.2: deepseek2's MLA and MoE plus the lightning indexer (sparse attention).
    Deepseek32,
    Deepseek4,
}

impl Arch {
    pub fn from_name(name: &str) -> Option<Arch> {
        match name {
            "llama" => Some(Arch::Llama),
            "qwen2" => Some(Arch::Qwen2),
            "deepseek" => Some(Arch::Deepseek),
            "deepseek2" => Some(Arch::Deepseek2),
            "deepseek32" => Some(Arch::Deepseek32),
            "deepseek4" => Some(Arch::Deepseek4),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Deepseek => "deepseek",
            Arch::Deepseek2 => "deepseek2",
            Arch::Deepseek32 => "deepseek32",
            Arch::Deepseek4 => "deepseek4",
        }
    }
    pub fn rope_mode(self) -> RopeMode {
        match self {
            Arch::Llama | Arch::Deepseek | Arch::Deepseek2 | Arch::Deepseek32 | Arch::Deepseek4 => RopeMode::Norm,
            Arch::Qwen2 => RopeMode::Neox,
        }
    }
    /// The MLA architectures (deepseek2's attention, routing and YaRN conventions).
    pub fn is_mla(self) -> bool {
        matches!(self, Arch::Deepseek2 | Arch::Deepseek32)
    }
}

/// RoPE scaling kinds (values of llama.h's enum llama_rope_scaling_type).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeScaling {
    None = 0,
    Linear = 1,
    Yarn = 2,
}

/// How an embedding context turns a sequence's hidden states into one vector (llama.h's
/// `llama_pooling_type`, same numbers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pooling {
    None = 0,
    Mean = 1,
    Cls = 2,
    Last = 3,
    Rank = 4,
}

impl Pooling {
    pub fn from_raw(v: i32) -> Option<Pooling> {
        Some(match v {
            0 => Pooling::None,
            1 => Pooling::Mean,
            2 => Pooling::Cls,
            3 => Pooling::Last,
            4 => Pooling::Rank,
            _ => return None,
        })
    }
}

#[derive(Clone, Debug)]
pub struct HParams {
    pub arch: Arch,
    /// `{arch}.pooling_type`: how an embedding context pools its sequences by default (NONE
    /// when the file does not say).
    pub pooling: Pooling,
    /// `{arch}.classifier.output_labels` (none when the file has no such key), and the number
    /// of values a RANK-pooled sequence yields: the labels' count, 1 without labels (upstream's
    /// `n_cls_out`).
    pub cls_labels: Vec<std::ffi::CString>,
    pub n_cls_out: usize,
    /// `{arch}.attention.causal` (default true).
    pub causal_attn: bool,
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
    /// `rope.scaling.attn_factor` (upstream's hparams.rope_attn_factor).
    pub rope_attn_factor: f32,
    /// `rope.scaling.yarn_log_multiplier` (deepseek2: divided by 0.1, i.e. HF's mscale_all_dim).
    pub rope_yarn_log_mul: f32,
    /// YaRN's magnitude uses mscale_all_dims for both factors (deepseek2, as upstream).
    pub yarn_mscale_all_dims: bool,
    /// MLA parameters of deepseek2.
    pub mla: Option<MlaParams>,
    /// Expert parameters of deepseek, deepseek2 and deepseek32.
    pub moe: Option<MoeParams>,
    /// The lightning indexer of deepseek32.
    pub indexer: Option<IndexerParams>,
    pub dsv4: Option<Dsv4Params>,
}

/// deepseek4 (V4): what its attention, hyper-connections and caches are shaped by
/// (upstream b11312 `src/models/deepseek4.cpp:19-99`).
#[derive(Clone, Debug)]
pub struct Dsv4Params {
    pub q_lora_rank: usize,
    /// Raw keys a query sees, itself included.
    pub n_swa: usize,
    pub o_groups: usize,
    pub o_lora_rank: usize,
    /// Per block: 0 (window only), 4 (CSA: overlapping compressor + indexer) or 128 (HCA).
    pub ratios: Vec<usize>,
    /// RoPE base of the blocks with a compressor (YaRN applies to those only).
    pub compress_rope_base: f32,
    /// Hyper-connection streams (always 4) and their Sinkhorn normalisation.
    pub hc: usize,
    pub sinkhorn_iters: usize,
    pub hc_eps: f32,
}

/// The CSA and HCA compression ratios (upstream's DSV4_CSA_RATIO / DSV4_HCA_RATIO).
pub(crate) const CSA_RATIO: usize = 4;
pub(crate) const HCA_RATIO: usize = 128;

/// deepseek32's lightning indexer (DeepSeek Sparse Attention): `n_head` query heads of
/// `head_size` against one cached key per token (its first n_rot dims NEOX-roped, the whole key
/// Hadamard-rotated); each query attends to the `top_k` cells it scores highest.
#[derive(Clone, Debug)]
pub struct IndexerParams {
    pub n_head: usize,
    pub head_size: usize,
    pub top_k: usize,
}

/// Gating function of the MoE router (values of upstream's llama_expert_gating_func_type).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gating {
    Softmax,
    Sigmoid,
    /// sqrt(softplus(x)), softplus(x) = x above 20 (deepseek4).
    SqrtSoftplus,
}

/// deepseek2's attention (MLA) hyper-parameters.
#[derive(Clone, Debug)]
pub struct MlaParams {
    /// 0 = direct attn_q (V2-Lite), else attn_q_a → norm → attn_q_b.
    pub q_lora_rank: usize,
    pub kv_lora_rank: usize,
    /// Per-head q/k size without rope (key_length_mla − rope dims).
    pub qk_nope: usize,
    /// Per-head q/k size (key_length_mla).
    pub qk_head: usize,
    /// Per-head value size (value_length_mla).
    pub v_head: usize,
    /// The file has the legacy layout (one `attn_kv_b` per block, no `key_length_mla` /
    /// `value_length_mla`: converted before absorption).
    pub legacy: bool,
    /// A legacy file run as upstream b11312 runs it (its non-MLA branch): per-head keys and
    /// values decompressed by `attn_kv_b` from the latent and cached as multi-head K/V
    /// (`head_count_kv` heads of `key_length` / `value_length`). False for a legacy file whose
    /// `attn_kv_b` the loader split into `attn_k_b` / `attn_v_b` (`attn_mla::absorb_legacy`,
    /// `DEEPSEEK_LEGACY_MLA=absorb`), which then runs as MLA with its small cache.
    pub expanded: bool,
}

/// The routed experts' hyper-parameters (deepseek, deepseek2).
#[derive(Clone, Debug)]
pub struct MoeParams {
    pub n_dense_lead: usize,
    pub n_expert: usize,
    pub n_expert_used: usize,
    pub n_expert_shared: usize,
    pub n_ff_exp: usize,
    pub n_group: usize,
    pub n_group_used: usize,
    pub gating: Gating,
    pub weights_norm: bool,
    pub weights_scale: f32,
    /// deepseek4: blocks below this route by token id (`ffn_gate_tid2eid`), not by score.
    pub n_hash: usize,
    /// deepseek4: per block, the SwiGLU clamp of the routed and of the shared experts (0: none).
    pub clamp_exp: Vec<f32>,
    pub clamp_shexp: Vec<f32>,
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
        let arch = Arch::from_name(arch_name).ok_or_else(|| format!("unsupported architecture '{arch_name}' (supported: llama, qwen2, deepseek, deepseek2, deepseek32, deepseek4)"))?;
        let a = arch.name();
        let k = |s: &str| format!("{a}.{s}");
        let n_embd = positive(required_u32(f, &k("embedding_length"))?, &k("embedding_length"))?;
        let n_layer_all = positive(required_u32(f, &k("block_count"))?, &k("block_count"))?;
        // Multi-token-prediction (NextN) blocks come after the trunk's (b11312's converter keeps
        // V3.2's by default): upstream's n_layer() excludes them and runs only the trunk unless a
        // context is made for MTP drafting, which llama.h's context params cannot ask for here.
        let n_nextn = f.get_u32(&k("nextn_predict_layers")).unwrap_or(0) as usize;
        if n_nextn >= n_layer_all {
            return Err(format!("nextn_predict_layers {n_nextn} leaves no trunk blocks of block_count {n_layer_all} (a file holding only the MTP draft head cannot run alone)"));
        }
        // deepseek4's loader keeps the MTP blocks as trunk blocks unless the first carries its
        // nextn projection (deepseek4.cpp:20-26)
        let n_nextn = if arch == Arch::Deepseek4 && f.tensor(&format!("blk.{}.nextn.eh_proj.weight", n_layer_all - n_nextn)).is_none() { 0 } else { n_nextn };
        let n_layer = n_layer_all - n_nextn;
        let n_ctx_train = required_u32(f, &k("context_length"))?;
        // deepseek4 has no dense FFN (every block is MoE)
        let n_ff = if arch == Arch::Deepseek4 { 0 } else { positive(required_u32(f, &k("feed_forward_length"))?, &k("feed_forward_length"))? };
        let n_head = positive(required_u32(f, &k("attention.head_count"))?, &k("attention.head_count"))?;
        let n_head_kv = positive(f.get_u32(&k("attention.head_count_kv")).unwrap_or(n_head as u32), &k("attention.head_count_kv"))?;
        if arch == Arch::Deepseek4 && n_head_kv != 1 {
            return Err(format!("deepseek4 shares one key/value head (head_count_kv = {n_head_kv})"));
        }
        if n_head % n_head_kv != 0 {
            return Err(format!("head_count {n_head} is not a multiple of head_count_kv {n_head_kv}"));
        }
        let default_hd = (n_embd / n_head) as u32;
        let head_dim_k = positive(f.get_u32(&k("attention.key_length")).unwrap_or(default_hd), &k("attention.key_length"))?;
        let head_dim_v = positive(f.get_u32(&k("attention.value_length")).unwrap_or(default_hd), &k("attention.value_length"))?;
        if head_dim_k != head_dim_v && !arch.is_mla() {
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
        let pooling = match f.get_u32(&k("pooling_type")) {
            None => Pooling::None,
            Some(v) => Pooling::from_raw(v as i32).ok_or_else(|| format!("unknown {} {v}", k("pooling_type")))?,
        };
        let cls_labels: Vec<std::ffi::CString> = match f.get_array(&k("classifier.output_labels")) {
            None => Vec::new(),
            Some(crate::gguf::GgufArray::Str(v)) => v
                .iter()
                .map(|l| std::ffi::CString::new(l.as_str()).map_err(|_| format!("{} holds a label with a NUL byte", k("classifier.output_labels"))))
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(format!("{} is not an array of strings", k("classifier.output_labels"))),
        };
        let n_cls_out = cls_labels.len().max(1);
        Ok(HParams {
            arch,
            pooling,
            cls_labels,
            n_cls_out,
            causal_attn: f.get_bool(&k("attention.causal")).unwrap_or(true),
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
            // deepseek2 and deepseek32 ignore the beta keys (upstream's hard defaults 32 and 1).
            yarn_beta_fast: if arch.is_mla() { 32.0 } else { f.get_f32(&k("rope.scaling.yarn_beta_fast")).unwrap_or(32.0) },
            yarn_beta_slow: if arch.is_mla() { 1.0 } else { f.get_f32(&k("rope.scaling.yarn_beta_slow")).unwrap_or(1.0) },
            rope_attn_factor: f.get_f32(&k("rope.scaling.attn_factor")).unwrap_or(1.0),
            rope_yarn_log_mul: match (arch, f.get_f32(&k("rope.scaling.yarn_log_multiplier"))) {
                (Arch::Deepseek2 | Arch::Deepseek32, Some(v)) => v / 0.1,
                (_, v) => v.unwrap_or(0.0),
            },
            // Only deepseek2 (upstream's llama_context checks that architecture alone).
            yarn_mscale_all_dims: arch == Arch::Deepseek2,
            mla: if arch.is_mla() { Some(MlaParams::from_gguf(f, arch, head_dim_k, head_dim_v, n_rot)?) } else { None },
            moe: if matches!(arch, Arch::Deepseek | Arch::Deepseek2 | Arch::Deepseek32 | Arch::Deepseek4) { Some(MoeParams::from_gguf(f, arch, n_layer)?) } else { None },
            indexer: match arch {
                Arch::Deepseek32 | Arch::Deepseek4 => Some(IndexerParams::from_gguf(f, arch, n_rot)?),
                _ => None,
            },
            dsv4: if arch == Arch::Deepseek4 { Some(Dsv4Params::from_gguf(f, n_layer, n_head, head_dim_k, n_rot)?) } else { None },
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
    /// The KV cache's heads and row size per head: MLA caches one row of the latent and the
    /// rope key per token (also for legacy files run absorbed); a legacy file run as upstream
    /// does (`MlaParams::expanded`) caches `head_count_kv` heads of `key_length` like a plain
    /// multi-head model.
    /// deepseek32's rows also carry the token's indexer key after the rope key part.
    pub fn kv_cache_heads(&self) -> (usize, usize) {
        match &self.mla {
            Some(m) if !m.expanded => (1, m.kv_lora_rank + self.n_rot + self.indexer.as_ref().map_or(0, |x| x.head_size)),
            _ => (self.n_head_kv, self.head_dim_k),
        }
    }
    /// Where a cached row's indexer key starts, and its size (deepseek32).
    pub fn kv_indexer_key(&self) -> Option<(usize, usize)> {
        let (m, x) = (self.mla.as_ref()?, self.indexer.as_ref()?);
        Some((m.kv_lora_rank + self.n_rot, x.head_size))
    }
    /// Whether the KV cache holds V rows (MLA's values are its cached latent).
    pub fn kv_with_v(&self) -> bool {
        self.mla.as_ref().is_none_or(|m| m.expanded) && self.dsv4.is_none()
    }
    /// Where the roped part of a cached K row starts (MLA: after the latent; a legacy file run
    /// expanded: after each head's qk_nope dims; deepseek4: its last n_rot dims).
    pub fn kv_rope_offset(&self) -> usize {
        match (&self.mla, &self.dsv4) {
            (Some(m), _) if m.expanded => m.qk_nope,
            (Some(m), _) => m.kv_lora_rank,
            (None, Some(_)) => self.head_dim_k - self.n_rot,
            (None, None) => 0,
        }
    }
    /// Routed experts per MoE block (0 without experts).
    pub fn n_expert(&self) -> usize {
        self.moe.as_ref().map_or(0, |m| m.n_expert)
    }
}

impl IndexerParams {
    fn from_gguf(f: &GgufFile, arch: Arch, n_rot: usize) -> Result<IndexerParams, String> {
        let k = |s: &str| format!("{}.attention.indexer.{s}", arch.name());
        let n_head = positive(required_u32(f, &k("head_count"))?, &k("head_count"))?;
        let head_size = positive(required_u32(f, &k("key_length"))?, &k("key_length"))?;
        let top_k = positive(required_u32(f, &k("top_k"))?, &k("top_k"))?;
        // Upstream rotates the indexer's queries and keys with one Hadamard matrix of the key's
        // size, built only for powers of two from 64 (llama-kv-cache.cpp).
        if !head_size.is_power_of_two() || head_size < 64 {
            return Err(format!("indexer key_length {head_size} must be a power of two of at least 64 (its Hadamard rotation)"));
        }
        if n_rot > head_size {
            return Err(format!("rope.dimension_count {n_rot} exceeds the indexer key_length {head_size}"));
        }
        if n_head > 1024 {
            return Err(format!("indexer head_count {n_head} is implausible (at most 1024)"));
        }
        Ok(IndexerParams { n_head, head_size, top_k })
    }
}

impl MlaParams {
    fn from_gguf(f: &GgufFile, arch: Arch, key_length: usize, value_length: usize, n_rot: usize) -> Result<MlaParams, String> {
        let a = arch.name();
        let k = |s: &str| format!("{a}.{s}");
        let kv_lora_rank = required_u32(f, &k("attention.kv_lora_rank"))? as usize;
        let qk_head = f.get_u32(&k("attention.key_length_mla")).map(|v| v as usize);
        let v_head = f.get_u32(&k("attention.value_length_mla")).map(|v| v as usize);
        // Upstream's is_mla(): both keys present. Without them (the legacy layout) key_length
        // and value_length are the per-head sizes themselves.
        let legacy = qk_head.is_none() || v_head.is_none();
        if legacy && arch == Arch::Deepseek32 {
            return Err("deepseek32 requires MLA: the keys attention.key_length_mla and attention.value_length_mla are missing".into());
        }
        let q_lora_rank = match arch {
            // required by upstream's deepseek32 loader, which always takes the q-LoRA path
            Arch::Deepseek32 => positive(required_u32(f, &k("attention.q_lora_rank"))?, &k("attention.q_lora_rank"))?,
            _ => f.get_u32(&k("attention.q_lora_rank")).unwrap_or(0) as usize,
        };
        let (qk_head, v_head) = match (qk_head, v_head) {
            (Some(k), Some(v)) => (k, v),
            _ => (key_length, value_length),
        };
        if qk_head <= n_rot || v_head == 0 {
            return Err(format!("per-head key size {qk_head} must exceed the rope dimension {n_rot}, value size {v_head} must be positive"));
        }
        if !legacy && (key_length != kv_lora_rank + n_rot || value_length != kv_lora_rank) {
            return Err(format!("key_length {key_length} / value_length {value_length} must be kv_lora_rank + rope dims / kv_lora_rank ({kv_lora_rank}, {n_rot})"));
        }
        Ok(MlaParams { q_lora_rank, kv_lora_rank, qk_nope: qk_head - n_rot, qk_head, v_head, legacy, expanded: false })
    }
}

impl MoeParams {
    /// deepseek2 reads gating, renormalisation and expert groups from the file; deepseek (V1)
    /// has softmax gating, no renormalisation and no groups built in (upstream deepseek.cpp).
    fn from_gguf(f: &GgufFile, arch: Arch, n_layer: usize) -> Result<MoeParams, String> {
        let k = |s: &str| format!("{}.{s}", arch.name());
        let req = |s: &str| required_u32(f, &k(s)).map(|v| v as usize);
        let v2 = arch.is_mla();
        let v4 = arch == Arch::Deepseek4;
        let clamp_exp = if v4 { per_layer_f32(f, &k("swiglu_clamp_exp"), n_layer)? } else { Vec::new() };
        let n_expert = req("expert_count")?;
        let n_expert_used = req("expert_used_count")?;
        let n_group = if v2 { f.get_u32(&k("expert_group_count")).unwrap_or(1).max(1) as usize } else { 1 };
        let n_group_used = if v2 { f.get_u32(&k("expert_group_used_count")).unwrap_or(1).max(1) as usize } else { 1 };
        let n_dense_lead = f.get_u32(&k("leading_dense_block_count")).unwrap_or(0) as usize;
        if n_expert == 0 || n_expert_used == 0 || n_expert_used > n_expert || n_expert % n_group != 0 || n_group_used > n_group {
            return Err(format!("inconsistent expert counts: {n_expert} experts, {n_expert_used} used, {n_group} groups, {n_group_used} used"));
        }
        if n_group > super::MAX_GROUPS {
            return Err(format!("{n_group} expert groups exceed the supported {}", super::MAX_GROUPS));
        }
        if n_group > 1 && n_expert / n_group < 2 {
            return Err("expert groups need at least 2 experts each (top-2 group scores)".into());
        }
        if n_expert_used > n_group_used * (n_expert / n_group) {
            return Err(format!("{n_expert_used} experts cannot be chosen from the {} experts of {n_group_used} selected groups", n_group_used * (n_expert / n_group)));
        }
        let gating = if arch == Arch::Deepseek4 {
            match required_u32(f, &k("expert_gating_func"))? {
                4 => Gating::SqrtSoftplus,
                g => return Err(format!("deepseek4 needs expert_gating_func 4 (sqrt-softplus), the file has {g}")),
            }
        } else if !v2 {
            Gating::Softmax
        } else {
            // required by deepseek32's loader; deepseek2 defaults to softmax
            let gating = if arch == Arch::Deepseek32 { required_u32(f, &k("expert_gating_func"))? } else { f.get_u32(&k("expert_gating_func")).unwrap_or(1) };
            match gating {
                0 | 1 => Gating::Softmax,
                2 => Gating::Sigmoid,
                g => return Err(format!("expert_gating_func {g} is not supported")),
            }
        };
        Ok(MoeParams {
            n_dense_lead: n_dense_lead.min(n_layer),
            n_expert,
            n_expert_used,
            n_expert_shared: req("expert_shared_count")?,
            n_ff_exp: req("expert_feed_forward_length")?,
            n_group,
            n_group_used,
            gating,
            weights_norm: (v2 && f.get_bool(&k("expert_weights_norm")).unwrap_or(false)) || (v4 && f.get_bool(&k("expert_weights_norm")).ok_or_else(|| format!("missing required key '{}'", k("expert_weights_norm")))?),
            weights_scale: if v4 { f.get_f32(&k("expert_weights_scale")).ok_or_else(|| format!("missing required key '{}'", k("expert_weights_scale")))? } else { f.get_f32(&k("expert_weights_scale")).unwrap_or(0.0) },
            n_hash: if v4 { (f.get_u32(&k("hash_layer_count")).unwrap_or(0) as usize).min(n_layer) } else { 0 },
            clamp_exp: clamp_exp.clone(),
            clamp_shexp: if v4 && f.get(&k("swiglu_clamp_shexp")).is_some() { per_layer_f32(f, &k("swiglu_clamp_shexp"), n_layer)? } else { clamp_exp },
        })
    }
}

/// A per-block float key: an array with an entry per block (more are ignored), or one value
/// for every block.
fn per_layer_f32(f: &GgufFile, key: &str, n_layer: usize) -> Result<Vec<f32>, String> {
    use crate::gguf::value::GgufArray;
    let v: Vec<f32> = match f.get_array(key) {
        Some(GgufArray::F32(v)) => v.clone(),
        Some(GgufArray::F64(v)) => v.iter().map(|&x| x as f32).collect(),
        Some(a) => (0..a.len()).map(|i| a.int_at(i).map(|x| x as f32)).collect::<Option<_>>().ok_or_else(|| format!("key '{key}' must hold numbers"))?,
        None => vec![f.get_f32(key).ok_or_else(|| format!("missing required key '{key}'"))?; n_layer],
    };
    if v.len() < n_layer || v[..n_layer].iter().any(|x| !x.is_finite() || *x < 0.0) {
        return Err(format!("key '{key}' needs a finite, non-negative value for each of the {n_layer} blocks"));
    }
    Ok(v[..n_layer].to_vec())
}

impl Dsv4Params {
    fn from_gguf(f: &GgufFile, n_layer: usize, n_head: usize, head: usize, n_rot: usize) -> Result<Dsv4Params, String> {
        let k = |s: &str| format!("deepseek4.{s}");
        let req = |s: &str| required_u32(f, &k(s)).and_then(|v| positive(v, &k(s)));
        let ratios_key = k("attention.compress_ratios");
        let a = f.get_array(&ratios_key).ok_or_else(|| format!("missing required key '{ratios_key}'"))?;
        if a.len() < n_layer {
            return Err(format!("'{ratios_key}' has {} entries for {n_layer} blocks", a.len()));
        }
        let ratios = (0..n_layer)
            .map(|i| match a.int_at(i) {
                Some(0) => Ok(0),
                Some(4) => Ok(CSA_RATIO),
                Some(128) => Ok(HCA_RATIO),
                v => Err(format!("'{ratios_key}'[{i}] = {v:?}: each block's compression ratio must be 0, 4 or 128")),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let p = Dsv4Params {
            q_lora_rank: req("attention.q_lora_rank")?,
            n_swa: req("attention.sliding_window")?,
            o_groups: req("attention.output_group_count")?,
            o_lora_rank: req("attention.output_lora_rank")?,
            ratios,
            compress_rope_base: f.get_f32(&k("attention.compress_rope_freq_base")).ok_or_else(|| format!("missing required key '{}'", k("attention.compress_rope_freq_base")))?,
            hc: req("hyper_connection.count")?,
            sinkhorn_iters: req("hyper_connection.sinkhorn_iterations")?,
            hc_eps: f.get_f32(&k("hyper_connection.epsilon")).ok_or_else(|| format!("missing required key '{}'", k("hyper_connection.epsilon")))?,
        };
        if p.hc != 4 {
            return Err(format!("deepseek4 needs 4 hyper-connection streams (as upstream's kernels), the file has {}", p.hc));
        }
        if n_head % p.o_groups != 0 {
            return Err(format!("head_count {n_head} is not a multiple of output_group_count {}", p.o_groups));
        }
        if n_rot >= head {
            return Err(format!("rope.dimension_count {n_rot} must be below the head size {head}"));
        }
        if p.sinkhorn_iters > 1000 || !(p.compress_rope_base.is_finite() && p.compress_rope_base > 0.0) || !(p.hc_eps.is_finite() && p.hc_eps >= 0.0) {
            return Err("deepseek4: sinkhorn_iterations, compress_rope_freq_base or hyper_connection.epsilon out of range".into());
        }
        Ok(p)
    }
}
