//! The golden-logits harness of `tests/golden_logits.rs` and `tests/golden_quants.rs`: run
//! llama.cpp's scenarios A–D through the C API and hold the rows to the tolerances of
//! tests/data/README.md (Tolerances).

use super::json::Json;
use super::*;
use deepseek::api::context::{llama_decode, llama_free, llama_get_memory};
use deepseek::api::memory::*;
use deepseek::api::model::{llama_model_free, llama_model_get_vocab};
use deepseek::api::vocab::llama_vocab_n_tokens;
use deepseek::model::moe::RouteRecord;

/// Runs scenarios A–D and returns the produced rows in the reference's order.
pub fn run_scenarios(model_path: &std::path::Path, g: &Json) -> Vec<Vec<f32>> {
    run_scenarios_on(load_model(model_path), g)
}

/// As `run_scenarios` on a loaded model, which it frees.
pub fn run_scenarios_on(m: *mut deepseek::api::handles::llama_model, g: &Json) -> Vec<Vec<f32>> {
    run_scenarios_traced(m, g, false).0
}

/// As `run_scenarios_on`, and with `trace` the MoE routing decisions of each decode call.
pub fn run_scenarios_traced(m: *mut deepseek::api::handles::llama_model, g: &Json, trace: bool) -> (Vec<Vec<f32>>, Vec<Vec<RouteRecord>>) {
    run_scenarios_with(m, g, trace, &|_| {})
}

/// As [`run_scenarios_traced`] with `edit` changing the context's parameters.
pub fn run_scenarios_with(m: *mut deepseek::api::handles::llama_model, g: &Json, trace: bool, edit: &dyn Fn(&mut deepseek::api::types::llama_context_params)) -> (Vec<Vec<f32>>, Vec<Vec<RouteRecord>>) {
    let mut decodes = Vec::new();
    let n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(m)) as usize;
    assert_eq!(n_vocab, g.get("n_vocab").num() as usize);
    let c = new_context_with(m, 256, 4, 2, edit);
    // SAFETY: a live context used by this thread only.
    let ctx = |c: *mut deepseek::api::handles::llama_context| unsafe { &mut (*c).owned().ctx };
    ctx(c).trace_routing(trace);
    let mut took = |c| decodes.push(ctx(c).take_routing());
    let mem = llama_get_memory(c);
    let mut rows = Vec::new();
    let mut b = Batch::new(64, 4);

    // A: 40 tokens of sequence 0 in one batch, logits everywhere.
    for (i, &t) in g.get("A_tokens").i32s().iter().enumerate() {
        b.add(t, i as i32, 0, true);
    }
    // SAFETY: b is a valid batch from llama_batch_init.
    assert_eq!(unsafe { llama_decode(c, b.0) }, 0);
    took(c);
    for i in 0..40 {
        rows.push(logits_row(c, i, n_vocab));
    }
    // B: the reference's greedy continuation, one token at a time.
    for (s, &t) in g.get("B_tokens").i32s().iter().enumerate() {
        b.clear();
        b.add(t, 40 + s as i32, 0, true);
        // SAFETY: as above.
        assert_eq!(unsafe { llama_decode(c, b.0) }, 0);
        took(c);
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
    took(c);
    for s in 0..3 {
        rows.push(logits_row(c, last[s], n_vocab));
    }
    // D: copy seq 0 to 3, cut seq 1 at pos 3, then one token each for seqs 1 and 3. D' (a
    // cache that cannot cut a sequence, deepseek4's): the cut fails and changes nothing, seq 1
    // is removed whole and starts over at position 0.
    llama_memory_seq_cp(mem, 0, 3, -1, -1);
    let d = g.get("D_tokens");
    let partial = g.opt("D_partial_rm").is_none_or(|v| v.bool());
    assert_eq!(llama_memory_seq_rm(mem, 1, 3, -1), partial);
    if !partial {
        assert_eq!(llama_memory_seq_pos_max(mem, 1), 6, "a refused seq_rm changed the sequence");
        assert!(llama_memory_seq_rm(mem, 1, -1, -1));
        assert_eq!(llama_memory_seq_pos_max(mem, 1), -1);
    } else {
        assert_eq!(llama_memory_seq_pos_max(mem, 1), 2);
    }
    assert_eq!(llama_memory_seq_pos_max(mem, 3), 11);
    b.clear();
    if partial {
        b.add(d.get("seq1_pos3").num() as i32, 3, 1, true);
    } else {
        b.add(d.get("seq1_pos0").num() as i32, 0, 1, true);
    }
    b.add(d.get("seq3_pos12").num() as i32, 12, 3, true);
    // SAFETY: as above.
    assert_eq!(unsafe { llama_decode(c, b.0) }, 0);
    took(c);
    rows.push(logits_row(c, 0, n_vocab));
    rows.push(logits_row(c, 1, n_vocab));
    drop(b);
    // SAFETY: handles from this test, freed once.
    unsafe {
        llama_free(c);
        llama_model_free(m);
    }
    (rows, decodes)
}

