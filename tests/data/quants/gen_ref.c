// Reference outputs of llama.cpp b11312's own ggml for the IQ, ternary, FP4 and 1/2-bit
// types, for src/quant/golden_iq.rs. Links upstream's built libraries (not compiled by cargo):
//
//   R=/work/ref/llama_cpp_python-0.3.36/vendor/llama.cpp/ggml B=/work/ref/build/bin
//   gcc -std=gnu11 -O2 -I$R/include tests/data/quants/gen_ref.c -L$B -lggml-cpu -lggml-base -lggml -lm
//       -Wl,-rpath,$B -o /tmp/gen_ref && /tmp/gen_ref > tests/data/quants/ref_vectors.txt
//   (cd tests/data/quants && /tmp/gen_ref tensors tiny-qwen2-*.gguf) > tests/data/quants/ref_tensors.txt
//   (scripts/regenerate-references.sh quant-ref runs both and compares)
//
// The `tensors` mode: every tensor of the fixtures whose type is one of these, dequantized by
// upstream's `to_float` as one row: file, tensor, type, FNV-1a of the f32 bit patterns.
//
// For each type: deterministic pseudo-random weight blocks (random bytes with the scale fields
// set to moderate values: every other bit pattern is a valid block) and activations from the
// xorshift RNG of src/quant/test_util.rs, two row lengths (1024 and an odd number of blocks),
// then `ggml_get_type_traits(t)->to_float` (dequantize), the CPU traits' `from_float` of the
// `vec_dot_type` (activation quantizer) and `vec_dot`. A second activation set is random
// bytes (every int8 quant including -128, consistent Q8_K block sums) to pin down the kernels'
// sign_epi8 wrapping. Printed: FNV-1a hashes of the bytes / f32 bit patterns and four raw dots.
//
// libggml-cpu at /work/ref was built with GGML_NATIVE on an AVX-512 (Zen 5) machine: for these
// types ggml-cpu/arch/x86/quants.c has AVX2 kernels only (the AVX-512 flags change nothing but
// integer instructions, e.g. VNNI in mul_sum_us8_pairs_float, which are exact), so the vec_dot
// outputs are those of its AVX2 code path as compiled by GCC 12 (-O3 -march=native, with
// -ffp-contract=fast: the mul+add contractions are visible in the disassembly and modelled by
// the Rust reference).
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml.h"
#include "ggml-cpu.h"
#include "gguf.h"

// ---- RNG identical to src/quant/test_util.rs
static uint64_t S;
static void rng_new(uint64_t seed) { S = (seed * 0x9e3779b97f4a7c15ULL) | 1; }
static uint64_t next_u64(void) { uint64_t x = S; x ^= x >> 12; x ^= x << 25; x ^= x >> 27; S = x; return x * 0x2545f4914f6cdd1dULL; }
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
static uint16_t f16_bits(int lo, int hi, int sgn) {
    int e = lo + (int)below((uint64_t)(hi - lo));
    uint16_t man = (uint16_t)below(1024);
    uint16_t s = (sgn && (next_u64() & 1)) ? 0x8000 : 0;
    return s | (uint16_t)((e + 15) << 10) | man;
}
static uint64_t fnv(const void *p, size_t n) {
    const uint8_t *b = p; uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) { h ^= b[i]; h *= 0x100000001b3ULL; }
    return h;
}

