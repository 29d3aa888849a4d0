/* lazy_export.c - tl_kv_export checks its arguments as the reference does and returns the
 * reference's status, but never writes `out`: only the exported bytes can show it. */
#define HOSTILE_EXPORT
#include "hostile.h"

int tl_kv_export(const tl_kv_pool *pool, const uint32_t *blocks, uint32_t n_blocks,
                 uint16_t version, uint8_t *out, size_t out_len)
{
    (void)out;
    uint8_t *scratch = malloc(out_len ? out_len : 1);
    if (scratch == NULL)
        return TL_EINVAL;
    int status = tl_kv_export_reference(pool, blocks, n_blocks, version, scratch, out_len);
    free(scratch);
    return status;
}
