/* Closed-loop serving benchmark: C client threads, each submitting a request (random prompt,
 * fixed generation length, end-of-generation ignored so every engine generates the same
 * tokens' worth), waiting for its end, then submitting the next.
 *   -DSERVE_DS_ENGINE: the requests go to deepseek's ds_engine (continuous batching, chunked
 *     prefill; events by callback on its decode thread).
 *   otherwise: a straightforward llama.h serving loop, written the way a careful application
 *     does it (what llama-server does): one context with a slot per client, one loop thread
 *     taking queued requests into free slots and decoding, per step, every generating slot's
 *     next token plus the whole prompt of each newly admitted request in one llama_batch;
 *     clients hand over requests through a mutex-protected queue. Built against upstream
 *     libllama.so and against libdeepseek.
 * Token times are taken where each engine emits a token (its decode thread), so TTFT and
 * inter-token latency (ITL) are measured the same way for both.
 * Usage: serve MODEL THREADS CLIENTS [N_PROMPT=128] [N_GEN=64] [REQUESTS_PER_CLIENT=3]
 *        [LONG_PROMPT=0]
 *   LONG_PROMPT > 0: CLIENTS stream N_GEN tokens each once; when all have produced 8 tokens,
 *   one more request with a LONG_PROMPT-token prompt (8 tokens to generate) arrives; the ITL
 *   figures are those of the streaming clients.
 * Prints one line of key=value fields. */
#define _POSIX_C_SOURCE 200809L
#include "llama.h"
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return (double) t.tv_sec + (double) t.tv_nsec * 1e-9; }
static void quiet(enum ggml_log_level level, const char *text, void *user) { (void) level; (void) text; (void) user; }

/* One request's record: submission time and each token's emission time. */
struct record {
    double t_submit, t_first, t_last;
    int n_gen, n_prompt, is_long;
    double *itl; int n_itl, cap_itl;
    sem_t done;
};

static void note_token(struct record *r, double t) {
    if (r->n_gen == 0) r->t_first = t;
    else if (r->n_itl < r->cap_itl) r->itl[r->n_itl++] = t - r->t_last;
    r->t_last = t;
    r->n_gen++;
}

static int n_vocab_g, n_gen_g, n_prompt_g, long_prompt_g, per_client_g, n_clients_g, n_threads_g;
static struct llama_model *model_g;

static llama_token *make_prompt(unsigned long long *s, int n) {
    llama_token *p = malloc(sizeof *p * (size_t) n);
    for (int i = 0; i < n; i++) { *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17; p[i] = (llama_token) (100 + *s % (unsigned long long) (n_vocab_g - 200)); }
    return p;
}

#ifdef SERVE_DS_ENGINE
static struct ds_engine *engine_g;
static bool on_event(const struct ds_engine_event *e, void *ud) {
    struct record *r = ud;
    double t = now_s();
    if (e->kind == DS_ENGINE_EVENT_TOKEN) note_token(r, t);
    else sem_post(&r->done);
    return true;
}
static void engine_start(int n_slots, int n_ctx_seq) {
    struct ds_engine_params p = ds_engine_default_params();
    p.n_seq_max = (uint32_t) n_slots; p.n_ctx_seq = (uint32_t) n_ctx_seq; p.n_threads = n_threads_g;
    p.n_batch = 2048; p.n_ubatch = 512;
    if (getenv("SERVE_SLOWDOWN")) p.max_step_slowdown = (float) atof(getenv("SERVE_SLOWDOWN"));
    if (getenv("SERVE_CHUNK")) p.prefill_chunk = (uint32_t) atoi(getenv("SERVE_CHUNK"));
    engine_g = ds_engine_new(model_g, p);
    if (!engine_g) { fprintf(stderr, "ds_engine_new failed\n"); exit(1); }
}
static void engine_submit(struct record *r, llama_token *prompt, int n_prompt, int n_gen) {
    struct ds_engine_request q = ds_engine_default_request();
    q.tokens = prompt; q.n_tokens = n_prompt; q.max_tokens = n_gen; q.ignore_eos = true;
    q.callback = on_event; q.user_data = r;
    r->t_submit = now_s();
    while (ds_engine_submit(engine_g, &q) == DS_ENGINE_ERR_FULL) { struct timespec t = {0, 1000000}; nanosleep(&t, NULL); }
}
static void engine_stop(void) { ds_engine_free(engine_g); }
#else
/* The llama.h loop. */
struct slot { struct record *r; llama_token *prompt; int n_prompt, n_gen, n_past, state; llama_token next; };
enum { FREE, PREFILL, GEN };
struct pending { struct record *r; llama_token *prompt; int n_prompt, n_gen; };
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static struct pending queue_g[256];
static int q_head, q_tail, stopping;
static struct slot *slots_g;
static int n_slots_g;
static struct llama_context *ctx_g;
static pthread_t loop_thread;

