//! llama-server's command line. Every option llama-server b11312 accepts (`upstream_flags.tsv`,
//! made from llama.cpp's `common/arg.cpp` by `scripts/gen-server-flags.py`) is recognised
//! here before clap sees the arguments, so that a valid llama-server command line never ends in
//! clap's "unexpected argument":
//! - every spelling of an option (`-ngl`, `--gpu-layers`, `--n-gpu-layers`) becomes its first
//!   long name, which is the one `Args` declares, and a flag with a negated form becomes
//!   `--name=true|false`;
//! - the options' environment variables (`LLAMA_ARG_*`), read as upstream reads them: only for
//!   options not given on the command line, `LLAMA_ARG_NO_*` for negated forms;
//! - each option is honoured (`Treat::Ours`: `Args` declares it), accepted with a log line
//!   saying why it changes nothing here (`Treat::NoEffect`), or refused with the reason
//!   (`Treat::Refused`): a server that silently did something else than asked is worse than
//!   one that does not start.

use std::collections::HashMap;

/// llama-server's options, one per line: names, negated names, arity, environment variable.
const TABLE: &str = include_str!("upstream_flags.tsv");

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arity {
    Void,
    Value,
    Two,
    Bool,
}

pub struct Opt {
    pub names: Vec<&'static str>,
    pub neg: Vec<&'static str>,
    pub arity: Arity,
    pub env: Option<&'static str>,
}

impl Opt {
    /// The name `Args` knows it by: its first long name.
    pub fn canonical(&self) -> &'static str {
        self.names.iter().copied().find(|n| n.starts_with("--")).unwrap_or(self.names[0])
    }
}

pub fn table() -> Vec<Opt> {
    TABLE
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let c: Vec<&'static str> = l.split('\t').collect();
            let list = |s: &'static str| s.split(',').filter(|n| !n.is_empty()).collect::<Vec<_>>();
            let arity = match c.get(2).copied() {
                Some("void") => Arity::Void,
                Some("two") => Arity::Two,
                Some("bool") => Arity::Bool,
                _ => Arity::Value,
            };
            Opt { names: list(c[0]), neg: list(c.get(1).copied().unwrap_or("")), arity, env: c.get(3).copied().filter(|e| !e.is_empty()) }
        })
        .collect()
}

