//! deepseek-loadgen: the closed-loop streaming load of bench/serve.sh, for any
//! OpenAI-compatible server (deepseek-server, llama-server). C clients each send R streaming
//! `/v1/completions` requests one after another: a prompt of about P tokens of English words
//! (different for every request, so that no prompt cache helps), N tokens generated with `ignore_eos`. Measures
//! time to the first token, the gaps between tokens (each streamed chunk with text), the
//! tokens each request generated (the final chunk's `timings.predicted_n` when the server
//! reports it, else its chunks) and the wall time; prints one line of key=value. Every request
//! opens its own connection (servers differ in how long they keep idle ones).

use std::time::Instant;

use clap::Parser;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};

#[derive(Parser, Debug, Clone)]
#[command(name = "deepseek-loadgen", about = "Closed-loop streaming load against an OpenAI-compatible server")]
struct Args {
    /// Base URL, e.g. http://127.0.0.1:8080
    #[arg(long)]
    url: String,
    #[arg(long, default_value_t = 4)]
    clients: usize,
    /// Requests per client.
    #[arg(long, default_value_t = 2)]
    requests: usize,
    /// Prompt length in tokens.
    #[arg(long = "prompt-tokens", default_value_t = 128)]
    prompt_tokens: usize,
    #[arg(long = "max-tokens", default_value_t = 64)]
    max_tokens: usize,
    #[arg(long = "api-key")]
    api_key: Option<String>,
    /// Client i starts i × this many milliseconds after the first (0: all at once).
    #[arg(long = "stagger-ms", default_value_t = 0)]
    stagger_ms: u64,
}

#[derive(Default)]
struct Stats {
    ttft: Vec<f64>,
    itl: Vec<f64>,
    tokens: u64,
    errors: u64,
    first_error: Option<String>,
}

/// A prompt of about `n` tokens of plain English (common words, one token each in the usual
/// BPE vocabularies), different for every request — so that no prompt cache helps and the
/// model continues ordinary text (random token ids make it emit stray bytes of multi-byte
/// characters, which servers hold back until the character is whole).
fn prompt(client: usize, request: usize, n: usize) -> String {
    const WORDS: &[&str] = &[
        "the", "people", "of", "this", "town", "have", "always", "known", "that", "river", "would", "rise", "in", "spring", "and", "so", "they", "built",
        "their", "houses", "on", "hill", "above", "water", "where", "old", "road", "ran", "past", "mill", "school", "church", "market", "square", "every",
        "year", "children", "walked", "down", "to", "watch", "boats", "come", "back", "from", "sea", "with", "fish", "for", "evening", "meal",
    ];
    let mut x = (client as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (request as u64 + 1).wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
    let mut out = format!("Story {client}-{request}:");
    for _ in 0..n.saturating_sub(6) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.push(' ');
        out.push_str(WORDS[(x % WORDS.len() as u64) as usize]);
    }
    out
}

