//! llama_chat_apply_template and llama_chat_builtin_templates over `crate::chat`.

use std::ffi::{c_char, CStr};

use super::boundary::{as_c_bytes, as_slice, guard_or};
use super::types::*;
use crate::chat::{self, Message};

/// The built-in names as C strings (static, so callers may keep the pointers), in upstream's order
/// (its std::map's); `chat::builtin_names` lists the same (a unit test holds them equal).
const BUILTIN_C_NAMES: &[&CStr] = &[
    c"bailing", c"bailing-think", c"bailing2", c"chatglm3", c"chatglm4", c"chatml", c"command-r", c"deepseek", c"deepseek-ocr", c"deepseek2", c"deepseek3",
    c"exaone-moe", c"exaone3", c"exaone4", c"falcon3", c"gemma", c"gigachat", c"glmedge", c"gpt-oss", c"granite", c"granite-4.0", c"granite-4.1",
    c"grok-2", c"hunyuan-dense", c"hunyuan-moe", c"hunyuan-vl", c"kimi-k2", c"llama2", c"llama2-sys", c"llama2-sys-bos", c"llama2-sys-strip", c"llama3",
    c"llama4", c"megrez", c"minicpm", c"mistral-v1", c"mistral-v3", c"mistral-v3-tekken", c"mistral-v7", c"mistral-v7-tekken", c"monarch", c"openchat",
    c"orion", c"pangu-embedded", c"phi3", c"phi4", c"rwkv-world", c"seed_oss", c"smolvlm", c"solar-open", c"vicuna", c"vicuna-orca", c"yandex", c"zephyr",
];

/// Formats `n_msg` messages with template `tmpl` (a built-in name or a Jinja template recognized
/// by its markers; NULL means chatml). Returns the formatted length (copied into `buf` as far as
/// `length` allows, like strncpy), or -1 when the template is not one upstream recognizes.
/// Roles, contents and the template are bytes, as upstream's (no UTF-8 required).
///
/// # Safety
/// `chat` must hold `n_msg` messages with NUL-terminated role and content; `buf` must be
/// writable for `length` bytes.
#[no_mangle]
pub unsafe extern "C" fn llama_chat_apply_template(tmpl: *const c_char, chat: *const llama_chat_message, n_msg: usize, add_ass: bool, buf: *mut c_char, length: i32) -> i32 {
    guard_or("llama_chat_apply_template", -1, || {
        // SAFETY: NULL or a NUL-terminated string (caller).
        let tmpl = if tmpl.is_null() { &b"chatml"[..] } else { unsafe { as_c_bytes(tmpl, "tmpl") }? };
        // SAFETY: n_msg readable messages (caller).
        let raw = unsafe { as_slice(chat, n_msg, "chat") }?;
        let mut msgs = Vec::with_capacity(raw.len());
        for m in raw {
            // SAFETY: NUL-terminated strings (caller).
            msgs.push(Message { role: unsafe { as_c_bytes(m.role, "role") }?, content: unsafe { as_c_bytes(m.content, "content") }? });
        }
        let Some(family) = chat::detect(tmpl) else { return Ok(-1) };
        let mut out = Vec::new();
        chat::format(family, &msgs, add_ass, &mut out);
        let len = i32::try_from(out.len()).map_err(|_| "the formatted chat is longer than 2 GiB".to_string())?;
        if !buf.is_null() && length > 0 {
            let n = out.len().min(length as usize);
            // SAFETY: buf is writable for length bytes (caller); strncpy pads with NULs.
            unsafe {
                std::ptr::copy_nonoverlapping(out.as_ptr(), buf as *mut u8, n);
                std::ptr::write_bytes((buf as *mut u8).add(n), 0, length as usize - n);
            }
        }
        Ok(len)
    })
}

/// Writes up to `len` built-in template names to `output`; returns how many there are.
///
/// # Safety
/// `output` must be writable for `len` pointers.
#[no_mangle]
pub unsafe extern "C" fn llama_chat_builtin_templates(output: *mut *const c_char, len: usize) -> i32 {
    guard_or("llama_chat_builtin_templates", -1, || {
        for (i, name) in BUILTIN_C_NAMES.iter().take(if output.is_null() { 0 } else { len }).enumerate() {
            // SAFETY: i < len pointers are writable (caller).
            unsafe { *output.add(i) = name.as_ptr() };
        }
        Ok(BUILTIN_C_NAMES.len() as i32)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c_names_are_the_chat_modules() {
        assert!(chat::builtin_names().eq(BUILTIN_C_NAMES.iter().map(|c| c.to_str().unwrap())));
    }
}
