// golden_dsv4: golden.c's logits scenarios adapted to what llama.cpp b11312 allows for DeepSeek-V4 (arch deepseek4),
// plus a long scenario that reaches the 128-token HCA compression blocks. Uses only the llama.h API.
//
//   golden_dsv4 logits MODEL OUT_PREFIX   -> OUT_PREFIX.json + OUT_PREFIX.f32
//        A, B, C exactly as golden.c (same LCG tokens, same context: n_ctx 256, n_seq_max 4, n_batch = n_ubatch = 256,
//        2 threads). D is replaced by D': b11312's DSV4 cache refuses a partial llama_memory_seq_rm (returns false,
//        llama-kv-cache-dsv4.cpp:1459-1501, without rollback snapshots), which makes golden.c stop at "seq_rm". D':
//        llama_memory_seq_cp(0 -> 3), then seq_rm(1, 3, -1) (must return false; recorded as D_partial_rm), then
//        seq_rm(1, -1, -1) (whole sequence, returns true), then one batch of two tokens: the same two LCG draws as
//        golden.c, D_tokens.seq1_pos0 at position 0 of seq 1 and D_tokens.seq3_pos12 at position 12 of seq 3.
//   golden_dsv4 long MODEL OUT_PREFIX     -> OUT_PREFIX.json + OUT_PREFIX.f32
//        L: one sequence, context n_ctx 512, n_seq_max 1, n_batch 512, n_ubatch 90 (so the prompt is split into ubatches
//        of 90/90/70 tokens and compression blocks straddle ubatch boundaries). Prompt of 250 LCG tokens (seed 777),
//        one llama_decode, logits at positions 9, 19, ..., 249 (rows L_rows[0]..); then 8 greedy single-token decodes
//        (positions 250..257; position 255 completes the second 128-token HCA block) -> rows LB.
//
// Environment switches (as golden_var.c): GV_FA=0|1 flash attention off/on, GV_F32KV=1 F32 K/V cache,
// GV_DUMP=",name-il,..." + GV_DUMP_DIR=DIR dump the first evaluation of named graph tensors, GV_VERBOSE=1 log.
// Built against a llama.h of llama.cpp b11312; link with -lllama (reference) or -ldeepseek.
#include "llama.h"
#include "ggml.h"
#include "ggml-backend.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Built by scripts/regenerate-references.sh with -DREFERENCE_UPSTREAM='"llama.cpp b11312 (...)"'
// against upstream's libllama, every JSON object written names that build in an "upstream"
// field; built without it (e.g. against libdeepseek, to compare), the output has no such field.
#ifdef REFERENCE_UPSTREAM
#define UPSTREAM_HEAD "\"upstream\": \"" REFERENCE_UPSTREAM "\", "
#define UPSTREAM_TAIL ", \"upstream\": \"" REFERENCE_UPSTREAM "\""
#else
#define UPSTREAM_HEAD ""
#define UPSTREAM_TAIL ""
#endif

static void die(const char *m) { fprintf(stderr, "golden_dsv4: %s\n", m); exit(1); }

static void quiet(enum ggml_log_level level, const char *text, void *ud) {
    (void) ud;
    if (level == GGML_LOG_LEVEL_ERROR || getenv("GV_VERBOSE")) fputs(text, stderr);
}

static bool dump_cb(struct ggml_tensor *t, bool ask, void *ud) {
    (void) ud;
    const char *want = getenv("GV_DUMP");
    const char *dir = getenv("GV_DUMP_DIR");
    char key[256];
    snprintf(key, sizeof key, ",%s,", t->name);
    if (!want || !dir || !strstr(want, key)) return ask ? false : true;
    if (ask) return true;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.bin", dir, t->name);
    FILE *e = fopen(path, "rb");
    if (e) { fclose(e); return true; }  // keep the first evaluation only
    if (t->type != GGML_TYPE_F32 || !ggml_is_contiguous(t)) return true;
    size_t n = ggml_nelements(t);
    float *buf = malloc(n * sizeof(float));
    ggml_backend_tensor_get(t, buf, 0, n * sizeof(float));
    FILE *f = fopen(path, "wb");
    fwrite(buf, sizeof(float), n, f);
    fclose(f);
    free(buf);
    snprintf(path, sizeof path, "%s/%s.shape", dir, t->name);
    f = fopen(path, "w");
    fprintf(f, "%lld %lld %lld %lld\n", (long long) t->ne[0], (long long) t->ne[1], (long long) t->ne[2], (long long) t->ne[3]);
    fclose(f);
    return true;
}

static struct llama_model *load(const char *path) {
    struct llama_model_params mp = llama_model_default_params();
    struct llama_model *m = llama_model_load_from_file(path, mp);
    if (!m) die("cannot load model");
    return m;
}

