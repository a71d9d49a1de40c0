// gen_trace: llama.cpp b11312's MoE router scores on the golden scenarios (A-D of
// tests/data/gen/golden.c, same tokens and batches, read back from the golden JSON's token
// lists), captured with cb_eval: per decode call and MoE layer, the selection scores
// ("ffn_moe_probs_biased", else "ffn_moe_probs": [n_tokens][n_expert] f32) and the chosen
// experts ("ffn_moe_topk": [n_tokens][n_used] i32). tests/golden_logits.rs uses them to tell a
// row that differs because an expert choice flipped on a near-tie of upstream's own router
// from one that differs for another reason.
//
//   cc -O2 -I$LLAMA/include -I$LLAMA/ggml/include gen_trace.c -L$BUILD/bin -lllama -lggml -lggml-base -o gen_trace
//   gen_trace MODEL.gguf A_TOKENS B_TOKENS C0 C1 C2 D1 D3 > MODEL.router
//   gen_trace --dsv4 MODEL.gguf A_TOKENS B_TOKENS C0 C1 C2 D1 D3 > MODEL.router
//        golden_dsv4.c's scenarios: D' (the partial seq_rm refused, seq 1 removed whole, D1 at
//        position 0 of seq 1)
//   gen_trace --long MODEL.gguf L_TOKENS L_POSITIONS LB_TOKENS > MODEL.long.router
//        golden_dsv4.c's long scenario L (n_ctx 512, one sequence, n_ubatch 90: the prompt's
//        decode call has three micro-batches, in token order, one record each)
//   (token lists comma-separated; scripts: gen.sh)
//
// Output records, little-endian: u32 decode, u32 layer, u32 kind (0 scores, 1 chosen),
// u32 ne0, u32 n_tokens, then ne0 * n_tokens values (f32 or i32).
#include "llama.h"
#include "ggml.h"
#include "ggml-backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>

static void die(const char *m) { fprintf(stderr, "gen_trace: %s\n", m); exit(1); }
static void quiet(enum ggml_log_level l, const char *t, void *u) { (void) u; if (l == GGML_LOG_LEVEL_ERROR) fputs(t, stderr); }

static uint32_t decode_idx;
static int has_biased[256];

static int kind_of(const char *name, int *layer) {
    const char *dash = strrchr(name, '-');
    if (!dash || !dash[1]) return -1;
    for (const char *p = dash + 1; *p; p++)
        if (*p < '0' || *p > '9') return -1; // views of these ("... (reshaped)") are not them
    *layer = atoi(dash + 1);
    size_t n = (size_t) (dash - name);
    if (n == strlen("ffn_moe_probs_biased") && !strncmp(name, "ffn_moe_probs_biased", n)) return 2;
    if (n == strlen("ffn_moe_probs") && !strncmp(name, "ffn_moe_probs", n)) return 0;
    if (n == strlen("ffn_moe_topk") && !strncmp(name, "ffn_moe_topk", n)) return 1;
    return -1;
}

static float *pending_probs[256];
static int64_t pending_ne0[256], pending_ne1[256];

static void put(uint32_t layer, uint32_t kind, uint32_t ne0, uint32_t ne1, const void *data, size_t elem) {
    uint32_t h[5] = {decode_idx, layer, kind, ne0, ne1};
    fwrite(h, 4, 5, stdout);
    fwrite(data, elem, (size_t) ne0 * ne1, stdout);
}

static bool cb(struct ggml_tensor *t, bool ask, void *ud) {
    (void) ud;
    int layer;
    int k = kind_of(ggml_get_name(t), &layer);
    if (ask) return k >= 0;
    if (k < 0 || layer < 0 || layer >= 256) return true;
    int64_t ne0 = t->ne[0], ne1 = t->ne[1];
    size_t elem = k == 1 ? 4 : 4;
    char *buf = malloc((size_t) (ne0 * ne1) * elem);
    for (int64_t i1 = 0; i1 < ne1; i1++)
        for (int64_t i0 = 0; i0 < ne0; i0++)
            ggml_backend_tensor_get(t, buf + (i1 * ne0 + i0) * elem, i1 * t->nb[1] + i0 * t->nb[0], elem);
    if (k == 0) {
        // kept until the layer's topk: the biased scores replace them where the model has a bias
        free(pending_probs[layer]);
        pending_probs[layer] = (float *) buf;
        pending_ne0[layer] = ne0;
        pending_ne1[layer] = ne1;
        has_biased[layer] = 0;
        return true;
    }
    if (k == 2) {
        put((uint32_t) layer, 0, (uint32_t) ne0, (uint32_t) ne1, buf, 4);
        has_biased[layer] = 1;
        free(buf);
        return true;
    }
    if (!has_biased[layer] && pending_probs[layer]) put((uint32_t) layer, 0, (uint32_t) pending_ne0[layer], (uint32_t) pending_ne1[layer], pending_probs[layer], 4);
    free(pending_probs[layer]);
    pending_probs[layer] = NULL;
    put((uint32_t) layer, 1, (uint32_t) ne0, (uint32_t) ne1, buf, 4);
    free(buf);
    return true;
}

