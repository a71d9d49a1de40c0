/* ABI of llama.h b11312 as deepseek implements it: struct sizes and offsets (x86-64), enum
 * values, and the default parameters upstream returns. Compiled as C11 against include/llama.h. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include "llama.h"

#define OFF(T, f, v) _Static_assert(offsetof(struct T, f) == (v), #T "." #f " offset")
#define SIZE(T, v) _Static_assert(sizeof(struct T) == (v), "sizeof " #T)

SIZE(llama_model_params, 80);
OFF(llama_model_params, devices, 0); OFF(llama_model_params, tensor_buft_overrides, 8);
OFF(llama_model_params, n_gpu_layers, 16); OFF(llama_model_params, split_mode, 20);
OFF(llama_model_params, load_mode, 24); OFF(llama_model_params, lazy_mode, 28);
OFF(llama_model_params, main_gpu, 32); OFF(llama_model_params, tensor_split, 40);
OFF(llama_model_params, progress_callback, 48); OFF(llama_model_params, progress_callback_user_data, 56);
OFF(llama_model_params, kv_overrides, 64); OFF(llama_model_params, vocab_only, 72);
OFF(llama_model_params, check_tensors, 73); OFF(llama_model_params, use_extra_bufts, 74);
OFF(llama_model_params, no_host, 75); OFF(llama_model_params, no_alloc, 76); OFF(llama_model_params, load_mtp, 77);

SIZE(llama_context_params, 160);
OFF(llama_context_params, n_ctx, 0); OFF(llama_context_params, n_batch, 4); OFF(llama_context_params, n_ubatch, 8);
OFF(llama_context_params, n_seq_max, 12); OFF(llama_context_params, n_rs_seq, 16); OFF(llama_context_params, n_outputs_max, 20);
OFF(llama_context_params, n_outputs_max_per_seq, 24); OFF(llama_context_params, n_threads, 28);
OFF(llama_context_params, n_threads_batch, 32); OFF(llama_context_params, ctx_type, 36);
OFF(llama_context_params, rope_scaling_type, 40); OFF(llama_context_params, pooling_type, 44);
OFF(llama_context_params, attention_type, 48); OFF(llama_context_params, flash_attn_type, 52);
OFF(llama_context_params, rope_freq_base, 56); OFF(llama_context_params, rope_freq_scale, 60);
OFF(llama_context_params, yarn_ext_factor, 64); OFF(llama_context_params, yarn_attn_factor, 68);
OFF(llama_context_params, yarn_beta_fast, 72); OFF(llama_context_params, yarn_beta_slow, 76);
OFF(llama_context_params, yarn_orig_ctx, 80); OFF(llama_context_params, defrag_thold, 84);
OFF(llama_context_params, cb_eval, 88); OFF(llama_context_params, cb_eval_user_data, 96);
OFF(llama_context_params, type_k, 104); OFF(llama_context_params, type_v, 108);
OFF(llama_context_params, abort_callback, 112); OFF(llama_context_params, abort_callback_data, 120);
OFF(llama_context_params, embeddings, 128); OFF(llama_context_params, offload_kqv, 129);
OFF(llama_context_params, no_perf, 130); OFF(llama_context_params, op_offload, 131);
OFF(llama_context_params, swa_full, 132); OFF(llama_context_params, kv_unified, 133);
OFF(llama_context_params, samplers, 136); OFF(llama_context_params, n_samplers, 144); OFF(llama_context_params, ctx_other, 152);

SIZE(llama_batch, 56);
OFF(llama_batch, n_tokens, 0); OFF(llama_batch, token, 8); OFF(llama_batch, embd, 16); OFF(llama_batch, pos, 24);
OFF(llama_batch, n_seq_id, 32); OFF(llama_batch, seq_id, 40); OFF(llama_batch, logits, 48);

SIZE(llama_token_data, 12);
OFF(llama_token_data, id, 0); OFF(llama_token_data, logit, 4); OFF(llama_token_data, p, 8);
SIZE(llama_token_data_array, 32);
OFF(llama_token_data_array, data, 0); OFF(llama_token_data_array, size, 8);
OFF(llama_token_data_array, selected, 16); OFF(llama_token_data_array, sorted, 24);
SIZE(llama_chat_message, 16);
OFF(llama_chat_message, role, 0); OFF(llama_chat_message, content, 8);
SIZE(llama_sampler_chain_params, 1);
SIZE(llama_model_kv_override, 264);
SIZE(llama_logit_bias, 8);

/* Sampler and perf structs (values printed by a program compiled against upstream's llama.h). */
SIZE(llama_sampler_i, 96);
OFF(llama_sampler_i, name, 0); OFF(llama_sampler_i, accept, 8); OFF(llama_sampler_i, apply, 16);
OFF(llama_sampler_i, reset, 24); OFF(llama_sampler_i, clone, 32); OFF(llama_sampler_i, free, 40);
SIZE(llama_sampler, 16);
OFF(llama_sampler, iface, 0); OFF(llama_sampler, ctx, 8);
SIZE(llama_perf_context_data, 48);
OFF(llama_perf_context_data, t_start_ms, 0); OFF(llama_perf_context_data, t_load_ms, 8);
OFF(llama_perf_context_data, t_p_eval_ms, 16); OFF(llama_perf_context_data, t_eval_ms, 24);
OFF(llama_perf_context_data, n_p_eval, 32); OFF(llama_perf_context_data, n_eval, 36); OFF(llama_perf_context_data, n_reused, 40);
SIZE(llama_perf_sampler_data, 16);
OFF(llama_perf_sampler_data, t_sample_ms, 0); OFF(llama_perf_sampler_data, n_sample, 8);

