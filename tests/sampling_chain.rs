//! The common sampler's chain (`CommonParams::build`, llama.cpp's `common_sampler_init`):
//! its draws over seeded random logit rows against chains composed here by hand from the
//! individual samplers, in the order upstream adds them; the members' names; the `samplers`
//! names and letters; and the parameter checks.

mod common;

use std::sync::Arc;

use deepseek::gguf::reader::Source;
use deepseek::model::Model;
use deepseek::sampling::chain::{fill_candidates, BoxChain, CommonParams, SamplerKind};
use deepseek::sampling::dry::Dry;
use deepseek::sampling::infill::Infill;
use deepseek::sampling::logit_bias::LogitBias;
use deepseek::sampling::mirostat::{Mirostat, MirostatV2};
use deepseek::sampling::penalties::Penalties;
use deepseek::sampling::pick::Dist;
use deepseek::sampling::temp::{Temp, TempExt};
use deepseek::sampling::truncate::{MinP, TopK, TopNSigma, TopP, Typical, Xtc};
use deepseek::sampling::{Candidates, Sampler, TokenData};

const SEED: u32 = 42;
const N_CTX: usize = 128;

fn model() -> Arc<Model> {
    Arc::new(Model::load_vocab_only(Source::File(&common::data("tiny/tiny-llama-f32.gguf")), true).unwrap())
}

/// splitmix64: the test's own random numbers.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// 200 rows of 64-256 logits. Most rows favour the next token of a 12-token phrase, so the
/// drawn text repeats and the penalties and DRY have something to act on.
fn rows() -> Vec<Vec<f32>> {
    let mut rng = Rng(0x5eed);
    let phrase = [5, 9, 13, 2, 40, 41, 17, 63, 8, 30, 11, 50];
    (0..200)
        .map(|i| {
            let n = 64 + (rng.next() % 193) as usize;
            let mut row: Vec<f32> = (0..n).map(|_| rng.unit() * 8.0 - 4.0).collect();
            if rng.unit() < 0.8 {
                row[phrase[i % phrase.len()]] += 3.0 + 7.0 * rng.unit();
            }
            row
        })
        .collect()
}

/// What one chain did on each row: the surviving candidates' ids and the chosen token.
/// The chosen token is accepted before the next row.
fn run(chain: &mut dyn Sampler, rows: &[Vec<f32>]) -> Vec<(Vec<i32>, i32)> {
    let mut buf: Vec<TokenData> = Vec::new();
    rows.iter()
        .map(|row| {
            fill_candidates(&mut buf, row);
            let mut cur = Candidates::new(&mut buf);
            chain.apply(&mut cur);
            assert!(cur.selected >= 0 && (cur.selected as usize) < cur.len(), "no token chosen");
            let token = cur.data[cur.selected as usize].id;
            let ids = cur.data.iter().map(|t| t.id).collect();
            chain.accept(token);
            (ids, token)
        })
        .collect()
}

fn by_hand(members: Vec<Box<dyn Sampler + Send>>) -> BoxChain {
    let mut c = BoxChain::new(true);
    c.members = members;
    c
}

fn names(c: &BoxChain) -> Vec<String> {
    c.members.iter().map(|m| m.name().to_str().unwrap().to_string()).collect()
}

/// Every sampler of the default order off, temperature 1 (its step a no-op too).
fn all_off() -> CommonParams {
    CommonParams { top_k: 0, top_p: 1.0, min_p: 0.0, temperature: 1.0, seed: SEED, ..CommonParams::default() }
}

fn breakers(p: &CommonParams) -> Vec<&[u8]> {
    p.dry_sequence_breakers.iter().map(|b| b.as_bytes()).collect()
}

/// One case: the parameters, the chain upstream builds from them written out by hand, and
/// parameters without the case's sampler, whose draws must differ (the sampler has an effect).
struct Case {
    what: &'static str,
    params: CommonParams,
    hand: Vec<Box<dyn Sampler + Send>>,
    base: Option<CommonParams>,
}

