//! Embeddings and reranking, as llama-server b11312 serves them (`--embedding`, `--rerank`):
//! POST /v1/embeddings (OpenAI's shape), /embedding and /embeddings (llama-server's own, every
//! pooling including none), /rerank, /reranking, /v1/rerank, /v1/reranking (Jina's shape, or
//! TEI's when the request gives `texts`).
//!
//! The serving engine only generates, so these requests run on a second context of the same
//! model, with embeddings on, owned by one dedicated thread (`Embedder`). Handlers tokenize
//! and check a request, send its inputs through a channel and await the answer on a oneshot;
//! the thread packs the inputs of every request it has queued into decodes of at most one
//! micro-batch (upstream sets n_batch = n_ubatch for embeddings), one sequence per input, and
//! clears the cache after each. Completions keep running on the engine beside it.

use std::collections::{HashMap, VecDeque};
use std::sync::mpsc;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use serde_json::{json, Map, Value};
use tokio::sync::oneshot;

use deepseek::batch::BatchInput;
use deepseek::context::{Context, ContextParams};
use deepseek::model::hparams::Pooling;
use deepseek::model::Model;
use deepseek::tokenizer::Vocab;

use crate::error::ApiError;
use crate::{App, Args};

type AppState = State<Arc<App>>;

/// The routes, for `api::router` to merge among those behind the API key.
pub fn routes() -> Router<Arc<App>> {
    Router::new()
        .route("/v1/embeddings", post(embeddings_oai))
        .route("/embedding", post(embeddings_native))
        .route("/embeddings", post(embeddings_native))
        .route("/rerank", post(rerank))
        .route("/reranking", post(rerank))
        .route("/v1/rerank", post(rerank))
        .route("/v1/reranking", post(rerank))
}

// ---- normalization ----

/// upstream's `common_embd_normalize`: -1 none, 0 scaled so the largest |x| is 32760 (an
/// int16 range), 2 euclidean, any other n the p-norm with p = n (1: taxicab). Sums in f64 as
/// upstream; a zero norm gives a zero vector.
pub fn normalize(inp: &[f32], norm: i32) -> Vec<f32> {
    let sum: f64 = match norm {
        -1 => 1.0,
        0 => inp.iter().fold(0.0f64, |m, &x| m.max(x.abs() as f64)) / 32760.0,
        2 => inp.iter().map(|&x| (x * x) as f64).sum::<f64>().sqrt(),
        p => inp.iter().map(|&x| (x.abs() as f64).powi(p)).sum::<f64>().powf(1.0 / p as f64),
    };
    let scale = if sum > 0.0 { (1.0 / sum) as f32 } else { 0.0 };
    inp.iter().map(|&x| x * scale).collect()
}

// ---- the embeddings thread ----

/// One input to embed: its tokens and, for pooled vectors, the normalization to apply.
pub struct Item {
    pub tokens: Vec<i32>,
    pub normalize: i32,
}

/// What an input gave.
#[derive(Debug, PartialEq)]
pub enum Out {
    /// Pooling none: one (unnormalized) vector per token; otherwise the one pooled vector,
    /// normalized.
    Vectors(Vec<Vec<f32>>),
    /// Pooling rank: the score.
    Score(f32),
}

struct Job {
    items: Vec<Item>,
    reply: oneshot::Sender<Result<Vec<Out>, String>>,
}

/// The embeddings context's thread and what the handlers need to know to check a request.
pub struct Embedder {
    tx: mpsc::Sender<Job>,
    pub pooling: Pooling,
    pub n_embd: usize,
    /// Tokens one input may have when it cannot be split over several decodes (upstream's
    /// n_ubatch, after its n_batch = min(n_batch, n_ubatch)).
    pub n_ubatch: usize,
    /// Each input's context (as each of the engine's slots has).
    pub n_ctx: usize,
    /// Whether an input may be decoded in several pieces: the pooled value is the last
    /// token's (LAST, and RANK under causal attention), as upstream's `can_split`.
    pub splittable: bool,
    /// --embd-normalize.
    pub normalize: i32,
    /// The model's `tokenizer.chat_template.rerank`: the rerank prompt with {query} and
    /// {document}.
    pub rerank_template: Option<String>,
}

/// --pooling's value.
fn pooling_by_name(name: &str) -> Option<Pooling> {
    Some(match name {
        "none" => Pooling::None,
        "mean" => Pooling::Mean,
        "cls" => Pooling::Cls,
        "last" => Pooling::Last,
        "rank" => Pooling::Rank,
        _ => return None,
    })
}

