//! The command line, by llama-server's names: the options `flags.rs` treats as ours (each
//! declared under the first long name llama-server gives it; `flags::rewrite` turns the other
//! spellings and the environment variables into these) and a few of our own.

use std::path::PathBuf;

use clap::Parser;
use deepseek::kv::CacheType;

#[derive(Parser, Debug, Clone)]
#[command(
    name = "deepseek-server",
    version,
    about = "An OpenAI- and llama-server-compatible HTTP server for GGUF models on the CPU (deepseek's serving engine).",
    after_help = "Every llama-server option is accepted under each of its names and environment variables (LLAMA_ARG_*): those with no meaning here (-ngl, -fa, ...) are logged at start, those this server cannot honour stop it with the reason.\nEndpoints: POST /v1/chat/completions, /v1/completions, /apply-template, /tokenize, /detokenize, /v1/embeddings, /embedding(s) (with --embedding), /rerank, /v1/rerank (with --rerank); GET /v1/models, /health, /props, /slots, /metrics (with --metrics)."
)]
pub struct Args {
    /// A .gguf file, or a known name fetched on first use: smollm2-135m, qwen2.5-coder-0.5b, qwen2.5-coder-1.5b
    #[arg(long = "model", short = 'm', value_name = "MODEL|NAME")]
    pub model: String,
    /// Print the devices this server computes on and exit.
    #[arg(long = "list-devices")]
    pub list_devices: bool,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Let several processes listen on the port (SO_REUSEPORT).
    #[arg(long = "reuse-port")]
    pub reuse_port: bool,
    /// Requests decoded at once (slots); also -np. -1 (auto, the default): 4 slots sharing one
    /// KV pool, as llama-server's auto.
    #[arg(long = "parallel", value_name = "N", default_value_t = -1, allow_negative_numbers = true, value_parser = parallel_n)]
    pub parallel: i32,
    /// Total context in tokens (all slots' KV cells); 0: the model's training context.
    #[arg(long = "ctx-size", short = 'c', value_name = "N", default_value_t = 0)]
    pub ctx_size: u32,
    /// One KV pool for all slots: any slot may take up to --ctx-size cells (the default with
    /// --parallel auto); false (-no-kvu): each slot its own ctx-size / parallel cells (the
    /// default with an explicit --parallel, as llama-server).
    #[arg(long = "kv-unified", value_name = "BOOL", action = clap::ArgAction::Set)]
    pub kv_unified: Option<bool>,
    /// The most cells one slot may take from the shared pool; 0: all of it.
    #[arg(long = "kv-unified-per-slot", value_name = "N", default_value_t = 0)]
    pub kv_unified_per_slot: u32,
    /// Worker threads of the model (default: the CPU's cores).
    #[arg(long = "threads", short = 't', value_name = "N", allow_negative_numbers = true)]
    pub threads: Option<i32>,
    /// Threads of the HTTP side; -1: two (it is light next to the model's threads).
    #[arg(long = "threads-http", value_name = "N", default_value_t = -1, allow_negative_numbers = true)]
    pub threads_http: i32,
    /// Tokens per decode step at most.
    #[arg(long = "batch-size", short = 'b', value_name = "N", default_value_t = 2048)]
    pub batch_size: u32,
    /// Tokens per micro-batch; also -ub.
    #[arg(long = "ubatch-size", value_name = "N", default_value_t = 512)]
    pub ubatch_size: u32,
    /// Tokens to generate when a request gives no max_tokens; -1: until the context is full.
    #[arg(long = "predict", short = 'n', value_name = "N", default_value_t = -1, allow_negative_numbers = true)]
    pub predict: i32,
    /// Reuse the KV cells of the longest prompt prefix a slot holds (llama-server's
    /// cache_prompt default).
    #[arg(long = "cache-prompt", value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    pub cache_prompt: bool,
    /// Render control tokens (special tokens) in the output text.
    #[arg(long = "special")]
    pub special: bool,
    /// /infill lays its prompt out suffix first (Suffix/Prefix/Middle), for the models trained
    /// so; default: prefix first.
    #[arg(long = "spm-infill")]
    pub spm_infill: bool,
    /// KV cache type of the keys: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl; also -ctk.
    #[arg(long = "cache-type-k", value_name = "TYPE", default_value = "f16", value_parser = cache_type)]
    pub cache_type_k: CacheType,
    /// KV cache type of the values (as --cache-type-k); also -ctv.
    #[arg(long = "cache-type-v", value_name = "TYPE", default_value = "f16", value_parser = cache_type)]
    pub cache_type_v: CacheType,
    /// How the model file is read: auto or mmap (mapped), none (read into memory), mlock (read
    /// and locked in RAM), mmap+mlock (mapped and locked), dio (read, as none).
    #[arg(long = "load-mode", value_name = "MODE", default_value = "auto", value_parser = ["auto", "none", "mmap", "mlock", "mmap+mlock", "dio"])]
    pub load_mode: String,
    /// Read the model into memory instead of mapping it (--load-mode none).
    #[arg(long = "no-mmap")]
    pub no_mmap: bool,
    /// The model's names, comma-separated (default: the file's name); responses name it by
    /// the first in alphabetical order, as llama-server does.
    #[arg(long = "alias", short = 'a', value_name = "NAMES")]
    pub alias: Option<String>,
    /// Serve embeddings (/v1/embeddings, /embedding, /embeddings) from a second context of the
    /// model, beside completions; also --embeddings.
    #[arg(long = "embedding")]
    pub embedding: bool,
    /// Serve reranking (/rerank, /v1/rerank, /reranking, /v1/reranking): embeddings with
    /// pooling rank; also --reranking.
    #[arg(long = "rerank")]
    pub rerank: bool,
    /// How embeddings are pooled: none, mean, cls, last, rank (default: the model's).
    #[arg(long = "pooling", value_name = "none|mean|cls|last|rank", value_parser = ["none", "mean", "cls", "last", "rank"])]
    pub pooling: Option<String>,
    /// Normalization of pooled embeddings: -1 none, 0 max absolute int16, 1 taxicab, 2
    /// euclidean, >2 p-norm; requests may set it with embd_normalize.
    #[arg(long = "embd-normalize", value_name = "N", default_value_t = 2, allow_negative_numbers = true)]
    pub embd_normalize: i32,
    /// Tags of the model in /v1/models, comma-separated (informational).
    #[arg(long = "tags", value_name = "TAGS")]
    pub tags: Option<String>,

