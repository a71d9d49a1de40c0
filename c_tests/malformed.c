/* Malformed GGUF files must be rejected by llama_model_load_from_file with NULL (and a logged
 * reason), never a crash. The files are written here: a small valid llama model first (which
 * must load), then one variant per defect, then every truncation of the valid file. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "llama.h"
#include "log_guard.h"

enum defect {
    OK, BAD_MAGIC, VERSION_1, VERSION_4, HUGE_KV_COUNT, HUGE_TENSOR_COUNT, HUGE_KEY_LEN, HUGE_STR_LEN,
    HUGE_ARRAY_LEN, BAD_VALUE_TYPE, BAD_BOOL, BAD_ALIGNMENT, DUP_KEY, MISSING_ARCH, MISSING_EMBD_KEY,
    UNKNOWN_ARCH, TOO_MANY_DIMS, ZERO_DIMS, DIM_OVERFLOW, UNKNOWN_TENSOR_TYPE, REMOVED_TENSOR_TYPE,
    OFFSET_OUT_OF_BOUNDS, MISALIGNED_OFFSET, OVERLAPPING_OFFSET, DUP_TENSOR, MISSING_TENSOR,
    SHAPE_MISMATCH, BAD_ROW_BLOCKS, HEADS_NOT_DIVISIBLE, N_DEFECTS
};
static const char *names[] = {
    "ok", "bad magic", "version 1", "version 4", "huge kv count", "huge tensor count", "huge key length",
    "huge string length", "huge array length", "bad value type", "bad bool", "bad alignment", "duplicate key",
    "missing architecture", "missing embedding_length", "unknown architecture", "too many dims", "zero dim",
    "dimension overflow", "unknown tensor type", "removed tensor type", "offset out of bounds",
    "misaligned offset", "overlapping offset", "duplicate tensor", "missing tensor", "shape mismatch",
    "row not a multiple of the block", "heads not divisible"};
/* The reason each defect must be refused with (a substring of the logged line). */
static const char *reasons[] = {
    "", "bad magic 0x46554746: not a GGUF file", "unsupported GGUF version 1", "unsupported GGUF version 4",
    "metadata count 4611686018427387904 exceeds what the file can hold",
    "tensor count 4611686018427387904 exceeds what the file can hold", "key of metadata entry 0 = 1152921504606846976 exceeds", "general.name = 2305843009213693952 exceeds",
    "length of array 'general.list' = 4611686018427387904 exceeds", "metadata 'general.odd': unknown value type 13",
    "metadata 'general.flag': bool value 7 is neither 0 nor 1", "general.alignment must be a power-of-two u32",
    "duplicate metadata key 'llama.block_count'", "missing required key 'general.architecture'",
    "missing or invalid required key 'llama.embedding_length'", "unsupported architecture 'gpt-j'",
    "tensor 'token_embd.weight': 5 dimensions (1 to 4 supported)", "tensor 'output_norm.weight': dimension 0 = 0 is out of range",
    "tensor 'token_embd.weight': dimensions [4294967296, 4294967296, 1, 1] overflow",
    "tensor 'blk.0.attn_norm.weight': unknown or unsupported tensor type 99",
    "tensor 'blk.0.attn_norm.weight': unknown or unsupported tensor type 4",
    "tensor 'blk.0.attn_k.weight': data offset 1099511627776, expected",
    "tensor 'blk.0.attn_k.weight': data offset 12548 is not aligned to 32",
    "tensor 'blk.0.attn_k.weight': data offset 0, expected", "duplicate tensor name 'blk.0.ffn_down.weight'",
    "missing required tensor 'blk.0.ffn_down.weight'", "tensor 'blk.0.attn_q.weight' has shape [32, 16], expected [32, 32]",
    "tensor 'blk.0.attn_q.weight': row length 33 is not a multiple of q8_0's block of 32",
    "head_count 3 is not a multiple of head_count_kv 2"};
