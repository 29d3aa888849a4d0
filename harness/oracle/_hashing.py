"""The block hash: FNV-1a-64 over the parent hash and the block's token ids, chained."""

from __future__ import annotations

import struct
from collections.abc import Sequence

FNV64_OFFSET_BASIS = 0xCBF29CE484222325
FNV64_PRIME = 0x100000001B3
U64_MASK = (1 << 64) - 1
U32_MAX = (1 << 32) - 1

# The hash value that stands for "no hash" (a partial block); a computed 0 is replaced by this.
NO_HASH = 0
ZERO_REPLACEMENT = 1


def fnv1a64(data: bytes, state: int = FNV64_OFFSET_BASIS) -> int:
    """FNV-1a-64 of `data`, continuing from `state` (the offset basis for a fresh hash)."""
    h = state
    for byte in data:
        h = ((h ^ byte) * FNV64_PRIME) & U64_MASK
    return h


def hash_input(parent: int, tokens: Sequence[int]) -> bytes:
    """The bytes H hashes: le_u64(parent) followed by le_u32 of every token."""
    if not 0 <= parent <= U64_MASK:
        raise ValueError(f"parent hash {parent!r} is not a u64")
    for token in tokens:
        if not 0 <= token <= U32_MAX:
            raise ValueError(f"token id {token!r} is not a u32")
    return struct.pack(f"<Q{len(tokens)}I", parent, *tokens)


def block_hash(parent: int, tokens: Sequence[int]) -> int:
    """H(parent, tokens): the FNV-1a-64 of hash_input, with 0 replaced by 1."""
    return fnv1a64(hash_input(parent, tokens)) or ZERO_REPLACEMENT


def sequence_hashes(tokens: Sequence[int], block_tokens: int) -> list[int]:
    """Every block's hash: full blocks chained from parent 0, a partial tail 0."""
    if block_tokens < 1:
        raise ValueError(f"block_tokens must be at least 1, not {block_tokens}")
    hashes: list[int] = []
    parent = NO_HASH
    for start in range(0, len(tokens), block_tokens):
        block = tokens[start : start + block_tokens]
        if len(block) < block_tokens:
            hashes.append(NO_HASH)
            break
        parent = block_hash(parent, block)
        hashes.append(parent)
    return hashes
