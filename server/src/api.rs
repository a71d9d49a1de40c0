//! The endpoints. A generation request is checked whole (JSON, fields, prompt against the
//! context) before anything reaches the engine; then it is one engine request whose callback
//! pushes its events into an unbounded channel that the handler (or the response stream)
//! drains. Dropping the handler's `Job` — the client went away, a stream's body was dropped
//! — cancels the engine request, whose slot frees at the next step.

use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use deepseek::chat;
use deepseek::engine::{Engine, Event, FinishInfo, FinishKind, GrammarSpec, Prompt, Request as EngineRequest, SubmitError, TokenProbs};

use crate::error::ApiError;
use crate::params::{self, Fields, GenParams, PromptInput};
use deepseek_chat::text::Utf8Stream;
use deepseek::sampling::reasoning_budget::ReasoningBudget;
use deepseek_chat::template::{ChatTemplate, Inputs, Rendered};
use deepseek_chat::tools::{self, grammar::Thinking, ParseSpec, ParsedMsg, ReasoningFormat, ToolChoice, ToolFormat, ToolSetup};
use crate::{App, Ready};

type AppState = State<Arc<App>>;

pub fn router(app: Arc<App>) -> Router {
    let guarded = Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .route("/chat/completions", post(chat_completions))
        .route("/v1/completions", post(completions))
        .route("/completion", post(native_completions))
        .route("/completions", post(native_completions))
        .route("/infill", post(crate::infill::infill))
        .route("/v1/models", get(models))
        .route("/models", get(models))
        .route("/metrics", get(metrics))
        .route("/props", get(props).post(set_props))
        .route("/apply-template", post(apply_template))
        .route("/v1/messages", post(anthropic_messages))
        .route("/v1/messages/count_tokens", post(anthropic_count_tokens))
        .route("/v1/responses", post(responses_create))
        .route("/responses", post(responses_create))
        .route("/v1/responses/input_tokens", post(responses_input_tokens))
        .route("/chat/completions/input_tokens", post(chat_input_tokens))
        .route("/v1/chat/completions/input_tokens", post(chat_input_tokens))
        .route("/responses/input_tokens", post(responses_input_tokens))
        .route("/tokenize", post(tokenize))
        .route("/detokenize", post(detokenize))
        .merge(crate::embed::routes())
        .merge(crate::slots::routes())
        .route_layer(middleware::from_fn_with_state(app.clone(), auth));
    let router = Router::new()
        .route("/health", get(health))
        .route("/v1/health", get(health))
        .merge(guarded)
        .merge(crate::webui::routes(&app))
        .fallback(crate::webui::fallback)
        .method_not_allowed_fallback(|| async { ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "invalid_request_error", "method not allowed on this endpoint") })
        .layer(middleware::from_fn_with_state(app.clone(), count))
        .layer(middleware::from_fn_with_state(app.clone(), cors));
    let router = if app.args.api_prefix.is_empty() { router } else { Router::new().nest(&app.args.api_prefix, router).merge(crate::webui::prefix_root(&app)) };
    router.with_state(app)
}

/// Counts requests and error answers for /metrics.
async fn count(State(app): AppState, req: Request, next: Next) -> Response {
    let resp = next.run(req).await;
    app.stats.requests.fetch_add(1, Ordering::Relaxed);
    if resp.status().is_client_error() || resp.status().is_server_error() {
        app.stats.errors.fetch_add(1, Ordering::Relaxed);
    }
    resp
}

/// Equal in time for every `given` of the key's length (no early exit on the first
/// difference), so response times do not reveal how much of a guess was right.
fn same_key(given: &[u8], key: &[u8]) -> bool {
    let mut diff = (given.len() ^ key.len()) as u64;
    for (i, &k) in key.iter().enumerate() {
        diff |= (given.get(i).copied().unwrap_or(0) ^ k) as u64;
    }
    diff == 0
}

async fn auth(State(app): AppState, req: Request, next: Next) -> Response {
    if !app.keys.is_empty() {
        // llama-server's order: Authorization (with or without "Bearer "), else X-Api-Key.
        let h = req.headers();
        let given = h.get(header::AUTHORIZATION).or_else(|| h.get("x-api-key")).map(|v| {
            let b = v.as_bytes();
            b.strip_prefix(b"Bearer ").unwrap_or(b).to_vec()
        });
        // Every key is compared, each in constant time, so the time taken says nothing about
        // which key a guess came close to.
        let ok = given.is_some_and(|g| app.keys.iter().fold(false, |ok, k| same_key(&g, k.as_bytes()) | ok));
        if !ok {
            return ApiError::new(StatusCode::UNAUTHORIZED, "authentication_error", "Invalid API Key").into_response();
        }
    }
    next.run(req).await
}

/// Whether an Origin is a page served from this machine (llama-server's `origin_is_localhost`).
fn origin_is_localhost(origin: &str) -> bool {
    let rest = origin.strip_prefix("http://").or_else(|| origin.strip_prefix("https://")).unwrap_or("");
    let host = if let Some(v6) = rest.strip_prefix('[') { v6.split(']').next().unwrap_or("") } else { rest.split([':', '/']).next().unwrap_or("") };
    matches!(host, "localhost" | "127.0.0.1" | "::1")
}

/// CORS as llama-server answers it: the allowed origin on every response (the request's own
/// Origin echoed when any origin may send credentials, or only localhost origins), and a
/// preflight (OPTIONS) answered before the key check, since browsers send it without one.
async fn cors(State(app): AppState, req: Request, next: Next) -> Response {
    let a = &app.args;
    let origin = req.headers().get(header::ORIGIN).cloned();
    let allow = if a.cors_credentials && a.cors_origins == "*" {
        origin.clone()
    } else if a.cors_origins == "localhost" {
        origin.clone().filter(|o| o.to_str().is_ok_and(origin_is_localhost))
    } else {
        HeaderValue::from_str(&a.cors_origins).ok()
    };
    let mut resp = if req.method() == axum::http::Method::OPTIONS {
        let mut r = Response::new(Body::empty());
        let h = r.headers_mut();
        h.insert(header::ACCESS_CONTROL_ALLOW_CREDENTIALS, HeaderValue::from_static(if a.cors_credentials { "true" } else { "false" }));
        if let Ok(v) = HeaderValue::from_str(&a.cors_methods) {
            h.insert(header::ACCESS_CONTROL_ALLOW_METHODS, v);
        }
        if let Ok(v) = HeaderValue::from_str(&a.cors_headers) {
            h.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, v);
        }
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html"));
        r
    } else {
        next.run(req).await
    };
    if let Some(v) = allow {
        resp.headers_mut().insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, v);
    }
    resp
}

async fn health(State(app): AppState) -> Response {
    match app.ready.get() {
        Some(_) => axum::Json(json!({"status": "ok"})).into_response(),
        None => ApiError::unavailable("Loading model").into_response(),
    }
}

/// A model's entry as llama-server lists it (`get_res_model_info`), with our extras in `meta`.
fn model_info(app: &App, r: &Ready) -> Value {
    json!({
        "id": r.name,
        "aliases": app.args.aliases(),
        "tags": app.args.tag_list(),
        "object": "model",
        "created": app.created,
        "owned_by": "llamacpp",
        "meta": {
            "vocab_type": r.model.vocab.vocab_type(),
            "n_vocab": r.model.vocab.n_tokens(),
            "n_ctx": r.engine.n_ctx_seq(),
            "n_ctx_train": r.model.hp.n_ctx_train,
            "n_embd": r.model.hp.n_embd,
            "n_params": r.model.n_params,
            "size": r.model.size_bytes,
            "ftype": r.model.ftype_name(),
            "n_ctx_slot": r.engine.n_ctx_seq(),
            "n_slots": r.engine.n_seq_max(),
            "chat_template": r.template.name(),
        }
    })
}

async fn models(State(app): AppState) -> Result<Response, ApiError> {
    let r = app.ready()?;
    // upstream's list: OpenAI's `data` and Ollama's `models`.
    Ok(axum::Json(json!({
        "models": [{
            "name": r.name, "model": r.name, "modified_at": "", "size": "", "digest": "", "type": "model",
            "description": "", "tags": [""], "capabilities": ["completion"], "parameters": "",
            "details": {"parent_model": "", "format": "gguf", "family": "", "families": [""], "parameter_size": "", "quantization_level": ""},
        }],
        "object": "list",
        "data": [model_info(&app, r)],
    }))
    .into_response())
}

