// Oracle for src/quant/golden.rs: prints hashes of llama.cpp's own
// quantizers and x86 dot products on inputs from the same xorshift RNG as
// src/quant/test_util.rs. Not compiled by cargo. Build (R = vendored ggml):
//
//   R=/work/ref/llama_cpp_python-0.3.36/vendor/llama.cpp/ggml
//   I="-I$R/include -I$R/src -I$R/src/ggml-cpu"
//   gcc -std=gnu11 -O3 -DNDEBUG $I -c $R/src/ggml-quants.c -o base.o          # ggml-base: baseline x86-64
//   gcc -std=gnu11 -O3 -DNDEBUG -march=haswell $I -c $R/src/ggml-cpu/arch/x86/quants.c -o x86.o
//   gcc -std=gnu11 -O3 -DNDEBUG -march=haswell $I -c $R/src/ggml-cpu/quants.c -o cpu.o
//   gcc -std=gnu11 -O2 -ffp-contract=off -mf16c golden_harness.c base.o x86.o cpu.o -lm -o harness && ./harness
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <immintrin.h>
// ---- stubs for the few ggml-base symbols the quant code references
float ggml_table_f32_f16[1 << 16];
float ggml_table_f32_e8m0_half[256];
float ggml_table_f32_ue4m3[256];
void ggml_abort(const char *file, int line, const char *fmt, ...) { fprintf(stderr, "abort %s:%d\n", file, line); abort(); }
size_t ggml_row_size(int t, long n) { abort(); }
const char *ggml_type_name(int t) { return "?"; }
size_t ggml_type_size(int t) { abort(); }
__attribute__((constructor)) static void init(void) { for (int i = 0; i < 65536; i++) ggml_table_f32_f16[i] = _cvtsh_ss((uint16_t)i); }
// ---- harness
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <immintrin.h>

typedef uint16_t ggml_fp16_t;
// ggml-base (ggml-quants.c)
void quantize_row_q4_0_ref(const float*, void*, int64_t);
void quantize_row_q4_1_ref(const float*, void*, int64_t);
void quantize_row_q5_0_ref(const float*, void*, int64_t);
void quantize_row_q5_1_ref(const float*, void*, int64_t);
void quantize_row_q8_0_ref(const float*, void*, int64_t);
void quantize_row_q8_1_ref(const float*, void*, int64_t);
void quantize_row_q2_K_ref(const float*, void*, int64_t);
void quantize_row_q3_K_ref(const float*, void*, int64_t);
void quantize_row_q4_K_ref(const float*, void*, int64_t);
void quantize_row_q5_K_ref(const float*, void*, int64_t);
void quantize_row_q6_K_ref(const float*, void*, int64_t);
void quantize_row_q8_K_ref(const float*, void*, int64_t);
void dequantize_row_q4_0(const void*, float*, int64_t);
void dequantize_row_q4_1(const void*, float*, int64_t);
void dequantize_row_q5_0(const void*, float*, int64_t);
void dequantize_row_q5_1(const void*, float*, int64_t);
void dequantize_row_q8_0(const void*, float*, int64_t);
void dequantize_row_q2_K(const void*, float*, int64_t);
void dequantize_row_q3_K(const void*, float*, int64_t);
void dequantize_row_q4_K(const void*, float*, int64_t);
void dequantize_row_q5_K(const void*, float*, int64_t);
void dequantize_row_q6_K(const void*, float*, int64_t);
// ggml-cpu x86
void quantize_row_q8_0(const float*, void*, int64_t);
void quantize_row_q8_1(const float*, void*, int64_t);
void quantize_row_q8_K(const float*, void*, int64_t);
typedef void (*dot_fn)(int, float*, size_t, const void*, size_t, const void*, size_t, int);
void ggml_vec_dot_q4_0_q8_0(int, float*, size_t, const void*, size_t, const void*, size_t, int);
void ggml_vec_dot_q4_1_q8_1(int, float*, size_t, const void*, size_t, const void*, size_t, int);
void ggml_vec_dot_q5_0_q8_0(int, float*, size_t, const void*, size_t, const void*, size_t, int);
void ggml_vec_dot_q5_1_q8_1(int, float*, size_t, const void*, size_t, const void*, size_t, int);
void ggml_vec_dot_q8_0_q8_0(int, float*, size_t, const void*, size_t, const void*, size_t, int);
void ggml_vec_dot_q2_K_q8_K(int, float*, size_t, const void*, size_t, const void*, size_t, int);
void ggml_vec_dot_q3_K_q8_K(int, float*, size_t, const void*, size_t, const void*, size_t, int);
void ggml_vec_dot_q4_K_q8_K(int, float*, size_t, const void*, size_t, const void*, size_t, int);
void ggml_vec_dot_q5_K_q8_K(int, float*, size_t, const void*, size_t, const void*, size_t, int);
void ggml_vec_dot_q6_K_q8_K(int, float*, size_t, const void*, size_t, const void*, size_t, int);

