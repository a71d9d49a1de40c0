//! A chat's prompt: the conversation rendered by a Jinja chat template through deepseek-chat,
//! chosen and given its inputs as deepseek-server chooses and renders it (`choose_jinja`,
//! `render_chat`), so `--chat` and `/apply-template` agree; or, with `--no-jinja` or a
//! built-in `--chat-template` name, formatted by the library's built-in templates.

use deepseek::chat;
use deepseek::model::Model;
use deepseek_chat::messages::Message;
use deepseek_chat::request::{self, ServerDefaults};
use deepseek_chat::template::ChatTemplate;
use serde_json::{Map, Value};

use crate::args::Args;

pub enum Format {
    Jinja { template: Box<ChatTemplate>, defaults: ServerDefaults },
    Builtin(chat::Template),
}

/// The format `--chat` uses and a line saying which: with Jinja (the default)
/// `--chat-template-file`, a `--chat-template` that is Jinja text, else the model's template
/// (chatml's when it has none), compiled with the vocabulary's BOS/EOS texts; with
/// `--no-jinja` or a built-in name, the built-in that name or template is recognized as.
pub fn choose(a: &Args, model: &Model) -> Result<(Format, String), String> {
    let file_text = match &a.chat_template_file {
        Some(path) => Some(std::fs::read_to_string(path).map_err(|e| format!("--chat-template-file {}: {e}", path.display()))?),
        None => None,
    };
    let builtin_name = a.chat_template.as_deref().is_some_and(|s| chat::builtin_names().any(|n| n == s));
    if !a.no_jinja && !(builtin_name && file_text.is_none()) {
        let (source, from) = if let (Some(text), Some(path)) = (&file_text, &a.chat_template_file) {
            (text.clone(), format!("--chat-template-file {}", path.display()))
        } else if let Some(spec) = &a.chat_template {
            (spec.clone(), "--chat-template".to_string())
        } else if let Some(t) = model.file.get_str("tokenizer.chat_template") {
            (t.to_string(), "the model's".to_string())
        } else {
            (deepseek_chat::template::CHATML.to_string(), "chatml (the model has none)".to_string())
        };
        let v = &model.vocab;
        let template = ChatTemplate::new(&source, &v.template_text(v.bos()), &v.template_text(v.eos()), v.add_bos(), v.add_eos()).map_err(|e| format!("{from} is not a usable Jinja template: {e}"))?;
        // No assistant prefill: the CLI's conversation always ends with the user's turn.
        let defaults = ServerDefaults::llama_server(a.chat_template_kwargs.clone(), false, &template);
        return Ok((Format::Jinja { template: Box::new(template), defaults }, format!("{from}, rendered by Jinja")));
    }
    let given = a.chat_template.clone().or(file_text);
    let text = given.clone().or_else(|| model.file.get_str("tokenizer.chat_template").map(str::to_string));
    let family = match text.as_deref().map(chat::detect) {
        Some(Some(t)) => t,
        Some(None) if given.is_some() => {
            let names: Vec<&str> = chat::builtin_names().collect();
            return Err(format!("the chat template given is not one the built-in formatter recognizes; use one of: {}", names.join(", ")));
        }
        // The model's template unrecognized, or none: chatml, as before Jinja.
        _ => chat::Template::ChatMl,
    };
    Ok((Format::Builtin(family), format!("{} (built-in)", family.name())))
}

impl Format {
    /// The whole conversation as the model is given it, ending with the generation prompt.
    pub fn render(&self, history: &[Message]) -> Result<String, String> {
        match self {
            Format::Jinja { template, defaults } => {
                let mut body = Map::new();
                body.insert("messages".into(), Value::Array(history.iter().map(Message::to_json).collect()));
                let inputs = request::inputs(&body, defaults).map_err(|e| format!("{}: {}", e.param, e.message))?;
                Ok(template.apply(&inputs).map_err(|e| format!("the chat template failed on this conversation: {}", e.message))?.prompt)
            }
            Format::Builtin(family) => {
                let list: Vec<chat::Message> = history.iter().map(|m| chat::Message::new(&m.role, &m.content)).collect();
                let mut text = String::new();
                chat::format_str(*family, &list, true, &mut text);
                Ok(text)
            }
        }
    }
}

/// A history message (only role, content and reasoning are set by the CLI).
pub fn message(role: &str, content: &str, reasoning: &str) -> Message {
    Message { reasoning_content: reasoning.into(), ..Message::new(role, content) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The body the Jinja path reads is what a client would send /apply-template.
    #[test]
    fn history_becomes_an_openai_body() {
        let h = [message("user", "hi", ""), message("assistant", "yes", "thought")];
        let v: Vec<Value> = h.iter().map(Message::to_json).collect();
        assert_eq!(Value::Array(v), json!([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yes", "reasoning_content": "thought"}]));
    }
}
