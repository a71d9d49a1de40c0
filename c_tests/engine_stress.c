/* Many client threads on one ds_engine: random prompt lengths (some sharing a long prefix, so
 * KV cells are reused within and across slots), random max tokens, callbacks and polling,
 * random cancellations (while queued, while generating, by the callback, from another thread).
 * Every request must end exactly once, its events in order with none lost or duplicated, and
 * every greedy request's tokens must be what the same prompt gives run alone through plain
 * llama_decode: teacher-forced on the engine's tokens, each engine token is the reference's
 * argmax, or within the quantized-weights tolerance of it (2% of the logits row's range;
 * tests/data/README.md, Tolerances: batching changes the summation order of matrix products, as
 * prefill vs decode does).
 * A watchdog fails the run when no request makes progress for 10 s.
 * usage: engine_stress MODEL [CLIENTS=16] [PER_CLIENT=8] [MAX_PROMPT=600] [MAX_GEN=48] [THREADS=2] */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "llama.h"
#include "log_guard.h"

#define MAX_TOK 256

static int failures;
#define CHECK(c) do { if (!(c)) { fprintf(stderr, "engine_stress: %s:%d: %s\n", __FILE__, __LINE__, #c); failures++; } } while (0)

enum cancel_mode { NO_CANCEL, CANCEL_AT_ONCE, CANCEL_AFTER_TOKENS, CANCEL_BY_CALLBACK, CANCEL_FROM_THREAD };

struct req {
    llama_token *prompt;
    int n_prompt, max_tokens, by_callback, cancel_mode, cancel_after;
    int64_t id;
    llama_token tokens[MAX_TOK];
    int n_tokens, n_final, reason, n_generated, n_cached, after_final, bad_piece;
    atomic_int done;
};

static struct ds_engine *engine;
static atomic_long progress; /* events seen, for the watchdog */
static atomic_int finished_clients;
static int n_clients;
static const struct llama_vocab *vocab;

static void on_event(struct req *r, const struct ds_engine_event *e) {
    atomic_fetch_add(&progress, 1);
    if (r->n_final) r->after_final++;
    if (e->kind == DS_ENGINE_EVENT_TOKEN) {
        char piece[256];
        int k = llama_token_to_piece(vocab, e->token, piece, sizeof piece, 0, false);
        if (k != e->n_piece || (k > 0 && memcmp(piece, e->piece, (size_t) k) != 0)) r->bad_piece++;
        if (r->n_tokens < MAX_TOK) r->tokens[r->n_tokens] = e->token;
        r->n_tokens++;
    } else {
        r->n_final++;
        r->reason = e->finish_reason;
        r->n_generated = e->n_generated_tokens;
        r->n_cached = e->n_cached_tokens;
        atomic_store(&r->done, 1);
    }
}

static bool callback(const struct ds_engine_event *e, void *ud) {
    struct req *r = ud;
    on_event(r, e);
    return !(r->cancel_mode == CANCEL_BY_CALLBACK && r->n_tokens >= r->cancel_after);
}

static unsigned long long rng_next(unsigned long long *s) { *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17; return *s; }
static void sleep_us(long us) { struct timespec t = {us / 1000000, (us % 1000000) * 1000}; nanosleep(&t, NULL); }

struct client { int index, n_req; struct req *reqs; };