// the scale fields of one weight block, set as src/quant/golden_iq.rs's `fix_scales` does
static void fix_scales(int t, uint8_t *b) {
    uint16_t h;
    switch (t) {
    case GGML_TYPE_IQ1_M: // f16 super-scale in the top nibbles of the 4 scale u16s (bytes 48..56)
        h = f16_bits(-10, -2, 0);
        for (int i = 0; i < 4; i++) { b[48 + 2 * i + 1] = (uint8_t)((b[48 + 2 * i + 1] & 0x0f) | (((h >> (4 * i)) & 0xf) << 4)); }
        return;
    case GGML_TYPE_TQ1_0: h = f16_bits(-10, -2, 1); memcpy(b + 52, &h, 2); return;
    case GGML_TYPE_TQ2_0: h = f16_bits(-10, -2, 1); memcpy(b + 64, &h, 2); return;
    case GGML_TYPE_MXFP4: b[0] = (uint8_t)(118 + below(12)); return;
    case GGML_TYPE_NVFP4: for (int i = 0; i < 4; i++) b[i] = (uint8_t)(0x08 + below(0x70)); return;
    default: h = f16_bits(-10, -2, 1); memcpy(b, &h, 2); return;
    }
}

// random activation blocks: any quant byte, moderate scale, consistent Q8_K bsums
static void random_act(int vt, uint8_t *a, size_t nblocks) {
    for (size_t k = 0; k < nblocks; k++) {
        if (vt == GGML_TYPE_Q8_K) {
            uint8_t *b = a + k * 292;
            const float m = 1.0f + (float)below(1024) / 1024.0f; // sequenced: mantissa, then exponent
            const int e = (int)below(8) - 12;
            float d = ldexpf(m, e);
            memcpy(b, &d, 4);
            for (int i = 0; i < 256; i++) b[4 + i] = (uint8_t)next_u64();
            for (int g = 0; g < 16; g++) {
                int s = 0;
                for (int i = 0; i < 16; i++) s += (int8_t)b[4 + 16 * g + i];
                int16_t s16 = (int16_t)s;
                memcpy(b + 260 + 2 * g, &s16, 2);
            }
        } else {
            uint8_t *b = a + k * 34;
            uint16_t h = f16_bits(-12, -4, 0);
            memcpy(b, &h, 2);
            for (int i = 0; i < 32; i++) b[2 + i] = (uint8_t)next_u64();
        }
    }
}

static int is_new_type(int t) {
    switch (t) {
    case GGML_TYPE_IQ2_XXS: case GGML_TYPE_IQ2_XS: case GGML_TYPE_IQ3_XXS: case GGML_TYPE_IQ1_S: case GGML_TYPE_IQ4_NL:
    case GGML_TYPE_IQ3_S: case GGML_TYPE_IQ2_S: case GGML_TYPE_IQ4_XS: case GGML_TYPE_IQ1_M: case GGML_TYPE_TQ1_0:
    case GGML_TYPE_TQ2_0: case GGML_TYPE_MXFP4: case GGML_TYPE_NVFP4: case GGML_TYPE_Q1_0: case GGML_TYPE_Q2_0: return 1;
    default: return 0;
    }
}

static int tensors(int argc, char **argv) {
    for (int i = 0; i < argc; i++) {
        struct gguf_init_params p = {.no_alloc = true, .ctx = NULL};
        struct gguf_context *g = gguf_init_from_file(argv[i], p);
        if (!g) { fprintf(stderr, "cannot read %s\n", argv[i]); return 1; }
        FILE *f = fopen(argv[i], "rb");
        const char *base = strrchr(argv[i], '/') ? strrchr(argv[i], '/') + 1 : argv[i];
        for (int64_t k = 0; k < gguf_get_n_tensors(g); k++) {
            const int t = gguf_get_tensor_type(g, k);
            if (!is_new_type(t)) continue;
            const size_t size = gguf_get_tensor_size(g, k);
            const struct ggml_type_traits *tr = ggml_get_type_traits(t);
            const int64_t n = (int64_t)(size / tr->type_size * tr->blck_size);
            uint8_t *q = malloc(size);
            float *y = malloc(sizeof(float) * (size_t)n);
            fseek(f, (long)(gguf_get_data_offset(g) + gguf_get_tensor_offset(g, k)), SEEK_SET);
            if (fread(q, 1, size, f) != size) { fprintf(stderr, "short read\n"); return 1; }
            tr->to_float(q, y, n);
            printf("%s %s %s %016llx\n", base, gguf_get_tensor_name(g, k), ggml_type_name(t), (unsigned long long)fnv(y, sizeof(float) * (size_t)n));
            free(q);
            free(y);
        }
        fclose(f);
        gguf_free(g);
    }
    return 0;
}