    #[command(flatten)]
    pub sampling: SamplingArgs,

    // ---- HTTP ----
    /// API keys every endpoint but /health requires (`Authorization: Bearer KEY` or
    /// `X-Api-Key`), comma-separated; also LLAMA_API_KEY.
    #[arg(long = "api-key", value_name = "KEYS")]
    pub api_key: Option<String>,
    /// A file of API keys, one per line (lines starting with '#' are comments).
    #[arg(long = "api-key-file", value_name = "FILE")]
    pub api_key_file: Option<PathBuf>,
    /// A PEM private key (PKCS#8, PKCS#1 or SEC1, unencrypted) to serve HTTPS with; needs
    /// --ssl-cert-file. Unix sockets stay plain HTTP.
    #[arg(long = "ssl-key-file", value_name = "FNAME")]
    pub ssl_key_file: Option<PathBuf>,
    /// The PEM certificate chain (the server's certificate first) that goes with
    /// --ssl-key-file.
    #[arg(long = "ssl-cert-file", value_name = "FNAME")]
    pub ssl_cert_file: Option<PathBuf>,
    /// Origins allowed to call from a browser (CORS): '*', 'localhost', or one origin.
    #[arg(long = "cors-origins", value_name = "ORIGINS", default_value = "*")]
    pub cors_origins: String,
    #[arg(long = "cors-methods", value_name = "METHODS", default_value = "GET, POST, DELETE, OPTIONS")]
    pub cors_methods: String,
    #[arg(long = "cors-headers", value_name = "HEADERS", default_value = "*")]
    pub cors_headers: String,
    /// Allow credentials in cross-origin requests (with '*' origins, the request's Origin is
    /// echoed back, as llama-server does).
    #[arg(long = "cors-credentials", value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    pub cors_credentials: bool,
    /// A path prefix every endpoint is served under (e.g. /llama), without a trailing slash.
    #[arg(long = "api-prefix", value_name = "PREFIX", default_value = "")]
    pub api_prefix: String,
    /// Seconds between SSE keep-alive comments on a stream that has nothing to send; -1: none.
    #[arg(long = "sse-ping-interval", value_name = "SECONDS", default_value_t = 30, allow_negative_numbers = true)]
    pub sse_ping_interval: i64,
    /// Seconds to wait for a request's body, and for in-flight requests at shutdown; also -to.
    #[arg(long = "timeout", value_name = "SECONDS", default_value_t = 600)]
    pub timeout: u64,
    /// Serve Prometheus metrics at /metrics.
    #[arg(long)]
    pub metrics: bool,
    /// Allow changing the server's settings with POST /props.
    #[arg(long = "props")]
    pub props: bool,
    /// Serve the slots' state at /slots.
    #[arg(long = "slots", value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    pub slots: bool,
    /// The folder POST /slots/{id}?action=save|restore writes and reads slot files in
    /// (without it, slot actions are refused with 501).
    #[arg(long = "slot-save-path", value_name = "PATH", value_parser = save_dir)]
    pub slot_save_path: Option<std::path::PathBuf>,
    /// Serve the web UI at / (false: / is a 404, as llama-server's --no-ui).
    #[arg(long = "ui", value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    pub ui: bool,
    /// Serve the web UI from this folder's files instead of the built-in page.
    #[arg(long = "path", value_name = "DIR", value_parser = crate::webui::static_dir)]
    pub path: Option<PathBuf>,
    /// JSON of the web UI's default settings, passed through /props as `ui_settings`.
    #[arg(long = "ui-config", value_name = "JSON", value_parser = crate::webui::config_json, conflicts_with = "ui_config_file")]
    pub ui_config: Option<serde_json::Value>,
    /// A file of JSON of the web UI's default settings (as --ui-config).
    #[arg(long = "ui-config-file", value_name = "FILE", value_parser = crate::webui::config_file)]
    pub ui_config_file: Option<serde_json::Value>,

