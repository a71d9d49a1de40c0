//! chat: llama.cpp's built-in chat templates (src/llama-chat.cpp of b11312, not a Jinja engine):
//! a template string is either a built-in name or a Jinja template recognized by the markers it
//! contains, exactly in upstream's order; messages are then formatted by the matching built-in,
//! byte for byte as upstream's `llm_chat_apply_template` (all 56 families; roles and contents are
//! bytes, as upstream's C strings: nothing here requires UTF-8).

/// A chat template family (upstream's `llm_chat_template`), as upstream names it.
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

/// Upstream's built-in names (its std::map, hence sorted) and what each selects; `Dots1` has no
/// name (upstream detects it from a template but lists no name for it).
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

/// Upstream's built-in names, in the order `llama_chat_builtin_templates` lists them.
pub fn builtin_names() -> impl Iterator<Item = &'static str> {
    NAMES.iter().map(|(n, _)| *n)
}

impl Template {
    /// Upstream's name of the family (`dots1`, which has none, by its architecture's name).
    pub fn name(self) -> &'static str {
        NAMES.iter().find(|(_, t)| *t == self).map(|(n, _)| *n).unwrap_or("dots1")
    }
}

/// Whether `needle` occurs in `hay` (upstream's `tmpl.find(needle) != npos`).
fn contains(hay: &[u8], needle: &str) -> bool {
    let n = needle.as_bytes();
    hay.len() >= n.len() && hay.windows(n.len()).any(|w| w == n)
}

