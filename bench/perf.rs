//! Prompt-processing and generation speed through the Rust API (llama-bench's pp/tg).
//!
//! Usage: cargo bench --bench perf -- [-m MODEL.gguf] [-t THREADS] [-p N_PROMPT] [-n N_GEN] [-r REPS]
//! pp: one decode of N_PROMPT tokens into an empty cache; tg: N_GEN single-token decodes.
//! Prints min / median tokens/s over REPS repetitions (after one warm-up).

use std::sync::Arc;
use std::time::Instant;

use deepseek::batch::BatchInput;
use deepseek::context::{Context, ContextParams};
use deepseek::model::Model;

/// CPU seconds (user + system) used by the process so far.
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage writes into the zeroed struct we own.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn main() {
    let home = std::env::var("HOME").unwrap_or_default();
    let mut model = format!("{home}/.cache/deepseek/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf");
    let (mut threads, mut n_prompt, mut n_gen, mut reps) = (2i32, 64usize, 32usize, 3usize);
    let mut it = std::env::args().skip(1);
    while let Some(f) = it.next() {
        match f.as_str() {
            "-m" => model = it.next().unwrap(),
            "-t" => threads = it.next().unwrap().parse().unwrap(),
            "-p" => n_prompt = it.next().unwrap().parse().unwrap(),
            "-n" => n_gen = it.next().unwrap().parse().unwrap(),
            "-r" => reps = it.next().unwrap().parse().unwrap(),
            "--bench" => {}
            other => panic!("unknown argument {other}"),
        }
    }
    let t0 = Instant::now();
    let m = Arc::new(Model::load(std::path::Path::new(&model), true).expect("load"));
    let t_load = t0.elapsed().as_secs_f64();
    let params = ContextParams {
        n_ctx: 1024,
        n_batch: 512,
        n_ubatch: 512,
        n_seq_max: 1,
        n_threads: threads,
        n_threads_batch: threads,
        ..ContextParams::default()
    };
    let mut ctx = Context::new(Arc::clone(&m), &params).expect("context");
    let n_vocab = ctx.logits_row(-1).map(|r| r.len()).unwrap_or(1000).max(1000);
    let prompt: Vec<i32> = (0..n_prompt).map(|i| ((i * 7919 + 13) % n_vocab.min(30000)) as i32 + 10).collect();
    let mut pp = Vec::new();
    let mut tg = Vec::new();
    let (mut pp_cpu, mut tg_cpu) = (Vec::new(), Vec::new());
    for rep in 0..=reps {
        ctx.kv.clear(true);
        let c0 = cpu_seconds();
        let t = Instant::now();
        ctx.decode(&BatchInput { tokens: &prompt, pos: None, seq_ids: None, logits: None }, None).expect("decode");
        let dt_pp = t.elapsed().as_secs_f64();
        let c_pp = cpu_seconds() - c0;
        ctx.kv.clear(true);
        let mut tok = 42i32;
        let c0 = cpu_seconds();
        let t = Instant::now();
        for _ in 0..n_gen {
            ctx.decode(&BatchInput { tokens: &[tok], pos: None, seq_ids: None, logits: None }, None).expect("decode");
            let l = ctx.logits_row(-1).unwrap();
            tok = l.iter().enumerate().fold(0, |b, (i, &x)| if x > l[b] { i } else { b }) as i32;
        }
        let dt_tg = t.elapsed().as_secs_f64();
        let c_tg = cpu_seconds() - c0;
        if rep > 0 {
            pp_cpu.push(1e3 * c_pp / n_prompt as f64);
            tg_cpu.push(1e3 * c_tg / n_gen as f64);
            pp.push(n_prompt as f64 / dt_pp);
            tg.push(n_gen as f64 / dt_tg);
        }
    }
    let stats = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        (v[0], v[v.len() / 2], v[v.len() - 1])
    };
    let (p0, p1, p2) = stats(&mut pp);
    let (g0, g1, g2) = stats(&mut tg);
    println!("model {model}\nthreads {threads}, load {t_load:.2} s");
    println!("pp{n_prompt}: {p1:8.2} tok/s (min {p0:.2}, max {p2:.2})");
    println!("tg{n_gen}: {g1:8.2} tok/s (min {g0:.2}, max {g2:.2})");
    let (_, pc, _) = stats(&mut pp_cpu);
    let (_, gc, _) = stats(&mut tg_cpu);
    println!("cpu ms/token (all threads, median): pp {pc:.2}, tg {gc:.2}");
}