impl Embedder {
    /// Creates the embeddings context (when --embedding or --rerank asks for one) and starts
    /// its thread. `n_ctx`: each input's context (the engine's slots' size).
    pub fn start(a: &Args, model: &Arc<Model>, n_ctx: u32) -> Result<Option<Embedder>, String> {
        if !a.embedding && !a.rerank {
            return Ok(None);
        }
        // --rerank sets pooling rank (upstream: the later of --rerank and --pooling wins; here
        // --rerank does)
        let pooling = if a.rerank { Some(Pooling::Rank) } else { a.pooling.as_deref().map(|p| pooling_by_name(p).ok_or_else(|| format!("--pooling {p}: expected none, mean, cls, last or rank"))).transpose()? };
        let resolved = pooling.unwrap_or(model.hp.pooling);
        let causal = model.hp.causal_attn;
        let splittable = resolved == Pooling::Last || (resolved == Pooling::Rank && causal);
        let n_ubatch = a.batch_size.min(a.ubatch_size).max(1);
        let n_seq = a.slots().0;
        // Cells per sequence: an input that cannot be split fits one micro-batch, so it needs
        // no more than that; one that can may fill its whole context.
        let cells = if splittable { n_ctx } else { n_ubatch.min(n_ctx) };
        let threads = a.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(4, |n| n.get() as i32));
        let p = ContextParams {
            n_ctx: cells.checked_mul(n_seq).ok_or("the embeddings context's size overflows")?,
            n_batch: n_ubatch,
            n_ubatch,
            n_seq_max: n_seq,
            n_threads: threads,
            n_threads_batch: threads,
            embeddings: true,
            pooling,
            type_k: a.cache_type_k,
            type_v: a.cache_type_v,
            ..ContextParams::default()
        };
        let (tx, rx) = mpsc::channel::<Job>();
        let (init_tx, init_rx) = mpsc::sync_channel::<Result<usize, String>>(1);
        let m = model.clone();
        std::thread::Builder::new()
            .name("embeddings".into())
            .spawn(move || {
                let ctx = match Context::new(m, &p) {
                    Ok(c) => c,
                    Err(e) => {
                        let _ = init_tx.send(Err(format!("the embeddings context: {e}")));
                        return;
                    }
                };
                let _ = init_tx.send(Ok(ctx.n_batch as usize));
                Worker { ctx, limit: p.n_batch as usize, open: HashMap::new(), queue: VecDeque::new(), next: 0 }.run(rx);
            })
            .map_err(|e| format!("cannot start the embeddings thread: {e}"))?;
        let limit = init_rx.recv().map_err(|_| "the embeddings thread ended before its context was made".to_string())??;
        eprintln!(
            "deepseek-server: embeddings served (pooling {}, {} sequences per decode of at most {limit} tokens, normalization {}){}",
            pooling_name(resolved),
            n_seq,
            a.embd_normalize,
            if resolved == Pooling::Rank { "; reranking served" } else { "" }
        );
        Ok(Some(Embedder {
            tx,
            pooling: resolved,
            n_embd: model.hp.n_embd,
            n_ubatch: n_ubatch as usize,
            n_ctx: n_ctx as usize,
            splittable,
            normalize: a.embd_normalize,
            rerank_template: model.file.get_str("tokenizer.chat_template.rerank").map(str::to_string),
        }))
    }

    /// Upstream's checks of one input when its slot takes it (server_context's launch and
    /// prompt processing), in its order: the token ids, then the sizes.
    fn check(&self, tokens: &[i32], n_vocab: usize) -> Result<(), Fail> {
        if tokens.iter().any(|&t| t < 0 || t as usize >= n_vocab) {
            return Err(ApiError::invalid("Prompt contains invalid tokens").into());
        }
        let n = tokens.len();
        if !self.splittable {
            if n > self.n_ubatch {
                return Err(ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", format!("input ({n} tokens) is too large to process. increase the physical batch size (current batch size: {})", self.n_ubatch)).into());
            }
            if n > self.n_ctx {
                return Err(Fail::Context { message: format!("input ({n} tokens) is larger than the max context size ({} tokens). skipping", self.n_ctx), n_prompt_tokens: n, n_ctx: self.n_ctx });
            }
        } else if n >= self.n_ctx {
            return Err(Fail::Context { message: format!("request ({n} tokens) exceeds the available context size ({} tokens), try increasing it", self.n_ctx), n_prompt_tokens: n, n_ctx: self.n_ctx });
        }
        Ok(())
    }

    /// Embeds the items (checked) on the embeddings thread.
    async fn run(&self, items: Vec<Item>) -> Result<Vec<Out>, ApiError> {
        let (reply, rx) = oneshot::channel();
        self.tx.send(Job { items, reply }).map_err(|_| ApiError::unavailable("the embeddings thread has stopped"))?;
        match rx.await {
            Ok(Ok(out)) => Ok(out),
            Ok(Err(e)) => Err(ApiError::internal(e)),
            Err(_) => Err(ApiError::unavailable("the embeddings thread has stopped")),
        }
    }
}

fn pooling_name(p: Pooling) -> &'static str {
    match p {
        Pooling::None => "none",
        Pooling::Mean => "mean",
        Pooling::Cls => "cls",
        Pooling::Last => "last",
        Pooling::Rank => "rank",
    }
}

/// A request in progress on the thread: its items, their results so far, how many are left.
struct Open {
    items: Vec<Item>,
    out: Vec<Option<Out>>,
    left: usize,
    reply: oneshot::Sender<Result<Vec<Out>, String>>,
}

struct Worker {
    ctx: Context,
    /// Tokens per decode at most.
    limit: usize,
    open: HashMap<u64, Open>,
    /// (request, item) in arrival order.
    queue: VecDeque<(u64, usize)>,
    next: u64,
}

