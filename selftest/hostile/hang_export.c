/* hang_export.c - tl_kv_export never returns: every export hangs. */
#define HOSTILE_EXPORT
#include "hostile.h"

int tl_kv_export(const tl_kv_pool *pool, const uint32_t *blocks, uint32_t n_blocks,
                 uint16_t version, uint8_t *out, size_t out_len)
{
    (void)pool;
    (void)blocks;
    (void)n_blocks;
    (void)version;
    (void)out;
    (void)out_len;
    volatile int spinning = 1; /* volatile: the loop may not be assumed to end */
    while (spinning) {
    }
    return TL_OK;
}