static void *client_main(void *arg) {
    struct client *c = arg;
    for (int i = 0; i < c->n_req; i++) {
        struct req *r = &c->reqs[i];
        struct ds_engine_request q = ds_engine_default_request();
        q.tokens = r->prompt; q.n_tokens = r->n_prompt; q.max_tokens = r->max_tokens;
        if (r->by_callback) { q.callback = callback; q.user_data = r; }
        for (int tries = 0;; tries++) {
            r->id = ds_engine_submit(engine, &q);
            if (r->id != DS_ENGINE_ERR_FULL) break;
            sleep_us(2000); /* backpressure: retry */
        }
        CHECK(r->id > 0);
        if (r->id <= 0) continue;
        if (r->cancel_mode == CANCEL_AT_ONCE) CHECK(ds_engine_cancel(engine, r->id) == 0);
        if (r->by_callback) {
            long waited = 0;
            while (!atomic_load(&r->done)) {
                sleep_us(500);
                waited += 500;
                if (r->cancel_mode == CANCEL_FROM_THREAD && waited >= r->cancel_after * 1000L) { CHECK(ds_engine_cancel(engine, r->id) == 0); r->cancel_mode = NO_CANCEL + 100; }
            }
        } else {
            struct ds_engine_event ev[5];
            while (!r->n_final) {
                int n = (i + c->index) % 2 ? ds_engine_wait(engine, r->id, ev, 5, 200) : ds_engine_poll(engine, r->id, ev, 5);
                CHECK(n >= 0);
                if (n < 0) break;
                if (n == 0 && (i + c->index) % 2 == 0) sleep_us(300);
                for (int k = 0; k < n; k++) on_event(r, &ev[k]);
                if ((r->cancel_mode == CANCEL_AFTER_TOKENS || r->cancel_mode == CANCEL_BY_CALLBACK) && r->n_tokens >= r->cancel_after) CHECK(ds_engine_cancel(engine, r->id) == 0);
            }
            struct ds_engine_event extra;
            CHECK(ds_engine_poll(engine, r->id, &extra, 1) == -1); /* nothing after the end */
        }
    }
    atomic_fetch_add(&finished_clients, 1);
    return NULL;
}

static void *watchdog(void *arg) {
    (void) arg;
    long last = -1; int still = 0;
    while (atomic_load(&finished_clients) < n_clients) {
        sleep_us(100000);
        long p = atomic_load(&progress);
        if (p == last) {
            if (++still >= 100) { fprintf(stderr, "engine_stress: watchdog: no event for 10 s (a stall)\n"); _Exit(3); }
        } else { still = 0; last = p; }
    }
    return NULL;
}

/* Teacher-forces the reference on the request's tokens; returns the number of steps whose
 * token is not the reference's argmax (within tolerance ones included), -1 on a violation. */