static void *loop_main(void *arg) {
    (void) arg;
    struct llama_batch b = llama_batch_init(8192, 0, 1);
    for (;;) {
        pthread_mutex_lock(&mu);
        int busy = 0;
        for (int s = 0; s < n_slots_g; s++) busy |= slots_g[s].state != FREE;
        while (!busy && q_head == q_tail && !stopping) pthread_cond_wait(&cv, &mu);
        if (stopping && !busy && q_head == q_tail) { pthread_mutex_unlock(&mu); break; }
        for (int s = 0; s < n_slots_g && q_head != q_tail; s++) {
            if (slots_g[s].state != FREE) continue;
            struct pending *p = &queue_g[q_head++ % 256];
            slots_g[s] = (struct slot) {p->r, p->prompt, p->n_prompt, p->n_gen, 0, PREFILL, 0};
            llama_memory_seq_rm(llama_get_memory(ctx_g), s, -1, -1);
        }
        pthread_mutex_unlock(&mu);
        b.n_tokens = 0;
        for (int s = 0; s < n_slots_g; s++) {
            struct slot *sl = &slots_g[s];
            if (sl->state == GEN) {
                int i = b.n_tokens++;
                b.token[i] = sl->next; b.pos[i] = sl->n_past; b.n_seq_id[i] = 1; b.seq_id[i][0] = s; b.logits[i] = 1;
            } else if (sl->state == PREFILL) {
                for (int k = 0; k < sl->n_prompt; k++) {
                    int i = b.n_tokens++;
                    b.token[i] = sl->prompt[k]; b.pos[i] = k; b.n_seq_id[i] = 1; b.seq_id[i][0] = s; b.logits[i] = k == sl->n_prompt - 1;
                }
            }
        }
        if (b.n_tokens == 0) continue;
        if (llama_decode(ctx_g, b) != 0) { fprintf(stderr, "llama_decode failed\n"); exit(1); }
        double t = now_s();
        for (int i = 0, s = 0; s < n_slots_g; s++) {
            struct slot *sl = &slots_g[s];
            if (sl->state == FREE) continue;
            int row = sl->state == GEN ? i : i + sl->n_prompt - 1;
            i += sl->state == GEN ? 1 : sl->n_prompt;
            sl->n_past += sl->state == GEN ? 1 : sl->n_prompt;
            const float *l = llama_get_logits_ith(ctx_g, row);
            llama_token best = 0;
            for (int v = 1; v < n_vocab_g; v++) if (l[v] > l[best]) best = v;
            sl->next = best;
            sl->state = GEN;
            note_token(sl->r, t);
            if (sl->r->n_gen >= sl->n_gen) { sl->state = FREE; sem_post(&sl->r->done); }
        }
    }
    llama_batch_free(b);
    return NULL;
}
static void engine_start(int n_slots, int n_ctx_seq) {
    struct llama_context_params cp = llama_context_default_params();
    cp.n_seq_max = (uint32_t) n_slots; cp.n_ctx = (uint32_t) (n_slots * n_ctx_seq); cp.n_batch = 8192; cp.n_ubatch = 512;
    cp.n_threads = n_threads_g; cp.n_threads_batch = n_threads_g;
    ctx_g = llama_init_from_model(model_g, cp);
    if (!ctx_g) { fprintf(stderr, "llama_init_from_model failed\n"); exit(1); }
    n_slots_g = n_slots;
    slots_g = calloc((size_t) n_slots, sizeof *slots_g);
    stopping = 0;
    pthread_create(&loop_thread, NULL, loop_main, NULL);
}
static void engine_submit(struct record *r, llama_token *prompt, int n_prompt, int n_gen) {
    pthread_mutex_lock(&mu);
    r->t_submit = now_s();
    queue_g[q_tail++ % 256] = (struct pending) {r, prompt, n_prompt, n_gen};
    pthread_cond_signal(&cv);
    pthread_mutex_unlock(&mu);
}
static void engine_stop(void) {
    pthread_mutex_lock(&mu); stopping = 1; pthread_cond_signal(&cv); pthread_mutex_unlock(&mu);
    pthread_join(loop_thread, NULL);
    llama_free(ctx_g); free(slots_g);
}
#endif

struct client { int index; struct record *recs; int n_recs; unsigned long long seed; };
static atomic_int streaming_started;

static void *client_main(void *arg) {
    struct client *c = arg;
    for (int i = 0; i < c->n_recs; i++) {
        struct record *r = &c->recs[i];
        llama_token *p = make_prompt(&c->seed, r->n_prompt);
        sem_init(&r->done, 0, 0);
        engine_submit(r, p, r->n_prompt, r->is_long ? 8 : n_gen_g);
        sem_wait(&r->done);
        sem_destroy(&r->done);
        free(p);
    }
    return NULL;
}

static int cmp_d(const void *a, const void *b) { double x = *(const double *) a, y = *(const double *) b; return (x > y) - (x < y); }
static double quantile(double *v, int n, double q) { if (n == 0) return 0; qsort(v, (size_t) n, sizeof *v, cmp_d); int k = (int) (q * (n - 1) + 0.5); return v[k]; }