/// The hand-made chains follow common_sampler_init (common/sampling.cpp, b11312): the
/// logit bias first when there is any; then, with mirostat 0, one sampler per `samplers`
/// entry in its order (penalties, dry, top_n_sigma, top_k, typ_p, top_p, min_p, xtc,
/// temperature by default; a disabled one is an empty no-op upstream, left out here) and
/// dist(seed) last; with mirostat 1 or 2, temp(temperature) and that mirostat only.
/// The "temperature" entry is temp_ext(temp, dynatemp_range, dynatemp_exponent).
fn cases(model: &Arc<Model>) -> Vec<Case> {
    let n_vocab = model.vocab.n_tokens() as i32;
    let d = CommonParams { seed: SEED, ..CommonParams::default() };
    let mut v = Vec::new();

    v.push(Case {
        what: "default",
        params: d.clone(),
        hand: vec![Box::new(TopK { k: 40 }), Box::new(TopP { p: 0.95, min_keep: 0 }), Box::new(MinP { p: 0.05, min_keep: 0 }), Box::new(TempExt { temp: 0.8, delta: 0.0, exponent: 1.0 }), Box::new(Dist::new(SEED))],
        base: None,
    });

    let p = CommonParams { repeat_penalty: 1.3, frequency_penalty: 0.5, presence_penalty: 0.4, repeat_last_n: 32, ..all_off() };
    v.push(Case { what: "penalties", params: p, hand: vec![Box::new(Penalties::new(32, 1.3, 0.5, 0.4)), Box::new(Dist::new(SEED))], base: Some(all_off()) });
    let p = CommonParams { repeat_penalty: 1.3, repeat_last_n: -1, ..all_off() };
    v.push(Case { what: "penalties over the context (-1)", params: p, hand: vec![Box::new(Penalties::new(N_CTX, 1.3, 0.0, 0.0)), Box::new(Dist::new(SEED))], base: Some(all_off()) });

    let p = CommonParams { dry_multiplier: 0.8, ..all_off() };
    let dry = Dry::new(&model.vocab, 0.8, 1.75, 2, 64, &breakers(&p));
    v.push(Case { what: "dry", params: p, hand: vec![Box::new(dry), Box::new(Dist::new(SEED))], base: Some(all_off()) });
    let p = CommonParams { dry_multiplier: 1.5, dry_base: 2.0, dry_allowed_length: 1, dry_penalty_last_n: -1, dry_sequence_breakers: vec!["a".into()], ..all_off() };
    let dry = Dry::new(&model.vocab, 1.5, 2.0, 1, N_CTX, &breakers(&p));
    v.push(Case { what: "dry over the context (-1)", params: p, hand: vec![Box::new(dry), Box::new(Dist::new(SEED))], base: Some(all_off()) });

    let p = CommonParams { top_n_sigma: 1.5, ..all_off() };
    v.push(Case { what: "top_n_sigma", params: p, hand: vec![Box::new(TopNSigma { n: 1.5 }), Box::new(Dist::new(SEED))], base: Some(all_off()) });
    let p = CommonParams { top_k: 10, ..all_off() };
    v.push(Case { what: "top_k", params: p, hand: vec![Box::new(TopK { k: 10 }), Box::new(Dist::new(SEED))], base: Some(all_off()) });
    let p = CommonParams { typ_p: 0.7, min_keep: 3, ..all_off() };
    v.push(Case { what: "typical", params: p, hand: vec![Box::new(Typical::new(0.7, 3)), Box::new(Dist::new(SEED))], base: Some(all_off()) });
    let p = CommonParams { top_p: 0.8, min_keep: 2, ..all_off() };
    v.push(Case { what: "top_p", params: p, hand: vec![Box::new(TopP { p: 0.8, min_keep: 2 }), Box::new(Dist::new(SEED))], base: Some(all_off()) });
    let p = CommonParams { min_p: 0.1, ..all_off() };
    v.push(Case { what: "min_p", params: p, hand: vec![Box::new(MinP { p: 0.1, min_keep: 0 }), Box::new(Dist::new(SEED))], base: Some(all_off()) });
    let p = CommonParams { xtc_probability: 0.6, xtc_threshold: 0.1, min_keep: 1, ..all_off() };
    v.push(Case { what: "xtc", params: p, hand: vec![Box::new(Xtc::new(0.6, 0.1, 1, SEED)), Box::new(Dist::new(SEED))], base: Some(all_off()) });
    let p = CommonParams { temperature: 0.5, ..all_off() };
    v.push(Case { what: "temperature", params: p, hand: vec![Box::new(TempExt { temp: 0.5, delta: 0.0, exponent: 1.0 }), Box::new(Dist::new(SEED))], base: Some(all_off()) });
    let p = CommonParams { temperature: 0.9, dynatemp_range: 0.5, dynatemp_exponent: 1.3, ..all_off() };
    v.push(Case { what: "dynatemp", params: p, hand: vec![Box::new(TempExt { temp: 0.9, delta: 0.5, exponent: 1.3 }), Box::new(Dist::new(SEED))], base: Some(all_off()) });
    let p = CommonParams { temperature: 1.0, dynatemp_range: 0.6, ..all_off() };
    v.push(Case { what: "dynatemp around 1", params: p, hand: vec![Box::new(TempExt { temp: 1.0, delta: 0.6, exponent: 1.0 }), Box::new(Dist::new(SEED))], base: Some(all_off()) });

    let p = CommonParams { temperature: 0.0, ..d.clone() };
    v.push(Case {
        what: "temperature 0",
        params: p,
        hand: vec![Box::new(TopK { k: 40 }), Box::new(TopP { p: 0.95, min_keep: 0 }), Box::new(MinP { p: 0.05, min_keep: 0 }), Box::new(TempExt { temp: 0.0, delta: 0.0, exponent: 1.0 }), Box::new(Dist::new(SEED))],
        base: Some(d.clone()),
    });

    // Everything on, in an order of the caller's, spelled with aliases and mixed case.
    let order = SamplerKind::from_names(&["Temp", "min-p", "TOPK", "nucleus", "typ", "dry", "penalties", "xtc", "top-n-sigma"]).unwrap();
    let p = CommonParams {
        samplers: order,
        temperature: 1.2,
        top_k: 30,
        top_p: 0.9,
        min_p: 0.02,
        typ_p: 0.95,
        dry_multiplier: 0.5,
        repeat_penalty: 1.1,
        xtc_probability: 0.3,
        xtc_threshold: 0.05,
        top_n_sigma: 2.0,
        min_keep: 1,
        ..d.clone()
    };
    let dry = Dry::new(&model.vocab, 0.5, 1.75, 2, 64, &breakers(&p));
    v.push(Case {
        what: "custom order, names",
        params: p,
        hand: vec![
            Box::new(TempExt { temp: 1.2, delta: 0.0, exponent: 1.0 }),
            Box::new(MinP { p: 0.02, min_keep: 1 }),
            Box::new(TopK { k: 30 }),
            Box::new(TopP { p: 0.9, min_keep: 1 }),
            Box::new(Typical::new(0.95, 1)),
            Box::new(dry),
            Box::new(Penalties::new(64, 1.1, 0.0, 0.0)),
            Box::new(Xtc::new(0.3, 0.05, 1, SEED)),
            Box::new(TopNSigma { n: 2.0 }),
            Box::new(Dist::new(SEED)),
        ],
        base: Some(d.clone()),
    });
    // The same samplers as the default, temperature first: a different distribution.
    let p = CommonParams { samplers: SamplerKind::from_chars("tkpm").unwrap(), temperature: 2.0, ..d.clone() };
    v.push(Case {
        what: "custom order, letters",
        params: p,
        hand: vec![Box::new(TempExt { temp: 2.0, delta: 0.0, exponent: 1.0 }), Box::new(TopK { k: 40 }), Box::new(TopP { p: 0.95, min_keep: 0 }), Box::new(MinP { p: 0.05, min_keep: 0 }), Box::new(Dist::new(SEED))],
        base: Some(d.clone()),
    });
    let p = CommonParams { samplers: vec![], ..d.clone() };
    v.push(Case { what: "no samplers", params: p, hand: vec![Box::new(Dist::new(SEED))], base: Some(d.clone()) });
    let p = CommonParams { samplers: SamplerKind::from_names(&["top_k", "infill"]).unwrap(), top_k: 20, ..d.clone() };
    v.push(Case { what: "infill", params: p, hand: vec![Box::new(TopK { k: 20 }), Box::new(Infill::new(model.clone())), Box::new(Dist::new(SEED))], base: Some(d.clone()) });

    // Mirostat replaces the whole list (top_k etc. stay at their defaults and are unused).
    let p = CommonParams { mirostat: 1, ..d.clone() };
    v.push(Case { what: "mirostat 1", params: p, hand: vec![Box::new(Temp { temp: 0.8 }), Box::new(Mirostat::new(n_vocab, SEED, 5.0, 0.1, 100))], base: Some(d.clone()) });
    // A low target keeps mirostat's k below the row length, where n_vocab enters it.
    let p = CommonParams { mirostat: 1, mirostat_tau: 2.0, mirostat_eta: 0.3, temperature: 1.3, ..d.clone() };
    v.push(Case { what: "mirostat 1, low target", params: p, hand: vec![Box::new(Temp { temp: 1.3 }), Box::new(Mirostat::new(n_vocab, SEED, 2.0, 0.3, 100))], base: Some(CommonParams { mirostat: 1, ..d.clone() }) });
    let p = CommonParams { mirostat: 2, mirostat_tau: 3.0, mirostat_eta: 0.2, temperature: 0.7, ..d.clone() };
    v.push(Case { what: "mirostat 2", params: p, hand: vec![Box::new(Temp { temp: 0.7 }), Box::new(MirostatV2::new(SEED, 3.0, 0.2))], base: Some(d.clone()) });
    let p = CommonParams { mirostat: 2, temperature: 1.0, ..d.clone() };
    v.push(Case { what: "mirostat 2 at temperature 1", params: p, hand: vec![Box::new(MirostatV2::new(SEED, 5.0, 0.1))], base: Some(d.clone()) });

    let biases = vec![(5, 3.0), (9, f32::NEG_INFINITY), (13, f32::NEG_INFINITY), (200, 4.0)];
    let p = CommonParams { logit_bias: biases.clone(), ..d.clone() };
    v.push(Case {
        what: "logit_bias",
        params: p,
        hand: vec![Box::new(LogitBias::new(biases)), Box::new(TopK { k: 40 }), Box::new(TopP { p: 0.95, min_keep: 0 }), Box::new(MinP { p: 0.05, min_keep: 0 }), Box::new(TempExt { temp: 0.8, delta: 0.0, exponent: 1.0 }), Box::new(Dist::new(SEED))],
        base: Some(d.clone()),
    });
    v
}

