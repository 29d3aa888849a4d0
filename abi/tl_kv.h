/*
 * tl_kv.h - the C ABI of a KV-cache block pool and its TLKV export envelope.
 *
 * An engine under test exports these symbols with the C calling convention (directly, or
 * through a thin shim); the conformance suite loads the shared library with ctypes
 * (--impl=ctypes:PATH.so). The byte format (block hash, envelope v1/v2, reader rules) is
 * defined by the project's spec, "KV blocks: hashing and the export envelope".
 *
 * Conventions:
 *   - `kv` arrays are f32 [L][2][Hkv][B][D] in C order: index 0 of the second axis is K,
 *     index 1 is V (L = n_layers, Hkv = n_kv_heads, B = block_tokens, D = head_dim).
 *   - Functions returning int return TL_OK (0) on success or one of the negative statuses.
 *   - An engine whose status numbers differ maps them in the adapter's YAML profile; these
 *     numbers are the default.
 */
#ifndef TL_KV_H
#define TL_KV_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TL_OK         0
#define TL_EINVAL    (-1)   /* a caller's argument is wrong (not an envelope fault) */
#define TL_ENOMEM    (-2)   /* the pool lacks free blocks */
#define TL_EFORMAT   (-3)   /* the envelope fails a reader rule */
#define TL_ESHAPE    (-4)   /* the envelope's geometry differs from the pool's */
#define TL_ENOTFOUND (-5)   /* no registered block has that hash */

typedef enum tl_dtype { TL_F32 = 0, TL_F16 = 1, TL_BF16 = 2, TL_F8_E4M3 = 3 } tl_dtype;

/* Opaque: the in-memory layout of a pool is private to each implementation. */
typedef struct tl_kv_pool tl_kv_pool;

/*
 * H(parent, toks) = fnv1a64(le_u64(parent) || le_u32(toks[0]) || ... || le_u32(toks[n-1])),
 * with a result of 0 replaced by 1 (0 is reserved for "no hash", the partial tail block).
 * A full block of a sequence passes n_toks = block_tokens; block 0 passes parent = 0.
 */
uint64_t tl_kv_block_hash(uint64_t parent, const uint32_t *toks, uint32_t n_toks);

/* Bit v set: reads format v. 0x2 = v1 only, 0x6 = v1 and v2. */
uint32_t tl_kv_read_versions(void);
/* Bit v set: writes (exports) format v. Same encoding as tl_kv_read_versions. */
uint32_t tl_kv_write_versions(void);

/*
 * Creates an empty pool of `capacity` blocks with the given geometry; every block is free.
 * Returns NULL on bad arguments (a zero dimension or capacity, sizes that overflow) or when
 * memory cannot be had.
 */
tl_kv_pool *tl_kv_pool_create(uint32_t block_tokens, uint32_t n_layers, uint32_t n_kv_heads,
                              uint32_t head_dim, uint32_t capacity);   /* NULL on bad arguments */
/* Frees the pool and every block in it. NULL is accepted and does nothing. */
void     tl_kv_pool_destroy(tl_kv_pool *pool);
/* The precision the pool stores values in: TL_F16 or TL_F32. */
tl_dtype tl_kv_pool_dtype(const tl_kv_pool *pool);                     /* TL_F16 or TL_F32 */
/* Number of free (unallocated) blocks. */
uint32_t tl_kv_pool_free_blocks(const tl_kv_pool *pool);

/*
 * Allocates a block, stores n_tokens positions of `kv` (positions >= n_tokens are ignored
 * and read back as 0) and the hash, registers a non-zero hash, and returns the block id in
 * *block_out. The block holds one reference.
 *   TL_OK      success
 *   TL_EINVAL  NULL argument, n_tokens outside 1..B, or a non-zero hash with n_tokens != B
 *   TL_ENOMEM  no free block
 */
int tl_kv_pool_write(tl_kv_pool *pool, uint64_t block_hash, uint32_t n_tokens,
                     const float *kv, uint32_t *block_out);
/*
 * Reads an allocated block: its hash, n_tokens and values as f32 [L][2][Hkv][B][D], with
 * positions >= n_tokens as 0.
 *   TL_OK      success
 *   TL_EINVAL  NULL argument, or `block` is not an allocated block
 */
int tl_kv_pool_read(const tl_kv_pool *pool, uint32_t block, uint64_t *block_hash,
                    uint32_t *n_tokens, float *kv);
/*
 * Looks up the registered block with this hash (takes no reference).
 *   TL_OK        *block_out set
 *   TL_ENOTFOUND no registered block has that hash
 *   TL_EINVAL    NULL argument
 */
int tl_kv_pool_find(const tl_kv_pool *pool, uint64_t block_hash, uint32_t *block_out);
/*
 * Drops one reference to a block; at zero the block is freed and its hash unregistered.
 *   TL_OK      success
 *   TL_EINVAL  NULL pool, or `block` is not an allocated block
 */
int tl_kv_pool_release(tl_kv_pool *pool, uint32_t block);
/*
 * OPTIONAL: a library may leave this symbol out (the suite then skips the cases of several
 * references). Takes one more reference to an allocated block, as the decode side of a
 * transfer does on its cached copy: the block, its values and its registered hash stay until
 * every reference is released.
 *   TL_OK      success
 *   TL_EINVAL  NULL pool, or `block` is not an allocated block
 */
int tl_kv_pool_retain(tl_kv_pool *pool, uint32_t block);

/*
 * Size in bytes of an envelope of n_blocks blocks of this pool's geometry in `version`:
 * 28 + n_blocks * (12 + P) + 4. Returns 0 when this library does not write that version
 * (also for a NULL pool, or a size that does not fit size_t).
 */
size_t tl_kv_export_bytes(const tl_kv_pool *pool, uint32_t n_blocks, uint16_t version); /* 0: not written */
/*
 * Writes the envelope of blocks[0 .. n_blocks) in `version` to out[0 .. tl_kv_export_bytes).
 *   TL_OK      success
 *   TL_EINVAL  NULL argument, a block id that is not allocated, a version this library does
 *              not write, or out_len smaller than tl_kv_export_bytes
 */
int tl_kv_export(const tl_kv_pool *pool, const uint32_t *blocks, uint32_t n_blocks,
                 uint16_t version, uint8_t *out, size_t out_len);      /* TL_EINVAL if out_len too small */
/*
 * Validates an envelope against every reader rule, then allocates its blocks, stores their
 * values in the pool's precision, registers their non-zero hashes, fills blocks_out in
 * envelope order and sets *n_out to the envelope's n_blocks. All or nothing: on any failure
 * *n_out is 0 and the pool (free blocks, registered hashes, existing blocks) is unchanged.
 *   TL_OK      success
 *   TL_EFORMAT the envelope fails a reader rule (length, magic, CRC, version not read,
 *              dtype not the version's, n_tokens outside 1..B, non-zero hash of a partial block)
 *   TL_ESHAPE  block_tokens, n_layers, n_kv_heads or head_dim differs from the pool's
 *   TL_EINVAL  NULL pool, env or n_out, or more blocks than max_blocks (a NULL blocks_out
 *              counts as max_blocks = 0); checked after the reader rules
 *   TL_ENOMEM  more blocks than the pool has free
 */
int tl_kv_import(tl_kv_pool *pool, const uint8_t *env, size_t len,
                 uint32_t *blocks_out, uint32_t max_blocks, uint32_t *n_out);

#ifdef __cplusplus
}
#endif

#endif /* TL_KV_H */
