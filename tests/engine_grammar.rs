//! The serving engine's grammar-constrained requests (`Request::grammar`, what the server's
//! `grammar`, `json_schema` and `response_format` become). Greedy under a grammar is checked
//! against a reference computed here — a plain context decoding the same tokens and a grammar
//! sampler of its own stepped along them: each token must be the most likely one the grammar
//! allows (end-of-generation included where the grammar may end). Sampled requests must emit
//! only allowed tokens and repeat under the same seed. A bad grammar is refused at submission
//! with the parser's reason.

mod common;

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use deepseek::batch::BatchInput;
use deepseek::context::{Context, ContextParams};
use deepseek::engine::{Engine, EngineParams, Event, EventView, FinishKind, GrammarSpec, Prompt, Request, SubmitError};
use deepseek::model::Model;
use deepseek::sampling::chain::BoxChain;
use deepseek::sampling::grammar::sampler::GrammarSampler;
use deepseek::sampling::Sampler;

/// JSON: what the server's schema converter makes of {"type": "object"} (any object).
const JSON_OBJECT: &str = r#"array ::= "[" space ( value ("," space value)* )? space "]"
boolean ::= ("true" | "false")
char ::= [^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4})
decimal-part ::= [0-9]{1,16}
integral-part ::= [0] | [1-9] [0-9]{0,15}
null ::= "null"
number ::= ("-"? integral-part) ("." decimal-part)? ([eE] [-+]? integral-part)?
object ::= "{" space ( string ":" space value ("," space string ":" space value)* )? space "}"
root ::= object
space ::= | " " | "\n"{1,2} [ \t]{0,20}
string ::= "\"" char* "\""
value ::= object | array | string | number | boolean | null
"#;

fn model() -> Arc<Model> {
    Arc::new(Model::load(&common::data("tiny/tiny-qwen2-f32.gguf"), true).unwrap())
}

/// Greedy at temperature 0, else temperature then a seeded draw.
fn chain(temperature: f32, seed: u32) -> Box<dyn Sampler + Send> {
    let mut c = BoxChain::new(true);
    if temperature <= 0.0 {
        c.members.push(Box::new(deepseek::sampling::pick::Greedy));
    } else {
        c.members.push(Box::new(deepseek::sampling::temp::Temp { temp: temperature }));
        c.members.push(Box::new(deepseek::sampling::pick::Dist::new(seed)));
    }
    Box::new(c)
}

fn engine(model: &Arc<Model>) -> Engine {
    Engine::new(model.clone(), &EngineParams { n_seq_max: 2, n_ctx_seq: 512, n_threads: 1, ..Default::default() }).unwrap()
}

fn spec(text: &str) -> Option<GrammarSpec> {
    Some(GrammarSpec::new(text))
}

/// Runs one request with a callback: its tokens and how it ended.
fn run(e: &Engine, prompt: &[i32], sampler: Box<dyn Sampler + Send>, max_tokens: i32, grammar: Option<GrammarSpec>) -> (Vec<i32>, FinishKind) {
    let (tx, rx) = mpsc::channel();
    let cb = Box::new(move |v: &EventView<'_>| {
        let _ = tx.send(match v.event {
            Event::Token { token, .. } => Ok(token),
            Event::Finish(k) => Err(k),
        });
        true
    });
    e.submit(Request { prompt: Prompt::Tokens(prompt.to_vec()), sampler, max_tokens, stop_tokens: vec![], stop_strings: vec![], ignore_eos: false, callback: Some(cb), user_data: 0, n_probs: 0, grammar, reuse_prefix: true, slot: None, tag: None, t_max_predict: None, progress: None }).unwrap();
    let mut tokens = Vec::new();
    loop {
        match rx.recv_timeout(Duration::from_secs(60)).unwrap() {
            Ok(t) => tokens.push(t),
            Err(k) => return (tokens, k),
        }
    }
}

fn prompt(model: &Model, text: &str) -> Vec<i32> {
    let mut p = Vec::new();
    model.vocab.tokenize(text.as_bytes(), true, false, &mut p);
    p
}

