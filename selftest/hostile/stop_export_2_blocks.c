/* stop_export_2_blocks.c - tl_kv_export stops its own process (SIGSTOP, a stray debugging
 * aid) when asked for 2 or more blocks, and answers 1-block exports as the reference does. */
#define HOSTILE_EXPORT
#include "hostile.h"

int tl_kv_export(const tl_kv_pool *pool, const uint32_t *blocks, uint32_t n_blocks,
                 uint16_t version, uint8_t *out, size_t out_len)
{
    if (n_blocks >= 2)
        raise(SIGSTOP);
    return tl_kv_export_reference(pool, blocks, n_blocks, version, out, out_len);
}