impl Worker {
    fn admit(&mut self, job: Job) {
        let id = self.next;
        self.next += 1;
        let n = job.items.len();
        if n == 0 {
            let _ = job.reply.send(Ok(Vec::new()));
            return;
        }
        self.queue.extend((0..n).map(|i| (id, i)));
        self.open.insert(id, Open { out: (0..n).map(|_| None).collect(), left: n, items: job.items, reply: job.reply });
    }

    fn run(mut self, rx: mpsc::Receiver<Job>) {
        loop {
            if self.queue.is_empty() {
                match rx.recv() {
                    Ok(j) => self.admit(j),
                    // every sender is gone: the server is ending
                    Err(_) => return,
                }
            }
            while let Ok(j) = rx.try_recv() {
                self.admit(j);
            }
            // requests whose client has gone are not computed
            self.open.retain(|_, o| !o.reply.is_closed());
            let open = &self.open;
            self.queue.retain(|(id, _)| open.contains_key(id));
            let batch = self.take_batch();
            if batch.is_empty() {
                continue;
            }
            let result = if batch.len() == 1 && self.item(batch[0]).tokens.len() > self.limit { self.decode_long(batch[0]) } else { self.decode_packed(&batch) };
            self.ctx.kv.clear(false);
            match result {
                Ok(outs) => {
                    for ((id, i), out) in batch.into_iter().zip(outs) {
                        let Some(o) = self.open.get_mut(&id) else { continue };
                        o.out[i] = Some(out);
                        o.left -= 1;
                        if o.left == 0 {
                            if let Some(o) = self.open.remove(&id) {
                                let _ = o.reply.send(Ok(o.out.into_iter().flatten().collect()));
                            }
                        }
                    }
                }
                Err(e) => {
                    for (id, _) in batch {
                        if let Some(o) = self.open.remove(&id) {
                            let _ = o.reply.send(Err(e.clone()));
                        }
                    }
                    let open = &self.open;
                    self.queue.retain(|(id, _)| open.contains_key(id));
                }
            }
        }
    }

    fn item(&self, (id, i): (u64, usize)) -> &Item {
        &self.open[&id].items[i]
    }

    /// The next decode's items, first come first: as many as fit in `limit` tokens and the
    /// context's sequences (always at least one: an input longer than `limit` alone).
    fn take_batch(&mut self) -> Vec<(u64, usize)> {
        let mut batch = Vec::new();
        let mut total = 0;
        while let Some(&key) = self.queue.front() {
            let n = self.item(key).tokens.len();
            if batch.len() == self.ctx.n_seq_max as usize || (!batch.is_empty() && total + n > self.limit) {
                break;
            }
            self.queue.pop_front();
            batch.push(key);
            total += n;
        }
        batch
    }

    /// One decode of several inputs, input k as sequence k.
    fn decode_packed(&mut self, batch: &[(u64, usize)]) -> Result<Vec<Out>, String> {
        let mut tokens = Vec::new();
        let mut pos = Vec::new();
        let mut seq = Vec::new();
        for (k, &key) in batch.iter().enumerate() {
            let t = &self.item(key).tokens;
            tokens.extend_from_slice(t);
            pos.extend(0..t.len() as i32);
            seq.extend(std::iter::repeat_n(k as i32, t.len()));
        }
        let seq_of = |i: usize| std::slice::from_ref(&seq[i]);
        self.ctx.decode(&BatchInput { tokens: &tokens, pos: Some(&pos), seq_ids: Some(&seq_of), logits: None }, None).map_err(|e| format!("embeddings decode failed: {e:?}"))?;
        let mut outs = Vec::with_capacity(batch.len());
        let mut first = 0;
        for (k, &key) in batch.iter().enumerate() {
            let item = self.item(key);
            let n = item.tokens.len();
            outs.push(self.read(k as i32, first..first + n, item.normalize));
            first += n;
        }
        Ok(outs)
    }

    /// One input over several decodes (only where the pooled value is the last token's, so
    /// the last decode's pooling is the input's).
    fn decode_long(&mut self, key: (u64, usize)) -> Result<Vec<Out>, String> {
        let tokens = self.item(key).tokens.clone();
        let normalize = self.item(key).normalize;
        let zero = [0i32];
        let seq_of = |_: usize| &zero[..];
        let pos: Vec<i32> = (0..tokens.len() as i32).collect();
        let mut last = 0..0;
        for start in (0..tokens.len()).step_by(self.limit) {
            let end = (start + self.limit).min(tokens.len());
            self.ctx.decode(&BatchInput { tokens: &tokens[start..end], pos: Some(&pos[start..end]), seq_ids: Some(&seq_of), logits: None }, None).map_err(|e| format!("embeddings decode failed: {e:?}"))?;
            last = 0..end - start;
        }
        Ok(vec![self.read(0, last, normalize)])
    }

    /// Sequence `seq`'s result from the last decode, whose batch rows `rows` are its tokens
    /// (as upstream's send_embedding / send_rerank: a zero vector, or score -1e6, when the
    /// context has none).
    fn read(&self, seq: i32, rows: std::ops::Range<usize>, norm: i32) -> Out {
        let e = self.ctx.model.hp.n_embd;
        match self.ctx.pooling {
            Pooling::None => Out::Vectors(rows.map(|i| self.ctx.embeddings_row(i as i32).map_or_else(|_| vec![0.0; e], <[f32]>::to_vec)).collect()),
            Pooling::Rank => Out::Score(self.ctx.embeddings_seq(seq).and_then(|v| v.first().copied()).unwrap_or(-1e6)),
            _ => Out::Vectors(vec![self.ctx.embeddings_seq(seq).map_or_else(|| vec![0.0; e], |v| normalize(v, norm))]),
        }
    }
}

