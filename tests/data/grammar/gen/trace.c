// Grammar-sampler traces over llama.h, built against upstream's libllama.so to make the
// reference (tests/data/grammar/traces/*.txt, see README.md) and against libdeepseek.so by
// tests/grammar_trace.rs, which compares the two outputs line by line.
//
// usage: trace VOCAB.gguf CASES_FILE DATA_DIR          (sampling traces)
//        trace VOCAB.gguf --parse CORPUS_FILE          (accept/reject of each grammar)
//
// Per step every token gets a pseudo-random logit (splitmix64 of seed, step and token), the
// grammar sampler filters, and the best allowed token (lowest id on ties) is accepted (or the
// case's next prefix token while a prefix lasts). Each step prints the allowed count, an FNV-1a
// hash of the allowed ids (ascending) and the chosen token; small allowed sets are printed whole.
#define _POSIX_C_SOURCE 200809L
#include "llama.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static float logit_of(uint64_t seed, int step, int token) {
    uint64_t x = splitmix64(seed ^ splitmix64(((uint64_t) step << 32) | (uint32_t) token));
    return (float) (x >> 40) * (1.0f / 16777216.0f) * 10.0f;
}

static char * read_file(const char * path) {
    FILE * f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", path);
        exit(2);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char * buf = malloc((size_t) n + 1);
    if (fread(buf, 1, (size_t) n, f) != (size_t) n) {
        exit(2);
    }
    buf[n] = 0;
    fclose(f);
    return buf;
}

// C escapes \n \t \\ \xHH in place.
static void unescape(char * s) {
    char * w = s;
    for (char * r = s; *r; r++) {
        if (*r == '\\' && r[1]) {
            r++;
            if (*r == 'n') { *w++ = '\n'; }
            else if (*r == 't') { *w++ = '\t'; }
            else if (*r == 'x' && r[1] && r[2]) { char h[3] = { r[1], r[2], 0 }; *w++ = (char) strtol(h, NULL, 16); r += 2; }
            else { *w++ = *r; }
        } else {
            *w++ = *r;
        }
    }
    *w = 0;
}

#define MAX_ITEMS 16

struct test_case {
    char name[128];
    char * grammar;
    char root[64];
    char mode[16]; // plain, words, patterns
    char * triggers[MAX_ITEMS];
    int n_triggers;
    llama_token trigger_tokens[MAX_ITEMS];
    int n_trigger_tokens;
    char * prefix;
    int steps;
    uint64_t seed;
    int clone_at;
};

