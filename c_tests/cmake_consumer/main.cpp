// Next-token argmax through llama.h, written as a C++ program would use it.
// usage: consumer MODEL PROMPT   prints "tokens: <ids>" then "argmax: <id> <piece>"
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "llama.h"

namespace {
struct ModelFree { void operator()(llama_model *m) const { llama_model_free(m); } };
struct ContextFree { void operator()(llama_context *c) const { llama_free(c); } };
void quiet(ggml_log_level, const char *, void *) {}
}  // namespace

int main(int argc, char **argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: %s MODEL PROMPT\n", argv[0]);
        return 2;
    }
    llama_log_set(quiet, nullptr);
    llama_backend_init();
    std::unique_ptr<llama_model, ModelFree> model(llama_model_load_from_file(argv[1], llama_model_default_params()));
    if (!model) {
        std::fprintf(stderr, "cannot load %s\n", argv[1]);
        return 1;
    }
    const llama_vocab *vocab = llama_model_get_vocab(model.get());
    const std::string prompt = argv[2];
    const int n = -llama_tokenize(vocab, prompt.c_str(), (int32_t) prompt.size(), nullptr, 0, true, true);
    std::vector<llama_token> tokens(n);
    if (n <= 0 || llama_tokenize(vocab, prompt.c_str(), (int32_t) prompt.size(), tokens.data(), n, true, true) != n) {
        std::fprintf(stderr, "tokenization failed\n");
        return 1;
    }
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 64;
    cp.n_threads = cp.n_threads_batch = 2;
    std::unique_ptr<llama_context, ContextFree> ctx(llama_init_from_model(model.get(), cp));
    if (!ctx || llama_decode(ctx.get(), llama_batch_get_one(tokens.data(), n)) != 0) {
        std::fprintf(stderr, "decode failed\n");
        return 1;
    }
    const float *logits = llama_get_logits_ith(ctx.get(), -1);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    llama_token best = 0;
    for (llama_token t = 1; t < n_vocab; t++) {
        if (logits[t] > logits[best]) best = t;
    }
    char piece[64];
    const int len = llama_token_to_piece(vocab, best, piece, sizeof piece, 0, true);
    std::printf("tokens:");
    for (llama_token t : tokens) std::printf(" %d", t);
    std::printf("\nargmax: %d %.*s\n", best, len > 0 ? len : 0, piece);
    return 0;
}