/// (1) The built chain draws what the hand-made one draws, row after row.
#[test]
fn chain_draws_equal_upstreams_composition() {
    let model = model();
    let rows = rows();
    for case in cases(&model) {
        let mut built = case.params.build(&model, N_CTX).unwrap_or_else(|e| panic!("{}: {e}", case.what));
        let mut hand = by_hand(case.hand);
        let got = run(&mut built, &rows);
        let want = run(&mut hand, &rows);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g, w, "{}: row {i} (chain {:?}, by hand {:?})", case.what, names(&built), names(&hand));
        }
        assert_eq!(got.len(), rows.len());
        if let Some(base) = case.base {
            let without = run(&mut base.build(&model, N_CTX).unwrap(), &rows);
            assert!(got.iter().map(|r| r.1).ne(without.iter().map(|r| r.1)), "{}: the same draws as without the sampler", case.what);
        }
    }
}

/// Temperature 0 is greedy: every draw is the row's best logit (nothing changes the logits).
#[test]
fn temperature_zero_picks_the_best_logit() {
    let model = model();
    let rows = rows();
    for samplers in [SamplerKind::DEFAULT_ORDER.to_vec(), vec![SamplerKind::Temperature], vec![SamplerKind::TopK, SamplerKind::Temperature, SamplerKind::MinP]] {
        let p = CommonParams { temperature: 0.0, samplers, ..CommonParams::default() };
        let got = run(&mut p.build(&model, N_CTX).unwrap(), &rows);
        for (row, (_, token)) in rows.iter().zip(&got) {
            let best = (0..row.len()).fold(0, |b, i| if row[i] > row[b] { i } else { b });
            assert_eq!(*token, best as i32);
        }
    }
}