/// Upstream's llm_chat_detect_template: a built-in name, or a template recognized by its markers
/// (the first branch that matches wins, so the order is upstream's).
pub fn detect(tmpl: impl AsRef<[u8]>) -> Option<Template> {
    let tmpl = tmpl.as_ref();
    if let Some(&(_, t)) = NAMES.iter().find(|(n, _)| n.as_bytes() == tmpl) {
        return Some(t);
    }
    let has = |s: &str| contains(tmpl, s);
    let t = if has("<|im_start|>") {
        if has("<|im_sep|>") {
            Phi4
        } else if has("<end_of_utterance>") {
            SmolVlm
        } else {
            ChatMl
        }
    } else if tmpl.starts_with(b"mistral") || has("[INST]") {
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

/// One message of a conversation: role and content as upstream's C strings hold them (bytes).
#[derive(Clone, Copy, Debug)]
pub struct Message<'a> {
    pub role: &'a [u8],
    pub content: &'a [u8],
}

impl<'a> Message<'a> {
    pub fn new(role: &'a str, content: &'a str) -> Self {
        Message { role: role.as_bytes(), content: content.as_bytes() }
    }
}

/// Trims C's isspace bytes (space, \t, \n, \v, \f, \r) at both ends, as upstream's `trim`.
fn trim(s: &[u8]) -> &[u8] {
    let space = |c: &u8| matches!(c, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r');
    let start = s.iter().position(|c| !space(c)).unwrap_or(s.len());
    let end = s.iter().rposition(|c| !space(c)).map_or(start, |i| i + 1);
    &s[start..end]
}

/// A role in capitals as bailing's templates write it: "user" is HUMAN, others upper-cased
/// (C's toupper in the C locale: ASCII letters only).
fn bailing_role(role: &[u8]) -> Vec<u8> {
    if role == b"user" {
        b"HUMAN".to_vec()
    } else {
        role.to_ascii_uppercase()
    }
}

/// Appends each piece (anything that is bytes) to `out`.
macro_rules! put {
    ($out:expr, $($piece:expr),+ $(,)?) => {{
        $( $out.extend_from_slice(AsRef::<[u8]>::as_ref(&$piece)); )+
    }};
}

/// Upstream's llm_chat_apply_template: formats `msgs` with `tmpl` into `out` (replacing it);
/// `add_ass` opens the assistant's turn in the families that have such a tail (some ignore it:
/// Mistral, Llama 2, Orion, MiniCPM, DeepSeek-OCR, RWKV, Hunyuan). Upstream refuses no input once
/// the family is known, so neither does this.
pub fn format(tmpl: Template, msgs: &[Message<'_>], add_ass: bool, out: &mut Vec<u8>) {
    out.clear();
    let n = msgs.len();
    // the assistant's opening, written when add_ass (None: the family has no such tail)
    let tail: Option<&str> = match tmpl {
        ChatMl => {
            for m in msgs {
                put!(out, "<|im_start|>", m.role, "\n", m.content, "<|im_end|>\n");
            }
            Some("<|im_start|>assistant\n")
        }
        MistralV7 | MistralV7Tekken => {
            let sp = if tmpl == MistralV7 { " " } else { "" };
            for m in msgs {
                match m.role {
                    b"system" => put!(out, "[SYSTEM_PROMPT]", sp, m.content, "[/SYSTEM_PROMPT]"),
                    b"user" => put!(out, "[INST]", sp, m.content, "[/INST]"),
                    _ => put!(out, sp, m.content, "</s>"),
                }
            }
            None
        }
        MistralV1 | MistralV3 | MistralV3Tekken => {
            let lead = if tmpl == MistralV1 { " " } else { "" };
            let trail = if tmpl == MistralV3Tekken { "" } else { " " };
            let mut inside_turn = false;
            for m in msgs {
                if !inside_turn {
                    put!(out, lead, "[INST]", trail);
                    inside_turn = true;
                }
                match m.role {
                    b"system" => put!(out, m.content, "\n\n"),
                    b"user" => put!(out, m.content, lead, "[/INST]"),
                    _ => {
                        let content = if tmpl == MistralV3 { trim(m.content) } else { m.content };
                        put!(out, trail, content, "</s>");
                        inside_turn = false;
                    }
                }
            }
            None
        }
        Llama2 | Llama2Sys | Llama2SysBos | Llama2SysStrip => {
            let mut inside_turn = true; // no BOS before the first turn
            put!(out, "[INST] ");
            for m in msgs {
                let content = if tmpl == Llama2SysStrip { trim(m.content) } else { m.content };
                if !inside_turn {
                    inside_turn = true;
                    put!(out, if tmpl == Llama2SysBos { "<s>[INST] " } else { "[INST] " });
                }
                match m.role {
                    b"system" if tmpl != Llama2 => put!(out, "<<SYS>>\n", content, "\n<</SYS>>\n\n"),
                    b"system" => put!(out, content, "\n"),
                    b"user" => put!(out, content, " [/INST]"),
                    _ => {
                        put!(out, content, "</s>");
                        inside_turn = false;
                    }
                }
            }
            None
        }
        Phi3 => {
            for m in msgs {
                put!(out, "<|", m.role, "|>\n", m.content, "<|end|>\n");
            }
            Some("<|assistant|>\n")
        }
        Phi4 => {
            for m in msgs {
                put!(out, "<|im_start|>", m.role, "<|im_sep|>", m.content, "<|im_end|>");
            }
            Some("<|im_start|>assistant<|im_sep|>")
        }
        Falcon3 => {
            for m in msgs {
                put!(out, "<|", m.role, "|>\n", m.content, "\n");
            }
            Some("<|assistant|>\n")
        }
        Zephyr => {
            for m in msgs {
                put!(out, "<|", m.role, "|>\n", m.content, "<|endoftext|>\n");
            }
            Some("<|assistant|>\n")
        }
        Monarch => {
            for (i, m) in msgs.iter().enumerate() {
                let bos = if i == 0 { "" } else { "<s>" }; // the first message has none
                put!(out, bos, m.role, "\n", m.content, "</s>\n");
            }
            Some("<s>assistant\n")
        }
        Gemma => {
            // no system turn: system messages (trimmed, concatenated) open the next non-model turn
            let mut system = Vec::new();
            for m in msgs {
                if m.role == b"system" {
                    system.extend_from_slice(trim(m.content));
                    continue;
                }
                let role = if m.role == b"assistant" { &b"model"[..] } else { m.role };
                put!(out, "<start_of_turn>", role, "\n");
                if !system.is_empty() && role != b"model" {
                    put!(out, system, "\n\n");
                    system.clear();
                }
                put!(out, trim(m.content), "<end_of_turn>\n");
            }
            Some("<start_of_turn>model\n")
        }
        Orion => {
            // no system turn: system messages (concatenated) open the next user turn
            let mut system = Vec::new();
            for m in msgs {
                match m.role {
                    b"system" => system.extend_from_slice(m.content),
                    b"user" => {
                        put!(out, "Human: ");
                        if !system.is_empty() {
                            put!(out, system, "\n\n");
                            system.clear();
                        }
                        put!(out, m.content, "\n\nAssistant: </s>");
                    }
                    _ => put!(out, m.content, "</s>"),
                }
            }
            None
        }
        OpenChat => {
            for m in msgs {
                if m.role == b"system" {
                    put!(out, m.content, "<|end_of_turn|>");
                } else {
                    // the role with its first byte upper-cased (C's toupper: ASCII letters only)
                    let mut role = m.role.to_vec();
                    if let Some(c) = role.first_mut() {
                        c.make_ascii_uppercase();
                    }
                    put!(out, "GPT4 Correct ", role, ": ", m.content, "<|end_of_turn|>");
                }
            }
            Some("GPT4 Correct Assistant:")
        }
        Vicuna | VicunaOrca => {
            for m in msgs {
                match m.role {
                    b"system" if tmpl == VicunaOrca => put!(out, "SYSTEM: ", m.content, "\n"),
                    b"system" => put!(out, m.content, "\n\n"),
                    b"user" => put!(out, "USER: ", m.content, "\n"),
                    b"assistant" => put!(out, "ASSISTANT: ", m.content, "</s>\n"),
                    _ => {}
                }
            }
            Some("ASSISTANT:")
        }
        Deepseek => {
            for m in msgs {
                match m.role {
                    b"system" => put!(out, m.content),
                    b"user" => put!(out, "### Instruction:\n", m.content, "\n"),
                    b"assistant" => put!(out, "### Response:\n", m.content, "\n<|EOT|>\n"),
                    _ => {}
                }
            }
            Some("### Response:\n")
        }
        CommandR => {
            for m in msgs {
                let token = match m.role {
                    b"system" => "SYSTEM",
                    b"user" => "USER",
                    b"assistant" => "CHATBOT",
                    _ => continue,
                };
                put!(out, "<|START_OF_TURN_TOKEN|><|", token, "_TOKEN|>", trim(m.content), "<|END_OF_TURN_TOKEN|>");
            }
            Some("<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>")
        }
        Llama3 => {
            for m in msgs {
                put!(out, "<|start_header_id|>", m.role, "<|end_header_id|>\n\n", trim(m.content), "<|eot_id|>");
            }
            Some("<|start_header_id|>assistant<|end_header_id|>\n\n")
        }
        ChatGlm3 => {
            put!(out, "[gMASK]sop");
            for m in msgs {
                put!(out, "<|", m.role, "|>\n ", m.content);
            }
            Some("<|assistant|>")
        }
        ChatGlm4 => {
            put!(out, "[gMASK]<sop>");
            for m in msgs {
                put!(out, "<|", m.role, "|>\n", m.content);
            }
            Some("<|assistant|>\n")
        }
        GlmEdge => {
            for m in msgs {
                put!(out, "<|", m.role, "|>\n", m.content);
            }
            Some("<|assistant|>")
        }
        MiniCpm => {
            for m in msgs {
                if m.role == b"user" {
                    put!(out, "<用户>", trim(m.content), "<AI>");
                } else {
                    put!(out, trim(m.content));
                }
            }
            None
        }
        Deepseek2 => {
            for m in msgs {
                match m.role {
                    b"system" => put!(out, m.content, "\n\n"),
                    b"user" => put!(out, "User: ", m.content, "\n\n"),
                    b"assistant" => put!(out, "Assistant: ", m.content, "<｜end▁of▁sentence｜>"),
                    _ => {}
                }
            }
            Some("Assistant:")
        }
        Deepseek3 => {
            for m in msgs {
                match m.role {
                    b"system" => put!(out, m.content, "\n\n"),
                    b"user" => put!(out, "<｜User｜>", m.content),
                    b"assistant" => put!(out, "<｜Assistant｜>", m.content, "<｜end▁of▁sentence｜>"),
                    _ => {}
                }
            }
            Some("<｜Assistant｜>")
        }
        DeepseekOcr => {
            for m in msgs {
                put!(out, m.content);
            }
            None
        }
        Exaone3 | Exaone4 => {
            for m in msgs {
                let content = trim(m.content);
                match m.role {
                    b"system" => put!(out, "[|system|]", content, "[|endofturn|]\n"),
                    b"user" => put!(out, "[|user|]", content, "\n"),
                    b"assistant" => put!(out, "[|assistant|]", content, "[|endofturn|]\n"),
                    b"tool" if tmpl == Exaone4 => put!(out, "[|tool|]", content, "[|endofturn|]\n"),
                    _ => {}
                }
            }
            Some("[|assistant|]")
        }
        ExaoneMoe => {
            for m in msgs {
                if matches!(m.role, b"system" | b"user" | b"assistant" | b"tool") {
                    put!(out, "<|", m.role, "|>\n", trim(m.content), "<|endofturn|>\n");
                }
            }
            Some("<|assistant|>\n")
        }
        RwkvWorld => {
            // no add_ass: a conversation that ends with the user's turn opens the assistant's
            for (i, m) in msgs.iter().enumerate() {
                let content = trim(m.content);
                match m.role {
                    b"system" => put!(out, "System: ", content, "\n\n"),
                    b"user" => {
                        put!(out, "User: ", content, "\n\n");
                        if i == n - 1 {
                            put!(out, "Assistant:");
                        }
                    }
                    b"assistant" => put!(out, "Assistant: ", content, "\n\n"),
                    _ => {}
                }
            }
            None
        }
        Granite3 => {
            for m in msgs {
                put!(out, "<|start_of_role|>", m.role, "<|end_of_role|>");
                if m.role == b"assistant_tool_call" {
                    put!(out, "<|tool_call|>");
                }
                put!(out, m.content, "<|end_of_text|>\n");
            }
            Some("<|start_of_role|>assistant<|end_of_role|>")
        }
        Granite40 | Granite41 => {
            for m in msgs {
                if m.role == b"assistant_tool_call" {
                    put!(out, "<|start_of_role|>assistant<|end_of_role|><|tool_call|>");
                } else {
                    put!(out, "<|start_of_role|>", m.role, "<|end_of_role|>");
                }
                put!(out, m.content, "<|end_of_text|>\n");
            }
            Some("<|start_of_role|>assistant<|end_of_role|>")
        }
        GigaChat => {
            // a system message is one only in the first place; other roles are left out
            let has_system = msgs.first().is_some_and(|m| m.role == b"system");
            put!(out, "<s>");
            if has_system {
                put!(out, msgs[0].content, "<|message_sep|>");
            }
            for m in &msgs[has_system as usize..] {
                match m.role {
                    b"user" => put!(out, "user<|role_sep|>", m.content, "<|message_sep|>available functions<|role_sep|>[]<|message_sep|>"),
                    b"assistant" => put!(out, "assistant<|role_sep|>", m.content, "<|message_sep|>"),
                    _ => {}
                }
            }
            Some("assistant<|role_sep|>")
        }
        Megrez => {
            for m in msgs {
                put!(out, "<|role_start|>", m.role, "<|role_end|>", m.content, "<|turn_end|>");
            }
            Some("<|role_start|>assistant<|role_end|>")
        }
        Yandex => {
            // no system turn (a system message is left out)
            for m in msgs {
                match m.role {
                    b"user" => put!(out, " Пользователь: ", m.content, "\n\n"),
                    b"assistant" => put!(out, " Ассистент: ", m.content, "\n\n"),
                    _ => {}
                }
            }
            Some(" Ассистент:[SEP]")
        }
        Bailing | BailingThink => {
            for m in msgs {
                put!(out, "<role>", bailing_role(m.role), "</role>", m.content);
            }
            Some(if tmpl == BailingThink { "<role>ASSISTANT</role><think>" } else { "<role>ASSISTANT</role>" })
        }
        Bailing2 => {
            if !msgs.first().is_some_and(|m| m.role == b"system") {
                put!(out, "<role>SYSTEM</role>detailed thinking off<|role_end|>");
            }
            for m in msgs {
                put!(out, "<role>", bailing_role(m.role), "</role>", m.content, "<|role_end|>");
            }
            Some("<role>ASSISTANT</role>")
        }
        Llama4 => {
            for m in msgs {
                put!(out, "<|header_start|>", m.role, "<|header_end|>\n\n", trim(m.content), "<|eot|>");
            }
            Some("<|header_start|>assistant<|header_end|>\n\n")
        }
        SmolVlm => {
            put!(out, "<|im_start|>"); // its BOS; the turns are not chatml's
            for m in msgs {
                match m.role {
                    b"system" => put!(out, m.content, "\n\n"),
                    b"user" => put!(out, "User: ", m.content, "<end_of_utterance>\n"),
                    _ => put!(out, "Assistant: ", m.content, "<end_of_utterance>\n"),
                }
            }
            Some("Assistant:")
        }
        Dots1 => {
            for m in msgs {
                match m.role {
                    b"system" => put!(out, "<|system|>", m.content, "<|endofsystem|>"),
                    b"user" => put!(out, "<|userprompt|>", m.content, "<|endofuserprompt|>"),
                    _ => put!(out, "<|response|>", m.content, "<|endofresponse|>"),
                }
            }
            Some("<|response|>")
        }
        HunyuanMoe => {
            for m in msgs {
                match m.role {
                    b"system" => put!(out, "<|startoftext|>", m.content, "<|extra_4|>"),
                    b"assistant" => put!(out, m.content, "<|eos|>"),
                    _ => put!(out, "<|startoftext|>", m.content, "<|extra_0|>"),
                }
            }
            None
        }
        GptOss => {
            for m in msgs {
                let end = if m.role == b"assistant" { "<|return|>" } else { "<|end|>" };
                put!(out, "<|start|>", m.role, "<|message|>", m.content, end);
            }
            Some("<|start|>assistant")
        }
        HunyuanDense => {
            // a system message is one only in the first place; other roles are left out
            for (i, m) in msgs.iter().enumerate() {
                match m.role {
                    b"system" if i == 0 => put!(out, m.content, "<｜hy_place▁holder▁no▁3｜>"),
                    b"assistant" => put!(out, "<｜hy_Assistant｜>", m.content, "<｜hy_place▁holder▁no▁2｜>"),
                    b"user" => put!(out, "<｜hy_User｜>", m.content, "<｜hy_Assistant｜>"),
                    _ => {}
                }
            }
            None
        }
        HunyuanVl => {
            // the content comes before its role's token; system only in the first place
            put!(out, "<｜hy_begin▁of▁sentence｜>");
            for (i, m) in msgs.iter().enumerate() {
                match m.role {
                    b"system" if i == 0 => put!(out, m.content, "<｜hy_place▁holder▁no▁3｜>"),
                    b"user" => put!(out, m.content, "<｜hy_User｜>"),
                    b"assistant" => put!(out, m.content, "<｜hy_Assistant｜>"),
                    _ => {}
                }
            }
            None
        }
        KimiK2 => {
            for m in msgs {
                let head = match m.role {
                    b"system" => "<|im_system|>system<|im_middle|>",
                    b"user" => "<|im_user|>user<|im_middle|>",
                    b"assistant" => "<|im_assistant|>assistant<|im_middle|>",
                    b"tool" => "<|im_system|>tool<|im_middle|>",
                    _ => "", // other roles: the content alone
                };
                put!(out, head, m.content, "<|im_end|>");
            }
            Some("<|im_assistant|>assistant<|im_middle|>")
        }
        SeedOss => {
            for m in msgs {
                let content = if m.role == b"assistant" { trim(m.content) } else { m.content };
                put!(out, "<seed:bos>", m.role, "\n", content, "<seed:eos>");
            }
            Some("<seed:bos>assistant\n")
        }
        Grok2 => {
            for m in msgs {
                match m.role {
                    b"system" => put!(out, "System: ", trim(m.content), "<|separator|>\n\n"),
                    b"user" => put!(out, "Human: ", trim(m.content), "<|separator|>\n\n"),
                    b"assistant" => put!(out, "Assistant: ", m.content, "<|separator|>\n\n"),
                    _ => {}
                }
            }
            Some("Assistant:")
        }
        PanguEmbed => {
            for (i, m) in msgs.iter().enumerate() {
                if i == 0 && m.role != b"system" {
                    put!(out, "[unused9]系统：[unused10]"); // an empty system turn first
                }
                let who = match m.role {
                    b"system" => "系统",
                    b"user" => "用户",
                    b"assistant" => "助手",
                    b"tool" => "工具",
                    b"function" => "方法",
                    _ => continue,
                };
                put!(out, "[unused9]", who, "：", m.content, "[unused10]");
            }
            Some("[unused9]助手：")
        }
        SolarOpen => {
            for m in msgs {
                put!(out, "<|begin|>", m.role, "<|content|>", m.content, "<|end|>");
            }
            Some("<|begin|>assistant")
        }
    };
    if let (true, Some(tail)) = (add_ass, tail) {
        put!(out, tail);
    }
}

/// `format` into a String, for callers whose roles and contents are UTF-8 (the CLI, the server):
/// every piece is UTF-8 and cuts fall on ASCII bytes only, so UTF-8 in is UTF-8 out.
pub fn format_str(tmpl: Template, msgs: &[Message<'_>], add_ass: bool, out: &mut String) {
    let mut bytes = std::mem::take(out).into_bytes();
    format(tmpl, msgs, add_ass, &mut bytes);
    *out = String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
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
        assert_eq!(names.len(), 54);
    }

    #[test]
    fn unknown_template_is_none() {
        assert_eq!(detect("{{ nothing we know }}"), None);
        assert_eq!(detect("chatml"), Some(ChatMl));
        assert_eq!(detect(b"\xff<|im_start|>"), Some(ChatMl));
    }

    #[test]
    fn trim_is_c_isspace() {
        assert_eq!(trim(b" \t\n\x0b\x0c\r a b \r\n"), b"a b");
        assert_eq!(trim(b"   "), b"");
        assert_eq!(trim("\u{a0}x\u{a0}".as_bytes()), "\u{a0}x\u{a0}".as_bytes());
    }
}
