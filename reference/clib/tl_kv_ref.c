/*
 * tl_kv_ref.c - reference implementation of abi/tl_kv.h, written from the spec
 * ("KV blocks: hashing and the export envelope") and the testee contract alone.
 *
 * Build: cc -std=c11 -O2 -Wall -Wextra -Werror -fPIC -shared -I abi \
 *           reference/clib/tl_kv_ref.c -o libtl_kv_ref.so
 *   -DTL_KV_POOL_F32  the pool stores f32 (default: f16)
 *   -DTL_KV_V1_ONLY   reads and writes envelope v1 only (default: v1 and v2)
 *
 * Decisions where the spec and the contract are silent (SHOULD level, not MUST):
 *  1. tl_kv_pool_find takes no reference (its pool is const); a block holds one reference
 *     from the write or import that made it, and one more for each tl_kv_pool_retain.
 *  2. A block written or imported with a hash that is already registered is still allocated
 *     and keeps its hash (read and export report it), but the registry keeps the first
 *     registration. When the registered block is freed the hash is unregistered; a live
 *     duplicate is not promoted (the cache just misses).
 *  3. Import always allocates n new blocks, even for hashes already held: deduplication is
 *     the transfer layer's job, and ENOMEM is judged against all n blocks.
 *  4. Reader-rule order: length >= 32, magic, version read, exact length, CRC, dtype, then
 *     geometry (TL_ESHAPE), then each record's n_tokens / hash (TL_EFORMAT); then the
 *     caller's limits (max_blocks: TL_EINVAL) and the pool's (TL_ENOMEM). Only the place of
 *     TL_ESHAPE is observable: integrity faults win over a geometry mismatch, and a geometry
 *     mismatch wins over a bad record.
 *  5. Import ignores payload bytes at positions >= n_tokens (no reader rule names them);
 *     they read back as 0. v2 scales are not validated (no reader rule): NaN, inf, 0 or a
 *     negative scale decode literally as e4m3_to_f32(byte) * scale.
 *  6. A NULL pointer argument is TL_EINVAL (tl_kv_pool_read needs all three outputs). For
 *     tl_kv_import a NULL blocks_out acts as max_blocks = 0. tl_kv_block_hash with NULL
 *     tokens and n_toks > 0 returns 0, a value H never produces.
 *  7. An envelope of 0 blocks is valid: export writes 32 bytes, import succeeds with *n_out 0.
 *     Export may list a block id more than once.
 *  8. tl_kv_export returns TL_OK, writes exactly tl_kv_export_bytes bytes and leaves `out`
 *     untouched on failure. tl_kv_export_bytes is also 0 for a NULL pool or a size that does
 *     not fit size_t.
 *  9. An f16 pool rounds written values to f16 (nearest even; beyond the range: +-inf; NaN
 *     keeps its top 10 payload bits, and a payload that would vanish becomes 1 so it stays a
 *     NaN, as numpy does). -0.0 is kept.
 * 10. The v2 writer applies the contract's formula literally, also to values it was not
 *     written for: a NaN never raises amax (comparisons with NaN are false) and encodes as
 *     0x7F|sign; an infinite amax gives an infinite scale; an amax so small that amax / 448
 *     is an f32 subnormal has its quotients clamped to +-448, and one where it is 0 is
 *     written as an all-zero slab (V2-TINY-SLAB). e4m3 of a magnitude above 464 (the
 *     midpoint between 448 and the NaN code) or of +-inf is NaN (0x7F|sign), as in
 *     ml_dtypes' float8_e4m3fn.
 */
#include "tl_kv.h"

#include <stdlib.h>
#include <string.h>

#ifdef TL_KV_V1_ONLY
#define TL_KV_VERSIONS 0x2u
#else
#define TL_KV_VERSIONS 0x6u
#endif

#define HEADER_BYTES 28u
#define RECORD_HEAD_BYTES 12u
#define TRAILER_BYTES 4u
#define NO_BLOCK UINT32_MAX

/* ---------------------------------------------------------------- bits and numerics */

