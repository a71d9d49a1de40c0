/* Loads each model file named on the command line twice, mapped (LLAMA_LOAD_MODE_MMAP) and read
 * into memory (LLAMA_LOAD_MODE_NONE); a model that loads gets a context and a decode, then
 * everything is freed. Run on samples of the malformed-GGUF generator's output under valgrind:
 * a hostile file must end in NULL or a working model, never an invalid read.
 *
 * Prints one report line per file and load mode, which tests/c_harness.rs checks against the
 * library's own answer for the same file and mode:
 *   PATH (mmap|none): rejected: <the reason line the library logged>
 *   PATH (mmap|none): loaded; context refused: <the reason line the library logged>
 *   PATH (mmap|none): loaded; decode <llama_decode's return value>
 * A refusal without a logged reason, or a caught panic (log_guard.h), fails the program. */
#include <stdio.h>
#include <string.h>
#include "llama.h"
#include "log_guard.h"

/* Prints the logged line that contains `what` (with its newline), or returns 0 if none does. */
static int print_reason(const char *what) {
    const char *text = ds_log_since_mark(), *at = strstr(text, what);
    if (!at) return 0;
    while (at > text && at[-1] != '\n') at--;
    const char *end = strchr(at, '\n');
    printf("%.*s\n", end ? (int) (end - at) : (int) strlen(at), at);
    return 1;
}

int main(int argc, char **argv) {
    ds_log_guard_install();
    static const struct { enum llama_load_mode mode; const char *name; } modes[] = {
        {LLAMA_LOAD_MODE_MMAP, "mmap"}, {LLAMA_LOAD_MODE_NONE, "none"}};
    int loaded = 0, failures = 0;
    for (int i = 1; i < argc; i++) {
        for (int k = 0; k < 2; k++) {
            struct llama_model_params mp = llama_model_default_params();
            mp.load_mode = modes[k].mode;
            ds_log_mark();
            struct llama_model *m = llama_model_load_from_file(argv[i], mp);
            if (!m) {
                printf("%s (%s): rejected: ", argv[i], modes[k].name);
                if (!print_reason("llama_model_load_from_file: ")) { printf("WITHOUT A REASON\n"); failures++; }
                continue;
            }
            loaded++;
            struct llama_context_params cp = llama_context_default_params();
            cp.n_ctx = 64;
            cp.n_batch = 16;
            cp.n_threads = cp.n_threads_batch = 1;
            ds_log_mark();
            struct llama_context *c = llama_init_from_model(m, cp);
            if (c) {
                int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(m));
                llama_token toks[4];
                for (int t = 0; t < 4; t++) toks[t] = (t * 7919) % (n_vocab > 0 ? n_vocab : 1);
                printf("%s (%s): loaded; decode %d\n", argv[i], modes[k].name, llama_decode(c, llama_batch_get_one(toks, 4)));
                llama_free(c);
            } else {
                printf("%s (%s): loaded; context refused: ", argv[i], modes[k].name);
                if (!print_reason("llama_init_from_model: ")) { printf("WITHOUT A REASON\n"); failures++; }
            }
            llama_model_free(m);
        }
    }
    printf("load_each: %d of %d loads succeeded\n", loaded, 2 * (argc - 1));
    return failures ? 1 : 0;
}
