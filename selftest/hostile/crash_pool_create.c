/* crash_pool_create.c - tl_kv_pool_create crashes (SIGSEGV) on every call: the library loads,
 * then faults in the first call the suite makes into it, while describing it. */
#define HOSTILE_POOL_CREATE
#include "hostile.h"

tl_kv_pool *tl_kv_pool_create(uint32_t block_tokens, uint32_t n_layers, uint32_t n_kv_heads,
                              uint32_t head_dim, uint32_t capacity)
{
    (void)block_tokens, (void)n_layers, (void)n_kv_heads, (void)head_dim, (void)capacity;
    raise(SIGSEGV);
    return NULL;
}
