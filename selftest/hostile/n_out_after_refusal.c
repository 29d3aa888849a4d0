/* n_out_after_refusal.c - tl_kv_import refuses what the reference refuses, but leaves *n_out
 * at 1 (the contract: 0 after any failure): a status breach, not a crash. */
#define HOSTILE_IMPORT
#include "hostile.h"

int tl_kv_import(tl_kv_pool *pool, const uint8_t *env, size_t len, uint32_t *blocks_out,
                 uint32_t max_blocks, uint32_t *n_out)
{
    int status = tl_kv_import_reference(pool, env, len, blocks_out, max_blocks, n_out);
    if (status != TL_OK && n_out != NULL)
        *n_out = 1;
    return status;
}
