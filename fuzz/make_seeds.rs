//! Writes the seed corpus of the gguf_model fuzz target: the smallest models that load and
//! run for each architecture path (llama; qwen2 with biases; deepseek2 V2-Lite style and V3
//! style with q-LoRA, sigmoid gating, selection bias and expert groups; deepseek32 with its
//! lightning indexer; deepseek4 with its three kinds of attention blocks) in several weight
//! types, with the 480-token vocabulary of the tiny fixtures. Small seeds keep the fuzzer
//! fast: every mutation lands near the metadata instead of deep inside megabytes of weights.
//! usage: make_fuzz_seeds OUT_DIR

use deepseek::gguf::{GgufFile, GgufValue, GgufWriter};
use deepseek::quant::{quantize_row_ref, random_blocks, GgmlType};

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 40) as f32 / (1u64 << 24) as f32 - 0.5
    }
}

struct Builder {
    w: GgufWriter,
    rng: Rng,
    ty: GgmlType,
    arch: &'static str,
}

impl Builder {
    fn new(arch: &'static str, ty: GgmlType, tokenizer: &GgufFile) -> Builder {
        let mut w = GgufWriter::new();
        w.kv("general.architecture", GgufValue::Str(arch.into()));
        for (k, v) in tokenizer.kvs().iter().filter(|(k, _)| k.starts_with("tokenizer.")) {
            w.kv(k, v.clone());
        }
        Builder { w, rng: Rng(0x9e37_79b9_7f4a_7c15), ty, arch }
    }

    fn hp(&mut self, key: &str, v: usize) {
        self.w.kv(&format!("{}.{key}", self.arch), GgufValue::U32(v as u32));
    }

    fn hp_f32(&mut self, key: &str, v: f32) {
        self.w.kv(&format!("{}.{key}", self.arch), GgufValue::F32(v));
    }

    /// A weight of `dims` (GGUF order: columns first) in the builder's type where the row
    /// length allows it, F32 otherwise.
    fn weight(&mut self, name: &str, dims: &[usize]) {
        let cols = dims[0];
        let rows: usize = dims[1..].iter().product();
        let ty = if cols % self.ty.block_len() == 0 { self.ty } else { GgmlType::F32 };
        let rb = ty.row_bytes(cols).unwrap();
        let mut data = vec![0u8; rb * rows];
        let mut src = vec![0f32; cols];
        for r in 0..rows {
            src.iter_mut().for_each(|x| *x = self.rng.next() / (cols as f32).sqrt() * 3.0);
            if ty.has_quantize_ref() {
                quantize_row_ref(ty, &src, &mut data[r * rb..(r + 1) * rb]);
            } else {
                // the IQ / ternary / FP4 / 1-2-bit types: random valid blocks
                random_blocks(ty, (self.rng.next().to_bits() as u64) << 1 | 1, &mut data[r * rb..(r + 1) * rb]);
            }
        }
        self.w.tensor(name, dims, ty, data);
    }

    /// Block `i`'s routed experts (gate, up, down) and one shared expert of width `ff_exp`.
    fn experts(&mut self, i: usize, e: usize, ff_exp: usize, experts: usize) {
        let n = |s: &str| format!("blk.{i}.{s}");
        self.weight(&n("ffn_gate_exps.weight"), &[e, ff_exp, experts]);
        self.weight(&n("ffn_up_exps.weight"), &[e, ff_exp, experts]);
        self.weight(&n("ffn_down_exps.weight"), &[ff_exp, e, experts]);
        self.weight(&n("ffn_gate_shexp.weight"), &[e, ff_exp]);
        self.weight(&n("ffn_up_shexp.weight"), &[e, ff_exp]);
        self.weight(&n("ffn_down_shexp.weight"), &[ff_exp, e]);
    }

    fn ones(&mut self, name: &str, n: usize) {
        self.w.tensor(name, &[n], GgmlType::F32, vec![1.0f32; n].iter().flat_map(|x| x.to_le_bytes()).collect());
    }
}

