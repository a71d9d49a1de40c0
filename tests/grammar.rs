//! Grammar sampling through the C API, beyond the traces (tests/grammar_trace.rs): what upstream
//! would abort on ends in a logged error and a sampler that still works (it then allows only
//! end-of-generation tokens); the bounds on stack depth and ambiguity; a NULL chain member makes
//! the chain refuse to sample; init errors. A caught panic fails it (tests/common/log.rs).

mod common;

use std::ffi::{c_char, CString};

use deepseek::api::handles::llama_vocab;
use deepseek::api::model::*;
use deepseek::api::sampling::*;
use deepseek::api::types::*;
use deepseek::api::vocab::*;

use common::log::logged;

fn token(v: *const llama_vocab, text: &str) -> i32 {
    let mut t = [0i32; 4];
    // SAFETY: a valid vocab, text and buffer.
    let n = unsafe {
        llama_tokenize(
            v,
            text.as_ptr() as *const c_char,
            text.len() as i32,
            t.as_mut_ptr(),
            4,
            false,
            true,
        )
    };
    assert_eq!(n, 1, "{text:?} is not one token");
    t[0]
}

fn grammar(v: *const llama_vocab, g: &str) -> *mut llama_sampler {
    let g = CString::new(g).unwrap();
    // SAFETY: valid strings.
    unsafe { llama_sampler_init_grammar(v, g.as_ptr(), c"root".as_ptr()) }
}

/// The ids the sampler leaves finite on a uniform candidate array.
fn allowed(s: *mut llama_sampler, n_vocab: usize) -> Vec<i32> {
    let mut data: Vec<llama_token_data> = (0..n_vocab as i32)
        .map(|id| llama_token_data {
            id,
            logit: 0.0,
            p: 0.0,
        })
        .collect();
    let mut arr = llama_token_data_array {
        data: data.as_mut_ptr(),
        size: data.len(),
        selected: -1,
        sorted: false,
    };
    llama_sampler_apply(s, &mut arr);
    data.iter()
        .filter(|d| d.logit.is_finite())
        .map(|d| d.id)
        .collect()
}

fn free(s: *mut llama_sampler) {
    // SAFETY: from an init, not in a chain.
    unsafe { llama_sampler_free(s) }
}

