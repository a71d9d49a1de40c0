// Grammar sampler apply time per token: deepseek's libdeepseek.so against llama.cpp's
// libllama.so in one process (both dlopen'ed with RTLD_LOCAL), on the same states: each step
// fills the same pseudo-random logits (as tests/data/grammar/gen/trace.c), times `apply` in each
// library, checks that both leave the same allowed set, and accepts the best allowed token in
// both. Prints per grammar the median and mean µs per apply, the ratio, and the step count.
// usage: grammar OURS.so UPSTREAM.so VOCAB.gguf STEPS GRAMMAR.gbnf...
#define _POSIX_C_SOURCE 200809L
#include "llama.h"

#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct api {
    void (*log_set)(ggml_log_callback, void *);
    struct llama_model_params (*model_default_params)(void);
    struct llama_model * (*load)(const char *, struct llama_model_params);
    void (*model_free)(struct llama_model *);
    const struct llama_vocab * (*get_vocab)(const struct llama_model *);
    int32_t (*n_tokens)(const struct llama_vocab *);
    bool (*is_eog)(const struct llama_vocab *, llama_token);
    struct llama_sampler * (*init_grammar)(const struct llama_vocab *, const char *, const char *);
    void (*apply)(struct llama_sampler *, llama_token_data_array *);
    void (*accept)(struct llama_sampler *, llama_token);
    void (*free)(struct llama_sampler *);
    struct llama_model * model;
    const struct llama_vocab * vocab;
};

static void quiet(enum ggml_log_level level, const char * text, void * user) {
    (void) level; (void) text; (void) user;
}

static void * sym(void * h, const char * name) {
    void * p = dlsym(h, name);
    if (!p) {
        fprintf(stderr, "missing %s\n", name);
        exit(1);
    }
    return p;
}

static void load_api(struct api * a, const char * lib, const char * vocab_path) {
    void * h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "dlopen %s: %s\n", lib, dlerror());
        exit(1);
    }
    *(void **) &a->log_set = sym(h, "llama_log_set");
    *(void **) &a->model_default_params = sym(h, "llama_model_default_params");
    *(void **) &a->load = sym(h, "llama_model_load_from_file");
    *(void **) &a->model_free = sym(h, "llama_model_free");
    *(void **) &a->get_vocab = sym(h, "llama_model_get_vocab");
    *(void **) &a->n_tokens = sym(h, "llama_vocab_n_tokens");
    *(void **) &a->is_eog = sym(h, "llama_vocab_is_eog");
    *(void **) &a->init_grammar = sym(h, "llama_sampler_init_grammar");
    *(void **) &a->apply = sym(h, "llama_sampler_apply");
    *(void **) &a->accept = sym(h, "llama_sampler_accept");
    *(void **) &a->free = sym(h, "llama_sampler_free");
    a->log_set(quiet, NULL);
    struct llama_model_params mp = a->model_default_params();
    mp.vocab_only = true;
    a->model = a->load(vocab_path, mp);
    if (!a->model) {
        fprintf(stderr, "%s cannot load %s\n", lib, vocab_path);
        exit(1);
    }
    a->vocab = a->get_vocab(a->model);
}

static uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void fill(llama_token_data * d, int n, uint64_t seed, int step) {
    for (int t = 0; t < n; t++) {
        uint64_t x = splitmix64(seed ^ splitmix64(((uint64_t) step << 32) | (uint32_t) t));
        d[t].id = t;
        d[t].logit = (float) (x >> 40) * (1.0f / 16777216.0f) * 10.0f;
        d[t].p = 0.0f;
    }
}

// hash and count of the allowed set; best allowed token
static uint64_t summarize(const llama_token_data * d, int n, int * count, int * best) {
    uint64_t h = 0xcbf29ce484222325ull;
    *count = 0;
    *best = -1;
    for (int i = 0; i < n; i++) {
        if (d[i].logit == -INFINITY) {
            continue;
        }
        (*count)++;
        for (int k = 0; k < 4; k++) {
            h = (h ^ (uint8_t) (d[i].id >> (8 * k))) * 0x100000001b3ull;
        }
        if (*best < 0 || d[i].logit > d[*best].logit) {
            *best = i;
        }
    }
    return h;
}

