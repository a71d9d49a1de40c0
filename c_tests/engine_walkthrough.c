/* The serving engine (ds_engine) from C: submit, stream by callback and by polling, cancel,
 * stop tokens and strings, prefix reuse, backpressure, error paths, free with requests in
 * flight. Every greedy request is checked against the same prompt run alone through plain
 * llama_decode. argv[1] = a model. */
#define _POSIX_C_SOURCE 200809L
#include <stdatomic.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llama.h"
#include "log_guard.h"

static int failures;
#define CHECK(c) do { if (!(c)) { fprintf(stderr, "engine_walkthrough: %s:%d: %s\n", __FILE__, __LINE__, #c); failures++; } } while (0)

/* Greedy continuation of `prompt` run alone through llama_decode. */
static int reference(struct llama_model *m, const llama_token *prompt, int n_prompt, int n_gen, llama_token *out) {
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 512; cp.n_batch = 512; cp.n_ubatch = 512; cp.n_threads = 2; cp.n_threads_batch = 2;
    struct llama_context *c = llama_init_from_model(m, cp);
    if (!c) return -1;
    const struct llama_vocab *v = llama_model_get_vocab(m);
    int n_vocab = llama_vocab_n_tokens(v), n = 0;
    llama_token *p = malloc(sizeof *p * (size_t) n_prompt);
    memcpy(p, prompt, sizeof *p * (size_t) n_prompt);
    int rc = llama_decode(c, llama_batch_get_one(p, n_prompt));
    while (rc == 0 && n < n_gen) {
        const float *l = llama_get_logits_ith(c, -1);
        llama_token best = 0;
        for (int i = 1; i < n_vocab; i++) if (l[i] > l[best]) best = i;
        if (llama_vocab_is_eog(v, best)) break;
        out[n++] = best;
        rc = llama_decode(c, llama_batch_get_one(&out[n - 1], 1));
    }
    free(p);
    llama_free(c);
    return n;
}

struct collected {
    llama_token tokens[512];
    char text[8192];
    int n_tokens, n_text, n_final, reason, n_cached, n_generated, order_ok;
    atomic_int done;
    int cancel_after; /* callback returns false after this many tokens (-1: never) */
};

static bool collect(const struct ds_engine_event *e, void *ud) {
    struct collected *c = ud;
    if (c->n_final) c->order_ok = 0; /* nothing after the final event */
    if (e->kind == DS_ENGINE_EVENT_TOKEN) {
        if (c->n_tokens < 512) c->tokens[c->n_tokens++] = e->token;
        if (c->n_text + e->n_piece < (int) sizeof c->text) { memcpy(c->text + c->n_text, e->piece, (size_t) e->n_piece); c->n_text += e->n_piece; }
        return c->cancel_after < 0 || c->n_tokens < c->cancel_after;
    }
    c->n_final++;
    c->reason = e->finish_reason;
    c->n_cached = e->n_cached_tokens;
    c->n_generated = e->n_generated_tokens;
    atomic_store(&c->done, 1);
    return true;
}

static void init_collected(struct collected *c) { memset(c, 0, sizeof *c); c->order_ok = 1; c->cancel_after = -1; }

static void wait_done(struct collected *c) {
    for (int i = 0; i < 20000 && !atomic_load(&c->done); i++) { struct timespec t = {0, 1000000}; nanosleep(&t, NULL); }
}

/* Reads a polled request to its end with ds_engine_wait. */
static void drain(struct ds_engine *e, int64_t id, struct collected *c) {
    struct ds_engine_event ev[7];
    for (int spins = 0; spins < 20000 && !c->n_final; spins++) {
        int n = ds_engine_wait(e, id, ev, 7, 1000);
        CHECK(n >= 0);
        if (n < 0) return;
        for (int i = 0; i < n; i++) collect(&ev[i], c);
    }
}