_Static_assert(sizeof(llama_token) == 4 && sizeof(llama_pos) == 4 && sizeof(llama_seq_id) == 4, "id types");
_Static_assert(LLAMA_LOAD_MODE_AUTO == -1 && LLAMA_LOAD_MODE_NONE == 0 && LLAMA_LOAD_MODE_MMAP == 1 &&
               LLAMA_LOAD_MODE_MLOCK == 2 && LLAMA_LOAD_MODE_MMAP_MLOCK == 3 && LLAMA_LOAD_MODE_DIRECT_IO == 4, "load modes");
_Static_assert(LLAMA_VOCAB_TYPE_BPE == 2 && LLAMA_VOCAB_TYPE_SPM == 1 && LLAMA_VOCAB_TYPE_TEST == 7, "vocab types");
_Static_assert(LLAMA_ROPE_TYPE_NONE == -1 && LLAMA_ROPE_TYPE_NORM == 0 && LLAMA_ROPE_TYPE_NEOX == 2 &&
               LLAMA_ROPE_TYPE_MROPE == 8 && LLAMA_ROPE_TYPE_IMROPE == 40 && LLAMA_ROPE_TYPE_VISION == 24, "rope types");
_Static_assert(LLAMA_SPLIT_MODE_LAYER == 1 && LLAMA_SPLIT_MODE_TENSOR == 3, "split modes");
_Static_assert(LLAMA_FLASH_ATTN_TYPE_AUTO == -1 && LLAMA_POOLING_TYPE_RANK == 4 && LLAMA_ATTENTION_TYPE_NON_CAUSAL == 1, "ctx enums");
_Static_assert(LLAMA_ROPE_SCALING_TYPE_YARN == 2 && LLAMA_ROPE_SCALING_TYPE_LONGROPE == 3, "rope scaling");
_Static_assert(LLAMA_TOKEN_ATTR_SINGLE_WORD == 512 && LLAMA_TOKEN_TYPE_BYTE == 6, "token attrs");
_Static_assert(LLAMA_FTYPE_MOSTLY_Q4_K_M == 15 && LLAMA_FTYPE_MOSTLY_BF16 == 32 && LLAMA_FTYPE_GUESSED == 1024, "ftypes");
_Static_assert(GGML_TYPE_F16 == 1 && GGML_TYPE_Q4_K == 12 && GGML_TYPE_BF16 == 30 && GGML_TYPE_COUNT == 43, "ggml types");
_Static_assert(LLAMA_DEFAULT_SEED == 0xFFFFFFFF && LLAMA_TOKEN_NULL == -1, "constants");

