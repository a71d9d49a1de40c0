//! chat: llama.cpp's built-in chat templates (src/llama-chat.cpp of b11312, not a Jinja engine):
//! a template string is either a built-in name or a Jinja template recognized by the markers it
//! contains, exactly in upstream's order; messages are then formatted by the matching built-in.

/// A chat template family, as upstream names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Template {
    ChatMl,
    Llama2,
    Llama2Sys,
    Llama2SysBos,
    Llama2SysStrip,
    MistralV1,
    MistralV3,
    MistralV3Tekken,
    MistralV7,
    MistralV7Tekken,
    Phi3,
    Phi4,
    Falcon3,
    Zephyr,
    Monarch,
    Gemma,
    Orion,
    OpenChat,
    Vicuna,
    VicunaOrca,
    Deepseek,
    Deepseek2,
    Deepseek3,
    DeepseekOcr,
    CommandR,
    Llama3,
    ChatGlm3,
    ChatGlm4,
    GlmEdge,
    MiniCpm,
    Exaone3,
    Exaone4,
    ExaoneMoe,
    RwkvWorld,
    Granite3,
    Granite40,
    Granite41,
    GigaChat,
    Megrez,
    Yandex,
    Bailing,
    BailingThink,
    Bailing2,
    Llama4,
    SmolVlm,
    HunyuanMoe,
    GptOss,
    HunyuanDense,
    HunyuanVl,
    KimiK2,
    SeedOss,
    Grok2,
    PanguEmbed,
    SolarOpen,
    Dots1,
}

use Template::*;

/// Upstream's built-in names (its std::map, hence sorted) and what each selects.
const NAMES: &[(&str, Template)] = &[
    ("bailing", Bailing),
    ("bailing-think", BailingThink),
    ("bailing2", Bailing2),
    ("chatglm3", ChatGlm3),
    ("chatglm4", ChatGlm4),
    ("chatml", ChatMl),
    ("command-r", CommandR),
    ("deepseek", Deepseek),
    ("deepseek-ocr", DeepseekOcr),
    ("deepseek2", Deepseek2),
    ("deepseek3", Deepseek3),
    ("exaone-moe", ExaoneMoe),
    ("exaone3", Exaone3),
    ("exaone4", Exaone4),
    ("falcon3", Falcon3),
    ("gemma", Gemma),
    ("gigachat", GigaChat),
    ("glmedge", GlmEdge),
    ("gpt-oss", GptOss),
    ("granite", Granite3),
    ("granite-4.0", Granite40),
    ("granite-4.1", Granite41),
    ("grok-2", Grok2),
    ("hunyuan-dense", HunyuanDense),
    ("hunyuan-moe", HunyuanMoe),
    ("hunyuan-vl", HunyuanVl),
    ("kimi-k2", KimiK2),
    ("llama2", Llama2),
    ("llama2-sys", Llama2Sys),
    ("llama2-sys-bos", Llama2SysBos),
    ("llama2-sys-strip", Llama2SysStrip),
    ("llama3", Llama3),
    ("llama4", Llama4),
    ("megrez", Megrez),
    ("minicpm", MiniCpm),
    ("mistral-v1", MistralV1),
    ("mistral-v3", MistralV3),
    ("mistral-v3-tekken", MistralV3Tekken),
    ("mistral-v7", MistralV7),
    ("mistral-v7-tekken", MistralV7Tekken),
    ("monarch", Monarch),
    ("openchat", OpenChat),
    ("orion", Orion),
    ("pangu-embedded", PanguEmbed),
    ("phi3", Phi3),
    ("phi4", Phi4),
    ("rwkv-world", RwkvWorld),
    ("seed_oss", SeedOss),
    ("smolvlm", SmolVlm),
    ("solar-open", SolarOpen),
    ("vicuna", Vicuna),
    ("vicuna-orca", VicunaOrca),
    ("yandex", Yandex),
    ("zephyr", Zephyr),
];

/// The built-in names this library can format (a subset of upstream's, listed honestly).
pub fn builtin_names() -> impl Iterator<Item = &'static str> {
    NAMES.iter().filter(|(_, t)| t.is_implemented()).map(|(n, _)| *n)
}

