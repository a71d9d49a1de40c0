//! Writes a synthetic deepseek4 GGUF with DeepSeek-V4-Flash's layer shapes, for speed
//! comparisons with llama.cpp b11312: n_embd 4096, 64 heads of 512 (64 rotated) sharing one
//! key/value head, q- and o-LoRA 1024 with 8 output groups, a 128-token window, 4
//! hyper-connection streams (20 Sinkhorn iterations), 256 experts of 2048 (6 used, 1 shared,
//! sqrt-softplus, hash-routed in the first block), the lightning indexer 64 heads × 128 with
//! top-k 512, YaRN factor 16 over 65536 with compress base 160000. The blocks alternate
//! compression ratios 4 (CSA) and 128 (HCA). (The widths the fixtures' README does not list —
//! n_embd, heads, head size, window, output groups, expert width — are the ones that give
//! V4-Flash's 284 B total / 13 B active parameters over 43 blocks.) Weights are random, quantized
//! as a Q4_K_M file would be (K-quants where rows allow, Q8_0 / Q5_0 where not); the routed
//! experts are valid random blocks of EXPERT_TYPE (q4_K or mxfp4, the type V4's converter
//! writes). The tokenizer (480 tokens) comes from the tiny deepseek4 fixture.
//! usage: make_synthetic_deepseek4 OUT.gguf [N_LAYERS] [EXPERT_TYPE]

use deepseek::gguf::value::GgufArray;
use deepseek::gguf::{GgufFile, GgufValue, GgufWriter};
use deepseek::quant::GgmlType;

#[path = "synthetic_common.rs"]
mod common;
use common::{f32s, matrix, Rng};

const EMBD: usize = 4096;
const HEADS: usize = 64;
const HEAD: usize = 512;
const ROPE: usize = 64;
const Q_LORA: usize = 1024;
const O_LORA: usize = 1024;
const O_GROUPS: usize = 8;
const WINDOW: usize = 128;
const HC: usize = 4;
const EXPERTS: usize = 256;
const USED: usize = 6;
const FF_EXP: usize = 2048;
const IDX_HEADS: usize = 64;
const IDX_DIM: usize = 128;
const IDX_TOP_K: usize = 512;

