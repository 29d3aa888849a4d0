/* abort_import.c - tl_kv_import calls abort() on every call (a failed assertion, say). */
#define HOSTILE_IMPORT
#include "hostile.h"

int tl_kv_import(tl_kv_pool *pool, const uint8_t *env, size_t len, uint32_t *blocks_out,
                 uint32_t max_blocks, uint32_t *n_out)
{
    (void)pool;
    (void)env;
    (void)len;
    (void)blocks_out;
    (void)max_blocks;
    (void)n_out;
    abort();
}
