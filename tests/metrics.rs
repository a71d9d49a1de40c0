//! ds_metrics_prometheus and ds_stats_get after real decodes: valid Prometheus text whose
//! values agree with ds_stats, cumulative histograms whose counts are the tokens decoded,
//! quantiles that bracket the decode times measured here, snprintf-style sizing, and clean
//! errors for bad arguments. Own binary: it reads process-wide counters.

mod common;

use std::collections::HashMap;
use std::time::Instant;

use common::*;
use deepseek::api::batch::llama_batch_get_one;
use deepseek::api::context::{llama_decode, llama_free};
use deepseek::api::model::llama_model_free;
use deepseek::api::stats::{ds_context_stats, ds_metrics_prometheus, ds_stats, ds_stats_get};

fn render() -> String {
    // SAFETY: NULL with length 0 asks for the size.
    let need = unsafe { ds_metrics_prometheus(std::ptr::null_mut(), 0) };
    assert!(need > 0);
    let mut buf = vec![0u8; need as usize + 1];
    // SAFETY: buf is writable for its length.
    let n = unsafe { ds_metrics_prometheus(buf.as_mut_ptr().cast(), buf.len()) };
    assert_eq!(n, need, "the text changed size between two calls with nothing decoding");
    assert_eq!(buf[need as usize], 0, "not NUL-terminated");
    String::from_utf8(buf[..need as usize].to_vec()).unwrap()
}

/// Sample lines: "name{labels}" → value; checks every sample follows a TYPE line of its family.
fn parse(text: &str) -> HashMap<String, f64> {
    let mut samples = HashMap::new();
    let mut family = String::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut it = rest.split(' ');
            family = it.next().unwrap().to_string();
            assert!(matches!(it.next(), Some("gauge" | "counter" | "histogram")), "bad TYPE line: {line}");
            continue;
        }
        if line.starts_with("# HELP ") {
            continue;
        }
        let (name, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("bad sample line: {line:?}"));
        assert!(name.starts_with(&family), "sample {name} outside its family {family}");
        samples.insert(name.to_string(), value.parse::<f64>().unwrap_or_else(|_| panic!("bad value in {line:?}")));
    }
    samples
}

fn histogram_buckets(samples: &HashMap<String, f64>, name: &str) -> Vec<(f64, f64)> {
    let mut b: Vec<(f64, f64)> = samples
        .iter()
        .filter_map(|(k, &v)| {
            let le = k.strip_prefix(&format!("{name}_bucket{{le=\""))?.strip_suffix("\"}")?;
            Some((if le == "+Inf" { f64::INFINITY } else { le.parse().unwrap() }, v))
        })
        .collect();
    b.sort_by(|x, y| x.0.partial_cmp(&y.0).unwrap());
    b
}

#[test]
fn metrics_agree_with_stats_and_decodes() {
    let m = load_model(&data("tiny/tiny-llama-q8_0.gguf"));
    let c = new_context(m, 256, 1, 1);
    let mut prompt: Vec<i32> = (0..40).map(|i| (i * 11) % 480).collect();
    // SAFETY: prompt outlives the call.
    assert_eq!(unsafe { llama_decode(c, llama_batch_get_one(prompt.as_mut_ptr(), 40)) }, 0);
    let mut step_us = Vec::new();
    for i in 0..30 {
        let mut t = [(i * 17) % 480];
        let began = Instant::now();
        // SAFETY: t outlives the call.
        assert_eq!(unsafe { llama_decode(c, llama_batch_get_one(t.as_mut_ptr(), 1)) }, 0);
        step_us.push(began.elapsed().as_secs_f64() * 1e6);
    }
    let mut s = ds_stats::default();
    assert_eq!(ds_stats_get(&mut s), 0);
    let mut cs = ds_context_stats::default();
    assert_eq!(ds_context_stats(c, &mut cs), 0);
    assert_eq!((cs.decode_calls, cs.prompt_tokens, cs.generated_tokens), (31, 40, 30));
    assert_eq!((s.decode_calls, s.prompt_tokens, s.generated_tokens), (31, 40, 30));
    assert_eq!((s.live_models, s.live_contexts), (1, 1));
    assert!(s.kv_bytes as u64 == cs.kv_bytes && cs.kv_bytes > 0 && cs.scratch_bytes > 0 && s.mapped_model_bytes > 0);
    assert_eq!(cs.kv_cells_used, 70);
    // The generation quantiles bracket what was measured around the calls (which include
    // the call overhead): the median step measured here is at least the library's p50's
    // bucket floor, and p50 <= p90 <= p99.
    step_us.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let measured_p50 = step_us[step_us.len() / 2];
    assert!(cs.generation_token_p50_us > 0.0 && cs.generation_token_p50_us <= cs.generation_token_p90_us && cs.generation_token_p90_us <= cs.generation_token_p99_us);
    let floor = deepseek::sys::stats::LATENCY_BOUNDS_US.iter().rev().find(|&&b| (b as f64) < cs.generation_token_p50_us).copied().unwrap_or(0) as f64;
    assert!(measured_p50 >= floor, "measured median {measured_p50} µs below the p50 bucket floor {floor} µs");
    assert_eq!(s.generation_token_p50_us, cs.generation_token_p50_us, "one context: global and per-context histograms agree");
    assert!(s.heap_allocated_bytes > 0 && s.heap_resident_bytes >= s.heap_allocated_bytes / 2);

    let samples = parse(&render());
    assert_eq!(samples["ds_decode_calls_total"], 31.0);
    assert_eq!(samples["ds_live_contexts"], 1.0);
    assert_eq!(samples["ds_kv_bytes"], s.kv_bytes as f64);
    for (name, tokens) in [("ds_prompt_token_seconds", 40.0), ("ds_generation_token_seconds", 30.0)] {
        let b = histogram_buckets(&samples, name);
        assert_eq!(b.len(), 17);
        assert!(b.windows(2).all(|w| w[0].1 <= w[1].1), "{name}: buckets not cumulative");
        assert_eq!(b.last().unwrap(), &(f64::INFINITY, tokens));
        assert_eq!(samples[&format!("{name}_count")], tokens);
        assert!(samples[&format!("{name}_sum")] > 0.0);
    }

    // Sizing and errors.
    let mut small = [0x55u8; 16];
    // SAFETY: small is writable for 16 bytes.
    let need = unsafe { ds_metrics_prometheus(small.as_mut_ptr().cast(), small.len()) };
    assert!(need > 16 && small[15] == 0);
    // SAFETY: NULL with a length is rejected before any write.
    assert_eq!(unsafe { ds_metrics_prometheus(std::ptr::null_mut(), 10) }, -1);
    assert_eq!(ds_stats_get(std::ptr::null_mut()), -1);
    assert_eq!(ds_context_stats(std::ptr::null(), &mut cs), -1);
    assert_eq!(ds_context_stats(c, std::ptr::null_mut()), -1);

    // SAFETY: freed once each.
    unsafe {
        llama_free(c);
        llama_model_free(m);
    }
    assert_eq!(ds_stats_get(&mut s), 0);
    assert_eq!((s.live_models, s.live_contexts, s.kv_bytes, s.scratch_bytes, s.mapped_model_bytes), (0, 0, 0, 0, 0));
}