fn main() {
    let out = std::env::args().nth(1).expect("usage: make_synthetic_deepseek4 OUT.gguf [N_LAYERS] [EXPERT_TYPE]");
    let n_layer: usize = std::env::args().nth(2).map_or(2, |s| s.parse().unwrap());
    let expert_type = std::env::args().nth(3).map_or(GgmlType::Q4K, |name| (0..64).filter_map(GgmlType::from_u32).find(|t| t.name() == name).unwrap_or_else(|| panic!("unknown type {name}")));
    let tiny = GgufFile::open(std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/deepseek-family/tiny-deepseek4-f32.gguf")), true).unwrap();
    let n_vocab = tiny.get_array("tokenizer.ggml.tokens").unwrap().len();
    let ratios: Vec<u32> = (0..n_layer).map(|i| if i % 2 == 0 { 4 } else { 128 }).collect();
    let arch = "deepseek4";
    let mut w = GgufWriter::new();
    let u = |v: usize| GgufValue::U32(v as u32);
    w.kv("general.architecture", GgufValue::Str(arch.into()));
    w.kv("general.name", GgufValue::Str(format!("synthetic V4-Flash shapes, {n_layer} layers")));
    let keys = vec![
        ("block_count", u(n_layer)),
        ("context_length", u(1 << 20)),
        ("embedding_length", u(EMBD)),
        ("attention.head_count", u(HEADS)),
        ("attention.head_count_kv", u(1)),
        ("attention.key_length", u(HEAD)),
        ("attention.value_length", u(HEAD)),
        ("attention.layer_norm_rms_epsilon", GgufValue::F32(1e-6)),
        ("attention.q_lora_rank", u(Q_LORA)),
        ("attention.sliding_window", u(WINDOW)),
        ("attention.output_group_count", u(O_GROUPS)),
        ("attention.output_lora_rank", u(O_LORA)),
        ("attention.indexer.head_count", u(IDX_HEADS)),
        ("attention.indexer.key_length", u(IDX_DIM)),
        ("attention.indexer.top_k", u(IDX_TOP_K)),
        ("attention.compress_ratios", GgufValue::Array(GgufArray::U32(ratios.clone()))),
        ("attention.compress_rope_freq_base", GgufValue::F32(160000.0)),
        ("rope.dimension_count", u(ROPE)),
        ("rope.freq_base", GgufValue::F32(10000.0)),
        ("rope.scaling.type", GgufValue::Str("yarn".into())),
        ("rope.scaling.factor", GgufValue::F32(16.0)),
        ("rope.scaling.original_context_length", u(65536)),
        ("expert_count", u(EXPERTS)),
        ("expert_used_count", u(USED)),
        ("expert_shared_count", u(1)),
        ("expert_feed_forward_length", u(FF_EXP)),
        ("expert_weights_scale", GgufValue::F32(1.5)),
        ("expert_weights_norm", GgufValue::Bool(true)),
        ("expert_gating_func", u(4)),
        ("swiglu_clamp_exp", GgufValue::Array(GgufArray::F32(vec![10.0; n_layer]))),
        ("hash_layer_count", u(1)),
        ("hyper_connection.count", u(HC)),
        ("hyper_connection.sinkhorn_iterations", u(20)),
        ("hyper_connection.epsilon", GgufValue::F32(1e-6)),
        ("vocab_size", u(n_vocab)),
    ];
    for (k, v) in keys {
        w.kv(&format!("{arch}.{k}"), v);
    }
    w.kv("general.file_type", u(15));
    for (k, v) in tiny.kvs().iter().filter(|(k, _)| k.starts_with("tokenizer.")) {
        w.kv(k, v.clone());
    }
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let ones = |n: usize| f32s(&vec![1.0; n]);
    let put = |w: &mut GgufWriter, rng: &mut Rng, name: &str, cols: usize, rows: usize, ty: GgmlType| {
        let (ty, d) = matrix(rng, cols, rows, 1, ty);
        w.tensor(name, &[cols, rows], ty, d);
    };
    let small = |w: &mut GgufWriter, rng: &mut Rng, name: &str, n: usize, scale: f32| {
        let v: Vec<f32> = (0..n).map(|_| rng.normal(scale)).collect();
        w.tensor(name, &[n], GgmlType::F32, f32s(&v));
    };
    put(&mut w, &mut rng, "token_embd.weight", EMBD, n_vocab, GgmlType::Q4K);
    for (i, &ratio) in ratios.iter().enumerate() {
        let ratio = ratio as usize;
        let n = |s: &str| format!("blk.{i}.{s}");
        for site in ["hc_attn", "hc_ffn"] {
            put(&mut w, &mut rng, &n(&format!("{site}_fn.weight")), HC * EMBD, (2 + HC) * HC, GgmlType::Q4K);
            small(&mut w, &mut rng, &n(&format!("{site}_base.weight")), (2 + HC) * HC, 0.5);
            w.tensor(&n(&format!("{site}_scale.weight")), &[3], GgmlType::F32, f32s(&[0.5; 3]));
        }
        w.tensor(&n("attn_norm.weight"), &[EMBD], GgmlType::F32, ones(EMBD));
        small(&mut w, &mut rng, &n("attn_sinks.weight"), HEADS, 1.0);
        put(&mut w, &mut rng, &n("attn_q_a.weight"), EMBD, Q_LORA, GgmlType::Q4K);
        w.tensor(&n("attn_q_a_norm.weight"), &[Q_LORA], GgmlType::F32, ones(Q_LORA));
        put(&mut w, &mut rng, &n("attn_q_b.weight"), Q_LORA, HEADS * HEAD, GgmlType::Q4K);
        put(&mut w, &mut rng, &n("attn_kv.weight"), EMBD, HEAD, GgmlType::Q4K);
        w.tensor(&n("attn_kv_a_norm.weight"), &[HEAD], GgmlType::F32, ones(HEAD));
        put(&mut w, &mut rng, &n("attn_output_a.weight"), HEADS * HEAD / O_GROUPS, O_LORA * O_GROUPS, GgmlType::Q4K);
        put(&mut w, &mut rng, &n("attn_output_b.weight"), O_GROUPS * O_LORA, EMBD, GgmlType::Q5K);
        let coff = if ratio == 4 { 2 } else { 1 };
        put(&mut w, &mut rng, &n("attn_compressor_kv.weight"), EMBD, coff * HEAD, GgmlType::Q4K);
        put(&mut w, &mut rng, &n("attn_compressor_gate.weight"), EMBD, coff * HEAD, GgmlType::Q4K);
        put(&mut w, &mut rng, &n("attn_compressor_ape.weight"), coff * HEAD, ratio, GgmlType::Q4K);
        w.tensor(&n("attn_compressor_norm.weight"), &[HEAD], GgmlType::F32, ones(HEAD));
        if ratio == 4 {
            put(&mut w, &mut rng, &n("indexer.proj.weight"), EMBD, IDX_HEADS, GgmlType::Q4K);
            put(&mut w, &mut rng, &n("indexer.attn_q_b.weight"), Q_LORA, IDX_HEADS * IDX_DIM, GgmlType::Q4K);
            put(&mut w, &mut rng, &n("indexer_compressor_kv.weight"), EMBD, 2 * IDX_DIM, GgmlType::Q4K);
            put(&mut w, &mut rng, &n("indexer_compressor_gate.weight"), EMBD, 2 * IDX_DIM, GgmlType::Q4K);
            put(&mut w, &mut rng, &n("indexer_compressor_ape.weight"), 2 * IDX_DIM, 4, GgmlType::Q4K);
            w.tensor(&n("indexer_compressor_norm.weight"), &[IDX_DIM], GgmlType::F32, ones(IDX_DIM));
        }
        w.tensor(&n("ffn_norm.weight"), &[EMBD], GgmlType::F32, ones(EMBD));
        let router: Vec<f32> = (0..EMBD * EXPERTS).map(|_| rng.normal(2.0 / (EMBD as f32).sqrt())).collect();
        w.tensor(&n("ffn_gate_inp.weight"), &[EMBD, EXPERTS], GgmlType::F32, f32s(&router));
        if i == 0 {
            let table: Vec<u8> = (0..n_vocab * USED).map(|j| ((j / USED * 7 + j % USED * 37) % EXPERTS) as i32).flat_map(|x| x.to_le_bytes()).collect();
            w.tensor(&n("ffn_gate_tid2eid.weight"), &[USED, n_vocab], GgmlType::I32, table);
        } else {
            small(&mut w, &mut rng, &n("exp_probs_b.bias"), EXPERTS, 0.1);
        }
        for (name, cols, rows) in [("ffn_gate_exps", EMBD, FF_EXP), ("ffn_up_exps", EMBD, FF_EXP), ("ffn_down_exps", FF_EXP, EMBD)] {
            let mut data = vec![0u8; expert_type.row_bytes(cols).unwrap() * rows * EXPERTS];
            rng.normal(1.0);
            deepseek::quant::random_blocks(expert_type, rng.0, &mut data);
            w.tensor(&n(&format!("{name}.weight")), &[cols, rows, EXPERTS], expert_type, data);
        }
        for (name, cols, rows) in [("ffn_gate_shexp", EMBD, FF_EXP), ("ffn_up_shexp", EMBD, FF_EXP), ("ffn_down_shexp", FF_EXP, EMBD)] {
            put(&mut w, &mut rng, &n(&format!("{name}.weight")), cols, rows, GgmlType::Q4K);
        }
    }
    w.tensor("output_norm.weight", &[EMBD], GgmlType::F32, ones(EMBD));
    put(&mut w, &mut rng, "output.weight", EMBD, n_vocab, GgmlType::Q6K);
    put(&mut w, &mut rng, "output_hc_fn.weight", HC * EMBD, HC, GgmlType::Q4K);
    small(&mut w, &mut rng, "output_hc_base.weight", HC, 0.5);
    w.tensor("output_hc_scale.weight", &[1], GgmlType::F32, f32s(&[0.5]));
    w.write(std::path::Path::new(&out)).unwrap();
    println!("wrote {out}: {n_layer} layers (compression ratios {ratios:?}), routed experts {}", expert_type.name());
}
