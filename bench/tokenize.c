#define _POSIX_C_SOURCE 199309L
/* Tokenizer throughput over the llama.h API: llama_tokenize on a text file, repeated, in MB/s.
 * Built twice by bench/tokenize.sh: against include/llama.h + libdeepseek, and against
 * upstream's llama.h + libllama.so; the two runs alternate in one invocation.
 * usage: tokenize MODEL TEXT_FILE SECONDS */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "llama.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void quiet(enum ggml_log_level level, const char *text, void *ud) { (void) level; (void) text; (void) ud; }

int main(int argc, char **argv) {
    if (argc < 4) { fprintf(stderr, "usage: tokenize MODEL TEXT SECONDS\n"); return 2; }
    llama_log_set(quiet, NULL);
    FILE *f = fopen(argv[2], "rb");
    if (!f) { perror(argv[2]); return 1; }
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc(len);
    if (fread(text, 1, len, f) != (size_t) len) return 1;
    fclose(f);
    struct llama_model_params mp = llama_model_default_params();
    mp.vocab_only = true;
    struct llama_model *m = llama_model_load_from_file(argv[1], mp);
    if (!m) { mp.vocab_only = false; m = llama_model_load_from_file(argv[1], mp); }
    if (!m) { fprintf(stderr, "cannot load %s\n", argv[1]); return 1; }
    const struct llama_vocab *v = llama_model_get_vocab(m);
    int cap = (int) len + 16;
    llama_token *toks = malloc(sizeof(llama_token) * cap);
    double seconds = atof(argv[3]), t0 = now(), bytes = 0;
    int n = 0, runs = 0;
    while (now() - t0 < seconds) {
        n = llama_tokenize(v, text, (int) len, toks, cap, false, false);
        if (n < 0) { fprintf(stderr, "tokenize failed\n"); return 1; }
        bytes += len;
        runs++;
    }
    double dt = now() - t0;
    printf("%.2f MB/s (%d tokens, %d runs)\n", bytes / dt / 1e6, n, runs);
    free(toks);
    free(text);
    llama_model_free(m);
    return 0;
}