#[derive(Clone, Copy, PartialEq)]
pub enum Tolerance {
    /// Every row's cosine ≥ 0.9999; same argmax where the reference's top-2 gap > 0.5% of the range.
    Float,
    /// Every row ≥ 0.998, median ≥ 0.9995; same argmax where the gap > 2% of the range.
    Quantized,
}

pub fn check_files(model: &str, gguf: &std::path::Path, json: &std::path::Path, f32s: &std::path::Path, tol: Tolerance) {
    let g = Json::parse(&std::fs::read_to_string(json).unwrap());
    let rows = if g.opt("L_tokens").is_some() { run_long_scenario(gguf, &g) } else { run_scenarios(gguf, &g) };
    check_rows(model, &rows, &g, f32s, tol);
}

/// Holds `rows` to the reference rows of `f32s` with `tol`.
pub fn check_rows(model: &str, rows: &[Vec<f32>], g: &Json, f32s: &std::path::Path, tol: Tolerance) {
    let n_vocab = g.get("n_vocab").num() as usize;
    let reference = read_f32s(f32s);
    assert_eq!(rows.len() * n_vocab, reference.len());
    let (min_cos, gap) = match tol {
        Tolerance::Float => (0.9999, 0.005),
        Tolerance::Quantized => (0.998, 0.02),
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
    }
    eprintln!("{model}: min cosine {:.6}, median {median:.6}, argmax equal {argmax_equal}/{}", cosines[0], rows.len());
    assert!(failures.is_empty(), "{model}:\n{}", failures.join("\n"));
}

/// llama.cpp's routing on the scenarios (tests/data/moe_trace/gen_trace.c): for each (decode
/// call, MoE block), each row's selection scores and chosen experts (ascending). A decode call
/// that upstream split into several micro-batches (scenario C: one per sequence's stream) has
/// its rows in an order the trace does not record: those calls are listed in `split` and their
/// rows are not used.
pub struct UpstreamRouting(pub std::collections::HashMap<(usize, usize), (Vec<Vec<f32>>, Vec<Vec<usize>>)>, pub std::collections::HashSet<usize>);