async fn one(client: &Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>, a: &Args, c: usize, r: usize, st: &mut Stats) -> Result<(), String> {
    let body = json!({
        "prompt": prompt(c, r, a.prompt_tokens),
        "max_tokens": a.max_tokens,
        "ignore_eos": true,
        "temperature": 0.8,
        "seed": (c * 1000 + r) as u64,
        "stream": true,
    });
    let mut req = hyper::Request::post(format!("{}/v1/completions", a.url)).header("content-type", "application/json");
    if let Some(k) = &a.api_key {
        req = req.header("authorization", format!("Bearer {k}"));
    }
    let req = req.body(Full::new(Bytes::from(body.to_string()))).map_err(|e| e.to_string())?;
    let t0 = Instant::now();
    let resp = client.request(req).await.map_err(|e| format!("request: {e}"))?;
    let status = resp.status();
    let mut body = resp.into_body();
    let mut buf: Vec<u8> = Vec::new();
    let (mut last, mut chunks, mut reported, mut done) = (None::<Instant>, 0u64, None::<u64>, false);
    let mut local_itl = Vec::new();
    let mut ttft = None;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| format!("body: {e}"))?;
        let Some(data) = frame.data_ref() else { continue };
        buf.extend_from_slice(data);
        while let Some(end) = buf.windows(2).position(|w| w == b"\n\n") {
            let event: Vec<u8> = buf.drain(..end + 2).collect();
            let line = String::from_utf8_lossy(&event);
            let Some(payload) = line.trim().strip_prefix("data: ") else { continue };
            if payload == "[DONE]" {
                done = true;
                continue;
            }
            let v: Value = serde_json::from_str(payload).map_err(|e| format!("bad chunk {payload}: {e}"))?;
            if v.get("error").is_some() {
                return Err(format!("error event: {payload}"));
            }
            if let Some(n) = v.pointer("/timings/predicted_n").and_then(Value::as_u64) {
                reported = Some(n);
            }
            let text = v.pointer("/choices/0/text").and_then(Value::as_str).unwrap_or("");
            if !text.is_empty() {
                let now = Instant::now();
                match last {
                    None => ttft = Some(now.duration_since(t0).as_secs_f64()),
                    Some(p) => local_itl.push(now.duration_since(p).as_secs_f64()),
                }
                last = Some(now);
                chunks += 1;
            }
        }
    }
    if !status.is_success() {
        return Err(format!("HTTP {status}: {}", String::from_utf8_lossy(&buf)));
    }
    if !done {
        return Err("the stream ended without [DONE]".into());
    }
    let n = reported.unwrap_or(chunks);
    if n != a.max_tokens as u64 {
        return Err(format!("generated {n} tokens, not {}", a.max_tokens));
    }
    if std::env::var_os("LOADGEN_GAPS").is_some() {
        let big: Vec<String> = local_itl.iter().enumerate().filter(|(_, &g)| g > 0.15).map(|(i, g)| format!("{}:{:.0}ms", i + 1, g * 1e3)).collect();
        if !big.is_empty() {
            eprintln!("client {c} request {r} t0+{:.2}s: gaps over 150 ms after token {}", t0.elapsed().as_secs_f64(), big.join(" "));
        }
    }
    st.ttft.extend(ttft);
    st.itl.extend(local_itl);
    st.tokens += n;
    Ok(())
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let i = ((p / 100.0) * (v.len() - 1) as f64).round() as usize;
    v[i.min(v.len() - 1)]
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let a = Args::parse();
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).pool_max_idle_per_host(0).build_http();
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..a.clients {
        let (client, a) = (client.clone(), a.clone());
        tasks.push(tokio::spawn(async move {
            let mut st = Stats::default();
            tokio::time::sleep(std::time::Duration::from_millis(a.stagger_ms * c as u64)).await;
            for r in 0..a.requests {
                if let Err(e) = one(&client, &a, c, r, &mut st).await {
                    st.errors += 1;
                    st.first_error.get_or_insert(e);
                }
            }
            st
        }));
    }
    let mut all = Stats::default();
    for t in tasks {
        let st = t.await.expect("client task");
        all.ttft.extend(st.ttft);
        all.itl.extend(st.itl);
        all.tokens += st.tokens;
        all.errors += st.errors;
        if all.first_error.is_none() {
            all.first_error = st.first_error;
        }
    }
    let wall = t0.elapsed().as_secs_f64();
    if let Some(e) = &all.first_error {
        eprintln!("deepseek-loadgen: {} failed requests; the first: {e}", all.errors);
    }
    println!(
        "clients={} requests={} tokens={} wall_s={:.3} tok_s={:.2} ttft_p50_ms={:.1} ttft_p99_ms={:.1} itl_p50_ms={:.2} itl_p99_ms={:.2} errors={}",
        a.clients,
        a.clients * a.requests,
        all.tokens,
        wall,
        all.tokens as f64 / wall,
        pct(&mut all.ttft, 50.0) * 1e3,
        pct(&mut all.ttft, 99.0) * 1e3,
        pct(&mut all.itl, 50.0) * 1e3,
        pct(&mut all.itl, 99.0) * 1e3,
        all.errors
    );
}