const V: usize = 480;

fn dense(arch: &'static str, ty: GgmlType, e: usize, tok: &GgufFile) -> Vec<u8> {
    let (heads, kv_heads, ff) = (2, 1, 2 * e);
    let hd = e / heads;
    let mut b = Builder::new(arch, ty, tok);
    for (k, v) in [("block_count", 1), ("context_length", 256), ("embedding_length", e), ("feed_forward_length", ff), ("attention.head_count", heads), ("attention.head_count_kv", kv_heads), ("vocab_size", V)] {
        b.hp(k, v);
    }
    b.hp_f32("attention.layer_norm_rms_epsilon", 1e-6);
    b.hp_f32("rope.freq_base", 10000.0);
    b.weight("token_embd.weight", &[e, V]);
    b.ones("blk.0.attn_norm.weight", e);
    b.weight("blk.0.attn_q.weight", &[e, e]);
    b.weight("blk.0.attn_k.weight", &[e, hd * kv_heads]);
    b.weight("blk.0.attn_v.weight", &[e, hd * kv_heads]);
    if arch == "qwen2" {
        b.ones("blk.0.attn_q.bias", e);
        b.ones("blk.0.attn_k.bias", hd * kv_heads);
        b.ones("blk.0.attn_v.bias", hd * kv_heads);
    }
    b.weight("blk.0.attn_output.weight", &[e, e]);
    b.ones("blk.0.ffn_norm.weight", e);
    b.weight("blk.0.ffn_gate.weight", &[e, ff]);
    b.weight("blk.0.ffn_up.weight", &[e, ff]);
    b.weight("blk.0.ffn_down.weight", &[ff, e]);
    b.ones("output_norm.weight", e);
    if arch == "llama" {
        b.weight("output.weight", &[e, V]);
    }
    b.w.to_bytes()
}