static struct llama_context *context(struct llama_model *m, int n_ctx, int n_seq, int n_ubatch) {
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_batch = n_ctx;
    cp.n_ubatch = n_ubatch;
    cp.n_seq_max = n_seq;
    cp.n_threads = 2;
    cp.n_threads_batch = 2;
    if (getenv("GV_FA")) cp.flash_attn_type = atoi(getenv("GV_FA")) ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
    if (getenv("GV_F32KV")) { cp.type_k = GGML_TYPE_F32; cp.type_v = GGML_TYPE_F32; }
    if (getenv("GV_DUMP")) { cp.cb_eval = dump_cb; cp.cb_eval_user_data = NULL; }
    struct llama_context *c = llama_init_from_model(m, cp);
    if (!c) die("cannot create context");
    return c;
}

static FILE *bin;
static int n_rows;

static void put_logits(struct llama_context *c, int i, int n_vocab) {
    float *l = llama_get_logits_ith(c, i);
    if (!l) die("no logits");
    fwrite(l, sizeof(float), n_vocab, bin);
    n_rows++;
}

static void add(struct llama_batch *b, llama_token t, llama_pos p, llama_seq_id s, int out) {
    int i = b->n_tokens++;
    b->token[i] = t;
    b->pos[i] = p;
    b->n_seq_id[i] = 1;
    b->seq_id[i][0] = s;
    b->logits[i] = out;
}

static llama_token argmax(const float *l, int n) {
    int best = 0;
    for (int i = 1; i < n; i++) if (l[i] > l[best]) best = i;
    return best;
}

static const char *base(const char *p) { return strrchr(p, '/') ? strrchr(p, '/') + 1 : p; }

static int cmd_logits(const char *model_path, const char *prefix) {
    struct llama_model *m = load(model_path);
    const struct llama_vocab *v = llama_model_get_vocab(m);
    int n_vocab = llama_vocab_n_tokens(v);
    struct llama_context *c = context(m, 256, 4, 256);
    char path[4096];
    snprintf(path, sizeof path, "%s.f32", prefix);
    bin = fopen(path, "wb");
    if (!bin) die("cannot write");
    unsigned lcg = 12345;
#define NEXT() ((lcg = lcg * 1103515245u + 12345u), (llama_token) ((lcg >> 8) % (unsigned) (n_vocab - 16)))
    llama_token toks_a[40];
    for (int i = 0; i < 40; i++) toks_a[i] = NEXT();
    struct llama_batch b = llama_batch_init(64, 0, 4);
    b.n_tokens = 0;
    for (int i = 0; i < 40; i++) add(&b, toks_a[i], i, 0, 1);
    if (llama_decode(c, b)) die("decode A");
    for (int i = 0; i < 40; i++) put_logits(c, i, n_vocab);
    int rows_a = n_rows;
    llama_token gen[8];
    llama_token next = argmax(llama_get_logits_ith(c, 39), n_vocab);
    for (int s = 0; s < 8; s++) {
        gen[s] = next;
        b.n_tokens = 0;
        add(&b, next, 40 + s, 0, 1);
        if (llama_decode(c, b)) die("decode B");
        put_logits(c, 0, n_vocab);
        next = argmax(llama_get_logits_ith(c, 0), n_vocab);
    }
    llama_memory_clear(llama_get_memory(c), 1);
    int lens[3] = {12, 7, 20};
    llama_token toks_c[3][20];
    for (int s = 0; s < 3; s++) for (int i = 0; i < lens[s]; i++) toks_c[s][i] = NEXT();
    b.n_tokens = 0;
    int last[3];
    for (int i = 0; i < 20; i++)
        for (int s = 0; s < 3; s++)
            if (i < lens[s]) {
                last[s] = b.n_tokens;
                add(&b, toks_c[s][i], i, s, i == lens[s] - 1);
            }
    if (llama_decode(c, b)) die("decode C");
    for (int s = 0; s < 3; s++) put_logits(c, last[s], n_vocab);
    // D'
    llama_memory_seq_cp(llama_get_memory(c), 0, 3, -1, -1);
    bool partial = llama_memory_seq_rm(llama_get_memory(c), 1, 3, -1);
    if (!llama_memory_seq_rm(llama_get_memory(c), 1, -1, -1)) die("seq_rm whole");
    llama_token d1 = NEXT(), d3 = NEXT();
    b.n_tokens = 0;
    add(&b, d1, 0, 1, 1);
    add(&b, d3, 12, 3, 1);
    if (llama_decode(c, b)) die("decode D");
    put_logits(c, 0, n_vocab);
    put_logits(c, 1, n_vocab);
    fclose(bin);

    snprintf(path, sizeof path, "%s.json", prefix);
    FILE *js = fopen(path, "w");
    fprintf(js, "{\"model\": \"%s\", " UPSTREAM_HEAD "\"n_vocab\": %d, \"rows\": %d, \"n_ctx\": 256, \"n_seq_max\": 4,\n", base(model_path), n_vocab, n_rows);
    fprintf(js, " \"A_tokens\": [");
    for (int i = 0; i < 40; i++) fprintf(js, "%s%d", i ? ", " : "", toks_a[i]);
    fprintf(js, "], \"A_rows\": [0, %d],\n \"B_tokens\": [", rows_a);
    for (int i = 0; i < 8; i++) fprintf(js, "%s%d", i ? ", " : "", gen[i]);
    fprintf(js, "], \"B_rows\": [%d, %d],\n", rows_a, rows_a + 8);
    for (int s = 0; s < 3; s++) {
        fprintf(js, " \"C_seq%d_tokens\": [", s);
        for (int i = 0; i < lens[s]; i++) fprintf(js, "%s%d", i ? ", " : "", toks_c[s][i]);
        fprintf(js, "],\n");
    }
    fprintf(js, " \"C_rows\": [%d, %d],\n \"D_partial_rm\": %s,\n \"D_tokens\": {\"seq1_pos0\": %d, \"seq3_pos12\": %d}, \"D_rows\": [%d, %d]}\n",
            rows_a + 8, rows_a + 11, partial ? "true" : "false", d1, d3, rows_a + 11, rows_a + 13);
    fclose(js);
    llama_batch_free(b);
    llama_free(c);
    llama_model_free(m);
    return 0;
}

