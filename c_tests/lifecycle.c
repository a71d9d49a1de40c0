/* Create/free loop through the C API, for valgrind memcheck: contexts created, used (a prompt,
 * greedy steps, memory operations, monitoring calls) and freed, models loaded and freed, a
 * sampler chain made and freed; at the end every live counter of ds_stats reads zero.
 * argv[1] = a tiny model, argv[2] = cycles (default 20). */
#include <stdio.h>
#include <stdlib.h>
#include "llama.h"
#include "log_guard.h"

static int failures;
#define CHECK(c) do { if (!(c)) { fprintf(stderr, "lifecycle: %s:%d: %s\n", __FILE__, __LINE__, #c); failures++; } } while (0)

static void use_context(struct llama_model *m, int cycle) {
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 128;
    cp.n_batch = 64;
    cp.n_seq_max = 1 + cycle % 3;
    cp.n_threads = cp.n_threads_batch = 1 + cycle % 2;
    struct llama_context *c = llama_init_from_model(m, cp);
    CHECK(c != NULL);
    if (!c) return;
    const struct llama_vocab *v = llama_model_get_vocab(m);
    llama_token prompt[16];
    int n = llama_tokenize(v, "create, use, free", 17, prompt, 16, true, false);
    CHECK(n > 0);
    CHECK(llama_decode(c, llama_batch_get_one(prompt, n)) == 0);
    struct llama_sampler *s = llama_sampler_chain_init(llama_sampler_chain_default_params());
    llama_sampler_chain_add(s, llama_sampler_init_top_k(8));
    llama_sampler_chain_add(s, llama_sampler_init_greedy());
    for (int i = 0; i < 4; i++) {
        llama_token t = llama_sampler_sample(s, c, -1);
        CHECK(t >= 0);
        CHECK(llama_decode(c, llama_batch_get_one(&t, 1)) == 0);
    }
    llama_memory_t mem = llama_get_memory(c);
    CHECK(llama_memory_seq_pos_max(mem, 0) == n + 3);
    struct ds_context_stats cs;
    CHECK(ds_context_stats(c, &cs) == 0 && cs.decode_calls == 5 && cs.kv_cells_used == (uint32_t) (n + 4));
    llama_memory_seq_rm(mem, 0, 2, -1);
    CHECK(llama_memory_seq_pos_max(mem, 0) == 1);
    char metrics[64];
    CHECK(ds_metrics_prometheus(metrics, sizeof metrics) > (int64_t) sizeof metrics);
    llama_sampler_free(s);
    llama_free(c);
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: lifecycle MODEL [CYCLES]\n"); return 2; }
    int cycles = argc > 2 ? atoi(argv[2]) : 20;
    ds_log_guard_install();
    for (int i = 0; i < cycles; i++) {
        struct llama_model *m = llama_model_load_from_file(argv[1], llama_model_default_params());
        CHECK(m != NULL);
        if (!m) break;
        for (int j = 0; j < 3; j++) use_context(m, i * 3 + j);
        llama_model_free(m);
    }
    struct ds_stats st;
    CHECK(ds_stats_get(&st) == 0);
    CHECK(st.live_models == 0 && st.live_contexts == 0 && st.live_samplers == 0);
    CHECK(st.mapped_model_bytes == 0 && st.owned_model_bytes == 0 && st.kv_bytes == 0);
    CHECK(st.kv_metadata_bytes == 0 && st.scratch_bytes == 0 && st.seq_snapshots_live == 0);
    CHECK(st.decode_calls == (uint64_t) cycles * 3 * 5);
    CHECK(ds_stats_get(NULL) == -1);
    if (failures) { fprintf(stderr, "lifecycle: %d failures\n", failures); return 1; }
    printf("lifecycle: %d model cycles, %d contexts: ok\n", cycles, cycles * 3);
    return 0;
}