#[test]
fn greedy_under_a_grammar_takes_the_best_allowed_token() {
    let model = model();
    let e = engine(&model);
    let mut n_checked = 0;
    for (text, grammar) in [("Reply in JSON:", JSON_OBJECT), ("Say:", "root ::= (\"yes\" | \"no\") [ ]? [a-z]{2,6} \"!\""), ("Count", "root ::= [0-9]+ (\",\" [0-9]+){3}")] {
        let p = prompt(&model, text);
        let (tokens, finish) = run(&e, &p, chain(0.0, 0), 200, spec(grammar));
        // The reference: the same tokens through a plain context, and a grammar of its own.
        let mut ctx = Context::new(model.clone(), &ContextParams { n_ctx: 512, n_batch: 512, n_ubatch: 512, n_seq_max: 1, n_threads: 1, n_threads_batch: 1, ..Default::default() }).unwrap();
        ctx.decode(&BatchInput { tokens: &p, pos: None, seq_ids: None, logits: None }, None).unwrap();
        let mut g = GrammarSampler::new(model.clone(), Some(grammar.as_bytes()), b"root", false, &[], &[], &[]).unwrap();
        let ended = finish == FinishKind::Eog;
        for (i, &t) in tokens.iter().chain(ended.then_some(&-1)).enumerate() {
            let logits = ctx.logits_row(-1).unwrap().to_vec();
            let allowed = g.allowed().expect("the grammar constrains").clone();
            let best = (0..logits.len() as i32).filter(|&id| allowed.get(id)).max_by(|&a, &b| logits[a as usize].total_cmp(&logits[b as usize]).then(b.cmp(&a))).expect("some token is allowed");
            if t == -1 {
                assert!(model.vocab.is_eog(best), "{text}: the request ended, but the best allowed token is {best}");
                break;
            }
            assert_eq!(t, best, "{text}: token {i}");
            g.accept(t);
            ctx.decode(&BatchInput { tokens: &[t], pos: None, seq_ids: None, logits: None }, None).unwrap();
            n_checked += 1;
        }
        assert!(matches!(finish, FinishKind::Eog | FinishKind::Length), "{finish:?}");
    }
    assert!(n_checked > 10, "{n_checked} tokens checked");
}

#[test]
fn sampled_tokens_keep_to_the_grammar_and_repeat_under_a_seed() {
    let model = model();
    let e = engine(&model);
    let p = prompt(&model, "JSON:");
    let mut ended = 0;
    for seed in 1..=6 {
        let (tokens, finish) = run(&e, &p, chain(1.5, seed), 120, spec(JSON_OBJECT));
        let (again, finish2) = run(&e, &p, chain(1.5, seed), 120, spec(JSON_OBJECT));
        assert_eq!((&tokens, finish), (&again, finish2), "seed {seed}");
        let mut g = GrammarSampler::new(model.clone(), Some(JSON_OBJECT.as_bytes()), b"root", false, &[], &[], &[]).unwrap();
        for (i, &t) in tokens.iter().enumerate() {
            assert_eq!(g.allowed_slow(t), Some(Ok(true)), "seed {seed}, token {i} = {t}");
            g.accept(t);
        }
        if finish == FinishKind::Eog {
            // it ended where the grammar may end
            assert!(g.stacks().can_end(), "seed {seed}");
            ended += 1;
        }
        let text: Vec<u8> = tokens.iter().flat_map(|&t| e.piece(t).to_vec()).collect();
        assert!(text.starts_with(b"{"), "seed {seed}: {}", String::from_utf8_lossy(&text));
    }
    assert!(ended > 0, "no sampled request ended by itself");
    // Unconstrained, the same seeds give text that does not start an object.
    let starts: usize = (1..=6).map(|seed| run(&e, &p, chain(1.5, seed), 4, None).0).filter(|t| t.first().is_some_and(|&t| e.piece(t).starts_with(b"{"))).count();
    assert!(starts < 3, "{starts} of 6 unconstrained outputs start with '{{'");
}

#[test]
fn a_bad_grammar_is_refused_at_submission() {
    let model = model();
    let e = engine(&model);
    let p = prompt(&model, "x");
    let submit = |g: &str| e.submit(Request { prompt: Prompt::Tokens(p.clone()), sampler: chain(0.0, 0), max_tokens: 4, stop_tokens: vec![], stop_strings: vec![], ignore_eos: false, callback: None, user_data: 0, n_probs: 0, grammar: spec(g), reuse_prefix: true, slot: None, tag: None, t_max_predict: None, progress: None });
    for (g, why) in [("root ::= foo", "Undefined rule identifier 'foo'"), ("root ::= \"a", "unexpected end of input"), ("start ::= \"a\"", "grammar does not contain a 'root' symbol"), ("root ::= root \"a\"", "left recursion")] {
        match submit(g) {
            Err(SubmitError::Invalid(m)) => assert!(m.starts_with("failed to parse grammar: ") && m.contains(why), "{g}: {m}"),
            other => panic!("{g}: {other:?}"),
        }
    }
    assert_eq!(e.metrics().rejected.get(), 4);
    assert_eq!(e.metrics().submitted.get(), 0);
    // An empty grammar constrains nothing.
    assert!(submit("").is_ok());
}

