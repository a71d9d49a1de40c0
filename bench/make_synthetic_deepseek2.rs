//! Writes a synthetic deepseek2 GGUF with DeepSeek-V2-Lite's layer shapes (MLA: 16 heads,
//! kv_lora 512, rope 64, nope 128, v 128; MoE: 64 experts, 6 used, 2 shared, expert FFN 1408;
//! dense FFN 10944 in block 0) and random weights quantized like a Q4_K_M file (K-quants where
//! rows allow, Q8_0/Q5_0 where they do not), for speed comparisons with llama.cpp.
//! The tokenizer (480 tokens) comes from the tiny deepseek2 fixture.
//! usage: make_synthetic_deepseek2 OUT.gguf [N_LAYERS]

use deepseek::gguf::{GgufFile, GgufValue, GgufWriter};
use deepseek::quant::{quantize_row_ref, GgmlType};

const EMBD: usize = 2048;
const HEADS: usize = 16;
const KV_LORA: usize = 512;
const ROPE: usize = 64;
const NOPE: usize = 128;
const V_HEAD: usize = 128;
const FF_DENSE: usize = 10944;
const EXPERTS: usize = 64;
const USED: usize = 6;
const SHARED: usize = 2;
const FF_EXP: usize = 1408;

struct Rng(u64);
impl Rng {
    /// Roughly normal (sum of 4 uniforms), scaled.
    fn normal(&mut self, scale: f32) -> f32 {
        let mut s = 0.0;
        for _ in 0..4 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            s += (self.0 >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
        }
        s * scale * 1.7
    }
}

/// `count` matrices of rows × cols in the type llama-quantize's Q4_K_M would pick for that row length.
fn matrix(rng: &mut Rng, cols: usize, rows: usize, count: usize, preferred: GgmlType) -> (GgmlType, Vec<u8>) {
    let ty = if cols % 256 == 0 { preferred } else if preferred == GgmlType::Q6K { GgmlType::Q8_0 } else { GgmlType::Q5_0 };
    let row_bytes = ty.row_bytes(cols).unwrap();
    let mut data = vec![0u8; row_bytes * rows * count];
    let mut src = vec![0f32; cols];
    let scale = 1.0 / (cols as f32).sqrt();
    for r in 0..rows * count {
        src.iter_mut().for_each(|x| *x = rng.normal(scale));
        quantize_row_ref(ty, &src, &mut data[r * row_bytes..(r + 1) * row_bytes]);
    }
    (ty, data)
}