/// A -inf bias is never drawn; ignore_eos puts every end-of-generation token at -inf.
#[test]
fn logit_bias_and_ignore_eos_exclude_tokens() {
    let model = model();
    let rows = rows();
    let p = CommonParams { logit_bias: vec![(9, f32::NEG_INFINITY), (13, f32::NEG_INFINITY)], temperature: 3.0, ..CommonParams::default() };
    let got = run(&mut p.build(&model, N_CTX).unwrap(), &rows);
    assert!(got.iter().all(|(_, t)| *t != 9 && *t != 13));
    let unbiased = run(&mut CommonParams { temperature: 3.0, ..CommonParams::default() }.build(&model, N_CTX).unwrap(), &rows);
    assert!(unbiased.iter().any(|(_, t)| *t == 9 || *t == 13), "the rows favour 9 and 13 often");

    let eog: Vec<i32> = model.vocab.eog_ids().collect();
    assert!(!eog.is_empty(), "the test model has end-of-generation tokens");
    let p = CommonParams { ignore_eos: true, temperature: 0.0, samplers: vec![SamplerKind::Temperature], ..CommonParams::default() };
    let mut chain = p.build(&model, N_CTX).unwrap();
    assert_eq!(names(&chain), ["logit-bias", "temp-ext", "dist"]);
    // A row whose best logit is an end-of-generation token: the next best is drawn.
    let mut row = vec![0.0f32; (*eog.iter().max().unwrap() as usize + 1).max(64)];
    row[eog[0] as usize] = 10.0;
    row[7] = 5.0;
    assert_eq!(run(&mut chain, &[row.clone()])[0].1, 7);
    let mut plain = CommonParams { ignore_eos: false, ..p }.build(&model, N_CTX).unwrap();
    assert_eq!(run(&mut plain, &[row])[0].1, eog[0]);
}

