//! deepseek-server: an OpenAI-compatible HTTP server on deepseek's serving engine
//! (`deepseek::engine`). The HTTP side is tokio + axum; every request becomes one engine
//! request whose callback (on the engine's decode thread) only pushes into an unbounded
//! channel, so the decode loop never waits for a client. Flags follow llama-server's names.
//! Exit codes: 0 after a clean shutdown (SIGINT/SIGTERM), 1 on a runtime failure, 2 on bad
//! arguments or a missing model.

#[path = "../../cli/src/fetch.rs"]
mod fetch;

// The Anthropic Messages and OpenAI Responses conversions, not yet wired to routes.
mod anthropic;
mod api;
mod args;
mod embed;
mod error;
mod fields;
mod flags;
mod infill;
mod metrics;
mod params;
mod responses;
mod slots;
mod webui;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use clap::Parser;

pub use args::Args;

use deepseek::chat;
use deepseek::engine::{Engine, EngineParams};
use deepseek::model::Model;

/// What the handlers share.
pub struct App {
    pub args: Args,
    /// --api-key's and --api-key-file's keys (none: no key is asked for).
    pub keys: Vec<String>,
    /// The template variables of every render (--chat-template-kwargs, --reasoning, ...).
    pub kwargs: serde_json::Map<String, serde_json::Value>,
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
    /// The embeddings context's thread (--embedding, --rerank), beside the engine.
    pub embed: Option<embed::Embedder>,
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
    if !args.jinja {
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
    if !args.jinja || args.chat_template_file.is_some() || args.chat_template.is_some() {
        return Ok(None);
    }
    let Some(source) = model.file.get_str("tokenizer.chat_template.tool_use") else { return Ok(None) };
    compile(model, source, "the model's tool_use chat template").map(Some)
}

fn choose_template(args: &Args, model: &Model) -> Result<(chat::Template, bool), String> {
    let model_text = model.file.get_str("tokenizer.chat_template").map(str::to_string);
    let (text, from) = match &args.chat_template {
        Some(spec) if !!args.jinja && chat::detect(spec).is_none() => (spec.clone(), "--chat-template"),
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
    let (mmap, mlock) = a.load_mode();
    let model = Arc::new(Model::load(&path, mmap).map_err(|e| format!("{}: {e}", path.display()))?);
    if mlock {
        model.file.lock_memory().map_err(|e| format!("{}: {e}", path.display()))?;
        if let Some(p) = &model.packed {
            p.lock().map_err(|e| format!("{}: {e}", path.display()))?;
        }
    }
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
    let (parallel, unified) = a.slots();
    let params = EngineParams {
        n_seq_max: parallel,
        kv_unified: unified,
        n_ctx: if a.ctx_size == 0 { model.hp.n_ctx_train.max(256) } else { a.ctx_size.max(256 * if unified { 1 } else { parallel }) },
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
    let name = a.aliases().into_iter().next().unwrap_or_else(|| path.file_name().map_or_else(|| a.model.clone(), |n| n.to_string_lossy().into_owned()));
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
    let embed = embed::Embedder::start(a, &model, engine.n_ctx_seq())?;
    Ok(Ready { engine, model, name, template, jinja, reasoning, preserved, jinja_tool_use, embed })
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
    let env: std::collections::HashMap<String, String> = std::env::vars().collect();
    let rewritten = match flags::rewrite(std::env::args().collect(), &env) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("deepseek-server: {e}");
            std::process::exit(1);
        }
    };
    let args = match Args::try_parse_from(&rewritten.args) {
        Ok(a) => a,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            std::process::exit(code);
        }
    };
    for (given, why) in &rewritten.no_effect {
        eprintln!("deepseek-server: {given}: accepted, no effect: {why}");
    }
    if args.list_devices {
        println!("Available devices:\n  CPU: the host's {} cores (the only device this server computes on)", std::thread::available_parallelism().map_or(1, |n| n.get()));
        std::process::exit(0);
    }
    let keys = match args.api_keys() {
        Ok(k) => k,
        Err(e) => {
            eprintln!("deepseek-server: {e}");
            std::process::exit(1);
        }
    };
    // The key and certificate are read before the model, so that a bad file fails fast.
    let tls = match tls_acceptor(&args) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("deepseek-server: {e}");
            std::process::exit(1);
        }
    };
    let kwargs = args.template_kwargs();
    if let Err(e) = args.sampling.base() {
        eprintln!("deepseek-server: {e}");
        std::process::exit(1);
    }
    // Resolve (and fetch) the model before listening, so a bad name fails fast.
    let path = match fetch::resolve(&args.model, false) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("deepseek-server: {e}");
            std::process::exit(2);
        }
    };
    let created = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let app = Arc::new(App { args, keys, kwargs, ready: OnceLock::new(), closing: AtomicBool::new(false), started: Instant::now(), created, next_id: AtomicU64::new(1), stats: ServerStats::default() });
    // Two runtime threads: the HTTP side is light next to the model's threads, and blocking
    // work (tokenizing a long prompt) still leaves one free.
    let http_threads = if app.args.threads_http > 0 { app.args.threads_http as usize } else { 2 };
    let rt = match tokio::runtime::Builder::new_multi_thread().worker_threads(http_threads).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("deepseek-server: cannot start the runtime: {e}");
            std::process::exit(1);
        }
    };
    let code = rt.block_on(serve(app.clone(), path, tls));
    // The engine (its decode thread, context and the model's mapping) is freed here.
    drop(app);
    drop(rt);
    std::process::exit(code);
}