static uint32_t f32_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float bits_f32(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* v / 2^s rounded to nearest, ties to even; 1 <= s <= 31. */
static uint32_t rne_shift(uint32_t v, unsigned s)
{
    uint32_t q = v >> s;
    uint32_t rem = v & ((1u << s) - 1u);
    uint32_t half = 1u << (s - 1u);
    if (rem > half || (rem == half && (q & 1u)))
        q++;
    return q;
}

/*
 * Done with integers rather than _Float16 or F16C: hardware conversion quiets signalling
 * NaNs, and the f16 pool must keep NaN payloads bit for bit.
 */
static uint16_t f32_to_f16(float x)
{
    uint32_t u = f32_bits(x);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t exp = (u >> 23) & 0xFFu;
    uint32_t man = u & 0x7FFFFFu;
    if (exp == 0xFFu) {
        uint32_t payload = man >> 13;
        if (man != 0 && payload == 0)
            payload = 1;
        return (uint16_t)(sign | 0x7C00u | payload);
    }
    if (exp == 0) /* +-0 or an f32 subnormal, far below half the least f16 subnormal */
        return sign;
    int e = (int)exp - 127;
    uint32_t m24 = man | 0x800000u;
    if (e >= -14) {
        /* r in [1024, 2048]: a carry out of the mantissa bumps the exponent by itself */
        uint32_t h = ((uint32_t)(e + 15) << 10) + (rne_shift(m24, 13) - 1024u);
        return (uint16_t)(sign | (h >= 0x7C00u ? 0x7C00u : h));
    }
    unsigned shift = (unsigned)(-e - 1); /* in units of 2^-24, the least subnormal */
    if (shift > 24)
        return sign;
    return (uint16_t)(sign | rne_shift(m24, shift));
}

static float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1Fu;
    uint32_t man = h & 0x3FFu;
    if (exp == 0x1Fu)
        return bits_f32(sign | 0x7F800000u | (man << 13));
    if (exp == 0) {
        float v = (float)man * 0x1p-24f; /* exact */
        return sign ? -v : v;
    }
    return bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

/* OCP FP8 E4M3 "fn": bias 7, no infinities, S.1111.111 is NaN, max 448. */
static uint8_t f32_to_e4m3(float x)
{
    uint32_t u = f32_bits(x);
    uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    uint32_t exp = (u >> 23) & 0xFFu;
    uint32_t man = u & 0x7FFFFFu;
    if (exp == 0xFFu)
        return (uint8_t)(sign | 0x7Fu);
    if (exp == 0)
        return sign;
    int e = (int)exp - 127;
    uint32_t m24 = man | 0x800000u;
    uint32_t code;
    if (e >= -6) {
        if (e > 8)
            return (uint8_t)(sign | 0x7Fu);
        code = ((uint32_t)(e + 7) << 3) + (rne_shift(m24, 20) - 8u);
        if (code > 0x7Eu) /* rounded past 448: there is no infinity to go to */
            return (uint8_t)(sign | 0x7Fu);
    } else {
        unsigned shift = (unsigned)(14 - e); /* in units of 2^-9, the least subnormal */
        if (shift > 24)
            return sign;
        code = rne_shift(m24, shift);
    }
    return (uint8_t)(sign | code);
}

static float e4m3_to_f32(uint8_t c)
{
    uint32_t sign = (uint32_t)(c & 0x80u) << 24;
    uint32_t exp = (c >> 3) & 0xFu;
    uint32_t man = c & 0x7u;
    if (exp == 0xFu && man == 0x7u)
        return bits_f32(sign | 0x7FC00000u);
    if (exp == 0) {
        float v = (float)man * 0x1p-9f; /* exact */
        return sign ? -v : v;
    }
    return bits_f32(sign | ((exp + 120u) << 23) | (man << 20));
}

static float abs_f32(float x)
{
    return bits_f32(f32_bits(x) & 0x7FFFFFFFu);
}

/* ---------------------------------------------------------------- little-endian bytes */

static void put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void put_u32(uint8_t *p, uint32_t v)
{
    for (unsigned i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(uint8_t *p, uint64_t v)
{
    for (unsigned i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint16_t get_u16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static uint32_t get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (unsigned i = 0; i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}

static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* ---------------------------------------------------------------- FNV-1a-64, CRC-32C */

static uint64_t fnv1a64_update(uint64_t h, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001B3ull;
    }
    return h;
}

uint64_t tl_kv_block_hash(uint64_t parent, const uint32_t *toks, uint32_t n_toks)
{
    if (toks == NULL && n_toks > 0)
        return 0;
    uint8_t buf[8];
    put_u64(buf, parent);
    uint64_t h = fnv1a64_update(0xCBF29CE484222325ull, buf, 8);
    for (uint32_t i = 0; i < n_toks; i++) {
        put_u32(buf, toks[i]);
        h = fnv1a64_update(h, buf, 4);
    }
    return h == 0 ? 1 : h;
}

static uint32_t crc32c(const uint8_t *p, size_t n)
{
    /* Built per call (2 KiB of work) so no shared mutable state needs a once-guard. */
    uint32_t table[256];
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (unsigned k = 0; k < 8; k++)
            c = (c & 1u) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        table[i] = c;
    }
    uint32_t crc = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++)
        crc = table[(crc ^ p[i]) & 0xFFu] ^ (crc >> 8);
    return crc ^ 0xFFFFFFFFu;
}

/* ---------------------------------------------------------------- sizes */

static int mul_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    if (a != 0 && b > UINT64_MAX / a)
        return 0;
    *out = a * b;
    return 1;
}

static int add_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    if (b > UINT64_MAX - a)
        return 0;
    *out = a + b;
    return 1;
}

