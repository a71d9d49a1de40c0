/* Read-bandwidth probe: how fast THREADS threads can stream memory that is not in cache, the
 * ceiling for generation, which reads every weight once per token. bench/run.sh runs it next to
 * the engines and reports their generation bandwidth as a fraction of it.
 * Usage: bandwidth THREADS   (build with -O2 -march=native -pthread)
 * 1 GiB (far beyond any cache) of distinct words, every page written first so that the passes
 * read memory and not the shared zero page or merged copies; each thread sums its contiguous share with AVX-512, or AVX2 where the
 * CPU lacks it; prints the best of PASSES passes. */
/* clock_gettime, getrusage and pthread barriers under -std=c11 */
#define _POSIX_C_SOURCE 200809L
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BUFFER_BYTES ((size_t)1 << 30)
#define PASSES 5
/* 2 MiB alignment lets the kernel back the buffer with huge pages where it can */
#define ALIGNMENT ((size_t)2 << 20)

struct share {
    const uint8_t *begin;
    size_t bytes;
    pthread_barrier_t *barrier;
    uint64_t sum;
};

static int have_avx512;

__attribute__((target("avx512f"))) static uint64_t sum_avx512(const uint8_t *p, size_t bytes) {
    /* four independent accumulators keep several loads in flight */
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i < bytes; i += 256) {
        a0 = _mm512_add_epi64(a0, _mm512_load_si512((const void *)(p + i)));
        a1 = _mm512_add_epi64(a1, _mm512_load_si512((const void *)(p + i + 64)));
        a2 = _mm512_add_epi64(a2, _mm512_load_si512((const void *)(p + i + 128)));
        a3 = _mm512_add_epi64(a3, _mm512_load_si512((const void *)(p + i + 192)));
    }
    return _mm512_reduce_add_epi64(_mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)));
}

__attribute__((target("avx2"))) static uint64_t sum_avx2(const uint8_t *p, size_t bytes) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i < bytes; i += 128) {
        a0 = _mm256_add_epi64(a0, _mm256_load_si256((const __m256i *)(p + i)));
        a1 = _mm256_add_epi64(a1, _mm256_load_si256((const __m256i *)(p + i + 32)));
        a2 = _mm256_add_epi64(a2, _mm256_load_si256((const __m256i *)(p + i + 64)));
        a3 = _mm256_add_epi64(a3, _mm256_load_si256((const __m256i *)(p + i + 96)));
    }
    __m256i total = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
    uint64_t lanes[4];
    _mm256_storeu_si256((__m256i *)lanes, total);
    return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

/* Each pass starts and ends at the barrier, which the main thread joins to time it. */
static void *read_share(void *arg) {
    struct share *share = arg;
    for (int pass = 0; pass < PASSES; pass++) {
        pthread_barrier_wait(share->barrier);
        share->sum += have_avx512 ? sum_avx512(share->begin, share->bytes) : sum_avx2(share->begin, share->bytes);
        pthread_barrier_wait(share->barrier);
    }
    return NULL;
}

static double wall_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    char *end = NULL;
    long n_threads = argc == 2 ? strtol(argv[1], &end, 10) : 0;
    if (argc != 2 || *end != '\0' || n_threads < 1 || n_threads > 512) {
        fprintf(stderr, "usage: %s THREADS (1 to 512)\n", argv[0]);
        return 2;
    }
    __builtin_cpu_init();
    have_avx512 = __builtin_cpu_supports("avx512f");
    if (!have_avx512 && !__builtin_cpu_supports("avx2")) { fprintf(stderr, "the probe needs AVX2 or AVX-512\n"); return 1; }

    uint8_t *buffer = aligned_alloc(ALIGNMENT, BUFFER_BYTES);
    if (!buffer) { fprintf(stderr, "allocating %zu bytes failed\n", BUFFER_BYTES); return 1; }
    /* distinct words everywhere: pages of identical bytes could be merged (by a hypervisor or
     * KSM) into one physical page, and then the passes would read cache, not memory */
    uint64_t fill_sum = 0, state = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < BUFFER_BYTES / 8; i++) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        ((uint64_t *)buffer)[i] = state;
    }

    /* shares are multiples of 256 bytes, the AVX-512 loop's stride */
    size_t share_bytes = BUFFER_BYTES / (size_t)n_threads / 256 * 256;
    pthread_barrier_t barrier;
    if (pthread_barrier_init(&barrier, NULL, (unsigned)n_threads + 1)) { fprintf(stderr, "pthread_barrier_init failed\n"); return 1; }
    struct share *shares = calloc((size_t)n_threads, sizeof *shares);
    pthread_t *threads = calloc((size_t)n_threads, sizeof *threads);
    if (!shares || !threads) { fprintf(stderr, "out of memory\n"); return 1; }
    for (long i = 0; i < n_threads; i++) {
        shares[i] = (struct share){ buffer + (size_t)i * share_bytes, share_bytes, &barrier, 0 };
        if (pthread_create(&threads[i], NULL, read_share, &shares[i])) { fprintf(stderr, "pthread_create failed\n"); return 1; }
    }
    double best_s = 0;
    for (int pass = 0; pass < PASSES; pass++) {
        pthread_barrier_wait(&barrier);
        double t = wall_seconds();
        pthread_barrier_wait(&barrier);
        double pass_s = wall_seconds() - t;
        if (pass == 0 || pass_s < best_s) best_s = pass_s;
    }
    uint64_t checksum = 0;
    for (long i = 0; i < n_threads; i++) {
        if (pthread_join(threads[i], NULL)) { fprintf(stderr, "pthread_join failed\n"); return 1; }
        checksum += shares[i].sum;
    }
    /* the shares' word sums, known from the fill: a mismatch means the loops skipped memory */
    for (size_t i = 0; i < share_bytes * (size_t)n_threads / 8; i++) fill_sum += ((const uint64_t *)buffer)[i];
    uint64_t expected = (uint64_t)PASSES * fill_sum;
    if (checksum != expected) { fprintf(stderr, "checksum %llu, expected %llu\n", (unsigned long long)checksum, (unsigned long long)expected); return 1; }
    printf("bandwidth_gbs=%.1f threads=%ld\n", share_bytes * (double)n_threads / best_s / 1e9, n_threads);
    pthread_barrier_destroy(&barrier);
    free(threads);
    free(shares);
    free(buffer);
    return 0;
}