/// `count` matrices of rows × cols of a type without a reference quantizer (the IQ types):
/// valid random blocks (`quant::random_blocks`), for speed measurements only.
/// A row length the type's block does not divide falls back as llama-quantize's
/// `tensor_type_fallback` does for the 256-block IQ types: IQ4_NL (V2-Lite's expert down
/// projection, 1408 columns).
fn random_matrix(rng: &mut Rng, ty: GgmlType, cols: usize, rows: usize, count: usize) -> (GgmlType, Vec<u8>) {
    let ty = if cols % ty.block_len() == 0 { ty } else { GgmlType::IQ4_NL };
    let mut data = vec![0u8; ty.row_bytes(cols).unwrap() * rows * count];
    rng.normal(1.0);
    deepseek::quant::random_blocks(ty, rng.0, &mut data);
    (ty, data)
}

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn main() {
    let out = std::env::args().nth(1).expect("usage: make_synthetic_deepseek2 OUT.gguf [N_LAYERS] [EXPERT_TYPE]");
    let n_layer: usize = std::env::args().nth(2).map_or(4, |s| s.parse().unwrap());
    // The routed experts' type: q4_K (the Q4_K_M default) or an IQ type by ggml name (iq2_xxs:
    // the experts of unsloth's / bartowski's IQ2_XXS files).
    let expert_type = std::env::args().nth(3).map(|name| (0..64).filter_map(GgmlType::from_u32).find(|t| t.name() == name).unwrap_or_else(|| panic!("unknown type {name}")));
    let tiny = GgufFile::open(std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/deepseek2/tiny-deepseek2-lite-f32.gguf")), true).unwrap();
    let n_vocab = tiny.get_array("tokenizer.ggml.tokens").unwrap().len();
    let mut w = GgufWriter::new();
    let u = |v: usize| GgufValue::U32(v as u32);
    w.kv("general.architecture", GgufValue::Str("deepseek2".into()));
    w.kv("general.name", GgufValue::Str(format!("synthetic V2-Lite shapes, {n_layer} layers")));
    for (k, v) in [
        ("block_count", u(n_layer)),
        ("context_length", u(163840)),
        ("embedding_length", u(EMBD)),
        ("feed_forward_length", u(FF_DENSE)),
        ("attention.head_count", u(HEADS)),
        ("attention.head_count_kv", u(1)),
        ("attention.key_length", u(KV_LORA + ROPE)),
        ("attention.value_length", u(KV_LORA)),
        ("attention.key_length_mla", u(NOPE + ROPE)),
        ("attention.value_length_mla", u(V_HEAD)),
        ("attention.q_lora_rank", u(0)),
        ("attention.kv_lora_rank", u(KV_LORA)),
        ("attention.layer_norm_rms_epsilon", GgufValue::F32(1e-6)),
        ("rope.dimension_count", u(ROPE)),
        ("rope.freq_base", GgufValue::F32(10000.0)),
        ("rope.scaling.type", GgufValue::Str("yarn".into())),
        ("rope.scaling.factor", GgufValue::F32(40.0)),
        ("rope.scaling.original_context_length", u(4096)),
        ("rope.scaling.yarn_log_multiplier", GgufValue::F32(0.0707)),
        ("leading_dense_block_count", u(1)),
        ("expert_count", u(EXPERTS)),
        ("expert_used_count", u(USED)),
        ("expert_shared_count", u(SHARED)),
        ("expert_feed_forward_length", u(FF_EXP)),
        ("expert_weights_scale", GgufValue::F32(1.0)),
        ("expert_gating_func", u(1)),
        ("vocab_size", u(n_vocab)),
    ] {
        w.kv(&format!("deepseek2.{k}"), v);
    }
    w.kv("general.file_type", u(15));
    for (k, v) in tiny.kvs().iter().filter(|(k, _)| k.starts_with("tokenizer.")) {
        w.kv(k, v.clone());
    }
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let ones = |n: usize| f32s(&vec![1.0; n]);
    let (ty, d) = matrix(&mut rng, EMBD, n_vocab, 1, GgmlType::Q4K);
    w.tensor("token_embd.weight", &[EMBD, n_vocab], ty, d);
    for i in 0..n_layer {
        let n = |s: &str| format!("blk.{i}.{s}");
        w.tensor(&n("attn_norm.weight"), &[EMBD], GgmlType::F32, ones(EMBD));
        let (ty, d) = matrix(&mut rng, EMBD, HEADS * (NOPE + ROPE), 1, GgmlType::Q4K);
        w.tensor(&n("attn_q.weight"), &[EMBD, HEADS * (NOPE + ROPE)], ty, d);
        let (ty, d) = matrix(&mut rng, EMBD, KV_LORA + ROPE, 1, GgmlType::Q4K);
        w.tensor(&n("attn_kv_a_mqa.weight"), &[EMBD, KV_LORA + ROPE], ty, d);
        w.tensor(&n("attn_kv_a_norm.weight"), &[KV_LORA], GgmlType::F32, ones(KV_LORA));
        let (ty, d) = matrix(&mut rng, NOPE, KV_LORA, HEADS, GgmlType::Q4K);
        w.tensor(&n("attn_k_b.weight"), &[NOPE, KV_LORA, HEADS], ty, d);
        let (ty, d) = matrix(&mut rng, KV_LORA, V_HEAD, HEADS, GgmlType::Q4K);
        w.tensor(&n("attn_v_b.weight"), &[KV_LORA, V_HEAD, HEADS], ty, d);
        let (ty, d) = matrix(&mut rng, HEADS * V_HEAD, EMBD, 1, GgmlType::Q5K);
        w.tensor(&n("attn_output.weight"), &[HEADS * V_HEAD, EMBD], ty, d);
        w.tensor(&n("ffn_norm.weight"), &[EMBD], GgmlType::F32, ones(EMBD));
        if i == 0 {
            for (name, cols, rows) in [("ffn_gate", EMBD, FF_DENSE), ("ffn_up", EMBD, FF_DENSE), ("ffn_down", FF_DENSE, EMBD)] {
                let (ty, d) = matrix(&mut rng, cols, rows, 1, GgmlType::Q4K);
                w.tensor(&n(&format!("{name}.weight")), &[cols, rows], ty, d);
            }
        } else {
            let router: Vec<f32> = (0..EMBD * EXPERTS).map(|_| rng.normal(2.0 / (EMBD as f32).sqrt())).collect();
            w.tensor(&n("ffn_gate_inp.weight"), &[EMBD, EXPERTS], GgmlType::F32, f32s(&router));
            for (name, cols, rows) in [("ffn_gate_exps", EMBD, FF_EXP), ("ffn_up_exps", EMBD, FF_EXP), ("ffn_down_exps", FF_EXP, EMBD)] {
                let (ty, d) = match expert_type {
                    Some(t) if t != GgmlType::Q4K => random_matrix(&mut rng, t, cols, rows, EXPERTS),
                    _ => matrix(&mut rng, cols, rows, EXPERTS, GgmlType::Q4K),
                };
                w.tensor(&n(&format!("{name}.weight")), &[cols, rows, EXPERTS], ty, d);
            }
            for (name, cols, rows) in [("ffn_gate_shexp", EMBD, FF_EXP * SHARED), ("ffn_up_shexp", EMBD, FF_EXP * SHARED), ("ffn_down_shexp", FF_EXP * SHARED, EMBD)] {
                let (ty, d) = matrix(&mut rng, cols, rows, 1, GgmlType::Q4K);
                w.tensor(&n(&format!("{name}.weight")), &[cols, rows], ty, d);
            }
        }
    }
    w.tensor("output_norm.weight", &[EMBD], GgmlType::F32, ones(EMBD));
    let (ty, d) = matrix(&mut rng, EMBD, n_vocab, 1, GgmlType::Q6K);
    w.tensor("output.weight", &[EMBD, n_vocab], ty, d);
    w.write(std::path::Path::new(&out)).unwrap();
    let kv_mla = n_layer * (KV_LORA + ROPE) * 2;
    let kv_mha = n_layer * HEADS * (NOPE + ROPE + V_HEAD) * 2;
    println!("wrote {out}: {n_layer} layers; F16 KV cache {kv_mla} B/token (MLA latent) vs {kv_mha} B/token for plain multi-head K/V");
}