static int cmp_double(const void * a, const void * b) {
    double x = *(const double *) a, y = *(const double *) b;
    return (x > y) - (x < y);
}

static char * read_file(const char * path) {
    FILE * f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", path);
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char * b = malloc((size_t) n + 1);
    if (fread(b, 1, (size_t) n, f) != (size_t) n) {
        exit(1);
    }
    b[n] = 0;
    fclose(f);
    return b;
}

int main(int argc, char ** argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: %s OURS.so UPSTREAM.so VOCAB.gguf STEPS GRAMMAR.gbnf...\n", argv[0]);
        return 2;
    }
    struct api lib[2];
    load_api(&lib[0], argv[1], argv[3]);
    load_api(&lib[1], argv[2], argv[3]);
    const int n = lib[0].n_tokens(lib[0].vocab);
    const int steps = atoi(argv[4]);
    llama_token_data * d = malloc(sizeof(*d) * (size_t) n);
    double * t[2] = { malloc(sizeof(double) * (size_t) steps), malloc(sizeof(double) * (size_t) steps) };
    printf("%-28s %6s %12s %12s %12s %12s %8s %s\n", "grammar", "steps", "ours med µs", "ours mean", "llama med µs", "llama mean", "ratio", "allowed/step (mean)");
    int mismatches = 0;
    for (int g = 5; g < argc; g++) {
        char * text = read_file(argv[g]);
        struct llama_sampler * s[2];
        double first[2];
        for (int k = 0; k < 2; k++) {
            s[k] = lib[k].init_grammar(lib[k].vocab, text, "root");
            if (!s[k]) {
                fprintf(stderr, "%s: init failed\n", argv[g]);
                return 1;
            }
        }
        int done = 0;
        double allowed_sum = 0;
        for (int step = 0; step < steps; step++) {
            uint64_t h[2];
            int count[2], best[2];
            for (int k = 0; k < 2; k++) {
                fill(d, n, 42, step);
                llama_token_data_array arr = { d, (size_t) n, -1, false };
                double t0 = now_us();
                lib[k].apply(s[k], &arr);
                double dt = now_us() - t0;
                if (step == 0) {
                    first[k] = dt;
                }
                t[k][step] = dt;
                if (getenv("GRAMMAR_BENCH_STEPS")) {
                    fprintf(stderr, "%s step %d lib %d: %.0f µs\n", argv[g], step, k, dt);
                }
                h[k] = summarize(d, n, &count[k], &best[k]);
            }
            if (h[0] != h[1] || count[0] != count[1]) {
                fprintf(stderr, "%s step %d: allowed sets differ (%d vs %d)\n", argv[g], step, count[0], count[1]);
                mismatches++;
                break;
            }
            done++;
            allowed_sum += count[0];
            if (best[0] < 0) {
                break;
            }
            int tok = d[best[0]].id;
            if (lib[0].is_eog(lib[0].vocab, tok)) {
                break;
            }
            lib[0].accept(s[0], tok);
            lib[1].accept(s[1], tok);
        }
        double med[2], mean[2];
        for (int k = 0; k < 2; k++) {
            // the first apply of ours includes building the vocabulary's trie: reported apart
            int from = done > 1 ? 1 : 0;
            double sum = 0;
            for (int i = from; i < done; i++) {
                sum += t[k][i];
            }
            mean[k] = sum / (done - from);
            qsort(t[k] + from, (size_t) (done - from), sizeof(double), cmp_double);
            med[k] = t[k][from + (done - from) / 2];
        }
        const char * name = strrchr(argv[g], '/') ? strrchr(argv[g], '/') + 1 : argv[g];
        printf("%-28s %6d %12.1f %12.1f %12.1f %12.1f %7.1fx %.0f   (first apply: ours %.0f µs, llama.cpp %.0f µs)\n", name, done, med[0], mean[0], med[1], mean[1], med[1] / med[0], allowed_sum / done, first[0], first[1]);
        fflush(stdout);
        lib[0].free(s[0]);
        lib[1].free(s[1]);
        free(text);
    }
    lib[0].model_free(lib[0].model);
    lib[1].model_free(lib[1].model);
    if (mismatches) {
        printf("allowed sets differ in %d grammars\n", mismatches);
        return 1;
    }
    printf("allowed sets identical at every step\n");
    return 0;
}