/// Steady generation under a grammar allocates nothing on the decode thread once its states
/// have been met (the grammar's transitions are cached per request).
#[test]
fn steady_generation_under_a_grammar_allocates_nothing() {
    let model = model();
    let e = Engine::new(model.clone(), &EngineParams { n_seq_max: 3, n_ctx_seq: 1024, n_threads: 1, ..Default::default() }).unwrap();
    let p = prompt(&model, "Text:");
    let mut ids = Vec::new();
    // a fixpoint the model's picks mostly keep to, a grammar that rejects most of them (each
    // step then applies the grammar to the whole row), and JSON, which ends early: from then on
    // only end-of-generation is allowed (ignore_eos keeps the request going)
    for g in ["root ::= [^\"]*", "root ::= (\"ab\" | [a-z]+ \" \" | [0-9])*", JSON_OBJECT] {
        ids.push(e.submit(Request { prompt: Prompt::Tokens(p.clone()), sampler: chain(0.0, 0), max_tokens: 600, stop_tokens: vec![], stop_strings: vec![], ignore_eos: true, callback: None, user_data: 0, n_probs: 0, grammar: spec(g), reuse_prefix: true, slot: None, tag: None, t_max_predict: None, progress: None }).unwrap());
    }
    let mut counts = vec![0usize; ids.len()];
    let mut buf = [Event::Finish(FinishKind::Error); 16];
    let mut info = None;
    let mut drain_until = |counts: &mut Vec<usize>, k: usize| {
        while counts.iter().any(|&c| c < k) {
            for (j, &id) in ids.iter().enumerate() {
                counts[j] += e.wait(id, &mut buf, &mut info, Duration::from_millis(50)).unwrap();
            }
        }
    };
    drain_until(&mut counts, 200);
    let m = e.metrics();
    let before = m.loop_allocated_bytes.get();
    drain_until(&mut counts, 500);
    let after = m.loop_allocated_bytes.get();
    if cfg!(feature = "jemalloc") {
        assert!(before > 0, "the decode thread's allocation counter is not read");
    }
    assert_eq!(after, before, "the decode thread allocated {} bytes while 3 grammar requests generated 300 tokens each", after - before);
}

/// A lazy grammar's trigger words gated by the reasoning's end: a word written before the gate
/// leaves the grammar waiting; the same word after it starts the grammar, from the word on.
#[test]
fn gated_trigger_words_count_after_the_gate() {
    let m = model();
    let grammar = b"root ::= \"<tool_call>\" [a-z]*";
    let tokens = |text: &str| {
        let mut t = Vec::new();
        m.vocab.tokenize(text.as_bytes(), false, false, &mut t);
        t
    };
    let make = |gate: Option<&[u8]>| {
        let s = GrammarSampler::new(m.clone(), Some(grammar), b"root", true, &[b"<tool_call>"], &[], &[]).unwrap();
        match gate {
            Some(g) => s.gated(g),
            None => s,
        }
    };
    // Ungated: the word in the reasoning starts it.
    let mut s = make(None);
    for t in tokens("I think <tool_call>abc") {
        s.accept(t);
    }
    assert!(!s.awaiting_trigger() && !s.is_dead());
    // Gated: the word before </think> does not; after it, it does, and the grammar holds from it.
    let mut s = make(Some(b"</think>"));
    for t in tokens("I think <tool_call>abc</think> so") {
        s.accept(t);
    }
    assert!(s.awaiting_trigger(), "a word inside the reasoning started the grammar");
    for t in tokens(" <tool_call>abc") {
        s.accept(t);
    }
    assert!(!s.awaiting_trigger() && !s.is_dead(), "the word after the gate must start the grammar on it");
    // A long wait keeps its buffer bounded and still finds a word cut across tokens.
    let mut s = make(Some(b"</think>"));
    let filler = tokens(&"lorem ipsum dolor ".repeat(600));
    for &t in &filler {
        s.accept(t);
    }
    for t in tokens("</think> ok <tool_") {
        s.accept(t);
    }
    assert!(s.awaiting_trigger());
    for t in tokens("call>xyz") {
        s.accept(t);
    }
    assert!(!s.awaiting_trigger() && !s.is_dead());
    // reset waits for the gate again
    s.reset();
    for t in tokens("<tool_call>") {
        s.accept(t);
    }
    assert!(s.awaiting_trigger());
}
