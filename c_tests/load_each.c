/* Loads each model file named on the command line; a file that loads gets a context and a
 * decode, then everything is freed. Run on samples of the malformed-GGUF generator's output
 * under valgrind: a hostile file must end in NULL or a working model, never an invalid read. */
#include <stdio.h>
#include "llama.h"

static void quiet(enum ggml_log_level level, const char *text, void *ud) { (void) level; (void) text; (void) ud; }

int main(int argc, char **argv) {
    llama_log_set(quiet, NULL);
    int loaded = 0;
    for (int i = 1; i < argc; i++) {
        struct llama_model *m = llama_model_load_from_file(argv[i], llama_model_default_params());
        if (!m) continue;
        loaded++;
        struct llama_context_params cp = llama_context_default_params();
        cp.n_ctx = 64;
        cp.n_batch = 16;
        cp.n_threads = cp.n_threads_batch = 1;
        struct llama_context *c = llama_init_from_model(m, cp);
        if (c) {
            int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(m));
            llama_token toks[4];
            for (int t = 0; t < 4; t++) toks[t] = (t * 7919) % (n_vocab > 0 ? n_vocab : 1);
            llama_decode(c, llama_batch_get_one(toks, 4));
            llama_free(c);
        }
        llama_model_free(m);
    }
    printf("load_each: %d of %d files loaded\n", loaded, argc - 1);
    return 0;
}
