// Upstream's staging C++ API (src/llama-ext.h of b11312), which upstream's libllama-common calls
// and libdeepseek exports under the same C++ names (src/api/ext.rs): called here as that library
// calls it, with the declarations written the way the staging header declares them.
// argv[1] = a dense tiny model, argv[2] = a tiny deepseek2 (MoE) model.
#include <cstdio>
#include <map>

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

static int failures;
#define CHECK(c) do { if (!(c)) { std::fprintf(stderr, "ext_api: %s:%d: %s\n", __FILE__, __LINE__, #c); failures++; } } while (0)

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