/// How long a TLS client may take over its handshake: a connection that opens and sends
/// nothing (or stalls mid-handshake) is closed then rather than holding a task.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The TLS acceptor of --ssl-key-file and --ssl-cert-file (None: plain HTTP). Both are needed
/// (llama-server, given one, serves plain HTTP without a word; here it is an error); a file
/// that cannot be read, holds no PEM key or certificate, or a key that is not the
/// certificate's, is an error that names the file.
fn tls_acceptor(args: &Args) -> Result<Option<tokio_rustls::TlsAcceptor>, String> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let (key_path, cert_path) = match (&args.ssl_key_file, &args.ssl_cert_file) {
        (None, None) => return Ok(None),
        (Some(k), Some(c)) => (k, c),
        (Some(k), None) => return Err(format!("--ssl-key-file {} needs --ssl-cert-file (the certificate that goes with the key) to serve HTTPS", k.display())),
        (None, Some(c)) => return Err(format!("--ssl-cert-file {} needs --ssl-key-file (the certificate's private key) to serve HTTPS", c.display())),
    };
    let key_pem = std::fs::read(key_path).map_err(|e| format!("--ssl-key-file {}: {e}", key_path.display()))?;
    let cert_pem = std::fs::read(cert_path).map_err(|e| format!("--ssl-cert-file {}: {e}", cert_path.display()))?;
    const ENCRYPTED: &[u8] = b"-----BEGIN ENCRYPTED PRIVATE KEY-----";
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| match e {
        // No password can be given (llama-server passes OpenSSL none either).
        _ if key_pem.windows(ENCRYPTED.len()).any(|w| w == ENCRYPTED) => format!("--ssl-key-file {}: an encrypted private key is not supported (decrypt it: openssl pkey -in KEY -out KEY.plain)", key_path.display()),
        rustls_pki_types::pem::Error::NoItemsFound => format!("--ssl-key-file {}: no PEM private key (BEGIN PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY)", key_path.display()),
        e => format!("--ssl-key-file {}: {e}", key_path.display()),
    })?;
    let certs = CertificateDer::pem_slice_iter(&cert_pem).collect::<Result<Vec<_>, _>>().map_err(|e| format!("--ssl-cert-file {}: {e}", cert_path.display()))?;
    if certs.is_empty() {
        return Err(format!("--ssl-cert-file {}: no PEM certificate (BEGIN CERTIFICATE)", cert_path.display()));
    }
    // ring's provider: it builds with a C compiler alone (aws-lc-rs, whose key exchange adds
    // post-quantum X25519MLKEM768 and for lacking which rustls marks this one deprecated,
    // needs a heavier native build); key exchange is X25519 / P-256 / P-384.
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_no_client_auth()
        // Checks that the key is the certificate's (its public key is the certificate's).
        .with_single_cert(certs, key)
        .map_err(|e| match e {
            rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch) => format!("--ssl-key-file {} with --ssl-cert-file {}: the key is not the certificate's (the first certificate in the file is the server's)", key_path.display(), cert_path.display()),
            rustls::Error::InvalidCertificate(e) => format!("--ssl-cert-file {}: the server's certificate (the first in the file) is not a valid X.509 certificate: {e:?}", cert_path.display()),
            e => format!("--ssl-key-file {} with --ssl-cert-file {}: {e}", key_path.display(), cert_path.display()),
        })?;
    // HTTP/1.1 only, as the connections are served (a client offering only h2 is refused in
    // the handshake, as ALPN says).
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Some(tokio_rustls::TlsAcceptor::from(Arc::new(config))))
}