    // ---- chat ----
    /// A built-in template name (chatml, deepseek3, llama3, ...; formatted without Jinja, as
    /// llama-server's built-ins) or a Jinja template's text; default: the model's own.
    #[arg(long = "chat-template", value_name = "NAME|TEMPLATE")]
    pub chat_template: Option<String>,
    /// A file holding the Jinja chat template to use instead of the model's.
    #[arg(long = "chat-template-file", value_name = "FILE")]
    pub chat_template_file: Option<PathBuf>,
    /// Render chats with the Jinja template (the model's, or --chat-template-file's): the
    /// default, as in llama-server; --no-jinja formats them with the built-in template the
    /// model's is recognized as.
    #[arg(long = "jinja", value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    pub jinja: bool,
    /// A JSON object of extra variables for every render of the template (a request's
    /// chat_template_kwargs are added to them), e.g. '{"enable_thinking": false}'.
    #[arg(long = "chat-template-kwargs", value_name = "JSON", value_parser = kwargs_object)]
    pub chat_template_kwargs: Option<serde_json::Map<String, serde_json::Value>>,
    /// Thinking on or off in every chat (the template's enable_thinking), or auto: as the
    /// template and the request decide.
    #[arg(long = "reasoning", value_name = "on|off|auto", default_value = "auto", value_parser = on_off_auto)]
    pub reasoning: String,
    /// The reasoning effort given to the template (reasoning_effort), or default: the template's.
    #[arg(long = "reasoning-effort", value_name = "LEVEL", default_value = "default")]
    pub reasoning_effort: String,
    /// A trailing assistant message is continued (the default, as llama-server's); false: it
    /// is a finished turn.
    #[arg(long = "prefill-assistant", value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    pub prefill_assistant: bool,
    /// How <think> sections are returned: deepseek (as reasoning_content), none (inline), auto
    /// (deepseek when the model's template has think sections).
    #[arg(long = "reasoning-format", value_name = "FORMAT", default_value = "auto", value_parser = ["auto", "deepseek", "deepseek-legacy", "none"])]
    pub reasoning_format: String,
    /// Tokens of thinking a chat answer may take before its end is forced (requests set it with
    /// reasoning_budget_tokens); -1: unlimited, 0: none.
    #[arg(long = "reasoning-budget", value_name = "N", default_value_t = -1, allow_negative_numbers = true, value_parser = clap::value_parser!(i64).range(-1..))]
    pub reasoning_budget: i64,

