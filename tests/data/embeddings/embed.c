// Pooled embeddings as llama.h computes them, for tests/embeddings.rs: built against
// llama.cpp b11312's libllama (gen.sh), it wrote this folder's *.f32 files.
// usage: embed MODEL OUT.f32   (OUT gets, per case below, the case's vectors one after another)
//        embed MODEL OUT.f32 rank   (pooling RANK instead: with causal attention, then
//        NON_CAUSAL, each of the three sequences decoded alone in a one-sequence context,
//        llama_model_n_cls_out floats per sequence. Alone: for a model without a
//        classification head b11312 reads every sequence's values at offset n_cls_out * seq_idx
//        of the pooled [n_embd, n_seqs] tensor, which is the first sequence's vector for all
//        but the first sequence of a micro-batch)
// Cases: pooling NONE (every token's vector), MEAN, CLS, LAST with causal attention, then MEAN
// and LAST with attention_type NON_CAUSAL. One batch holds three sequences (7, 12 and 5
// tokens, ids (i*53 + 7*s + 3) % 400); pooled cases write one vector per sequence. MEAN runs
// each sequence alone (as sequence 0 of a one-sequence context): b11312 aborts creating a
// MEAN-pooling context with n_seq_max > 1 for these causal models (GGML_ASSERT in
// build_pooling's ggml_mul_mat at graph reserve).
#include "llama.h"
#include <stdio.h>
#include <stdlib.h>

static const int LEN[3] = {7, 12, 5};

int main(int argc, char **argv) {
    if (argc != 3 && argc != 4) { fprintf(stderr, "usage: embed MODEL OUT [rank]\n"); return 2; }
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    struct llama_model *m = llama_model_load_from_file(argv[1], mp);
    if (!m) return 1;
    const int n_embd = llama_model_n_embd(m);
    FILE *out = fopen(argv[2], "wb");
    if (argc == 4) {
        const int n_cls = llama_model_n_cls_out(m);
        for (int c = 0; c < 2; c++) {
            for (int s = 0; s < 3; s++) {
                struct llama_context_params cp = llama_context_default_params();
                cp.n_ctx = 256; cp.n_batch = 256; cp.n_ubatch = 256; cp.n_seq_max = 1;
                cp.n_threads = 2; cp.n_threads_batch = 2;
                cp.embeddings = true;
                cp.pooling_type = LLAMA_POOLING_TYPE_RANK;
                cp.attention_type = c == 0 ? LLAMA_ATTENTION_TYPE_CAUSAL : LLAMA_ATTENTION_TYPE_NON_CAUSAL;
                struct llama_context *ctx = llama_init_from_model(m, cp);
                if (!ctx) return 1;
                struct llama_batch b = llama_batch_init(64, 0, 1);
                for (int i = 0; i < LEN[s]; i++) {
                    b.token[i] = (i * 53 + 7 * s + 3) % 400; b.pos[i] = i; b.n_seq_id[i] = 1; b.seq_id[i][0] = 0; b.logits[i] = 1;
                }
                b.n_tokens = LEN[s];
                if (llama_decode(ctx, b) != 0) return 1;
                const float *e = llama_get_embeddings_seq(ctx, 0);
                if (!e) return 1;
                fwrite(e, sizeof(float), n_cls, out);
                llama_batch_free(b);
                llama_free(ctx);
            }
        }
        fclose(out);
        llama_model_free(m);
        return 0;
    }
    const int pooling[6] = {LLAMA_POOLING_TYPE_NONE, LLAMA_POOLING_TYPE_MEAN, LLAMA_POOLING_TYPE_CLS, LLAMA_POOLING_TYPE_LAST, LLAMA_POOLING_TYPE_MEAN, LLAMA_POOLING_TYPE_LAST};
    for (int c = 0; c < 6; c++) {
        const int mean = pooling[c] == LLAMA_POOLING_TYPE_MEAN;
        for (int alone = 0; alone < (mean ? 3 : 1); alone++) {
            struct llama_context_params cp = llama_context_default_params();
            cp.n_ctx = 256; cp.n_batch = 256; cp.n_ubatch = 256; cp.n_seq_max = mean ? 1 : 3;
            cp.n_threads = 2; cp.n_threads_batch = 2;
            // one stream: b11312 then keeps the batch in one micro-batch (with a stream per
            // sequence its split_equal cuts every sequence to the shortest one's length and
            // pools each micro-batch alone)
            cp.kv_unified = true;
            cp.embeddings = true;
            cp.pooling_type = pooling[c];
            cp.attention_type = c < 4 ? LLAMA_ATTENTION_TYPE_CAUSAL : LLAMA_ATTENTION_TYPE_NON_CAUSAL;
            struct llama_context *ctx = llama_init_from_model(m, cp);
            if (!ctx) return 1;
            struct llama_batch b = llama_batch_init(64, 0, 1);
            int n = 0;
            for (int s = 0; s < 3; s++) {
                if (mean && s != alone) continue;
                for (int i = 0; i < LEN[s]; i++) {
                    b.token[n] = (i * 53 + 7 * s + 3) % 400; b.pos[n] = i; b.n_seq_id[n] = 1; b.seq_id[n][0] = mean ? 0 : s; b.logits[n] = 1; n++;
                }
            }
            b.n_tokens = n;
            if (llama_decode(ctx, b) != 0) return 1;
            if (pooling[c] == LLAMA_POOLING_TYPE_NONE) {
                for (int i = 0; i < n; i++) fwrite(llama_get_embeddings_ith(ctx, i), sizeof(float), n_embd, out);
            } else {
                for (int s = 0; s < (mean ? 1 : 3); s++) {
                    const float *e = llama_get_embeddings_seq(ctx, s);
                    if (!e) return 1;
                    fwrite(e, sizeof(float), n_embd, out);
                }
            }
            llama_batch_free(b);
            llama_free(ctx);
        }
    }
    fclose(out);
    llama_model_free(m);
    return 0;
}