static int version_supported(uint32_t version)
{
    return version < 32 && ((TL_KV_VERSIONS >> version) & 1u);
}

/* Payload bytes P of one block record in `version`; 0 on overflow or an unknown version. */
static int payload_bytes(uint32_t version, uint32_t B, uint32_t L, uint32_t H, uint32_t D,
                         uint64_t *out)
{
    uint64_t slabs, slab_elems, elems;
    if (!mul_u64((uint64_t)L * 2u, H, &slabs) || !mul_u64(B, D, &slab_elems) ||
        !mul_u64(slabs, slab_elems, &elems))
        return 0;
    if (version == 1)
        return mul_u64(elems, 2, out);
    if (version == 2) {
        uint64_t per_slab;
        return add_u64(slab_elems, 4, &per_slab) && mul_u64(slabs, per_slab, out);
    }
    return 0;
}

/* 28 + n * (12 + P) + 4, checked; 0 when it overflows. */
static uint64_t envelope_bytes(uint64_t n, uint64_t payload)
{
    uint64_t record, body, total;
    if (!add_u64(payload, RECORD_HEAD_BYTES, &record) || !mul_u64(n, record, &body) ||
        !add_u64(body, HEADER_BYTES + TRAILER_BYTES, &total))
        return 0;
    return total;
}

/* ---------------------------------------------------------------- the pool */

#ifdef TL_KV_POOL_F32
typedef float elem_t;
#define POOL_DTYPE TL_F32
static float elem_load(elem_t e) { return e; }
static elem_t elem_store(float x) { return x; }
static uint16_t elem_to_f16(elem_t e) { return f32_to_f16(e); }
static elem_t elem_from_f16(uint16_t h) { return f16_to_f32(h); }
#else
typedef uint16_t elem_t;
#define POOL_DTYPE TL_F16
static float elem_load(elem_t e) { return f16_to_f32(e); }
static elem_t elem_store(float x) { return f32_to_f16(x); }
static uint16_t elem_to_f16(elem_t e) { return e; }
static elem_t elem_from_f16(uint16_t h) { return h; }
#endif

struct tl_kv_pool {
    uint32_t B, L, H, D, capacity;
    size_t slabs;       /* L * 2 * Hkv */
    size_t slab_elems;  /* B * D */
    size_t block_elems; /* slabs * slab_elems */
    uint32_t n_free;
    uint32_t free_hint; /* no block below this id is free */
    elem_t *values;     /* [capacity][L][2][Hkv][B][D] */
    uint64_t *hash;
    uint32_t *n_tokens;
    uint32_t *refs;     /* 0: the block is free */
    /* hash registry: open addressing, linear probing; a slot holds block id + 1, 0 = empty */
    uint32_t *table;
    size_t table_mask;
};

static size_t reg_home(const tl_kv_pool *pool, uint64_t h)
{
    /* Hashes chosen by a test (1, 2, 3, or multiples of 2^k) must not cluster: mix them. */
    h ^= h >> 33;
    h *= 0xFF51AFD7ED558CCDull;
    h ^= h >> 33;
    return (size_t)h & pool->table_mask;
}

