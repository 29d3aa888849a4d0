/*
 * fault_import.h - the bundled reference, with a fault planted in tl_kv_import.
 *
 * A test library of selftest/faulty includes this after defining
 *     static void fault(const uint8_t *env, size_t len);
 * and ends with FAULTY_IMPORT(trigger): tl_kv_import then calls fault() on any envelope whose
 * first block record has the 64-bit hash `trigger`, and behaves as the reference otherwise.
 * The triggers are hashes no token sequence of the corpus chains to (nor a bit flip of one);
 * the cases carrying them are in selftest/faulty/cases/ctypes-adapter.yaml.
 */
#ifndef FAULT_IMPORT_H
#define FAULT_IMPORT_H

#include <stddef.h>
#include <stdint.h>

#define TRIGGER_SEGV     0xDEAD00000000000BULL  /* case crash-import */
#define TRIGGER_HANG     0xDEAD00000000000CULL  /* case hang-import */
#define TRIGGER_OVERFLOW 0xDEAD00000000000DULL  /* case overflow-import */

/* The reference's tl_kv_import, renamed so the wrapper below can take its name. */
#define tl_kv_import tl_kv_import_reference
#include "../../reference/clib/tl_kv_ref.c"
#undef tl_kv_import

static void fault(const uint8_t *env, size_t len);

/* The first record's block_hash, at offset 28 (after the header); 0 if there is none. */
static uint64_t first_block_hash(const uint8_t *env, size_t len)
{
    return env != NULL && len >= HEADER_BYTES + RECORD_HEAD_BYTES + TRAILER_BYTES
               ? get_u64(env + HEADER_BYTES)
               : 0;
}

#define FAULTY_IMPORT(trigger)                                                                \
    int tl_kv_import(tl_kv_pool *pool, const uint8_t *env, size_t len, uint32_t *blocks_out, \
                     uint32_t max_blocks, uint32_t *n_out)                                    \
    {                                                                                         \
        if (first_block_hash(env, len) == (trigger))                                          \
            fault(env, len);                                                                  \
        return tl_kv_import_reference(pool, env, len, blocks_out, max_blocks, n_out);         \
    }

#endif /* FAULT_IMPORT_H */