/// llama-server's `/props` (`get_res_props`): the default generation settings, the slots, the
/// model and its chat template.
async fn props(State(app): AppState) -> Result<Response, ApiError> {
    let r = app.ready()?;
    let empty = serde_json::Map::new();
    let gp = Fields(&empty).gen(false, &app.args.sampling)?;
    let mut settings = params::settings_json(&gp, app.args.predict);
    if let Some(o) = settings.as_object_mut() {
        for k in ["stop", "logit_bias", "grammar", "dry_sequence_breakers"] {
            o.remove(k);
        }
    }
    let v = &r.model.vocab;
    let mut p = json!({
        "default_generation_settings": {"params": settings, "n_ctx": r.engine.n_ctx_seq()},
        "total_slots": r.engine.n_seq_max(),
        "model_alias": r.name,
        "model_ftype": r.model.ftype_name(),
        "model_path": app.args.model,
        "modalities": {"vision": false, "video": false, "audio": false},
        "media_marker": "",
        "endpoint_slots": app.args.slots,
        "endpoint_props": app.args.props,
        "endpoint_metrics": app.args.metrics,
        "ui": app.args.ui,
        "ui_settings": crate::webui::settings(&app.args),
        "chat_template": r.jinja.as_ref().map_or_else(|| r.template.name().to_string(), |j| j.source().to_string()),
        "chat_template_caps": r.jinja.as_ref().map_or(Value::Object(Default::default()), |j| j.caps.to_json()),
        "bos_token": v.template_text(v.bos()),
        "eos_token": v.template_text(v.eos()),
        "build_info": fingerprint(),
        "is_sleeping": false,
        "cors_proxy_enabled": false,
    });
    if let Some(t) = &r.jinja_tool_use {
        p["chat_template_tool_use"] = json!(t.source());
    }
    Ok(axum::Json(p).into_response())
}

/// POST /props: allowed with --props; upstream changes nothing through it either, so a body
/// that asks for a change is refused rather than answered with a success that did nothing.
async fn set_props(State(app): AppState, body: Body) -> Result<Response, ApiError> {
    if !app.args.props {
        return Err(ApiError::new(StatusCode::NOT_IMPLEMENTED, "not_supported_error", "This server does not support changing global properties. Start it with `--props`"));
    }
    let v = read_json(&app, body).await?;
    if let Some((k, _)) = v.as_object().and_then(|o| o.iter().next()) {
        return Err(ApiError::param(k, format!("'{k}': no server property can be changed through /props")));
    }
    Ok(axum::Json(json!({"success": true})).into_response())
}

async fn metrics(State(app): AppState) -> Result<Response, ApiError> {
    if !app.args.metrics {
        return Err(ApiError::new(StatusCode::NOT_IMPLEMENTED, "not_supported_error", "This server does not serve metrics: start it with --metrics"));
    }
    let r = app.ready()?;
    let text = crate::metrics::text(&app, r);
    let start = app.created.to_string();
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8"), (header::HeaderName::from_static("process-start-time-unix"), start.as_str())], text).into_response())
}

/// The body as JSON: at most `--body-limit` bytes, within `--timeout`.
pub(crate) async fn read_json(app: &App, body: Body) -> Result<Value, ApiError> {
    let limit = app.args.body_limit;
    let bytes = match tokio::time::timeout(Duration::from_secs(app.args.timeout), axum::body::to_bytes(body, limit)).await {
        Err(_) => return Err(ApiError::new(StatusCode::REQUEST_TIMEOUT, "timeout_error", format!("the request body did not arrive within {} s", app.args.timeout))),
        Ok(Err(e)) => {
            let mut src: Option<&(dyn std::error::Error + 'static)> = Some(&e);
            while let Some(s) = src {
                if s.is::<http_body_util::LengthLimitError>() {
                    return Err(ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "invalid_request_error", format!("the request body is larger than {limit} bytes (--body-limit)")));
                }
                src = s.source();
            }
            return Err(ApiError::invalid(format!("cannot read the request body: {e}")));
        }
        Ok(Ok(b)) => b,
    };
    serde_json::from_slice(&bytes).map_err(|e| ApiError::invalid(format!("the request body is not valid JSON: {e}")))
}

pub(crate) fn check_open(app: &App) -> Result<&Ready, ApiError> {
    if app.closing.load(Ordering::SeqCst) {
        return Err(ApiError::unavailable("the server is shutting down"));
    }
    app.ready()
}

// ---- generation ----

/// What the callback sends: the token and how much of its piece is output (the handler reads
/// the bytes from the engine's piece table), so the decode thread allocates nothing per token.
enum Msg {
    Token { token: i32, n_piece: u32, probs: Option<TokenProbs> },
    /// How far the prompt is (`return_progress`).
    Progress(deepseek::engine::PromptProgress),
    Done(FinishInfo),
}

/// One engine request as the handler sees it; dropping it early cancels the request.
struct Job {
    app: Arc<App>,
    engine: Arc<Engine>,
    id: u64,
    rx: mpsc::UnboundedReceiver<Msg>,
    finished: bool,
}

impl Drop for Job {
    fn drop(&mut self) {
        if !self.finished {
            self.app.stats.disconnects.fetch_add(1, Ordering::Relaxed);
            let _ = self.engine.cancel(self.id);
        }
    }
}

/// What a request generates from, checked against the slot's context.
#[derive(Clone)]
struct Plan {
    tokens: Vec<i32>,
    max_tokens: i32,
    /// How a chat answer is read (reasoning, content, tool calls); None for completions.
    chat: Option<ParseSpec>,
    grammar: Option<GrammarSpec>,
    /// A reasoning budget: the start and end tags' tokens, the tokens allowed, whether the
    /// prompt opened the reasoning.
    budget: Option<(Vec<i32>, Vec<i32>, usize, bool)>,
}

fn plan(app: &App, r: &Ready, tokens: Vec<i32>, gp: &GenParams) -> Result<Plan, ApiError> {
    let n_ctx = r.engine.n_ctx_seq() as i64;
    let n = tokens.len() as i64;
    if n == 0 {
        return Err(ApiError::param("prompt", "the prompt is empty (it tokenized to nothing)"));
    }
    if n >= n_ctx {
        let mut e = ApiError::new(StatusCode::BAD_REQUEST, "exceed_context_size_error", format!("the request ({n} tokens) exceeds the available context size ({n_ctx} tokens, one more is needed to generate); shorten it or start the server with a larger --ctx-size"));
        e.param = Some("messages".into());
        e.extra = Some(serde_json::Map::from_iter([("n_prompt_tokens".to_string(), json!(n)), ("n_ctx".to_string(), json!(n_ctx))]));
        return Err(e);
    }
    let max_tokens = match gp.max_tokens {
        // Past what fits, generation ends with finish_reason "length" (as llama-server).
        Some(m) => m.min(i32::MAX as i64) as i32,
        // The server's default may exceed what is left: generate until the context is full.
        None if app.args.predict > 0 => (app.args.predict as i64).min(n_ctx - n) as i32,
        None => -1,
    };
    Ok(Plan { tokens, max_tokens, chat: None, grammar: gp.grammar.clone().map(GrammarSpec::new), budget: None })
}

fn submit(app: &Arc<App>, r: &Ready, plan: &Plan, gp: &GenParams) -> Result<Job, ApiError> {
    let (tx, rx) = mpsc::unbounded_channel();
    let progress: Option<deepseek::engine::ProgressCallback> = (gp.stream && gp.return_progress).then(|| {
        let tx = tx.clone();
        Box::new(move |p: &deepseek::engine::PromptProgress| {
            let _ = tx.send(Msg::Progress(*p));
        }) as deepseek::engine::ProgressCallback
    });
    let callback = Box::new(move |v: &deepseek::engine::EventView<'_>| match v.event {
        // A closed channel means the client is gone: returning false cancels.
        Event::Token { token, n_piece } => tx.send(Msg::Token { token, n_piece, probs: v.probs.copied() }).is_ok(),
        Event::Finish(_) => {
            let _ = tx.send(Msg::Done(v.finish.unwrap_or_default()));
            true
        }
    });
    let n_probs = if gp.logprobs { gp.top_logprobs.max(1) } else { 0 };
    let req = EngineRequest {
        prompt: Prompt::Tokens(plan.tokens.clone()),
        sampler: {
            let chain: Box<dyn deepseek::sampling::Sampler + Send> = Box::new(gp.sampling.build(r.engine.model(), r.engine.n_ctx_seq() as usize).map_err(ApiError::invalid)?);
            match &plan.budget {
                Some((start, end, n, open)) => Box::new(ReasoningBudget::new(chain, start.clone(), end.clone(), *n, *open)),
                None => chain,
            }
        },
        max_tokens: plan.max_tokens,
        stop_tokens: Vec::new(),
        stop_strings: gp.stop.iter().map(|s| s.as_bytes().to_vec()).collect(),
        ignore_eos: gp.ignore_eos,
        callback: Some(callback),
        user_data: 0,
        n_probs,
        grammar: plan.grammar.clone(),
        reuse_prefix: gp.cache_prompt,
        slot: gp.id_slot,
        // /slots reports the request's settings.
        tag: Some(params::settings_json(gp, app.args.predict).to_string().into()),
        t_max_predict: gp.t_max_predict,
        progress,
    };
    match r.engine.submit(req) {
        Ok(id) => Ok(Job { app: app.clone(), engine: r.engine.clone(), id, rx, finished: false }),
        Err(SubmitError::Full(m)) => Err(ApiError::unavailable(format!("the server is busy: {m}; retry later"))),
        Err(SubmitError::Closed) => Err(ApiError::unavailable("the server is shutting down")),
        Err(SubmitError::Invalid(m)) => Err(ApiError::invalid(m)),
    }
}