static uint32_t reg_find(const tl_kv_pool *pool, uint64_t h)
{
    for (size_t i = reg_home(pool, h);; i = (i + 1) & pool->table_mask) {
        uint32_t slot = pool->table[i];
        if (slot == 0)
            return NO_BLOCK;
        if (pool->hash[slot - 1] == h)
            return slot - 1;
    }
}

/* Keeps the first registration of a hash. */
static void reg_add(tl_kv_pool *pool, uint32_t block)
{
    uint64_t h = pool->hash[block];
    if (h == 0 || reg_find(pool, h) != NO_BLOCK)
        return;
    size_t i = reg_home(pool, h);
    while (pool->table[i] != 0)
        i = (i + 1) & pool->table_mask;
    pool->table[i] = block + 1;
}

static void reg_remove(tl_kv_pool *pool, uint32_t block)
{
    uint64_t h = pool->hash[block];
    if (h == 0)
        return;
    size_t i = reg_home(pool, h);
    for (;; i = (i + 1) & pool->table_mask) {
        if (pool->table[i] == 0)
            return; /* a duplicate that was never registered */
        if (pool->table[i] == block + 1)
            break;
    }
    /* Backward-shift deletion keeps every probe chain unbroken without tombstones. */
    for (size_t j = i;;) {
        j = (j + 1) & pool->table_mask;
        if (pool->table[j] == 0)
            break;
        size_t k = reg_home(pool, pool->hash[pool->table[j] - 1]);
        int stays = (i <= j) ? (i < k && k <= j) : (i < k || k <= j);
        if (!stays) {
            pool->table[i] = pool->table[j];
            i = j;
        }
    }
    pool->table[i] = 0;
}

tl_kv_pool *tl_kv_pool_create(uint32_t block_tokens, uint32_t n_layers, uint32_t n_kv_heads,
                              uint32_t head_dim, uint32_t capacity)
{
    if (block_tokens == 0 || n_layers == 0 || n_kv_heads == 0 || head_dim == 0 ||
        capacity == 0)
        return NULL;
    uint64_t slabs, slab_elems, block_elems, bytes, p1, p2;
    if (!mul_u64((uint64_t)n_layers * 2u, n_kv_heads, &slabs) ||
        !mul_u64(block_tokens, head_dim, &slab_elems) ||
        !mul_u64(slabs, slab_elems, &block_elems) ||
        !mul_u64(block_elems, sizeof(elem_t), &bytes) || !mul_u64(bytes, capacity, &bytes) ||
        bytes > SIZE_MAX)
        return NULL;
    /* An envelope of one block must have a size, so export_bytes is never 0 for n = 1. */
    if (!payload_bytes(1, block_tokens, n_layers, n_kv_heads, head_dim, &p1) ||
        !payload_bytes(2, block_tokens, n_layers, n_kv_heads, head_dim, &p2) ||
        envelope_bytes(1, p1) == 0 || envelope_bytes(1, p2) == 0 ||
        envelope_bytes(1, p1) > SIZE_MAX || envelope_bytes(1, p2) > SIZE_MAX)
        return NULL;
    /* A table at most half full keeps probe chains short. */
    uint64_t table_size = 1;
    while (table_size < 2ull * capacity)
        table_size <<= 1;
    if (table_size > SIZE_MAX / sizeof(uint32_t))
        return NULL;

    tl_kv_pool *pool = calloc(1, sizeof *pool);
    if (pool == NULL)
        return NULL;
    pool->B = block_tokens;
    pool->L = n_layers;
    pool->H = n_kv_heads;
    pool->D = head_dim;
    pool->capacity = capacity;
    pool->slabs = (size_t)slabs;
    pool->slab_elems = (size_t)slab_elems;
    pool->block_elems = (size_t)block_elems;
    pool->n_free = capacity;
    pool->free_hint = 0;
    pool->values = calloc(capacity, (size_t)block_elems * sizeof(elem_t));
    pool->hash = calloc(capacity, sizeof *pool->hash);
    pool->n_tokens = calloc(capacity, sizeof *pool->n_tokens);
    pool->refs = calloc(capacity, sizeof *pool->refs);
    pool->table = calloc((size_t)table_size, sizeof *pool->table);
    pool->table_mask = (size_t)table_size - 1;
    if (!pool->values || !pool->hash || !pool->n_tokens || !pool->refs || !pool->table) {
        tl_kv_pool_destroy(pool);
        return NULL;
    }
    return pool;
}

