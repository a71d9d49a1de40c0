/* One benchmark run over the llama.h API; bench/run.sh builds it against libdeepseek and against
 * upstream libllama.so and alternates fresh processes of the two.
 * Usage: suite MODEL THREADS [N_PROMPT=512] [N_GEN=128] [N_SEQ=8] [N_BATCH_STEPS=32]
 * In one process: load the model (default params, so mmap), one short warm-up decode, then
 *   pp:    one llama_decode of N_PROMPT tokens into an empty cache;
 *   tg:    N_GEN single-token decodes, each feeding back the argmax of the last logits;
 *   batch: N_SEQ sequences decoded together, one token each per llama_decode, N_BATCH_STEPS
 *          steps after a first batch holding each sequence's prompt token;
 * and prints one line of key=value fields (tokens/s, peak RSS, llama_model_size, CPU time per
 * token: on a shared machine CPU time per token depends much less on what else runs). */
/* clock_gettime, getrusage and pthread barriers under -std=c11 */
#define _POSIX_C_SOURCE 200809L
#include "llama.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static double wall_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static double cpu_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void quiet(enum ggml_log_level level, const char *text, void *user) {
    (void)level; (void)text; (void)user;
}

/* ik_llama.cpp keeps llama.cpp's earlier API for these three (clearing the cache, a batch of
 * one sequence with its first position given, freeing a model): bench/run.sh defines
 * SUITE_OLD_API when it builds against ik_llama.cpp's headers (and main then asks it to repack
 * the weights at load). */
static void clear_cache(struct llama_context *ctx) {
#ifdef SUITE_OLD_API
    llama_kv_cache_clear(ctx);
#else
    llama_memory_clear(llama_get_memory(ctx), true);
#endif
}

static struct llama_batch batch_of(llama_token *tokens, int n, int first_pos) {
#ifdef SUITE_OLD_API
    return llama_batch_get_one(tokens, n, first_pos, 0);
#else
    (void)first_pos;
    return llama_batch_get_one(tokens, n);
#endif
}

static void free_model(struct llama_model *model) {
#ifdef SUITE_OLD_API
    llama_free_model(model);
#else
    llama_model_free(model);
#endif
}

static int parse_count(const char *text, const char *name, int max) {
    char *end;
    long value = strtol(text, &end, 10);
    if (*text == '\0' || *end != '\0' || value < 1 || value > max) {
        fprintf(stderr, "%s must be a whole number from 1 to %d, not '%s'\n", name, max, text);
        exit(2);
    }
    return (int)value;
}

static llama_token argmax(const float *logits, int n_vocab) {
    int best = 0;
    for (int j = 1; j < n_vocab; j++) if (logits[j] > logits[best]) best = j;
    return best;
}

/* Both libraries pad each sequence's share of the cache to a multiple of 256 cells. */
static uint32_t round_up_256(int n) {
    return (uint32_t)((n + 255) / 256 * 256);
}

/* The kernels that run in this process: deepseek names its level in llama_print_system_info
 * ("deepseek kernels = Avx512"; the CPU's best, capped by DEEPSEEK_KERNELS); other engines run
 * ggml's. */
static void kernels_of(char *out, size_t n) {
    const char *info = llama_print_system_info(), *key = "deepseek kernels = ";
    const char *k = info ? strstr(info, key) : NULL;
    if (k) snprintf(out, n, "%.*s", (int) strcspn(k + strlen(key), " |"), k + strlen(key));
    else snprintf(out, n, "ggml");
}