#[test]
fn grammar_errors_are_logged_not_fatal() {
    let model = load_r1_vocab();
    let v = llama_model_get_vocab(model);
    let n_vocab = llama_vocab_n_tokens(v) as usize;
    let eos = llama_vocab_eos(v);
    let eogs: Vec<i32> = (0..n_vocab as i32)
        .filter(|&t| llama_vocab_is_eog(v, t))
        .collect();

    // A token the grammar does not allow: upstream throws; here the grammar dies with a reason
    // and allows only end-of-generation from then on.
    let s = grammar(v, r#"root ::= "a" "b""#);
    assert_eq!(allowed(s, n_vocab).len() > 1, true);
    let (_, log) = logged(|| llama_sampler_accept(s, token(v, "z")));
    assert!(log.contains("unexpected empty grammar stack"), "{log}");
    assert_eq!(allowed(s, n_vocab), eogs);
    // reset revives it
    llama_sampler_reset(s);
    assert!(allowed(s, n_vocab).contains(&token(v, "a")));
    // end of generation where the grammar cannot end: upstream aborts
    let (_, log) = logged(|| llama_sampler_accept(s, eos));
    assert!(log.contains("cannot end"), "{log}");
    assert_eq!(allowed(s, n_vocab), eogs);
    free(s);

    // Depth bound: each "(" nests one level deeper.
    let s = grammar(v, r#"root ::= "(" root ")" | "x""#);
    let open = token(v, "(");
    let (_, log) = logged(|| {
        for _ in 0..4200 {
            llama_sampler_accept(s, open);
        }
    });
    assert!(log.contains("deeper than"), "{log}");
    assert_eq!(allowed(s, n_vocab), eogs);
    free(s);

    // Ambiguity bound: after n "a", 2^n parses are alive.
    let s = grammar(v, "root ::= x\nx ::= \"a\" x \"b\" | \"a\" x \"c\" | \"\"");
    let a = token(v, "a");
    let (_, log) = logged(|| {
        for _ in 0..14 {
            llama_sampler_accept(s, a);
        }
        allowed(s, n_vocab)
    });
    assert!(log.contains("too ambiguous"), "log: {log:?}");
    free(s);

    // Init errors: NULL with a reason naming the place.
    let (s, log) = logged(|| grammar(v, "root ::= \"a\"\nbad ::= [a-"));
    assert!(s.is_null() && log.contains("line 2, column 12"), "{log}");
    let (s, log) = logged(|| grammar(v, r#"start ::= "a""#));
    assert!(
        s.is_null() && log.contains("does not contain a 'root' symbol"),
        "{log}"
    );
    let (s, log) = logged(|| grammar(std::ptr::null(), r#"root ::= "a""#));
    assert!(s.is_null() && log.contains("vocab is NULL"), "{log}");
    for bad in [r"(?<=x)y", r"(a)\1", r"[a-", r"a{3,1}", r"\p{L}"] {
        let g = CString::new(r#"root ::= "a""#).unwrap();
        let p = CString::new(bad).unwrap();
        let mut pats = [p.as_ptr()];
        // SAFETY: valid strings and arrays.
        let (s, log) = logged(|| unsafe {
            llama_sampler_init_grammar_lazy_patterns(
                v,
                g.as_ptr(),
                c"root".as_ptr(),
                pats.as_mut_ptr(),
                1,
                std::ptr::null(),
                0,
            )
        });
        assert!(
            s.is_null() && log.contains("trigger pattern"),
            "{bad}: {log}"
        );
    }
    // The empty grammar constrains nothing (upstream's sampler without grammar).
    let s = grammar(v, "");
    assert!(!s.is_null());
    assert_eq!(allowed(s, n_vocab).len(), n_vocab);
    free(s);

    // A NULL member (a failed init) makes the chain refuse to sample, visibly.
    let chain = llama_sampler_chain_init(llama_sampler_chain_default_params());
    let (_, log) = logged(|| llama_sampler_chain_add(chain, grammar(v, "root ::= [")));
    assert!(
        log.contains("llama_sampler_chain_add") && log.contains("will not sample"),
        "{log}"
    );
    llama_sampler_chain_add(chain, llama_sampler_init_greedy());
    let mut data: Vec<llama_token_data> = (0..8)
        .map(|id| llama_token_data {
            id,
            logit: id as f32,
            p: 0.0,
        })
        .collect();
    let mut arr = llama_token_data_array {
        data: data.as_mut_ptr(),
        size: data.len(),
        selected: -1,
        sorted: false,
    };
    let (_, log) = logged(|| llama_sampler_apply(chain, &mut arr));
    assert_eq!(arr.selected, -1);
    assert!(log.contains("cannot sample"), "{log}");
    free(chain);

    // The vocabulary's trie: built once (by the first apply above), bounded in size.
    // SAFETY: a live vocab handle.
    let trie = unsafe { &*v }.vocab().grammar_trie();
    eprintln!(
        "piece trie: {} nodes, {:.1} MB",
        trie.n_nodes(),
        trie.bytes() as f64 / 1e6
    );
    assert!(
        trie.bytes() < 64 << 20,
        "the trie takes {} bytes",
        trie.bytes()
    );

    // Clones and chains free what they own: the live-sampler gauge is back where it started.
    let before = deepseek::sys::stats::SAMPLERS.get();
    let s = grammar(v, r#"root ::= "a"+"#);
    let c = llama_sampler_clone(s);
    let chain = llama_sampler_chain_init(llama_sampler_chain_default_params());
    llama_sampler_chain_add(chain, c);
    let c2 = llama_sampler_clone(chain);
    free(s);
    free(chain);
    free(c2);
    assert_eq!(deepseek::sys::stats::SAMPLERS.get(), before);

    // SAFETY: nothing uses the model any more.
    unsafe { llama_model_free(model) };
}

/// The parser against upstream's own parser tests (tests/test-grammar-parser.cpp of b11312, its
/// expected symbol ids and rule elements, extracted into tests/data/grammar/parser_cases.json).
#[test]
fn parser_matches_upstream_parser_tests() {
    use common::json::Json;
    use deepseek::sampling::grammar::parser::parse;
    use deepseek::sampling::grammar::Ty;
    let text = std::fs::read_to_string(common::data("grammar/parser_cases.json")).unwrap();
    let cases = Json::parse(&text);
    let ty = |s: &str| match s {
        "END" => Ty::End,
        "ALT" => Ty::Alt,
        "RULE_REF" => Ty::RuleRef,
        "CHAR" => Ty::Char,
        "CHAR_NOT" => Ty::CharNot,
        "CHAR_RNG_UPPER" => Ty::CharRngUpper,
        "CHAR_ALT" => Ty::CharAlt,
        "CHAR_ANY" => Ty::CharAny,
        "TOKEN" => Ty::Token,
        "TOKEN_NOT" => Ty::TokenNot,
        other => panic!("unknown type {other}"),
    };
    let mut n = 0;
    for case in cases.get("parsing").arr() {
        let g = case.get("grammar").str();
        let parsed = parse(g.as_bytes(), None)
            .unwrap_or_else(|e| panic!("{g}: {}", e.describe(g.as_bytes())));
        let symbols: Vec<(String, u32)> = parsed
            .symbol_ids
            .iter()
            .map(|(k, &v)| (String::from_utf8(k.clone()).unwrap(), v))
            .collect();
        let expected: Vec<(String, u32)> = case
            .get("symbols")
            .arr()
            .iter()
            .map(|p| (p.arr()[0].str().to_string(), p.arr()[1].num() as u32))
            .collect();
        assert_eq!(symbols, expected, "symbols of {g}");
        let elems: Vec<(Ty, u32)> = parsed
            .rules
            .iter()
            .flatten()
            .map(|e| (e.ty, e.value))
            .collect();
        let expected: Vec<(Ty, u32)> = case
            .get("elements")
            .arr()
            .iter()
            .map(|p| (ty(p.arr()[0].str()), p.arr()[1].num() as u32))
            .collect();
        assert_eq!(elems, expected, "rules of {g}");
        n += 1;
    }
    for g in cases.get("failures").arr() {
        assert!(
            parse(g.str().as_bytes(), None).is_err(),
            "{} parsed",
            g.str()
        );
        n += 1;
    }
    assert!(n >= 20);
}

/// The trigger-pattern matcher against std::regex (ECMAScript) as upstream uses it:
/// tests/data/grammar/traces/regex.txt was written by gen/regex_ref.cpp from regex_cases.txt.
#[test]
fn trigger_patterns_match_as_std_regex() {
    use deepseek::sampling::grammar::regex::Regex;
    let cases = std::fs::read_to_string(common::data("grammar/regex_cases.txt")).unwrap();
    let reference = std::fs::read_to_string(common::data("grammar/traces/regex.txt")).unwrap();
    let mut expected = reference.lines();
    let mut re: Option<Regex> = None;
    let mut n = 0;
    for line in cases.lines() {
        if line.is_empty() {
            re = None;
            continue;
        }
        let Some(r) = &re else {
            assert_eq!(expected.next(), Some(format!("pattern {line}").as_str()));
            re = Some(Regex::new(line).unwrap_or_else(|e| panic!("{line}: {e}")));
            continue;
        };
        let input = line.replace("\\n", "\n");
        let got = r
            .find(input.as_bytes())
            .map_or("-".to_string(), |s| s.to_string());
        assert_eq!(
            Some(got.as_str()),
            expected.next(),
            "pattern {} on {input:?}",
            r.pattern
        );
        n += 1;
    }
    assert!(n >= 40, "{n} cases");
}

/// The trie walk's allowed set equals the direct per-token computation (upstream's algorithm)
/// on every token of the R1 vocabulary, along a few accepted tokens (the first allowed token
/// that is not end-of-generation), and the C sampler decides alike on a candidate subset; a
/// state beyond the bounds ends the grammar with a logged reason instead.
#[test]
fn trie_walk_equals_direct_computation() {
    use deepseek::sampling::grammar::sampler::GrammarSampler;
    use deepseek::sampling::Sampler;
    let m = load_r1_vocab();
    // SAFETY: a live model.
    let v = unsafe { &*llama_model_get_vocab(m) };
    let n_vocab = v.vocab().n_tokens();
    // (grammar, steps, whether the first walk must exceed the bounds)
    let cases: &[(&[u8], usize, bool)] = &[
        // a negated class of one code point (U+00BF written as a lone continuation byte, which
        // upstream's parser reads as that code point); nested repetitions make every character
        // a new way to split the text (fuzz: the C sampler ended the grammar where the engine's
        // direct computation, called before its own walk, still allowed tokens)
        (b"root::=[^\xbf]+++++++++", 0, true),
        (b"root::=[^\xbf]+", 3, false),
        (b"root ::= \"- \" [^\r\n]+ \"\\n\" root?", 4, false),
        (
            b"root ::= ([\xe4\xb8\x80-\xe9\xbf\xbf] | [a-z] | \" \")+",
            4,
            false,
        ),
        (b"root ::= <[1304]> [0-9]+ | \"x\" !<[1304]>", 1, false),
        (b"root ::= <[1304]> [0-9]+", 3, false),
    ];
    for &(src, steps, explodes) in cases {
        let name = String::from_utf8_lossy(src).into_owned();
        let (r, log) = logged(|| {
            let mut s = GrammarSampler::new(
                std::sync::Arc::clone(&v.model),
                Some(src),
                b"root",
                false,
                &[],
                &[],
                &[],
            )
            .unwrap();
            let bits = s.allowed().unwrap().clone();
            (s, bits)
        });
        let (mut s, mut bits) = r;
        if explodes {
            assert!(
                s.is_dead() && log.contains("too ambiguous"),
                "{name}: expected the ambiguity bound, log {log:?}"
            );
            assert!(
                (0..n_vocab as i32).all(|id| bits.get(id) == v.vocab().is_eog(id)),
                "{name}: a dead grammar allows exactly end-of-generation"
            );
            continue;
        }
        for k in 0..=steps {
            assert!(!s.is_dead(), "{name} step {k}: the grammar ended: {log}");
            let mut wrong = Vec::new();
            for id in 0..n_vocab as i32 {
                let slow = s.allowed_slow(id).unwrap().unwrap();
                if bits.get(id) != slow {
                    wrong.push((
                        id,
                        String::from_utf8_lossy(v.vocab().piece(id)).into_owned(),
                        slow,
                    ));
                }
            }
            assert!(
                wrong.is_empty(),
                "{name} step {k}: walk and direct computation disagree on {} tokens, first {:?}",
                wrong.len(),
                &wrong[..wrong.len().min(8)]
            );
            assert!(
                (0..n_vocab as i32).any(|id| bits.get(id) && !v.vocab().is_eog(id)),
                "{name} step {k}: only end-of-generation allowed"
            );
            if k == steps {
                break;
            }
            let t = (0..n_vocab as i32)
                .find(|&id| bits.get(id) && !v.vocab().is_eog(id))
                .unwrap();
            s.accept(t);
            bits = s.allowed().unwrap().clone();
        }
        // the C sampler from the start, on a subset: the same decisions as the walk at step 0
        let g = CString::new(src).unwrap();
        // SAFETY: valid strings.
        let cs = unsafe { llama_sampler_init_grammar(v, g.as_ptr(), c"root".as_ptr()) };
        let mut s0 = GrammarSampler::new(
            std::sync::Arc::clone(&v.model),
            Some(src),
            b"root",
            false,
            &[],
            &[],
            &[],
        )
        .unwrap();
        let b0 = s0.allowed().unwrap().clone();
        let mut cands: Vec<llama_token_data> = (0..n_vocab as i32)
            .step_by(7)
            .map(|id| llama_token_data {
                id,
                logit: 0.0,
                p: 0.0,
            })
            .collect();
        let mut arr = llama_token_data_array {
            data: cands.as_mut_ptr(),
            size: cands.len(),
            selected: -1,
            sorted: false,
        };
        llama_sampler_apply(cs, &mut arr);
        assert!(
            cands.iter().all(|c| c.logit.is_finite() == b0.get(c.id)),
            "{name}: the C sampler decides otherwise"
        );
        free(cs);
    }
    // SAFETY: from a load.
    unsafe { llama_model_free(m) };
}

fn load_r1_vocab() -> *mut deepseek::api::handles::llama_model {
    let path = CString::new(
        common::data("vocab/deepseek-r1-qwen.gguf")
            .to_str()
            .unwrap(),
    )
    .unwrap();
    let mut mp = llama_model_default_params();
    mp.vocab_only = true;
    // SAFETY: a valid path.
    let model = unsafe { llama_model_load_from_file(path.as_ptr(), mp) };
    assert!(!model.is_null());
    model
}