/// The output bytes of a generated token: its piece, or a preserved marker's text.
fn out_piece(r: &Ready, token: i32, n_piece: u32) -> &[u8] {
    let piece = &r.engine.piece(token)[..n_piece as usize];
    if piece.is_empty() {
        if let Some((_, text)) = r.preserved.iter().find(|(t, _)| *t == token) {
            return text;
        }
    }
    piece
}

fn finish_reason(k: Option<FinishKind>) -> Result<&'static str, ApiError> {
    match k {
        Some(FinishKind::Length) => Ok("length"),
        Some(FinishKind::Stop) | Some(FinishKind::Eog) => Ok("stop"),
        Some(FinishKind::Cancelled) => Err(ApiError::unavailable("the request was cancelled: the server is shutting down")),
        Some(FinishKind::Error) | None => Err(ApiError::internal("generation failed (see the server's log)")),
    }
}

fn usage(i: &FinishInfo) -> Value {
    json!({
        "prompt_tokens": i.n_prompt,
        "completion_tokens": i.n_generated,
        "total_tokens": i.n_prompt + i.n_generated,
        "prompt_tokens_details": {"cached_tokens": i.n_cached},
    })
}

/// `timings` as llama-server reports them (`server_slot_stats::to_json`): prompt_n counts the
/// prompt tokens computed (not those reused from the cache), and the generation rate counts
/// decode steps (the first token comes with the prompt's last batch); ttft_ms and total_ms
/// are ours.
fn timings(i: &FinishInfo) -> Value {
    let prompt_n = i.n_prompt.saturating_sub(i.n_cached);
    let prompt_ms = i.ttft_us as f64 / 1e3;
    let predicted_ms = if i.n_generated > 0 { (i.total_us.saturating_sub(i.ttft_us)).max(1) as f64 / 1e3 } else { 0.0 };
    timings_of(i.n_cached, prompt_n, prompt_ms, i.n_generated, predicted_ms, i.total_us as f64 / 1e3)
}

fn timings_of(cache_n: u32, prompt_n: u32, prompt_ms: f64, predicted_n: u32, predicted_ms: f64, total_ms: f64) -> Value {
    let steps = predicted_n.saturating_sub(1) as f64;
    let per = |ms: f64, n: f64| if n > 0.0 { ms / n } else { 0.0 };
    let rate = |ms: f64, n: f64| if ms > 0.0 { 1e3 / ms * n } else { 0.0 };
    json!({
        "cache_n": cache_n,
        "prompt_n": prompt_n,
        "prompt_ms": prompt_ms,
        "prompt_per_token_ms": per(prompt_ms, prompt_n as f64),
        "prompt_per_second": rate(prompt_ms, prompt_n as f64),
        "predicted_n": predicted_n,
        "predicted_ms": predicted_ms,
        "predicted_per_token_ms": per(predicted_ms, steps),
        "predicted_per_second": rate(predicted_ms, steps),
        "ttft_ms": prompt_ms,
        "total_ms": total_ms,
    })
}

fn piece_text(r: &Ready, token: i32) -> (String, Vec<u8>) {
    let b = r.engine.piece(token).to_vec();
    (String::from_utf8_lossy(&b).into_owned(), b)
}

/// One token's entry in a chat response's `logprobs.content`.
fn chat_logprob(r: &Ready, piece: &[u8], p: &TokenProbs, n_top: u32) -> Value {
    let top: Vec<Value> = p.top()[..(n_top as usize).min(p.n_top)]
        .iter()
        .map(|&(t, lp)| {
            let (text, bytes) = piece_text(r, t);
            json!({"token": text, "logprob": lp, "bytes": bytes})
        })
        .collect();
    json!({"token": String::from_utf8_lossy(piece), "logprob": p.logprob, "bytes": piece, "top_logprobs": top})
}

/// The completions form: parallel arrays.
#[derive(Default)]
struct CompletionLogprobs {
    tokens: Vec<Value>,
    token_logprobs: Vec<Value>,
    top: Vec<Value>,
    offsets: Vec<Value>,
    offset: usize,
}

impl CompletionLogprobs {
    fn push(&mut self, r: &Ready, piece: &[u8], p: &TokenProbs, n_top: u32) {
        let text = String::from_utf8_lossy(piece).into_owned();
        self.offsets.push(json!(self.offset));
        self.offset += text.len();
        self.tokens.push(json!(text));
        self.token_logprobs.push(json!(p.logprob));
        let mut m = serde_json::Map::new();
        for &(t, lp) in &p.top()[..(n_top as usize).min(p.n_top)] {
            m.insert(piece_text(r, t).0, json!(lp));
        }
        self.top.push(Value::Object(m));
    }

    fn take(&mut self) -> Value {
        let v = json!({"tokens": self.tokens, "token_logprobs": self.token_logprobs, "top_logprobs": self.top, "text_offset": self.offsets});
        let offset = self.offset;
        *self = CompletionLogprobs { offset, ..Default::default() };
        v
    }
}

/// Chat or completions, and what each shapes its output with.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Chat,
    Completion,
    /// llama-server's own `/completion` shape.
    Native,
}

/// What a native `/completion` answer carries besides the text.
#[derive(Clone)]
struct NativeOut {
    return_tokens: bool,
    /// The prompt as text (its tokens detokenized, special ones included), as upstream echoes it.
    prompt: String,
    n_prompt: usize,
    /// `generation_settings`.
    settings: Value,
    /// `response_fields`: the answer holds only these (nested ones as "a/b").
    fields: Vec<String>,
}

/// A native answer with only `response_fields` (upstream's `json_get_nested_values`): each
/// path, '/'-separated, that exists.
fn select_fields(v: Value, fields: &[String]) -> Value {
    if fields.is_empty() {
        return v;
    }
    let mut out = serde_json::Map::new();
    for f in fields {
        let mut at = &v;
        let mut found = true;
        for part in f.split('/') {
            match at.get(part) {
                Some(x) => at = x,
                None => {
                    found = false;
                    break;
                }
            }
        }
        if found {
            out.insert(f.clone(), at.clone());
        }
    }
    Value::Object(out)
}

/// upstream's `stop_type`.
fn stop_type(k: Option<FinishKind>) -> &'static str {
    match k {
        Some(FinishKind::Eog) => "eos",
        Some(FinishKind::Stop) => "word",
        Some(FinishKind::Length) => "limit",
        _ => "none",
    }
}

/// One token's entry in a native answer's `completion_probabilities`.
fn native_prob(r: &Ready, token: i32, piece: &[u8], p: &TokenProbs, n_top: u32) -> Value {
    let top: Vec<Value> = p.top()[..(n_top as usize).min(p.n_top)]
        .iter()
        .map(|&(t, lp)| {
            let (text, bytes) = piece_text(r, t);
            json!({"id": t, "token": text, "bytes": bytes, "logprob": lp})
        })
        .collect();
    json!({"id": token, "token": String::from_utf8_lossy(piece), "bytes": piece, "logprob": p.logprob, "top_logprobs": top})
}

