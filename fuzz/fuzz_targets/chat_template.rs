//! llama_chat_apply_template with an arbitrary template string and arbitrary messages: the
//! input is split at NUL bytes into the template, then (role, content) pairs.
#![no_main]

use std::ffi::CString;

use deepseek::api::chat::llama_chat_apply_template;
use deepseek::api::types::llama_chat_message;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    static GUARD: std::sync::Once = std::sync::Once::new();
    GUARD.call_once(deepseek_fuzz::install_log_guard);
    let mut parts = data.split(|&b| b == 0).map(|p| CString::new(p).unwrap());
    let Some(tmpl) = parts.next() else { return };
    let strings: Vec<CString> = parts.take(32).collect();
    let msgs: Vec<llama_chat_message> = strings.chunks_exact(2).map(|p| llama_chat_message { role: p[0].as_ptr(), content: p[1].as_ptr() }).collect();
    let mut buf = vec![0u8; 256];
    for add_ass in [false, true] {
        // SAFETY: the template and messages are NUL-terminated and outlive the call; buf is
        // writable for its length.
        let n = unsafe { llama_chat_apply_template(tmpl.as_ptr(), msgs.as_ptr(), msgs.len(), add_ass, buf.as_mut_ptr().cast(), buf.len() as i32) };
        if n > buf.len() as i32 {
            let mut big = vec![0u8; n as usize + 1];
            // SAFETY: as above, with a buffer of the size asked for.
            let m = unsafe { llama_chat_apply_template(tmpl.as_ptr(), msgs.as_ptr(), msgs.len(), add_ass, big.as_mut_ptr().cast(), big.len() as i32) };
            assert_eq!(m, n, "the length changed between calls");
        }
    }
});
