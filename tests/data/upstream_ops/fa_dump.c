// Runs ggml's CPU flash attention (ggml_flash_attn_ext, F32 accumulators as llama.cpp asks)
// on seeded inputs and writes inputs and outputs (raw little-endian) for
// kernels::attention::tests::upstream_flash_attention_*: 70 query rows (the tiled kernel,
// >= 64 rows) with and without sinks, and their first 40 rows alone (the one-chunk kernel);
// then one query row over 700 cells (the split-KV decode kernel, >= 512 cells: a chunk of
// cells per thread, the partials reduced) with 2 and 3 threads, with and without sinks.
#include "ggml.h"
#include "ggml-cpu.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
enum { DK = 64, DV = 64, H = 2, HKV = 1, NKV = 200, N = 70, NS = 40, NKV2 = 700 };
static unsigned long long seed = 88172645463325252ull;
static float rnd(void) { seed ^= seed << 13; seed ^= seed >> 7; seed ^= seed << 17; return (float)((seed >> 40) / (double)(1 << 24)) * 2.0f - 1.0f; }
// cell c is absent (another sequence's) when c % 9 == 4 or 100 <= c < 110; row t sees cells <= 120 + t
static int visible(int t, int c) { return !(c % 9 == 4 || (c >= 100 && c < 110)) && c <= 120 + t; }
// decode over NKV2 cells: cell c is absent when c % 9 == 4, 300 <= c < 340 or c > 650
static int visible2(int c) { return !(c % 9 == 4 || (c >= 300 && c < 340) || c > 650); }
static void put(const char *dir, const char *name, const void *p, size_t n) {
    char path[512]; snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb"); fwrite(p, 1, n, f); fclose(f);
}
// ggml_flash_attn_ext of the tensors (with sinks when asked, F32 precision as llama.cpp asks)
// computed by nth threads; writes its output and frees the context
static void attend(struct ggml_context *ctx, struct ggml_tensor *tq, struct ggml_tensor *tk, struct ggml_tensor *tv, struct ggml_tensor *tm,
                   int sinks, const float *sk, int nth, const char *dir, const char *name) {
    struct ggml_tensor *out = ggml_flash_attn_ext(ctx, tq, tk, tv, tm, 1.0f / sqrtf(DK), 0.0f, 0.0f);
    if (sinks) {
        struct ggml_tensor *ts = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, H);
        memcpy(ts->data, sk, H * 4);
        ggml_flash_attn_ext_add_sinks(out, ts);
    }
    ggml_prec_set_acc(out, GGML_PREC_F32);
    struct ggml_cgraph *gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, out);
    ggml_graph_compute_with_ctx(ctx, gf, nth);
    put(dir, name, out->data, ggml_nbytes(out));
    ggml_free(ctx);
}
static void run(const char *dir, const char *name, int n, int sinks, const float *q, const ggml_fp16_t *k, const ggml_fp16_t *v, const float *sk) {
    struct ggml_init_params ip = { 64 * 1024 * 1024, NULL, false };
    struct ggml_context *ctx = ggml_init(ip);
    struct ggml_tensor *tq = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, DK, n, H, 1);
    struct ggml_tensor *tk = ggml_new_tensor_4d(ctx, GGML_TYPE_F16, DK, NKV, HKV, 1);
    struct ggml_tensor *tv = ggml_new_tensor_4d(ctx, GGML_TYPE_F16, DV, NKV, HKV, 1);
    struct ggml_tensor *tm = ggml_new_tensor_4d(ctx, GGML_TYPE_F16, NKV, n, 1, 1);
    // q rows of head h, token t at q[(h*N + t)*DK]
    for (int h = 0; h < H; h++) for (int t = 0; t < n; t++) memcpy((float *)tq->data + ((size_t)h * n + t) * DK, q + ((size_t)h * N + t) * DK, DK * 4);
    memcpy(tk->data, k, sizeof(ggml_fp16_t) * DK * NKV * HKV);
    memcpy(tv->data, v, sizeof(ggml_fp16_t) * DV * NKV * HKV);
    for (int t = 0; t < n; t++) for (int c = 0; c < NKV; c++) ((ggml_fp16_t *)tm->data)[t * NKV + c] = ggml_fp32_to_fp16(visible(t, c) ? 0.0f : -INFINITY);
    // out: [DV, H, n]
    attend(ctx, tq, tk, tv, tm, sinks, sk, 2, dir, name);
}
static void run_decode(const char *dir, const char *name, int sinks, int nth, const float *q, const ggml_fp16_t *k, const ggml_fp16_t *v, const float *sk) {
    struct ggml_init_params ip = { 64 * 1024 * 1024, NULL, false };
    struct ggml_context *ctx = ggml_init(ip);
    struct ggml_tensor *tq = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, DK, 1, H, 1);
    struct ggml_tensor *tk = ggml_new_tensor_4d(ctx, GGML_TYPE_F16, DK, NKV2, HKV, 1);
    struct ggml_tensor *tv = ggml_new_tensor_4d(ctx, GGML_TYPE_F16, DV, NKV2, HKV, 1);
    struct ggml_tensor *tm = ggml_new_tensor_4d(ctx, GGML_TYPE_F16, NKV2, 1, 1, 1);
    memcpy(tq->data, q, sizeof(float) * DK * H);
    memcpy(tk->data, k, sizeof(ggml_fp16_t) * DK * NKV2 * HKV);
    memcpy(tv->data, v, sizeof(ggml_fp16_t) * DV * NKV2 * HKV);
    for (int c = 0; c < NKV2; c++) ((ggml_fp16_t *)tm->data)[c] = ggml_fp32_to_fp16(visible2(c) ? 0.0f : -INFINITY);
    attend(ctx, tq, tk, tv, tm, sinks, sk, nth, dir, name);
}
int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : ".";
    static float q[H * N * DK], kf[HKV * NKV * DK], vf[HKV * NKV * DV], sk[H] = { 0.5f, -2.0f };
    static ggml_fp16_t k[HKV * NKV * DK], v[HKV * NKV * DV];
    for (int i = 0; i < H * N * DK; i++) q[i] = 2.5f * rnd();
    for (int i = 0; i < HKV * NKV * DK; i++) { kf[i] = rnd(); k[i] = ggml_fp32_to_fp16(kf[i]); }
    for (int i = 0; i < HKV * NKV * DV; i++) { vf[i] = rnd(); v[i] = ggml_fp32_to_fp16(vf[i]); }
    put(dir, "fa_q.f32", q, sizeof q);
    put(dir, "fa_k.f16", k, sizeof k);
    put(dir, "fa_v.f16", v, sizeof v);
    run(dir, "fa_tiled_out.f32", N, 0, q, k, v, sk);
    run(dir, "fa_tiled_sinks_out.f32", N, 1, q, k, v, sk);
    run(dir, "fa_one_chunk_out.f32", NS, 0, q, k, v, sk);
    static float q2[H * DK];
    static ggml_fp16_t k2[HKV * NKV2 * DK], v2[HKV * NKV2 * DV];
    for (int i = 0; i < H * DK; i++) q2[i] = 2.5f * rnd();
    for (int i = 0; i < HKV * NKV2 * DK; i++) k2[i] = ggml_fp32_to_fp16(rnd());
    for (int i = 0; i < HKV * NKV2 * DV; i++) v2[i] = ggml_fp32_to_fp16(rnd());
    put(dir, "fa_decode_q.f32", q2, sizeof q2);
    put(dir, "fa_decode_k.f16", k2, sizeof k2);
    put(dir, "fa_decode_v.f16", v2, sizeof v2);
    run_decode(dir, "fa_split2_out.f32", 0, 2, q2, k2, v2, sk);
    run_decode(dir, "fa_split3_sinks_out.f32", 1, 3, q2, k2, v2, sk);
    run_decode(dir, "fa_split2_sinks_out.f32", 1, 2, q2, k2, v2, sk);
    return 0;
}
