//! `POST /infill`: fill-in-the-middle code completion as llama-server b11312 serves it
//! (`post_infill` in server-context.cpp, `format_prompt_infill` in server-common.cpp). The
//! request's `input_prefix`, `input_suffix`, optional `prompt` (the start of the middle) and
//! `input_extra` (other files: `{"filename", "text"}` chunks) become one prompt in the FIM
//! repo-level pattern:
//!
//! ```text
//! [FIM_REP]myproject\n
//! [FIM_SEP]filename0\n chunk 0 text
//! [FIM_SEP]filename1\n chunk 1 text ...
//! [FIM_SEP]filename\n
//! [BOS] [FIM_PRE]prefix prompt [FIM_SUF]suffix [FIM_MID]
//! ```
//!
//! (`--spm-infill`: the suffix part before the prefix part). Everything else of the request
//! is read as `/completion` reads it, and the answer is `/completion`'s.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Map, Value};

use deepseek::tokenizer::Vocab;

use crate::api::{check_open, native_from_tokens, read_json};
use crate::error::ApiError;
use crate::params::Fields;
use crate::App;

/// llama.h's LLAMA_TOKEN_NULL: the vocabulary has no such token.
const NULL: i32 = -1;

/// The separator put before an extra chunk when the vocabulary has no FIM_SEP token
/// (upstream's `k_chunk_prefix_str`).
const CHUNK_SEPARATOR: &str = "\n\n--- snippet ---\n\n";

pub(crate) async fn infill(State(app): State<Arc<App>>, body: Body) -> Result<Response, ApiError> {
    let v = read_json(&app, body).await?;
    let r = check_open(&app)?;
    let vocab = &r.model.vocab;
    supported(vocab)?;
    let f = Fields::parse(&v)?;
    let input = Input::read(f.0, vocab)?;
    let budget = Budget { n_batch: app.args.batch_size as i64, n_predict: app.args.predict as i64, n_ctx: r.engine.n_ctx_seq() as i64 };
    let tokens = layout(vocab, &input, budget, app.args.spm_infill);
    native_from_tokens(&app, &f, vec![tokens]).await
}

/// Upstream's check of the model: a 501 naming each of FIM_PRE, FIM_SUF, FIM_MID it lacks.
fn supported(vocab: &Vocab) -> Result<(), ApiError> {
    let mut err = String::new();
    if vocab.fim_pre() == NULL {
        err += "prefix token is missing. ";
    }
    if vocab.fim_suf() == NULL {
        err += "suffix token is missing. ";
    }
    if vocab.fim_mid() == NULL {
        err += "middle token is missing. ";
    }
    if err.is_empty() {
        Ok(())
    } else {
        Err(ApiError::new(StatusCode::NOT_IMPLEMENTED, "not_supported_error", format!("Infill is not supported by this model: {err}")))
    }
}

/// One `input_extra` chunk.
#[derive(Debug, PartialEq)]
struct Chunk {
    filename: String,
    text: String,
}

/// What an infill request asks for, tokenized (prefix and suffix without parsing special
/// tokens, the prompt with, as upstream).
#[derive(Debug)]
struct Input {
    prefix: Vec<i32>,
    suffix: Vec<i32>,
    prompt: Vec<i32>,
    extra: Vec<Chunk>,
}

impl Input {
    /// The fields of the body, checked as upstream's `post_infill` checks them. Where upstream
    /// answers a malformed field with a 500 (a JSON exception: `input_prefix` or
    /// `input_suffix` missing or neither text nor tokens) or ignores it (a `prompt` that is no
    /// string is taken as empty) this is a 400 naming the field.
    fn read(body: &Map<String, Value>, vocab: &Vocab) -> Result<Input, ApiError> {
        let prompt = match body.get("prompt") {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(_) => return Err(ApiError::param("prompt", "\"prompt\" must be a string")),
        };
        let prefix = mixed(body, "input_prefix", vocab)?;
        let suffix = mixed(body, "input_suffix", vocab)?;
        let extra = match body.get("input_extra") {
            None => Vec::new(),
            Some(Value::Array(a)) => a.iter().map(chunk).collect::<Result<_, _>>()?,
            // A null is refused too, as upstream (it tests presence, then the type).
            Some(_) => return Err(ApiError::param("input_extra", "\"input_extra\" must be an array of {\"filename\": string, \"text\": string}")),
        };
        Ok(Input { prefix, suffix, prompt: tokenize(vocab, &prompt, true), extra })
    }
}

/// One `input_extra` element: `text` a string, `filename` (default "tmp") a string when given.
fn chunk(v: &Value) -> Result<Chunk, ApiError> {
    let text = match v.get("text") {
        Some(Value::String(s)) => s.clone(),
        _ => return Err(ApiError::param("input_extra", "extra_context chunk must contain a \"text\" field with a string value")),
    };
    let filename = match v.get("filename") {
        None => "tmp".to_string(),
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(ApiError::param("input_extra", "extra_context chunk's \"filename\" field must be a string")),
    };
    Ok(Chunk { filename, text })
}

