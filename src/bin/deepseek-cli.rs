//! deepseek-cli: generate text from a GGUF model on the CPU (greedy decoding).
//!
//! Usage: deepseek-cli -m MODEL.gguf [-p PROMPT] [-n N_PREDICT] [-t THREADS] [-c N_CTX]
//! Uses the Rust API (model, context, tokenizer), not the C one.

use std::io::Write;
use std::sync::Arc;

use deepseek::batch::BatchInput;
use deepseek::context::{Context, ContextParams};
use deepseek::model::Model;

struct Args {
    model: String,
    prompt: String,
    n_predict: usize,
    threads: i32,
    n_ctx: u32,
}

fn usage() -> ! {
    eprintln!("usage: deepseek-cli -m MODEL.gguf [-p PROMPT] [-n N_PREDICT] [-t THREADS] [-c N_CTX]");
    std::process::exit(2)
}

fn parse_args() -> Args {
    let mut a = Args { model: String::new(), prompt: "The capital of France is".into(), n_predict: 64, threads: 2, n_ctx: 2048 };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| usage());
        match flag.as_str() {
            "-m" | "--model" => a.model = value(),
            "-p" | "--prompt" => a.prompt = value(),
            "-n" | "--n-predict" => a.n_predict = value().parse().unwrap_or_else(|_| usage()),
            "-t" | "--threads" => a.threads = value().parse().unwrap_or_else(|_| usage()),
            "-c" | "--ctx-size" => a.n_ctx = value().parse().unwrap_or_else(|_| usage()),
            _ => usage(),
        }
    }
    if a.model.is_empty() {
        usage();
    }
    a
}

fn run(a: &Args) -> Result<(), String> {
    let model = Arc::new(Model::load(std::path::Path::new(&a.model), true)?);
    let params = ContextParams {
        n_ctx: a.n_ctx,
        n_batch: 512,
        n_ubatch: 512,
        n_seq_max: 1,
        n_threads: a.threads,
        n_threads_batch: a.threads,
        rope_scaling: None,
        rope_freq_base: 0.0,
        rope_freq_scale: 0.0,
        yarn_ext_factor: -1.0,
        yarn_attn_factor: -1.0,
        yarn_beta_fast: -1.0,
        yarn_beta_slow: -1.0,
        yarn_orig_ctx: 0,
        embeddings: false,
        kv_unified: false,
    };
    let mut ctx = Context::new(Arc::clone(&model), &params)?;
    let vocab = &model.vocab;
    let mut tokens = Vec::new();
    vocab.tokenize(a.prompt.as_bytes(), true, true, &mut tokens);
    if tokens.is_empty() {
        return Err("the prompt tokenized to nothing".into());
    }
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(a.prompt.as_bytes());
    let _ = out.flush();
    let decode_err = |e| format!("decode failed: {e:?}");
    let t0 = std::time::Instant::now();
    for chunk in tokens.chunks(512) {
        ctx.decode(&BatchInput { tokens: chunk, pos: None, seq_ids: None, logits: None }, None).map_err(decode_err)?;
    }
    let t_prompt = t0.elapsed();
    let t1 = std::time::Instant::now();
    let mut piece = Vec::new();
    let mut generated = 0;
    for _ in 0..a.n_predict {
        let logits = ctx.logits_row(-1)?;
        let next = logits.iter().enumerate().fold(0, |b, (i, &x)| if x > logits[b] { i } else { b }) as i32;
        if vocab.is_eog(next) {
            break;
        }
        vocab.token_to_piece(next, 0, false, &mut piece);
        let _ = out.write_all(&piece);
        let _ = out.flush();
        generated += 1;
        ctx.decode(&BatchInput { tokens: &[next], pos: None, seq_ids: None, logits: None }, None).map_err(decode_err)?;
    }
    let t_gen = t1.elapsed();
    eprintln!(
        "\n\nprompt: {} tokens in {:.2} s ({:.1} tok/s); generation: {} tokens in {:.2} s ({:.1} tok/s)",
        tokens.len(),
        t_prompt.as_secs_f64(),
        tokens.len() as f64 / t_prompt.as_secs_f64(),
        generated,
        t_gen.as_secs_f64(),
        generated as f64 / t_gen.as_secs_f64().max(1e-9)
    );
    Ok(())
}

fn main() {
    let args = parse_args();
    if let Err(e) = run(&args) {
        eprintln!("deepseek-cli: {e}");
        std::process::exit(1);
    }
}