impl Template {
    /// Whether `format` implements this family (the others are recognized but refused).
    pub fn is_implemented(self) -> bool {
        matches!(
            self,
            ChatMl | Llama2 | Llama2Sys | Llama2SysBos | Llama2SysStrip | MistralV7 | MistralV7Tekken | Phi3 | Phi4 | Falcon3 | Deepseek | Deepseek2 | Deepseek3 | DeepseekOcr | CommandR | Llama3 | Llama4 | ChatGlm3 | ChatGlm4 | GlmEdge | MiniCpm | SolarOpen
        )
    }

    pub fn name(self) -> &'static str {
        NAMES.iter().find(|(_, t)| *t == self).map(|(n, _)| *n).unwrap_or("dots1")
    }
}

/// Upstream's llm_chat_detect_template: a built-in name, or a template recognized by its markers.
pub fn detect(tmpl: &str) -> Option<Template> {
    if let Some(&(_, t)) = NAMES.iter().find(|(n, _)| *n == tmpl) {
        return Some(t);
    }
    let has = |s: &str| tmpl.contains(s);
    let t = if has("<|im_start|>") {
        if has("<|im_sep|>") {
            Phi4
        } else if has("<end_of_utterance>") {
            SmolVlm
        } else {
            ChatMl
        }
    } else if tmpl.starts_with("mistral") || has("[INST]") {
        if has("[SYSTEM_PROMPT]") {
            MistralV7
        } else if has("' [INST] ' + system_message") || has("[AVAILABLE_TOOLS]") {
            if has(" [INST]") {
                MistralV1
            } else if has("\"[INST]\"") {
                MistralV3Tekken
            } else {
                MistralV3
            }
        } else if has("content.strip()") {
            Llama2SysStrip
        } else if has("bos_token + '[INST]") {
            Llama2SysBos
        } else if has("<<SYS>>") {
            Llama2Sys
        } else {
            Llama2
        }
    } else if has("<|assistant|>") && has("<|end|>") {
        Phi3
    } else if has("[gMASK]<sop>") {
        ChatGlm4
    } else if has("<|assistant|>") && has("<|user|>") {
        if has("<|tool_declare|>") {
            ExaoneMoe
        } else if has("</s>") {
            Falcon3
        } else {
            GlmEdge
        }
    } else if has("<|{{ item['role'] }}|>") && has("<|begin_of_image|>") {
        GlmEdge
    } else if has("<|user|>") && has("<|endoftext|>") {
        Zephyr
    } else if has("bos_token + message['role']") {
        Monarch
    } else if has("<start_of_turn>") {
        Gemma
    } else if has("'\\n\\nAssistant: ' + eos_token") {
        Orion
    } else if has("GPT4 Correct ") {
        OpenChat
    } else if has("USER: ") && has("ASSISTANT: ") {
        if has("SYSTEM: ") {
            VicunaOrca
        } else {
            Vicuna
        }
    } else if has("### Instruction:") && has("<|EOT|>") {
        Deepseek
    } else if has("<|START_OF_TURN_TOKEN|>") && has("<|USER_TOKEN|>") {
        CommandR
    } else if has("<|start_header_id|>") && has("<|end_header_id|>") {
        Llama3
    } else if has("[gMASK]sop") {
        ChatGlm3
    } else if has("<用户>") {
        MiniCpm
    } else if has("'Assistant: ' + message['content'] + eos_token") {
        Deepseek2
    } else if has("<｜Assistant｜>") && has("<｜User｜>") && has("<｜end▁of▁sentence｜>") {
        Deepseek3
    } else if has("[|system|]") && has("[|assistant|]") && has("[|endofturn|]") {
        if has("[|tool|]") {
            Exaone4
        } else {
            Exaone3
        }
    } else if has("rwkv-world") || has("{{- 'User: ' + message['content']|trim + '\\n\\n' -}}") {
        RwkvWorld
    } else if has("<|start_of_role|>") {
        if has("<tool_call>") || has("<tools>") {
            if has("g4_default_system_message") {
                Granite40
            } else {
                Granite41
            }
        } else {
            Granite3
        }
    } else if has("message['role'] + additional_special_tokens[0] + message['content'] + additional_special_tokens[1]") {
        GigaChat
    } else if has("<|role_start|>") {
        Megrez
    } else if has(" Ассистент:") {
        Yandex
    } else if has("<role>ASSISTANT</role>") && has("'HUMAN'") {
        Bailing
    } else if has("<role>ASSISTANT</role>") && has("\"HUMAN\"") && has("<think>") {
        BailingThink
    } else if has("<role>ASSISTANT</role>") && has("<role>HUMAN</role>") && has("<|role_end|>") {
        Bailing2
    } else if has("<|header_start|>") && has("<|header_end|>") {
        Llama4
    } else if has("<|endofuserprompt|>") {
        Dots1
    } else if has("<|extra_0|>") && has("<|extra_4|>") {
        HunyuanMoe
    } else if has("<|start|>") && has("<|channel|>") {
        GptOss
    } else if has("<｜hy_Assistant｜>") && has("<｜hy_begin▁of▁sentence｜>") {
        HunyuanVl
    } else if has("<｜hy_Assistant｜>") && has("<｜hy_place▁holder▁no▁3｜>") {
        HunyuanDense
    } else if has("<|im_assistant|>assistant<|im_middle|>") {
        KimiK2
    } else if has("<seed:bos>") {
        SeedOss
    } else if has("'Assistant: '  + message['content'] + '<|separator|>") {
        Grok2
    } else if has("[unused9]系统：[unused10]") {
        PanguEmbed
    } else if has("<|begin|>") && has("<|end|>") && has("<|content|>") {
        SolarOpen
    } else {
        return None;
    };
    Some(t)
}