/// deepseek2 (V2-Lite style without `v3`, V3 style with it), or with `dsa` deepseek32: the V3
/// style plus a lightning indexer of 2 heads × 64 that keeps the top 2 cells.
fn deepseek2(v3: bool, dsa: bool, ty: GgmlType, tok: &GgufFile) -> Vec<u8> {
    let (e, h, nope, rope, c, vh, q_lora, ff, ff_exp, experts) = (32, 2, 32, 16, 32, 32, 32, 64, 32, 4);
    let (ih, id) = (2, 64);
    let v3 = v3 || dsa;
    let arch = if dsa { "deepseek32" } else { "deepseek2" };
    let mut b = Builder::new(arch, ty, tok);
    for (k, v) in [
        ("block_count", 2),
        ("context_length", 256),
        ("embedding_length", e),
        ("feed_forward_length", ff),
        ("attention.head_count", h),
        ("attention.head_count_kv", 1),
        ("attention.key_length", c + rope),
        ("attention.value_length", c),
        ("attention.key_length_mla", nope + rope),
        ("attention.value_length_mla", vh),
        ("attention.q_lora_rank", if v3 { q_lora } else { 0 }),
        ("attention.kv_lora_rank", c),
        ("rope.dimension_count", rope),
        ("leading_dense_block_count", 1),
        ("expert_count", experts),
        ("expert_used_count", 2),
        ("expert_shared_count", 1),
        ("expert_feed_forward_length", ff_exp),
        ("expert_gating_func", if v3 { 2 } else { 1 }),
        ("vocab_size", V),
    ] {
        b.hp(k, v);
    }
    if v3 {
        b.hp("expert_group_count", 2);
        b.hp("expert_group_used_count", 1);
        b.w.kv(&format!("{arch}.expert_weights_norm"), GgufValue::Bool(true));
    }
    if dsa {
        b.hp("attention.indexer.head_count", ih);
        b.hp("attention.indexer.key_length", id);
        b.hp("attention.indexer.top_k", 2);
    }
    b.hp_f32("attention.layer_norm_rms_epsilon", 1e-6);
    b.hp_f32("rope.freq_base", 10000.0);
    b.hp_f32("expert_weights_scale", 2.5);
    b.w.kv(&format!("{arch}.rope.scaling.type"), GgufValue::Str("yarn".into()));
    b.hp_f32("rope.scaling.factor", 40.0);
    b.hp("rope.scaling.original_context_length", 64);
    b.hp_f32("rope.scaling.yarn_log_multiplier", 0.0707);
    b.weight("token_embd.weight", &[e, V]);
    for i in 0..2 {
        let n = |s: &str| format!("blk.{i}.{s}");
        b.ones(&n("attn_norm.weight"), e);
        if v3 {
            b.weight(&n("attn_q_a.weight"), &[e, q_lora]);
            b.ones(&n("attn_q_a_norm.weight"), q_lora);
            b.weight(&n("attn_q_b.weight"), &[q_lora, h * (nope + rope)]);
        } else {
            b.weight(&n("attn_q.weight"), &[e, h * (nope + rope)]);
        }
        b.weight(&n("attn_kv_a_mqa.weight"), &[e, c + rope]);
        b.ones(&n("attn_kv_a_norm.weight"), c);
        b.weight(&n("attn_k_b.weight"), &[nope, c, h]);
        b.weight(&n("attn_v_b.weight"), &[c, vh, h]);
        b.weight(&n("attn_output.weight"), &[h * vh, e]);
        b.ones(&n("ffn_norm.weight"), e);
        if dsa {
            b.ones(&n("indexer.k_norm.weight"), id);
            b.ones(&n("indexer.k_norm.bias"), id);
            b.weight(&n("indexer.proj.weight"), &[e, ih]);
            b.weight(&n("indexer.attn_k.weight"), &[e, id]);
            b.weight(&n("indexer.attn_q_b.weight"), &[q_lora, ih * id]);
        }
        if i == 0 {
            b.weight(&n("ffn_gate.weight"), &[e, ff]);
            b.weight(&n("ffn_up.weight"), &[e, ff]);
            b.weight(&n("ffn_down.weight"), &[ff, e]);
        } else {
            b.weight(&n("ffn_gate_inp.weight"), &[e, experts]);
            if v3 {
                b.ones(&n("exp_probs_b.bias"), experts);
            }
            b.experts(i, e, ff_exp, experts);
        }
    }
    b.ones("output_norm.weight", e);
    b.weight("output.weight", &[e, V]);
    b.w.to_bytes()
}