static int verify(struct llama_context *ctx, struct req *r, int n_vocab, int *exact) {
    int n_gen = r->n_tokens < MAX_TOK ? r->n_tokens : MAX_TOK;
    int ends_eog = r->reason == DS_ENGINE_FINISH_EOG;
    int n = r->n_prompt + n_gen;
    struct llama_batch b = llama_batch_init(n, 0, 1);
    for (int i = 0; i < n; i++) {
        b.token[i] = i < r->n_prompt ? r->prompt[i] : r->tokens[i - r->n_prompt];
        b.pos[i] = i; b.n_seq_id[i] = 1; b.seq_id[i][0] = 0;
        b.logits[i] = i >= r->n_prompt - 1;
    }
    b.n_tokens = n;
    llama_memory_clear(llama_get_memory(ctx), true);
    int rc = llama_decode(ctx, b);
    CHECK(rc == 0);
    int off = 0, bad = 0;
    /* Steps: the token after the prompt, then after each generated token; when the request
     * ended on an end-of-generation token, the step after the last token must allow one. */
    int steps = n_gen + (ends_eog ? 1 : 0);
    for (int s = 0; rc == 0 && s < steps; s++) {
        const float *l = llama_get_logits_ith(ctx, r->n_prompt - 1 + s);
        int best = 0; float lo = l[0];
        for (int t = 1; t < n_vocab; t++) { if (l[t] > l[best]) best = t; if (l[t] < lo) lo = l[t]; }
        float tol = 0.02f * (l[best] - lo);
        if (s < n_gen) {
            int t = r->tokens[s];
            if (t != best) {
                off++;
                if (l[best] - l[t] > tol) { fprintf(stderr, "engine_stress: request %lld step %d: token %d has logit %.4f, the reference's argmax %d %.4f (tolerance %.4f)\n", (long long) r->id, s, t, l[t], best, l[best], tol); bad = 1; break; }
            }
        } else {
            /* The engine chose an end-of-generation token here. */
            float eog_best = -1e30f;
            for (int t = 0; t < n_vocab; t++) if (llama_vocab_is_eog(vocab, t) && l[t] > eog_best) eog_best = l[t];
            if (!llama_vocab_is_eog(vocab, best)) { off++; if (l[best] - eog_best > tol) { fprintf(stderr, "engine_stress: request %lld ended on EOG where the reference continues\n", (long long) r->id); bad = 1; } }
        }
    }
    if (!off) (*exact)++;
    llama_batch_free(b);
    return bad ? -1 : off;
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: engine_stress MODEL [CLIENTS] [PER_CLIENT] [MAX_PROMPT] [MAX_GEN] [THREADS]\n"); return 2; }
    n_clients = argc > 2 ? atoi(argv[2]) : 16;
    int per_client = argc > 3 ? atoi(argv[3]) : 8;
    int max_prompt = argc > 4 ? atoi(argv[4]) : 600;
    int max_gen = argc > 5 ? atoi(argv[5]) : 48;
    int n_threads = argc > 6 ? atoi(argv[6]) : 2;
    if (max_gen > MAX_TOK) max_gen = MAX_TOK;
    ds_log_guard_install();
    struct llama_model *m = llama_model_load_from_file(argv[1], llama_model_default_params());
    CHECK(m != NULL);
    if (!m) return 1;
    vocab = llama_model_get_vocab(m);
    int n_vocab = llama_vocab_n_tokens(vocab);

    struct ds_engine_params ep = ds_engine_default_params();
    ep.n_seq_max = 8; ep.n_ctx_seq = (uint32_t) (max_prompt + max_gen + 8); ep.n_batch = 512; ep.n_ubatch = 512;
    ep.n_threads = n_threads; ep.queue_limit = (uint32_t) (n_clients > 4 ? n_clients / 2 : 2); ep.event_capacity = 16;
    engine = ds_engine_new(m, ep);
    CHECK(engine != NULL);
    if (!engine) return 1;

    /* A shared "system prompt" that a third of the requests start with. */
    unsigned long long seed = 0x9E3779B97F4A7C15ull;
    int n_shared = max_prompt / 3;
    llama_token *shared = malloc(sizeof *shared * (size_t) (n_shared + 1));
    for (int i = 0; i < n_shared; i++) shared[i] = (llama_token) (rng_next(&seed) % (unsigned long long) (n_vocab - 2) + 1);

    struct client *clients = calloc((size_t) n_clients, sizeof *clients);
    pthread_t *threads = calloc((size_t) n_clients, sizeof *threads);
    int n_total = n_clients * per_client;
    for (int c = 0; c < n_clients; c++) {
        clients[c].index = c; clients[c].n_req = per_client;
        clients[c].reqs = calloc((size_t) per_client, sizeof(struct req));
        for (int i = 0; i < per_client; i++) {
            struct req *r = &clients[c].reqs[i];
            r->n_prompt = (int) (rng_next(&seed) % (unsigned long long) max_prompt) + 1;
            r->prompt = malloc(sizeof(llama_token) * (size_t) r->n_prompt);
            int with_shared = rng_next(&seed) % 3 == 0 && r->n_prompt > n_shared;
            for (int k = 0; k < r->n_prompt; k++)
                r->prompt[k] = with_shared && k < n_shared ? shared[k] : (llama_token) (rng_next(&seed) % (unsigned long long) (n_vocab - 2) + 1);
            r->max_tokens = (int) (rng_next(&seed) % (unsigned long long) max_gen) + 1;
            r->by_callback = (int) (rng_next(&seed) % 2);
            int k = (int) (rng_next(&seed) % 10);
            r->cancel_mode = k < 6 ? NO_CANCEL : k == 6 ? CANCEL_AT_ONCE : k == 7 ? CANCEL_AFTER_TOKENS : k == 8 ? CANCEL_BY_CALLBACK : CANCEL_FROM_THREAD;
            if (r->cancel_mode == CANCEL_FROM_THREAD && !r->by_callback) r->cancel_mode = CANCEL_AFTER_TOKENS;
            r->cancel_after = (int) (rng_next(&seed) % 8) + 1;
        }
    }
    pthread_t dog;
    pthread_create(&dog, NULL, watchdog, NULL);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int c = 0; c < n_clients; c++) pthread_create(&threads[c], NULL, client_main, &clients[c]);
    for (int c = 0; c < n_clients; c++) pthread_join(threads[c], NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    pthread_join(dog, NULL);
    struct ds_engine_stats es;
    CHECK(ds_engine_stats_get(engine, &es) == 0);
    /* Whether concurrent requests met a cached prefix depends on timing; this does not: the
     * shared prefix twice in a row on the now idle engine, the second reusing the first's
     * cells (all but the prompt's last token, which is computed to give logits). */
    int n_cached_again = -1;
    for (int pass = 0; pass < 2; pass++) {
        struct ds_engine_request q = ds_engine_default_request();
        q.tokens = shared; q.n_tokens = n_shared; q.max_tokens = 2;
        int64_t id = ds_engine_submit(engine, &q);
        CHECK(id > 0);
        for (int ended = 0; id > 0 && !ended;) {
            struct ds_engine_event ev[4];
            int n = ds_engine_wait(engine, id, ev, 4, 30000);
            CHECK(n > 0);
            if (n <= 0) break;
            for (int k = 0; k < n; k++) if (ev[k].kind == DS_ENGINE_EVENT_FINISH) { ended = 1; n_cached_again = ev[k].n_cached_tokens; }
        }
    }
    CHECK(n_cached_again == n_shared - 1);
    ds_engine_free(engine);

    /* Every request ended exactly once, its events in order, none lost. */
    int n_cancelled = 0, n_tokens = 0;
    for (int c = 0; c < n_clients; c++) for (int i = 0; i < per_client; i++) {
        struct req *r = &clients[c].reqs[i];
        CHECK(r->n_final == 1 && r->after_final == 0 && r->bad_piece == 0);
        CHECK(r->n_tokens == r->n_generated);
        CHECK(r->reason >= DS_ENGINE_FINISH_LENGTH && r->reason <= DS_ENGINE_FINISH_CANCELLED);
        if (r->reason == DS_ENGINE_FINISH_LENGTH) CHECK(r->n_tokens == r->max_tokens);
        if (r->reason == DS_ENGINE_FINISH_CANCELLED) { n_cancelled++; CHECK(r->cancel_mode != NO_CANCEL); }
        if (r->cancel_mode == NO_CANCEL) CHECK(r->reason == DS_ENGINE_FINISH_LENGTH || r->reason == DS_ENGINE_FINISH_EOG);
        n_tokens += r->n_tokens;
    }
    CHECK(es.requests_submitted == (uint64_t) n_total);
    CHECK(es.finished_length + es.finished_eog + es.finished_cancelled == (uint64_t) n_total && es.finished_error == 0);
    CHECK(es.generated_tokens == (uint64_t) n_tokens);
    double secs = (double) (t1.tv_sec - t0.tv_sec) + (double) (t1.tv_nsec - t0.tv_nsec) * 1e-9;

    /* Each greedy request against the same prompt alone. */
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t) (max_prompt + max_gen + 8); cp.n_batch = cp.n_ctx; cp.n_ubatch = 512; cp.n_threads = n_threads; cp.n_threads_batch = n_threads;
    struct llama_context *ctx = llama_init_from_model(m, cp);
    CHECK(ctx != NULL);
    int exact = 0, steps_off = 0;
    for (int c = 0; ctx && c < n_clients; c++) for (int i = 0; i < per_client; i++) {
        int off = verify(ctx, &clients[c].reqs[i], n_vocab, &exact);
        CHECK(off >= 0);
        if (off > 0) steps_off += off;
    }
    printf("engine_stress: %d requests (%d cancelled) from %d clients in %.1f s: %d tokens, %.1f tokens/s; %llu prompt tokens computed, %llu reused; %d of %d identical to the request alone (%d steps within tolerance)\n",
           n_total, n_cancelled, n_clients, secs, n_tokens, n_tokens / secs, (unsigned long long) es.prompt_tokens_computed, (unsigned long long) es.prompt_tokens_reused, exact, n_total, steps_off);
    if (ctx) llama_free(ctx);
    for (int c = 0; c < n_clients; c++) { for (int i = 0; i < per_client; i++) free(clients[c].reqs[i].prompt); free(clients[c].reqs); }
    free(clients); free(threads); free(shared);
    llama_model_free(m);
    struct ds_stats st;
    CHECK(ds_stats_get(&st) == 0 && st.live_engines == 0 && st.engines.table_versions_live == 0 && st.live_samplers == 0 && st.kv_bytes == 0);
    if (failures) { fprintf(stderr, "engine_stress: %d failures\n", failures); return 1; }
    return 0;
}
