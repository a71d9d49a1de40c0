// chat_golden: print what llama_chat_apply_template makes of a fixed conversation, for each template given
// (a built-in name, or @FILE for a template read from a file, or MODEL.gguf for the model's own template).
#include "llama.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Built by scripts/regenerate-references.sh with -DREFERENCE_UPSTREAM='"llama.cpp b11312 (...)"'
// against upstream's libllama, every JSON object written names that build in an "upstream"
// field; built without it (e.g. against libdeepseek, to compare), the output has no such field.
#ifdef REFERENCE_UPSTREAM
#define UPSTREAM_HEAD "\"upstream\": \"" REFERENCE_UPSTREAM "\", "
#define UPSTREAM_TAIL ", \"upstream\": \"" REFERENCE_UPSTREAM "\""
#else
#define UPSTREAM_HEAD ""
#define UPSTREAM_TAIL ""
#endif

static void json_str(const char *s) {
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char) *s;
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c == '\n') printf("\\n");
        else if (c < 0x20) printf("\\u%04x", c);
        else putchar(c);
    }
    putchar('"');
}

static char *slurp(const char *p) {
    FILE *f = fopen(p, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END); long n = ftell(f); fseek(f, 0, SEEK_SET);
    char *b = malloc(n + 1);
    if (fread(b, 1, n, f) != (size_t) n) { fclose(f); return NULL; }
    b[n] = 0; fclose(f); return b;
}

int main(int argc, char **argv) {
    llama_backend_init();
    struct llama_chat_message convs[2][4] = {
        {{"system", "You are a helpful assistant."}, {"user", "Hello!"}, {"assistant", "Hi, how can I help?"}, {"user", "What is 2+2?"}},
        {{"user", "写一首关于内存的诗"}, {"assistant", "<think>\nshort\n</think>\n\n内存如水"}, {"user", "Thanks"}, {NULL, NULL}},
    };
    int conv_len[2] = {4, 3};
    for (int a = 1; a < argc; a++) {
        const char *tmpl = argv[a];
        char *owned = NULL;
        if (tmpl[0] == '@') tmpl = owned = slurp(tmpl + 1);
        else if (strstr(tmpl, ".gguf")) {
            struct llama_model_params mp = llama_model_default_params();
            mp.vocab_only = 1;
            struct llama_model *m = llama_model_load_from_file(tmpl, mp);
            tmpl = m ? llama_model_chat_template(m, NULL) : NULL;
        }
        for (int c = 0; c < 2; c++)
            for (int add = 0; add < 2; add++) {
                char buf[8192];
                int n = tmpl ? llama_chat_apply_template(tmpl, convs[c], conv_len[c], add, buf, sizeof buf) : -1;
                printf("{\"template\": "); json_str(argv[a]);
                printf(", \"conversation\": %d, \"add_assistant\": %d, \"result\": %d", c, add, n);
                if (n >= 0 && n < (int) sizeof buf) { buf[n] = 0; printf(", \"text\": "); json_str(buf); }
                printf(UPSTREAM_TAIL "}\n");
            }
        free(owned);
    }
    return 0;
}