void tl_kv_pool_destroy(tl_kv_pool *pool)
{
    if (pool == NULL)
        return;
    free(pool->values);
    free(pool->hash);
    free(pool->n_tokens);
    free(pool->refs);
    free(pool->table);
    free(pool);
}

tl_dtype tl_kv_pool_dtype(const tl_kv_pool *pool)
{
    (void)pool;
    return POOL_DTYPE;
}

uint32_t tl_kv_pool_free_blocks(const tl_kv_pool *pool)
{
    return pool ? pool->n_free : 0;
}

uint32_t tl_kv_read_versions(void)
{
    return TL_KV_VERSIONS;
}

uint32_t tl_kv_write_versions(void)
{
    return TL_KV_VERSIONS;
}

static int block_live(const tl_kv_pool *pool, uint32_t block)
{
    return block < pool->capacity && pool->refs[block] > 0;
}

static elem_t *block_values(const tl_kv_pool *pool, uint32_t block)
{
    return pool->values + (size_t)block * pool->block_elems;
}

/* The caller has checked n_free > 0. Lowest free id first. */
static uint32_t block_alloc(tl_kv_pool *pool, uint64_t h, uint32_t n_tokens)
{
    uint32_t id = pool->free_hint;
    while (pool->refs[id] != 0)
        id++;
    pool->free_hint = id + 1;
    pool->refs[id] = 1;
    pool->hash[id] = h;
    pool->n_tokens[id] = n_tokens;
    pool->n_free--;
    return id;
}

/* Position (token index within the block) of element i of [L][2][Hkv][B][D]. */
static uint32_t elem_pos(const tl_kv_pool *pool, size_t i)
{
    return (uint32_t)((i / pool->D) % pool->B);
}

int tl_kv_pool_write(tl_kv_pool *pool, uint64_t block_hash, uint32_t n_tokens,
                     const float *kv, uint32_t *block_out)
{
    if (pool == NULL || kv == NULL || block_out == NULL)
        return TL_EINVAL;
    if (n_tokens < 1 || n_tokens > pool->B || (block_hash != 0 && n_tokens != pool->B))
        return TL_EINVAL;
    if (pool->n_free == 0)
        return TL_ENOMEM;
    uint32_t id = block_alloc(pool, block_hash, n_tokens);
    elem_t *v = block_values(pool, id);
    for (size_t i = 0; i < pool->block_elems; i++)
        v[i] = elem_pos(pool, i) < n_tokens ? elem_store(kv[i]) : elem_store(0.0f);
    reg_add(pool, id);
    *block_out = id;
    return TL_OK;
}

int tl_kv_pool_read(const tl_kv_pool *pool, uint32_t block, uint64_t *block_hash,
                    uint32_t *n_tokens, float *kv)
{
    if (pool == NULL || block_hash == NULL || n_tokens == NULL || kv == NULL)
        return TL_EINVAL;
    if (!block_live(pool, block))
        return TL_EINVAL;
    const elem_t *v = block_values(pool, block);
    uint32_t n = pool->n_tokens[block];
    for (size_t i = 0; i < pool->block_elems; i++)
        kv[i] = elem_pos(pool, i) < n ? elem_load(v[i]) : 0.0f;
    *block_hash = pool->hash[block];
    *n_tokens = n;
    return TL_OK;
}

int tl_kv_pool_find(const tl_kv_pool *pool, uint64_t block_hash, uint32_t *block_out)
{
    if (pool == NULL || block_out == NULL)
        return TL_EINVAL;
    uint32_t id = block_hash == 0 ? NO_BLOCK : reg_find(pool, block_hash);
    if (id == NO_BLOCK)
        return TL_ENOTFOUND;
    *block_out = id;
    return TL_OK;
}

int tl_kv_pool_retain(tl_kv_pool *pool, uint32_t block)
{
    if (pool == NULL || !block_live(pool, block))
        return TL_EINVAL;
    if (pool->refs[block] == UINT32_MAX)
        return TL_EINVAL; /* a count that would wrap to 0 would free a block still held */
    pool->refs[block]++;
    return TL_OK;
}

