// The functions of upstream's staging C++ API whose arguments or values are C++ objects (b11312's
// src/llama-ext.h and src/llama-sampler.h): `llama_get_memory_breakdown` returns a `std::map` by
// value, `llama_sampler_init_dry_testing` takes a `std::vector` of vectors. Written in C++ and
// compiled by `cc` (build.rs) against the system's libstdc++ headers, so that the compiler lays
// those objects out, builds and reads them, and passes them the way a C++ caller built against
// the same library does. Each function hands its checks and work to src/api/ext.rs, through the
// boundary (src/api/boundary.rs), which exports the rest of the staging API from Rust.
//
// Compiled without exceptions or RTTI and calling nothing out of line: the library needs no
// libstdc++ at run time (tests/library_files.rs checks that it neither needs libstdc++ nor
// leaves one of its symbols undefined).
//
// build.rs adds every name on an "// export: " line of this file to the shared library's
// version script; tests/library_files.rs checks the exported set, and c_tests/ext_api.cpp calls
// both functions as upstream's callers do, also under valgrind.

#include <cstddef>
#include <map>
#include <vector>

#include "llama.h"

// As src/llama-ext.h declares them.
struct llama_memory_breakdown_data {
    size_t model = 0;    // memory allocated for the model
    size_t context = 0;  // memory allocated for the context
    size_t compute = 0;  // memory allocated for temporary compute buffers

    size_t total() const { return model + context + compute; }
};

using llama_memory_breakdown = std::map<ggml_backend_buffer_type_t, llama_memory_breakdown_data>;
using dry_breakers = std::vector<std::vector<llama_token>>;

// Library-internal symbols are hidden: a hidden reference makes the linker hide the Rust
// definition too (the most constraining visibility wins), which rustc would otherwise export
// from the shared library, as it does every #[no_mangle] function.
#define DS_INTERNAL __attribute__((visibility("hidden")))
#define DS_EXPORT __attribute__((visibility("default")))

// src/api/ext.rs. They never unwind: the boundary catches panics.
extern "C" DS_INTERNAL bool deepseek_ext_memory_breakdown(const llama_context *ctx) noexcept;
extern "C" DS_INTERNAL llama_sampler *deepseek_ext_dry_testing(float dry_multiplier, float dry_base,
                                                               int32_t dry_allowed_length, int32_t dry_penalty_last_n,
                                                               const void *breakers, size_t n_breakers) noexcept;

// The map is empty: no ggml buffer types back our memory, and upstream's callers
// (common_memory_breakdown_print, --fit) then report nothing for it. A NULL context is logged.
// export: _Z26llama_get_memory_breakdownPK13llama_context
DS_EXPORT llama_memory_breakdown llama_get_memory_breakdown(const llama_context *ctx) {
    deepseek_ext_memory_breakdown(ctx);
    return llama_memory_breakdown();
}

// The DRY sampler with sequence breakers given as tokens (upstream's test-sampling uses it).
// export: _Z30llama_sampler_init_dry_testingffiiRKSt6vectorIS_IiSaIiEESaIS1_EE
DS_EXPORT llama_sampler *llama_sampler_init_dry_testing(
        float dry_multiplier, float dry_base, int32_t dry_allowed_length, int32_t dry_penalty_last_n,
        const dry_breakers &seq_breakers) {
    return deepseek_ext_dry_testing(dry_multiplier, dry_base, dry_allowed_length, dry_penalty_last_n, &seq_breakers,
                                    seq_breakers.size());
}

// For deepseek_ext_dry_testing: breaker `i` (< the size it was given) of `breakers`.
extern "C" DS_INTERNAL const llama_token *deepseek_ext_dry_breaker(const void *breakers, size_t i, size_t *n) noexcept {
    const std::vector<llama_token> &b = *(static_cast<const dry_breakers *>(breakers)->data() + i);
    *n = b.size();
    return b.data();
}
