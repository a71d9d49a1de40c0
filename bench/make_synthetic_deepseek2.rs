//! Writes a synthetic deepseek2 GGUF with DeepSeek-V2-Lite's layer shapes (MLA: 16 heads,
//! kv_lora 512, rope 64, nope 128, v 128; MoE: 64 experts, 6 used, 2 shared, expert FFN 1408;
//! dense FFN 10944 in block 0) and random weights quantized like a Q4_K_M file (K-quants where
//! rows allow, Q8_0/Q5_0 where they do not), for speed comparisons with llama.cpp.
//! With SHAPE `v32`: a deepseek32 file with DeepSeek-V3.2's shapes (n_embd 7168, 128 heads,
//! q-LoRA 1536, kv-LoRA 512; 256 experts of 2048, 8 used in 4 of 8 groups, 1 shared, sigmoid
//! routing; dense FFN 18432 in block 0; lightning indexer 64 heads × 128, top-k 2048); its
//! routed experts are valid random Q4_K blocks (speed only: 6 GB a block).
//! The tokenizer (480 tokens) comes from the tiny deepseek2 fixture.
//! usage: make_synthetic_deepseek2 OUT.gguf [N_LAYERS] [EXPERT_TYPE] [SHAPE: v2lite | v32]

use deepseek::gguf::{GgufFile, GgufValue, GgufWriter};
use deepseek::quant::GgmlType;

#[path = "synthetic_common.rs"]
mod common;
use common::{f32s, matrix, Rng};

const KV_LORA: usize = 512;
const ROPE: usize = 64;
const NOPE: usize = 128;
const V_HEAD: usize = 128;

/// The widths that differ between the shapes.
struct Shape {
    v32: bool,
    embd: usize,
    heads: usize,
    q_lora: usize,
    ff_dense: usize,
    experts: usize,
    used: usize,
    shared: usize,
    ff_exp: usize,
}

const V2_LITE: Shape = Shape { v32: false, embd: 2048, heads: 16, q_lora: 0, ff_dense: 10944, experts: 64, used: 6, shared: 2, ff_exp: 1408 };
const V32: Shape = Shape { v32: true, embd: 7168, heads: 128, q_lora: 1536, ff_dense: 18432, experts: 256, used: 8, shared: 1, ff_exp: 2048 };
const INDEXER_HEADS: usize = 64;
const INDEXER_DIM: usize = 128;
const INDEXER_TOP_K: usize = 2048;

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

