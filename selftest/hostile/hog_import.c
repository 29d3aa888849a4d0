/*
 * hog_import.c - tl_kv_import allocates memory in 64 MiB chunks and writes every byte of each,
 * without checking what malloc returned, before importing as the reference does. Under the
 * suite's address-space limit (--worker-memory) malloc fails and the worker crashes on the
 * NULL; without the limit the import succeeds.
 *
 * HOG_TOTAL is 2 GiB over the worker's life, eight times the 256 MiB the self-test allows: far
 * past the limit, yet small enough that a suite which forgot to apply the limit costs the host
 * a bounded amount of memory (and lets the run pass, which the self-test then reports).
 */
#define HOSTILE_IMPORT
#include "hostile.h"

#define HOG_CHUNK ((size_t)64 << 20)
#define HOG_TOTAL ((size_t)2 << 30)

/* Every chunk escapes through here, so no compiler may drop the allocations as unused. */
static void *volatile hog_last;
static size_t hog_taken;

int tl_kv_import(tl_kv_pool *pool, const uint8_t *env, size_t len, uint32_t *blocks_out,
                 uint32_t max_blocks, uint32_t *n_out)
{
    while (hog_taken < HOG_TOTAL) {
        char *chunk = malloc(HOG_CHUNK);
        memset(chunk, 0x5A, HOG_CHUNK); /* the bug: NULL is not checked */
        hog_last = chunk;
        hog_taken += HOG_CHUNK;
    }
    return tl_kv_import_reference(pool, env, len, blocks_out, max_blocks, n_out);
}