/// (2) The chain's members and their names, as upstream's chain reports them.
#[test]
fn chain_member_names() {
    let model = model();
    let build = |p: CommonParams| names(&p.build(&model, N_CTX).unwrap());
    assert_eq!(build(CommonParams::default()), ["?penalties", "?dry", "?top-n-sigma", "top-k", "?typical", "top-p", "min-p", "?xtc", "temp-ext", "dist"]);
    assert_eq!(build(all_off()), ["?penalties", "?dry", "?top-n-sigma", "?top-k", "?typical", "?top-p", "?min-p", "?xtc", "?temp-ext", "dist"]);
    let on = CommonParams { repeat_penalty: 1.1, dry_multiplier: 0.5, top_n_sigma: 1.0, typ_p: 0.9, xtc_probability: 0.5, dynatemp_range: 0.2, logit_bias: vec![(1, 1.0)], ..CommonParams::default() };
    assert_eq!(build(on.clone()), ["logit-bias", "penalties", "dry", "top-n-sigma", "top-k", "typical", "top-p", "min-p", "xtc", "temp-ext", "dist"]);
    assert_eq!(build(CommonParams { mirostat: 1, ..on.clone() }), ["logit-bias", "temp", "mirostat"]);
    assert_eq!(build(CommonParams { mirostat: 2, temperature: 1.0, ..on.clone() }), ["logit-bias", "?temp", "mirostat-v2"]);
    assert_eq!(build(CommonParams { samplers: SamplerKind::from_chars("xkie").unwrap(), ..on }), ["logit-bias", "xtc", "top-k", "infill", "penalties", "dist"]);
    // XTC is off above a threshold of 0.5, DRY below a base of 1.
    assert_eq!(build(CommonParams { samplers: SamplerKind::from_chars("xd").unwrap(), xtc_probability: 1.0, xtc_threshold: 0.6, dry_multiplier: 1.0, dry_base: 0.9, ..CommonParams::default() }), ["?xtc", "?dry", "dist"]);
}