impl UpstreamRouting {
    pub fn read(path: &std::path::Path) -> UpstreamRouting {
        let d = std::fs::read(path).unwrap();
        let u = |o: usize| u32::from_le_bytes(d[o..o + 4].try_into().unwrap());
        let mut map: std::collections::HashMap<(usize, usize), (Vec<Vec<f32>>, Vec<Vec<usize>>)> = Default::default();
        let mut pieces: std::collections::HashMap<(usize, usize, u32), usize> = Default::default();
        let mut o = 0;
        while o < d.len() {
            let (dec, layer, kind, ne0, ne1) = (u(o) as usize, u(o + 4) as usize, u(o + 8), u(o + 12) as usize, u(o + 16) as usize);
            o += 20;
            *pieces.entry((dec, layer, kind)).or_default() += 1;
            let e = map.entry((dec, layer)).or_default();
            for t in 0..ne1 {
                let row = (0..ne0).map(|i| o + 4 * (t * ne0 + i));
                if kind == 0 {
                    e.0.push(row.map(|p| f32::from_le_bytes(d[p..p + 4].try_into().unwrap())).collect());
                } else {
                    let mut ids: Vec<usize> = row.map(|p| u(p) as usize).collect();
                    ids.sort_unstable();
                    e.1.push(ids);
                }
            }
            o += 4 * ne0 * ne1;
        }
        let split = pieces.iter().filter(|(_, &n)| n > 1).map(|(k, _)| k.0).collect();
        UpstreamRouting(map, split)
    }

    /// A trace of one sequence (the long scenario L): a decode call's micro-batches hold its
    /// rows in token order, so their records, read one after the other, are its rows in order.
    pub fn in_token_order(mut self) -> UpstreamRouting {
        self.1.clear();
        self
    }
}

/// For each output row of the scenarios (the reference's order), the tokens its result depends
/// on: (decode call, row of that call), in its sequence's order.
pub fn row_histories(g: &Json) -> Vec<Vec<(usize, usize)>> {
    let na = g.get("A_tokens").i32s().len();
    let nb = g.get("B_tokens").i32s().len();
    let mut h: Vec<Vec<(usize, usize)>> = (0..na).map(|i| (0..=i).map(|j| (0, j)).collect()).collect();
    for s in 0..nb {
        h.push((0..na).map(|j| (0, j)).chain((0..=s).map(|k| (1 + k, 0))).collect());
    }
    let (dc, dd) = (1 + nb, 2 + nb);
    let lens: Vec<usize> = (0..3).map(|s| g.get(&format!("C_seq{s}_tokens")).i32s().len()).collect();
    let mut idx = vec![Vec::new(); 3];
    let mut n = 0;
    for i in 0..*lens.iter().max().unwrap() {
        for s in 0..3 {
            if i < lens[s] {
                idx[s].push(n);
                n += 1;
            }
        }
    }
    for rows in &idx {
        h.push(rows.iter().map(|&r| (dc, r)).collect());
    }
    // D: seq 1 cut at position 3 and continued; D' (deepseek4): seq 1 removed whole, restarted
    let seq1_kept = if g.opt("D_partial_rm").is_none_or(|v| v.bool()) { 3 } else { 0 };
    h.push(idx[1][..seq1_kept].iter().map(|&r| (dc, r)).chain([(dd, 0)]).collect());
    h.push(idx[0].iter().map(|&r| (dc, r)).chain([(dd, 1)]).collect());
    h
}

/// [`row_histories`] of deepseek4's long scenario L (golden_dsv4.c `long`): the prompt's rows
/// at `L_positions` depend on the prompt up to them, each greedy step on the whole prompt and
/// the steps before it.
pub fn long_histories(g: &Json) -> Vec<Vec<(usize, usize)>> {
    let n = g.get("L_tokens").i32s().len();
    let mut h: Vec<Vec<(usize, usize)>> = g.get("L_positions").i32s().iter().map(|&p| (0..=p as usize).map(|j| (0, j)).collect()).collect();
    for s in 0..g.get("LB_tokens").i32s().len() {
        h.push((0..n).map(|j| (0, j)).chain((0..=s).map(|k| (1 + k, 0))).collect());
    }
    h
}

/// [`decode_outputs`] of the long scenario L.
pub fn long_outputs(g: &Json) -> Vec<(usize, Vec<usize>)> {
    let mut d = vec![(g.get("L_tokens").i32s().len(), g.get("L_positions").i32s().iter().map(|&p| p as usize).collect())];
    d.extend((0..g.get("LB_tokens").i32s().len()).map(|_| (1, vec![0])));
    d
}