/// deepseek4 (V4): three blocks with compression ratios 0, 4 and 128 (a window, a CSA block with
/// its indexer, an HCA block), hash routing in block 0, 4 hyper-connection streams.
fn deepseek4(ty: GgmlType, tok: &GgufFile) -> Vec<u8> {
    use deepseek::gguf::value::GgufArray;
    let (e, h, d, rope, ql, g, ol, ff_exp, experts, used) = (32, 2, 32, 8, 32, 2, 16, 32, 4, 2);
    let (ih, id, hc) = (2, 64, 4);
    let ratios = [0u32, 4, 128];
    let arch = "deepseek4";
    let mut b = Builder::new(arch, ty, tok);
    for (k, v) in [
        ("block_count", 3),
        ("context_length", 512),
        ("embedding_length", e),
        ("attention.head_count", h),
        ("attention.head_count_kv", 1),
        ("attention.key_length", d),
        ("attention.value_length", d),
        ("attention.q_lora_rank", ql),
        ("attention.sliding_window", 4),
        ("attention.output_group_count", g),
        ("attention.output_lora_rank", ol),
        ("attention.indexer.head_count", ih),
        ("attention.indexer.key_length", id),
        ("attention.indexer.top_k", 2),
        ("rope.dimension_count", rope),
        ("expert_count", experts),
        ("expert_used_count", used),
        ("expert_shared_count", 1),
        ("expert_feed_forward_length", ff_exp),
        ("expert_gating_func", 4),
        ("hash_layer_count", 1),
        ("hyper_connection.count", hc),
        ("hyper_connection.sinkhorn_iterations", 3),
        ("rope.scaling.original_context_length", 64),
        ("vocab_size", V),
    ] {
        b.hp(k, v);
    }
    b.w.kv(&format!("{arch}.expert_weights_norm"), GgufValue::Bool(true));
    b.w.kv(&format!("{arch}.attention.compress_ratios"), GgufValue::Array(GgufArray::U32(ratios.to_vec())));
    b.w.kv(&format!("{arch}.swiglu_clamp_exp"), GgufValue::Array(GgufArray::F32(vec![2.0; 3])));
    b.w.kv(&format!("{arch}.rope.scaling.type"), GgufValue::Str("yarn".into()));
    b.hp_f32("attention.layer_norm_rms_epsilon", 1e-6);
    b.hp_f32("rope.freq_base", 10000.0);
    b.hp_f32("rope.scaling.factor", 16.0);
    b.hp_f32("attention.compress_rope_freq_base", 160000.0);
    b.hp_f32("hyper_connection.epsilon", 1e-6);
    b.hp_f32("expert_weights_scale", 1.5);
    b.weight("token_embd.weight", &[e, V]);
    for (i, &ratio) in ratios.iter().enumerate() {
        let n = |s: &str| format!("blk.{i}.{s}");
        for site in ["hc_attn", "hc_ffn"] {
            b.weight(&n(&format!("{site}_fn.weight")), &[hc * e, (2 + hc) * hc]);
            b.ones(&n(&format!("{site}_base.weight")), (2 + hc) * hc);
            b.ones(&n(&format!("{site}_scale.weight")), 3);
        }
        b.ones(&n("attn_norm.weight"), e);
        b.ones(&n("attn_sinks.weight"), h);
        b.weight(&n("attn_q_a.weight"), &[e, ql]);
        b.ones(&n("attn_q_a_norm.weight"), ql);
        b.weight(&n("attn_q_b.weight"), &[ql, h * d]);
        b.weight(&n("attn_kv.weight"), &[e, d]);
        b.ones(&n("attn_kv_a_norm.weight"), d);
        b.weight(&n("attn_output_a.weight"), &[h * d / g, ol * g]);
        b.weight(&n("attn_output_b.weight"), &[g * ol, e]);
        if ratio != 0 {
            let coff = if ratio == 4 { 2 } else { 1 };
            b.weight(&n("attn_compressor_kv.weight"), &[e, coff * d]);
            b.weight(&n("attn_compressor_gate.weight"), &[e, coff * d]);
            b.weight(&n("attn_compressor_ape.weight"), &[coff * d, ratio as usize]);
            b.ones(&n("attn_compressor_norm.weight"), d);
        }
        if ratio == 4 {
            b.weight(&n("indexer.proj.weight"), &[e, ih]);
            b.weight(&n("indexer.attn_q_b.weight"), &[ql, ih * id]);
            b.weight(&n("indexer_compressor_kv.weight"), &[e, 2 * id]);
            b.weight(&n("indexer_compressor_gate.weight"), &[e, 2 * id]);
            b.weight(&n("indexer_compressor_ape.weight"), &[2 * id, 4]);
            b.ones(&n("indexer_compressor_norm.weight"), id);
        }
        b.ones(&n("ffn_norm.weight"), e);
        b.weight(&n("ffn_gate_inp.weight"), &[e, experts]);
        if i == 0 {
            let table: Vec<u8> = (0..V * used).map(|j| (((j / used) + j % used) % experts) as i32).flat_map(|x| x.to_le_bytes()).collect();
            b.w.tensor(&n("ffn_gate_tid2eid.weight"), &[used, V], GgmlType::I32, table);
        } else {
            b.ones(&n("exp_probs_b.bias"), experts);
        }
        b.experts(i, e, ff_exp, experts);
    }
    b.ones("output_norm.weight", e);
    b.weight("output.weight", &[e, V]);
    b.weight("output_hc_fn.weight", &[hc * e, hc]);
    b.ones("output_hc_base.weight", hc);
    b.ones("output_hc_scale.weight", 1);
    b.w.to_bytes()
}