static int parse(const char *s, llama_token *out) {
    int n = 0;
    while (*s) {
        out[n++] = (llama_token) strtol(s, (char **) &s, 10);
        if (*s == ',') s++;
    }
    return n;
}

static void add(struct llama_batch *b, llama_token t, llama_pos p, llama_seq_id s, int out) {
    int i = b->n_tokens++;
    b->token[i] = t;
    b->pos[i] = p;
    b->n_seq_id[i] = 1;
    b->seq_id[i][0] = s;
    b->logits[i] = out;
}

static void decode(struct llama_context *c, struct llama_batch b) {
    if (llama_decode(c, b)) die("decode");
    decode_idx++;
}

static int in_list(const llama_token *l, int n, int v) {
    for (int i = 0; i < n; i++) if (l[i] == v) return 1;
    return 0;
}

int main(int argc, char **argv) {
    int dsv4 = argc > 1 && !strcmp(argv[1], "--dsv4");
    int longs = argc > 1 && !strcmp(argv[1], "--long");
    if (dsv4 || longs) { argv++; argc--; }
    if (longs ? argc != 5 : argc != 9) die("usage: gen_trace [--dsv4] MODEL A B C0 C1 C2 D1 D3 | gen_trace --long MODEL L L_POSITIONS LB");
    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    struct llama_model *m = llama_model_load_from_file(argv[1], mp);
    if (!m) die("cannot load model");
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = longs ? 512 : 256;
    cp.n_batch = cp.n_ctx;
    cp.n_ubatch = longs ? 90 : 256;
    cp.n_seq_max = longs ? 1 : 4;
    cp.n_threads = 2;
    cp.n_threads_batch = 2;
    cp.cb_eval = cb;
    cp.cb_eval_user_data = NULL;
    struct llama_context *c = llama_init_from_model(m, cp);
    if (!c) die("cannot create context");
    if (longs) {
        static llama_token l[512], lp[512], lb[64];
        int nl = parse(argv[2], l), np = parse(argv[3], lp), nlb = parse(argv[4], lb);
        struct llama_batch b = llama_batch_init(512, 0, 1);
        b.n_tokens = 0;
        for (int i = 0; i < nl; i++) add(&b, l[i], i, 0, in_list(lp, np, i));
        decode(c, b);
        for (int s = 0; s < nlb; s++) {
            b.n_tokens = 0;
            add(&b, lb[s], nl + s, 0, 1);
            decode(c, b);
        }
        llama_batch_free(b);
        llama_free(c);
        llama_model_free(m);
        return 0;
    }
    static llama_token a[64], bt[64], cs[3][64];
    int na = parse(argv[2], a), nb = parse(argv[3], bt);
    int lens[3];
    for (int s = 0; s < 3; s++) lens[s] = parse(argv[4 + s], cs[s]);
    llama_token d1 = (llama_token) atoi(argv[7]), d3 = (llama_token) atoi(argv[8]);
    struct llama_batch b = llama_batch_init(64, 0, 4);
    b.n_tokens = 0;
    for (int i = 0; i < na; i++) add(&b, a[i], i, 0, 1);
    decode(c, b);
    for (int s = 0; s < nb; s++) {
        b.n_tokens = 0;
        add(&b, bt[s], na + s, 0, 1);
        decode(c, b);
    }
    llama_memory_clear(llama_get_memory(c), 1);
    b.n_tokens = 0;
    for (int i = 0; i < 64; i++)
        for (int s = 0; s < 3; s++)
            if (i < lens[s]) add(&b, cs[s][i], i, s, i == lens[s] - 1);
    decode(c, b);
    llama_memory_seq_cp(llama_get_memory(c), 0, 3, -1, -1);
    if (dsv4) {
        if (llama_memory_seq_rm(llama_get_memory(c), 1, 3, -1)) die("the partial seq_rm succeeded");
        if (!llama_memory_seq_rm(llama_get_memory(c), 1, -1, -1)) die("seq_rm whole");
    } else if (!llama_memory_seq_rm(llama_get_memory(c), 1, 3, -1)) {
        die("seq_rm");
    }
    b.n_tokens = 0;
    add(&b, d1, dsv4 ? 0 : 3, 1, 1);
    add(&b, d3, 12, 3, 1);
    decode(c, b);
    llama_batch_free(b);
    llama_free(c);
    llama_model_free(m);
    return 0;
}
