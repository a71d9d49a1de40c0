/* A llama.h program's life on deepseek: load, context, batched decode of two sequences, logits,
 * memory operations, error paths with bad arguments, free. argv[1] = a tiny model. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llama.h"
#include "log_guard.h"

static int failures;
#define CHECK(c) do { if (!(c)) { fprintf(stderr, "walkthrough: %s:%d: %s\n", __FILE__, __LINE__, #c); failures++; } } while (0)

static void add(struct llama_batch *b, llama_token t, llama_pos p, llama_seq_id s, int out) {
    int i = b->n_tokens++;
    b->token[i] = t; b->pos[i] = p; b->n_seq_id[i] = 1; b->seq_id[i][0] = s; b->logits[i] = (int8_t) out;
}

static int finite_row(const float *l, int n) {
    if (!l) return 0;
    for (int i = 0; i < n; i++) if (!isfinite(l[i])) return 0;
    return 1;
}

struct progress { int calls; float last; int monotonic; int cancel_after; };
static bool on_progress(float p, void *ud) {
    struct progress *pr = ud;
    if (p < pr->last) pr->monotonic = 0;
    pr->last = p;
    pr->calls++;
    return pr->cancel_after < 0 || pr->calls <= pr->cancel_after;
}

/* A user-defined sampler with state and no clone function: cloning it fails inside the library
 * (a Rust panic, unwound and caught at the C boundary), which works however the library is
 * linked (shared, static, LD_PRELOAD). */
static void apply_nothing(struct llama_sampler *smpl, llama_token_data_array *cur_p) { (void) smpl; (void) cur_p; }
static struct llama_sampler_i no_clone_iface = {NULL, NULL, apply_nothing, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: walkthrough MODEL\n"); return 2; }
    ds_log_guard_install();
    llama_backend_init();
    CHECK(llama_supports_mmap() && !llama_supports_gpu_offload() && llama_max_devices() >= 1);
    CHECK(llama_max_parallel_sequences() >= 4);
    CHECK(llama_print_system_info() != NULL);
    CHECK(llama_time_us() > 0);

    /* Loading reports progress from 0 to 1, and a callback that says no cancels it. */
    struct progress pr = {0, 0.0f, 1, -1};
    struct llama_model_params mp = llama_model_default_params();
    mp.progress_callback = on_progress;
    mp.progress_callback_user_data = &pr;
    struct llama_model *m = llama_model_load_from_file(argv[1], mp);
    CHECK(m != NULL);
    if (!m) return 1;
    CHECK(pr.calls >= 2 && pr.monotonic && pr.last == 1.0f);
    struct progress stop = {0, 0.0f, 1, 1};
    mp.progress_callback_user_data = &stop;
    CHECK(llama_model_load_from_file(argv[1], mp) == NULL && stop.calls == 2);
    const struct llama_vocab *v = llama_model_get_vocab(m);
    int n_vocab = llama_vocab_n_tokens(v);
    CHECK(n_vocab > 0);
    CHECK(llama_model_n_embd(m) > 0 && llama_model_n_layer(m) > 0 && llama_model_n_head(m) > 0);
    CHECK(llama_model_n_head_kv(m) > 0 && llama_model_n_ctx_train(m) > 0);
    CHECK(llama_model_size(m) > 0 && llama_model_n_params(m) > 0);
    CHECK(llama_model_rope_type(m) == LLAMA_ROPE_TYPE_NEOX || llama_model_rope_type(m) == LLAMA_ROPE_TYPE_NORM);
    char desc[128];
    CHECK(llama_model_desc(m, desc, sizeof desc) > 0 && strlen(desc) > 0);
    CHECK(llama_model_meta_count(m) > 0);
    char key[256], val[256];
    CHECK(llama_model_meta_key_by_index(m, 0, key, sizeof key) > 0);
    CHECK(llama_model_meta_val_str(m, "general.architecture", val, sizeof val) > 0);
    CHECK(llama_model_meta_val_str(m, "no.such.key", val, sizeof val) == -1);
    CHECK(llama_model_meta_key_by_index(m, 1 << 20, key, sizeof key) == -1);

    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 128; cp.n_batch = 32; cp.n_ubatch = 8; cp.n_seq_max = 2; cp.n_threads = 2; cp.n_threads_batch = 2;
    struct llama_context *c = llama_init_from_model(m, cp);
    CHECK(c != NULL);
    if (!c) return 1;
    CHECK(llama_n_ctx(c) == 512 && llama_n_ctx_seq(c) == 256);
    CHECK(llama_n_batch(c) == 32 && llama_n_ubatch(c) == 8 && llama_n_seq_max(c) == 2);
    CHECK(llama_get_model(c) == m);
    llama_memory_t mem = llama_get_memory(c);
    CHECK(mem != NULL && llama_memory_can_shift(mem));