// ---- RNG identical to src/quant/test_util.rs
static uint64_t S;
static void rng_new(uint64_t seed) { S = (seed * 0x9e3779b97f4a7c15ULL) | 1; }
static uint64_t next_u64(void) { uint64_t x = S; x ^= x >> 12; x ^= x << 25; x ^= x >> 27; S = x; return x * 0x2545f4914f6cdd1dULL; }
static uint32_t next_u32(void) { return (uint32_t)(next_u64() >> 32); }
static uint64_t below(uint64_t n) { return next_u64() % n; }
static float unit(void) { return (float)(next_u64() >> 40) / (float)(1ULL << 24); }
static float normal(void) { float s = -0.0f; for (int i = 0; i < 4; i++) s += unit(); return (s - 2.0f) * 1.7320508f; }
static void row(float *v, int n) {
    float scale = 1.0f;
    for (int i = 0; i < n; i++) {
        if (i % 32 == 0) scale = ldexpf(1.0f, (int)below(9) - 4);
        uint64_t r = below(64);
        float x = r == 0 ? 0.0f : r == 1 ? normal() * 8.0f : normal();
        v[i] = x * scale;
    }
}
static uint64_t fnv(const void *p, size_t n) {
    const uint8_t *b = p; uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) { h ^= b[i]; h *= 0x100000001b3ULL; }
    return h;
}

typedef void (*q_fn)(const float*, void*, int64_t);
typedef void (*dq_fn)(const void*, float*, int64_t);
struct ty { const char *name; int id; int bl, bb; q_fn qref; dq_fn deq; q_fn act; int abl, abb; dot_fn dot; int f16off[2]; int f16signed[2]; };