/// A listening socket: TCP, or a Unix socket for a host ending in `.sock` (as llama-server).
enum Listener {
    Tcp(tokio::net::TcpListener),
    Unix(tokio::net::UnixListener, PathBuf),
}

/// Binds one of --host's comma-separated addresses.
fn bind(host: &str, port: u16, reuse_port: bool) -> Result<Listener, String> {
    if host.ends_with(".sock") {
        let path = PathBuf::from(host);
        let l = tokio::net::UnixListener::bind(&path).map_err(|e| format!("cannot listen on {host}: {e}"))?;
        return Ok(Listener::Unix(l, path));
    }
    let bare = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    let addr: SocketAddr = match bare.parse::<std::net::IpAddr>() {
        Ok(ip) => SocketAddr::new(ip, port),
        Err(_) => {
            use std::net::ToSocketAddrs;
            (bare, port).to_socket_addrs().map_err(|e| format!("bad --host {host}: {e}"))?.next().ok_or_else(|| format!("bad --host {host}: no address"))?
        }
    };
    let sock = if addr.is_ipv4() { tokio::net::TcpSocket::new_v4() } else { tokio::net::TcpSocket::new_v6() }.map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let _ = sock.set_reuseaddr(true);
    if reuse_port {
        sock.set_reuseport(true).map_err(|e| format!("--reuse-port on {addr}: {e}"))?;
    }
    sock.bind(addr).map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    sock.listen(1024).map(Listener::Tcp).map_err(|e| format!("cannot listen on {addr}: {e}"))
}