/// Per decode call of the scenarios: its number of tokens and its output rows (ascending). Both
/// engines run the last block's FFN for the output rows only, so their traces of that block
/// hold those rows alone.
pub fn decode_outputs(g: &Json) -> Vec<(usize, Vec<usize>)> {
    let na = g.get("A_tokens").i32s().len();
    let nb = g.get("B_tokens").i32s().len();
    let mut d = vec![(na, (0..na).collect())];
    d.extend((0..nb).map(|_| (1, vec![0])));
    let lens: Vec<usize> = (0..3).map(|s| g.get(&format!("C_seq{s}_tokens")).i32s().len()).collect();
    let mut n = 0;
    let mut outs = Vec::new();
    for i in 0..*lens.iter().max().unwrap() {
        for s in 0..3 {
            if i < lens[s] {
                if i == lens[s] - 1 {
                    outs.push(n);
                }
                n += 1;
            }
        }
    }
    outs.sort_unstable();
    d.push((n, outs));
    d.push((2, vec![0, 1]));
    d
}

/// Where our expert choice first differs from llama.cpp's in a row's history.
#[derive(Debug)]
pub struct Flip {
    pub decode: usize,
    pub row: usize,
    pub layer: usize,
    /// How far upstream's own scores are from choosing as we did: for each expert it chose
    /// and we did not, the distance of its selection score (and, with expert groups, of its
    /// group's score) to the nearest expert we chose instead; the largest of those.
    pub margin: f32,
    /// Our selection scores' largest distance from upstream's at that decision.
    pub deviation: f32,
}

/// The root flips of a row: the differing choices at the lowest MoE block where any differs in
/// its history (a choice at block l depends only on the choices at blocks below l).
pub fn root_flips(history: &[(usize, usize)], ours: &[Vec<RouteRecord>], up: &UpstreamRouting, n_group: usize, outputs: &[(usize, Vec<usize>)]) -> Vec<Flip> {
    let mut flips: Vec<Flip> = Vec::new();
    // the record index of batch row t in a trace of n rows: all rows, or the output rows only
    let index = |d: usize, n: usize, t: usize| -> Option<usize> {
        let (n_tokens, outs) = &outputs[d];
        if n == *n_tokens {
            Some(t)
        } else {
            assert_eq!(n, outs.len(), "decode {d}: a trace of {n} rows for {n_tokens} tokens and {} outputs", outs.len());
            outs.iter().position(|&o| o == t)
        }
    };
    for &(d, t) in history {
        let mut layers: Vec<usize> = ours[d].iter().map(|r| r.layer).collect();
        layers.sort_unstable();
        layers.dedup();
        for layer in layers {
            let recs: Vec<&RouteRecord> = ours[d].iter().filter(|r| r.layer == layer).collect();
            let (scores, chosen) = &up.0[&(d, layer)];
            assert_eq!(scores.len(), chosen.len());
            let (Some(i), Some(j)) = (index(d, recs.len(), t), index(d, scores.len(), t)) else { continue };
            let rec = recs.iter().find(|r| r.row == i).expect("our trace has the row");
            let (s, c) = (&scores[j], &chosen[j]);
            if *c == rec.chosen {
                continue;
            }
            let n = s.len();
            let per = n / n_group.max(1);
            let group_score = |g: usize| {
                let mut v: Vec<f32> = s[g * per..(g + 1) * per].to_vec();
                v.sort_by(|a, b| b.partial_cmp(a).unwrap());
                v[0] + v.get(1).copied().unwrap_or(0.0)
            };
            let mut margin = 0f32;
            for &a in c.iter().filter(|a| !rec.chosen.contains(a)) {
                let mut best = f32::INFINITY;
                for &b in rec.chosen.iter().filter(|b| !c.contains(b)) {
                    let mut m = (s[a] - s[b]).abs();
                    if n_group > 1 && a / per != b / per {
                        m = m.min((group_score(a / per) - group_score(b / per)).abs());
                    }
                    best = best.min(m);
                }
                margin = margin.max(best);
            }
            let deviation = s.iter().zip(&rec.scores).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
            flips.push(Flip { decode: d, row: t, layer: rec.layer, margin, deviation });
        }
    }
    let low = flips.iter().map(|f| f.layer).min();
    flips.retain(|f| Some(f.layer) == low);
    flips
}

