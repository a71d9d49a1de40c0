/* The extended batch API (llama_batch_ext_*, llama_process), which upstream's llama-simple uses:
 * a prompt decoded through it gives the same logits, bit for bit, as through llama_decode, in
 * two steps (prompt, then one more token); upstream's error codes. argv[1] = a tiny model. */
#include <stdio.h>
#include <string.h>
#include "llama.h"
#include "log_guard.h"

static int failures;
#define CHECK(c) do { if (!(c)) { fprintf(stderr, "batch_ext: %s:%d: %s\n", __FILE__, __LINE__, #c); failures++; } } while (0)

static struct llama_context *new_context(struct llama_model *m) {
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 64; cp.n_batch = 8; cp.n_ubatch = 8; cp.n_seq_max = 2; cp.n_threads = cp.n_threads_batch = 1;
    cp.kv_unified = true;  /* a token in two sequences needs one cache stream */
    return llama_init_from_model(m, cp);
}

/* Fills `b` with tokens[0..n) of sequence 0 at positions pos0.., output on the last one. */
static void fill(struct llama_batch_ext *b, const llama_token *tokens, int n, llama_pos pos0) {
    llama_batch_ext_clear(b);
    for (int i = 0; i < n; i++) {
        int idx = llama_batch_ext_add_token(b, 0, tokens[i]);
        llama_pos p = pos0 + i;
        CHECK(idx == i && llama_batch_ext_set_pos(b, idx, &p));
    }
    CHECK(llama_batch_ext_set_output_logits(b, n - 1, true));
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: batch_ext MODEL\n"); return 2; }
    ds_log_guard_install();
    struct llama_model *m = llama_model_load_from_file(argv[1], llama_model_default_params());
    CHECK(m != NULL);
    if (!m) return 1;
    int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(m));
    struct llama_context *ext = new_context(m), *plain = new_context(m);
    CHECK(ext && plain);
    llama_token tokens[6] = {5, 17, 42, 99, 7, 3};

    struct llama_batch_ext *b = llama_batch_ext_init(ext);
    CHECK(b != NULL);
    fill(b, tokens, 5, 0);
    CHECK(llama_process(ext, LLAMA_PROCESS_TYPE_DECODE, b) == 0);
    CHECK(llama_decode(plain, llama_batch_get_one(tokens, 5)) == 0);
    const float *a = llama_get_logits_ith(ext, -1), *r = llama_get_logits_ith(plain, -1);
    CHECK(a && r && memcmp(a, r, sizeof(float) * (size_t) n_vocab) == 0);
    fill(b, tokens + 5, 1, 5);  /* the next token continues the sequence */
    CHECK(llama_process(ext, LLAMA_PROCESS_TYPE_DECODE, b) == 0);
    CHECK(llama_decode(plain, llama_batch_get_one(tokens + 5, 1)) == 0);
    a = llama_get_logits_ith(ext, -1); r = llama_get_logits_ith(plain, -1);
    CHECK(a && r && memcmp(a, r, sizeof(float) * (size_t) n_vocab) == 0);
    CHECK(llama_memory_seq_pos_max(llama_get_memory(ext), 0) == 5);

    /* A token in two sequences: both see it. */
    llama_batch_ext_clear(b);
    llama_pos p6 = 6;
    CHECK(llama_batch_ext_add_token(b, 0, 11) == 0 && llama_batch_ext_add_seq(b, 0, 1) && llama_batch_ext_set_pos(b, 0, &p6) == true);
    CHECK(!llama_batch_ext_add_seq(b, 0, 2) && !llama_batch_ext_add_seq(b, 1, 0));  /* seq >= n_seq_max, no entry 1 */
    llama_memory_seq_cp(llama_get_memory(ext), 0, 1, -1, -1);
    CHECK(llama_process(ext, LLAMA_PROCESS_TYPE_DECODE, b) == 0);
    CHECK(llama_memory_seq_pos_max(llama_get_memory(ext), 1) == 6);

    /* upstream's error codes: -3 bad sequence, -2 bad token id, -1 full; setters on missing entries */
    llama_batch_ext_clear(b);
    CHECK(llama_batch_ext_add_token(b, 2, 1) == -3 && llama_batch_ext_add_token(b, -1, 1) == -3);
    CHECK(llama_batch_ext_add_token(b, 0, n_vocab) == -2);  /* the entry stays, without a token */
    CHECK(llama_process(ext, LLAMA_PROCESS_TYPE_DECODE, b) == -1);
    llama_batch_ext_clear(b);
    for (int i = 0; i < 8; i++) CHECK(llama_batch_ext_add(b, 0) == i);
    CHECK(llama_batch_ext_add_token(b, 0, 1) == -1);
    CHECK(!llama_batch_ext_set_pos(b, 8, &p6) && !llama_batch_ext_set_pos(b, 0, NULL) && !llama_batch_ext_set_output_embd(b, -1, true));
    llama_batch_ext_clear(b);
    CHECK(llama_process(ext, LLAMA_PROCESS_TYPE_DECODE, b) == -1);  /* empty */
    fill(b, tokens, 1, 7);
    CHECK(llama_process(ext, LLAMA_PROCESS_TYPE_ENCODE, b) == -1);  /* no encoder models */
    struct llama_embd e = {NULL, 0, 0};
    CHECK(llama_batch_ext_add_embd(b, 0, e) == -1 && !llama_batch_ext_set_embd_token(b, 0, e));
    CHECK(llama_batch_ext_init(NULL) == NULL);
    CHECK(ds_log_count() > 0);

    llama_batch_ext_free(b);
    llama_batch_ext_free(NULL);
    llama_free(ext);
    llama_free(plain);
    llama_model_free(m);
    if (failures) return 1;
    printf("batch_ext: ok\n");
    return 0;
}
