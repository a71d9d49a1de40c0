//! Command-line flags of deepseek-cli (hand-parsed: a dozen flags do not need a crate). The chat
//! template flags are deepseek-server's (llama-server's) names and meanings.

use std::path::PathBuf;

use serde_json::{Map, Value};

pub const USAGE: &str = "usage: deepseek-cli -m MODEL [-p PROMPT | --chat] [options]

  -m, --model MODEL        a .gguf file, or a known name fetched on first use:
                           smollm2-135m, qwen2.5-coder-0.5b, qwen2.5-coder-1.5b
  -p, --prompt TEXT        text to continue (default: \"The capital of France is\")
      --chat               interactive conversation with the model's chat template
      --hide-think         in --chat, hide the <think> section instead of dimming it
      --chat-template NAME|TEMPLATE
                           a built-in template name (chatml, deepseek3, llama3, ...; formatted
                           without Jinja) or a Jinja template's text (default: the model's own)
      --chat-template-file FILE
                           a file holding the Jinja chat template to use instead of the model's
      --chat-template-kwargs JSON
                           a JSON object of extra template variables, e.g. '{\"enable_thinking\": false}'
      --jinja, --no-jinja  render chats with the Jinja template (the default, as deepseek-server),
                           or format them with the built-in the model's template is recognized as
      --verbose-prompt     print each prompt as the model is given it (JSON-quoted) on stderr
  -n, --n-predict N        tokens to generate (default 128; in --chat, per answer: 512)
  -t, --threads N          worker threads (default 2)
  -c, --ctx-size N         context size (default 2048)
  -b, --batch-size N       prompt batch size (default 512)
      --temp T             temperature (default 0.8; 0 = greedy)
      --top-k N            (default 40)    --top-p P  (default 0.95)   --min-p P (default 0.05)
      --repeat-penalty R   (default 1.0 = off), over the last 64 tokens
      --seed N             RNG seed (default: random)
      --no-mmap            read the model into memory instead of mapping it
      --json               print only a JSON summary (with the text) on stdout
  -h, --help               this help";

#[derive(Clone, Debug)]
pub struct Args {
    pub model: String,
    pub prompt: String,
    pub chat: bool,
    pub hide_think: bool,
    pub n_predict: Option<usize>,
    pub threads: i32,
    pub n_ctx: u32,
    pub n_batch: u32,
    pub temp: f32,
    pub top_k: i32,
    pub top_p: f32,
    pub min_p: f32,
    pub repeat_penalty: f32,
    pub seed: u32,
    pub no_mmap: bool,
    pub json: bool,
    /// `--chat-template`: a built-in name or Jinja text.
    pub chat_template: Option<String>,
    pub chat_template_file: Option<PathBuf>,
    /// `--chat-template-kwargs`, already checked to be a JSON object.
    pub chat_template_kwargs: Map<String, Value>,
    pub no_jinja: bool,
    pub verbose_prompt: bool,
}

pub enum Parsed {
    Run(Args),
    Help,
}

fn number<T: std::str::FromStr>(flag: &str, v: &str) -> Result<T, String> {
    v.parse().map_err(|_| format!("invalid value '{v}' for {flag}"))
}

/// A JSON object, as deepseek-server checks `--chat-template-kwargs`.
fn kwargs_object(flag: &str, v: &str) -> Result<Map<String, Value>, String> {
    match serde_json::from_str::<Value>(v) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(format!("invalid value '{v}' for {flag}: must be a JSON object")),
        Err(e) => Err(format!("invalid value '{v}' for {flag}: not valid JSON: {e}")),
    }
}

pub fn parse(argv: impl IntoIterator<Item = String>) -> Result<Parsed, String> {
    let mut a = Args {
        model: String::new(),
        prompt: "The capital of France is".into(),
        chat: false,
        hide_think: false,
        n_predict: None,
        threads: 2,
        n_ctx: 2048,
        n_batch: 512,
        temp: 0.8,
        top_k: 40,
        top_p: 0.95,
        min_p: 0.05,
        repeat_penalty: 1.0,
        seed: u32::MAX,
        no_mmap: false,
        json: false,
        chat_template: None,
        chat_template_file: None,
        chat_template_kwargs: Map::new(),
        no_jinja: false,
        verbose_prompt: false,
    };
    let mut it = argv.into_iter();
    while let Some(arg) = it.next() {
        // Accept --flag=value as well as --flag value.
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let mut value = || inline.clone().or_else(|| it.next()).ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "-h" | "--help" => return Ok(Parsed::Help),
            "-m" | "--model" => a.model = value()?,
            "-p" | "--prompt" => a.prompt = value()?,
            "--chat" => a.chat = true,
            "--hide-think" => a.hide_think = true,
            "-n" | "--n-predict" => a.n_predict = Some(number(&flag, &value()?)?),
            "-t" | "--threads" => a.threads = number(&flag, &value()?)?,
            "-c" | "--ctx-size" => a.n_ctx = number(&flag, &value()?)?,
            "-b" | "--batch-size" => a.n_batch = number(&flag, &value()?)?,
            "--temp" => a.temp = number(&flag, &value()?)?,
            "--top-k" => a.top_k = number(&flag, &value()?)?,
            "--top-p" => a.top_p = number(&flag, &value()?)?,
            "--min-p" => a.min_p = number(&flag, &value()?)?,
            "--repeat-penalty" => a.repeat_penalty = number(&flag, &value()?)?,
            "--seed" => a.seed = number(&flag, &value()?)?,
            "--no-mmap" => a.no_mmap = true,
            "--json" => a.json = true,
            "--chat-template" => a.chat_template = Some(value()?),
            "--chat-template-file" => a.chat_template_file = Some(PathBuf::from(value()?)),
            "--chat-template-kwargs" => a.chat_template_kwargs = kwargs_object(&flag, &value()?)?,
            // The last of the two wins, as deepseek-server's.
            "--jinja" => a.no_jinja = false,
            "--no-jinja" => a.no_jinja = true,
            "--verbose-prompt" => a.verbose_prompt = true,
            _ => return Err(format!("unknown argument '{arg}' (see --help)")),
        }
    }
    if a.model.is_empty() {
        return Err("no model given: use -m MODEL.gguf or a known name (see --help)".into());
    }
    if a.threads < 1 || a.n_ctx < 16 || a.n_batch < 1 {
        return Err("--threads and --batch-size must be at least 1 and --ctx-size at least 16".into());
    }
    if a.chat && a.json {
        return Err("--json cannot be combined with --chat".into());
    }
    Ok(Parsed::Run(a))
}
