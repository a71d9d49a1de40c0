// Upstream's staging C++ API (src/llama-ext.h of b11312), which upstream's libllama-common calls
// and libdeepseek exports under the same C++ names (src/api/ext.rs): called here as that library
// calls it, with the declarations written the way the staging header declares them.
// The two whose arguments or values are C++ objects (a std::map returned by value, a
// std::vector of vectors) come from src/api/ext_shim.cpp, compiled by the C++ compiler.
// argv[1] = a dense tiny model, argv[2] = a tiny deepseek2 (MoE) model.
#include <cmath>
#include <cstdio>
#include <map>
#include <vector>

#include "llama.h"
#include "log_guard.h"

struct llama_memory_breakdown_data {
    size_t model = 0;
    size_t context = 0;
    size_t compute = 0;
};
using llama_memory_breakdown = std::map<ggml_backend_buffer_type_t, llama_memory_breakdown_data>;

int32_t llama_model_n_expert(const llama_model *model);
int32_t llama_model_n_devices(const llama_model *model);
ggml_backend_dev_t llama_model_get_device(const llama_model *model, int i);
llama_memory_breakdown llama_get_memory_breakdown(const llama_context *ctx);
float *llama_get_embeddings_nextn(llama_context *ctx);
llama_context *llama_get_ctx_other(llama_context *ctx);
const int32_t *llama_model_target_layer_ids(const llama_model *model);
uint32_t llama_model_target_layer_ids_n(const llama_model *model);
int32_t llama_model_dflash_selector_top_k(const llama_model *model);
// src/llama-sampler.h (upstream's test-sampling calls it)
llama_sampler *llama_sampler_init_dry_testing(float dry_multiplier, float dry_base, int32_t dry_allowed_length,
                                              int32_t dry_penalty_last_n, const std::vector<std::vector<llama_token>> &seq_breakers);

static int failures;
#define CHECK(c) do { if (!(c)) { std::fprintf(stderr, "ext_api: %s:%d: %s\n", __FILE__, __LINE__, #c); failures++; } } while (0)

// One of upstream's test_dry cases (tests/test-sampling.cpp of b11312, with its expected
// probabilities, computed by upstream's sampler): the candidates' logits are log(probs), the
// sampler accepts `last`, then it and dist(0) are applied; every probability within 1e-5.
static void check_dry(const std::vector<float> &probs, const std::vector<llama_token> &last, const std::vector<float> &expected,
                      float multiplier, float base, int allowed_length, int last_n,
                      const std::vector<std::vector<llama_token>> &breakers, int line) {
    std::vector<llama_token_data> cur;
    for (size_t i = 0; i < probs.size(); i++) cur.push_back({(llama_token) i, std::log(probs[i]), probs[i]});
    llama_token_data_array arr = {cur.data(), cur.size(), -1, false};
    llama_sampler *dry = llama_sampler_init_dry_testing(multiplier, base, allowed_length, last_n, breakers);
    llama_sampler *dist = llama_sampler_init_dist(0);
    if (!dry || !dist) { std::fprintf(stderr, "ext_api: line %d: no sampler\n", line); failures++; return; }
    for (llama_token t : last) llama_sampler_accept(dry, t);
    llama_sampler_apply(dry, &arr);
    llama_sampler_apply(dist, &arr);
    llama_sampler_free(dry);
    llama_sampler_free(dist);
    for (size_t i = 0; i < arr.size; i++) {
        if (!(std::fabs(arr.data[i].p - expected[arr.data[i].id]) < 1e-5f)) {
            std::fprintf(stderr, "ext_api: dry case of line %d: token %d p %f, upstream %f\n", line, arr.data[i].id, arr.data[i].p, expected[arr.data[i].id]);
            failures++;
        }
    }
}

int main(int argc, char **argv) {
    if (argc < 3) { std::fprintf(stderr, "usage: ext_api DENSE_MODEL MOE_MODEL\n"); return 2; }
    ds_log_guard_install();
    llama_model *dense = llama_model_load_from_file(argv[1], llama_model_default_params());
    llama_model *moe = llama_model_load_from_file(argv[2], llama_model_default_params());
    CHECK(dense && moe);
    if (!dense || !moe) return 1;
    CHECK(llama_model_n_expert(dense) == 0 && llama_model_n_expert(moe) > 1);
    CHECK(llama_model_n_devices(dense) == 0 && llama_model_get_device(dense, 0) == nullptr);
    CHECK(llama_model_target_layer_ids(dense) == nullptr && llama_model_target_layer_ids_n(dense) == 0);
    CHECK(llama_model_dflash_selector_top_k(dense) == 0);

    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 64;
    llama_context *ctx = llama_init_from_model(dense, cp);
    CHECK(ctx != nullptr);
    {
        // an empty std::map built by the library: usable like any other, then destroyed here
        llama_memory_breakdown mb = llama_get_memory_breakdown(ctx);
        CHECK(mb.empty() && mb.size() == 0 && mb.begin() == mb.end());
        mb[nullptr].model = 7;
        mb[reinterpret_cast<ggml_backend_buffer_type_t>(&failures)].compute = 3;
        llama_memory_breakdown copy = mb;
        CHECK(copy.size() == 2 && copy.at(nullptr).model == 7 && mb.begin()->first == nullptr);
        mb.clear();
        CHECK(mb.empty() && copy.size() == 2);
    }
    {
        // a NULL context: logged, and still an empty map
        const int before = ds_log_count();
        llama_memory_breakdown mb = llama_get_memory_breakdown(nullptr);
        CHECK(mb.empty() && ds_log_count() == before + 1);
    }
    // upstream's DRY cases: no breakers; a breaker (token 3) that stops the penalty on the
    // repeat "0 1" (without it token 3 would be penalized); a larger multiplier; too short a repeat
    check_dry({0.25f, 0.25f, 0.25f, 0.25f}, {0, 1, 2, 0, 1}, {0.296923f, 0.296923f, 0.109232f, 0.296923f}, 1.0f, 1.1f, 2, 5, {}, __LINE__);
    check_dry({0.2f, 0.2f, 0.2f, 0.2f, 0.2f}, {0, 1, 3, 4, 0, 1}, {0.2f, 0.2f, 0.2f, 0.2f, 0.2f}, 1.0f, 1.1f, 2, 6, {{3}}, __LINE__);
    check_dry({0.2f, 0.2f, 0.2f, 0.2f, 0.2f}, {0, 1, 2, 0, 1}, {0.241818f, 0.241818f, 0.032727f, 0.241818f, 0.241818f}, 2.0f, 1.1f, 2, 5, {}, __LINE__);
    check_dry({0.2f, 0.2f, 0.2f, 0.2f, 0.2f}, {0, 1, 2, 3, 4, 0, 1}, {0.2f, 0.2f, 0.2f, 0.2f, 0.2f}, 1.0f, 1.1f, 4, 7, {}, __LINE__);
    CHECK(llama_get_ctx_other(ctx) == nullptr);
    const int before = ds_log_count();
    CHECK(llama_get_embeddings_nextn(ctx) == nullptr && ds_log_count() == before + 1);  // not supported: logged

    llama_free(ctx);
    llama_model_free(moe);
    llama_model_free(dense);
    if (failures) return 1;
    std::printf("ext_api: ok\n");
    return 0;
}