/// `bytes` (a model) cut in two shards as llama-gguf-split cuts (split.* keys, every other key in
/// the first shard, half the tensors in each), framed as the gguf_model target reads a split set:
/// `SPLT`, the shard count, the first shard's length (u32 LE), then the shards.
fn split_seed(bytes: &[u8]) -> Vec<u8> {
    let f = GgufFile::from_slice(bytes).unwrap();
    let n = f.tensors().len() as i32;
    let mut shards = [GgufWriter::new(), GgufWriter::new()];
    for (k, v) in f.kvs() {
        shards[0].kv(k, v.clone());
    }
    for (s, w) in shards.iter_mut().enumerate() {
        w.kv("split.no", GgufValue::U16(s as u16)).kv("split.count", GgufValue::U16(2)).kv("split.tensors.count", GgufValue::I32(n));
    }
    for (i, t) in f.tensors().iter().enumerate() {
        shards[(2 * i) / f.tensors().len()].tensor(&t.name, &t.dims, t.ty, f.tensor_data(t).to_vec());
    }
    let (a, b) = (shards[0].to_bytes(), shards[1].to_bytes());
    let joined = GgufFile::from_slices(&[&a, &b]).unwrap();
    deepseek::model::Model::from_file(joined).unwrap_or_else(|e| panic!("split seed does not load: {e}"));
    let mut out = b"SPLT".to_vec();
    out.push(2);
    out.extend_from_slice(&(a.len() as u32).to_le_bytes());
    out.extend(a);
    out.extend(b);
    out
}

fn main() {
    let out = std::path::PathBuf::from(std::env::args().nth(1).expect("usage: make_fuzz_seeds OUT_DIR"));
    std::fs::create_dir_all(&out).unwrap();
    let tok = GgufFile::open(std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/tiny/tiny-llama-q4_0.gguf")), true).unwrap();
    let seeds = [
        ("llama-f32", dense("llama", GgmlType::F32, 32, &tok)),
        ("llama-q4_0", dense("llama", GgmlType::Q4_0, 32, &tok)),
        ("qwen2-q8_0", dense("qwen2", GgmlType::Q8_0, 32, &tok)),
        ("qwen2-f16", dense("qwen2", GgmlType::F16, 32, &tok)),
        ("deepseek2-lite-q8_0", deepseek2(false, false, GgmlType::Q8_0, &tok)),
        ("deepseek3-q4_1", deepseek2(true, false, GgmlType::Q4_1, &tok)),
        ("deepseek32-q8_0", deepseek2(true, true, GgmlType::Q8_0, &tok)),
        ("deepseek4-q8_0", deepseek4(GgmlType::Q8_0, &tok)),
        // the IQ / FP4 families: a 256-block type needs 256 columns
        ("qwen2-iq1_s", dense("qwen2", GgmlType::IQ1_S, 256, &tok)),
        ("llama-iq4_nl", dense("llama", GgmlType::IQ4_NL, 32, &tok)),
        ("qwen2-mxfp4", dense("qwen2", GgmlType::MXFP4, 32, &tok)),
    ];
    let split = split_seed(&seeds[2].1);
    for (name, bytes) in seeds {
        let file = GgufFile::from_slice(&bytes).unwrap();
        deepseek::model::Model::from_file(file).unwrap_or_else(|e| panic!("seed {name} does not load: {e}"));
        std::fs::write(out.join(name), &bytes).unwrap();
        println!("{name}: {} bytes", bytes.len());
    }
    std::fs::write(out.join("qwen2-q8_0-split2"), &split).unwrap();
    println!("qwen2-q8_0-split2: {} bytes", split.len());
}
