"""Signatures of known mistakes in the block hash: each mistaken computation, done again here,
and compared with what the implementation gave (the CRC-32C trailer's: _crc_signatures)."""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence

from .. import oracle
from ._causes import Cause

U64 = (1 << 64) - 1
# The id of known mistakes named together: "one-of:" and their ids joined by "+".
ONE_OF = "one-of:"


def one_of(causes: Sequence[Cause]) -> Cause:
    """The known mistakes that give exactly the bytes the implementation gave, each checked on
    this run's evidence, named together when the evidence cannot tell them apart (one alone:
    that one). The evidence is the first's; the report says "one of: A; B", never A alone."""
    if len(causes) == 1:
        return causes[0]
    return Cause(
        ONE_OF + "+".join(c.id for c in causes),
        "one of: " + "; ".join(c.title for c in causes),
        tuple(dict.fromkeys(r for c in causes for r in c.reqs)),
        f"{causes[0].evidence} (each of these mistakes gives exactly these bytes)",
        frozenset().union(*(c.explains for c in causes)),
    )


def _fnv1(data: bytes) -> int:
    h = oracle.FNV64_OFFSET_BASIS
    for byte in data:
        h = ((h * oracle.FNV64_PRIME) & U64) ^ byte
    return h


def _zero_rule(h: int) -> int:
    return h or 1


HashVariant = Callable[[int, Sequence[int]], int]

HASH_MISTAKES: tuple[tuple[str, str, tuple[str, ...], HashVariant], ...] = (
    (
        "hash-token-big-endian",
        "token ids hashed big-endian",
        ("HASH-INPUT",),
        lambda p, t: _zero_rule(
            oracle.fnv1a64(struct.pack("<Q", p) + struct.pack(f">{len(t)}I", *t))
        ),
    ),
    (
        "hash-token-16-bit",
        "token ids truncated to 16 bits before hashing",
        ("HASH-INPUT",),
        lambda p, t: oracle.block_hash(p, [x & 0xFFFF for x in t]),
    ),
    (
        "hash-parent-ignored",
        "the parent hash not chained in (every block hashed as block 0)",
        ("HASH-CHAIN",),
        lambda p, t: oracle.block_hash(0, t),
    ),
    (
        "hash-parent-after-tokens",
        "the parent hashed after the tokens instead of before them",
        ("HASH-INPUT",),
        lambda p, t: _zero_rule(oracle.fnv1a64(struct.pack(f"<{len(t)}IQ", *t, p))),
    ),
    (
        "hash-parent-32-bit",
        "the parent hash truncated to 32 bits",
        ("HASH-INPUT",),
        lambda p, t: oracle.block_hash(p & 0xFFFFFFFF, t),
    ),
    (
        "hash-parent-big-endian",
        "the parent hash hashed big-endian",
        ("HASH-INPUT",),
        lambda p, t: _zero_rule(
            oracle.fnv1a64(struct.pack(">Q", p) + struct.pack(f"<{len(t)}I", *t))
        ),
    ),
    (
        "hash-fnv1-not-fnv1a",
        "FNV-1 (multiply, then xor) instead of FNV-1a",
        ("HASH-FNV",),
        lambda p, t: _zero_rule(_fnv1(oracle.hash_input(p, t))),
    ),
)


def hash_causes(parent: int, tokens: Sequence[int], expected: int, actual: int) -> list[Cause]:
    """The known mistakes that give `actual` for block_hash(parent, tokens)."""
    if expected == 1 and actual == 0 and oracle.fnv1a64(oracle.hash_input(parent, tokens)) == 0:
        return [
            Cause(
                "hash-no-zero-rule",
                "a computed hash of 0 not replaced by 1",
                ("HASH-ZERO",),
                "FNV-1a of the input is 0; the implementation returned it as it was",
            )
        ]
    found = []
    for cause_id, title, reqs, variant in HASH_MISTAKES:
        try:
            mistaken = variant(parent, tokens)
        except (struct.error, ValueError):
            continue
        if mistaken == actual != expected:
            found.append(
                Cause(cause_id, title, reqs, f"{actual:#018x} is what that computation gives")
            )
    return found