#define L_PROMPT 250
#define L_GEN 8

static int cmd_long(const char *model_path, const char *prefix) {
    struct llama_model *m = load(model_path);
    const struct llama_vocab *v = llama_model_get_vocab(m);
    int n_vocab = llama_vocab_n_tokens(v);
    struct llama_context *c = context(m, 512, 1, 90);
    char path[4096];
    snprintf(path, sizeof path, "%s.f32", prefix);
    bin = fopen(path, "wb");
    if (!bin) die("cannot write");
    unsigned lcg = 777;
    llama_token toks[L_PROMPT];
    for (int i = 0; i < L_PROMPT; i++) toks[i] = NEXT();
    struct llama_batch b = llama_batch_init(L_PROMPT, 0, 1);
    b.n_tokens = 0;
    for (int i = 0; i < L_PROMPT; i++) add(&b, toks[i], i, 0, i % 10 == 9);
    if (llama_decode(c, b)) die("decode L");
    int k = 0;
    for (int i = 0; i < L_PROMPT; i++) if (i % 10 == 9) { put_logits(c, i, n_vocab); k++; }
    int rows_l = n_rows;
    llama_token gen[L_GEN];
    llama_token next = argmax(llama_get_logits_ith(c, L_PROMPT - 1), n_vocab);
    for (int s = 0; s < L_GEN; s++) {
        gen[s] = next;
        b.n_tokens = 0;
        add(&b, next, L_PROMPT + s, 0, 1);
        if (llama_decode(c, b)) die("decode LB");
        put_logits(c, 0, n_vocab);
        next = argmax(llama_get_logits_ith(c, 0), n_vocab);
    }
    fclose(bin);
    snprintf(path, sizeof path, "%s.json", prefix);
    FILE *js = fopen(path, "w");
    fprintf(js, "{\"model\": \"%s\", " UPSTREAM_HEAD "\"n_vocab\": %d, \"rows\": %d, \"n_ctx\": 512, \"n_seq_max\": 1, \"n_ubatch\": 90,\n", base(model_path), n_vocab, n_rows);
    fprintf(js, " \"L_tokens\": [");
    for (int i = 0; i < L_PROMPT; i++) fprintf(js, "%s%d", i ? ", " : "", toks[i]);
    fprintf(js, "],\n \"L_positions\": [");
    for (int i = 9, j = 0; i < L_PROMPT; i += 10, j++) fprintf(js, "%s%d", j ? ", " : "", i);
    fprintf(js, "], \"L_rows\": [0, %d],\n \"LB_tokens\": [", rows_l);
    for (int i = 0; i < L_GEN; i++) fprintf(js, "%s%d", i ? ", " : "", gen[i]);
    fprintf(js, "], \"LB_positions\": [%d, %d], \"LB_rows\": [%d, %d]}\n", L_PROMPT, L_PROMPT + L_GEN, rows_l, rows_l + L_GEN);
    fclose(js);
    (void) k;
    llama_batch_free(b);
    llama_free(c);
    llama_model_free(m);
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 4) die("usage: golden_dsv4 logits|long MODEL OUT_PREFIX");
    llama_log_set(quiet, NULL);
    llama_backend_init();
    if (!strcmp(argv[1], "logits")) return cmd_logits(argv[2], argv[3]);
    if (!strcmp(argv[1], "long")) return cmd_long(argv[2], argv[3]);
    die("bad arguments");
}