/// The quantized tolerance for an MoE model, with the one excuse tests/data/README.md (Tolerances) allows: a row that
/// misses it passes only if its history holds a root flip of an expert choice (see
/// [`root_flips`]) and every root flip sits on a near-tie of llama.cpp's own router (`margin`
/// ≤ `TIE`) reached by our router from scores that agree with upstream's (`deviation` ≤ `DEV`).
/// A row that differs without a flip, or after a flip on scores that are not close, fails.
pub fn check_moe_files(model: &str, gguf: &std::path::Path, json: &std::path::Path, f32s: &std::path::Path, router: &std::path::Path) {
    let g = Json::parse(&std::fs::read_to_string(json).unwrap());
    let m = load_model(gguf);
    // SAFETY: a live model handle.
    let n_group = unsafe { &*m }.model.hp.moe.as_ref().map_or(1, |p| p.n_group);
    let (rows, ours, up, hist, outputs) = if g.opt("L_tokens").is_some() {
        let (rows, ours) = run_long_scenario_traced(m, &g);
        (rows, ours, UpstreamRouting::read(router).in_token_order(), long_histories(&g), long_outputs(&g))
    } else {
        let (rows, ours) = run_scenarios_traced(m, &g, true);
        (rows, ours, UpstreamRouting::read(router), row_histories(&g), decode_outputs(&g))
    };
    check_moe_rows(model, &g, &read_f32s(f32s), &rows, &ours, &up, &hist, &outputs, n_group);
}

/// [`check_moe_files`]'s judgement of the rows a run produced, with its routing (`ours`, per
/// decode call), upstream's trace, each row's history and each decode call's outputs.
#[allow(clippy::too_many_arguments)]
fn check_moe_rows(model: &str, g: &Json, reference: &[f32], rows: &[Vec<f32>], ours: &[Vec<RouteRecord>], up: &UpstreamRouting, hist: &[Vec<(usize, usize)>], outputs: &[(usize, Vec<usize>)], n_group: usize) {
    const TIE: f32 = 2e-3;
    const DEV: f32 = 2e-3;
    let n_vocab = g.get("n_vocab").num() as usize;
    assert_eq!(rows.len() * n_vocab, reference.len());
    assert_eq!(hist.len(), rows.len());
    assert_eq!(ours.len(), up.0.keys().map(|k| k.0).max().unwrap() + 1, "{model}: decode calls");
    let mut cosines = Vec::new();
    let mut failures = Vec::new();
    let mut excused = Vec::new();
    for (r, row) in rows.iter().enumerate() {
        let want = &reference[r * n_vocab..(r + 1) * n_vocab];
        let cos = cosine(row, want);
        cosines.push(cos);
        if std::env::var_os("GOLDEN_ROWS").is_some() {
            eprintln!("  {model} row {r}: cosine {cos:.7}");
        }
        let argmax_flip = top2_gap_fraction(want) > 0.02 && argmax(row) != argmax(want);
        if cos >= 0.998 && !argmax_flip {
            continue;
        }
        if let Some(&(d, _)) = hist[r].iter().find(|(d, _)| up.1.contains(d)) {
            failures.push(format!("row {r}: cosine {cos:.6}{}; its history has decode call {d}, which llama.cpp split into micro-batches whose row order the trace lacks", if argmax_flip { ", argmax differs" } else { "" }));
            continue;
        }
        let flips = root_flips(&hist[r], ours, up, n_group, outputs);
        let why = format!("row {r}: cosine {cos:.6}{}; root flips {flips:?}", if argmax_flip { ", argmax differs" } else { "" });
        if !flips.is_empty() && flips.iter().all(|f| f.margin <= TIE && f.deviation <= DEV) {
            excused.push(why);
        } else {
            failures.push(why);
        }
    }
    cosines.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let median = cosines[cosines.len() / 2];
    if median < 0.9995 {
        failures.push(format!("median cosine {median:.6} < 0.9995"));
    }
    eprintln!("{model}: min cosine {:.6}, median {median:.6}, {} rows excused by near-ties of llama.cpp's router", cosines[0], excused.len());
    for e in &excused {
        eprintln!("  excused {e}");
    }
    assert!(failures.is_empty(), "{model}:\n{}", failures.join("\n"));
}

