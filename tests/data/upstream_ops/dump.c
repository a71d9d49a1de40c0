// dumps every tensor of the first decode (scenario A prompt) : name type ne; data for f32 into dir
#include "llama.h"
#include "ggml.h"
#include "ggml-backend.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static const char *outdir; static int dec = 0;
static bool cb(struct ggml_tensor *t, bool ask, void *ud) {
    if (ask) return dec == 0;
    if (dec != 0) return true;
    const char *name = ggml_get_name(t);
    fprintf(stderr, "%-40s %-6s %5lld %5lld %5lld %5lld op=%s\n", name, ggml_type_name(t->type), (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3], ggml_op_desc(t));
    if (t->type == GGML_TYPE_F32 && ggml_is_contiguous(t)) {
        char p[512]; snprintf(p, sizeof p, "%s/%s.bin", outdir, name);
        for (char *q = p + strlen(outdir) + 1; *q; q++) if (*q == ' ' || *q == '(' || *q == ')') *q = '_';
        FILE *f = fopen(p, "wb"); size_t n = ggml_nbytes(t); char *buf = malloc(n);
        ggml_backend_tensor_get(t, buf, 0, n); fwrite(buf, 1, n, f); fclose(f); free(buf);
    }
    return true;
}
static int parse(const char *s, llama_token *out) { int n = 0; while (*s) { out[n++] = strtol(s, (char **)&s, 10); if (*s == ',') s++; } return n; }
int main(int argc, char **argv) {
    outdir = argv[3];
    llama_backend_init();
    struct llama_model *m = llama_model_load_from_file(argv[1], llama_model_default_params());
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 256; cp.n_batch = 256; cp.n_ubatch = 256; cp.n_seq_max = 4; cp.n_threads = 2; cp.n_threads_batch = 2;
    cp.cb_eval = cb;
    struct llama_context *c = llama_init_from_model(m, cp);
    static llama_token a[64]; int na = parse(argv[2], a);
    struct llama_batch b = llama_batch_init(64, 0, 4);
    for (int i = 0; i < na; i++) { b.token[i] = a[i]; b.pos[i] = i; b.n_seq_id[i] = 1; b.seq_id[i][0] = 0; b.logits[i] = 1; }
    b.n_tokens = na;
    if (llama_decode(c, b)) return 1;
    dec = 1;
    return 0;
}
