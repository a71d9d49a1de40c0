//! llama-server's request fields. Every field llama-server b11312 reads for a completion
//! (`upstream_fields.tsv`, made from `tools/server/server-schema.cpp` by
//! `scripts/gen-server-fields.py`) is honoured here or, when a request gives it a value that
//! would make upstream do something this server does not do, refused with a 400 that names it:
//! never silently ignored. Fields upstream does not read (OpenAI's `user`, `model`, ...) are
//! let through, as OpenAI's clients send extras.

use serde_json::Value;

use crate::error::ApiError;

const TABLE: &str = include_str!("upstream_fields.tsv");

/// (name, aliases) of upstream's fields.
pub fn table() -> Vec<(&'static str, Vec<&'static str>)> {
    TABLE
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let mut c = l.split('\t');
            let name = c.next().unwrap_or("");
            let aliases = c.next().unwrap_or("").split(',').filter(|a| !a.is_empty()).collect();
            (name, aliases)
        })
        .collect()
}

/// What this server does with one of upstream's fields.
#[derive(Clone, Copy)]
pub enum Field {
    /// Read and honoured by the request readers (`params.rs`, `api.rs`).
    Honoured,
    /// Honoured when it has one of the values `fine` accepts (upstream's default, or values that
    /// change nothing here); any other value is refused with the reason.
    Unless(fn(&Value) -> bool, &'static str),
}

fn is_false(v: &Value) -> bool {
    v.is_null() || v == &Value::Bool(false)
}
fn is_zero(v: &Value) -> bool {
    v.is_null() || v.as_f64() == Some(0.0)
}
fn is_off_time(v: &Value) -> bool {
    v.is_null() || v.as_f64().is_some_and(|x| x <= 0.0)
}
fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        Value::String(s) => s.is_empty(),
        _ => false,
    }
}

const CHAT_INTERNAL: &str = "an internal field llama-server sets from the chat template; this server derives it itself";

/// The treatment of upstream's field `name` (its first name); None for a name this table has
/// not decided (a unit test holds every upstream field to a decision).
pub fn treat(name: &str) -> Option<Field> {
    use Field::*;
    Some(match name {
        "timings_per_token" | "stream" | "stream_options" | "include_usage" | "return_tokens" | "sse_ping_interval" | "n_predict" | "response_fields" => Honoured,
        // No context shifting happens (generation stops at the context's end), so no token is
        // ever dropped: every n_keep and n_discard is honoured as given.
        "n_keep" | "n_discard" => Honoured,
        "top_k" | "top_p" | "min_p" | "temperature" | "repeat_last_n" | "repeat_penalty" | "frequency_penalty" | "presence_penalty" | "seed" | "n_probs" | "ignore_eos" | "stop" => Honoured,
        "json_schema" | "reasoning_format" | "reasoning_budget_tokens" => Honoured,
        // Where sampling runs changes nothing in its result.
        "backend_sampling" => Honoured,
        "verbose" => Honoured,
        // false: the request is computed without reusing cached prefixes (the engine's answer
        // is the same either way; only its timings differ).
        "cache_prompt" => Honoured,
        "return_progress" => Honoured,
        "n_indent" => Unless(is_zero, "minimum line indentation is not enforced by this server"),
        "n_cmpl" => Honoured,
        "n_cache_reuse" => Unless(is_zero, "KV-shifting chunk reuse is not done (prompt prefixes are reused whole)"),
        "t_max_predict_ms" => Honoured,
        // llama-server b11312 reads it and does nothing with it (a TODO in its server-schema.cpp).
        "t_max_prompt_ms" => Unless(is_off_time, "a time limit on prompt processing is not enforced (llama-server b11312 does not enforce it either)"),
        "top_n_sigma" | "xtc_probability" | "xtc_threshold" | "typical_p" | "dynatemp_range" | "dynatemp_exponent" | "dry_multiplier" | "dry_base" | "dry_allowed_length" | "dry_penalty_last_n" | "dry_sequence_breakers" | "mirostat" | "mirostat_tau" | "mirostat_eta" | "adaptive_target" | "adaptive_decay" | "min_keep" | "samplers" | "logit_bias" => Honoured,
        "post_sampling_probs" => Unless(is_false, "probabilities after the sampler chain are not reported; n_probs gives the model's"),
        "speculative.n_max" | "speculative.n_min" | "speculative.p_min" | "speculative.type" | "speculative.ngram_size_n" | "speculative.ngram_size_m" | "speculative.ngram_min_hits" => {
            Unless(|v| v.is_null(), "speculative decoding is not in deepseek-server yet")
        }
        "lora" => Unless(is_empty, "LoRA adapters are not supported by deepseek-server"),
        "grammar_lazy" => Unless(is_false, "lazy grammars are made by this server from a request's tools; give 'grammar' or 'json_schema'"),
        "grammar_triggers" | "preserved_tokens" | "chat_format" | "generation_prompt" | "chat_parser" | "reasoning_budget_start_tag" | "reasoning_budget_end_tags" => Unless(is_empty, CHAT_INTERNAL),
        "parse_tool_calls" | "reasoning_control" => Unless(is_false, CHAT_INTERNAL),
        "reasoning_budget_message" => Unless(is_empty, "a message before the forced end of thinking is not supported yet"),
        "continue_final_message" => Honoured,
        "echo" => Unless(is_false, "'echo' is not supported"),
        _ => return None,
    })
}