/// A chat request rendered to its prompt: by the Jinja template as llama-server renders it
/// (--jinja), with the inputs and rendering the answer is read by; or by the built-in the
/// template was recognized as (--no-jinja).
fn render_chat(app: &App, r: &Ready, f: &Fields<'_>, json_schema: Option<&Value>) -> Result<(String, Option<(Inputs, Rendered)>), ApiError> {
    let Some(t) = chat_template(r, f) else {
        if f.get("tools").is_some_and(|v| v.as_array().is_some_and(|a| !a.is_empty())) {
            return Err(ApiError::param("tools", "tools param requires --jinja flag (this server runs with --no-jinja: built-in templates, which cannot show a model its tools)"));
        }
        let msgs = params::messages(f)?;
        // llama-server's checks of a continued turn (oaicompat_chat_params_parse), which hold
        // for its built-in templates too.
        let mut add_gp = f.bool("add_generation_prompt")?.unwrap_or(true);
        let mut cont = f.bool("continue_final_message")?.unwrap_or(false);
        let last_assistant = |k: usize| msgs.len() >= k && msgs[msgs.len() - k].0 == "assistant";
        if !cont && app.args.prefill_assistant && last_assistant(1) {
            if last_assistant(2) {
                return Err(ApiError::param("messages", "Cannot have 2 or more assistant messages at the end of the list."));
            }
            cont = true;
            add_gp = false;
        }
        if cont && add_gp {
            return Err(ApiError::param("continue_final_message", "Cannot set both add_generation_prompt and continue_final_message to true."));
        }
        let list: Vec<chat::Message> = msgs.iter().map(|(role, content)| chat::Message::new(role, content)).collect();
        let mut text = String::new();
        chat::format_str(r.template, &list, add_gp, &mut text);
        return Ok((text, None));
    };
    let defaults = deepseek_chat::request::ServerDefaults::llama_server(app.kwargs.clone(), app.args.prefill_assistant, t);
    let mut inputs = deepseek_chat::request::inputs(f.0, &defaults).map_err(|e| ApiError::param(e.param, e.message))?;
    inputs.json_schema = json_schema.cloned();
    let rendered = render(t, &inputs)?;
    Ok((rendered.prompt.clone(), Some((inputs, rendered))))
}

/// The Jinja template a request renders with: the model's tool_use variant when it offers
/// tools and the model has one.
fn chat_template<'a>(r: &'a Ready, f: &Fields<'_>) -> Option<&'a ChatTemplate> {
    let tools = f.get("tools").is_some_and(|v| v.as_array().is_some_and(|a| !a.is_empty()));
    match (&r.jinja, &r.jinja_tool_use) {
        (Some(_), Some(t)) if tools => Some(t),
        (j, _) => j.as_ref(),
    }
}

fn render(t: &ChatTemplate, inputs: &Inputs) -> Result<Rendered, ApiError> {
    t.apply(inputs).map_err(|e| {
        let mut err = ApiError::invalid(format!("the chat template failed on this conversation: {}", e.message));
        err.param = Some("messages".into());
        err
    })
}

/// How a chat request's answer is read and constrained: its reasoning as the request's (or
/// the server's) `reasoning_format` says, its tool calls in the template's format when tools
/// are offered and `tool_choice` is not none, under the tools' grammar (lazy for auto, forced
/// for required or a named function); a `response_format` schema or `grammar` instead of the
/// tools' where one is given, as upstream.
fn chat_read(app: &App, r: &Ready, f: &Fields<'_>, gp: &GenParams) -> Result<(String, ParseSpec, Option<GrammarSpec>), ApiError> {
    let (prompt, jinja) = render_chat(app, r, f, gp.json_schema.as_ref())?;
    let rf = gp.reasoning.unwrap_or(if r.reasoning { ReasoningFormat::DeepSeek } else { ReasoningFormat::None });
    let grammar = gp.grammar.clone().map(GrammarSpec::new);
    let Some((inputs, rendered)) = jinja else {
        // Built-in templates: reasoning only, opened by the prompt or by the answer.
        let mut spec = ParseSpec::content_only();
        if rf != ReasoningFormat::None {
            spec.reasoning_format = rf;
            spec.think = Some(("<think>".into(), "</think>".into()));
            spec.in_reasoning = prompt.trim_end().ends_with("<think>");
        }
        return Ok((prompt, spec, grammar));
    };
    let t = chat_template(r, f).expect("a Jinja template");
    let offered = !inputs.tools.is_empty();
    let tools_active = offered && gp.tool_choice != ToolChoice::None && gp.json_schema.is_none();
    if tools_active && gp.grammar.is_some() {
        return Err(ApiError::param("grammar", "Cannot use custom grammar constraints with tools."));
    }
    if let ToolChoice::Function(name) = &gp.tool_choice {
        if offered && !inputs.tools.iter().any(|tool| &tool.name == name) {
            return Err(ApiError::param("tool_choice", format!("Invalid tool_choice: no tool named '{name}' is in 'tools'")));
        }
    }
    if !offered && matches!(gp.tool_choice, ToolChoice::Required | ToolChoice::Function(_)) {
        return Err(ApiError::param("tool_choice", "tool_choice requires a tool call, and 'tools' offers none"));
    }
    let mut spec = ParseSpec::new(t, &rendered, rf, tools_active);
    spec.json_response = gp.json_schema.is_some();
    let setup = ToolSetup { tools: &inputs.tools, choice: &gp.tool_choice, parallel: gp.parallel_tool_calls.unwrap_or(t.caps.supports_parallel_tool_calls) };
    if tools_active && spec.format == ToolFormat::ContentOnly && setup.required() {
        // The template cannot show the model its tools, yet a call is required: the generic
        // JSON form, which the grammar spells out.
        spec.format = ToolFormat::Generic;
    }
    if !tools_active || spec.format == ToolFormat::ContentOnly {
        return Ok((rendered.prompt, spec, grammar));
    }
    let thinking = Thinking { tags: t.think_tags(), open: spec.in_reasoning };
    let tg = tools::grammar::build(spec.format, &setup, thinking).map_err(|e| ApiError::param("tools", format!("Failed to parse tools: {e}")))?;
    let grammar = tg.map(|g| GrammarSpec { text: g.grammar, root: "root".into(), lazy: g.lazy, trigger_words: g.trigger_words, trigger_patterns: g.trigger_patterns, trigger_tokens: Vec::new(), trigger_after: g.trigger_after });
    Ok((rendered.prompt, spec, grammar))
}

/// llama-server's `/apply-template`: the prompt a chat request renders to.
async fn apply_template(State(app): AppState, body: Body) -> Result<Response, ApiError> {
    let v = read_json(&app, body).await?;
    let r = app.ready()?;
    let f = Fields::parse(&v)?;
    let (prompt, _) = render_chat(&app, r, &f, None)?;
    Ok(axum::Json(json!({"prompt": prompt})).into_response())
}

async fn chat_completions(State(app): AppState, body: Body) -> Result<Response, ApiError> {
    let v = read_json(&app, body).await?;
    chat_core(app, v).await
}

/// The prompt's token count of a chat answer (a response extension the Anthropic and
/// Responses stream converters read for their first event).
#[derive(Clone, Copy)]
struct PromptTokens(usize);

/// A chat completion from its (OpenAI-shaped) body: what `/v1/chat/completions` does, and what
/// the Anthropic and Responses routes do after converting their bodies.
async fn chat_core(app: Arc<App>, v: Value) -> Result<Response, ApiError> {
    let r = check_open(&app)?;
    let f = Fields::parse(&v)?;
    let gp = f.gen_for(true, &app.args.sampling, Some(&r.model.vocab))?;
    let (text, spec, grammar) = chat_read(&app, r, &f, &gp)?;
    let mut tokens = Vec::new();
    r.model.vocab.tokenize(text.as_bytes(), true, true, &mut tokens);
    let mut plan = plan(&app, r, tokens, &gp)?;
    let budget = gp.reasoning_budget.or((app.args.reasoning_budget >= 0).then_some(app.args.reasoning_budget));
    if let (Some(n), Some((open, close))) = (budget, &spec.think) {
        let tokens = |s: &str| {
            let mut t = Vec::new();
            r.model.vocab.tokenize(s.as_bytes(), false, true, &mut t);
            t
        };
        plan.budget = Some((tokens(open), tokens(close), n as usize, spec.in_reasoning));
    }
    plan.chat = Some(spec);
    plan.grammar = grammar;
    let n_prompt = plan.tokens.len();
    let native = verbose_out(&app, r, &plan, &gp);
    let mut resp = generate_with(app.clone(), plan, gp, Kind::Chat, native).await?;
    resp.extensions_mut().insert(PromptTokens(n_prompt));
    Ok(resp)
}

/// A converted body's prompt length: rendered as the chat route renders it, then tokenized.
fn chat_prompt_tokens(app: &App, v: &Value) -> Result<usize, ApiError> {
    let r = app.ready()?;
    let f = Fields::parse(v)?;
    let (prompt, _) = render_chat(app, r, &f, None)?;
    let mut tokens = Vec::new();
    r.model.vocab.tokenize(prompt.as_bytes(), true, true, &mut tokens);
    Ok(tokens.len())
}

