//! The grammar sampler's table path (its state kept in the `SetTable`, tokens accepted and a few
//! candidates decided by the table's cached transitions, so that steady sampling allocates
//! nothing) against the direct computation from the stacks (`Grammar::accept_token`,
//! `allowed_slow`), along the tokens llama.cpp chose in tests/data/grammar/traces/cases.txt for
//! every non-lazy case of tests/data/grammar/cases.txt on the DeepSeek-R1 vocabulary: after
//! each token the stacks must be the direct ones, and each step's few-candidate decisions (the
//! chosen token, the end-of-generation tokens, the byte tokens and a spread of others) must be
//! the direct decisions.

use std::path::PathBuf;
use std::sync::Arc;

use deepseek::gguf::reader::Source;
use deepseek::model::Model;
use deepseek::sampling::grammar::sampler::GrammarSampler;
use deepseek::sampling::grammar::{stacks, Grammar};
use deepseek::sampling::{Candidates, Sampler, TokenData};

fn data(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(rel)
}

struct Case {
    name: String,
    grammar: Vec<u8>,
    root: String,
    lazy: bool,
}

fn cases() -> Vec<Case> {
    let text = std::fs::read_to_string(data("grammar/cases.txt")).unwrap();
    let mut out = Vec::new();
    let mut cur: Option<Case> = None;
    for line in text.lines().filter(|l| !l.is_empty() && !l.starts_with('#')) {
        let (key, arg) = line.split_once(' ').unwrap_or((line, ""));
        match key {
            "case" => cur = Some(Case { name: arg.to_string(), grammar: Vec::new(), root: "root".into(), lazy: false }),
            "grammar" => cur.as_mut().unwrap().grammar = std::fs::read(data(&format!("grammar/{arg}"))).unwrap(),
            "grammar_text" => cur.as_mut().unwrap().grammar = arg.as_bytes().to_vec(),
            "root" => cur.as_mut().unwrap().root = arg.to_string(),
            "mode" => cur.as_mut().unwrap().lazy = arg != "plain",
            "end" => out.push(cur.take().unwrap()),
            _ => {}
        }
    }
    out
}

/// The tokens llama.cpp chose in case `name` of the reference trace.
fn chosen(trace: &str, name: &str) -> Vec<i32> {
    let start = trace.find(&format!("case {name}\n")).unwrap_or_else(|| panic!("{name} is not in the trace"));
    trace[start..].lines().skip(1).take_while(|l| !l.starts_with("case ")).filter(|l| l.starts_with("step ")).map(|l| l.split(' ').nth(4).unwrap().parse().unwrap()).collect()
}

#[test]
fn table_path_equals_direct_computation_along_llama_cpp_traces() {
    let model = Arc::new(Model::load_vocab_only(Source::File(&data("vocab/deepseek-r1-qwen.gguf")), true).unwrap());
    let vocab = &model.vocab;
    let n_vocab = vocab.n_tokens() as i32;
    let trace = std::fs::read_to_string(data("grammar/traces/cases.txt")).unwrap();
    let eogs: Vec<i32> = (0..n_vocab).filter(|&t| vocab.is_eog(t)).collect();
    let (mut n_cases, mut n_steps, mut n_decisions) = (0, 0, 0);
    for c in cases().iter().filter(|c| !c.lazy) {
        let Ok(mut s) = GrammarSampler::new(model.clone(), Some(&c.grammar), c.root.as_bytes(), false, &[], &[], &[]) else { continue };
        let g = Grammar::new(&c.grammar, c.root.as_bytes(), Some(vocab), Default::default()).unwrap();
        let (mut direct, mut partial, mut cps) = (g.initial.clone(), stacks::Partial::default(), Vec::new());
        n_cases += 1;
        for (step, &t) in chosen(&trace, &c.name).iter().enumerate() {
            if t < 0 {
                break;
            }
            // A few candidates, as the engine's check of its pick: the table path decides them.
            let mut ids: Vec<i32> = vec![t];
            ids.extend(eogs.iter().copied().take(8));
            ids.extend((0..24).map(|k| 94 + ((step as i32 * 31 + k * 7) % 170)));
            ids.extend((0..24).map(|k| ((step as i64 * 7919 + k as i64 * 104_729) % n_vocab as i64) as i32));
            ids.truncate(64);
            let mut data: Vec<TokenData> = ids.iter().map(|&id| TokenData { id, logit: 0.0, p: 0.0 }).collect();
            s.apply(&mut Candidates::new(&mut data));
            for d in &data {
                let want = s.allowed_slow(d.id).unwrap().unwrap();
                assert_eq!(d.logit != f32::NEG_INFINITY, want, "{} step {step}: token {} ({:?})", c.name, d.id, String::from_utf8_lossy(vocab.piece(d.id)));
                n_decisions += 1;
            }
            assert!(data[0].logit != f32::NEG_INFINITY, "{} step {step}: llama.cpp's choice {t} is rejected", c.name);
            s.accept(t);
            if vocab.is_eog(t) {
                break;
            }
            let p = stacks::decode(vocab.piece(t), partial, &mut cps);
            direct = g.accept_token(&direct, t, &cps).unwrap();
            partial = p;
            assert_eq!(s.stacks(), &direct, "{} step {step}: token {t} ({:?})", c.name, String::from_utf8_lossy(vocab.piece(t)));
            n_steps += 1;
        }
    }
    assert!(n_cases >= 25 && n_steps > 700 && n_decisions > 40_000, "{n_cases} cases, {n_steps} steps, {n_decisions} decisions");
}
