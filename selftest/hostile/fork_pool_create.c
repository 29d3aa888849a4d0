/* fork_pool_create.c - tl_kv_pool_create forks a child that sleeps for minutes (a background
 * thread of an engine gone wrong, as a process), then creates the pool as the reference does.
 * The children's pids go to the file named by $TLKV_HOSTILE_PIDS (hostile.h). */
#define HOSTILE_POOL_CREATE
#include "hostile.h"

tl_kv_pool *tl_kv_pool_create(uint32_t block_tokens, uint32_t n_layers, uint32_t n_kv_heads,
                              uint32_t head_dim, uint32_t capacity)
{
    hostile_fork_sleeper();
    return tl_kv_pool_create_reference(block_tokens, n_layers, n_kv_heads, head_dim, capacity);
}