/// `input_prefix` / `input_suffix`: a string, or an array of strings and token ids
/// (upstream's `tokenize_mixed`); required.
fn mixed(body: &Map<String, Value>, name: &str, vocab: &Vocab) -> Result<Vec<i32>, ApiError> {
    let n_vocab = vocab.n_tokens() as i64;
    let bad = || ApiError::param(name, format!("\"{name}\" must be a string or an array of strings and token ids"));
    match body.get(name) {
        None => Err(ApiError::param(name, format!("\"{name}\" is required"))),
        Some(Value::String(s)) => Ok(tokenize(vocab, s, false)),
        Some(Value::Array(a)) => {
            let mut out = Vec::new();
            for p in a {
                match p {
                    Value::String(s) => out.extend(tokenize(vocab, s, false)),
                    Value::Number(n) => match n.as_i64() {
                        Some(id) if (0..n_vocab).contains(&id) => out.push(id as i32),
                        _ => return Err(ApiError::param(name, format!("\"{name}\": {n} is not a token id of this model (0..{n_vocab})"))),
                    },
                    _ => return Err(bad()),
                }
            }
            Ok(out)
        }
        Some(_) => Err(bad()),
    }
}

/// `text`'s tokens without BOS/EOS (`common_tokenize(vocab, text, false, parse_special)`).
fn tokenize(vocab: &Vocab, text: &str, parse_special: bool) -> Vec<i32> {
    let mut out = Vec::new();
    vocab.tokenize(text.as_bytes(), false, parse_special, &mut out);
    out
}

/// What the prompt is fitted to: the server's `--batch-size`, `--predict` and a slot's
/// context, the values upstream uses (not the request's n_predict).
#[derive(Clone, Copy)]
struct Budget {
    n_batch: i64,
    n_predict: i64,
    n_ctx: i64,
}

