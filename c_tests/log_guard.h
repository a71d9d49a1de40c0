/* The log callback of every C test program (`llama_log_set(ds_log_guard, NULL)`).
 *
 * A line containing "internal error" is what the library's API boundary logs when it catches a
 * panic (src/api/boundary.rs): the caller gets the failure value, but a panic is a bug, never a
 * clean rejection, so the program aborts on it (the harness then fails) -- unless the program
 * declared, around one call, that it provokes one on purpose (`ds_log_expect_internal`, for
 * walkthrough.c's check that a panic unwinds to the boundary however the library is linked).
 *
 * Lines logged after `ds_log_mark()` are kept (64 KiB) so a single-threaded program can require
 * the specific reason of a refusal (`ds_log_has`). `DS_TEST_LOG=1` prints every line.
 * Header-only, for C11 and C++17. */
#ifndef DS_TEST_LOG_GUARD_H
#define DS_TEST_LOG_GUARD_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

static int ds_log_lines;          /* lines logged, on any thread (atomic builtins) */
static int ds_log_internal_ok;    /* nonzero while the program expects an internal error */
static int ds_log_internal_seen;  /* internal errors logged while expected */
static int ds_log_capturing;      /* set by ds_log_mark: keep the text (single-threaded use) */
static size_t ds_log_len;
static char ds_log_text[1 << 16];

static inline void ds_log_guard(enum ggml_log_level level, const char *text, void *ud) {
    (void) level; (void) ud;
    __atomic_fetch_add(&ds_log_lines, 1, __ATOMIC_RELAXED);
    if (getenv("DS_TEST_LOG")) fputs(text, stderr);
    if (strstr(text, "internal error")) {
        if (!__atomic_load_n(&ds_log_internal_ok, __ATOMIC_RELAXED)) {
            fprintf(stderr, "TEST FAILED: the library caught a panic at its C boundary (a bug, not a clean rejection): %s\n", text);
            abort();
        }
        __atomic_fetch_add(&ds_log_internal_seen, 1, __ATOMIC_RELAXED);
    }
    if (ds_log_capturing) {
        size_t n = strlen(text);
        if (n > sizeof ds_log_text - 1 - ds_log_len) n = sizeof ds_log_text - 1 - ds_log_len;
        memcpy(ds_log_text + ds_log_len, text, n);
        ds_log_len += n;
        ds_log_text[ds_log_len] = 0;
    }
}

/* Installs the guard as the library's log sink. */
static inline void ds_log_guard_install(void) { llama_log_set(ds_log_guard, NULL); }

/* Starts keeping the text of the lines logged from now on (drops what was kept). */
static inline void ds_log_mark(void) {
    ds_log_capturing = 1;
    ds_log_len = 0;
    ds_log_text[0] = 0;
}

/* Whether a line logged since the last mark contains `s`. */
static inline int ds_log_has(const char *s) { return strstr(ds_log_text, s) != NULL; }

/* What was logged since the last mark. */
static inline const char *ds_log_since_mark(void) { return ds_log_text; }

/* Lines logged so far. */
static inline int ds_log_count(void) { return __atomic_load_n(&ds_log_lines, __ATOMIC_RELAXED); }

/* Allows (1) or again forbids (0) internal errors; returns how many were logged while allowed. */
static inline int ds_log_expect_internal(int on) {
    __atomic_store_n(&ds_log_internal_ok, on, __ATOMIC_RELAXED);
    return __atomic_load_n(&ds_log_internal_seen, __ATOMIC_RELAXED);
}

#endif