int tl_kv_pool_release(tl_kv_pool *pool, uint32_t block)
{
    if (pool == NULL || !block_live(pool, block))
        return TL_EINVAL;
    if (--pool->refs[block] > 0)
        return TL_OK;
    reg_remove(pool, block);
    pool->hash[block] = 0;
    pool->n_tokens[block] = 0;
    memset(block_values(pool, block), 0, pool->block_elems * sizeof(elem_t));
    pool->n_free++;
    if (block < pool->free_hint)
        pool->free_hint = block;
    return TL_OK;
}

/* ---------------------------------------------------------------- export */

size_t tl_kv_export_bytes(const tl_kv_pool *pool, uint32_t n_blocks, uint16_t version)
{
    uint64_t payload;
    if (pool == NULL || !version_supported(version) ||
        !payload_bytes(version, pool->B, pool->L, pool->H, pool->D, &payload))
        return 0;
    uint64_t total = envelope_bytes(n_blocks, payload);
    return total > SIZE_MAX ? 0 : (size_t)total;
}

static void export_v1(const tl_kv_pool *pool, uint32_t block, uint8_t *p)
{
    const elem_t *v = block_values(pool, block);
    uint32_t n = pool->n_tokens[block];
    for (size_t i = 0; i < pool->block_elems; i++)
        put_u16(p + 2 * i, elem_pos(pool, i) < n ? elem_to_f16(v[i]) : 0);
}

static void export_v2(const tl_kv_pool *pool, uint32_t block, uint8_t *p)
{
    const elem_t *v = block_values(pool, block);
    uint32_t n = pool->n_tokens[block];
    uint8_t *scales = p + pool->block_elems;
    for (size_t s = 0; s < pool->slabs; s++) {
        const elem_t *sv = v + s * pool->slab_elems;
        uint8_t *codes = p + s * pool->slab_elems;
        float amax = 0.0f;
        for (size_t i = 0; i < (size_t)n * pool->D; i++) {
            float a = abs_f32(elem_load(sv[i]));
            if (a > amax)
                amax = a;
        }
        float scale = amax == 0.0f ? 1.0f : amax / 448.0f;
        /* V2-TINY-SLAB (docs/decisions.md): amax / 448 below FLT_MIN loses precision, so a
         * quotient may pass 448: clamp it; an amax / 448 of 0 makes an all-zero slab. */
        int tiny = scale < 1.17549435e-38f;
        if (scale == 0.0f)
            scale = 1.0f;
        for (size_t i = 0; i < pool->slab_elems; i++) {
            if (i >= (size_t)n * pool->D) {
                codes[i] = 0;
                continue;
            }
            /* assignment to float drops any excess precision (C11 5.2.4.2.2) */
            float q = elem_load(sv[i]) / scale;
            if (tiny)
                q = q > 448.0f ? 448.0f : (q < -448.0f ? -448.0f : q);
            codes[i] = f32_to_e4m3(q);
        }
        put_u32(scales + 4 * s, f32_bits(scale));
    }
}

int tl_kv_export(const tl_kv_pool *pool, const uint32_t *blocks, uint32_t n_blocks,
                 uint16_t version, uint8_t *out, size_t out_len)
{
    if (pool == NULL || out == NULL || (blocks == NULL && n_blocks > 0))
        return TL_EINVAL;
    size_t need = tl_kv_export_bytes(pool, n_blocks, version);
    if (need == 0 || out_len < need)
        return TL_EINVAL;
    for (uint32_t b = 0; b < n_blocks; b++)
        if (!block_live(pool, blocks[b]))
            return TL_EINVAL;

    memcpy(out, "TLKV", 4);
    put_u16(out + 4, version);
    put_u16(out + 6, version == 1 ? (uint16_t)TL_F16 : (uint16_t)TL_F8_E4M3);
    put_u32(out + 8, n_blocks);
    put_u32(out + 12, pool->B);
    put_u32(out + 16, pool->L);
    put_u32(out + 20, pool->H);
    put_u32(out + 24, pool->D);
    uint64_t payload = 0;
    payload_bytes(version, pool->B, pool->L, pool->H, pool->D, &payload);
    size_t record = (size_t)payload + RECORD_HEAD_BYTES; /* fits: need did */
    uint8_t *p = out + HEADER_BYTES;
    for (uint32_t b = 0; b < n_blocks; b++, p += record) {
        put_u64(p, pool->hash[blocks[b]]);
        put_u32(p + 8, pool->n_tokens[blocks[b]]);
        if (version == 1)
            export_v1(pool, blocks[b], p + RECORD_HEAD_BYTES);
        else
            export_v2(pool, blocks[b], p + RECORD_HEAD_BYTES);
    }
    put_u32(out + need - TRAILER_BYTES, crc32c(out, need - TRAILER_BYTES));
    return TL_OK;
}

