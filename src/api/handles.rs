//! The opaque handles llama.h hands out. Each is a Box owned by the caller between its
//! create and free call; what it points to is owned as described on each type.

#![allow(non_camel_case_types)]

use std::cell::UnsafeCell;
use std::sync::Arc;

use super::counters::PerfCounters;
use crate::context::{Context, ContextMonitor};
use crate::model::Model;

/// `struct llama_model`: shares the immutable model with every context made from it, so a
/// context keeps working (and the file mapped) until the last of them is freed.
pub struct llama_model {
    pub model: Arc<Model>,
    pub vocab: llama_vocab,
    pub desc: std::ffi::CString,
    /// Chat templates from the GGUF metadata as C strings (key, template), valid while the model lives.
    pub templates: Vec<(String, std::ffi::CString)>,
    /// How long loading took (µs), for llama_perf_context.
    pub t_load_us: f64,
}

/// `struct llama_vocab`: lives inside its llama_model; shares the model (whose `vocab` it
/// serves) and keeps each token's text as a C string for llama_vocab_get_text.
pub struct llama_vocab {
    pub model: Arc<Model>,
    pub texts: Vec<std::ffi::CString>,
}

impl llama_vocab {
    pub fn new(model: Arc<Model>) -> llama_vocab {
        let v = &model.vocab;
        let texts = (0..v.n_tokens() as i32)
            .map(|i| std::ffi::CString::new(v.token_text(i).unwrap_or("").replace('\0', "")).unwrap_or_default())
            .collect();
        llama_vocab { model, texts }
    }
    pub fn vocab(&self) -> &crate::tokenizer::Vocab {
        &self.model.vocab
    }
}

/// `struct llama_memory_i`: the context's memory, addressed through the context that owns it.
pub struct llama_memory_i {
    pub ctx: *mut llama_context,
}

pub type llama_memory_t = *mut llama_memory_i;

// `ggml_abort_callback`: asked between a decode's steps whether to stop (true: abort). Defined
// with the handle that keeps it, below the C types, which re-export it. (A plain comment: cbindgen
// would copy a doc comment into include/deepseek.h.)
pub type ggml_abort_callback = Option<unsafe extern "C" fn(data: *mut std::ffi::c_void) -> bool>;

/// `struct llama_context`.
// The monitor and the memory back-pointer never change and may be read from any thread at
// any time; everything else is `ContextOwned`, which llama.h lets only one thread use at a
// time. Keeping it in an `UnsafeCell` is what makes a reader's `&llama_context` on another
// thread sound while the owner decodes.
pub struct llama_context {
    pub monitor: Arc<ContextMonitor>,
    pub memory: llama_memory_i,
    owned: UnsafeCell<ContextOwned>,
}

/// The part of a context its one user thread works with.
pub struct ContextOwned {
    pub ctx: Context,
    pub model: *const llama_model,
    pub abort_callback: ggml_abort_callback,
    pub abort_callback_data: *mut std::ffi::c_void,
    /// Decode counts and times for llama_perf_context.
    pub perf: PerfCounters,
}

impl llama_context {
    /// Boxes a new context handle (its memory handle points back at it).
    pub fn boxed(owned: ContextOwned) -> *mut llama_context {
        let monitor = Arc::clone(owned.ctx.monitor());
        let handle = Box::into_raw(Box::new(llama_context { monitor, memory: llama_memory_i { ctx: std::ptr::null_mut() }, owned: UnsafeCell::new(owned) }));
        // SAFETY: handle was just created and is uniquely ours.
        unsafe { (*handle).memory.ctx = handle };
        handle
    }

    /// The owner's part of the context.
    ///
    /// # Safety
    /// The calling thread must be the only one using the context's owned part for the life
    /// of the borrow: llama.h's rule that a context is used by one thread at a time (calls
    /// that only read `monitor` are exempt).
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn owned(&self) -> &mut ContextOwned {
        // SAFETY: exclusive use is the caller's obligation (above).
        unsafe { &mut *self.owned.get() }
    }
}