// ---- errors ----

/// A handler's failure: an `ApiError`, or upstream's exceed_context_size_error, which also
/// names the prompt's size and the context's.
enum Fail {
    Api(ApiError),
    Context { message: String, n_prompt_tokens: usize, n_ctx: usize },
}

impl From<ApiError> for Fail {
    fn from(e: ApiError) -> Fail {
        Fail::Api(e)
    }
}

impl IntoResponse for Fail {
    fn into_response(self) -> Response {
        match self {
            Fail::Api(e) => e.into_response(),
            Fail::Context { message, n_prompt_tokens, n_ctx } => {
                (StatusCode::BAD_REQUEST, axum::Json(json!({"error": {"code": 400, "message": message, "type": "exceed_context_size_error", "n_prompt_tokens": n_prompt_tokens, "n_ctx": n_ctx}}))).into_response()
            }
        }
    }
}

fn not_supported(message: &str) -> ApiError {
    ApiError::new(StatusCode::NOT_IMPLEMENTED, "not_supported_error", message)
}

/// An error upstream raises as a std::runtime_error (a 500 from its exception wrapper).
fn runtime(message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message)
}

// ---- inputs ----

fn tokenize(vocab: &Vocab, text: &str, add_special: bool, parse_special: bool) -> Vec<i32> {
    let mut t = Vec::new();
    vocab.tokenize(text.as_bytes(), add_special, parse_special, &mut t);
    t
}

/// An integer token id of a prompt (ids outside the vocabulary are refused later, as
/// upstream's validate does).
fn token_id(v: &Value) -> Result<i32, ApiError> {
    match v.as_i64() {
        Some(t) => Ok(i32::try_from(t).unwrap_or(-1)),
        None => match v.as_f64() {
            Some(f) => Ok(f as i32),
            None => Err(runtime(format!("a prompt element {v} is neither a string nor a token id"))),
        },
    }
}

/// upstream's `tokenize_mixed`: a string, or an array of strings and token ids (only the
/// first element, if a string, gets the special tokens).
fn tokenize_mixed(vocab: &Vocab, v: &Value, add_special: bool, parse_special: bool) -> Result<Vec<i32>, ApiError> {
    match v {
        Value::String(s) => Ok(tokenize(vocab, s, add_special, parse_special)),
        Value::Array(a) => {
            let mut out = Vec::new();
            for (i, p) in a.iter().enumerate() {
                match p {
                    Value::String(s) => out.extend(tokenize(vocab, s, add_special && i == 0, parse_special)),
                    other => out.push(token_id(other)?),
                }
            }
            Ok(out)
        }
        other => Err(runtime(format!("a prompt must be a string or an array of strings and token ids, not {other}"))),
    }
}

fn is_int(v: &Value) -> bool {
    v.is_i64() || v.is_u64()
}

/// upstream's `tokenize_input_subprompt`: a string, token ids, a mix of both, or an object
/// with `prompt_string`.
fn subprompt(vocab: &Vocab, v: &Value, add_special: bool, parse_special: bool) -> Result<Vec<i32>, ApiError> {
    match v {
        Value::String(_) => tokenize_mixed(vocab, v, add_special, parse_special),
        Value::Array(a) if a.iter().any(Value::is_string) && a.iter().any(is_int) => tokenize_mixed(vocab, v, add_special, parse_special),
        Value::Array(a) if a.iter().all(is_int) => a.iter().map(token_id).collect(),
        Value::Object(o) if o.contains_key("prompt_string") => {
            if o.contains_key("multimodal_data") {
                return Err(runtime("Multimodal data provided, but model does not support multimodal requests."));
            }
            tokenize_mixed(vocab, &o["prompt_string"], add_special, parse_special)
        }
        _ => Err(runtime("\"prompt\" elements must be a string, a list of tokens, a JSON object containing a prompt string, or a list of mixed strings & tokens.")),
    }
}

/// upstream's `tokenize_oai_content_array` for a text model: the parts' texts joined; media
/// parts are refused (no projector), unknown types too.
fn content_array(vocab: &Vocab, v: &Value) -> Result<Vec<i32>, ApiError> {
    let Value::Array(parts) = v else { return Err(ApiError::invalid("\"content\" must be an array")) };
    let mut text = String::new();
    for p in parts {
        match p.get("type").and_then(Value::as_str).unwrap_or("") {
            "text" => {}
            "image_url" => return Err(runtime("image input is not supported - hint: if this is unexpected, you may need to provide the mmproj")),
            "input_audio" => return Err(runtime("audio input is not supported - hint: if this is unexpected, you may need to provide the mmproj")),
            "input_video" | "video_url" => return Err(runtime("video input is not supported - hint: if this is unexpected, you may need to provide the mmproj")),
            _ => return Err(ApiError::invalid("unsupported content[].type")),
        }
        if let Some(t) = p.get("text").and_then(Value::as_str) {
            text.push_str(t);
        }
    }
    Ok(tokenize(vocab, &text, true, true))
}