/// (3) Names and letters as upstream's common_sampler_types_from_names / _from_chars read
/// them; what upstream would skip with a warning is an error naming it.
#[test]
fn sampler_names_and_letters() {
    use SamplerKind::*;
    // common_sampler_type_to_str and _to_chr.
    let canonical: Vec<(&str, char)> = SamplerKind::ALL.iter().map(|k| (k.name(), k.chr())).collect();
    assert_eq!(
        canonical,
        [("dry", 'd'), ("top_k", 'k'), ("top_p", 'p'), ("min_p", 'm'), ("typ_p", 'y'), ("temperature", 't'), ("xtc", 'x'), ("infill", 'i'), ("penalties", 'e'), ("top_n_sigma", 's'), ("adaptive_p", 'a')]
    );
    let spellings = [
        ("dry", Dry),
        ("top_k", TopK),
        ("top-k", TopK),
        ("topk", TopK),
        ("top_p", TopP),
        ("top-p", TopP),
        ("topp", TopP),
        ("nucleus", TopP),
        ("top_n_sigma", TopNSigma),
        ("top-n-sigma", TopNSigma),
        ("topnsigma", TopNSigma),
        ("typ_p", TypicalP),
        ("typ-p", TypicalP),
        ("typp", TypicalP),
        ("typ", TypicalP),
        ("min_p", MinP),
        ("min-p", MinP),
        ("minp", MinP),
        ("temperature", Temperature),
        ("temp", Temperature),
        ("xtc", Xtc),
        ("infill", Infill),
        ("penalties", Penalties),
        ("adaptive_p", AdaptiveP),
        ("adaptive-p", AdaptiveP),
        ("adaptivep", AdaptiveP),
    ];
    for (name, kind) in spellings {
        assert_eq!(SamplerKind::from_name(name), Some(kind), "{name}");
        assert_eq!(SamplerKind::from_name(&name.to_ascii_uppercase()), Some(kind), "{name} in capitals");
    }
    let all: Vec<&str> = spellings.iter().map(|s| s.0).collect();
    assert_eq!(SamplerKind::from_names(&all).unwrap(), spellings.iter().map(|s| s.1).collect::<Vec<_>>());
    for bad in ["typical_p", "typical", "tfs_z", "top_a", "top k", "", "min_p "] {
        assert_eq!(SamplerKind::from_name(bad), None, "{bad:?}");
        let e = SamplerKind::from_names(&["top_k", bad]).unwrap_err();
        assert!(e.contains(&format!("'{bad}'")), "{e}");
    }
    let e = SamplerKind::from_names(&["foo", "top_k", "bar"]).unwrap_err();
    assert!(e.contains("'foo'") && e.contains("'bar'") && !e.contains("'top_k'"), "{e}");

    assert_eq!(SamplerKind::from_chars("edskypmxt").unwrap(), SamplerKind::DEFAULT_ORDER);
    assert_eq!(CommonParams::default().samplers, SamplerKind::DEFAULT_ORDER);
    for k in SamplerKind::ALL {
        assert_eq!(SamplerKind::from_char(k.chr()), Some(k));
        assert_eq!(SamplerKind::from_name(k.name()), Some(k));
    }
    assert_eq!(SamplerKind::from_chars("").unwrap(), []);
    assert_eq!(SamplerKind::from_chars("kkt").unwrap(), [TopK, TopK, Temperature]);
    for bad in ["kfypmxt", "K", "k t"] {
        let e = SamplerKind::from_chars(bad).unwrap_err();
        assert!(e.contains("samplers"), "{e}");
    }
    assert!(SamplerKind::from_chars("kfypmxt").unwrap_err().contains("'f'"));
    assert_eq!(SamplerKind::from_list("top_k;temp;min-p").unwrap(), [TopK, Temperature, MinP]);
    assert!(SamplerKind::from_list("top_k;;temp").unwrap_err().contains("''"));
}