int main(int argc, char **argv) {
    if (argc < 3 || argc > 7) {
        fprintf(stderr, "usage: %s MODEL THREADS [N_PROMPT=512] [N_GEN=128] [N_SEQ=8] [N_BATCH_STEPS=32]\n", argv[0]);
        return 2;
    }
    /* n_batch = n_ubatch = 512, so the prompt goes to llama_decode in one call */
    const int n_batch = 512;
    const int n_threads = parse_count(argv[2], "THREADS", 512);
    const int n_prompt = argc > 3 ? parse_count(argv[3], "N_PROMPT", n_batch) : 512;
    const int n_gen = argc > 4 ? parse_count(argv[4], "N_GEN", 1 << 20) : 128;
    const int n_seq = argc > 5 ? parse_count(argv[5], "N_SEQ", n_batch) : 8;
    const int n_batch_steps = argc > 6 ? parse_count(argv[6], "N_BATCH_STEPS", 1 << 20) : 32;

    llama_log_set(quiet, NULL);
    llama_backend_init();
    double t0 = wall_seconds();
    struct llama_model_params mp = llama_model_default_params();
#ifdef SUITE_OLD_API
    /* ik_llama.cpp's fastest CPU configuration: weights repacked at load (its -rtr 1) */
    mp.repack_tensors = true;
#endif
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    double load_s = wall_seconds() - t0;
    if (!model) { fprintf(stderr, "loading %s failed\n", argv[1]); return 1; }

    /* Without kv_unified (the default) every sequence owns n_ctx / n_seq_max cells, so each
     * share must hold the longest single sequence: the prompt, N_GEN + 1 generated tokens, or
     * the batched run's 1 + N_BATCH_STEPS. */
    int longest = n_prompt;
    if (n_gen + 1 > longest) longest = n_gen + 1;
    if (n_batch_steps + 1 > longest) longest = n_batch_steps + 1;
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = round_up_256(longest) * (uint32_t)n_seq;
    cp.n_seq_max = (uint32_t)n_seq;
    cp.n_batch = cp.n_ubatch = (uint32_t)n_batch;
    cp.n_threads = cp.n_threads_batch = n_threads;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "creating a context (n_ctx %u, n_seq_max %d) failed\n", cp.n_ctx, n_seq); return 1; }

    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    if (n_vocab < 11) { fprintf(stderr, "vocabulary of %d tokens is too small\n", n_vocab); return 1; }
    /* arbitrary valid ids, spread over the (most common) low part of the vocabulary */
    llama_token *prompt = malloc(sizeof(llama_token) * n_prompt);
    if (!prompt) { fprintf(stderr, "out of memory\n"); return 1; }
    for (int i = 0; i < n_prompt; i++) prompt[i] = 10 + (i * 7919 + 13) % (n_vocab < 30000 ? n_vocab - 10 : 30000);

    int n_warmup = n_prompt < 16 ? n_prompt : 16;
    if (llama_decode(ctx, batch_of(prompt, n_warmup, 0))) { fprintf(stderr, "warm-up decode failed\n"); return 1; }

    clear_cache(ctx);
    double t = wall_seconds(), c = cpu_seconds();
    if (llama_decode(ctx, batch_of(prompt, n_prompt, 0))) { fprintf(stderr, "prompt decode failed\n"); return 1; }
    double pp_s = wall_seconds() - t, pp_cpu_s = cpu_seconds() - c;

    clear_cache(ctx);
    llama_token token = prompt[0];
    t = wall_seconds();
    c = cpu_seconds();
    for (int i = 0; i < n_gen; i++) {
        if (llama_decode(ctx, batch_of(&token, 1, i))) { fprintf(stderr, "generation decode %d failed\n", i); return 1; }
        const float *logits = llama_get_logits_ith(ctx, -1);
        if (!logits) { fprintf(stderr, "no logits after generation decode %d\n", i); return 1; }
        token = argmax(logits, n_vocab);
    }
    double tg_s = wall_seconds() - t, tg_cpu_s = cpu_seconds() - c;

#ifdef SUITE_OLD_API
    /* ik_llama.cpp's flash attention (its default) aborts on the batched decode of several
     * sequences (GGML_ASSERT(S > 0) in iqk_fa_templates.h): that part gets a context without it */
    llama_free(ctx);
    cp.flash_attn = false;
    ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "creating the batched-decode context failed\n"); return 1; }
#endif
    clear_cache(ctx);
    /* every token belongs to exactly one sequence, so one sequence id per token */
    struct llama_batch batch = llama_batch_init(n_seq, 0, 1);
    if (!batch.token) { fprintf(stderr, "llama_batch_init(%d) failed\n", n_seq); return 1; }
    batch.n_tokens = n_seq;
    for (int i = 0; i < n_seq; i++) {
        batch.token[i] = prompt[i % n_prompt];
        batch.pos[i] = 0;
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = i;
        batch.logits[i] = 1;
    }
    if (llama_decode(ctx, batch)) { fprintf(stderr, "batched prompt decode failed\n"); return 1; }
    t = wall_seconds();
    for (int step = 0; step < n_batch_steps; step++) {
        for (int i = 0; i < n_seq; i++) {
            const float *logits = llama_get_logits_ith(ctx, i);
            if (!logits) { fprintf(stderr, "no logits for sequence %d before batched step %d\n", i, step); return 1; }
            batch.token[i] = argmax(logits, n_vocab);
            batch.pos[i] = step + 1;
        }
        if (llama_decode(ctx, batch)) { fprintf(stderr, "batched decode step %d failed\n", step); return 1; }
    }
    double batch_s = wall_seconds() - t;

    struct rusage usage;
    if (getrusage(RUSAGE_SELF, &usage)) { perror("getrusage"); return 1; }
    /* ru_maxrss is in KiB on Linux */
    char kernels[64];
    kernels_of(kernels, sizeof kernels);
    printf("load_s=%.3f pp=%.2f tg=%.2f batch=%.2f rss_mib=%.1f model_bytes=%llu threads=%d "
           "n_prompt=%d n_gen=%d n_seq=%d n_batch_steps=%d pp_cpu_ms_per_token=%.3f tg_cpu_ms_per_token=%.3f kernels=%s\n",
           load_s, n_prompt / pp_s, n_gen / tg_s, (double)n_seq * n_batch_steps / batch_s, usage.ru_maxrss / 1024.0,
           (unsigned long long)llama_model_size(model), n_threads, n_prompt, n_gen, n_seq, n_batch_steps,
           1e3 * pp_cpu_s / n_prompt, 1e3 * tg_cpu_s / n_gen, kernels);

    llama_batch_free(batch);
    free(prompt);
    llama_free(ctx);
    free_model(model);
    llama_backend_free();
    return 0;
}
