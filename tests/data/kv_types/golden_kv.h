// golden_kv.h: compiled into the golden-logits program (golden.c) with `-include`, so that each
// context it makes has the KV cache types GOLDEN_TYPE_K / GOLDEN_TYPE_V (ggml type ids) and
// flash attention on (what a quantized V cache needs, and the path llama.cpp takes on the CPU
// by default). See gen.sh.
#include "llama.h"
#include <stdlib.h>

static struct llama_context *golden_kv_init(struct llama_model *m, struct llama_context_params p) {
    const char *k = getenv("GOLDEN_TYPE_K"), *v = getenv("GOLDEN_TYPE_V");
    if (k) p.type_k = (enum ggml_type) atoi(k);
    if (v) p.type_v = (enum ggml_type) atoi(v);
    p.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_ENABLED;
    return llama_init_from_model(m, p);
}
#define llama_init_from_model golden_kv_init