int main(int argc, char **argv) {
    if (argc < 4) { fprintf(stderr, "usage: serve MODEL THREADS CLIENTS [N_PROMPT] [N_GEN] [REQUESTS_PER_CLIENT] [LONG_PROMPT]\n"); return 2; }
    n_threads_g = atoi(argv[2]); n_clients_g = atoi(argv[3]);
    n_prompt_g = argc > 4 ? atoi(argv[4]) : 128; n_gen_g = argc > 5 ? atoi(argv[5]) : 64;
    per_client_g = argc > 6 ? atoi(argv[6]) : 3; long_prompt_g = argc > 7 ? atoi(argv[7]) : 0;
    llama_log_set(quiet, NULL);
    llama_backend_init();
    model_g = llama_model_load_from_file(argv[1], llama_model_default_params());
    if (!model_g) { fprintf(stderr, "cannot load %s\n", argv[1]); return 1; }
    n_vocab_g = llama_vocab_n_tokens(llama_model_get_vocab(model_g));
    int with_long = long_prompt_g > 0;
    if (with_long) per_client_g = 1;
    int n_slots = n_clients_g + with_long;
    int longest = (with_long && long_prompt_g > n_prompt_g ? long_prompt_g : n_prompt_g) + n_gen_g + 16;
    engine_start(n_slots, longest);

    /* Warm-up: one short request. */
    struct record warm = {0};
    warm.n_prompt = 16; warm.cap_itl = 0; warm.itl = NULL;
    unsigned long long ws = 7;
    llama_token *wp = make_prompt(&ws, 16);
    int saved_gen = n_gen_g; n_gen_g = 4;
    sem_init(&warm.done, 0, 0);
    engine_submit(&warm, wp, 16, 4);
    sem_wait(&warm.done);
    n_gen_g = saved_gen;
    free(wp);

    int n_all = n_clients_g + with_long;
    struct client *cl = calloc((size_t) n_all, sizeof *cl);
    pthread_t *th = calloc((size_t) n_all, sizeof *th);
    for (int c = 0; c < n_all; c++) {
        cl[c].index = c; cl[c].seed = 0x9E3779B97F4A7C15ull + (unsigned long long) c * 7919;
        int is_long = with_long && c == n_clients_g;
        cl[c].n_recs = is_long ? 1 : per_client_g;
        cl[c].recs = calloc((size_t) cl[c].n_recs, sizeof(struct record));
        for (int i = 0; i < cl[c].n_recs; i++) {
            struct record *r = &cl[c].recs[i];
            r->n_prompt = is_long ? long_prompt_g : n_prompt_g; r->is_long = is_long;
            r->cap_itl = n_gen_g + 8; r->itl = calloc((size_t) r->cap_itl, sizeof(double));
        }
    }
    double t0 = now_s();
    for (int c = 0; c < n_clients_g; c++) pthread_create(&th[c], NULL, client_main, &cl[c]);
    if (with_long) {
        /* The long prompt arrives once every streaming client has produced 8 tokens. */
        for (;;) {
            int ready = 1;
            for (int c = 0; c < n_clients_g; c++) ready &= cl[c].recs[0].n_gen >= 8;
            if (ready) break;
            struct timespec t = {0, 1000000}; nanosleep(&t, NULL);
        }
        pthread_create(&th[n_clients_g], NULL, client_main, &cl[n_clients_g]);
    }
    for (int c = 0; c < n_all; c++) pthread_join(th[c], NULL);
    double t1 = now_s();
    engine_stop();

    long tokens = 0; int n_ttft = 0, n_itl = 0;
    double *ttft = calloc((size_t) (n_all * per_client_g + 1), sizeof(double));
    double *itl = calloc((size_t) (n_all * per_client_g * (n_gen_g + 8) + 1), sizeof(double));
    double long_ttft = 0;
    for (int c = 0; c < n_all; c++) for (int i = 0; i < cl[c].n_recs; i++) {
        struct record *r = &cl[c].recs[i];
        tokens += r->n_gen;
        if (r->is_long) { long_ttft = r->t_first - r->t_submit; continue; }
        ttft[n_ttft++] = r->t_first - r->t_submit;
        for (int k = 0; k < r->n_itl; k++) itl[n_itl++] = r->itl[k];
        free(r->itl);
    }
    printf("clients=%d threads=%d n_prompt=%d n_gen=%d requests=%d long_prompt=%d seconds=%.3f tokens=%ld tok_s=%.2f ttft_p50_ms=%.2f ttft_p99_ms=%.2f itl_p50_ms=%.2f itl_p99_ms=%.2f itl_max_ms=%.2f long_ttft_ms=%.2f\n",
           n_clients_g, n_threads_g, n_prompt_g, n_gen_g, n_ttft, long_prompt_g, t1 - t0, tokens, (double) tokens / (t1 - t0),
           quantile(ttft, n_ttft, 0.5) * 1e3, quantile(ttft, n_ttft, 0.99) * 1e3, quantile(itl, n_itl, 0.5) * 1e3, quantile(itl, n_itl, 0.99) * 1e3,
           quantile(itl, n_itl, 1.0) * 1e3, long_ttft * 1e3);
    for (int c = 0; c < n_all; c++) free(cl[c].recs);
    free(cl); free(th); free(ttft); free(itl);
    llama_model_free(model_g);
    return 0;
}
