//! Settings llama.h programs pass that do something upstream: each does something here too,
//! or says why not — never silently ignored. mlock locks the model (VmLck), offload settings
//! warn by name, cb_eval is refused with its reason, flash_attn_type is accepted in all three
//! forms with one attention path, warm-up runs decode as usual.

mod common;

use std::ffi::CString;

use common::*;
use deepseek::api::backend::llama_supports_mlock;
use deepseek::api::context::*;
use deepseek::api::model::*;
use deepseek::api::types::*;

fn vm_lck_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = s.lines().find(|l| l.starts_with("VmLck:")).expect("VmLck in /proc/self/status");
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn load_with(path: &std::path::Path, p: llama_model_params) -> (*mut deepseek::api::handles::llama_model, String) {
    let c = CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    common::log::logged(|| unsafe { llama_model_load_from_file(c.as_ptr(), p) })
}

#[test]
fn mlock_locks_the_model_until_it_is_freed() {
    assert!(llama_supports_mlock());
    let path = data("tiny/tiny-qwen2-f32.gguf");
    let size_kib = std::fs::metadata(&path).unwrap().len() / 1024;
    for mode in [llama_load_mode::LLAMA_LOAD_MODE_MMAP_MLOCK, llama_load_mode::LLAMA_LOAD_MODE_MLOCK] {
        let before = vm_lck_kib();
        let mut p = llama_model_default_params();
        p.load_mode = mode;
        let (m, log) = load_with(&path, p);
        if m.is_null() {
            // only where RLIMIT_MEMLOCK forbids it, and then with that reason
            assert!(log.contains("RLIMIT_MEMLOCK"), "{log}");
            continue;
        }
        let locked = vm_lck_kib() - before;
        assert!(locked >= size_kib, "{mode:?}: {locked} KiB locked for a {size_kib} KiB model");
        // SAFETY: freed once.
        unsafe { llama_model_free(m) };
        assert_eq!(vm_lck_kib(), before, "{mode:?}: freeing the model unlocks it");
    }
}

#[test]
fn offload_settings_warn_by_name() {
    let path = data("tiny/tiny-qwen2-f32.gguf");
    let mut p = llama_model_default_params();
    p.n_gpu_layers = 99;
    p.main_gpu = 1;
    let name = CString::new("ffn_.*").unwrap();
    let overrides = [
        llama_model_tensor_buft_override { pattern: name.as_ptr(), buft: std::ptr::null_mut() },
        llama_model_tensor_buft_override { pattern: std::ptr::null(), buft: std::ptr::null_mut() },
    ];
    p.tensor_buft_overrides = overrides.as_ptr();
    let (m, log) = load_with(&path, p);
    assert!(!m.is_null(), "offload settings do not stop a CPU load");
    for setting in ["n_gpu_layers = 99", "main_gpu = 1", "tensor_buft_overrides"] {
        assert_eq!(log.matches(setting).count(), 1, "one warning naming {setting}: {log}");
    }
    // the defaults warn about nothing
    let (m2, log) = load_with(&path, llama_model_default_params());
    assert!(!log.contains("no effect"), "{log}");
    // SAFETY: freed once.
    unsafe {
        llama_model_free(m);
        llama_model_free(m2);
    }
}

unsafe extern "C" fn eval_cb(_t: *mut ggml_tensor, _ask: bool, _data: *mut std::ffi::c_void) -> bool {
    true
}

#[test]
fn cb_eval_is_refused_with_its_reason() {
    let m = load_model(&data("tiny/tiny-qwen2-f32.gguf"));
    let mut p = llama_context_default_params();
    p.cb_eval = Some(eval_cb);
    let (c, log) = common::log::logged(|| llama_init_from_model(m, p));
    assert!(c.is_null());
    assert!(log.contains("cb_eval"), "{log}");
    // SAFETY: freed once.
    unsafe { llama_model_free(m) };
}

#[test]
fn flash_attn_types_and_warmup_run_the_one_attention_path() {
    let m = load_model(&data("deepseek-family/tiny-deepseek-moe-q8_0.gguf"));
    let prompt: Vec<i32> = (0..20).map(|i| (i * 37 + 5) % 400).collect();
    let mut reference: Option<Vec<f32>> = None;
    for (fa, warm) in [(llama_flash_attn_type::LLAMA_FLASH_ATTN_TYPE_AUTO, false), (llama_flash_attn_type::LLAMA_FLASH_ATTN_TYPE_ENABLED, false), (llama_flash_attn_type::LLAMA_FLASH_ATTN_TYPE_DISABLED, true)] {
        let mut p = llama_context_default_params();
        (p.n_ctx, p.n_threads, p.n_threads_batch, p.flash_attn_type) = (256, 2, 2, fa);
        let (c, log) = common::log::logged(|| llama_init_from_model(m, p));
        assert!(!c.is_null());
        assert!(log.contains("one attention path"), "the log says the setting does not change the attention: {log}");
        if warm {
            // a warm-up run, as common_init does it: decode, clear, then the real run
            llama_set_warmup(c, true);
            let mut t = [1i32, 2];
            // SAFETY: t outlives the call.
            assert_eq!(unsafe { llama_decode(c, deepseek::api::batch::llama_batch_get_one(t.as_mut_ptr(), 2)) }, 0);
            llama_set_warmup(c, false);
            deepseek::api::memory::llama_memory_clear(llama_get_memory(c), true);
        }
        let mut toks = prompt.clone();
        // SAFETY: toks outlives the call.
        assert_eq!(unsafe { llama_decode(c, deepseek::api::batch::llama_batch_get_one(toks.as_mut_ptr(), toks.len() as i32)) }, 0);
        let logits = logits_row(c, -1, 400);
        match &reference {
            None => reference = Some(logits),
            Some(r) => assert_eq!(&logits, r, "{fa:?} (warm-up {warm}) gives the same logits"),
        }
        // SAFETY: freed once.
        unsafe { llama_free(c) };
    }
    // SAFETY: freed once.
    unsafe { llama_model_free(m) };
}