static int failures;
#define CHECK(c) do { if (!(c)) { fprintf(stderr, "abi: %s:%d: %s\n", __FILE__, __LINE__, #c); failures++; } } while (0)

int main(void) {
    struct llama_model_params mp = llama_model_default_params();
    CHECK(mp.devices == NULL && mp.tensor_buft_overrides == NULL && mp.n_gpu_layers == -1);
    CHECK(mp.split_mode == LLAMA_SPLIT_MODE_LAYER && mp.load_mode == LLAMA_LOAD_MODE_AUTO && mp.lazy_mode == LLAMA_LAZY_MODE_AUTO);
    CHECK(mp.main_gpu == 0 && mp.tensor_split == NULL && mp.progress_callback == NULL && mp.kv_overrides == NULL);
    CHECK(!mp.vocab_only && !mp.check_tensors && mp.use_extra_bufts && !mp.no_host && !mp.no_alloc && !mp.load_mtp);

    struct llama_context_params cp = llama_context_default_params();
    CHECK(cp.n_ctx == 512 && cp.n_batch == 2048 && cp.n_ubatch == 512 && cp.n_seq_max == 1);
    CHECK(cp.n_rs_seq == 0 && cp.n_outputs_max == 0 && cp.n_outputs_max_per_seq == 1);
    CHECK(cp.n_threads == 4 && cp.n_threads_batch == 4 && cp.ctx_type == LLAMA_CONTEXT_TYPE_DEFAULT);
    CHECK(cp.rope_scaling_type == LLAMA_ROPE_SCALING_TYPE_UNSPECIFIED && cp.pooling_type == LLAMA_POOLING_TYPE_UNSPECIFIED);
    CHECK(cp.attention_type == LLAMA_ATTENTION_TYPE_UNSPECIFIED && cp.flash_attn_type == LLAMA_FLASH_ATTN_TYPE_AUTO);
    CHECK(cp.rope_freq_base == 0.0f && cp.rope_freq_scale == 0.0f && cp.yarn_ext_factor == -1.0f && cp.yarn_attn_factor == -1.0f);
    CHECK(cp.yarn_beta_fast == -1.0f && cp.yarn_beta_slow == -1.0f && cp.yarn_orig_ctx == 0 && cp.defrag_thold == -1.0f);
    CHECK(cp.cb_eval == NULL && cp.cb_eval_user_data == NULL && cp.type_k == GGML_TYPE_F16 && cp.type_v == GGML_TYPE_F16);
    CHECK(cp.abort_callback == NULL && cp.abort_callback_data == NULL);
    CHECK(!cp.embeddings && cp.offload_kqv && cp.no_perf && cp.op_offload && cp.swa_full && !cp.kv_unified);
    CHECK(cp.samplers == NULL && cp.n_samplers == 0 && cp.ctx_other == NULL);

    struct llama_sampler_chain_params sp = llama_sampler_chain_default_params();
    CHECK(sp.no_perf);

    /* Upstream's value union is anonymous: callers write ov.val_i64, not ov.value.val_i64. */
    struct llama_model_kv_override ov;
    memset(&ov, 0, sizeof ov);
    ov.tag = LLAMA_KV_OVERRIDE_TYPE_INT;
    ov.val_i64 = 42;
    CHECK(ov.val_i64 == 42 && ov.val_bool && ov.val_str[0] == 42);
    ov.val_f64 = 0.5;
    CHECK(ov.val_f64 == 0.5);

    if (failures) return 1;
    printf("abi: ok\n");
    return 0;
}
