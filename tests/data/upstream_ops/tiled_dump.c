// llama.cpp b11312's tiled K-quant / IQ matmul (ggml-cpu/tiled, taken by ggml_mul_mat for 8 or
// more activation rows) on seeded weights of every type it serves, against seeded activations.
// Writes, into OUT: tiled_act.f32 (20 rows x 512), and per type T: tiled_T.w (32 rows x 512,
// ggml_quantize_chunk of seeded floats, an imatrix of ones where the type needs one) and
// tiled_T.out (the product with the first 9 rows, then with all 20: 9 x 32 then 20 x 32 f32).
//   cc -O2 -I$LLAMA/ggml/include tiled_dump.c -L$BUILD/bin -lggml -lggml-base -lggml-cpu -o tiled_dump
#include "ggml.h"
#include "ggml-cpu.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COLS 512
#define ROWS 32
#define NACT 20

static unsigned long long seed = 88172645463325252ull;
static float rnd(void) { seed ^= seed << 13; seed ^= seed >> 7; seed ^= seed << 17; return (float)((seed >> 40) & 0xffffff) / 16777216.0f - 0.5f; }

static void put(const char *dir, const char *name, const void *p, size_t n) {
    char path[512]; snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb"); fwrite(p, 1, n, f); fclose(f);
}

int main(int argc, char **argv) {
    const char *dir = argv[1];
    static float act[NACT * COLS];
    for (int i = 0; i < NACT * COLS; i++) act[i] = rnd() * 4.0f;
    put(dir, "tiled_act.f32", act, sizeof act);
    enum ggml_type types[] = { GGML_TYPE_Q2_K, GGML_TYPE_Q3_K, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K, GGML_TYPE_IQ4_XS, GGML_TYPE_IQ2_XXS, GGML_TYPE_IQ2_XS, GGML_TYPE_IQ2_S, GGML_TYPE_IQ3_XXS, GGML_TYPE_IQ3_S, GGML_TYPE_IQ1_S, GGML_TYPE_IQ1_M };
    static float w[ROWS * COLS], imat[COLS];
    for (int i = 0; i < COLS; i++) imat[i] = 1.0f;
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        enum ggml_type t = types[k];
        for (int i = 0; i < ROWS * COLS; i++) w[i] = rnd();
        size_t wb = ggml_row_size(t, COLS) * ROWS;
        char *wq = malloc(wb);
        ggml_quantize_chunk(t, w, wq, 0, ROWS, COLS, ggml_quantize_requires_imatrix(t) ? imat : NULL);
        char name[64];
        snprintf(name, sizeof name, "tiled_%s.w", ggml_type_name(t));
        put(dir, name, wq, wb);
        float out[(9 + NACT) * ROWS];
        int ns[2] = { 9, NACT }, off = 0;
        for (int c = 0; c < 2; c++) {
            struct ggml_init_params ip = { 64 << 20, NULL, false };
            struct ggml_context *ctx = ggml_init(ip);
            struct ggml_tensor *a = ggml_new_tensor_2d(ctx, t, COLS, ROWS);
            memcpy(a->data, wq, wb);
            struct ggml_tensor *b = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, COLS, ns[c]);
            memcpy(b->data, act, sizeof(float) * COLS * ns[c]);
            struct ggml_tensor *y = ggml_mul_mat(ctx, a, b);
            struct ggml_cgraph *g = ggml_new_graph(ctx);
            ggml_build_forward_expand(g, y);
            ggml_graph_compute_with_ctx(ctx, g, 1);
            memcpy(out + off, y->data, sizeof(float) * ROWS * ns[c]);
            off += ROWS * ns[c];
            ggml_free(ctx);
        }
        snprintf(name, sizeof name, "tiled_%s.out", ggml_type_name(t));
        put(dir, name, out, sizeof out);
        free(wq);
    }
    return 0;
}