_Static_assert(sizeof names / sizeof *names == N_DEFECTS && sizeof reasons / sizeof *reasons == N_DEFECTS, "one name and one reason per defect");

#define E 32
#define V 64
#define FF 64
struct buf { unsigned char *p; size_t n, cap; };
static void put(struct buf *b, const void *d, size_t n) {
    if (b->n + n > b->cap) { b->cap = (b->n + n) * 2; b->p = realloc(b->p, b->cap); }
    memcpy(b->p + b->n, d, n); b->n += n;
}
static void u32(struct buf *b, uint32_t v) { put(b, &v, 4); }
static void u64(struct buf *b, uint64_t v) { put(b, &v, 8); }
static void str(struct buf *b, const char *s) { u64(b, strlen(s)); put(b, s, strlen(s)); }
static void kv_u32(struct buf *b, const char *k, uint32_t v) { str(b, k); u32(b, 4); u32(b, v); }
static void kv_f32(struct buf *b, const char *k, float v) { str(b, k); u32(b, 6); put(b, &v, 4); }
static void kv_str(struct buf *b, const char *k, const char *v) { str(b, k); u32(b, 8); str(b, v); }

struct tensor { char name[64]; int nd; uint64_t ne[4]; uint32_t type; };

static size_t nbytes(const struct tensor *t) {
    size_t n = 4;
    for (int i = 0; i < t->nd; i++) n *= t->ne[i];
    return n;
}

static struct buf build(enum defect d) {
    struct buf b = {0};
    struct tensor ts[16];
    memset(ts, 0, sizeof ts);
    int nt = 0;
#define T1(n, a) do { snprintf(ts[nt].name, 64, "%s", n); ts[nt].nd = 1; ts[nt].ne[0] = a; ts[nt].type = 0; nt++; } while (0)
#define T2(n, a, c) do { snprintf(ts[nt].name, 64, "%s", n); ts[nt].nd = 2; ts[nt].ne[0] = a; ts[nt].ne[1] = c; ts[nt].type = 0; nt++; } while (0)
    T2("token_embd.weight", E, V); T1("output_norm.weight", E);
    T1("blk.0.attn_norm.weight", E); T2("blk.0.attn_q.weight", E, E); T2("blk.0.attn_k.weight", E, E);
    T2("blk.0.attn_v.weight", E, E); T2("blk.0.attn_output.weight", E, E); T1("blk.0.ffn_norm.weight", E);
    T2("blk.0.ffn_gate.weight", E, FF); T2("blk.0.ffn_up.weight", E, FF); T2("blk.0.ffn_down.weight", FF, E);
    if (d == MISSING_TENSOR) nt--;
    if (d == DUP_TENSOR) { ts[nt] = ts[nt - 1]; nt++; }
    if (d == SHAPE_MISMATCH) ts[3].ne[1] = E / 2;
    if (d == TOO_MANY_DIMS) ts[0].nd = 5;
    if (d == ZERO_DIMS) ts[1].ne[0] = 0;
    if (d == DIM_OVERFLOW) { ts[0].nd = 4; ts[0].ne[0] = 1ull << 32; ts[0].ne[1] = 1ull << 32; ts[0].ne[2] = 1; ts[0].ne[3] = 1; }
    if (d == UNKNOWN_TENSOR_TYPE) ts[2].type = 99;
    if (d == REMOVED_TENSOR_TYPE) ts[2].type = 4;
    if (d == BAD_ROW_BLOCKS) { ts[3].type = 8; ts[3].ne[0] = E + 1; }