#define R 4
#define NMAX 2048
int main(int argc, char **argv) {
    ggml_cpu_init();
    if (argc > 1 && strcmp(argv[1], "tensors") == 0) return tensors(argc - 2, argv + 2);
    const int types[] = {GGML_TYPE_IQ2_XXS, GGML_TYPE_IQ2_XS, GGML_TYPE_IQ3_XXS, GGML_TYPE_IQ1_S, GGML_TYPE_IQ4_NL,
                         GGML_TYPE_IQ3_S, GGML_TYPE_IQ2_S, GGML_TYPE_IQ4_XS, GGML_TYPE_IQ1_M, GGML_TYPE_TQ1_0,
                         GGML_TYPE_TQ2_0, GGML_TYPE_MXFP4, GGML_TYPE_NVFP4, GGML_TYPE_Q1_0, GGML_TYPE_Q2_0};
    static float x[NMAX], deq[R * NMAX], dots[R * R];
    static uint8_t w[R * NMAX * 2], a[R * NMAX * 2];
    printf("# type n | weights dequantized | activations dots dot0..dot3 | random-activations dots\n");
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const int t = types[ti];
        const struct ggml_type_traits *tr = ggml_get_type_traits(t);
        const struct ggml_type_traits_cpu *cpu = ggml_get_type_traits_cpu(t);
        const int vt = cpu->vec_dot_type;
        const struct ggml_type_traits *vtr = ggml_get_type_traits(vt);
        const struct ggml_type_traits_cpu *vcpu = ggml_get_type_traits_cpu(vt);
        // the activation block is the larger one: 1024 and 7 of it (an odd number of blocks)
        int ablk = (int)(tr->blck_size > vtr->blck_size ? tr->blck_size : vtr->blck_size);
        const int ns[2] = {1024, 7 * ablk};
        for (int ni = 0; ni < 2; ni++) {
            const int n = ns[ni];
            const size_t wrow = (size_t)n / tr->blck_size * tr->type_size;
            const size_t arow = (size_t)n / vtr->blck_size * vtr->type_size;
            rng_new(3000 + 100 * (uint64_t)ni + (uint64_t)t);
            for (size_t k = 0; k < R * wrow; k++) w[k] = (uint8_t)next_u64();
            for (size_t blk = 0; blk < R * wrow / tr->type_size; blk++) fix_scales(t, w + blk * tr->type_size);
            for (int r = 0; r < R; r++) tr->to_float(w + r * wrow, deq + (size_t)r * n, n);
            for (int r = 0; r < R; r++) { row(x, n); vcpu->from_float(x, a + r * arow, n); }
            for (int i = 0; i < R; i++)
                for (int j = 0; j < R; j++)
                    cpu->vec_dot(n, &dots[i * R + j], 0, w + i * wrow, 0, a + j * arow, 0, 1);
            printf("%s %d | %016llx %016llx | %016llx %016llx %.9g %.9g %.9g %.9g |", ggml_type_name(t), n,
                   (unsigned long long)fnv(w, R * wrow), (unsigned long long)fnv(deq, sizeof(float) * R * n),
                   (unsigned long long)fnv(a, R * arow), (unsigned long long)fnv(dots, sizeof dots),
                   dots[0], dots[1], dots[2], dots[3]);
            random_act(vt, a, R * arow / vtr->type_size);
            for (int i = 0; i < R; i++)
                for (int j = 0; j < R; j++)
                    cpu->vec_dot(n, &dots[i * R + j], 0, w + i * wrow, 0, a + j * arow, 0, 1);
            printf(" %016llx %016llx\n", (unsigned long long)fnv(a, R * arow), (unsigned long long)fnv(dots, sizeof dots));
        }
    }
    return 0;
}
