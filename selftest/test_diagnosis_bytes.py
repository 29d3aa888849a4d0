"""The diagnosis's byte-level models: the FNV step fed another operand than the unsigned byte,
the CRC-32C table built wrongly, a reader refusing valid envelopes for a property of their
values. Each mistaken output is built here the way the mistake builds it (a hand-written loop,
not the model's code), or was observed from a planted mutant; the right one comes from the
oracle."""

from __future__ import annotations

import struct

from tlkv_conformance import oracle
from tlkv_conformance.diagnosis import attribute
from tlkv_conformance.evidence import HashEvidence

U64 = (1 << 64) - 1

# The spec's worked example, block 1 (cases/hash.yaml: spec-example-block-1).
PARENT, TOKENS = 0xA91AB0C1027B9366, [3, 4]


def _fnv_signed_char(data: bytes, extend_to: int) -> int:
    """FNV-1a-64 whose bytes go through a signed char, widened to `extend_to` bits."""
    h = oracle.FNV64_OFFSET_BASIS
    for (value,) in struct.iter_unpack("b", data):
        h = ((h ^ (value & ((1 << extend_to) - 1))) * oracle.FNV64_PRIME) & U64
    return h or 1


def _hash_cause(parent: int, tokens: list[int], actual: int) -> str:
    evidence = HashEvidence(parent, tuple(tokens), oracle.block_hash(parent, tokens), actual)
    attribution = attribute(evidence, ["HASH-FNV", "HASH-INPUT"])
    return attribution.cause.id if attribution.cause else ""


def test_an_fnv_byte_sign_extended_through_char_as_the_planted_mutant_hashed_it() -> None:
    # 0xc08c294998803c60: what the C reference hashed with its bytes walked through a plain
    # char (held-out ho10-hash-bytes-through-char), recomputed here by hand too
    actual = 0xC08C294998803C60
    assert _fnv_signed_char(oracle.hash_input(PARENT, TOKENS), 64) == actual
    assert _hash_cause(PARENT, TOKENS, actual) == "hash-xor-operand:sign-extended-64"


def test_an_fnv_byte_sign_extended_to_32_bits_only() -> None:
    actual = _fnv_signed_char(oracle.hash_input(PARENT, TOKENS), 32)
    assert _hash_cause(PARENT, TOKENS, actual) == "hash-xor-operand:sign-extended-32"


def test_the_input_hashed_a_32_bit_word_at_a_time() -> None:
    data = oracle.hash_input(PARENT, TOKENS)
    h = oracle.FNV64_OFFSET_BASIS
    for (word,) in struct.iter_unpack("<I", data):
        h = ((h ^ word) * oracle.FNV64_PRIME) & U64
    assert _hash_cause(PARENT, TOKENS, h) == "hash-xor-operand:words-4"


def test_a_hash_no_operand_gives_names_nothing() -> None:
    right = oracle.block_hash(PARENT, TOKENS)
    assert _hash_cause(PARENT, TOKENS, right ^ 0x8000) == ""


def test_an_input_without_high_bytes_cannot_show_a_sign_extension() -> None:
    # parent 0, small tokens: every byte below 0x80, the signed char changes nothing
    data = oracle.hash_input(0, [1, 2])
    assert _fnv_signed_char(data, 64) == oracle.block_hash(0, [1, 2])