#define N 1024
#define R 4
int main(void) {
    struct ty tys[] = {
        {"q4_0", 2, 32, 18, quantize_row_q4_0_ref, dequantize_row_q4_0, quantize_row_q8_0, 32, 34, ggml_vec_dot_q4_0_q8_0, {0,-1},{1,0}},
        {"q4_1", 3, 32, 20, quantize_row_q4_1_ref, dequantize_row_q4_1, quantize_row_q8_1, 32, 36, ggml_vec_dot_q4_1_q8_1, {0,2},{0,1}},
        {"q5_0", 6, 32, 22, quantize_row_q5_0_ref, dequantize_row_q5_0, quantize_row_q8_0, 32, 34, ggml_vec_dot_q5_0_q8_0, {0,-1},{1,0}},
        {"q5_1", 7, 32, 24, quantize_row_q5_1_ref, dequantize_row_q5_1, quantize_row_q8_1, 32, 36, ggml_vec_dot_q5_1_q8_1, {0,2},{0,1}},
        {"q8_0", 8, 32, 34, quantize_row_q8_0_ref, dequantize_row_q8_0, quantize_row_q8_0, 32, 34, ggml_vec_dot_q8_0_q8_0, {0,-1},{1,0}},
        {"q2_K", 10, 256, 84, quantize_row_q2_K_ref, dequantize_row_q2_K, quantize_row_q8_K, 256, 292, ggml_vec_dot_q2_K_q8_K, {80,82},{0,0}},
        {"q3_K", 11, 256, 110, quantize_row_q3_K_ref, dequantize_row_q3_K, quantize_row_q8_K, 256, 292, ggml_vec_dot_q3_K_q8_K, {108,-1},{1,0}},
        {"q4_K", 12, 256, 144, quantize_row_q4_K_ref, dequantize_row_q4_K, quantize_row_q8_K, 256, 292, ggml_vec_dot_q4_K_q8_K, {0,2},{0,0}},
        {"q5_K", 13, 256, 176, quantize_row_q5_K_ref, dequantize_row_q5_K, quantize_row_q8_K, 256, 292, ggml_vec_dot_q5_K_q8_K, {0,2},{0,0}},
        {"q6_K", 14, 256, 210, quantize_row_q6_K_ref, dequantize_row_q6_K, quantize_row_q8_K, 256, 292, ggml_vec_dot_q6_K_q8_K, {208,-1},{1,0}},
    };
    static float x[N], deq[R * N];
    static uint8_t w[R * N * 2], a[R * N * 2];
    static float dots[R * R];
    for (size_t t = 0; t < sizeof tys / sizeof tys[0]; t++) {
        struct ty *T = &tys[t];
        size_t wrow = N / T->bl * T->bb, arow = N / T->abl * T->abb;
        rng_new(1000 + T->id);
        uint64_t hx = 0xcbf29ce484222325ULL;
        for (int r = 0; r < R; r++) {
            row(x, N);
            hx ^= fnv(x, sizeof x); hx *= 3;
            T->qref(x, w + r * wrow, N);
            T->deq(w + r * wrow, deq + r * N, N);
        }
        for (int r = 0; r < R; r++) {
            row(x, N);
            T->act(x, a + r * arow, N);
        }
        for (int i = 0; i < R; i++)
            for (int j = 0; j < R; j++)
                T->dot(N, &dots[i * R + j], 0, w + i * wrow, 0, a + j * arow, 0, 1);
        // random-byte weights with f16 fields set to moderate values
        static uint8_t wr[R * N * 2];
        rng_new(2000 + T->id);
        for (size_t k = 0; k < R * wrow; k++) wr[k] = (uint8_t)next_u64();
        for (size_t blk = 0; blk < R * wrow / T->bb; blk++) {
            uint8_t *b = wr + blk * T->bb;
            for (int f = 0; f < 2 && T->f16off[f] >= 0; f++) {
                int e = -10 + (int)below(8);
                uint16_t man = (uint16_t)below(1024);
                uint16_t sign = (T->f16signed[f] && (next_u64() & 1)) ? 0x8000 : 0;
                uint16_t h = sign | (uint16_t)((e + 15) << 10) | man;
                memcpy(b + T->f16off[f], &h, 2);
            }
        }
        static float dr[R * R];
        for (int i = 0; i < R; i++)
            for (int j = 0; j < R; j++)
                T->dot(N, &dr[i * R + j], 0, wr + i * wrow, 0, a + j * arow, 0, 1);
        printf("// rand %s 0x%016llx 0x%016llx\n", T->name, (unsigned long long)fnv(wr, R * wrow), (unsigned long long)fnv(dr, sizeof dr));
        printf("(\"%s\", 0x%016llx, 0x%016llx, 0x%016llx, 0x%016llx, 0x%016llx),\n", T->name,
               (unsigned long long)hx, (unsigned long long)fnv(w, R * wrow), (unsigned long long)fnv(deq, sizeof deq),
               (unsigned long long)fnv(a, R * arow), (unsigned long long)fnv(dots, sizeof dots));
        if (t == 0) { for (int k = 0; k < 4; k++) printf("// dot[%d] = %.9g\n", k, dots[k]); }
    }
    // activation-format reference quantizers
    {
        rng_new(77);
        static uint8_t q0[N / 32 * 34], q1[N / 32 * 36];
        row(x, N);
        quantize_row_q8_0_ref(x, q0, N);
        quantize_row_q8_1_ref(x, q1, N);
        printf("q8_0_ref 0x%016llx q8_1_ref 0x%016llx\n", (unsigned long long)fnv(q0, sizeof q0), (unsigned long long)fnv(q1, sizeof q1));
    }
    // f16: hardware (F16C, what ggml-cpu uses) on random f32 bit patterns
    {
        rng_new(99);
        uint64_t h = 0xcbf29ce484222325ULL, hb = h;
        for (int i = 0; i < 1000000; i++) {
            uint32_t bits = next_u32(); float f; memcpy(&f, &bits, 4);
            uint16_t v = _cvtss_sh(f, 0);
            if (!isnan(f)) { h ^= v; h *= 0x100000001b3ULL; }
            // bf16 (ggml software conversion)
            uint16_t b;
            if ((bits & 0x7fffffff) > 0x7f800000) b = (bits >> 16) | 64; else b = (bits + (0x7fff + ((bits >> 16) & 1))) >> 16;
            hb ^= b; hb *= 0x100000001b3ULL;
        }
        printf("f16 0x%016llx bf16 0x%016llx\n", (unsigned long long)h, (unsigned long long)hb);
    }
    return 0;
}
