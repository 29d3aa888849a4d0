/* hang_on_refusal.c - tl_kv_import never returns on an envelope the reference refuses, and
 * imports the others as the reference does. */
#define HOSTILE_IMPORT
#include "hostile.h"

int tl_kv_import(tl_kv_pool *pool, const uint8_t *env, size_t len, uint32_t *blocks_out,
                 uint32_t max_blocks, uint32_t *n_out)
{
    int status = tl_kv_import_reference(pool, env, len, blocks_out, max_blocks, n_out);
    volatile int spinning = status != TL_OK; /* volatile: the loop may not be assumed to end */
    while (spinning) {
    }
    return status;
}