/// (4) check() refuses what no sampler can use, naming the field; build checks first.
#[test]
fn check_names_the_bad_field() {
    let ok = CommonParams::default();
    assert_eq!(ok.check(), Ok(()));
    type Edit = fn(&mut CommonParams);
    let bad: Vec<(&str, Edit)> = vec![
        ("temperature", |p| p.temperature = f32::NAN),
        ("top_p", |p| p.top_p = -0.1),
        ("top_p", |p| p.top_p = f32::INFINITY),
        ("min_p", |p| p.min_p = 1.5),
        ("repeat_penalty", |p| p.repeat_penalty = 0.0),
        ("repeat_penalty", |p| p.repeat_penalty = 1e-40),
        ("repeat_last_n", |p| p.repeat_last_n = -2),
        ("frequency_penalty", |p| p.frequency_penalty = f32::NEG_INFINITY),
        ("presence_penalty", |p| p.presence_penalty = f32::NAN),
        ("min_keep", |p| p.min_keep = -1),
        ("typ_p", |p| p.typ_p = f32::NAN),
        ("top_n_sigma", |p| p.top_n_sigma = f32::INFINITY),
        ("xtc_probability", |p| p.xtc_probability = 1.5),
        ("xtc_probability", |p| p.xtc_probability = -0.5),
        ("xtc_threshold", |p| p.xtc_threshold = 2.0),
        ("dynatemp_range", |p| p.dynatemp_range = f32::NAN),
        ("dynatemp_exponent", |p| p.dynatemp_exponent = f32::INFINITY),
        ("dry_multiplier", |p| p.dry_multiplier = f32::NAN),
        ("dry_base", |p| p.dry_base = f32::INFINITY),
        ("dry_allowed_length", |p| p.dry_allowed_length = -1),
        ("dry_penalty_last_n", |p| p.dry_penalty_last_n = -2),
        ("dry_sequence_breakers[1]", |p| p.dry_sequence_breakers[1] = String::new()),
        ("mirostat", |p| p.mirostat = 3),
        ("mirostat", |p| p.mirostat = -1),
        ("mirostat_tau", |p| p.mirostat_tau = f32::NAN),
        ("mirostat_eta", |p| p.mirostat_eta = f32::INFINITY),
        ("adaptive_target", |p| p.adaptive_target = 1.5),
        ("adaptive_decay", |p| p.adaptive_decay = 1.0),
        ("adaptive_decay", |p| p.adaptive_decay = -0.1),
        ("adaptive_p", |p| p.samplers.push(SamplerKind::AdaptiveP)),
        ("logit_bias", |p| p.logit_bias = vec![(3, f32::NAN)]),
        ("logit_bias", |p| p.logit_bias = vec![(3, f32::INFINITY)]),
        ("logit_bias", |p| p.logit_bias = vec![(-1, 1.0)]),
    ];
    let model = model();
    for (field, edit) in bad {
        let mut p = ok.clone();
        edit(&mut p);
        let e = p.check().expect_err(field);
        assert!(e.contains(field), "{field}: {e}");
        assert_eq!(p.build(&model, N_CTX).err(), Some(e), "build refuses what check refuses");
    }
    // Values upstream reads as "off" pass.
    let off = CommonParams { top_k: -5, top_p: 3.0, min_p: -1.0, typ_p: 2.0, top_n_sigma: -1.0, dry_base: 0.5, temperature: -1.0, repeat_last_n: -1, dry_penalty_last_n: -1, dry_sequence_breakers: vec![], ..ok.clone() };
    assert_eq!(off.check(), Ok(()));
    // Mirostat replaces the list, so adaptive_p there is not used.
    let miro = CommonParams { mirostat: 2, samplers: vec![SamplerKind::AdaptiveP], ..ok.clone() };
    assert_eq!(miro.check(), Ok(()));
    // Tokens beyond the vocabulary need the model to be found.
    let n = model.vocab.n_tokens() as i32;
    let e = CommonParams { logit_bias: vec![(n, 1.0)], ..ok.clone() }.build(&model, N_CTX).err().unwrap();
    assert!(e.contains("logit_bias") && e.contains(&n.to_string()), "{e}");
    assert!(CommonParams { logit_bias: vec![(n - 1, 1.0)], ..ok }.build(&model, N_CTX).is_ok());
}