    /// Debug output in answers: the `__verbose` object (the prompt, the settings, the native
    /// result) in every chat and completions answer, as llama-server's -v.
    #[arg(long = "verbose", short = 'v')]
    pub verbose: bool,

    // ---- ours ----
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
}

/// The sampling defaults of requests that do not set them (llama-server's options; unset:
/// upstream's `common_params_sampling` defaults).
#[derive(clap::Args, Debug, Clone)]
pub struct SamplingArgs {
    /// RNG seed of requests that give none; -1: a random one per request.
    #[arg(long = "seed", short = 's', value_name = "N", default_value_t = -1, allow_negative_numbers = true)]
    pub seed: i64,
    /// Keep generating past end-of-generation tokens.
    #[arg(long = "ignore-eos")]
    pub ignore_eos: bool,
    #[arg(long = "temp", value_name = "T")]
    pub temp: Option<f32>,
    #[arg(long = "top-k", value_name = "N", allow_negative_numbers = true)]
    pub top_k: Option<i32>,
    #[arg(long = "top-p", value_name = "P")]
    pub top_p: Option<f32>,
    #[arg(long = "min-p", value_name = "P")]
    pub min_p: Option<f32>,
    #[arg(long = "top-nsigma", value_name = "N", allow_negative_numbers = true)]
    pub top_nsigma: Option<f32>,
    #[arg(long = "xtc-probability", value_name = "P")]
    pub xtc_probability: Option<f32>,
    #[arg(long = "xtc-threshold", value_name = "T")]
    pub xtc_threshold: Option<f32>,
    #[arg(long = "typical", value_name = "P")]
    pub typical: Option<f32>,
    #[arg(long = "repeat-last-n", value_name = "N", allow_negative_numbers = true)]
    pub repeat_last_n: Option<i32>,
    #[arg(long = "repeat-penalty", value_name = "X")]
    pub repeat_penalty: Option<f32>,
    #[arg(long = "presence-penalty", value_name = "X", allow_negative_numbers = true)]
    pub presence_penalty: Option<f32>,
    #[arg(long = "frequency-penalty", value_name = "X", allow_negative_numbers = true)]
    pub frequency_penalty: Option<f32>,
    #[arg(long = "dry-multiplier", value_name = "X")]
    pub dry_multiplier: Option<f32>,
    #[arg(long = "dry-base", value_name = "X")]
    pub dry_base: Option<f32>,
    #[arg(long = "dry-allowed-length", value_name = "N")]
    pub dry_allowed_length: Option<i32>,
    #[arg(long = "dry-penalty-last-n", value_name = "N", allow_negative_numbers = true)]
    pub dry_penalty_last_n: Option<i32>,
    /// A DRY sequence breaker (repeatable); "none": no breakers.
    #[arg(long = "dry-sequence-breaker", value_name = "STRING")]
    pub dry_sequence_breaker: Vec<String>,
    #[arg(long = "adaptive-target", value_name = "X", allow_negative_numbers = true)]
    pub adaptive_target: Option<f32>,
    #[arg(long = "adaptive-decay", value_name = "X")]
    pub adaptive_decay: Option<f32>,
    #[arg(long = "dynatemp-range", value_name = "X")]
    pub dynatemp_range: Option<f32>,
    #[arg(long = "dynatemp-exp", value_name = "X")]
    pub dynatemp_exp: Option<f32>,
    /// 0: off, 1: Mirostat, 2: Mirostat 2.0.
    #[arg(long = "mirostat", value_name = "N")]
    pub mirostat: Option<i32>,
    /// Mirostat's learning rate (eta).
    #[arg(long = "mirostat-lr", value_name = "X")]
    pub mirostat_lr: Option<f32>,
    /// Mirostat's target entropy (tau).
    #[arg(long = "mirostat-ent", value_name = "X")]
    pub mirostat_ent: Option<f32>,
    /// A token bias, TOKEN_ID(+|-)BIAS (repeatable), e.g. 15043+1 or 15043-inf.
    #[arg(long = "logit-bias", value_name = "TOKEN_ID(+/-)BIAS")]
    pub logit_bias: Vec<String>,
    /// The samplers and their order, ';'-separated names (llama-server's --samplers).
    #[arg(long = "samplers", value_name = "SAMPLERS")]
    pub samplers: Option<String>,
    /// The samplers and their order as letters (--sampler-seq, e.g. edskypmxt).
    #[arg(long = "sampler-seq", value_name = "SEQUENCE")]
    pub sampler_seq: Option<String>,
}