/// A whole JSON response's value.
async fn response_json(resp: Response) -> Result<Value, ApiError> {
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX).await.map_err(|e| ApiError::internal(format!("cannot read the answer: {e}")))?;
    serde_json::from_slice(&bytes).map_err(|e| ApiError::internal(format!("the answer is not JSON: {e}")))
}

/// Converts a chat completion's event stream (`data: {chunk}` events, `[DONE]`, pings) into
/// another API's named events: `push` turns a chunk into events, `finish` closes them.
enum Convert {
    Anthropic(crate::anthropic::AnthropicStream),
    Responses(crate::responses::ResponsesStream),
}

impl Convert {
    fn push(&mut self, chunk: &Value) -> Vec<(String, Value)> {
        match self {
            Convert::Anthropic(s) => s.push(chunk),
            Convert::Responses(s) => s.push(chunk),
        }
    }
    fn finish(&mut self) -> Vec<(String, Value)> {
        match self {
            Convert::Anthropic(s) => s.finish(),
            Convert::Responses(s) => s.finish(),
        }
    }
}

fn convert_stream(resp: Response, conv: Convert) -> Response {
    use futures_util::StreamExt;
    let body = resp.into_body().into_data_stream();
    let st = futures_util::stream::unfold((body, conv, String::new(), false), |(mut body, mut conv, mut buf, done)| async move {
        if done {
            return None;
        }
        loop {
            // Whole events first.
            if let Some(at) = buf.find("\n\n") {
                let event: String = buf.drain(..at + 2).collect();
                let event = event.trim_end();
                if event.starts_with(':') {
                    // A keep-alive ping stays one.
                    return Some((Ok::<_, Infallible>(Bytes::from_static(b":\n\n")), (body, conv, buf, false)));
                }
                let Some(data) = event.strip_prefix("data: ") else { continue };
                if data == "[DONE]" {
                    continue;
                }
                let Ok(v) = serde_json::from_str::<Value>(data) else { continue };
                let events = conv.push(&v);
                if events.is_empty() {
                    continue;
                }
                return Some((Ok(Bytes::from(crate::anthropic::sse_text(&events))), (body, conv, buf, false)));
            }
            match body.next().await {
                Some(Ok(b)) => buf.push_str(&String::from_utf8_lossy(&b)),
                Some(Err(_)) | None => {
                    let events = conv.finish();
                    return Some((Ok(Bytes::from(crate::anthropic::sse_text(&events))), (body, conv, buf, true)));
                }
            }
        }
    });
    let mut out = Response::new(Body::from_stream(st));
    let h = out.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    out
}

/// Anthropic's Messages API (`/v1/messages`), as llama-server converts it: to a chat request,
/// and the answer (or its stream) back; errors in Anthropic's shape.
async fn anthropic_messages(State(app): AppState, body: Body) -> Response {
    let result: Result<Response, ApiError> = async {
        let v = read_json(&app, body).await?;
        let chat = crate::anthropic::to_chat(&v)?;
        let stream = chat.get("stream").and_then(Value::as_bool).unwrap_or(false);
        let resp = chat_core(app.clone(), chat).await?;
        let model = app.ready()?.name.clone();
        if !stream {
            let j = response_json(resp).await?;
            return Ok(axum::Json(crate::anthropic::from_chat(&j, &model)).into_response());
        }
        let n = resp.extensions().get::<PromptTokens>().map_or(0, |p| p.0);
        let id = format!("msg_{}", crate::responses::random_id());
        Ok(convert_stream(resp, Convert::Anthropic(crate::anthropic::AnthropicStream::new(&id, &model, n as u64, 0))))
    }
    .await;
    result.unwrap_or_else(|e| (e.status, axum::Json(crate::anthropic::error_body(&e))).into_response())
}

async fn anthropic_count_tokens(State(app): AppState, body: Body) -> Response {
    let result: Result<Response, ApiError> = async {
        let v = read_json(&app, body).await?;
        let chat = crate::anthropic::to_chat(&v)?;
        Ok(axum::Json(crate::anthropic::count_tokens_reply(chat_prompt_tokens(&app, &chat)?)).into_response())
    }
    .await;
    result.unwrap_or_else(|e| (e.status, axum::Json(crate::anthropic::error_body(&e))).into_response())
}

/// OpenAI's Responses API (`/v1/responses`), converted as llama-server does.
async fn responses_create(State(app): AppState, body: Body) -> Result<Response, ApiError> {
    let v = read_json(&app, body).await?;
    let chat = crate::responses::to_chat(&v)?;
    let stream = chat.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let resp = chat_core(app.clone(), chat).await?;
    let model = app.ready()?.name.clone();
    if !stream {
        let j = response_json(resp).await?;
        return Ok(axum::Json(crate::responses::from_chat(&j, &model)).into_response());
    }
    Ok(convert_stream(resp, Convert::Responses(crate::responses::ResponsesStream::new(&model))))
}

/// The prompt length a chat request renders to (`{"input_tokens": n}`), as llama-server counts.
async fn chat_input_tokens(State(app): AppState, body: Body) -> Result<Response, ApiError> {
    let v = read_json(&app, body).await?;
    Ok(axum::Json(json!({"input_tokens": chat_prompt_tokens(&app, &v)?})).into_response())
}

async fn responses_input_tokens(State(app): AppState, body: Body) -> Result<Response, ApiError> {
    let v = read_json(&app, body).await?;
    let chat = crate::responses::to_chat(&v)?;
    Ok(axum::Json(crate::responses::input_tokens_reply(chat_prompt_tokens(&app, &chat)?)).into_response())
}

async fn completions(State(app): AppState, body: Body) -> Result<Response, ApiError> {
    let v = read_json(&app, body).await?;
    let r = check_open(&app)?;
    let f = Fields::parse(&v)?;
    if f.bool("echo")?.unwrap_or(false) {
        return Err(ApiError::param("echo", "'echo' is not supported"));
    }
    if f.str("suffix")?.is_some_and(|s| !s.is_empty()) {
        return Err(ApiError::param("suffix", "'suffix' (fill-in-the-middle) is not supported"));
    }
    let gp = f.gen_for(false, &app.args.sampling, Some(&r.model.vocab))?;
    let tokens = match params::prompt(&f, r.model.vocab.n_tokens())? {
        PromptInput::Tokens(t) => t,
        PromptInput::Text(s) => {
            let mut t = Vec::new();
            r.model.vocab.tokenize(s.as_bytes(), true, true, &mut t);
            t
        }
    };
    let plan = plan(&app, r, tokens, &gp)?;
    let native = verbose_out(&app, r, &plan, &gp);
    generate_with(app.clone(), plan, gp, Kind::Completion, native).await
}

/// What the `__verbose` object of a chat or completions answer needs (None: not asked for).
fn verbose_out(app: &App, r: &Ready, plan: &Plan, gp: &GenParams) -> Option<NativeOut> {
    if !gp.verbose.unwrap_or(app.args.verbose) {
        return None;
    }
    let mut prompt = Vec::new();
    r.model.vocab.detokenize(&plan.tokens, false, true, &mut prompt);
    Some(NativeOut { return_tokens: false, prompt: String::from_utf8_lossy(&prompt).into_owned(), n_prompt: plan.tokens.len(), settings: params::settings_json(gp, plan.max_tokens), fields: Vec::new() })
}

/// llama-server's native `/completion` (and `/completions`): its request fields and its answer
/// shape (`content`, `tokens`, `stop`, `generation_settings`, `timings`, ...), streamed as its
/// partial results without OpenAI's `[DONE]`.
async fn native_completions(State(app): AppState, body: Body) -> Result<Response, ApiError> {
    let v = read_json(&app, body).await?;
    let r = check_open(&app)?;
    let f = Fields::parse(&v)?;
    // The prompts are read before the other fields, as upstream's handle_completions_impl does.
    let prompts = params::native_prompts(&f, &r.model.vocab)?;
    native_from_tokens(&app, &f, prompts).await
}