/// Serves one listener until `stop` turns true, then waits for its open connections (their
/// in-flight requests) to end. hyper's HTTP/1 connection builder directly, rather than
/// `axum::serve`, for its options: header names go out in Title-Case as llama-server's
/// (cpp-httplib) do, which clients that compare names case-sensitively rely on.
/// With `tls`, each TCP connection is served over TLS once its handshake is done (within
/// TLS_HANDSHAKE_TIMEOUT, in the connection's own task, so a slow one delays no other).
async fn accept_loop(l: Listener, router: axum::Router, tls: Option<tokio_rustls::TlsAcceptor>, verbose: bool, mut stop: tokio::sync::watch::Receiver<bool>) -> Result<(), String> {
    use hyper_util::rt::TokioIo;
    use hyper_util::service::TowerToHyperService;
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.title_case_headers(true);
    let unix_path = if let Listener::Unix(_, p) = &l { Some(p.clone()) } else { None };
    let handshake_stop = stop.clone();
    let mut stopped = std::pin::pin!(async move {
        let _ = stop.wait_for(|s| *s).await;
    });
    loop {
        let svc = TowerToHyperService::new(router.clone());
        tokio::select! {
            _ = &mut stopped => break,
            c = async {
                match &l {
                    // TCP_NODELAY: a stream's chunks are small writes; with Nagle's algorithm
                    // each would wait for the client's (delayed) ACK of the previous one.
                    Listener::Tcp(t) => t.accept().await.map(|(s, peer)| {
                        let _ = s.set_nodelay(true);
                        Conn::Tcp(s, peer)
                    }),
                    Listener::Unix(u, _) => u.accept().await.map(|(s, _)| Conn::Unix(s)),
                }
            } => match c {
                Ok(Conn::Tcp(s, peer)) => match &tls {
                    None => {
                        let conn = graceful.watch(http.serve_connection(TokioIo::new(s), svc));
                        tokio::spawn(async move {
                            let _ = conn.await;
                        });
                    }
                    Some(acceptor) => {
                        // Watched from the accept on, so that shutdown waits for a connection
                        // whose handshake is under way; that handshake ends at shutdown.
                        let watcher = graceful.watcher();
                        let (handshake, http) = (acceptor.accept(s), http.clone());
                        let mut stop = handshake_stop.clone();
                        tokio::spawn(async move {
                            let s = tokio::select! {
                                r = tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, handshake) => match r {
                                    Ok(Ok(s)) => s,
                                    Ok(Err(e)) => {
                                        if verbose {
                                            eprintln!("deepseek-server: TLS handshake with {peer}: {e}");
                                        }
                                        return;
                                    }
                                    Err(_) => {
                                        if verbose {
                                            eprintln!("deepseek-server: TLS handshake with {peer}: none within {} s; closed", TLS_HANDSHAKE_TIMEOUT.as_secs());
                                        }
                                        return;
                                    }
                                },
                                _ = stop.wait_for(|s| *s) => return,
                            };
                            let _ = watcher.watch(http.serve_connection(TokioIo::new(s), svc)).await;
                        });
                    }
                },
                Ok(Conn::Unix(s)) => {
                    let conn = graceful.watch(http.serve_connection(TokioIo::new(s), svc));
                    tokio::spawn(async move {
                        let _ = conn.await;
                    });
                }
                // Out of descriptors or a connection reset before it was accepted: keep going.
                Err(e) => {
                    eprintln!("deepseek-server: accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
    }
    drop(l);
    graceful.shutdown().await;
    if let Some(p) = unix_path {
        let _ = std::fs::remove_file(p);
    }
    Ok(())
}

enum Conn {
    Tcp(tokio::net::TcpStream, SocketAddr),
    Unix(tokio::net::UnixStream),
}

async fn serve(app: Arc<App>, path: PathBuf, tls: Option<tokio_rustls::TlsAcceptor>) -> i32 {
    let hosts: Vec<&str> = app.args.host.split(',').map(str::trim).filter(|h| !h.is_empty()).collect();
    if hosts.is_empty() {
        eprintln!("deepseek-server: --host names no address");
        return 2;
    }
    if app.args.port == 0 && hosts.iter().filter(|h| !h.ends_with(".sock")).count() > 1 {
        eprintln!("deepseek-server: --port 0 is not supported with several TCP addresses");
        return 2;
    }
    let mut listeners = Vec::new();
    for h in &hosts {
        match bind(h, app.args.port, app.args.reuse_port) {
            Ok(l) => {
                match &l {
                    Listener::Tcp(t) => eprintln!("deepseek-server: listening on {}://{}", if tls.is_some() { "https" } else { "http" }, t.local_addr().map_or_else(|_| h.to_string(), |a| a.to_string())),
                    Listener::Unix(_, p) if tls.is_some() => eprintln!("deepseek-server: listening on unix://{} (plain HTTP: TLS is for TCP addresses only)", p.display()),
                    Listener::Unix(_, p) => eprintln!("deepseek-server: listening on unix://{}", p.display()),
                }
                listeners.push(l);
            }
            Err(e) => {
                eprintln!("deepseek-server: {e}");
                return 1;
            }
        }
    }
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
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    {
        let (app, load_failed) = (app.clone(), load_failed.clone());
        tokio::spawn(async move {
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
            let _ = stop_tx.send(true);
        });
    }
    let router = api::router(app.clone());
    let mut servers = Vec::new();
    for l in listeners {
        let rx = stop_rx.clone();
        let router = router.clone();
        servers.push(tokio::spawn(accept_loop(l, router, tls.clone(), app.args.verbose, rx)));
    }
    let mut code = 0;
    for s in servers {
        match s.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                eprintln!("deepseek-server: {e}");
                code = 1;
            }
            Err(e) => {
                eprintln!("deepseek-server: {e}");
                code = 1;
            }
        }
    }
    if load_failed.load(Ordering::SeqCst) {
        return 1;
    }
    if code == 0 {
        eprintln!("deepseek-server: stopped");
    }
    code
}