/// One message of a conversation.
#[derive(Clone, Copy, Debug)]
pub struct Message<'a> {
    pub role: &'a str,
    pub content: &'a str,
}

/// Trims ASCII whitespace (C's isspace) at both ends, as upstream's `trim`.
fn trim(s: &str) -> &str {
    s.trim_matches(|c: char| matches!(c, ' ' | '\t' | '\n' | '\x0b' | '\x0c' | '\r'))
}

/// Formats `msgs` with `tmpl` into `out` (replacing it); `add_assistant` opens the assistant's
/// turn. Errors for families this library does not implement yet.
pub fn format(tmpl: Template, msgs: &[Message<'_>], add_assistant: bool, out: &mut String) -> Result<(), String> {
    out.clear();
    match tmpl {
        ChatMl => {
            for m in msgs {
                *out += &format!("<|im_start|>{}\n{}<|im_end|>\n", m.role, m.content);
            }
            if add_assistant {
                *out += "<|im_start|>assistant\n";
            }
        }
        MistralV7 | MistralV7Tekken => {
            let sp = if tmpl == MistralV7 { " " } else { "" };
            for m in msgs {
                match m.role {
                    "system" => *out += &format!("[SYSTEM_PROMPT]{sp}{}[/SYSTEM_PROMPT]", m.content),
                    "user" => *out += &format!("[INST]{sp}{}[/INST]", m.content),
                    _ => *out += &format!("{sp}{}</s>", m.content),
                }
            }
        }
        Llama2 | Llama2Sys | Llama2SysBos | Llama2SysStrip => {
            let system = tmpl != Llama2;
            let bos_inside = tmpl == Llama2SysBos;
            let strip = tmpl == Llama2SysStrip;
            let mut inside_turn = true;
            *out += "[INST] ";
            for m in msgs {
                let content = if strip { trim(m.content) } else { m.content };
                if !inside_turn {
                    inside_turn = true;
                    *out += if bos_inside { "<s>[INST] " } else { "[INST] " };
                }
                match m.role {
                    "system" if system => *out += &format!("<<SYS>>\n{content}\n<</SYS>>\n\n"),
                    "system" => *out += &format!("{content}\n"),
                    "user" => *out += &format!("{content} [/INST]"),
                    _ => {
                        *out += &format!("{content}</s>");
                        inside_turn = false;
                    }
                }
            }
        }
        Phi3 => {
            for m in msgs {
                *out += &format!("<|{}|>\n{}<|end|>\n", m.role, m.content);
            }
            if add_assistant {
                *out += "<|assistant|>\n";
            }
        }
        Phi4 => {
            for m in msgs {
                *out += &format!("<|im_start|>{}<|im_sep|>{}<|im_end|>", m.role, m.content);
            }
            if add_assistant {
                *out += "<|im_start|>assistant<|im_sep|>";
            }
        }
        Falcon3 => {
            for m in msgs {
                *out += &format!("<|{}|>\n{}\n", m.role, m.content);
            }
            if add_assistant {
                *out += "<|assistant|>\n";
            }
        }
        Deepseek => {
            for m in msgs {
                match m.role {
                    "system" => *out += m.content,
                    "user" => *out += &format!("### Instruction:\n{}\n", m.content),
                    "assistant" => *out += &format!("### Response:\n{}\n<|EOT|>\n", m.content),
                    _ => {}
                }
            }
            if add_assistant {
                *out += "### Response:\n";
            }
        }
        CommandR => {
            for m in msgs {
                let token = match m.role {
                    "system" => "SYSTEM",
                    "user" => "USER",
                    "assistant" => "CHATBOT",
                    _ => continue,
                };
                *out += &format!("<|START_OF_TURN_TOKEN|><|{token}_TOKEN|>{}<|END_OF_TURN_TOKEN|>", trim(m.content));
            }
            if add_assistant {
                *out += "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>";
            }
        }
        Llama3 => {
            for m in msgs {
                *out += &format!("<|start_header_id|>{}<|end_header_id|>\n\n{}<|eot_id|>", m.role, trim(m.content));
            }
            if add_assistant {
                *out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
            }
        }
        ChatGlm3 => {
            *out += "[gMASK]sop";
            for m in msgs {
                *out += &format!("<|{}|>\n {}", m.role, m.content);
            }
            if add_assistant {
                *out += "<|assistant|>";
            }
        }
        ChatGlm4 | GlmEdge => {
            if tmpl == ChatGlm4 {
                *out += "[gMASK]<sop>";
            }
            for m in msgs {
                *out += &format!("<|{}|>\n{}", m.role, m.content);
            }
            if add_assistant {
                *out += if tmpl == ChatGlm4 { "<|assistant|>\n" } else { "<|assistant|>" };
            }
        }
        MiniCpm => {
            for m in msgs {
                if m.role == "user" {
                    *out += &format!("<用户>{}<AI>", trim(m.content));
                } else {
                    *out += trim(m.content);
                }
            }
        }
        Deepseek2 => {
            for m in msgs {
                match m.role {
                    "system" => *out += &format!("{}\n\n", m.content),
                    "user" => *out += &format!("User: {}\n\n", m.content),
                    "assistant" => *out += &format!("Assistant: {}<｜end▁of▁sentence｜>", m.content),
                    _ => {}
                }
            }
            if add_assistant {
                *out += "Assistant:";
            }
        }
        Deepseek3 => {
            for m in msgs {
                match m.role {
                    "system" => *out += &format!("{}\n\n", m.content),
                    "user" => *out += &format!("<｜User｜>{}", m.content),
                    "assistant" => *out += &format!("<｜Assistant｜>{}<｜end▁of▁sentence｜>", m.content),
                    _ => {}
                }
            }
            if add_assistant {
                *out += "<｜Assistant｜>";
            }
        }
        DeepseekOcr => {
            for m in msgs {
                *out += m.content;
            }
        }
        Llama4 => {
            for m in msgs {
                *out += &format!("<|header_start|>{}<|header_end|>\n\n{}<|eot|>", m.role, trim(m.content));
            }
            if add_assistant {
                *out += "<|header_start|>assistant<|header_end|>\n\n";
            }
        }
        SolarOpen => {
            for m in msgs {
                *out += &format!("<|begin|>{}<|content|>{}<|end|>", m.role, m.content);
            }
            if add_assistant {
                *out += "<|begin|>assistant";
            }
        }
        other => return Err(format!("chat template '{}' is recognized but not supported yet", other.name())),
    }
    Ok(())
}

/// Whether a template's assistant turns may open with a `<think>` section (DeepSeek-R1 style):
/// the CLI uses it to show or hide the reasoning.
pub fn has_think_section(tmpl_text: &str) -> bool {
    tmpl_text.contains("<think>") || tmpl_text.contains("</think>")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_sorted_like_upstreams_map() {
        let names: Vec<_> = NAMES.iter().map(|(n, _)| *n).collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted);
    }

    #[test]
    fn unknown_template_is_none() {
        assert_eq!(detect("{{ nothing we know }}"), None);
        assert_eq!(detect("chatml"), Some(ChatMl));
    }
}