fn main() {
    let out = std::env::args().nth(1).expect("usage: make_synthetic_deepseek2 OUT.gguf [N_LAYERS] [EXPERT_TYPE] [SHAPE]");
    let n_layer: usize = std::env::args().nth(2).map_or(4, |s| s.parse().unwrap());
    // The routed experts' type: q4_K (the Q4_K_M default) or an IQ type by ggml name (iq2_xxs:
    // the experts of unsloth's / bartowski's IQ2_XXS files).
    let expert_type = std::env::args().nth(3).map(|name| (0..64).filter_map(GgmlType::from_u32).find(|t| t.name() == name).unwrap_or_else(|| panic!("unknown type {name}")));
    let sh = match std::env::args().nth(4).as_deref() {
        None | Some("v2lite") => V2_LITE,
        Some("v32") => V32,
        Some(other) => panic!("unknown shape {other} (v2lite or v32)"),
    };
    let (e, h, ex) = (sh.embd, sh.heads, sh.experts);
    let arch = if sh.v32 { "deepseek32" } else { "deepseek2" };
    let tiny = GgufFile::open(std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/deepseek2/tiny-deepseek2-lite-f32.gguf")), true).unwrap();
    let n_vocab = tiny.get_array("tokenizer.ggml.tokens").unwrap().len();
    let mut w = GgufWriter::new();
    let u = |v: usize| GgufValue::U32(v as u32);
    w.kv("general.architecture", GgufValue::Str(arch.into()));
    w.kv("general.name", GgufValue::Str(format!("synthetic {} shapes, {n_layer} layers", if sh.v32 { "V3.2" } else { "V2-Lite" })));
    let mut keys = vec![
        ("block_count", u(n_layer)),
        ("context_length", u(163840)),
        ("embedding_length", u(e)),
        ("feed_forward_length", u(sh.ff_dense)),
        ("attention.head_count", u(h)),
        ("attention.head_count_kv", u(1)),
        ("attention.key_length", u(KV_LORA + ROPE)),
        ("attention.value_length", u(KV_LORA)),
        ("attention.key_length_mla", u(NOPE + ROPE)),
        ("attention.value_length_mla", u(V_HEAD)),
        ("attention.q_lora_rank", u(sh.q_lora)),
        ("attention.kv_lora_rank", u(KV_LORA)),
        ("attention.layer_norm_rms_epsilon", GgufValue::F32(1e-6)),
        ("rope.dimension_count", u(ROPE)),
        ("rope.freq_base", GgufValue::F32(10000.0)),
        ("rope.scaling.type", GgufValue::Str("yarn".into())),
        ("rope.scaling.factor", GgufValue::F32(40.0)),
        ("rope.scaling.original_context_length", u(4096)),
        ("rope.scaling.yarn_log_multiplier", GgufValue::F32(if sh.v32 { 0.1 } else { 0.0707 })),
        ("leading_dense_block_count", u(1)),
        ("expert_count", u(ex)),
        ("expert_used_count", u(sh.used)),
        ("expert_shared_count", u(sh.shared)),
        ("expert_feed_forward_length", u(sh.ff_exp)),
        ("expert_weights_scale", GgufValue::F32(if sh.v32 { 2.5 } else { 1.0 })),
        ("expert_gating_func", u(if sh.v32 { 2 } else { 1 })),
        ("vocab_size", u(n_vocab)),
    ];
    if sh.v32 {
        keys.extend([
            ("expert_group_count", u(8)),
            ("expert_group_used_count", u(4)),
            ("expert_weights_norm", GgufValue::Bool(true)),
            ("attention.indexer.head_count", u(INDEXER_HEADS)),
            ("attention.indexer.key_length", u(INDEXER_DIM)),
            ("attention.indexer.top_k", u(INDEXER_TOP_K)),
        ]);
    }
    for (k, v) in keys {
        w.kv(&format!("{arch}.{k}"), v);
    }
    w.kv("general.file_type", u(15));
    for (k, v) in tiny.kvs().iter().filter(|(k, _)| k.starts_with("tokenizer.")) {
        w.kv(k, v.clone());
    }
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let ones = |n: usize| f32s(&vec![1.0; n]);
    let put = |w: &mut GgufWriter, rng: &mut Rng, name: &str, cols: usize, rows: usize, count: usize, ty: GgmlType| {
        let (ty, d) = matrix(rng, cols, rows, count, ty);
        let dims: Vec<usize> = if count > 1 { vec![cols, rows, count] } else { vec![cols, rows] };
        w.tensor(name, &dims, ty, d);
    };
    put(&mut w, &mut rng, "token_embd.weight", e, n_vocab, 1, GgmlType::Q4K);
    for i in 0..n_layer {
        let n = |s: &str| format!("blk.{i}.{s}");
        w.tensor(&n("attn_norm.weight"), &[e], GgmlType::F32, ones(e));
        if sh.q_lora > 0 {
            put(&mut w, &mut rng, &n("attn_q_a.weight"), e, sh.q_lora, 1, GgmlType::Q4K);
            w.tensor(&n("attn_q_a_norm.weight"), &[sh.q_lora], GgmlType::F32, ones(sh.q_lora));
            put(&mut w, &mut rng, &n("attn_q_b.weight"), sh.q_lora, h * (NOPE + ROPE), 1, GgmlType::Q4K);
        } else {
            put(&mut w, &mut rng, &n("attn_q.weight"), e, h * (NOPE + ROPE), 1, GgmlType::Q4K);
        }
        put(&mut w, &mut rng, &n("attn_kv_a_mqa.weight"), e, KV_LORA + ROPE, 1, GgmlType::Q4K);
        w.tensor(&n("attn_kv_a_norm.weight"), &[KV_LORA], GgmlType::F32, ones(KV_LORA));
        put(&mut w, &mut rng, &n("attn_k_b.weight"), NOPE, KV_LORA, h, GgmlType::Q4K);
        put(&mut w, &mut rng, &n("attn_v_b.weight"), KV_LORA, V_HEAD, h, GgmlType::Q4K);
        put(&mut w, &mut rng, &n("attn_output.weight"), h * V_HEAD, e, 1, GgmlType::Q5K);
        if sh.v32 {
            w.tensor(&n("indexer.k_norm.weight"), &[INDEXER_DIM], GgmlType::F32, ones(INDEXER_DIM));
            w.tensor(&n("indexer.k_norm.bias"), &[INDEXER_DIM], GgmlType::F32, f32s(&vec![0.0; INDEXER_DIM]));
            put(&mut w, &mut rng, &n("indexer.proj.weight"), e, INDEXER_HEADS, 1, GgmlType::Q4K);
            put(&mut w, &mut rng, &n("indexer.attn_k.weight"), e, INDEXER_DIM, 1, GgmlType::Q8_0);
            put(&mut w, &mut rng, &n("indexer.attn_q_b.weight"), sh.q_lora, INDEXER_HEADS * INDEXER_DIM, 1, GgmlType::Q4K);
        }
        w.tensor(&n("ffn_norm.weight"), &[e], GgmlType::F32, ones(e));
        if i == 0 {
            for (name, cols, rows) in [("ffn_gate", e, sh.ff_dense), ("ffn_up", e, sh.ff_dense), ("ffn_down", sh.ff_dense, e)] {
                put(&mut w, &mut rng, &n(&format!("{name}.weight")), cols, rows, 1, GgmlType::Q4K);
            }
        } else {
            let router: Vec<f32> = (0..e * ex).map(|_| rng.normal(2.0 / (e as f32).sqrt())).collect();
            w.tensor(&n("ffn_gate_inp.weight"), &[e, ex], GgmlType::F32, f32s(&router));
            if sh.v32 {
                let bias: Vec<f32> = (0..ex).map(|_| rng.normal(0.1)).collect();
                w.tensor(&n("exp_probs_b.bias"), &[ex], GgmlType::F32, f32s(&bias));
            }
            for (name, cols, rows) in [("ffn_gate_exps", e, sh.ff_exp), ("ffn_up_exps", e, sh.ff_exp), ("ffn_down_exps", sh.ff_exp, e)] {
                let (ty, d) = match expert_type {
                    Some(t) if t != GgmlType::Q4K => random_matrix(&mut rng, t, cols, rows, ex),
                    // V3.2's 256 experts: random valid blocks (quantizing 11 G weights takes long)
                    _ if sh.v32 => random_matrix(&mut rng, GgmlType::Q4K, cols, rows, ex),
                    _ => matrix(&mut rng, cols, rows, ex, GgmlType::Q4K),
                };
                w.tensor(&n(&format!("{name}.weight")), &[cols, rows, ex], ty, d);
            }
            for (name, cols, rows) in [("ffn_gate_shexp", e, sh.ff_exp * sh.shared), ("ffn_up_shexp", e, sh.ff_exp * sh.shared), ("ffn_down_shexp", sh.ff_exp * sh.shared, e)] {
                put(&mut w, &mut rng, &n(&format!("{name}.weight")), cols, rows, 1, GgmlType::Q4K);
            }
        }
    }
    w.tensor("output_norm.weight", &[e], GgmlType::F32, ones(e));
    put(&mut w, &mut rng, "output.weight", e, n_vocab, 1, GgmlType::Q6K);
    w.write(std::path::Path::new(&out)).unwrap();
    let row = KV_LORA + ROPE + if sh.v32 { INDEXER_DIM } else { 0 };
    let kv_mla = n_layer * row * 2;
    let kv_mha = n_layer * h * (NOPE + ROPE + V_HEAD) * 2;
    println!("wrote {out}: {n_layer} layers; F16 KV cache {kv_mla} B/token (MLA latent{}) vs {kv_mha} B/token for plain multi-head K/V", if sh.v32 { " + indexer key" } else { "" });
}
