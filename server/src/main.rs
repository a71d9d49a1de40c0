//! deepseek-server: an OpenAI-compatible HTTP server on deepseek's serving engine
//! (`deepseek::engine`). The HTTP side is tokio + axum; every request becomes one engine
//! request whose callback (on the engine's decode thread) only pushes into an unbounded
//! channel, so the decode loop never waits for a client. Flags follow llama-server's names.
//! Exit codes: 0 after a clean shutdown (SIGINT/SIGTERM), 1 on a runtime failure, 2 on bad
//! arguments or a missing model.

#[path = "../../cli/src/fetch.rs"]
mod fetch;

mod api;
mod error;
mod metrics;
mod params;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use clap::Parser;

use deepseek::chat;
use deepseek::engine::{Engine, EngineParams};
use deepseek::kv::CacheType;
use deepseek::model::Model;

#[derive(Parser, Debug, Clone)]
#[command(
    name = "deepseek-server",
    version,
    about = "An OpenAI-compatible HTTP server for GGUF models on the CPU (deepseek's serving engine).",
    after_help = "Endpoints: POST /v1/chat/completions, POST /v1/completions, GET /v1/models, GET /health, GET /metrics (with --metrics), POST /tokenize, POST /detokenize.\nllama-server's two-letter flags are accepted: -np (--parallel), -ub (--ubatch-size), -to (--timeout), -ctk/-ctv (--cache-type-k/-v)."
)]
pub struct Args {
    /// A .gguf file, or a known name fetched on first use: smollm2-135m, qwen2.5-coder-0.5b, qwen2.5-coder-1.5b
    #[arg(short = 'm', long = "model", value_name = "MODEL|NAME")]
    pub model: String,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Requests decoded at once (slots); also -np.
    #[arg(long = "parallel", value_name = "N", default_value_t = 4)]
    pub parallel: u32,
    /// Total context in tokens (the KV pool the slots share, as llama-server's unified KV);
    /// 0: the model's training context.
    #[arg(short = 'c', long = "ctx-size", value_name = "N", default_value_t = 0)]
    pub ctx_size: u32,
    /// Each slot its own ctx-size / parallel cells instead of one shared pool.
    #[arg(long = "no-kv-unified")]
    pub no_kv_unified: bool,
    /// The most cells one slot may take from the shared pool; 0: all of it.
    #[arg(long = "kv-unified-per-slot", value_name = "N", default_value_t = 0)]
    pub kv_unified_per_slot: u32,
    /// Worker threads of the model (default: the CPU's cores).
    #[arg(short = 't', long = "threads", value_name = "N")]
    pub threads: Option<i32>,
    /// Tokens per decode step at most.
    #[arg(short = 'b', long = "batch-size", value_name = "N", default_value_t = 2048)]
    pub batch_size: u32,
    /// Tokens per micro-batch; also -ub.
    #[arg(long = "ubatch-size", value_name = "N", default_value_t = 512)]
    pub ubatch_size: u32,
    /// Require `Authorization: Bearer KEY` on every endpoint but /health (or LLAMA_API_KEY).
    #[arg(long = "api-key", value_name = "KEY", env = "LLAMA_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Serve Prometheus metrics at /metrics.
    #[arg(long)]
    pub metrics: bool,
    /// A built-in template name (chatml, deepseek3, llama3, ...; formatted without Jinja, as
    /// llama-server's built-ins) or a Jinja template's text; default: the model's own.
    #[arg(long = "chat-template", value_name = "NAME|TEMPLATE")]
    pub chat_template: Option<String>,
    /// A file holding the Jinja chat template to use instead of the model's.
    #[arg(long = "chat-template-file", value_name = "FILE")]
    pub chat_template_file: Option<PathBuf>,
    /// Render chats with the Jinja template (the model's, or --chat-template-file's); the
    /// default, as in llama-server.
    #[arg(long = "jinja", overrides_with = "no_jinja")]
    pub jinja: bool,
    /// Format chats with the built-in template the model's template is recognized as, instead
    /// of rendering its Jinja.
    #[arg(long = "no-jinja", overrides_with = "jinja")]
    pub no_jinja: bool,
    /// A JSON object of extra variables for every render of the template (a request's
    /// chat_template_kwargs are added to them), e.g. '{"enable_thinking": false}'.
    #[arg(long = "chat-template-kwargs", value_name = "JSON", value_parser = kwargs_object)]
    pub chat_template_kwargs: Option<serde_json::Map<String, serde_json::Value>>,
    /// A trailing assistant message is continued (the default, as llama-server's); with this,
    /// it is a finished turn.
    #[arg(long = "no-prefill-assistant")]
    pub no_prefill_assistant: bool,
    /// Tokens to generate when a request gives no max_tokens; -1: until the context is full.
    #[arg(short = 'n', long = "n-predict", value_name = "N", default_value_t = -1, allow_negative_numbers = true)]
    pub n_predict: i32,
    /// How <think> sections are returned: deepseek (as reasoning_content), none (inline), auto
    /// (deepseek when the model's template has think sections).
    #[arg(long = "reasoning-format", value_name = "FORMAT", default_value = "auto", value_parser = ["auto", "deepseek", "deepseek-legacy", "none"])]
    pub reasoning_format: String,
    /// Tokens of thinking a chat answer may take before its end is forced (requests set it with
    /// reasoning_budget_tokens); -1: unlimited, 0: none.
    #[arg(long = "reasoning-budget", value_name = "N", default_value_t = -1, allow_negative_numbers = true, value_parser = clap::value_parser!(i64).range(-1..))]
    pub reasoning_budget: i64,
    /// Seconds to wait for a request's body, and for in-flight requests at shutdown; also -to.
    #[arg(long = "timeout", value_name = "SECONDS", default_value_t = 600)]
    pub timeout: u64,
    /// Largest request body in bytes.
    #[arg(long = "body-limit", value_name = "BYTES", default_value_t = 8 << 20)]
    pub body_limit: usize,
    /// How much longer than a step of generating sequences alone a step may take when it also
    /// computes prompt tokens (the engine's max_step_slowdown; 0: only --prefill-chunk limits).
    #[arg(long = "max-step-slowdown", value_name = "X", default_value_t = 1.5)]
    pub max_step_slowdown: f32,
    /// Most prompt tokens one step takes while other requests generate.
    #[arg(long = "prefill-chunk", value_name = "N", default_value_t = 512)]
    pub prefill_chunk: u32,
    /// Requests waiting for a slot beyond which new ones get 503.
    #[arg(long = "queue-limit", value_name = "N", default_value_t = 256)]
    pub queue_limit: u32,
    /// The model's name in responses and /v1/models (default: the file's name).
    #[arg(short = 'a', long = "alias", value_name = "NAME")]
    pub alias: Option<String>,
    /// Read the model into memory instead of mapping it.
    #[arg(long = "no-mmap")]
    pub no_mmap: bool,
    /// KV cache type of the keys: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl; also -ctk.
    #[arg(long = "cache-type-k", value_name = "TYPE", default_value = "f16", value_parser = cache_type)]
    pub cache_type_k: CacheType,
    /// KV cache type of the values (as --cache-type-k); also -ctv.
    #[arg(long = "cache-type-v", value_name = "TYPE", default_value = "f16", value_parser = cache_type)]
    pub cache_type_v: CacheType,
}