/// llama-server's native completion (`/completion`'s answer) of the request `f` generating
/// from each of `prompts`; `/infill` builds its one prompt's tokens and ends here too.
pub(crate) async fn native_from_tokens(app: &Arc<App>, f: &Fields<'_>, prompts: Vec<Vec<i32>>) -> Result<Response, ApiError> {
    let r = check_open(app)?;
    let mut gp = f.gen_for(false, &app.args.sampling, Some(&r.model.vocab))?;
    if let Some(n) = f.int("n_probs", 0, deepseek::engine::MAX_TOP_PROBS as i64)? {
        gp.logprobs = n > 0;
        gp.top_logprobs = n as u32;
    }
    if f.bool("post_sampling_probs")?.unwrap_or(false) {
        return Err(ApiError::param("post_sampling_probs", "'post_sampling_probs': probabilities after the sampler chain are not supported; n_probs gives the model's"));
    }
    let fields = match f.get("response_fields") {
        None => Vec::new(),
        Some(Value::Array(a)) => a.iter().map(|x| x.as_str().map(str::to_string).ok_or_else(|| ApiError::param("response_fields", "'response_fields' must be an array of strings"))).collect::<Result<_, _>>()?,
        Some(_) => return Err(ApiError::param("response_fields", "'response_fields' must be an array of strings")),
    };
    let return_tokens = f.bool("return_tokens")?.unwrap_or(false);
    if prompts.len() == 1 {
        let tokens = prompts.into_iter().next().expect("one prompt");
        return native_one(app, r, tokens, gp, fields, return_tokens).await;
    }
    if gp.stream {
        return Err(ApiError::param("prompt", "several prompts in one streamed request are not supported (stream one request per prompt)"));
    }
    // Several prompts: one engine request each, run side by side, answered as an array in the
    // prompts' order with their index.
    let pending: Vec<_> = prompts.into_iter().map(|tokens| native_one(app, r, tokens, gp.clone(), fields.clone(), return_tokens)).collect();
    let mut out = Vec::new();
    for (i, resp) in futures_util::future::join_all(pending).await.into_iter().enumerate() {
        let mut v = response_json(resp?).await?;
        if let Some(o) = v.as_object_mut() {
            if o.contains_key("index") {
                o.insert("index".into(), json!(i));
            }
        }
        out.push(v);
    }
    Ok(axum::Json(Value::Array(out)).into_response())
}

/// One native prompt: planned against the context and submitted (the answer is awaited by the
/// caller through the returned future's response).
fn native_one<'a>(app: &'a Arc<App>, r: &'a Ready, tokens: Vec<i32>, gp: GenParams, fields: Vec<String>, return_tokens: bool) -> impl std::future::Future<Output = Result<Response, ApiError>> + 'a {
    let prepared = (|| {
        let mut prompt = Vec::new();
        r.model.vocab.detokenize(&tokens, false, true, &mut prompt);
        let plan = plan(app, r, tokens, &gp)?;
        let settings = params::settings_json(&gp, plan.max_tokens);
        let native = NativeOut { return_tokens, prompt: String::from_utf8_lossy(&prompt).into_owned(), n_prompt: plan.tokens.len(), settings, fields };
        Ok::<_, ApiError>((plan, native))
    })();
    let app = app.clone();
    async move {
        let (plan, native) = prepared?;
        generate_with(app, plan, gp, Kind::Native, Some(native)).await
    }
}

async fn generate_with(app: Arc<App>, plan: Plan, gp: GenParams, kind: Kind, native: Option<NativeOut>) -> Result<Response, ApiError> {
    let r = app.ready()?;
    if gp.n_cmpl > 1 {
        return several(app.clone(), plan, gp, kind, native).await;
    }
    let job = submit(&app, r, &plan, &gp)?;
    let id = app.next_id(if kind == Kind::Chat { "chatcmpl" } else { "cmpl" });
    let ping = gp.sse_ping_interval.unwrap_or(app.args.sse_ping_interval);
    let out = Output { id, kind, created: unix_now(), model: r.name.clone(), n_top: gp.top_logprobs, logprobs: gp.logprobs, include_usage: gp.include_usage, native, timings_per_token: gp.timings_per_token, ping: (ping > 0).then(|| Duration::from_secs(ping as u64)), t0: std::time::Instant::now() };
    if gp.stream {
        Ok(stream(app.clone(), job, out, plan.chat))
    } else {
        whole(app.clone(), job, out, plan.chat).await
    }
}

/// `n_cmpl` / `n` > 1: that many choices from one prompt, each its own engine request (the
/// prompt's cells are shared from whichever computed them first; they run side by side, one
/// per free slot), answered as one response — OpenAI's `choices` by `index`, or for the
/// native route an array of answers, as llama-server. With a fixed seed, choice i samples
/// with seed + i (upstream gives every choice the same seed, so the same text).
async fn several(app: Arc<App>, plan: Plan, gp: GenParams, kind: Kind, native: Option<NativeOut>) -> Result<Response, ApiError> {
    let r = app.ready()?;
    let n = gp.n_cmpl;
    if n > r.engine.n_seq_max() {
        return Err(ApiError::param("n", format!("'n' = {n}: at most one choice per slot ({} slots, --parallel)", r.engine.n_seq_max())));
    }
    if gp.stream {
        return Err(ApiError::param("n", format!("'n' = {n} with 'stream': several streamed choices are not supported yet (send n requests, or stream: false)")));
    }
    let pending: Vec<_> = (0..n)
        .map(|i| {
            let mut g = gp.clone();
            g.n_cmpl = 1;
            if g.sampling.seed != params::RANDOM_SEED {
                g.sampling.seed = g.sampling.seed.wrapping_add(i);
            }
            Box::pin(generate_with(app.clone(), plan.clone(), g, kind, native.clone()))
        })
        .collect();
    let mut answers = Vec::with_capacity(n as usize);
    for resp in futures_util::future::join_all(pending).await {
        answers.push(response_json(resp?).await?);
    }
    if kind == Kind::Native {
        for (i, a) in answers.iter_mut().enumerate() {
            if let Some(o) = a.as_object_mut() {
                o.insert("index".into(), json!(i));
            }
        }
        return Ok(axum::Json(Value::Array(answers)).into_response());
    }
    let mut merged = answers[0].clone();
    let mut choices = Vec::with_capacity(answers.len());
    let mut completion_tokens = 0;
    for (i, a) in answers.iter().enumerate() {
        let mut c = a["choices"][0].clone();
        c["index"] = json!(i);
        choices.push(c);
        completion_tokens += a["usage"]["completion_tokens"].as_u64().unwrap_or(0);
    }
    merged["choices"] = Value::Array(choices);
    let prompt_tokens = merged["usage"]["prompt_tokens"].as_u64().unwrap_or(0);
    merged["usage"]["completion_tokens"] = json!(completion_tokens);
    merged["usage"]["total_tokens"] = json!(prompt_tokens + completion_tokens);
    Ok(axum::Json(merged).into_response())
}

fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

struct Output {
    id: String,
    kind: Kind,
    created: u64,
    model: String,
    n_top: u32,
    logprobs: bool,
    include_usage: bool,
    native: Option<NativeOut>,
    /// Timings in every streamed chunk.
    timings_per_token: bool,
    /// SSE keep-alive comments after this long without a chunk.
    ping: Option<Duration>,
    /// When the request was submitted (the streamed chunks' timings).
    t0: std::time::Instant,
}

/// A tool call's id: 32 random letters and digits, as llama-server makes them.
fn tool_call_id() -> String {
    const ALPHABET: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    let mut bytes = [0u8; 32];
    // SAFETY: getrandom writes at most `bytes.len()` bytes into the buffer it is given.
    let n = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    if n != bytes.len() as isize {
        // No kernel randomness: the clock and a counter still make ids unique in a process.
        static FALLBACK: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let mut x = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64) ^ FALLBACK.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed);
        for b in &mut bytes {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
    }
    bytes.iter().map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char).collect()
}

/// A parsed call as OpenAI's `tool_calls` entry.
fn tool_call_json(c: &tools::ParsedCall, id: &str) -> Value {
    json!({"type": "function", "function": {"name": c.name, "arguments": c.arguments}, "id": id})
}