    /* Two sequences of 10 tokens in one batch (split into micro-batches of 8). */
    struct llama_batch b = llama_batch_init(32, 0, 2);
    for (int i = 0; i < 10; i++) { add(&b, (i * 7) % n_vocab, i, 0, i == 9); add(&b, (i * 11) % n_vocab, i, 1, i == 9); }
    CHECK(llama_decode(c, b) == 0);
    CHECK(finite_row(llama_get_logits_ith(c, 18), n_vocab) && finite_row(llama_get_logits_ith(c, 19), n_vocab));
    CHECK(llama_get_logits_ith(c, -1) == llama_get_logits_ith(c, 19));
    CHECK(llama_get_logits(c) == llama_get_logits_ith(c, 18));
    ds_log_mark();
    CHECK(llama_get_logits_ith(c, 0) == NULL && ds_log_has("llama_get_logits_ith: invalid logits id 0, reason: batch.logits[0] != true"));
    CHECK(llama_get_logits_ith(c, 1000) == NULL && llama_get_logits_ith(c, -3) == NULL);
    CHECK(llama_memory_seq_pos_min(mem, 0) == 0 && llama_memory_seq_pos_max(mem, 0) == 9);

    /* Memory operations. */
    llama_memory_seq_cp(mem, 0, 1, -1, -1);
    CHECK(llama_memory_seq_pos_max(mem, 1) == 9);
    CHECK(llama_memory_seq_rm(mem, 1, 5, -1));
    CHECK(llama_memory_seq_pos_max(mem, 1) == 4);
    llama_memory_seq_add(mem, 0, 0, -1, 3);
    CHECK(llama_memory_seq_pos_min(mem, 0) == 3 && llama_memory_seq_pos_max(mem, 0) == 12);
    llama_memory_seq_div(mem, 0, 0, -1, 2);
    CHECK(llama_memory_seq_pos_min(mem, 0) == 1 && llama_memory_seq_pos_max(mem, 0) == 6);
    llama_memory_seq_keep(mem, 1);
    CHECK(llama_memory_seq_pos_max(mem, 1) == 4);
    llama_memory_clear(mem, true);
    CHECK(llama_memory_seq_pos_max(mem, 0) == -1 && llama_memory_seq_pos_max(mem, 1) == -1);

    /* Single-token decode with automatic positions. */
    llama_token t = 5;
    CHECK(llama_decode(c, llama_batch_get_one(&t, 1)) == 0);
    CHECK(llama_decode(c, llama_batch_get_one(&t, 1)) == 0);
    CHECK(llama_memory_seq_pos_max(mem, 0) == 1);
    CHECK(finite_row(llama_get_logits_ith(c, -1), n_vocab));

    /* Invalid batches: -1 with the reason logged, and the cache unchanged. */
    b.n_tokens = 0; add(&b, n_vocab, 2, 0, 1);
    char reason[96];
    snprintf(reason, sizeof reason, "llama_decode: invalid token[0] = %d (n_vocab = %d)", n_vocab, n_vocab);
    ds_log_mark(); CHECK(llama_decode(c, b) == -1 && ds_log_has(reason));
    b.n_tokens = 0; add(&b, -5, 2, 0, 1);
    ds_log_mark(); CHECK(llama_decode(c, b) == -1 && ds_log_has("llama_decode: invalid token[0] = -5"));
    b.n_tokens = 0; add(&b, 1, 2, 7, 1);
    ds_log_mark(); CHECK(llama_decode(c, b) == -1 && ds_log_has("llama_decode: invalid seq_id[0] = 7 >= n_seq_max (2)"));
    b.n_tokens = 0; add(&b, 1, 9, 0, 1);
    ds_log_mark(); CHECK(llama_decode(c, b) == -1 && ds_log_has("inconsistent sequence positions"));
    b.n_tokens = 0;
    ds_log_mark(); CHECK(llama_decode(c, b) == -1 && ds_log_has("llama_decode: n_tokens = 0 (must be positive)"));
    b.n_tokens = 0; for (int i = 0; i < 33 && i < 32; i++) add(&b, 1, 2 + i, 0, 0);
    b.n_tokens = 40;
    ds_log_mark(); CHECK(llama_decode(c, b) == -1 && ds_log_has("llama_decode: n_tokens = 40 exceeds n_batch = 32"));
    CHECK(llama_memory_seq_pos_max(mem, 0) == 1);
    CHECK(llama_decode(NULL, b) == -1);
    CHECK(llama_memory_seq_rm(mem, 9, 0, -1) == false);
    llama_memory_seq_cp(mem, 0, 9, -1, -1);
    CHECK(llama_n_ctx(NULL) == 0 && llama_get_memory(NULL) == NULL && llama_get_logits_ith(NULL, 0) == NULL);
    CHECK(llama_model_n_embd(NULL) == -1 && llama_init_from_model(NULL, cp) == NULL);

