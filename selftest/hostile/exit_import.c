/* exit_import.c - tl_kv_import calls exit(0) on every call: an engine that "handles" a bad
 * envelope by ending the process, with the status of success. */
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
    exit(0);
}
