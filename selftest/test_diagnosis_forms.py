"""The diagnosis's models of a value stored in another form: the block hash kept to fewer bits.
Each mistaken output is built here the way the mistake builds it (a hand-written FNV-1a and
mask, not the model's code); the right one comes from the oracle."""

from __future__ import annotations

import struct

import pytest
from tlkv_conformance import oracle
from tlkv_conformance.diagnosis import attribute, diagnose_run
from tlkv_conformance.diagnosis._causes import Attribution
from tlkv_conformance.evidence import HashEvidence

U64 = (1 << 64) - 1
PARENT = 0x0123456789ABCDEF
# FNV-1a-64 of this block is 0xfbdd89dbf35693c0: bits 63 to 60, 52, 47, 31 and 30 all set, so
# each mask below changes it, and each differently.
TOKENS = (1, 2, 3, 510)
# ... and of this one 0x21c26530c22989c0: its top bit clear.
TOKENS_TOP_BIT_CLEAR = (1, 2, 3, 5)


def _fnv1a(data: bytes, basis: int = 0xCBF29CE484222325) -> int:
    h = basis
    for byte in data:
        h = ((h ^ byte) * 0x100000001B3) % 2**64
    return h


def _raw(tokens: tuple[int, ...]) -> int:
    return _fnv1a(struct.pack("<Q4I", PARENT, *tokens))


def _diagnosed(actual: int, tokens: tuple[int, ...] = TOKENS) -> Attribution:
    expected = oracle.block_hash(PARENT, tokens)
    attribution = attribute(HashEvidence(PARENT, tokens, expected, actual), [])
    assert attribution.note == "", attribution.note
    return attribution


def _named(attribution: Attribution) -> list[str]:
    assert attribution.cause is not None, attribution.blamed
    cause = attribution.cause.id
    return cause.removeprefix("one-of:").split("+") if cause.startswith("one-of:") else [cause]


def test_the_blocks_hash_has_the_bits_the_masks_need() -> None:
    assert _raw(TOKENS) == 0xFBDD89DBF35693C0 == oracle.block_hash(PARENT, TOKENS)
    assert _raw(TOKENS_TOP_BIT_CLEAR) == 0x21C26530C22989C0


@pytest.mark.parametrize(
    ("cause", "returned"),
    [
        ("hash-result-masked:63-bit", lambda h: h & 0x7FFFFFFFFFFFFFFF),
        ("hash-result-masked:62-bit", lambda h: h & 0x3FFFFFFFFFFFFFFF),
        ("hash-result-masked:53-bit", lambda h: h & 0x1FFFFFFFFFFFFF),
        ("hash-result-masked:48-bit", lambda h: h & 0xFFFFFFFFFFFF),
        ("hash-result-masked:31-bit", lambda h: h & 0x7FFFFFFF),
        ("hash-result-sign-extended:32-bit", lambda h: (h & 0xFFFFFFFF) | 0xFFFFFFFF00000000),
    ],
)
def test_a_hash_kept_to_fewer_bits(cause: str, returned) -> None:
    got = _diagnosed(returned(_raw(TOKENS)))
    assert _named(got)[0] == cause
    assert got.blamed == ("HASH-FNV",)


def test_the_top_bit_cleared_is_also_a_basis_with_its_top_bit_flipped_until_the_run_tells() -> None:
    # (h ^ 2^63) * P = h * P + 2^63 mod 2^64 for an odd P: the basis's top bit flipped flips the
    # result's, so on one block whose top bit was set the two give the same hash.
    masked = _raw(TOKENS) & 0x7FFFFFFFFFFFFFFF
    assert _fnv1a(struct.pack("<Q4I", PARENT, *TOKENS), basis=0x4BF29CE484222325) == masked
    got = _diagnosed(masked)
    assert _named(got) == ["hash-result-masked:63-bit", "hash-offset-basis:0x4bf29ce484222325"]
    assert got.cause.title.startswith(
        "one of: the hash returned masked to its low 63 bits (its top bit cleared)"
    )
    # A run whose every failing block fits both is settled on the mask.
    other = (1, 2, 3, 513)  # 0xb3000b5224d0795a: bit 62 clear, so 62 bits fit it too
    assert _raw(other) == 0xB3000B5224D0795A
    second = _diagnosed(_raw(other) & 0x7FFFFFFFFFFFFFFF, other)
    run = diagnose_run({"a": got, "b": second})
    assert run.attributions["a"].cause.id == "hash-result-masked:63-bit"
    assert run.attributions["b"].cause.id == "hash-result-masked:63-bit"


def test_a_basis_with_its_top_bit_flipped_is_no_mask_where_it_sets_the_top_bit() -> None:
    flipped = _fnv1a(struct.pack("<Q4I", PARENT, *TOKENS_TOP_BIT_CLEAR), basis=0x4BF29CE484222325)
    assert flipped >> 63
    got = _diagnosed(flipped, TOKENS_TOP_BIT_CLEAR)
    assert _named(got) == ["hash-offset-basis:0x4bf29ce484222325"]