/// An embeddings request's `input` (or `content`) as token lists, as upstream's
/// handle_embeddings_impl reads it: an array without token ids is several prompts, anything
/// else one; an object with `content` is OpenAI-style content parts.
pub fn embedding_prompts(vocab: &Vocab, prompt: &Value) -> Result<Vec<Vec<i32>>, ApiError> {
    let entry = |p: &Value| match p {
        Value::Object(o) if o.contains_key("content") => content_array(vocab, &o["content"]),
        _ => subprompt(vocab, p, true, true),
    };
    let out: Vec<Vec<i32>> = match prompt {
        Value::Array(a) if !a.iter().any(is_int) => a.iter().map(entry).collect::<Result<_, _>>()?,
        _ => vec![entry(prompt)?],
    };
    if out.is_empty() {
        return Err(ApiError::invalid("\"input\" must not be empty"));
    }
    if out.iter().any(Vec::is_empty) {
        // models that add no BOS give nothing for an empty text
        return Err(ApiError::invalid("Input content cannot be empty"));
    }
    Ok(out)
}

/// upstream's `format_prompt_rerank`: the model's rerank template with {query} and
/// {document}, or [BOS] query [EOS] [SEP] document [EOS] with each special token where the
/// vocabulary adds it (EOS falling back to SEP when the vocabulary has none).
pub fn rerank_prompt(vocab: &Vocab, template: Option<&str>, query: &str, doc: &str) -> Vec<i32> {
    if let Some(t) = template {
        let prompt = t.replace("{query}", query).replace("{document}", doc);
        return tokenize(vocab, &prompt, false, true);
    }
    let eos = if vocab.eos() >= 0 { vocab.eos() } else { vocab.sep() };
    let mut out = Vec::new();
    if vocab.add_bos() {
        out.push(vocab.bos());
    }
    out.extend(tokenize(vocab, query, false, false));
    if vocab.add_eos() {
        out.push(eos);
    }
    if vocab.add_sep() {
        out.push(vocab.sep());
    }
    out.extend(tokenize(vocab, doc, false, false));
    if vocab.add_eos() {
        out.push(eos);
    }
    out
}

// ---- responses ----