/// What deepseek-server does with one of llama-server's options.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Treat {
    /// Honoured: `Args` declares it under its canonical name.
    Ours,
    /// Accepted; it changes nothing in this server, for the reason given (logged at start).
    NoEffect(&'static str),
    /// The server does not start: it cannot do what the option asks, for the reason given.
    Refused(&'static str),
}

const NO_GPU: &str = "this server runs on the CPU: there is no GPU or other device to place layers, tensors or caches on";
const NO_NETWORK: &str = "this server does not download models; give a local .gguf file with -m (or a name deepseek-cli fetches)";
const NO_SPEC: &str = "speculative decoding is not in deepseek-server yet";
const NO_MEDIA: &str = "this server runs text models only (no images, audio or video)";
const NO_TOOLS: &str = "llama-server's built-in tools, MCP servers and its CORS proxy are not part of deepseek-server";
const THREADS: &str = "the engine's worker threads are placed and scheduled by the kernel; this placement option is not applied";
const PLACEMENT_ALL: &str = "every layer and expert runs on the CPU already";

/// The treatment of each option, by its canonical name; None for a name this table has not
/// decided (a unit test holds every upstream option to a decision).
pub fn treat(canonical: &str) -> Option<Treat> {
    use Treat::*;
    Some(match canonical {
        // general
        "--help" | "--version" => Ours,
        "--cache-list" => Refused("there is no Hugging Face model cache here; deepseek-cli lists and fetches the known models"),
        "--completion-bash" => Refused("no shell completion script is generated"),
        "--list-devices" => Ours,
        "--offline" => NoEffect("this server never uses the network"),
        // threads
        "--threads" | "--threads-http" => Ours,
        "--threads-batch" => NoEffect("prompt and generation steps run on the one pool of --threads workers"),
        "--cpu-mask" | "--cpu-range" | "--cpu-strict" | "--prio" | "--poll" | "--cpu-mask-batch" | "--cpu-range-batch" | "--cpu-strict-batch" | "--prio-batch" | "--poll-batch" | "--numa" => NoEffect(THREADS),
        // context and batches
        "--ctx-size" | "--predict" | "--batch-size" | "--ubatch-size" | "--parallel" | "--cache-type-k" | "--cache-type-v" => Ours,
        "--keep" => NoEffect("without context shifting no tokens are ever dropped, so none need keeping"),
        "--kv-unified-per-slot" | "--kv-unified" => Ours,
        "--swa-full" => NoEffect("the models this server runs keep a full cache for every layer"),
        "--ctx-checkpoints" | "--checkpoint-min-step" => NoEffect("context checkpoints are for recurrent and sliding-window models, which this server does not run"),
        "--cache-ram" => NoEffect("prompts are cached in the slots' KV cells (prefix reuse), not in a separate host-memory cache"),
        "--cache-idle-slots" => NoEffect("idle slots keep their KV cells for prefix reuse already"),
        "--context-shift" => Refused("context shifting is not supported: generation stops at the context's end with finish_reason \"length\""),
        "--defrag-thold" => NoEffect("deprecated in llama-server too: the KV cache needs no defragmentation"),
        "--cont-batching" => NoEffect("the engine always batches continuously"),
        "--cache-prompt" => Ours,
        "--cache-reuse" => NoEffect("prompt prefixes are reused from any slot; shifted-chunk reuse is not used"),
        "--slot-prompt-similarity" => NoEffect("a request goes to the free slot sharing its longest prefix, whatever the similarity"),
        // output
        "--perf" => NoEffect("timings are always measured and returned"),
        "--escape" => NoEffect("prompts reach this server as JSON, which has its own escapes"),
        "--reverse-prompt" => NoEffect("an interactive-mode option of llama-cli; the server's requests carry their own stop strings"),
        "--special" => Ours,
        "--warmup" => NoEffect("the engine warms its kernels on the first request"),
        "--spm-infill" => Ours,
        // sampling
        "--seed" | "--ignore-eos" | "--temp" | "--top-k" | "--top-p" | "--min-p" | "--repeat-last-n" | "--repeat-penalty" | "--presence-penalty" | "--frequency-penalty" => Ours,
        "--samplers" | "--sampler-seq" | "--top-nsigma" | "--xtc-probability" | "--xtc-threshold" | "--typical" | "--dry-multiplier" | "--dry-base" | "--dry-allowed-length" | "--dry-penalty-last-n" | "--dry-sequence-breaker" | "--adaptive-target" | "--adaptive-decay" | "--dynatemp-range" | "--dynatemp-exp" | "--mirostat" | "--mirostat-lr" | "--mirostat-ent" | "--logit-bias" => Ours,
        "--grammar" | "--grammar-file" | "--json-schema" | "--json-schema-file" => Refused("a server-wide grammar is not supported; give 'grammar' or 'json_schema' per request"),
        "--backend-sampling" => NoEffect("sampling runs on the CPU beside the model"),
        // model
        "--model" | "--alias" | "--tags" | "--load-mode" => Ours,
        "--pooling" | "--embd-normalize" | "--embedding" | "--rerank" => Ours,
        "--rope-scaling" | "--rope-scale" | "--rope-freq-base" | "--rope-freq-scale" | "--yarn-orig-ctx" | "--yarn-ext-factor" | "--yarn-attn-factor" | "--yarn-beta-slow" | "--yarn-beta-fast" => {
            Refused("RoPE and YaRN overrides are not supported: the model's own settings are used")
        }
        "--lazy-mode" => NoEffect("tensors are read through the file's mapping, on demand already"),
        "--check-tensors" => Refused("tensor data is not validated at load"),
        "--override-kv" => Refused("overriding the model's metadata is not supported"),
        "--lora" | "--lora-scaled" | "--lora-init-without-apply" => Refused("LoRA adapters are not supported by deepseek-server"),
        "--control-vector" | "--control-vector-scaled" | "--control-vector-layer-range" => Refused("control vectors are not supported"),
        "--model-url" | "--docker-repo" | "--hf-token" => Refused(NO_NETWORK),
        "--hf-repo" | "--hf-file" => Refused(NO_NETWORK),
        // devices
        "--kv-offload" | "--repack" | "--no-host" | "--device" | "--override-tensor" | "--gpu-layers" | "--split-mode" | "--tensor-split" | "--main-gpu" | "--fit" | "--fit-target" | "--fit-ctx" | "--op-offload" | "--rpc" => NoEffect(NO_GPU),
        "--cpu-moe" | "--n-cpu-moe" | "--n-cpu-ffn" => NoEffect(PLACEMENT_ALL),
        "--flash-attn" => NoEffect("the attention kernels are this engine's own; there is no separate flash-attention path to choose"),
        // media
        "--mmproj" | "--mmproj-url" => Refused(NO_MEDIA),
        "--mmproj-auto" | "--mmproj-offload" | "--mmproj-device" | "--image-min-tokens" | "--image-max-tokens" | "--mtmd-batch-max-tokens" | "--video-fps" | "--video-timestamp-interval" | "--video-ffmpeg-dir" | "--media-path" => NoEffect(NO_MEDIA),
        // HTTP
        "--host" | "--port" | "--reuse-port" | "--cors-origins" | "--cors-methods" | "--cors-headers" | "--cors-credentials" | "--api-prefix" | "--api-key" | "--api-key-file" | "--timeout" | "--sse-ping-interval" | "--metrics" | "--props" | "--slots" | "--slot-save-path" | "--ui" | "--path" | "--ui-config" | "--ui-config-file" | "--ssl-key-file" | "--ssl-cert-file" => Ours,
        "--ui-mcp-proxy" | "--tools" | "--tools-runtime" | "--mcp-servers-config" | "--mcp-servers-json" | "--agent" => Refused(NO_TOOLS),
        "--models-dir" | "--models-preset" | "--models-max" | "--models-autoload" => Refused("router mode (several models) is not in this build yet"),
        "--sleep-idle-seconds" => Refused("sleep mode is not in this build yet"),
        // chat
        "--chat-template-kwargs" | "--jinja" | "--reasoning-format" | "--reasoning" | "--reasoning-effort" | "--reasoning-budget" | "--chat-template" | "--chat-template-file" | "--prefill-assistant" => Ours,
        "--reasoning-budget-message" => Refused("a message before the forced end of thinking is not supported yet"),
        "--reasoning-preserve" => Refused("choosing whether earlier turns keep their reasoning is not supported yet: the template decides"),
        "--skip-chat-parsing" => Refused("turning off the parsing of reasoning and tool calls is not supported yet; use reasoning_format \"none\" per request"),
        // logging
        "--verbose" => Ours,
        "--log-disable" | "--log-file" | "--log-jsonl" | "--log-prompts-dir" | "--log-colors" | "--verbosity" | "--log-prefix" | "--log-timestamps" => NoEffect("this server logs plain lines to stderr"),
        // speculative decoding and lookup caches
        "--lookup-cache-static" | "--lookup-cache-dynamic" => Refused(NO_SPEC),
        n if n.starts_with("--spec-") => Refused(NO_SPEC),
        "--draft" | "--draft-min" | "--spec-ngram-size-n" | "--spec-ngram-size-m" | "--spec-ngram-min-hits" => Refused("removed from llama-server too (use the --spec-* options)"),
        // presets that download models
        n if n.ends_with("-default") || n.ends_with("-spec") => Refused(NO_NETWORK),
        _ => return None,
    })
}

/// What reading llama-server's options made of a command line: the arguments for clap, and
/// the options that were accepted without effect, as (option as given, reason) for the log.
#[derive(Debug, Default)]
pub struct Rewritten {
    pub args: Vec<String>,
    pub no_effect: Vec<(String, &'static str)>,
}

/// upstream's `is_truthy` / `is_falsey` (common/arg.cpp) for the values of flags and their
/// environment variables.
fn truthy(v: &str) -> Option<bool> {
    match v {
        "on" | "enabled" | "true" | "1" => Some(true),
        "off" | "disabled" | "false" | "0" => Some(false),
        _ => None,
    }
}

/// Rewrites `argv` (the program's name first) for clap; `env` is the environment (as pairs).
/// Errors name the option and say why it cannot be honoured.
pub fn rewrite(argv: Vec<String>, env: &HashMap<String, String>) -> Result<Rewritten, String> {
    let opts = table();
    let mut by_name: HashMap<&str, (usize, bool)> = HashMap::new();
    for (i, o) in opts.iter().enumerate() {
        for n in &o.names {
            by_name.insert(n, (i, false));
        }
        for n in &o.neg {
            by_name.insert(n, (i, true));
        }
    }
    let mut out = Rewritten::default();
    let mut given = vec![false; opts.len()];
    let mut it = argv.into_iter();
    if let Some(prog) = it.next() {
        out.args.push(prog);
    }
    let mut rest: Vec<String> = it.collect();
    rest.reverse();
    while let Some(arg) = rest.pop() {
        if arg == "--" {
            out.args.push(arg);
            out.args.extend(rest.drain(..).rev());
            break;
        }
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let Some(&(i, negated)) = by_name.get(name.as_str()) else {
            // Not llama-server's: one of ours, or a mistake clap reports.
            out.args.push(arg);
            continue;
        };
        given[i] = true;
        let o = &opts[i];
        let mut take = |what: &str| -> Result<String, String> {
            if let Some(v) = &inline {
                return Ok(v.clone());
            }
            rest.pop().ok_or_else(|| format!("{name} needs {what}"))
        };
        let values = match o.arity {
            Arity::Void | Arity::Bool => {
                if inline.is_some() && o.arity == Arity::Void {
                    return Err(format!("{name} takes no value"));
                }
                vec![]
            }
            Arity::Value => vec![take("a value")?],
            Arity::Two => {
                let a = take("two values")?;
                vec![a, rest.pop().ok_or_else(|| format!("{name} needs two values"))?]
            }
        };
        apply(o, &name, negated, values, inline.as_deref(), &mut out)?;
    }
    // Environment variables of options not given on the command line.
    for (i, o) in opts.iter().enumerate() {
        let Some(var) = o.env else { continue };
        if given[i] {
            continue;
        }
        let neg_var = var.replacen("LLAMA_ARG_", "LLAMA_ARG_NO_", 1);
        match o.arity {
            Arity::Bool | Arity::Void => {
                let on = match (env.get(var), env.get(&neg_var)) {
                    (Some(v), _) => truthy(v).ok_or_else(|| format!("{var}={v}: expected one of on, off, true, false, 1, 0, enabled, disabled"))?,
                    (None, Some(v)) if o.arity == Arity::Bool => !truthy(v).ok_or_else(|| format!("{neg_var}={v}: expected one of on, off, true, false, 1, 0, enabled, disabled"))?,
                    _ => continue,
                };
                if o.arity == Arity::Void && !on {
                    continue;
                }
                apply(o, var, !on, vec![], None, &mut out)?;
            }
            _ => {
                if let Some(v) = env.get(var) {
                    apply(o, var, false, vec![v.clone()], None, &mut out)?;
                }
            }
        }
    }
    Ok(out)
}

/// One option as given (`name`: how it was spelled, or its environment variable).
fn apply(o: &Opt, name: &str, negated: bool, values: Vec<String>, inline: Option<&str>, out: &mut Rewritten) -> Result<(), String> {
    let canonical = o.canonical();
    let shown = if values.is_empty() { name.to_string() } else { format!("{name} {}", values.join(" ")) };
    match treat(canonical) {
        Some(Treat::Ours) => {
            if o.arity == Arity::Bool {
                let on = match inline {
                    Some(v) => truthy(v).ok_or_else(|| format!("{name}={v}: expected true or false"))?,
                    None => !negated,
                };
                out.args.push(format!("{canonical}={on}"));
            } else {
                out.args.push(canonical.to_string());
                out.args.extend(values);
            }
            Ok(())
        }
        Some(Treat::NoEffect(why)) => {
            out.no_effect.push((shown, why));
            Ok(())
        }
        Some(Treat::Refused(why)) => Err(format!("{shown}: {why}")),
        None => Err(format!("{shown}: this llama-server option is not handled by deepseek-server")),
    }
}

#[cfg(test)]
/// The table of docs/SERVER.md: every llama-server option and what this server does with it.
pub fn markdown() -> String {
    let mut out = String::from("| llama-server option | here | why |\n|---|---|---|\n");
    for o in table() {
        let mut names = o.names.join(", ");
        if !o.neg.is_empty() {
            names = format!("{names} / {}", o.neg.join(", "));
        }
        let (what, why) = match treat(o.canonical()) {
            Some(Treat::Ours) => ("honoured", ""),
            Some(Treat::NoEffect(w)) => ("accepted, no effect", w),
            Some(Treat::Refused(w)) => ("refused", w),
            None => ("undecided", ""),
        };
        out += &format!("| `{}` | {what} | {why} |\n", names.replace('|', "\\|"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Result<Rewritten, String> {
        let argv = std::iter::once("deepseek-server").chain(args.iter().copied()).map(str::to_string).collect();
        rewrite(argv, &HashMap::new())
    }

    /// Every option llama-server b11312 has is decided here, and every one decided "ours" is
    /// one `Args` declares, with the arity upstream gives it.
    #[test]
    fn every_upstream_option_is_decided_and_ours_are_declared() {
        use clap::CommandFactory;
        let mut cmd = crate::args::Args::command();
        cmd.build();
        let opts = table();
        assert!(opts.len() > 250, "the table has {} options", opts.len());
        for o in &opts {
            let c = o.canonical();
            let t = treat(c).unwrap_or_else(|| panic!("{c} has no treatment"));
            if t != Treat::Ours {
                continue;
            }
            let long = c.trim_start_matches("--");
            let a = cmd.get_arguments().find(|a| a.get_long() == Some(long)).unwrap_or_else(|| panic!("{c} is ours but Args does not declare --{long}"));
            let takes = a.get_action().takes_values();
            match o.arity {
                Arity::Void => assert!(!takes || matches!(a.get_action(), clap::ArgAction::Help | clap::ArgAction::Version), "{c} takes no value upstream"),
                Arity::Bool | Arity::Value => assert!(takes, "{c} takes a value here"),
                Arity::Two => assert_eq!(a.get_num_args().map(|n| n.min_values()), Some(2), "{c} takes two values"),
            }
        }
    }

    #[test]
    fn spellings_become_the_canonical_name() {
        let r = run(&["-np", "3", "--n-predict", "7", "-c", "512", "--temperature", "0.5", "-ctk", "q8_0", "--no-jinja", "--cache-prompt", "--no-ui"]).unwrap();
        assert_eq!(r.args[1..], ["--parallel", "3", "--predict", "7", "--ctx-size", "512", "--temp", "0.5", "--cache-type-k", "q8_0", "--jinja=false", "--cache-prompt=true", "--ui=false"]);
        assert!(r.no_effect.is_empty());
        // --name=value, and options of our own pass through
        let r = run(&["--port=9000", "--body-limit", "10"]).unwrap();
        assert_eq!(r.args[1..], ["--port", "9000", "--body-limit", "10"]);
    }

    #[test]
    fn options_without_effect_are_consumed_and_logged() {
        let r = run(&["-ngl", "99", "-fa", "on", "-m", "x.gguf", "--mlock-like", "--cont-batching"]).unwrap();
        assert_eq!(r.args[1..], ["--model", "x.gguf", "--mlock-like"]);
        let shown: Vec<&str> = r.no_effect.iter().map(|(s, _)| s.as_str()).collect();
        assert_eq!(shown, ["-ngl 99", "-fa on", "--cont-batching"]);
    }

    #[test]
    fn refused_options_say_why() {
        let e = run(&["--lora", "a.gguf"]).unwrap_err();
        assert!(e.starts_with("--lora a.gguf: LoRA adapters"), "{e}");
        let e = run(&["-md", "draft.gguf"]).unwrap_err();
        assert!(e.starts_with("-md draft.gguf: speculative"), "{e}");
        assert_eq!(run(&["-ngl"]).unwrap_err(), "-ngl needs a value");
        assert!(run(&["--draft-max", "4"]).unwrap_err().contains("removed"));
    }

    #[test]
    fn environment_variables_as_upstream() {
        let env: HashMap<String, String> = [("LLAMA_ARG_CTX_SIZE", "1024"), ("LLAMA_ARG_N_GPU_LAYERS", "10"), ("LLAMA_ARG_NO_JINJA", "1"), ("LLAMA_ARG_N_PARALLEL", "9")].into_iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let argv = ["deepseek-server", "-np", "2"].into_iter().map(str::to_string).collect();
        let r = rewrite(argv, &env).unwrap();
        // the command line wins over the environment (-np over LLAMA_ARG_N_PARALLEL)
        assert!(r.args.windows(2).any(|w| w == ["--parallel", "2"]));
        assert!(!r.args.iter().any(|a| a == "9"));
        assert!(r.args.windows(2).any(|w| w == ["--ctx-size", "1024"]));
        assert!(r.args.iter().any(|a| a == "--jinja=false"));
        assert_eq!(r.no_effect.len(), 1);
        let bad: HashMap<String, String> = [("LLAMA_ARG_JINJA".to_string(), "maybe".to_string())].into_iter().collect();
        assert!(rewrite(vec!["x".into()], &bad).unwrap_err().starts_with("LLAMA_ARG_JINJA=maybe"));
    }
}
