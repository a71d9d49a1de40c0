// chat_golden: print what llama_chat_apply_template makes of a fixed conversation, for each template given
// (a built-in name, or @FILE for a template read from a file, or MODEL.gguf for the model's own template).
//
// chat_golden --all [NAME TEMPLATE]... [--test-chat-template [NAME TEMPLATE]...]: one JSON object (tests/data/chat/builtin-templates.json):
// upstream's llama_chat_builtin_templates list, the conversations below, and per built-in name
// (all of them, from that list) and per NAME TEMPLATE pair given (chat_cases.py's) the result and
// text of llama_chat_apply_template for some conversations, with and without the assistant prefix.
// A string that is not UTF-8 is written as {"hex": "..."}.
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

// --all: conversations with and without a system message, multi-turn, ending with either side,
// contents with leading/trailing whitespace (C's isspace set and a no-break space, which is not in
// it), several and late system messages, roles beyond the usual three (tool calls, capitals,
// non-ASCII, empty), no message at all, bytes that are not UTF-8, test-chat-template.cpp's own
// conversation, and a short one with tool roles for the template strings.
static const struct llama_chat_message ALL_CONVS[][8] = {
    {{"system", " Be brief.\n"}, {"user", "Hi"}, {"assistant", "  Hello!  "}, {"user", "Why?\t"}},
    {{"user", "\v\fOne\r"}, {"assistant", "Two"}, {"user", "\xc2\xa0Three\xc2\xa0"}},
    {{"user", "q"}, {"assistant", " a "}},
    {{"system", "S1"}, {"system", " S2 "}, {"user", "u"}, {"assistant", "a"}, {"system", "S3"}, {"user", "v"}},
    {{"user", "x"}, {"tool", "t"}, {"function", "f"}, {"assistant_tool_call", "c"}, {"User", "U"}, {"\xc3\xa4", "\xc3\xa4"}, {"", ""}, {"assistant", "end"}},
    {{NULL, NULL}},
    {{"system", "\xff"}, {"user", "caf\xe9 "}, {"\xe9t\xe9", "x"}},
    {{"system", "You are a helpful assistant"}, {"user", "Hello"}, {"assistant", "Hi there"}, {"user", "Who are you"},
     {"assistant", "   I am an assistant   "}, {"user", "Another question"}},
    {{"system", " S "}, {"user", "U"}, {"tool", "T"}, {"assistant_tool_call", "C"}, {"assistant", " A "}, {"user", "V"}},
};
static const int ALL_CONV_LEN[] = {4, 3, 2, 6, 8, 0, 3, 6, 6};
#define N_ALL_CONVS ((int) (sizeof ALL_CONV_LEN / sizeof ALL_CONV_LEN[0]))
// which conversations a built-in name and a template string run (a string's family is also a
// built-in's, so it needs only enough to tell the families apart); the strings after the argument
// --test-chat-template also run that test's conversation, as it does
static const int BUILTIN_CONVS[] = {0, 1, 2, 3, 4, 5, 6, 8};

static int is_utf8(const unsigned char *s) {
    while (*s) {
        int n = *s < 0x80 ? 0 : (*s & 0xe0) == 0xc0 && *s >= 0xc2 ? 1 : (*s & 0xf0) == 0xe0 ? 2 : (*s & 0xf8) == 0xf0 && *s <= 0xf4 ? 3 : -1;
        if (n < 0) return 0;
        for (s++; n > 0; n--, s++)
            if ((*s & 0xc0) != 0x80) return 0; // (overlong and surrogate forms do not occur here)
    }
    return 1;
}

static void json_bytes(const char *s) {
    if (is_utf8((const unsigned char *) s)) { json_str(s); return; }
    printf("{\"hex\": \"");
    for (; *s; s++) printf("%02x", (unsigned char) *s);
    printf("\"}");
}

// one conversation without and with the assistant prefix: [conv, result, result with prefix,
// text, the text with the prefix beyond the first text] (texts only for results >= 0)
static void run(const char *tmpl, int c) {
    static char buf[2][65536];
    int n[2];
    for (int add = 0; add < 2; add++) {
        n[add] = llama_chat_apply_template(tmpl, ALL_CONVS[c], ALL_CONV_LEN[c], add, buf[add], sizeof buf[add]);
        if (n[add] >= (int) sizeof buf[add]) { fprintf(stderr, "chat_golden: result of %d bytes\n", n[add]); exit(1); }
        if (n[add] >= 0) buf[add][n[add]] = 0;
    }
    printf("[%d, %d, %d", c, n[0], n[1]);
    if (n[0] >= 0 && n[1] >= 0) {
        if (memcmp(buf[0], buf[1], n[0])) { fprintf(stderr, "chat_golden: the prefix changes more than the end\n"); exit(1); }
        printf(", "); json_bytes(buf[0]); printf(", "); json_bytes(buf[1] + n[0]);
    } else if (n[0] >= 0 || n[1] >= 0) {
        fprintf(stderr, "chat_golden: -1 only one way\n"); exit(1);
    }
    printf("]");
}

static int main_all(int argc, char **argv) {
    int n_names = llama_chat_builtin_templates(NULL, 0);
    const char **names = calloc(n_names, sizeof *names);
    llama_chat_builtin_templates(names, n_names);
    printf("{" UPSTREAM_HEAD "\"producer\": \"tests/data/gen/chat_golden.c --all with tests/data/gen/chat_cases.py\",\n\"builtin_names\": [");
    for (int i = 0; i < n_names; i++) { if (i) printf(", "); json_str(names[i]); }
    printf("],\n\"conversations\": [");
    for (int c = 0; c < N_ALL_CONVS; c++) {
        printf(c ? ",\n  [" : "\n  [");
        for (int m = 0; m < ALL_CONV_LEN[c]; m++) {
            printf(m ? ", [" : "[");
            json_bytes(ALL_CONVS[c][m].role); printf(", "); json_bytes(ALL_CONVS[c][m].content);
            printf("]");
        }
        printf("]");
    }
    printf("],\n\"cases\": [");
    for (int i = 0; i < n_names; i++) {
        printf(i ? ",\n  {\"name\": " : "\n  {\"name\": "); json_str(names[i]);
        printf(", \"runs\": [");
        for (size_t r = 0; r < sizeof BUILTIN_CONVS / sizeof BUILTIN_CONVS[0]; r++) { if (r) printf(", "); run(names[i], BUILTIN_CONVS[r]); }
        printf("]}");
    }
    int with_tct = 0;
    for (int a = 0; a < argc; a += 2) {
        if (!strcmp(argv[a], "--test-chat-template")) { with_tct = 1; a++; }
        if (a + 1 >= argc) { fprintf(stderr, "chat_golden: a name without a template\n"); exit(2); }
        printf(",\n  {\"name\": "); json_str(argv[a]);
        printf(", \"template\": "); json_str(argv[a + 1]);
        printf(", \"runs\": [");
        if (with_tct) { run(argv[a + 1], 7); printf(", "); }
        run(argv[a + 1], 8);
        printf("]}");
    }
    printf("\n]}\n");
    free(names);
    return 0;
}

int main(int argc, char **argv) {
    llama_backend_init();
    if (argc > 1 && !strcmp(argv[1], "--all")) return main_all(argc - 2, argv + 2);
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