/// Standard base64 (with padding) of `bytes`.
fn base64(bytes: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for c in bytes.chunks(3) {
        let n = (c[0] as u32) << 16 | (*c.get(1).unwrap_or(&0) as u32) << 8 | *c.get(2).unwrap_or(&0) as u32;
        for k in 0..4 {
            if k <= c.len() {
                out.push(ABC[(n >> (18 - 6 * k) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The vector's floats as little-endian bytes in base64 (upstream sends the host's f32s).
fn base64_floats(v: &[f32]) -> String {
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    base64(&bytes)
}

/// The request's `model` when it is a string, else the server's name (upstream's
/// json_value).
fn model_name(req: &Map<String, Value>, name: &str) -> String {
    req.get("model").and_then(Value::as_str).unwrap_or(name).to_string()
}

fn usage(n: usize) -> Value {
    json!({"prompt_tokens": n, "total_tokens": n})
}

/// upstream's `format_embeddings_response_oaicompat` (keys in its order: sorted).
pub fn oai_response(model: &str, outs: &[(Vec<f32>, usize)], base64: bool) -> Value {
    let data: Vec<Value> = outs
        .iter()
        .enumerate()
        .map(|(i, (v, _))| if base64 { json!({"embedding": base64_floats(v), "encoding_format": "base64", "index": i, "object": "embedding"}) } else { json!({"embedding": v, "index": i, "object": "embedding"}) })
        .collect();
    let n: usize = outs.iter().map(|(_, n)| n).sum();
    json!({"data": data, "model": model, "object": "list", "usage": usage(n)})
}

/// llama-server's own shape: per input its index and its list of vectors.
pub fn native_response(outs: &[Vec<Vec<f32>>]) -> Value {
    Value::Array(outs.iter().enumerate().map(|(i, v)| json!({"embedding": v, "index": i})).collect())
}

/// upstream's `format_response_rerank`: the documents by score, best first, at most `top_n`;
/// TEI's shape (a bare array, `score`, and `text` with return_text) or Jina's.
pub fn rerank_response(model: &str, scores: &[(f32, usize)], tei: bool, return_text: bool, docs: &[String], top_n: usize) -> Value {
    let label = if tei { "score" } else { "relevance_score" };
    let mut order: Vec<usize> = (0..scores.len()).collect();
    // stable, so equal scores keep the documents' order
    order.sort_by(|&a, &b| scores[b].0.total_cmp(&scores[a].0));
    order.truncate(top_n);
    let results: Vec<Value> = order
        .iter()
        .map(|&i| {
            let mut m = Map::new();
            m.insert("index".into(), json!(i));
            m.insert(label.into(), json!(scores[i].0));
            if tei && return_text {
                m.insert("text".into(), json!(docs[i]));
            }
            Value::Object(m)
        })
        .collect();
    if tei {
        return Value::Array(results);
    }
    let n: usize = scores.iter().map(|(_, n)| n).sum();
    json!({"model": model, "object": "list", "results": results, "usage": usage(n)})
}

// ---- handlers ----

fn check_open(app: &App) -> Result<&crate::Ready, ApiError> {
    if app.closing.load(std::sync::atomic::Ordering::SeqCst) {
        return Err(ApiError::unavailable("the server is shutting down"));
    }
    app.ready()
}

async fn embeddings_oai(State(app): AppState, body: Body) -> Result<Response, Fail> {
    embeddings(app, body, true).await
}

async fn embeddings_native(State(app): AppState, body: Body) -> Result<Response, Fail> {
    embeddings(app, body, false).await
}

/// upstream's handle_embeddings_impl: `oai` for /v1/embeddings.
async fn embeddings(app: Arc<App>, body: Body, mut oai: bool) -> Result<Response, Fail> {
    let r = check_open(&app)?;
    let Some(e) = r.embed.as_ref() else { return Err(not_supported("This server does not support embeddings. Start it with `--embeddings`").into()) };
    if oai && e.pooling == Pooling::None {
        return Err(ApiError::invalid("Pooling type 'none' is not OAI compatible. Please use a different pooling type").into());
    }
    let v = crate::api::read_json(&app, body).await?;
    let Value::Object(req) = &v else { return Err(ApiError::invalid("the request body must be a JSON object").into()) };
    let prompt = if let Some(p) = req.get("input") {
        p
    } else if let Some(p) = req.get("content") {
        // "content" is not OpenAI's: the answer is in llama-server's own shape
        oai = false;
        p
    } else {
        return Err(ApiError::invalid("\"input\" or \"content\" must be provided").into());
    };
    let use_base64 = match req.get("encoding_format") {
        None => false,
        Some(Value::String(f)) if f == "base64" => true,
        Some(Value::String(f)) if f == "float" => false,
        Some(_) => return Err(ApiError::param("encoding_format", "The format to return the embeddings in. Can be either float or base64").into()),
    };
    // upstream does not read `dimensions`: only the model's own size can be honoured
    match req.get("dimensions") {
        None | Some(Value::Null) => {}
        Some(d) if d.as_u64() == Some(e.n_embd as u64) => {}
        Some(d) => return Err(ApiError::param("dimensions", format!("'dimensions' = {d}: this model's embeddings have {} dimensions, and they are not shortened", e.n_embd)).into()),
    }
    let vocab = &r.model.vocab;
    let prompts = embedding_prompts(vocab, prompt)?;
    let norm = match req.get("embd_normalize") {
        None => e.normalize,
        Some(n) => n.as_i64().and_then(|n| i32::try_from(n).ok()).ok_or_else(|| ApiError::param("embd_normalize", "'embd_normalize' must be an integer"))?,
    };
    let n_vocab = vocab.n_tokens();
    for p in &prompts {
        e.check(p, n_vocab)?;
    }
    let counts: Vec<usize> = prompts.iter().map(Vec::len).collect();
    let outs = e.run(prompts.into_iter().map(|tokens| Item { tokens, normalize: norm }).collect()).await?;
    let vectors: Vec<Vec<Vec<f32>>> = outs
        .into_iter()
        .map(|o| match o {
            Out::Vectors(v) => v,
            // pooling rank (--rerank) on an embeddings route: the pooled values the context
            // keeps for a sequence (its n_cls_out scores), normalized as any pooled vector
            Out::Score(s) => vec![normalize(&[s], norm)],
        })
        .collect();
    let body = if oai {
        let firsts: Vec<(Vec<f32>, usize)> = vectors.into_iter().zip(counts).map(|(mut v, n)| (if v.is_empty() { Vec::new() } else { v.swap_remove(0) }, n)).collect();
        oai_response(&model_name(req, &r.name), &firsts, use_base64)
    } else {
        native_response(&vectors)
    };
    Ok(axum::Json(body).into_response())
}

/// upstream's post_rerank.
async fn rerank(State(app): AppState, body: Body) -> Result<Response, Fail> {
    let r = check_open(&app)?;
    let e = match r.embed.as_ref() {
        Some(e) if e.pooling == Pooling::Rank => e,
        _ => return Err(not_supported("This server does not support reranking. Start it with `--reranking`").into()),
    };
    let v = crate::api::read_json(&app, body).await?;
    let Value::Object(req) = &v else { return Err(ApiError::invalid("the request body must be a JSON object").into()) };
    let tei = req.contains_key("texts");
    let query = match req.get("query") {
        Some(Value::String(q)) => q,
        Some(_) => return Err(ApiError::invalid("\"query\" must be a string").into()),
        None => return Err(ApiError::invalid("\"query\" must be provided").into()),
    };
    // upstream's json_value: a field of the wrong type counts as absent
    let strings = |key: &str| -> Option<Vec<String>> { req.get(key)?.as_array()?.iter().map(|d| d.as_str().map(str::to_string)).collect() };
    let docs = strings("documents").or_else(|| strings("texts")).unwrap_or_default();
    if docs.is_empty() {
        return Err(ApiError::invalid("\"documents\" must be a non-empty string array").into());
    }
    let top_n = match req.get("top_n").and_then(|t| t.as_i64().or_else(|| t.as_f64().map(|f| f as i64))) {
        None => docs.len(),
        Some(n) if n >= 0 => n as usize,
        Some(n) => return Err(ApiError::param("top_n", format!("'top_n' = {n} must not be negative")).into()),
    };
    let return_text = req.get("return_text").and_then(Value::as_bool).unwrap_or(false);
    let vocab = &r.model.vocab;
    let prompts: Vec<Vec<i32>> = docs.iter().map(|d| rerank_prompt(vocab, e.rerank_template.as_deref(), query, d)).collect();
    let n_vocab = vocab.n_tokens();
    for p in &prompts {
        if p.is_empty() {
            return Err(ApiError::invalid("Input content cannot be empty").into());
        }
        e.check(p, n_vocab)?;
    }
    let counts: Vec<usize> = prompts.iter().map(Vec::len).collect();
    let outs = e.run(prompts.into_iter().map(|tokens| Item { tokens, normalize: -1 }).collect()).await?;
    let scores: Vec<(f32, usize)> = outs
        .into_iter()
        .zip(counts)
        .map(|(o, n)| match o {
            Out::Score(s) => (s, n),
            Out::Vectors(v) => (v.first().and_then(|x| x.first()).copied().unwrap_or(-1e6), n),
        })
        .collect();
    Ok(axum::Json(rerank_response(&model_name(req, &r.name), &scores, tei, return_text, &docs, top_n)).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: &[f32], b: &[f32]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-6)
    }

    #[test]
    fn normalization_as_common_embd_normalize() {
        let v = [3.0f32, -4.0, 0.0];
        assert!(close(&normalize(&v, 2), &[0.6, -0.8, 0.0]));
        assert!(close(&normalize(&v, -1), &v));
        assert!(close(&normalize(&v, 1), &[3.0 / 7.0, -4.0 / 7.0, 0.0]));
        // 0: the largest |x| becomes 32760
        assert!(close(&normalize(&v, 0), &[24570.0, -32760.0, 0.0]));
        // p = 3
        let n3 = (27.0f64 + 64.0).powf(1.0 / 3.0) as f32;
        assert!(close(&normalize(&v, 3), &[3.0 / n3, -4.0 / n3, 0.0]));
        // a zero vector stays zero (no division by zero)
        assert_eq!(normalize(&[0.0, 0.0], 2), vec![0.0, 0.0]);
        assert_eq!(normalize(&[0.0, 0.0], 0), vec![0.0, 0.0]);
    }

    #[test]
    fn base64_as_rfc4648() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
        assert_eq!(base64_floats(&[1.0]), "AACAPw==");
    }

    #[test]
    fn oai_shape() {
        let r = oai_response("m", &[(vec![0.5, -0.5], 3), (vec![1.0, 0.0], 4)], false);
        assert_eq!(r, json!({"data": [{"embedding": [0.5, -0.5], "index": 0, "object": "embedding"}, {"embedding": [1.0, 0.0], "index": 1, "object": "embedding"}], "model": "m", "object": "list", "usage": {"prompt_tokens": 7, "total_tokens": 7}}));
        let r = oai_response("m", &[(vec![1.0], 2)], true);
        assert_eq!(r["data"][0], json!({"embedding": "AACAPw==", "encoding_format": "base64", "index": 0, "object": "embedding"}));
        let keys: Vec<&String> = r.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["data", "model", "object", "usage"]);
    }

    #[test]
    fn native_shape() {
        let r = native_response(&[vec![vec![1.0, 2.0], vec![3.0, 4.0]], vec![vec![0.0]]]);
        assert_eq!(r, json!([{"embedding": [[1.0, 2.0], [3.0, 4.0]], "index": 0}, {"embedding": [[0.0]], "index": 1}]));
    }

    #[test]
    fn rerank_shapes() {
        let docs: Vec<String> = ["a", "b", "c"].into_iter().map(String::from).collect();
        let scores = [(0.1f32, 3), (0.9, 4), (-2.0, 5)];
        let r = rerank_response("m", &scores, false, true, &docs, 2);
        assert_eq!(r, json!({"model": "m", "object": "list", "results": [{"index": 1, "relevance_score": 0.9f32}, {"index": 0, "relevance_score": 0.1f32}], "usage": {"prompt_tokens": 12, "total_tokens": 12}}));
        // TEI: a bare array; return_text adds the text
        let r = rerank_response("m", &scores, true, true, &docs, 99);
        assert_eq!(r, json!([{"index": 1, "score": 0.9f32, "text": "b"}, {"index": 0, "score": 0.1f32, "text": "a"}, {"index": 2, "score": -2.0f32, "text": "c"}]));
        assert_eq!(rerank_response("m", &scores, true, false, &docs, 0), json!([]));
    }

    #[test]
    fn pooling_names() {
        for n in ["none", "mean", "cls", "last", "rank"] {
            assert_eq!(pooling_name(pooling_by_name(n).unwrap()), n);
        }
        assert!(pooling_by_name("max").is_none());
    }

    fn tiny() -> Model {
        Model::load(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/tiny/tiny-llama-f32.gguf"), true).unwrap()
    }

    fn embedder(m: &Arc<Model>, args: &[&str]) -> Embedder {
        use clap::Parser;
        let argv = ["deepseek-server", "--model", "x", "--threads", "2"].into_iter().chain(args.iter().copied());
        Embedder::start(&Args::try_parse_from(argv).unwrap(), m, 256).unwrap().unwrap()
    }

    fn cos(a: &[f32], b: &[f32]) -> f64 {
        let d: f64 = a.iter().zip(b).map(|(x, y)| (x * y) as f64).sum();
        d / (a.iter().map(|x| (x * x) as f64).sum::<f64>() * b.iter().map(|x| (x * x) as f64).sum::<f64>()).sqrt()
    }

    fn vectors(e: &Embedder, inputs: &[Vec<i32>]) -> Vec<Vec<Vec<f32>>> {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let outs = rt.block_on(e.run(inputs.iter().map(|t| Item { tokens: t.clone(), normalize: 2 }).collect())).unwrap();
        outs.into_iter()
            .map(|o| match o {
                Out::Vectors(v) => v,
                Out::Score(s) => vec![vec![s]],
            })
            .collect()
    }

    fn tokens(seed: i32, n: usize) -> Vec<i32> {
        (0..n as i32).map(|i| (i * 37 + seed * 11 + 5) % 200).collect()
    }

    /// The thread's decodes give each input what it gets alone: several inputs packed into
    /// one decode (MEAN, NONE), and an input longer than a decode split over several (LAST).
    #[test]
    fn packed_and_split_inputs_match_single_ones() {
        let m = Arc::new(tiny());
        let inputs = vec![tokens(1, 5), tokens(2, 9), tokens(3, 12)];
        for pooling in ["mean", "none", "cls"] {
            let e = embedder(&m, &["--embedding", "--pooling", pooling, "--ubatch-size", "32", "--parallel", "3"]);
            let packed = vectors(&e, &inputs);
            for (i, t) in inputs.iter().enumerate() {
                let alone = vectors(&e, std::slice::from_ref(t));
                assert_eq!(packed[i].len(), alone[0].len(), "{pooling}: input {i}'s vector count");
                for (p, a) in packed[i].iter().zip(&alone[0]) {
                    assert!(cos(p, a) > 0.99999, "{pooling}: input {i} packed vs alone: cosine {}", cos(p, a));
                }
            }
        }
        // LAST: 40 tokens in decodes of 16 against one decode of 64
        let long = tokens(4, 40);
        let split = vectors(&embedder(&m, &["--embedding", "--pooling", "last", "--ubatch-size", "16"]), std::slice::from_ref(&long));
        let whole = vectors(&embedder(&m, &["--embedding", "--pooling", "last", "--ubatch-size", "64"]), std::slice::from_ref(&long));
        assert!(cos(&split[0][0], &whole[0][0]) > 0.99999);
    }

    /// upstream's size checks: a MEAN input beyond n_ubatch is too large; a LAST one may reach
    /// the context (less one token).
    #[test]
    fn size_limits_as_upstream() {
        let m = Arc::new(tiny());
        let n_vocab = m.vocab.n_tokens();
        let e = embedder(&m, &["--embedding", "--pooling", "mean", "--ubatch-size", "16"]);
        assert!(e.check(&tokens(0, 16), n_vocab).is_ok());
        assert!(matches!(e.check(&tokens(0, 17), n_vocab), Err(Fail::Api(a)) if a.status == 500 && a.message.contains("too large")));
        assert!(matches!(e.check(&[n_vocab as i32], n_vocab), Err(Fail::Api(a)) if a.status == 400));
        let e = embedder(&m, &["--embedding", "--pooling", "last", "--ubatch-size", "16"]);
        assert!(e.check(&tokens(0, 255), n_vocab).is_ok());
        assert!(matches!(e.check(&tokens(0, 256), n_vocab), Err(Fail::Context { n_ctx: 256, .. })));
    }

    /// The request shapes of upstream's tokenize_input_prompts and their errors (token ids, so
    /// that the results do not depend on the tiny model's vocabulary).
    #[test]
    fn prompt_shapes_without_text() {
        let m = tiny();
        let v = &m.vocab;
        let ids = |p: Value| embedding_prompts(v, &p).map_err(|e| (e.status.as_u16(), e.message));
        assert_eq!(ids(json!([12, 34, 56])), Ok(vec![vec![12, 34, 56]]));
        assert_eq!(ids(json!([[12, 34], [56]])), Ok(vec![vec![12, 34], vec![56]]));
        assert_eq!(ids(json!([])), Err((400, "\"input\" must not be empty".into())));
        assert_eq!(ids(json!([[]])), Err((400, "Input content cannot be empty".into())));
        assert_eq!(ids(json!({"content": "string"})), Err((400, "\"content\" must be an array".into())));
        assert_eq!(ids(json!({"content": [{"type": "unknown"}]})), Err((400, "unsupported content[].type".into())));
        assert_eq!(ids(json!({"content": [{"type": "image_url", "image_url": {"url": "data:"}}]})).unwrap_err().0, 500);
        assert_eq!(ids(json!({"prompt_string": [7, 8]})), Ok(vec![vec![7, 8]]));
        assert_eq!(ids(json!({"prompt_string": "x", "multimodal_data": []})).unwrap_err().0, 500);
        assert_eq!(ids(json!(5)).unwrap_err().0, 500);
        assert_eq!(ids(json!(null)).unwrap_err().0, 500);
        assert_eq!(ids(json!([["a", "b"]])).unwrap_err().0, 500);
    }
}