/// `--chat-template-kwargs`: a JSON object.
fn kwargs_object(text: &str) -> Result<serde_json::Map<String, serde_json::Value>, String> {
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(serde_json::Value::Object(m)) => Ok(m),
        Ok(_) => Err("must be a JSON object".into()),
        Err(e) => Err(format!("not valid JSON: {e}")),
    }
}

/// A KV cache type by ggml's name, as llama-server's --cache-type-k/-v take it.
fn cache_type(name: &str) -> Result<CacheType, String> {
    CacheType::by_name(name).ok_or_else(|| format!("unsupported cache type '{name}' (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl)"))
}

/// llama-server's multi-letter short flags, rewritten to their long names for clap.
fn rewrite_args(argv: impl Iterator<Item = String>) -> Vec<String> {
    argv.map(|a| match a.as_str() {
        "-np" => "--parallel".to_string(),
        "-ub" => "--ubatch-size".to_string(),
        "-to" => "--timeout".to_string(),
        "-ctk" => "--cache-type-k".to_string(),
        "-ctv" => "--cache-type-v".to_string(),
        _ => a,
    })
    .collect()
}

/// What the handlers share.
pub struct App {
    pub args: Args,
    /// Set once the model is loaded and the engine runs (/health turns 200).
    pub ready: OnceLock<Ready>,
    /// SIGINT/SIGTERM arrived: new generation requests get 503.
    pub closing: AtomicBool,
    pub started: Instant,
    pub created: u64,
    next_id: AtomicU64,
    pub stats: ServerStats,
}