impl SamplingArgs {
    /// The sampler settings requests start from: upstream's defaults with these options
    /// applied, checked.
    pub fn base(&self) -> Result<deepseek::sampling::chain::CommonParams, String> {
        use deepseek::sampling::chain::{CommonParams, SamplerKind};
        let mut c = CommonParams::default();
        macro_rules! set {
            ($($opt:ident => $field:ident),*) => { $(if let Some(v) = self.$opt { c.$field = v; })* };
        }
        set!(temp => temperature, top_k => top_k, top_p => top_p, min_p => min_p, top_nsigma => top_n_sigma, xtc_probability => xtc_probability, xtc_threshold => xtc_threshold, typical => typ_p,
             repeat_last_n => repeat_last_n, repeat_penalty => repeat_penalty, presence_penalty => presence_penalty, frequency_penalty => frequency_penalty, dry_multiplier => dry_multiplier,
             dry_allowed_length => dry_allowed_length, dry_penalty_last_n => dry_penalty_last_n, adaptive_target => adaptive_target, adaptive_decay => adaptive_decay,
             dynatemp_range => dynatemp_range, dynatemp_exp => dynatemp_exponent, mirostat => mirostat, mirostat_lr => mirostat_eta, mirostat_ent => mirostat_tau);
        if let Some(b) = self.dry_base {
            if b >= 1.0 {
                c.dry_base = b;
            }
        }
        if !self.dry_sequence_breaker.is_empty() {
            c.dry_sequence_breakers = if self.dry_sequence_breaker.iter().any(|b| b == "none") { Vec::new() } else { self.dry_sequence_breaker.clone() };
        }
        c.ignore_eos = self.ignore_eos;
        if let Some(s) = &self.samplers {
            c.samplers = SamplerKind::from_list(s).map_err(|e| format!("--samplers: {e}"))?;
        }
        if let Some(s) = &self.sampler_seq {
            c.samplers = SamplerKind::from_chars(s).map_err(|e| format!("--sampler-seq: {e}"))?;
        }
        for b in &self.logit_bias {
            // upstream's form: the token id, then the signed bias ("15043+1", "15043-inf").
            let at = b.char_indices().skip(1).find(|(_, ch)| *ch == '+' || *ch == '-').map(|(i, _)| i).ok_or_else(|| format!("--logit-bias {b}: expected TOKEN_ID(+/-)BIAS"))?;
            let tok: i32 = b[..at].parse().map_err(|_| format!("--logit-bias {b}: '{}' is not a token id", &b[..at]))?;
            let bias: f32 = b[at..].parse().map_err(|_| format!("--logit-bias {b}: '{}' is not a bias", &b[at..]))?;
            c.logit_bias.push((tok, bias));
        }
        c.check().map_err(|e| format!("sampling options: {e}"))?;
        Ok(c)
    }
}

impl Default for SamplingArgs {
    /// The defaults the command line gives (one source of them: the `#[arg]`s above).
    fn default() -> SamplingArgs {
        Args::try_parse_from(["deepseek-server", "--model", ""]).expect("the defaults parse").sampling
    }
}

