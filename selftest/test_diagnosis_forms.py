"""The diagnosis's models of a value stored in another form: the block hash kept to fewer bits,
a v2 slab scale written as an integer. Each mistaken output is built here the way the mistake
builds it (a hand-written FNV-1a and mask, struct packing), not by the model's code; the right
one comes from the oracle."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from tlkv_conformance import oracle
from tlkv_conformance.diagnosis import attribute, diagnose_run
from tlkv_conformance.diagnosis._causes import Attribution
from tlkv_conformance.evidence import EnvelopeEvidence, HashEvidence

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


# -- a v2 scale written as an integer -----------------------------------------------------------

GEOMETRY = oracle.Geometry(4, 2, 3, 8)
SLABS = GEOMETRY.n_layers * 2 * GEOMETRY.n_kv_heads


def _blocks(spread: float) -> list[oracle.Block]:
    rng = np.random.default_rng(11)
    values = rng.standard_normal(GEOMETRY.values_shape) * spread
    return [oracle.Block(0, 3, oracle.round_to_f16(values.astype(np.float32)))]


def _scales_as(blocks: list[oracle.Block], integer_of) -> tuple[bytes, bytes, list[float]]:
    """The export due and the one whose scale array holds each due scale as the u32
    `integer_of(scale)`, resealed."""
    expected = oracle.encode(GEOMETRY, blocks, 2)
    start = oracle.HEADER_SIZE + oracle.RECORD_PREFIX_SIZE + GEOMETRY.n_elements
    due = list(struct.unpack_from(f"<{SLABS}f", expected, start))
    scales = b"".join(struct.pack("<I", integer_of(s)) for s in due)
    return expected, oracle.seal(expected[:start] + scales + expected[start + 4 * SLABS : -4]), due


def _envelope_diagnosis(expected: bytes, actual: bytes, blocks) -> Attribution:
    attribution = attribute(EnvelopeEvidence(expected, actual, tuple(blocks)), [])
    assert attribution.note == "", attribution.note
    return attribution


@pytest.mark.parametrize(
    ("cause", "integer_of"),
    [
        ("v2-scale-stored:uint32-value", int),
        ("v2-scale-stored:uint32-rounded", lambda s: int(s + 0.5)),
    ],
)
def test_a_scale_written_as_an_integer_is_named_with_its_rounding(cause: str, integer_of) -> None:
    blocks = _blocks(600.0)  # scales about 4: some slabs' fraction under 0.5, some over
    expected, actual, due = _scales_as(blocks, integer_of)
    assert {int(s) != int(s + 0.5) for s in due} == {True, False}
    got = _envelope_diagnosis(expected, actual, blocks)
    assert got.cause is not None, got.causes
    assert got.cause.id == cause, got.causes
    assert got.blamed == ("V2-LAYOUT",)


def test_scales_under_one_half_written_as_integers_are_one_of_the_roundings() -> None:
    blocks = _blocks(3.0)  # every scale under 0.5: 0 both ways
    expected, actual, due = _scales_as(blocks, int)
    assert max(due) < 0.5
    got = _envelope_diagnosis(expected, actual, blocks)
    assert _named(got) == ["v2-scale-stored:uint32-value", "v2-scale-stored:uint32-rounded"]


def test_a_block_of_zeros_scales_written_as_1_are_no_integer_form() -> None:
    # 1.0 written as the u32 1 is the bits of 2^-149: a floor clamping the scale there writes
    # the same, and only a slab with values would tell them apart (the integer forms write it
    # 0 or its nearest whole number, a floor leaves it right)
    blocks = [oracle.Block(0, 3, np.zeros(GEOMETRY.values_shape, dtype=np.float32))]
    expected, actual, due = _scales_as(blocks, int)
    assert set(due) == {1.0}
    got = _envelope_diagnosis(expected, actual, blocks)
    assert got.cause is not None, got.causes
    assert all(name.startswith("v2-scale-floor:") for name in _named(got)), got.cause.id


# -- the magic's bytes in another order ---------------------------------------------------------


@pytest.mark.parametrize(
    ("magic", "cause"),
    [
        (struct.pack("<I", 0x544C4B56), "magic-byte-order:reversed"),  # b"VKLT"
        (struct.pack("<2H", 0x544C, 0x4B56), "magic-byte-order:pairs-swapped"),  # b"LTVK"
        (b"KVTL", "magic-byte-order:halves-swapped"),
        (b"TKLV", "magic-byte-order:1324"),
    ],
)
def test_the_magic_in_another_byte_order_is_named_by_the_order(magic: bytes, cause: str) -> None:
    blocks = _blocks(3.0)
    expected = oracle.encode(GEOMETRY, blocks, 1)
    assert expected[:4] == b"TLKV"
    actual = oracle.seal(magic + expected[4:-4])
    got = _envelope_diagnosis(expected, actual, blocks)
    assert got.cause is not None, got.causes
    assert got.cause.id == cause
    assert got.blamed == ("ENV-HEADER",)
    assert f'"{magic.decode()}"' in got.cause.title


def test_a_magic_in_another_order_under_the_spec_s_crc_is_no_such_export() -> None:
    blocks = _blocks(3.0)
    expected = oracle.encode(GEOMETRY, blocks, 1)
    got = attribute(EnvelopeEvidence(expected, b"VKLT" + expected[4:], tuple(blocks)), [])
    assert all(not c.id.startswith("magic-byte-order") for c in got.causes)