/// The prompt tokens of `input` as upstream's `format_prompt_infill` lays them out. The
/// prefix and suffix share one batch 3:1 (the end of the prefix and the start of the suffix
/// are kept; the prompt's tokens come out of the suffix's share); the extra context fills
/// what the context has beyond a batch and twice `n_predict`, keeping its end.
fn layout(vocab: &Vocab, input: &Input, b: Budget, spm: bool) -> Vec<i32> {
    let mut extra = Vec::new();
    if vocab.fim_rep() != NULL {
        // upstream names every project "myproject"
        extra.push(vocab.fim_rep());
        extra.extend(tokenize(vocab, "myproject\n", false));
    }
    for c in &input.extra {
        if vocab.fim_sep() != NULL {
            extra.push(vocab.fim_sep());
            extra.extend(tokenize(vocab, &format!("{}\n", c.filename), false));
        } else {
            extra.extend(tokenize(vocab, CHUNK_SEPARATOR, false));
        }
        extra.extend(tokenize(vocab, &c.text, false));
    }
    if vocab.fim_sep() != NULL {
        // the file being edited: upstream names it "filename"
        extra.push(vocab.fim_sep());
        extra.extend(tokenize(vocab, "filename\n", false));
    }

    let n_prefix_take = (input.prefix.len() as i64).min(3 * (b.n_batch / 4)).max(0) as usize;
    let n_suffix_take = (input.suffix.len() as i64).min((b.n_batch / 4 - (2 + input.prompt.len() as i64)).max(0)) as usize;
    let n_extra_take = (b.n_ctx - b.n_batch - 2 * b.n_predict).max(0).min(extra.len() as i64) as usize;

    let mut prefix = vec![vocab.fim_pre()];
    prefix.extend_from_slice(&input.prefix[input.prefix.len() - n_prefix_take..]);
    prefix.extend_from_slice(&input.prompt);
    let mut suffix = vec![vocab.fim_suf()];
    suffix.extend_from_slice(&input.suffix[..n_suffix_take]);
    let (first, second) = if spm { (suffix, prefix) } else { (prefix, suffix) };

    let mut out = Vec::with_capacity(n_extra_take + 2 + first.len() + second.len());
    out.extend_from_slice(&extra[extra.len() - n_extra_take..]);
    if vocab.add_bos() {
        out.push(vocab.bos());
    }
    out.extend(first);
    out.extend(second);
    out.push(vocab.fim_mid());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The vocabulary of Qwen2.5-Coder-0.5B (it has FIM_PRE, FIM_SUF, FIM_MID, FIM_REP and
    /// FIM_SEP); None when the model is not on this machine.
    fn coder() -> Option<Vocab> {
        let home = std::env::var_os("HOME")?;
        let path = std::path::Path::new(&home).join(".cache/deepseek/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf");
        if !path.exists() {
            eprintln!("skipped: {} is missing", path.display());
            return None;
        }
        let f = deepseek::gguf::GgufFile::open(&path, true).ok()?;
        Vocab::from_gguf(&f).ok()
    }

    fn tok(v: &Vocab, s: &str) -> Vec<i32> {
        tokenize(v, s, false)
    }

    fn input(v: &Vocab, body: Value) -> Result<Input, ApiError> {
        Input::read(body.as_object().unwrap(), v)
    }

    const BIG: Budget = Budget { n_batch: 1024, n_predict: 64, n_ctx: 2048 };

    /// Without extra chunks: the repo and current-file lines, BOS when the vocabulary adds
    /// it, then FIM_PRE prefix prompt FIM_SUF suffix FIM_MID.
    #[test]
    fn psm_layout() {
        let Some(v) = coder() else { return };
        assert!(v.fim_rep() != NULL && v.fim_sep() != NULL);
        let i = input(&v, json!({"input_prefix": "int main() {\n", "prompt": "    int n = ", "input_suffix": "}\n"})).unwrap();
        let mut want = vec![v.fim_rep()];
        want.extend(tok(&v, "myproject\n"));
        want.push(v.fim_sep());
        want.extend(tok(&v, "filename\n"));
        if v.add_bos() {
            want.push(v.bos());
        }
        want.push(v.fim_pre());
        want.extend(tok(&v, "int main() {\n"));
        want.extend(tok(&v, "    int n = "));
        want.push(v.fim_suf());
        want.extend(tok(&v, "}\n"));
        want.push(v.fim_mid());
        assert_eq!(layout(&v, &i, BIG, false), want);
    }

    /// `--spm-infill`: the suffix part first, the prefix part (with the prompt) after it.
    #[test]
    fn spm_layout() {
        let Some(v) = coder() else { return };
        let i = input(&v, json!({"input_prefix": "a = 1\n", "prompt": "b", "input_suffix": "c = 3\n"})).unwrap();
        let out = layout(&v, &i, BIG, true);
        let at = out.iter().position(|&t| t == v.fim_suf()).unwrap();
        let mut tail = vec![v.fim_suf()];
        tail.extend(tok(&v, "c = 3\n"));
        tail.push(v.fim_pre());
        tail.extend(tok(&v, "a = 1\n"));
        tail.extend(tok(&v, "b"));
        tail.push(v.fim_mid());
        assert_eq!(out[at..], tail[..]);
        assert_eq!(out[at - 1], if v.add_bos() { v.bos() } else { *tok(&v, "filename\n").last().unwrap() });
    }

    /// Each chunk is FIM_SEP, its filename ("tmp" when not given) and a newline, its text; in
    /// the request's order, after the repo line and before the current file's line.
    #[test]
    fn extra_chunks() {
        let Some(v) = coder() else { return };
        let i = input(&v, json!({"input_prefix": "x", "input_suffix": "y", "input_extra": [
            {"filename": "llama.h", "text": "LLAMA_API int32_t llama_n_threads();\n"},
            {"text": "int z;\n"},
        ]}))
        .unwrap();
        assert_eq!(i.extra[1], Chunk { filename: "tmp".into(), text: "int z;\n".into() });
        let mut want = vec![v.fim_rep()];
        want.extend(tok(&v, "myproject\n"));
        want.push(v.fim_sep());
        want.extend(tok(&v, "llama.h\n"));
        want.extend(tok(&v, "LLAMA_API int32_t llama_n_threads();\n"));
        want.push(v.fim_sep());
        want.extend(tok(&v, "tmp\n"));
        want.extend(tok(&v, "int z;\n"));
        want.push(v.fim_sep());
        want.extend(tok(&v, "filename\n"));
        let out = layout(&v, &i, BIG, false);
        assert_eq!(out[..want.len()], want[..]);
        assert_eq!(out[want.len()..].iter().filter(|&&t| t == v.fim_pre()).count(), 1);
    }

    /// The prefix keeps its last 3/4 of a batch, the suffix its first quarter less the prompt
    /// and two; the extra context keeps its last n_ctx - n_batch - 2 n_predict tokens.
    #[test]
    fn truncation_to_the_budget() {
        let Some(v) = coder() else { return };
        let prefix: Vec<i32> = (100..200).collect();
        let suffix: Vec<i32> = (300..400).collect();
        let i = Input { prefix: prefix.clone(), suffix: suffix.clone(), prompt: vec![7, 8, 9], extra: vec![Chunk { filename: "f".into(), text: "word ".repeat(50) }] };
        // n_batch 40: prefix 30, suffix 10 - (2 + 3) = 5; extra 100 - 40 - 2*10 = 40
        let b = Budget { n_batch: 40, n_predict: 10, n_ctx: 100 };
        let out = layout(&v, &i, b, false);
        let bos = usize::from(v.add_bos());
        let pre = out.iter().position(|&t| t == v.fim_pre()).unwrap();
        assert_eq!(pre, 40 + bos);
        assert_eq!(out[pre + 1..pre + 31], prefix[70..]);
        assert_eq!(out[pre + 31..pre + 34], [7, 8, 9]);
        assert_eq!(out[pre + 34], v.fim_suf());
        assert_eq!(out[pre + 35..pre + 40], suffix[..5]);
        assert_eq!(out[pre + 40..], [v.fim_mid()]);
        // the extra context's end: the current file's line
        let mut file = vec![v.fim_sep()];
        file.extend(tok(&v, "filename\n"));
        assert_eq!(out[40 - file.len()..40], file[..]);
        // a prompt longer than the suffix's share leaves no suffix; no room leaves no extra
        let long = Input { prompt: vec![5; 20], ..i };
        let out = layout(&v, &long, Budget { n_batch: 40, n_predict: 40, n_ctx: 100 }, false);
        assert_eq!(out[0], if v.add_bos() { v.bos() } else { v.fim_pre() });
        let suf = out.iter().position(|&t| t == v.fim_suf()).unwrap();
        assert_eq!(out[suf + 1..], [v.fim_mid()]);
    }

    /// Token ids may stand among the prefix's and suffix's strings.
    #[test]
    fn mixed_prefix() {
        let Some(v) = coder() else { return };
        let i = input(&v, json!({"input_prefix": ["ab", 42, "cd"], "input_suffix": [7]})).unwrap();
        let mut want = tok(&v, "ab");
        want.push(42);
        want.extend(tok(&v, "cd"));
        assert_eq!(i.prefix, want);
        assert_eq!(i.suffix, [7]);
        assert!(i.prompt.is_empty());
    }

    /// The checks of upstream's post_infill (and a 400 where upstream throws).
    #[test]
    fn invalid_requests() {
        let Some(v) = coder() else { return };
        let base = json!({"input_prefix": "a", "input_suffix": "b"});
        let with = |k: &str, x: Value| {
            let mut b = base.clone();
            b[k] = x;
            b
        };
        for extra in [json!({}), json!({"filename": "ok"}), json!({"filename": 123}), json!({"filename": 123, "text": "abc"}), json!({"filename": 123, "text": 456}), json!({"text": "t", "filename": null}), json!("text")] {
            let e = input(&v, with("input_extra", json!([extra]))).unwrap_err();
            assert_eq!((e.status, e.param.as_deref()), (StatusCode::BAD_REQUEST, Some("input_extra")), "{extra}");
        }
        for bad in [json!({"text": "t"}), json!(null), json!("x")] {
            assert!(input(&v, with("input_extra", bad)).is_err());
        }
        assert!(input(&v, with("input_extra", json!([{"text": "t", "filename": "f"}]))).is_ok());
        assert_eq!(input(&v, json!({"input_suffix": "b"})).unwrap_err().message, "\"input_prefix\" is required");
        assert_eq!(input(&v, json!({"input_prefix": "a"})).unwrap_err().message, "\"input_suffix\" is required");
        assert_eq!(input(&v, with("prompt", json!([1, 2]))).unwrap_err().param.as_deref(), Some("prompt"));
        assert!(input(&v, with("prompt", Value::Null)).is_ok());
        assert!(input(&v, with("input_prefix", json!(5))).is_err());
        assert!(input(&v, with("input_prefix", json!([{"x": 1}]))).is_err());
        assert!(input(&v, with("input_prefix", json!([-1]))).is_err());
        assert!(input(&v, with("input_suffix", json!([1.5]))).is_err());
        assert!(input(&v, with("input_suffix", json!([v.n_tokens()]))).is_err());
    }

    /// A vocabulary without FIM tokens is refused with upstream's 501 naming what is missing.
    #[test]
    fn model_without_fim_tokens() {
        let Some(home) = std::env::var_os("HOME") else { return };
        let path = std::path::Path::new(&home).join(".cache/deepseek/models/smollm2-135m-instruct-q4_1.gguf");
        let Some(v) = deepseek::gguf::GgufFile::open(&path, true).ok().and_then(|f| Vocab::from_gguf(&f).ok()) else { return };
        if v.fim_pre() != NULL {
            return;
        }
        let e = supported(&v).unwrap_err();
        assert_eq!(e.status, StatusCode::NOT_IMPLEMENTED);
        assert!(e.message.starts_with("Infill is not supported by this model: prefix token is missing. "), "{}", e.message);
        if let Some(v) = coder() {
            assert!(supported(&v).is_ok());
        }
    }
}