    /* Unsupported parameters fail with NULL, never silently. */
    struct llama_context_params bad = cp;
    bad.type_k = GGML_TYPE_Q4_K; /* not a KV cache type (Q4_0 is: tests/kv_types.rs) */
    ds_log_mark(); CHECK(llama_init_from_model(m, bad) == NULL && ds_log_has("type_k = 12 is not a KV cache type"));
    bad = cp; bad.type_v = GGML_TYPE_Q8_0; bad.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    ds_log_mark(); CHECK(llama_init_from_model(m, bad) == NULL && ds_log_has("quantized V cache (q8_0) requires flash_attn to be enabled"));
    bad = cp; bad.n_seq_max = 100000;
    CHECK(llama_init_from_model(m, bad) == NULL);
    bad = cp; bad.n_batch = 0; bad.n_ubatch = 0;
    CHECK(llama_init_from_model(m, bad) == NULL);

    /* Fill a sequence's cells: the next decode reports no slot (1). */
    llama_memory_clear(mem, false);
    struct llama_context_params small = cp;
    small.n_ctx = 256; small.n_seq_max = 1; small.n_batch = 256; small.n_ubatch = 256;
    struct llama_context *c2 = llama_init_from_model(m, small);
    CHECK(c2 != NULL);
    struct llama_batch big = llama_batch_init(256, 0, 1);
    for (int i = 0; i < 256; i++) add(&big, i % n_vocab, i, 0, i == 255);
    CHECK(llama_decode(c2, big) == 0);
    big.n_tokens = 0; add(&big, 1, 256, 0, 1);
    CHECK(llama_decode(c2, big) == 1);
    CHECK(llama_memory_seq_pos_max(llama_get_memory(c2), 0) == 255);
    llama_batch_free(big);
    llama_free(c2);

    /* No backend sampler can be attached; the sampled-result queries answer "nothing sampled"
     * as upstream does without one, silently (upstream's common library asks every token). */
    int logged_before_sampled = ds_log_count();
    CHECK(llama_set_sampler(c, 0, NULL));
    CHECK(llama_get_sampled_token_ith(c, -1) == LLAMA_TOKEN_NULL && llama_get_sampled_probs_ith(c, -1) == NULL);
    CHECK(llama_get_sampled_logits_ith(c, -1) == NULL && llama_get_sampled_candidates_ith(c, -1) == NULL);
    CHECK(llama_get_sampled_probs_count_ith(c, -1) == 0 && llama_get_sampled_candidates_count_ith(c, -1) == 0);
    CHECK(llama_get_sampled_logits_count_ith(c, -1) == (uint32_t) n_vocab);
    CHECK(ds_log_count() == logged_before_sampled);
    struct llama_sampler *greedy = llama_sampler_init_greedy();
    CHECK(!llama_set_sampler(c, 0, greedy) && ds_log_count() == logged_before_sampled + 1);
    /* Backend samplers in the context parameters (llama-server --backend-sampling): the context
     * is created, each sampler with upstream's "cannot be offloaded" warning, and the caller
     * samples from the logits; a sampler that is not a chain is refused, as upstream. */
    struct llama_sampler *chain = llama_sampler_chain_init(llama_sampler_chain_default_params());
    llama_sampler_chain_add(chain, llama_sampler_init_greedy());
    struct llama_sampler_seq_config cfg = {0, chain};
    struct llama_context_params sp = cp;
    sp.samplers = &cfg; sp.n_samplers = 1;
    ds_log_mark();
    struct llama_context *cs = llama_init_from_model(m, sp);
    CHECK(cs != NULL && ds_log_has("cannot be offloaded to the backend"));
    struct llama_batch one = llama_batch_init(1, 0, 1);
    add(&one, 1, 0, 0, 1);
    CHECK(llama_decode(cs, one) == 0 && llama_get_sampled_token_ith(cs, -1) == LLAMA_TOKEN_NULL);
    CHECK(llama_sampler_sample(chain, cs, -1) == llama_sampler_sample(greedy, cs, -1));
    llama_batch_free(one);
    llama_free(cs);
    cfg.sampler = greedy;
    ds_log_mark(); CHECK(llama_init_from_model(m, sp) == NULL && ds_log_has("must be of type llama_sampler_chain"));
    llama_sampler_free(chain);
    llama_sampler_free(greedy);

    /* Perf times are on ggml_time_us's clock, so callers can compute totals as upstream's do. */
    struct llama_perf_context_data perf = llama_perf_context(c);
    double now_ms = 1e-3 * (double) ggml_time_us();
    CHECK(perf.t_start_ms <= now_ms && now_ms - perf.t_start_ms < 600000.0);

    /* The one panic a test provokes on purpose (log_guard.h aborts on any other). */
    int state = 0, panics_before = ds_log_expect_internal(1);
    struct llama_sampler *custom = llama_sampler_init(&no_clone_iface, &state);
    CHECK(custom != NULL && llama_sampler_clone(custom) == NULL);
    CHECK(ds_log_expect_internal(0) == panics_before + 1);
    llama_sampler_free(custom);

    llama_batch_free(b);
    llama_free(c);
    llama_model_free(m);
    llama_free(NULL);
    llama_model_free(NULL);
    llama_backend_free();
    if (failures) return 1;
    printf("walkthrough: ok\n");
    return 0;
}