/* ---------------------------------------------------------------- import */

/* Every reader rule, in the order of decision 4; nothing is touched. */
static int check_envelope(const tl_kv_pool *pool, const uint8_t *env, size_t len,
                          size_t *record_out)
{
    if (len < HEADER_BYTES + TRAILER_BYTES)
        return TL_EFORMAT;
    if (memcmp(env, "TLKV", 4) != 0)
        return TL_EFORMAT;
    uint16_t version = get_u16(env + 4);
    uint16_t dtype = get_u16(env + 6);
    uint32_t n = get_u32(env + 8);
    uint32_t B = get_u32(env + 12), L = get_u32(env + 16);
    uint32_t H = get_u32(env + 20), D = get_u32(env + 24);
    if (!version_supported(version))
        return TL_EFORMAT;
    /* In 64 bits with every step checked, so no wrap can make a wrong length look right. */
    uint64_t payload, total;
    if (!payload_bytes(version, B, L, H, D, &payload))
        return TL_EFORMAT;
    total = envelope_bytes(n, payload);
    if (total == 0 || total != (uint64_t)len)
        return TL_EFORMAT;
    if (crc32c(env, len - TRAILER_BYTES) != get_u32(env + len - TRAILER_BYTES))
        return TL_EFORMAT;
    if (dtype != (version == 1 ? TL_F16 : TL_F8_E4M3))
        return TL_EFORMAT;
    if (B != pool->B || L != pool->L || H != pool->H || D != pool->D)
        return TL_ESHAPE;
    /* total == len, so record and every offset below fit size_t and lie inside env */
    size_t record = (size_t)payload + RECORD_HEAD_BYTES;
    const uint8_t *p = env + HEADER_BYTES;
    for (uint32_t b = 0; b < n; b++, p += record) {
        uint64_t h = get_u64(p);
        uint32_t n_tokens = get_u32(p + 8);
        if (n_tokens < 1 || n_tokens > B || (h != 0 && n_tokens != B))
            return TL_EFORMAT;
    }
    *record_out = record;
    return TL_OK;
}

static uint32_t import_block(tl_kv_pool *pool, uint16_t version, const uint8_t *rec)
{
    uint64_t h = get_u64(rec);
    uint32_t n = get_u32(rec + 8);
    const uint8_t *p = rec + RECORD_HEAD_BYTES;
    uint32_t id = block_alloc(pool, h, n);
    elem_t *v = block_values(pool, id);
    for (size_t s = 0; s < pool->slabs; s++) {
        float scale = version == 2 ? bits_f32(get_u32(p + pool->block_elems + 4 * s)) : 1.0f;
        for (size_t j = 0; j < pool->slab_elems; j++) {
            size_t i = s * pool->slab_elems + j;
            if (j >= (size_t)n * pool->D)
                v[i] = elem_store(0.0f);
            else if (version == 1)
                v[i] = elem_from_f16(get_u16(p + 2 * i));
            else
                v[i] = elem_store(e4m3_to_f32(p[i]) * scale);
        }
    }
    reg_add(pool, id);
    return id;
}

int tl_kv_import(tl_kv_pool *pool, const uint8_t *env, size_t len,
                 uint32_t *blocks_out, uint32_t max_blocks, uint32_t *n_out)
{
    if (n_out != NULL)
        *n_out = 0;
    if (pool == NULL || env == NULL || n_out == NULL)
        return TL_EINVAL;
    size_t record = 0;
    int rc = check_envelope(pool, env, len, &record);
    if (rc != TL_OK)
        return rc;
    uint32_t n = get_u32(env + 8);
    if (n > (blocks_out == NULL ? 0 : max_blocks))
        return TL_EINVAL;
    if (n > pool->n_free)
        return TL_ENOMEM;
    uint16_t version = get_u16(env + 4);
    for (uint32_t b = 0; b < n; b++) {
        /* In envelope order, so an earlier block wins the registration of a shared hash. */
        blocks_out[b] = import_block(pool, version, env + HEADER_BYTES + (size_t)b * record);
    }
    *n_out = n;
    return TL_OK;
}