/// The server's own counters (/metrics).
#[derive(Default)]
pub struct ServerStats {
    pub requests: AtomicU64,
    pub errors: AtomicU64,
    pub streams_open: std::sync::atomic::AtomicI64,
    pub disconnects: AtomicU64,
}

pub struct Ready {
    pub engine: Arc<Engine>,
    pub model: Arc<Model>,
    pub name: String,
    pub template: chat::Template,
    /// The Jinja template chats are rendered with (None: `--no-jinja` or a built-in name).
    pub jinja: Option<deepseek_chat::template::ChatTemplate>,
    /// Split `<think>` sections off by default.
    pub reasoning: bool,
    /// Control tokens that are chat-format markers (`</think>`, tool-call tags): their text is
    /// output, as llama-server outputs its preserved tokens, so that answers can be parsed.
    pub preserved: Vec<(i32, Vec<u8>)>,
    /// The template for requests with tools, when the model has one of its own.
    pub jinja_tool_use: Option<deepseek_chat::template::ChatTemplate>,
}

impl App {
    pub fn ready(&self) -> Result<&Ready, error::ApiError> {
        self.ready.get().ok_or_else(|| error::ApiError::unavailable("Loading model"))
    }

    /// A response id: unique in this process, not guessable across restarts.
    pub fn next_id(&self, prefix: &str) -> String {
        let n = self.next_id.fetch_add(1, Ordering::Relaxed);
        format!("{prefix}-{:x}{n:06x}", self.created.wrapping_mul(0x9E37_79B9) & 0xffff_ffff)
    }
}

/// The chat-format markers that are one control token in this vocabulary (whose output piece
/// is otherwise empty).
fn preserved_tokens(engine: &Engine, model: &Model) -> Vec<(i32, Vec<u8>)> {
    let mut out = Vec::new();
    for m in deepseek_chat::tools::MARKERS {
        let mut t = Vec::new();
        model.vocab.tokenize(m.as_bytes(), false, true, &mut t);
        if let [id] = t[..] {
            if engine.piece(id).is_empty() && !out.iter().any(|(x, _)| *x == id) {
                out.push((id, m.as_bytes().to_vec()));
            }
        }
    }
    out
}

/// A Jinja template compiled with the vocabulary's BOS / EOS texts; `from` names it in errors.
fn compile(model: &Model, source: &str, from: &str) -> Result<deepseek_chat::template::ChatTemplate, String> {
    let v = &model.vocab;
    deepseek_chat::template::ChatTemplate::new(source, &v.template_text(v.bos()), &v.template_text(v.eos()), v.add_bos(), v.add_eos()).map_err(|e| format!("{from} is not a usable Jinja template: {e}"))
}

/// The Jinja template: --chat-template-file, a --chat-template that is Jinja text, or the
/// model's own (chatml's when it has none), as llama-server picks it with --jinja.
fn choose_jinja(args: &Args, model: &Model) -> Result<Option<deepseek_chat::template::ChatTemplate>, String> {
    if args.no_jinja {
        return Ok(None);
    }
    let (source, from) = if let Some(path) = &args.chat_template_file {
        (std::fs::read_to_string(path).map_err(|e| format!("--chat-template-file {}: {e}", path.display()))?, format!("--chat-template-file {}", path.display()))
    } else if let Some(spec) = &args.chat_template {
        if chat::builtin_names().any(|n| n == spec) {
            // A built-in name: formatted by the built-in, as llama-server's legacy names.
            return Ok(None);
        }
        (spec.clone(), "--chat-template".to_string())
    } else if let Some(t) = model.file.get_str("tokenizer.chat_template") {
        (t.to_string(), "the model's chat template".to_string())
    } else {
        (deepseek_chat::template::CHATML.to_string(), "chatml (the model has no template)".to_string())
    };
    compile(model, &source, &from).map(Some)
}

/// The model's `tokenizer.chat_template.tool_use` variant, which renders requests that offer
/// tools (as llama-server picks it), unless a template was given on the command line.
fn choose_tool_use(args: &Args, model: &Model) -> Result<Option<deepseek_chat::template::ChatTemplate>, String> {
    if args.no_jinja || args.chat_template_file.is_some() || args.chat_template.is_some() {
        return Ok(None);
    }
    let Some(source) = model.file.get_str("tokenizer.chat_template.tool_use") else { return Ok(None) };
    compile(model, source, "the model's tool_use chat template").map(Some)
}