static void run_case(const struct llama_vocab * vocab, struct test_case * c) {
    printf("case %s\n", c->name);
    struct llama_sampler * s;
    if (strcmp(c->mode, "plain") == 0) {
        s = llama_sampler_init_grammar(vocab, c->grammar, c->root);
    } else if (strcmp(c->mode, "words") == 0) {
        s = llama_sampler_init_grammar_lazy(vocab, c->grammar, c->root, (const char **) c->triggers, (size_t) c->n_triggers, c->trigger_tokens, (size_t) c->n_trigger_tokens);
    } else {
        s = llama_sampler_init_grammar_lazy_patterns(vocab, c->grammar, c->root, (const char **) c->triggers, (size_t) c->n_triggers, c->trigger_tokens, (size_t) c->n_trigger_tokens);
    }
    if (!s) {
        printf("init fail\n");
        return;
    }
    printf("init ok %s\n", llama_sampler_name(s));
    const int n_vocab = llama_vocab_n_tokens(vocab);
    llama_token prefix[4096];
    int n_prefix = 0;
    if (c->prefix) {
        n_prefix = llama_tokenize(vocab, c->prefix, (int32_t) strlen(c->prefix), prefix, 4096, false, true);
        printf("prefix");
        for (int i = 0; i < n_prefix; i++) {
            printf(" %d", prefix[i]);
        }
        printf("\n");
    }
    llama_token_data * data = malloc(sizeof(llama_token_data) * (size_t) n_vocab);
    int * allowed = malloc(sizeof(int) * (size_t) n_vocab);
    for (int step = 0; step < c->steps; step++) {
        if (step == c->clone_at) {
            struct llama_sampler * copy = llama_sampler_clone(s);
            llama_sampler_free(s);
            s = copy;
            printf("cloned\n");
        }
        for (int t = 0; t < n_vocab; t++) {
            data[t].id = t;
            data[t].logit = logit_of(c->seed, step, t);
            data[t].p = 0.0f;
        }
        llama_token_data_array arr = { data, (size_t) n_vocab, -1, false };
        llama_sampler_apply(s, &arr);
        int n_allowed = 0;
        uint64_t h = 0xcbf29ce484222325ull;
        int best = -1;
        for (size_t i = 0; i < arr.size; i++) {
            if (arr.data[i].logit == -INFINITY) {
                continue;
            }
            int id = arr.data[i].id;
            allowed[n_allowed++] = id;
            for (int k = 0; k < 4; k++) {
                h = (h ^ (uint8_t) (id >> (8 * k))) * 0x100000001b3ull;
            }
            if (best < 0 || arr.data[i].logit > arr.data[best].logit) {
                best = (int) i;
            }
        }
        // Then a few candidates (as llama.cpp's common sampler checks its pick): the first 8
        // allowed tokens of the full set, 32 spread ids and the last 8 ids.
        llama_token_data small[48];
        for (int k = 0; k < 48; k++) {
            int id = k < 8 ? (k < n_allowed ? allowed[k] : k) : k < 40 ? (int) (((uint64_t) step * 7919u + (uint64_t) k * 104729u) % (uint64_t) n_vocab) : n_vocab - 48 + k;
            small[k].id = id;
            small[k].logit = logit_of(c->seed, step, id);
            small[k].p = 0.0f;
        }
        llama_token_data_array few = { small, 48, -1, false };
        llama_sampler_apply(s, &few);
        int n_few = 0;
        uint64_t h_few = 0xcbf29ce484222325ull;
        for (size_t i = 0; i < few.size; i++) {
            if (few.data[i].logit != -INFINITY) {
                n_few++;
                h_few = (h_few ^ (uint64_t) (uint32_t) few.data[i].id) * 0x100000001b3ull;
            }
        }
        int chosen = step < n_prefix ? prefix[step] : (best >= 0 ? arr.data[best].id : -1);
        printf("step %d %d %016llx %d few %d %016llx", step, n_allowed, (unsigned long long) h, chosen, n_few, (unsigned long long) h_few);
        if (n_allowed <= 256) {
            printf(" :");
            for (int i = 0; i < n_allowed; i++) {
                printf(" %d", allowed[i]);
            }
        }
        printf("\n");
        if (chosen < 0) {
            printf("end none\n");
            break;
        }
        if (step + 1 == c->steps) {
            break; // the last choice is not accepted (a case may stop where upstream would throw)
        }
        llama_sampler_accept(s, chosen);
        if (llama_vocab_is_eog(vocab, chosen)) {
            printf("end eog\n");
            break;
        }
    }
    // reset gives the initial state again
    llama_sampler_reset(s);
    for (int t = 0; t < n_vocab; t++) {
        data[t].id = t;
        data[t].logit = 1.0f;
    }
    llama_token_data_array arr = { data, (size_t) n_vocab, -1, false };
    llama_sampler_apply(s, &arr);
    int n_allowed = 0;
    for (size_t i = 0; i < arr.size; i++) {
        n_allowed += arr.data[i].logit != -INFINITY;
    }
    printf("reset %d\n", n_allowed);
    llama_sampler_free(s);
    free(data);
    free(allowed);
}

