/* fork_segv_import.c - tl_kv_import forks a child that keeps the worker's pipes open and
 * sleeps, then the worker crashes with SIGSEGV. The reply pipe then never reaches its end (the
 * child still holds it): only the worker's own death says what happened. The children's pids
 * go to the file named by $TLKV_HOSTILE_PIDS (hostile.h). */
#define HOSTILE_IMPORT
#include "hostile.h"

int tl_kv_import(tl_kv_pool *pool, const uint8_t *env, size_t len, uint32_t *blocks_out,
                 uint32_t max_blocks, uint32_t *n_out)
{
    hostile_fork_sleeper();
    raise(SIGSEGV);
    return tl_kv_import_reference(pool, env, len, blocks_out, max_blocks, n_out);
}