fn choose_template(args: &Args, model: &Model) -> Result<(chat::Template, bool), String> {
    let model_text = model.file.get_str("tokenizer.chat_template").map(str::to_string);
    let (text, from) = match &args.chat_template {
        Some(spec) if !args.no_jinja && chat::detect(spec).is_none() => (spec.clone(), "--chat-template"),
        Some(spec) if chat::detect(spec).is_some() && !PathBuf::from(spec).is_file() => (spec.clone(), "--chat-template"),
        Some(spec) => (std::fs::read_to_string(spec).map_err(|e| format!("--chat-template {spec}: neither a built-in name ({}) nor a readable file: {e}", chat::builtin_names().collect::<Vec<_>>().join(", ")))?, "--chat-template file"),
        None => match &model_text {
            Some(t) => (t.clone(), "the model's template"),
            None => ("chatml".to_string(), "the default"),
        },
    };
    let t = match chat::detect(&text) {
        Some(t) => t,
        None if args.chat_template.is_some() => return Err(format!("{from} is not a template this server recognizes; use one of: {}", chat::builtin_names().collect::<Vec<_>>().join(", "))),
        None => {
            eprintln!("deepseek-server: the model's chat template is not one this server recognizes; using chatml");
            chat::Template::ChatMl
        }
    };
    let think = chat::has_think_section(&text) || matches!(t, chat::Template::Deepseek3);
    let reasoning = match args.reasoning_format.as_str() {
        "deepseek" | "deepseek-legacy" => true,
        "none" => false,
        _ => think,
    };
    Ok((t, reasoning))
}

fn load(app: &App, path: PathBuf) -> Result<Ready, String> {
    let a = &app.args;
    let t0 = Instant::now();
    // For the tests of /health while loading: a load that takes at least this long.
    if let Some(ms) = std::env::var("DEEPSEEK_SERVER_TEST_LOAD_DELAY_MS").ok().and_then(|v| v.parse::<u64>().ok()) {
        std::thread::sleep(Duration::from_millis(ms));
    }
    let model = Arc::new(Model::load(&path, !a.no_mmap).map_err(|e| format!("{}: {e}", path.display()))?);
    let jinja = choose_jinja(a, &model)?;
    let (template, mut reasoning) = match choose_template(a, &model) {
        Ok(t) => t,
        // The Jinja template is what formats chats; the built-in is only the fallback name.
        Err(_) if jinja.is_some() => (chat::Template::ChatMl, false),
        Err(e) => return Err(e),
    };
    if let Some(j) = &jinja {
        if a.reasoning_format == "auto" {
            reasoning = j.think_tags().is_some();
        }
    }
    let parallel = a.parallel.max(1);
    let params = EngineParams {
        n_seq_max: parallel,
        kv_unified: !a.no_kv_unified,
        n_ctx: if a.ctx_size == 0 { model.hp.n_ctx_train.max(256) } else { a.ctx_size.max(256 * if a.no_kv_unified { parallel } else { 1 }) },
        kv_unified_per_slot: a.kv_unified_per_slot,
        n_batch: a.batch_size.max(parallel),
        n_ubatch: a.ubatch_size.max(1),
        n_threads: a.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(4, |n| n.get() as i32)),
        queue_limit: a.queue_limit.max(1),
        max_step_slowdown: a.max_step_slowdown.max(0.0),
        prefill_chunk: a.prefill_chunk.max(1),
        type_k: a.cache_type_k,
        type_v: a.cache_type_v,
        ..EngineParams::default()
    };
    let engine = Arc::new(Engine::new(model.clone(), &params)?);
    let name = a.alias.clone().unwrap_or_else(|| path.file_name().map_or_else(|| a.model.clone(), |n| n.to_string_lossy().into_owned()));
    eprintln!(
        "deepseek-server: {} loaded in {:.2} s ({} MiB); {} slots of {} tokens, {} threads, chat template {}, reasoning {}",
        path.display(),
        t0.elapsed().as_secs_f64(),
        model.size_bytes >> 20,
        engine.n_seq_max(),
        engine.n_ctx_seq(),
        params.n_threads,
        template.name(),
        if reasoning { "as reasoning_content" } else { "inline" }
    );
    if let Some(j) = &jinja {
        eprintln!("deepseek-server: chats rendered by the Jinja template ({} bytes); capabilities {}", j.source().len(), j.caps.to_json());
    }
    let preserved = preserved_tokens(&engine, &model);
    let jinja_tool_use = choose_tool_use(a, &model)?;
    Ok(Ready { engine, model, name, template, jinja, reasoning, preserved, jinja_tool_use })
}

