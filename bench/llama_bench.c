/* pp/tg speed over the llama.h API: build against libdeepseek or upstream libllama.
 * Usage: llama_bench MODEL.gguf [THREADS] [N_PROMPT] [N_GEN] [REPS]
 * pp: one llama_decode of N_PROMPT tokens into an empty cache; tg: N_GEN single-token decodes.
 * Prints the median tokens/s over REPS repetitions after one warm-up, and the median CPU time
 * (all threads) per token: on a shared machine wall-clock speed depends on what else runs,
 * CPU time per token much less so. */
#include "llama.h"
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static double cpu(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void quiet(enum ggml_log_level level, const char *text, void *user) {
    (void)level; (void)text; (void)user;
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: %s MODEL [THREADS] [N_PROMPT] [N_GEN] [REPS]\n", argv[0]); return 2; }
    int nt = argc > 2 ? atoi(argv[2]) : 2, np = argc > 3 ? atoi(argv[3]) : 64;
    int ng = argc > 4 ? atoi(argv[4]) : 32, reps = argc > 5 ? atoi(argv[5]) : 3;
    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    double t0 = now();
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) { fprintf(stderr, "load failed\n"); return 1; }
    double t_load = now() - t0;
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 1024; cp.n_batch = 512; cp.n_ubatch = 512; cp.n_threads = nt; cp.n_threads_batch = nt;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "context failed\n"); return 1; }
    int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    llama_token *prompt = malloc(sizeof(llama_token) * np);
    for (int i = 0; i < np; i++) prompt[i] = 10 + (i * 7919 + 13) % (n_vocab < 30000 ? n_vocab - 10 : 30000);
    double *pp = malloc(sizeof(double) * reps), *tg = malloc(sizeof(double) * reps);
    double *pp_cpu = malloc(sizeof(double) * reps), *tg_cpu = malloc(sizeof(double) * reps);
    for (int rep = 0; rep <= reps; rep++) {
        llama_memory_clear(llama_get_memory(ctx), true);
        double t = now(), c = cpu();
        if (llama_decode(ctx, llama_batch_get_one(prompt, np))) { fprintf(stderr, "decode failed\n"); return 1; }
        double dpp = now() - t, cpp = cpu() - c;
        llama_memory_clear(llama_get_memory(ctx), true);
        llama_token tok = 42;
        t = now();
        c = cpu();
        for (int i = 0; i < ng; i++) {
            if (llama_decode(ctx, llama_batch_get_one(&tok, 1))) { fprintf(stderr, "decode failed\n"); return 1; }
            const float *l = llama_get_logits_ith(ctx, -1);
            int best = 0;
            for (int j = 1; j < n_vocab; j++) if (l[j] > l[best]) best = j;
            tok = best;
        }
        double dtg = now() - t, ctg = cpu() - c;
        if (rep > 0) {
            pp[rep - 1] = np / dpp; tg[rep - 1] = ng / dtg;
            pp_cpu[rep - 1] = 1e3 * cpp / np; tg_cpu[rep - 1] = 1e3 * ctg / ng;
        }
    }
    qsort(pp, reps, sizeof(double), cmp);
    qsort(tg, reps, sizeof(double), cmp);
    qsort(pp_cpu, reps, sizeof(double), cmp);
    qsort(tg_cpu, reps, sizeof(double), cmp);
    printf("load %.2f s  pp%d %7.2f tok/s  tg%d %6.2f tok/s  cpu ms/token pp %6.2f tg %6.2f  (t=%d, median of %d)\n", t_load, np, pp[reps / 2], ng, tg[reps / 2],
           pp_cpu[reps / 2], tg_cpu[reps / 2], nt, reps);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    free(prompt); free(pp); free(tg); free(pp_cpu); free(tg_cpu);
    return 0;
}
