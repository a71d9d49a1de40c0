//! The golden-logits harness of `tests/golden_logits.rs` and `tests/golden_quants.rs`: run
//! llama.cpp's scenarios A–D through the C API and hold the rows to DESIGN.md §5's tolerances.

use super::json::Json;
use super::*;
use deepseek::api::context::{llama_decode, llama_free, llama_get_memory};
use deepseek::api::memory::*;
use deepseek::api::model::{llama_model_free, llama_model_get_vocab};
use deepseek::api::vocab::llama_vocab_n_tokens;

/// Runs scenarios A–D and returns the produced rows in the reference's order.
pub fn run_scenarios(model_path: &std::path::Path, g: &Json) -> Vec<Vec<f32>> {
    run_scenarios_on(load_model(model_path), g)
}

/// As `run_scenarios` on a loaded model, which it frees.
pub fn run_scenarios_on(m: *mut deepseek::api::handles::llama_model, g: &Json) -> Vec<Vec<f32>> {
    let n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(m)) as usize;
    assert_eq!(n_vocab, g.get("n_vocab").num() as usize);
    let c = new_context(m, 256, 4, 2);
    let mem = llama_get_memory(c);
    let mut rows = Vec::new();
    let mut b = Batch::new(64, 4);

    // A: 40 tokens of sequence 0 in one batch, logits everywhere.
    for (i, &t) in g.get("A_tokens").i32s().iter().enumerate() {
        b.add(t, i as i32, 0, true);
    }
    // SAFETY: b is a valid batch from llama_batch_init.
    assert_eq!(unsafe { llama_decode(c, b.0) }, 0);
    for i in 0..40 {
        rows.push(logits_row(c, i, n_vocab));
    }
    // B: the reference's greedy continuation, one token at a time.
    for (s, &t) in g.get("B_tokens").i32s().iter().enumerate() {
        b.clear();
        b.add(t, 40 + s as i32, 0, true);
        // SAFETY: as above.
        assert_eq!(unsafe { llama_decode(c, b.0) }, 0);
        rows.push(logits_row(c, 0, n_vocab));
    }
    // C: three interleaved sequences, logits at the last token of each.
    llama_memory_clear(mem, true);
    let seqs: Vec<Vec<i32>> = (0..3).map(|s| g.get(&format!("C_seq{s}_tokens")).i32s()).collect();
    b.clear();
    let mut last = [0i32; 3];
    for i in 0..20 {
        for s in 0..3 {
            if i < seqs[s].len() {
                last[s] = b.0.n_tokens;
                b.add(seqs[s][i], i as i32, s as i32, i == seqs[s].len() - 1);
            }
        }
    }
    // SAFETY: as above.
    assert_eq!(unsafe { llama_decode(c, b.0) }, 0);
    for s in 0..3 {
        rows.push(logits_row(c, last[s], n_vocab));
    }
    // D: copy seq 0 to 3, cut seq 1 at pos 3, then one token each for seqs 1 and 3.
    llama_memory_seq_cp(mem, 0, 3, -1, -1);
    assert!(llama_memory_seq_rm(mem, 1, 3, -1));
    assert_eq!(llama_memory_seq_pos_max(mem, 1), 2);
    assert_eq!(llama_memory_seq_pos_max(mem, 3), 11);
    let d = g.get("D_tokens");
    b.clear();
    b.add(d.get("seq1_pos3").num() as i32, 3, 1, true);
    b.add(d.get("seq3_pos12").num() as i32, 12, 3, true);
    // SAFETY: as above.
    assert_eq!(unsafe { llama_decode(c, b.0) }, 0);
    rows.push(logits_row(c, 0, n_vocab));
    rows.push(logits_row(c, 1, n_vocab));
    drop(b);
    // SAFETY: handles from this test, freed once.
    unsafe {
        llama_free(c);
        llama_model_free(m);
    }
    rows
}

#[derive(Clone, Copy, PartialEq)]
pub enum Tolerance {
    /// Every row's cosine ≥ 0.9999; same argmax where the reference's top-2 gap > 0.5% of the range.
    Float,
    /// Every row ≥ 0.998, median ≥ 0.9995; same argmax where the gap > 2% of the range.
    Quantized,
    /// Median cosine ≥ 0.995 and the same argmax on ≥ 80% of rows.
    QuantizedMoe,
}

pub fn check_files(model: &str, gguf: &std::path::Path, json: &std::path::Path, f32s: &std::path::Path, tol: Tolerance) {
    let g = Json::parse(&std::fs::read_to_string(json).unwrap());
    let n_vocab = g.get("n_vocab").num() as usize;
    let reference = read_f32s(f32s);
    let rows = run_scenarios(gguf, &g);
    assert_eq!(rows.len() * n_vocab, reference.len());
    let (min_cos, gap) = match tol {
        Tolerance::Float => (0.9999, 0.005),
        Tolerance::Quantized => (0.998, 0.02),
        Tolerance::QuantizedMoe => (-1.0, f64::INFINITY),
    };
    let mut cosines = Vec::new();
    let mut failures = Vec::new();
    let mut argmax_equal = 0;
    for (r, ours) in rows.iter().enumerate() {
        let want = &reference[r * n_vocab..(r + 1) * n_vocab];
        let cos = cosine(ours, want);
        cosines.push(cos);
        argmax_equal += (argmax(ours) == argmax(want)) as usize;
        if cos < min_cos {
            failures.push(format!("row {r}: cosine {cos:.6} < {min_cos}"));
        }
        if top2_gap_fraction(want) > gap && argmax(ours) != argmax(want) {
            failures.push(format!("row {r}: argmax {} != reference {}", argmax(ours), argmax(want)));
        }
    }
    cosines.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let median = cosines[cosines.len() / 2];
    match tol {
        Tolerance::Float => {}
        Tolerance::Quantized if median < 0.9995 => failures.push(format!("median cosine {median:.6} < 0.9995")),
        Tolerance::Quantized => {}
        Tolerance::QuantizedMoe => {
            if median < 0.995 {
                failures.push(format!("median cosine {median:.6} < 0.995"));
            }
            if argmax_equal * 5 < rows.len() * 4 {
                failures.push(format!("argmax equal on {argmax_equal}/{} rows (< 80%)", rows.len()));
            }
        }
    }
    eprintln!("{model}: min cosine {:.6}, median {median:.6}, argmax equal {argmax_equal}/{}", cosines[0], rows.len());
    assert!(failures.is_empty(), "{model}:\n{}", failures.join("\n"));
}