async fn shutdown_signal(app: Arc<App>) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut int), Ok(mut term)) = (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) else {
        eprintln!("deepseek-server: cannot install the signal handlers");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = int.recv() => {}
        _ = term.recv() => {}
    }
    eprintln!("deepseek-server: shutting down: no new requests; waiting up to {} s for those in flight", app.args.timeout);
    app.closing.store(true, Ordering::SeqCst);
    let app2 = app.clone();
    // Past the grace period, the engine ends what is still running (clients see a final
    // chunk with finish_reason "cancelled" or an error), so that the server always exits.
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(app2.args.timeout)).await;
        if let Some(r) = app2.ready.get() {
            eprintln!("deepseek-server: cancelling the requests still running");
            let e = r.engine.clone();
            let _ = tokio::task::spawn_blocking(move || e.shutdown()).await;
        }
    });
}

fn main() {
    let args = match Args::try_parse_from(rewrite_args(std::env::args())) {
        Ok(a) => a,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            std::process::exit(code);
        }
    };
    // Resolve (and fetch) the model before listening, so a bad name fails fast.
    let path = match fetch::resolve(&args.model, false) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("deepseek-server: {e}");
            std::process::exit(2);
        }
    };
    let created = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let app = Arc::new(App { args, ready: OnceLock::new(), closing: AtomicBool::new(false), started: Instant::now(), created, next_id: AtomicU64::new(1), stats: ServerStats::default() });
    // Two runtime threads: the HTTP side is light next to the model's threads, and blocking
    // work (tokenizing a long prompt) still leaves one free.
    let rt = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("deepseek-server: cannot start the runtime: {e}");
            std::process::exit(1);
        }
    };
    let code = rt.block_on(serve(app.clone(), path));
    // The engine (its decode thread, context and the model's mapping) is freed here.
    drop(app);
    drop(rt);
    std::process::exit(code);
}

async fn serve(app: Arc<App>, path: PathBuf) -> i32 {
    let addr: SocketAddr = match format!("{}:{}", app.args.host, app.args.port).parse().or_else(|_| {
        use std::net::ToSocketAddrs;
        (app.args.host.as_str(), app.args.port).to_socket_addrs().map_err(|e| e.to_string()).and_then(|mut a| a.next().ok_or_else(|| "no address".to_string()))
    }) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("deepseek-server: bad --host {}: {e}", app.args.host);
            return 2;
        }
    };
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("deepseek-server: cannot listen on {addr}: {e}");
            return 1;
        }
    };
    eprintln!("deepseek-server: listening on http://{}", listener.local_addr().map_or(addr, |a| a));
    // Load while already answering /health (503 until ready); a failed load ends the server.
    let (failed_tx, failed_rx) = tokio::sync::oneshot::channel::<String>();
    {
        let app = app.clone();
        tokio::task::spawn_blocking(move || match load(&app, path) {
            Ok(r) => {
                let _ = app.ready.set(r);
            }
            Err(e) => {
                let _ = failed_tx.send(e);
            }
        });
    }
    let load_failed = Arc::new(AtomicBool::new(false));
    let stop = {
        let (app, load_failed) = (app.clone(), load_failed.clone());
        async move {
            let failed = async {
                match failed_rx.await {
                    Ok(e) => {
                        eprintln!("deepseek-server: {e}");
                        load_failed.store(true, Ordering::SeqCst);
                    }
                    // Loaded: the sender is gone without a word; wait for a signal only.
                    Err(_) => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                _ = shutdown_signal(app) => {}
                _ = failed => {}
            }
        }
    };
    let router = api::router(app.clone());
    // TCP_NODELAY: a stream's chunks are small writes; with Nagle's algorithm each would wait
    // for the client's (delayed) ACK of the previous one.
    use axum::serve::ListenerExt;
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    if let Err(e) = axum::serve(listener, router).with_graceful_shutdown(stop).await {
        eprintln!("deepseek-server: {e}");
        return 1;
    }
    if load_failed.load(Ordering::SeqCst) {
        return 1;
    }
    eprintln!("deepseek-server: stopped");
    0
}