static int same(const llama_token *a, const llama_token *b, int n) { return memcmp(a, b, sizeof *a * (size_t) n) == 0; }

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: engine_walkthrough MODEL\n"); return 2; }
    ds_log_guard_install();
    struct llama_model *m = llama_model_load_from_file(argv[1], llama_model_default_params());
    CHECK(m != NULL);
    if (!m) return 1;
    const struct llama_vocab *v = llama_model_get_vocab(m);
    int n_vocab = llama_vocab_n_tokens(v);

    llama_token prompt[48];
    for (int i = 0; i < 48; i++) prompt[i] = (llama_token) ((i * 37 + 11) % (n_vocab - 10) + 5);
    llama_token ref[24];
    int n_ref = reference(m, prompt, 48, 24, ref);
    CHECK(n_ref > 8);

    struct ds_engine_params ep = ds_engine_default_params();
    ep.n_seq_max = 3; ep.n_ctx_seq = 256; ep.n_batch = 256; ep.n_ubatch = 64; ep.n_threads = 2;
    ep.kv_unified_per_slot = 256; /* the unified pool (768 cells) holds at most 256 a sequence */
    ep.queue_limit = 4; ep.event_capacity = 8;
    struct ds_engine *e = ds_engine_new(m, ep);
    CHECK(e != NULL);
    if (!e) return 1;

    /* 1. Streaming by callback: the tokens of the same prompt alone. */
    struct collected a; init_collected(&a);
    struct ds_engine_request r = ds_engine_default_request();
    r.tokens = prompt; r.n_tokens = 48; r.max_tokens = n_ref; r.callback = collect; r.user_data = &a;
    int64_t id_a = ds_engine_submit(e, &r);
    CHECK(id_a >= 1);
    wait_done(&a);
    CHECK(a.n_final == 1 && a.order_ok);
    CHECK(a.reason == DS_ENGINE_FINISH_LENGTH && a.n_tokens == n_ref && a.n_generated == n_ref);
    CHECK(same(a.tokens, ref, n_ref));
    /* Callback requests are not polled. */
    struct ds_engine_event ev[4];
    CHECK(ds_engine_poll(e, id_a, ev, 4) == -1);

    /* 2. Polling, with an event buffer (8) smaller than the output: the request pauses while
     * the buffer is full and nothing is lost. The same prompt again reuses its KV cells. */
    struct collected b; init_collected(&b);
    r = ds_engine_default_request();
    r.tokens = prompt; r.n_tokens = 48; r.max_tokens = n_ref;
    int64_t id_b = ds_engine_submit(e, &r);
    CHECK(id_b == id_a + 1);
    struct timespec pause = {0, 50 * 1000000}; nanosleep(&pause, NULL); /* let the buffer fill */
    drain(e, id_b, &b);
    CHECK(b.n_final == 1 && b.order_ok && b.reason == DS_ENGINE_FINISH_LENGTH && b.n_tokens == n_ref);
    CHECK(b.n_cached == 47);
    CHECK(same(b.tokens, ref, n_ref));
    CHECK(ds_engine_poll(e, id_b, ev, 4) == -1); /* its final event was read */
    CHECK(ds_engine_cancel(e, id_b) == 0);       /* cancelling an ended request is a no-op */

    /* 3. A stop token ends the output before it; a stop string cuts the text before it. */
    struct collected c; init_collected(&c);
    r = ds_engine_default_request();
    r.tokens = prompt; r.n_tokens = 48; r.max_tokens = n_ref; r.callback = collect; r.user_data = &c;
    llama_token stop_tok = ref[5];
    int first = 0;
    while (ref[first] != stop_tok) first++;
    r.stop_tokens = &stop_tok; r.n_stop_tokens = 1;
    CHECK(ds_engine_submit(e, &r) > 0);
    wait_done(&c);
    CHECK(c.reason == DS_ENGINE_FINISH_STOP && c.n_tokens == first && same(c.tokens, ref, first));

    char full[4096]; int n_full = 0;
    for (int i = 0; i < n_ref; i++) {
        char piece[256];
        int k = llama_token_to_piece(v, ref[i], piece, sizeof piece, 0, false);
        if (k > 0 && n_full + k < (int) sizeof full) { memcpy(full + n_full, piece, (size_t) k); n_full += k; }
    }
    full[n_full] = 0;
    /* A stop string from the middle of the reference text (3 bytes at byte n_full/2). */
    char stop_str[4]; memcpy(stop_str, full + n_full / 2, 3); stop_str[3] = 0;
    int at = 0; /* its first occurrence (the text may hold NUL bytes: no strstr) */
    while (memcmp(full + at, stop_str, 3) != 0) at++;
    if (strlen(stop_str) == 3) {
        struct collected d; init_collected(&d);
        r.stop_tokens = NULL; r.n_stop_tokens = 0;
        const char *stops[1] = {stop_str};
        r.stop_strings = stops; r.n_stop_strings = 1; r.user_data = &d;
        CHECK(ds_engine_submit(e, &r) > 0);
        wait_done(&d);
        CHECK(d.reason == DS_ENGINE_FINISH_STOP);
        CHECK(d.n_text == at && memcmp(d.text, full, (size_t) at) == 0);
        if (d.n_text != at) fprintf(stderr, "stop string \"%s\" at %d in \"%s\"; got %d bytes \"%.*s\" (%d tokens, reason %d)\n", stop_str, at, full, d.n_text, d.n_text, d.text, d.n_tokens, d.reason);
    }

    /* 4. Cancellation while generating, by ds_engine_cancel and by a callback saying no. */
    struct collected f; init_collected(&f);
    r = ds_engine_default_request();
    r.tokens = prompt; r.n_tokens = 20; r.ignore_eos = true; /* max_tokens -1: until the context is full */
    int64_t id_f = ds_engine_submit(e, &r);
    CHECK(id_f > 0);
    int n = ds_engine_wait(e, id_f, ev, 1, 10000);
    CHECK(n == 1 && ev[0].kind == DS_ENGINE_EVENT_TOKEN);
    collect(&ev[0], &f);
    CHECK(ds_engine_cancel(e, id_f) == 0 && ds_engine_cancel(e, id_f) == 0);
    drain(e, id_f, &f);
    CHECK(f.n_final == 1 && f.reason == DS_ENGINE_FINISH_CANCELLED);
    struct collected g; init_collected(&g);
    g.cancel_after = 3;
    r.callback = collect; r.user_data = &g;
    CHECK(ds_engine_submit(e, &r) > 0);
    wait_done(&g);
    CHECK(g.n_final == 1 && g.reason == DS_ENGINE_FINISH_CANCELLED && g.n_tokens == 3);

    /* 5. A text prompt is tokenized as llama_tokenize does. */
    const char *text = "The quick brown fox";
    llama_token toks[64];
    int n_toks = llama_tokenize(v, text, (int32_t) strlen(text), toks, 64, true, false);
    CHECK(n_toks > 0);
    llama_token ref_t[8];
    int n_ref_t = reference(m, toks, n_toks, 8, ref_t);
    struct collected h; init_collected(&h);
    r = ds_engine_default_request();
    r.text = text; r.add_special = true; r.max_tokens = n_ref_t; r.callback = collect; r.user_data = &h;
    CHECK(ds_engine_submit(e, &r) > 0);
    wait_done(&h);
    CHECK(h.n_tokens == n_ref_t && same(h.tokens, ref_t, n_ref_t));

    /* 6. Invalid requests: a clear error, nothing registered. */
    struct ds_engine_stats s0, s1;
    CHECK(ds_engine_stats_get(e, &s0) == 0);
    r = ds_engine_default_request();
    CHECK(ds_engine_submit(e, &r) == DS_ENGINE_ERR_INVALID);                 /* no prompt */
    llama_token bad = n_vocab;
    r.tokens = &bad; r.n_tokens = 1;
    CHECK(ds_engine_submit(e, &r) == DS_ENGINE_ERR_INVALID);                 /* token id */
    llama_token *longp = calloc(300, sizeof *longp);
    r.tokens = longp; r.n_tokens = 300;
    CHECK(ds_engine_submit(e, &r) == DS_ENGINE_ERR_INVALID);                 /* longer than a slot */
    r.n_tokens = 10; r.max_tokens = -5;
    CHECK(ds_engine_submit(e, &r) == DS_ENGINE_ERR_INVALID);                 /* max_tokens */
    r.max_tokens = 4; r.sampling.top_p = -1.0f;
    CHECK(ds_engine_submit(e, &r) == DS_ENGINE_ERR_INVALID);                 /* sampling */
    CHECK(ds_engine_submit(NULL, &r) == DS_ENGINE_ERR_INVALID);
    CHECK(ds_engine_submit(e, NULL) == DS_ENGINE_ERR_INVALID);
    /* A sampler handed over is freed by the engine even when the submission fails. */
    r = ds_engine_default_request();
    r.sampler = llama_sampler_init_greedy();
    CHECK(ds_engine_submit(e, &r) == DS_ENGINE_ERR_INVALID);
    CHECK(ds_engine_cancel(e, 0) == -1 && ds_engine_cancel(e, 1 << 30) == -1 && ds_engine_cancel(NULL, 1) == -1);
    CHECK(ds_engine_poll(e, 1 << 30, ev, 4) == -1 && ds_engine_poll(e, id_a, NULL, 4) == -1);
    CHECK(ds_engine_stats_get(e, &s1) == 0);
    CHECK(s1.requests_submitted == s0.requests_submitted && s1.requests_rejected == s0.requests_rejected + 6);
    CHECK(s1.queued == 0 && s1.running == 0);
    struct ds_engine_params bp = ep;
    bp.n_seq_max = 0;
    CHECK(ds_engine_new(m, bp) == NULL);
    bp = ep; bp.n_batch = 2;
    CHECK(ds_engine_new(m, bp) == NULL);
    CHECK(ds_engine_new(NULL, ep) == NULL);

    /* 7. Backpressure: with every slot busy, queue_limit (4) waiting requests are accepted and
     * the next is refused; each then ends exactly once. */
    r = ds_engine_default_request();
    r.tokens = prompt; r.n_tokens = 16; r.ignore_eos = true;
    int64_t busy[3], queued[4];
    for (int i = 0; i < 3; i++) { busy[i] = ds_engine_submit(e, &r); CHECK(busy[i] > 0); }
    for (int i = 0; i < 3; i++) CHECK(ds_engine_wait(e, busy[i], ev, 1, 10000) == 1); /* running */
    for (int i = 0; i < 4; i++) { queued[i] = ds_engine_submit(e, &r); CHECK(queued[i] > 0); }
    CHECK(ds_engine_submit(e, &r) == DS_ENGINE_ERR_FULL);
    CHECK(ds_engine_stats_get(e, &s1) == 0 && s1.queued == 4 && s1.running == 3);
    for (int i = 0; i < 4; i++) CHECK(ds_engine_cancel(e, queued[i]) == 0);
    for (int i = 0; i < 3; i++) CHECK(ds_engine_cancel(e, busy[i]) == 0);
    for (int i = 0; i < 7; i++) {
        struct collected q; init_collected(&q);
        drain(e, i < 3 ? busy[i] : queued[i - 3], &q);
        CHECK(q.n_final == 1 && q.reason == DS_ENGINE_FINISH_CANCELLED);
    }

    /* 8. The metrics: ds_stats and the Prometheus text agree with the engine's figures. */
    struct ds_stats gs;
    CHECK(ds_engine_stats_get(e, &s1) == 0 && ds_stats_get(&gs) == 0);
    CHECK(gs.live_engines == 1 && gs.engines.generated_tokens == s1.generated_tokens && s1.generated_tokens > 0);
    CHECK(s1.ttft_p50_us > 0 && s1.itl_p50_us > 0 && s1.itl_p50_us <= s1.itl_p99_us && s1.prompt_tokens_reused >= 47);
    CHECK(s1.finished_cancelled >= 9 && s1.finished_stop >= 1 && s1.kv_cells_total > 0 && s1.steps > 0);
    int64_t need = ds_metrics_prometheus(NULL, 0);
    char *prom = malloc((size_t) need + 1);
    CHECK(ds_metrics_prometheus(prom, (size_t) need + 1) == need);
    char line[128];
    snprintf(line, sizeof line, "\nds_engine_generated_tokens_total %llu\n", (unsigned long long) gs.engines.generated_tokens);
    CHECK(strstr(prom, line) != NULL);
    snprintf(line, sizeof line, "\nds_live_engines 1\n");
    CHECK(strstr(prom, line) != NULL);
    CHECK(strstr(prom, "\nds_engine_time_to_first_token_seconds_bucket{le=\"+Inf\"}") != NULL);
    CHECK(strstr(prom, "\nds_engine_inter_token_seconds_count ") != NULL);
    free(prom);

    /* 9. Freeing with requests in flight: each gets exactly one final event. */
    struct collected fl[3];
    for (int i = 0; i < 3; i++) {
        init_collected(&fl[i]);
        r = ds_engine_default_request();
        r.tokens = prompt; r.n_tokens = 30; r.ignore_eos = true; r.callback = collect; r.user_data = &fl[i];
        CHECK(ds_engine_submit(e, &r) > 0);
    }
    ds_engine_free(e);
    for (int i = 0; i < 3; i++) CHECK(fl[i].n_final == 1 && fl[i].order_ok);
    ds_engine_free(NULL);
    free(longp);
    llama_model_free(m);

    struct ds_stats st;
    CHECK(ds_stats_get(&st) == 0);
    CHECK(st.live_engines == 0 && st.live_models == 0 && st.live_contexts == 0 && st.live_samplers == 0);
    CHECK(st.engines.queued == 0 && st.engines.running == 0 && st.engines.kv_cells_total == 0);
    CHECK(st.engines.table_versions_live == 0);
    CHECK(st.kv_bytes == 0 && st.scratch_bytes == 0 && st.mapped_model_bytes == 0);
    if (failures) { fprintf(stderr, "engine_walkthrough: %d failures\n", failures); return 1; }
    printf("engine_walkthrough: ok\n");
    return 0;
}