impl Args {
    /// The API keys of --api-key and --api-key-file.
    pub fn api_keys(&self) -> Result<Vec<String>, String> {
        let mut keys: Vec<String> = self.api_key.iter().flat_map(|k| k.split(',')).map(|k| k.trim().to_string()).filter(|k| !k.is_empty()).collect();
        if let Some(path) = &self.api_key_file {
            let text = std::fs::read_to_string(path).map_err(|e| format!("--api-key-file {}: {e}", path.display()))?;
            keys.extend(text.lines().filter(|l| !l.is_empty() && !l.starts_with('#')).map(str::to_string));
        }
        Ok(keys)
    }

    /// The template variables every render gets: --chat-template-kwargs, with --reasoning's
    /// enable_thinking and --reasoning-effort's level, as llama-server sets its defaults.
    pub fn template_kwargs(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut m = self.chat_template_kwargs.clone().unwrap_or_default();
        match self.reasoning.as_str() {
            "on" => {
                m.insert("enable_thinking".into(), true.into());
            }
            "off" => {
                m.insert("enable_thinking".into(), false.into());
            }
            _ => {}
        }
        if self.reasoning_effort != "default" {
            m.insert("reasoning_effort".into(), self.reasoning_effort.clone().into());
        }
        m
    }

    /// --alias's names, sorted and without repeats.
    pub fn aliases(&self) -> Vec<String> {
        let mut a: Vec<String> = self.alias.iter().flat_map(|s| s.split(',')).map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect();
        a.sort();
        a.dedup();
        a
    }

    pub fn tag_list(&self) -> Vec<String> {
        self.tags.iter().flat_map(|s| s.split(',')).map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect()
    }

    /// (slots, unified) as llama-server decides them: auto is 4 slots sharing one pool.
    pub fn slots(&self) -> (u32, bool) {
        match self.parallel {
            n if n <= 0 => (4, self.kv_unified.unwrap_or(true)),
            n => (n as u32, self.kv_unified.unwrap_or(false)),
        }
    }

    /// (mmap, mlock) of --load-mode (and --no-mmap).
    pub fn load_mode(&self) -> (bool, bool) {
        let (mmap, mlock) = match self.load_mode.as_str() {
            "none" | "dio" => (false, false),
            "mlock" => (false, true),
            "mmap+mlock" => (true, true),
            _ => (true, false),
        };
        (mmap && !self.no_mmap, mlock)
    }
}

/// `--chat-template-kwargs`: a JSON object.
fn kwargs_object(text: &str) -> Result<serde_json::Map<String, serde_json::Value>, String> {
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(serde_json::Value::Object(m)) => Ok(m),
        Ok(_) => Err("must be a JSON object".into()),
        Err(e) => Err(format!("not valid JSON: {e}")),
    }
}

/// `--parallel`: -1 (auto) or a positive count (0 is refused, as upstream).
fn parallel_n(v: &str) -> Result<i32, String> {
    match v.parse::<i32>() {
        Ok(n) if n == -1 || n > 0 => Ok(n),
        _ => Err("invalid value for n_parallel: a positive count, or -1 (auto)".into()),
    }
}

/// `--reasoning`: upstream's truthy and falsy words, or auto.
fn on_off_auto(v: &str) -> Result<String, String> {
    match v {
        "on" | "enabled" | "true" | "1" => Ok("on".into()),
        "off" | "disabled" | "false" | "0" => Ok("off".into()),
        "auto" => Ok("auto".into()),
        _ => Err("expected on, off or auto".into()),
    }
}

/// A KV cache type by ggml's name, as llama-server's --cache-type-k/-v take it.
fn cache_type(name: &str) -> Result<CacheType, String> {
    CacheType::by_name(name).ok_or_else(|| format!("unsupported cache type '{name}' (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl)"))
}

/// `--slot-save-path`: an existing folder, as upstream requires.
fn save_dir(v: &str) -> Result<std::path::PathBuf, String> {
    let p = std::path::PathBuf::from(v);
    if p.is_dir() { Ok(p) } else { Err(format!("not a directory: {v}")) }
}