/// deepseek4's long scenario L (golden_dsv4.c `long`): a 250-token prompt in one decode call of
/// 90-token micro-batches (n_ctx 512, one sequence), logits at `L_positions`, then greedy
/// single-token steps; returns the rows in the reference's order.
pub fn run_long_scenario(model_path: &std::path::Path, g: &Json) -> Vec<Vec<f32>> {
    run_long_scenario_traced(load_model(model_path), g).0
}

/// As [`run_long_scenario`] on a loaded model (which it frees), with the MoE routing of each
/// decode call: a call of several micro-batches has its records renumbered per block in the
/// order they came (the micro-batches' rows in token order), as upstream's trace reads.
pub fn run_long_scenario_traced(m: *mut deepseek::api::handles::llama_model, g: &Json) -> (Vec<Vec<f32>>, Vec<Vec<RouteRecord>>) {
    use deepseek::api::context::{llama_context_default_params, llama_init_from_model};
    let mut decodes = Vec::new();
    // SAFETY: a live context used by this thread only.
    let ctx = |c: *mut deepseek::api::handles::llama_context| unsafe { &mut (*c).owned().ctx };
    let mut took = |c| {
        let mut recs: Vec<RouteRecord> = ctx(c).take_routing();
        let mut next: std::collections::HashMap<usize, usize> = Default::default();
        for r in recs.iter_mut() {
            let n = next.entry(r.layer).or_default();
            r.row = *n;
            *n += 1;
        }
        decodes.push(recs);
    };
    let n_vocab = g.get("n_vocab").num() as usize;
    let mut p = llama_context_default_params();
    p.n_ctx = g.get("n_ctx").num() as u32;
    p.n_batch = p.n_ctx;
    p.n_ubatch = g.get("n_ubatch").num() as u32;
    p.n_seq_max = g.get("n_seq_max").num() as u32;
    p.n_threads = 2;
    p.n_threads_batch = 2;
    let c = llama_init_from_model(m, p);
    assert!(!c.is_null());
    ctx(c).trace_routing(true);
    let tokens = g.get("L_tokens").i32s();
    let wanted: Vec<i32> = g.get("L_positions").i32s();
    let mut b = Batch::new(tokens.len() as i32, 1);
    for (i, &t) in tokens.iter().enumerate() {
        b.add(t, i as i32, 0, wanted.contains(&(i as i32)));
    }
    // SAFETY: b is a valid batch from llama_batch_init.
    assert_eq!(unsafe { llama_decode(c, b.0) }, 0);
    took(c);
    let mut rows: Vec<Vec<f32>> = wanted.iter().map(|&i| logits_row(c, i, n_vocab)).collect();
    let first = g.get("LB_positions").i32s()[0];
    for (s, &t) in g.get("LB_tokens").i32s().iter().enumerate() {
        b.clear();
        b.add(t, first + s as i32, 0, true);
        // SAFETY: as above.
        assert_eq!(unsafe { llama_decode(c, b.0) }, 0);
        took(c);
        rows.push(logits_row(c, 0, n_vocab));
    }
    drop(b);
    // SAFETY: handles from this test, freed once.
    unsafe {
        llama_free(c);
        llama_model_free(m);
    }
    (rows, decodes)
}