static int run_cases(const struct llama_vocab * vocab, const char * cases_path, const char * dir) {
    char * text = read_file(cases_path);
    struct test_case c;
    memset(&c, 0, sizeof c);
    c.clone_at = -1;
    for (char * line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] == '#' || line[0] == 0) {
            continue;
        }
        char * arg = strchr(line, ' ');
        if (arg) {
            *arg++ = 0;
        } else {
            arg = line + strlen(line);
        }
        if (strcmp(line, "case") == 0) {
            memset(&c, 0, sizeof c);
            c.clone_at = -1;
            snprintf(c.name, sizeof c.name, "%s", arg);
            snprintf(c.root, sizeof c.root, "root");
            snprintf(c.mode, sizeof c.mode, "plain");
            c.steps = 32;
            c.seed = 1;
        } else if (strcmp(line, "grammar") == 0) {
            char path[1024];
            snprintf(path, sizeof path, "%s/%s", dir, arg);
            c.grammar = read_file(path);
        } else if (strcmp(line, "grammar_text") == 0) {
            c.grammar = strdup(arg); // GBNF escapes are the grammar's own
        } else if (strcmp(line, "root") == 0) {
            snprintf(c.root, sizeof c.root, "%s", arg);
        } else if (strcmp(line, "mode") == 0) {
            snprintf(c.mode, sizeof c.mode, "%s", arg);
        } else if (strcmp(line, "trigger") == 0 && c.n_triggers < MAX_ITEMS) {
            c.triggers[c.n_triggers++] = strdup(arg); // raw: patterns have their own escapes
        } else if (strcmp(line, "trigger_token_text") == 0 && c.n_trigger_tokens < MAX_ITEMS) {
            llama_token t[4];
            unescape(arg);
            int n = llama_tokenize(vocab, arg, (int32_t) strlen(arg), t, 4, false, true);
            if (n != 1) {
                fprintf(stderr, "trigger token text '%s' is %d tokens\n", arg, n);
                return 1;
            }
            c.trigger_tokens[c.n_trigger_tokens++] = t[0];
        } else if (strcmp(line, "prefix") == 0) {
            c.prefix = strdup(arg);
            unescape(c.prefix);
        } else if (strcmp(line, "steps") == 0) {
            c.steps = atoi(arg);
        } else if (strcmp(line, "seed") == 0) {
            c.seed = strtoull(arg, NULL, 10);
        } else if (strcmp(line, "clone_at") == 0) {
            c.clone_at = atoi(arg);
        } else if (strcmp(line, "end") == 0) {
            run_case(vocab, &c);
            fflush(stdout);
            free(c.grammar);
            free(c.prefix);
            for (int i = 0; i < c.n_triggers; i++) {
                free(c.triggers[i]);
            }
        } else {
            fprintf(stderr, "unknown directive '%s'\n", line);
            return 1;
        }
    }
    free(text);
    return 0;
}

// The corpus: grammars separated by lines "=====" (the text between, without the separators).
static int run_parse(const struct llama_vocab * vocab, const char * path) {
    char * text = read_file(path);
    int i = 0;
    char * p = text;
    while (*p) {
        char * sep = strstr(p, "\n=====\n");
        if (sep) {
            *sep = 0;
        }
        struct llama_sampler * s = llama_sampler_init_grammar(vocab, p, "root");
        printf("parse %d %s\n", i++, s ? "ok" : "fail");
        fflush(stdout);
        llama_sampler_free(s);
        if (!sep) {
            break;
        }
        p = sep + 7;
    }
    free(text);
    return 0;
}

static void quiet(enum ggml_log_level level, const char * text, void * user) {
    (void) user;
    if (getenv("TRACE_LOG") || (level == GGML_LOG_LEVEL_ERROR && strstr(text, "internal error"))) {
        fputs(text, stderr);
    }
}

int main(int argc, char ** argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s VOCAB.gguf CASES DATA_DIR | %s VOCAB.gguf --parse CORPUS\n", argv[0], argv[0]);
        return 2;
    }
    llama_log_set(quiet, NULL);
    struct llama_model_params mp = llama_model_default_params();
    mp.vocab_only = true;
    struct llama_model * model = llama_model_load_from_file(argv[1], mp);
    if (!model) {
        fprintf(stderr, "cannot load %s\n", argv[1]);
        return 1;
    }
    const struct llama_vocab * vocab = llama_model_get_vocab(model);
    int rc = strcmp(argv[2], "--parse") == 0 ? run_parse(vocab, argv[3]) : run_cases(vocab, argv[2], argv[3]);
    llama_model_free(model);
    return rc;
}