/// The finish reason of a chat answer: a finished answer with calls ends for them.
fn chat_finish(reason: &'static str, msg: &ParsedMsg) -> &'static str {
    if reason == "stop" && !msg.tool_calls.is_empty() {
        "tool_calls"
    } else {
        reason
    }
}

async fn whole(app: Arc<App>, mut job: Job, out: Output, chat: Option<ParseSpec>) -> Result<Response, ApiError> {
    let r = app.ready()?;
    let mut bytes = Vec::new();
    let mut chat_probs = Vec::new();
    let mut comp_probs = CompletionLogprobs::default();
    let mut generated = Vec::new();
    let info = loop {
        match job.rx.recv().await {
            Some(Msg::Token { token, n_piece, probs }) => {
                let piece = out_piece(r, token, n_piece);
                if let Some(p) = probs.as_ref().filter(|_| out.logprobs) {
                    match out.kind {
                        Kind::Chat => chat_probs.push(chat_logprob(r, piece, p, out.n_top)),
                        Kind::Completion => comp_probs.push(r, piece, p, out.n_top),
                        Kind::Native => chat_probs.push(native_prob(r, token, piece, p, out.n_top)),
                    }
                }
                generated.push(token);
                bytes.extend_from_slice(piece);
            }
            Some(Msg::Done(info)) => break info,
            Some(Msg::Progress(_)) => {}
            None => return Err(ApiError::internal("the engine stopped before the request ended")),
        }
    };
    job.finished = true;
    let mut reason = finish_reason(info.reason)?;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let body = match out.kind {
        Kind::Native => {
            let n = out.native.as_ref().expect("native output");
            let mut v = native_final(r, n, &info, &text, if n.return_tokens { &generated } else { &[] });
            if out.logprobs {
                v["completion_probabilities"] = Value::Array(chat_probs);
            }
            select_fields(v, &n.fields)
        }
        Kind::Chat => {
            let spec = chat.unwrap_or_else(ParseSpec::content_only);
            let msg = tools::parse(&spec, &text, false);
            let mut message = json!({"role": "assistant", "content": msg.content});
            if !msg.reasoning_content.is_empty() {
                message["reasoning_content"] = json!(msg.reasoning_content);
            }
            if !msg.tool_calls.is_empty() {
                message["tool_calls"] = Value::Array(msg.tool_calls.iter().map(|c| tool_call_json(c, &if c.id.is_empty() { tool_call_id() } else { c.id.clone() })).collect());
            }
            reason = chat_finish(reason, &msg);
            let logprobs = if out.logprobs { json!({"content": chat_probs}) } else { Value::Null };
            json!({
                "id": out.id, "object": "chat.completion", "created": out.created, "model": out.model,
                "system_fingerprint": fingerprint(),
                "choices": [{"index": 0, "message": message, "logprobs": logprobs, "finish_reason": reason}],
                "usage": usage(&info), "timings": timings(&info),
            })
        }
        Kind::Completion => {
            let logprobs = if out.logprobs { comp_probs.take() } else { Value::Null };
            json!({
                "id": out.id, "object": "text_completion", "created": out.created, "model": out.model,
                "system_fingerprint": fingerprint(),
                "choices": [{"index": 0, "text": text, "logprobs": logprobs, "finish_reason": reason}],
                "usage": usage(&info), "timings": timings(&info),
            })
        }
    };
    let mut body = body;
    if let (Some(n), true) = (&out.native, out.kind != Kind::Native) {
        body["__verbose"] = native_final(r, n, &info, &text, &[]);
    }
    Ok(axum::Json(body).into_response())
}

/// The build as llama-server names it ("b" and its build number, which clients read as the
/// llama.cpp API level), then ours.
/// A native answer's final object (upstream's `to_json_non_oaicompat`).
fn native_final(r: &Ready, n: &NativeOut, info: &FinishInfo, content: &str, tokens: &[i32]) -> Value {
    json!({
        "index": 0,
        "content": content,
        "tokens": tokens,
        "id_slot": -1,
        "stop": true,
        "model": r.name,
        "tokens_predicted": info.n_generated,
        "tokens_evaluated": info.n_prompt,
        "generation_settings": n.settings,
        "prompt": n.prompt,
        "has_new_line": content.contains('\n'),
        "truncated": false,
        "stop_type": stop_type(info.reason),
        "stopping_word": "",
        "tokens_cached": info.n_prompt + info.n_generated,
        "timings": timings(info),
    })
}

fn fingerprint() -> String {
    concat!("b11312-deepseek-", env!("CARGO_PKG_VERSION")).to_string()
}

/// State of a streaming response between chunks.
struct Streaming {
    app: Arc<App>,
    job: Job,
    out: Output,
    utf8: Utf8Stream,
    /// A chat answer: how it is read, the text so far and the parse last sent.
    chat: Option<ChatStream>,
    chat_probs: Vec<Value>,
    comp_probs: CompletionLogprobs,
    done: bool,
    /// Tokens not yet sent in a native chunk (their text may be an unfinished character).
    pending_tokens: Vec<i32>,
    n_generated: u32,
    t_first: Option<std::time::Instant>,
}

struct ChatStream {
    spec: ParseSpec,
    text: String,
    sent: ParsedMsg,
}

/// Decrements the open-stream gauge when the response ends however it ends.
struct StreamGauge(Arc<App>);

impl Drop for StreamGauge {
    fn drop(&mut self) {
        self.0.stats.streams_open.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Streaming {
    fn chunk(&self, delta_or_text: Value, finish: Option<&str>, logprobs: Value) -> Value {
        match self.out.kind {
            Kind::Chat => json!({
                "id": self.out.id, "object": "chat.completion.chunk", "created": self.out.created, "model": self.out.model,
                "system_fingerprint": fingerprint(),
                "choices": [{"index": 0, "delta": delta_or_text, "logprobs": logprobs, "finish_reason": finish}],
            }),
            Kind::Completion => json!({
                "id": self.out.id, "object": "text_completion", "created": self.out.created, "model": self.out.model,
                "system_fingerprint": fingerprint(),
                "choices": [{"index": 0, "text": delta_or_text, "logprobs": logprobs, "finish_reason": finish}],
            }),
            Kind::Native => json!({
                "index": 0, "content": delta_or_text, "tokens": [], "stop": false, "id_slot": -1,
                "tokens_predicted": self.n_generated,
                "tokens_evaluated": self.out.native.as_ref().map_or(0, |n| n.n_prompt),
            }),
        }
    }

    /// The timings so far, by the server's clock (the final chunk has the engine's).
    fn timings_now(&self) -> Value {
        let n_prompt = self.out.native.as_ref().map_or(0, |n| n.n_prompt) as u32;
        let now = std::time::Instant::now();
        let first = self.t_first.unwrap_or(now);
        let prompt_ms = first.duration_since(self.out.t0).as_secs_f64() * 1e3;
        let predicted_ms = now.duration_since(first).as_secs_f64() * 1e3;
        timings_of(0, n_prompt, prompt_ms, self.n_generated, predicted_ms, now.duration_since(self.out.t0).as_secs_f64() * 1e3)
    }

    fn pending_logprobs(&mut self) -> Value {
        if !self.out.logprobs {
            return Value::Null;
        }
        match self.out.kind {
            Kind::Chat => json!({"content": std::mem::take(&mut self.chat_probs)}),
            Kind::Completion => self.comp_probs.take(),
            Kind::Native => Value::Array(std::mem::take(&mut self.chat_probs)),
        }
    }

    fn has_pending_logprobs(&self) -> bool {
        self.out.logprobs && (!self.chat_probs.is_empty() || !self.comp_probs.tokens.is_empty())
    }

    /// The chunks for new output text (none when there is nothing to send yet): completion
    /// text as it comes; a chat answer parsed again whole, and what it adds sent as OpenAI's
    /// deltas (reasoning, content, then each call: its id, type and name first).
    fn text_chunks(&mut self, text: String, end: bool, out: &mut Vec<Value>) {
        let Some(chat) = &mut self.chat else {
            if self.out.kind == Kind::Native {
                if !text.is_empty() || (end && !self.pending_tokens.is_empty()) {
                    let lp = self.pending_logprobs();
                    let mut c = self.chunk(json!(text), None, Value::Null);
                    c["tokens"] = json!(std::mem::take(&mut self.pending_tokens));
                    if self.out.logprobs {
                        c["completion_probabilities"] = lp;
                    }
                    if self.out.timings_per_token {
                        c["timings"] = self.timings_now();
                    }
                    out.push(c);
                }
                return;
            }
            if !text.is_empty() || self.has_pending_logprobs() {
                let lp = self.pending_logprobs();
                let mut c = self.chunk(json!(text), None, lp);
                if self.out.timings_per_token {
                    c["timings"] = self.timings_now();
                }
                out.push(c);
            }
            return;
        };
        chat.text.push_str(&text);
        let next = tools::parse(&chat.spec, &chat.text, !end);
        let deltas = tools::diff(&chat.sent, &next);
        let mut payloads = Vec::new();
        for d in deltas {
            if !d.reasoning_content.is_empty() {
                payloads.push(json!({"reasoning_content": d.reasoning_content}));
            }
            if !d.content.is_empty() {
                payloads.push(json!({"content": d.content}));
            }
            if let Some(c) = d.tool_call {
                let mut call = json!({"index": c.index, "function": {"arguments": c.arguments}});
                if let Some((name, id)) = c.new {
                    let id = if id.is_empty() { tool_call_id() } else { id };
                    call["id"] = json!(id);
                    call["type"] = json!("function");
                    call["function"]["name"] = json!(name);
                }
                payloads.push(json!({"tool_calls": [call]}));
            }
        }
        chat.sent = next;
        if payloads.is_empty() && self.has_pending_logprobs() {
            payloads.push(json!({"content": ""}));
        }
        for p in payloads {
            let lp = self.pending_logprobs();
            let mut c = self.chunk(p, None, lp);
            if self.out.timings_per_token {
                c["timings"] = self.timings_now();
            }
            out.push(c);
        }
    }

    /// The next bytes of the event stream, None at its end.
    async fn next(&mut self) -> Option<Bytes> {
        if self.done {
            return None;
        }
        let mut out = String::new();
        let sse = |out: &mut String, v: &Value| {
            out.push_str("data: ");
            out.push_str(&v.to_string());
            out.push_str("\n\n");
        };
        let app = self.app.clone();
        loop {
            let Some(r) = app.ready.get() else { return None };
            let msg = match self.out.ping {
                None => self.job.rx.recv().await,
                Some(d) => match tokio::time::timeout(d, self.job.rx.recv()).await {
                    Ok(m) => m,
                    // Nothing to send for a while: a comment keeps proxies and clients from
                    // closing an idle stream (llama-server's SSE ping).
                    Err(_) => return Some(Bytes::from_static(b":\n\n")),
                },
            };
            match msg {
                Some(Msg::Token { token, n_piece, probs }) => {
                    let piece = out_piece(r, token, n_piece);
                    self.n_generated += 1;
                    self.t_first.get_or_insert_with(std::time::Instant::now);
                    if self.out.kind == Kind::Native {
                        self.pending_tokens.push(token);
                    }
                    if let Some(p) = probs.as_ref().filter(|_| self.out.logprobs) {
                        match self.out.kind {
                            Kind::Chat => self.chat_probs.push(chat_logprob(r, piece, p, self.out.n_top)),
                            Kind::Completion => self.comp_probs.push(r, piece, p, self.out.n_top),
                            Kind::Native => self.chat_probs.push(native_prob(r, token, piece, p, self.out.n_top)),
                        }
                    }
                    let text = self.utf8.push(piece);
                    let mut chunks = Vec::new();
                    self.text_chunks(text, false, &mut chunks);
                    if !chunks.is_empty() {
                        for c in &chunks {
                            sse(&mut out, c);
                        }
                        return Some(Bytes::from(out));
                    }
                }
                Some(Msg::Progress(p)) => {
                    // llama-server's progress chunk: a chat's role delta, or empty text, with
                    // `prompt_progress`.
                    let empty = match self.out.kind {
                        Kind::Chat => json!({"role": "assistant", "content": null}),
                        _ => json!(""),
                    };
                    let mut c = self.chunk(empty, None, Value::Null);
                    c["prompt_progress"] = json!({"total": p.total, "cache": p.cache, "processed": p.processed, "time_ms": p.time_ms});
                    if self.out.timings_per_token {
                        c["timings"] = timings_of(p.cache, p.processed - p.cache, p.time_ms, 0, 0.0, p.time_ms);
                    }
                    sse(&mut out, &c);
                    return Some(Bytes::from(out));
                }
                Some(Msg::Done(info)) => {
                    self.job.finished = true;
                    self.done = true;
                    let rest = self.utf8.finish();
                    let mut chunks = Vec::new();
                    self.text_chunks(rest, true, &mut chunks);
                    for c in &chunks {
                        sse(&mut out, c);
                    }
                    if self.out.kind == Kind::Native {
                        match finish_reason(info.reason) {
                            Ok(_) => {
                                let n = self.out.native.as_ref().expect("native output");
                                let v = native_final(r, n, &info, "", &[]);
                                sse(&mut out, &select_fields(v, &n.fields));
                            }
                            Err(e) => sse(&mut out, &e.body()),
                        }
                        return Some(Bytes::from(out));
                    }
                    match finish_reason(info.reason) {
                        Ok(reason) => {
                            let reason = match &self.chat {
                                Some(c) => chat_finish(reason, &c.sent),
                                None => reason,
                            };
                            let empty = if self.out.kind == Kind::Chat { json!({}) } else { json!("") };
                            let mut last = self.chunk(empty, Some(reason), Value::Null);
                            last["timings"] = timings(&info);
                            sse(&mut out, &last);
                            if self.out.include_usage {
                                let mut u = self.chunk(Value::Null, None, Value::Null);
                                u["choices"] = json!([]);
                                u["usage"] = usage(&info);
                                u["timings"] = timings(&info);
                                sse(&mut out, &u);
                            }
                        }
                        Err(e) => sse(&mut out, &e.body()),
                    }
                    out.push_str("data: [DONE]\n\n");
                    return Some(Bytes::from(out));
                }
                None => {
                    self.done = true;
                    sse(&mut out, &ApiError::internal("the engine stopped before the request ended").body());
                    return Some(Bytes::from(out));
                }
            }
        }
    }
}

fn stream(app: Arc<App>, job: Job, out: Output, chat: Option<ParseSpec>) -> Response {
    app.stats.streams_open.fetch_add(1, Ordering::Relaxed);
    let gauge = StreamGauge(app.clone());
    let chat = chat.map(|spec| ChatStream { sent: tools::parse(&spec, "", true), spec, text: String::new() });
    let st = Streaming { app, job, chat, out, utf8: Utf8Stream::default(), chat_probs: Vec::new(), comp_probs: CompletionLogprobs::default(), done: false, pending_tokens: Vec::new(), n_generated: 0, t_first: None };
    // OpenAI's first chat chunk carries the role.
    let first = (st.out.kind == Kind::Chat).then(|| {
        let c = st.chunk(json!({"role": "assistant", "content": null}), None, Value::Null);
        Bytes::from(format!("data: {c}\n\n"))
    });
    let body = futures_util::stream::unfold((st, first, gauge), |(mut st, first, gauge)| async move {
        if let Some(b) = first {
            return Some((Ok::<_, Infallible>(b), (st, None, gauge)));
        }
        let b = st.next().await?;
        Some((Ok(b), (st, None, gauge)))
    });
    let mut resp = Response::new(Body::from_stream(body));
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}

// ---- tokenizer endpoints ----

async fn tokenize(State(app): AppState, body: Body) -> Result<Response, ApiError> {
    let v = read_json(&app, body).await?;
    let r = app.ready()?;
    let f = Fields::parse(&v)?;
    let content = f.str("content")?.ok_or_else(|| ApiError::param("content", "'content' (a string) is required"))?;
    let add_special = f.bool("add_special")?.unwrap_or(false);
    let parse_special = f.bool("parse_special")?.unwrap_or(true);
    let with_pieces = f.bool("with_pieces")?.unwrap_or(false);
    let mut tokens = Vec::new();
    r.model.vocab.tokenize(content.as_bytes(), add_special, parse_special, &mut tokens);
    let list: Vec<Value> = if with_pieces {
        tokens
            .iter()
            .map(|&t| {
                let b = r.engine.piece(t);
                // A piece that is not whole UTF-8 goes out as its bytes, as llama-server does.
                let piece = match std::str::from_utf8(b) {
                    Ok(s) => json!(s),
                    Err(_) => json!(b),
                };
                json!({"id": t, "piece": piece})
            })
            .collect()
    } else {
        tokens.iter().map(|&t| json!(t)).collect()
    };
    Ok(axum::Json(json!({"tokens": list})).into_response())
}

async fn detokenize(State(app): AppState, body: Body) -> Result<Response, ApiError> {
    let v = read_json(&app, body).await?;
    let r = app.ready()?;
    let f = Fields::parse(&v)?;
    let n_vocab = r.model.vocab.n_tokens();
    let tokens: Vec<i32> = match f.get("tokens") {
        None => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|t| match t.as_i64() {
                Some(id) if (0..n_vocab as i64).contains(&id) => Ok(id as i32),
                _ => Err(ApiError::param("tokens", format!("{t} is not a token id of this model (0..{n_vocab})"))),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(ApiError::param("tokens", "'tokens' must be an array of token ids")),
    };
    let mut out = Vec::new();
    r.model.vocab.detokenize(&tokens, false, false, &mut out);
    Ok(axum::Json(json!({"content": String::from_utf8_lossy(&out)})).into_response())
}

#[cfg(test)]
mod tests {
    use super::same_key;

    #[test]
    fn keys_compare_whole() {
        assert!(same_key(b"secret", b"secret"));
        assert!(!same_key(b"secreT", b"secret"));
        assert!(!same_key(b"secret2", b"secret"));
        assert!(!same_key(b"secre", b"secret"));
        assert!(!same_key(b"", b"secret"));
    }
}