/// Checks a request body against upstream's fields: any one given a value this server would
/// not honour is refused, naming the field as the request spelled it.
pub fn check(body: &serde_json::Map<String, Value>) -> Result<(), ApiError> {
    for (name, aliases) in table() {
        for spelled in std::iter::once(name).chain(aliases.iter().copied()) {
            let Some(v) = body.get(spelled) else { continue };
            if let Some(Field::Unless(fine, why)) = treat(name) {
                if !fine(v) {
                    return Err(ApiError::param(spelled, format!("'{spelled}' = {v}: {why}")));
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
/// The table of docs/SERVER.md: every request field upstream reads and what this server does.
pub fn markdown() -> String {
    let mut out = String::from("| request field | here |\n|---|---|\n");
    for (name, aliases) in table() {
        let names = std::iter::once(name).chain(aliases.iter().copied()).map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ");
        let what = match treat(name) {
            Some(Field::Honoured) => "honoured".to_string(),
            Some(Field::Unless(_, why)) => format!("refused unless at its default: {why}"),
            None => "undecided".to_string(),
        };
        out += &format!("| {names} | {what} |\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Every field llama-server b11312 reads has a decision here.
    #[test]
    fn every_upstream_field_is_decided() {
        let t = table();
        assert!(t.len() > 70, "{} fields", t.len());
        for (name, _) in &t {
            assert!(treat(name).is_some(), "{name} has no treatment");
        }
    }

    /// docs/SERVER.md holds the tables as the code decides them
    /// (`DEEPSEEK_WRITE_DOCS=1 cargo test -p deepseek-server server_md` rewrites them).
    #[test]
    fn server_md_is_current() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/SERVER.md");
        let doc = std::fs::read_to_string(path).unwrap_or_default();
        let begin = |what: &str| format!("<!-- {what}: generated by the server's tests -->\n");
        let end = |what: &str| format!("<!-- end of {what} -->");
        let splice = |doc: &str, what: &str, table: &str| -> String {
            let (b, e) = (begin(what), end(what));
            match (doc.find(&b), doc.find(&e)) {
                (Some(i), Some(j)) if i < j => format!("{}{b}{table}{}", &doc[..i], &doc[j..]),
                _ => format!("{doc}\n{b}{table}{e}\n"),
            }
        };
        let want = splice(&splice(&doc, "options", &crate::flags::markdown()), "fields", &markdown());
        if std::env::var_os("DEEPSEEK_WRITE_DOCS").is_some() {
            std::fs::write(path, &want).unwrap();
        } else {
            assert!(doc == want, "docs/SERVER.md is out of date: run DEEPSEEK_WRITE_DOCS=1 cargo test -p deepseek-server server_md");
        }
    }

    #[test]
    fn defaults_pass_and_other_values_are_refused_by_name() {
        let ok = json!({"mirostat": 2, "cache_prompt": false, "samplers": [], "n": 1, "xtc_threshold": 0.1, "id_slot": -1, "model": "x", "user": "y"});
        assert!(check(ok.as_object().unwrap()).is_ok());
        for (body, field) in [
            (json!({"post_sampling_probs": true}), "post_sampling_probs"),
            (json!({"speculative.n_max": 4}), "speculative.n_max"),
        ] {
            let e = check(body.as_object().unwrap()).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(field), "{body}");
            assert!(e.message.starts_with(&format!("'{field}'")), "{}", e.message);
        }
    }
}
