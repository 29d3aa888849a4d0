/* close_fds_pool_create.c - the first tl_kv_pool_create of a process closes every file
 * descriptor it did not open (a daemon's start-up habit), the worker's pipes among them, then
 * creates the pool as the reference does. */
#define HOSTILE_POOL_CREATE
#include "hostile.h"

tl_kv_pool *tl_kv_pool_create(uint32_t block_tokens, uint32_t n_layers, uint32_t n_kv_heads,
                              uint32_t head_dim, uint32_t capacity)
{
    static int pools_created = 0;
    if (pools_created++ == 0)
        for (int fd = 3; fd < 1024; fd++)
            close(fd);
    return tl_kv_pool_create_reference(block_tokens, n_layers, n_kv_heads, head_dim, capacity);
}