    int nkv = 13 + (d == DUP_KEY) - (d == MISSING_ARCH) - (d == MISSING_EMBD_KEY) + (d == BAD_ALIGNMENT) + (d == BAD_BOOL) + (d == HUGE_ARRAY_LEN) + (d == BAD_VALUE_TYPE);
    u32(&b, d == BAD_MAGIC ? 0x46554746u : 0x46554747u);
    u32(&b, d == VERSION_1 ? 1 : d == VERSION_4 ? 4 : 3);
    u64(&b, d == HUGE_TENSOR_COUNT ? (1ull << 62) : (uint64_t) nt);
    u64(&b, d == HUGE_KV_COUNT ? (1ull << 62) : (uint64_t) nkv);
    /* The huge lengths are followed by the rest of the file, so that the length itself (not the
     * file's end) is what the reader must refuse. */
    if (d == HUGE_KEY_LEN) u64(&b, 1ull << 60);
    if (d != MISSING_ARCH) kv_str(&b, "general.architecture", d == UNKNOWN_ARCH ? "gpt-j" : "llama");
    if (d == HUGE_STR_LEN) { str(&b, "general.name"); u32(&b, 8); u64(&b, 1ull << 61); }
    else kv_str(&b, "general.name", "malformed-test");
    kv_u32(&b, "llama.context_length", 128);
    if (d != MISSING_EMBD_KEY) kv_u32(&b, "llama.embedding_length", E);
    kv_u32(&b, "llama.block_count", 1);
    kv_u32(&b, "llama.feed_forward_length", FF);
    kv_u32(&b, "llama.attention.head_count", d == HEADS_NOT_DIVISIBLE ? 3 : 2);
    kv_u32(&b, "llama.attention.head_count_kv", 2);
    kv_f32(&b, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    kv_f32(&b, "llama.rope.freq_base", 10000.0f);
    kv_u32(&b, "general.file_type", 0);
    kv_str(&b, "tokenizer.ggml.model", "none");
    kv_u32(&b, "llama.vocab_size", V);
    if (d == DUP_KEY) kv_u32(&b, "llama.block_count", 1);
    if (d == BAD_ALIGNMENT) kv_u32(&b, "general.alignment", 24);
    if (d == BAD_BOOL) { str(&b, "general.flag"); u32(&b, 7); unsigned char x = 7; put(&b, &x, 1); }
    if (d == HUGE_ARRAY_LEN) { str(&b, "general.list"); u32(&b, 9); u32(&b, 5); u64(&b, 1ull << 62); }
    if (d == BAD_VALUE_TYPE) { str(&b, "general.odd"); u32(&b, 13); u32(&b, 0); }

    uint64_t off = 0;
    for (int i = 0; i < nt; i++) {
        str(&b, ts[i].name);
        u32(&b, ts[i].nd);
        for (int j = 0; j < ts[i].nd; j++) u64(&b, j < 4 ? ts[i].ne[j] : 1);
        u32(&b, ts[i].type);
        uint64_t o = off;
        if (i == 4 && d == OFFSET_OUT_OF_BOUNDS) o = 1ull << 40;
        if (i == 4 && d == MISALIGNED_OFFSET) o = off + 4;
        if (i == 4 && d == OVERLAPPING_OFFSET) o = 0;
        u64(&b, o);
        if (ts[i].type == 0 && ts[i].nd <= 4) off += (nbytes(&ts[i]) + 31) / 32 * 32;
    }
    while (b.n % 32) { unsigned char z = 0; put(&b, &z, 1); }
    if (off > (1u << 24)) off = 1u << 24;
    unsigned char *data = calloc(1, off ? off : 1);
    for (size_t i = 0; i < off / 4; i++) ((float *) data)[i] = (float) ((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    put(&b, data, off);
    free(data);
    return b;
}

static struct llama_model *load_bytes(const unsigned char *p, size_t n, const char *path) {
    FILE *f = fopen(path, "wb");
    if (!f) { perror("fopen"); exit(2); }
    fwrite(p, 1, n, f);
    fclose(f);
    return llama_model_load_from_file(path, llama_model_default_params());
}

int main(void) {
    int failures = 0, rejected = 0;
    ds_log_guard_install();
    char path[64];
    snprintf(path, sizeof path, "/tmp/ds-malformed-%d.gguf", (int) getpid());

    struct buf good = build(OK);
    struct llama_model *m = load_bytes(good.p, good.n, path);
    if (!m) { fprintf(stderr, "malformed: the valid base model did not load\n"); return 1; }
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 64; cp.n_threads = 1; cp.n_threads_batch = 1;
    struct llama_context *c = llama_init_from_model(m, cp);
    llama_token toks[3] = {1, 2, 3};
    if (!c || llama_decode(c, llama_batch_get_one(toks, 3)) != 0) { fprintf(stderr, "malformed: base model does not decode\n"); return 1; }
    llama_free(c);
    llama_model_free(m);

    for (int d = 1; d < N_DEFECTS; d++) {
        struct buf b = build((enum defect) d);
        ds_log_mark();
        m = load_bytes(b.p, b.n, path);
        if (m) { fprintf(stderr, "malformed: '%s' was accepted\n", names[d]); failures++; llama_model_free(m); }
        else if (!ds_log_has("llama_model_load_from_file: ") || !ds_log_has(reasons[d])) {
            fprintf(stderr, "malformed: '%s' rejected without its reason ('%s'); logged: %s\n", names[d], reasons[d], ds_log_since_mark());
            failures++;
        } else rejected++;
        if (getenv("MALFORMED_VERBOSE")) fprintf(stderr, "%s: %s", names[d], ds_log_since_mark());
        free(b.p);
    }
    /* Every truncation of the valid file. */
    for (size_t n = 0; n < good.n; n += (n < 1024 ? 1 : 61)) {
        ds_log_mark();
        m = load_bytes(good.p, n, path);
        if (m) { fprintf(stderr, "malformed: truncation to %zu bytes was accepted\n", n); failures++; llama_model_free(m); }
        else if (!ds_log_has("llama_model_load_from_file: ") || !(ds_log_has("truncated file: ") || ds_log_has("beyond the end of the file") || ds_log_has("exceeds what the"))) {
            fprintf(stderr, "malformed: truncation to %zu bytes rejected without saying the file is short: %s\n", n, ds_log_since_mark());
            failures++;
        }
        else rejected++;
        if (getenv("MALFORMED_VERBOSE")) fprintf(stderr, "truncated to %zu: %s", n, ds_log_since_mark());
    }
    /* Load mode NONE (owned buffer) takes the same checks. */
    struct buf bad = build(OFFSET_OUT_OF_BOUNDS);
    FILE *f = fopen(path, "wb"); fwrite(bad.p, 1, bad.n, f); fclose(f);
    struct llama_model_params mp = llama_model_default_params();
    mp.load_mode = LLAMA_LOAD_MODE_NONE;
    ds_log_mark();
    if (llama_model_load_from_file(path, mp)) { fprintf(stderr, "malformed: accepted with LOAD_MODE_NONE\n"); failures++; }
    else if (!ds_log_has(reasons[OFFSET_OUT_OF_BOUNDS])) { fprintf(stderr, "malformed: LOAD_MODE_NONE refused without its reason: %s\n", ds_log_since_mark()); failures++; }
    ds_log_mark();
    if (llama_model_load_from_file("/nonexistent/model.gguf", llama_model_default_params())) failures++;
    else if (!ds_log_has("/nonexistent/model.gguf: No such file or directory")) { fprintf(stderr, "malformed: a missing file refused without its reason: %s\n", ds_log_since_mark()); failures++; }
    ds_log_mark();
    if (llama_model_load_from_file(NULL, llama_model_default_params())) failures++;
    else if (!ds_log_has("llama_model_load_from_file: path_model is NULL")) { fprintf(stderr, "malformed: a NULL path refused without its reason: %s\n", ds_log_since_mark()); failures++; }
    free(bad.p);
    free(good.p);
    unlink(path);
    if (failures) return 1;
    printf("malformed: %d malformed files rejected, each with its reason\n", rejected);
    return 0;
}
