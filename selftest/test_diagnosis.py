"""The diagnosis names each known mistake from its output alone, and blames the requirements
whose own bytes differ. Each mistaken output is built here from the blocks, the way the mistake
would build it (not by the diagnosis' own transformations), and the right output comes from
the oracle."""

from __future__ import annotations

import struct
import zlib
from dataclasses import replace

import ml_dtypes
import numpy as np
import pytest
from tlkv_conformance import oracle
from tlkv_conformance.adapters import Adapter, Chunk, ImplInfo, PoolHandle, PushCounts, ReadBack
from tlkv_conformance.diagnosis import Attribution, Cause, attribute, diagnose_run
from tlkv_conformance.errors import Refused
from tlkv_conformance.evidence import (
    CountEvidence,
    EnvelopeEvidence,
    HashEvidence,
    KnownMistake,
    OrderEvidence,
    ReaderPool,
    RefusalEvidence,
    SizeEvidence,
    ValuesEvidence,
)

from selftest import vector_reader as vr

GEOMETRY = oracle.Geometry(4, 2, 3, 8)  # L != Hkv, so the axes' orders differ
RNG = np.random.default_rng(7)
F32 = np.float32


def _values(scale: float = 2.0) -> np.ndarray:
    return (RNG.standard_normal(GEOMETRY.values_shape) * scale).astype(F32)


def _blocks(fill: int = 4, values: np.ndarray | None = None) -> list[oracle.Block]:
    v = _values() if values is None else values
    v = oracle.round_to_f16(v)  # values a pool holds, whatever its precision
    return [oracle.Block(0x1234 if fill == GEOMETRY.block_tokens else 0, fill, v)]


def _body(version: int, blocks: list[oracle.Block], payload: bytes) -> bytes:
    """A one-block envelope with `payload` as written, sealed correctly."""
    block = blocks[0]
    head = oracle.encode_header(GEOMETRY, version, 1) + struct.pack(
        "<QI", block.block_hash, block.n_tokens
    )
    return oracle.seal(head + payload)


def _v2_payload(values: np.ndarray, fill: int, scale_of, quotient_of, order: str = "after"):
    """A v2 payload written with the given scale and quotient computations."""
    filled = values[..., :fill, :]
    amax = np.abs(filled).max(axis=(-2, -1)).astype(F32)
    scales = np.array([scale_of(a) for a in amax.ravel()], dtype=F32).reshape(amax.shape)
    codes = np.zeros(GEOMETRY.values_shape, dtype=np.uint8)
    codes[..., :fill, :] = quotient_of(filled, scales[..., None, None], amax[..., None, None])
    if order == "first":
        return scales.astype("<f4").tobytes() + codes.tobytes()
    return codes.tobytes() + scales.astype("<f4").tobytes()


def _e4m3(q: np.ndarray) -> np.ndarray:
    return oracle.f32_to_e4m3_codes(np.asarray(q, dtype=F32))


def _right_scale(a: F32) -> F32:
    return oracle.e4m3_scale(a)


def _right_quotient(x, s, a):
    return _e4m3((x / s).astype(F32))


def _diagnosed(evidence, cited=()) -> Attribution:
    attribution = attribute(evidence, list(cited))
    assert attribution.note == "", attribution.note
    return attribution


def _envelope_case(version: int, payload: bytes, blocks, cited=()) -> Attribution:
    expected = oracle.encode(GEOMETRY, blocks, version)
    actual = _body(version, blocks, payload)
    assert actual != expected
    return _diagnosed(EnvelopeEvidence(expected, actual, tuple(blocks)), cited)


# -- the hash -------------------------------------------------------------------------------


def _fnv1a(data: bytes) -> int:  # the textbook definition, for mistaken inputs
    h = 0xCBF29CE484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001B3) % 2**64
    return h or 1


PARENT, TOKENS = 0x0123456789ABCDEF, (1, 70000, 3, 4)
HASH_MISTAKES = {
    "hash-token-big-endian": _fnv1a(struct.pack("<Q", PARENT) + struct.pack(">4I", *TOKENS)),
    "hash-token-16-bit": _fnv1a(struct.pack("<Q4I", PARENT, *(t % 65536 for t in TOKENS))),
    "hash-parent-ignored": _fnv1a(struct.pack("<Q4I", 0, *TOKENS)),
    "hash-parent-after-tokens": _fnv1a(struct.pack("<4IQ", *TOKENS, PARENT)),
    "hash-parent-32-bit": _fnv1a(struct.pack("<Q4I", PARENT % 2**32, *TOKENS)),
    "hash-parent-big-endian": _fnv1a(struct.pack(">Q", PARENT) + struct.pack("<4I", *TOKENS)),
}


def _named(attribution: Attribution) -> list[str]:
    """The ids the first cause names: itself, or the members of its "one of"."""
    assert attribution.cause is not None, attribution.blamed
    cause = attribution.cause.id
    return cause.removeprefix("one-of:").split("+") if cause.startswith("one-of:") else [cause]


@pytest.mark.parametrize("cause", sorted(HASH_MISTAKES))
def test_hash_mistakes(cause: str) -> None:
    expected = oracle.block_hash(PARENT, TOKENS)
    got = _diagnosed(HashEvidence(PARENT, TOKENS, expected, HASH_MISTAKES[cause]))
    if cause == "hash-token-16-bit":  # 70000 cut to 16 bits is below 0x8000: int16_t too
        assert _named(got) == ["hash-token-16-bit", "hash-token-held-in:int16"]
    else:
        assert _named(got) == [cause]
    assert got.blamed == (("HASH-CHAIN",) if cause == "hash-parent-ignored" else ("HASH-INPUT",))


def test_fnv1_not_fnv1a() -> None:
    data = oracle.hash_input(PARENT, TOKENS)
    h = 0xCBF29CE484222325
    for byte in data:
        h = ((h * 0x100000001B3) % 2**64) ^ byte
    got = _diagnosed(HashEvidence(PARENT, TOKENS, oracle.block_hash(PARENT, TOKENS), h))
    assert (got.cause.id, got.blamed) == ("hash-fnv1-not-fnv1a", ("HASH-FNV",))
    unknown = _diagnosed(HashEvidence(PARENT, TOKENS, oracle.block_hash(PARENT, TOKENS), 5))
    assert unknown.cause is None
    assert set(unknown.blamed) <= {"HASH-INPUT", "HASH-CHAIN", "HASH-FNV", "HASH-ZERO"}


def _hash_diagnosis(actual: int, parent: int = PARENT, tokens=TOKENS) -> Attribution:
    return _diagnosed(HashEvidence(parent, tokens, oracle.block_hash(parent, tokens), actual))


def _fnv(data: bytes, basis: int = 0xCBF29CE484222325, prime: int = 0x100000001B3) -> int:
    """FNV-1a-64 with the given constants, the zero rule applied (a mistaken engine's)."""
    h = basis
    for byte in data:
        h = ((h ^ byte) * prime) % 2**64
    return h or 1


LARGE_TOKENS = (1, 0x80000005, 0xFFFFFFFF, 0x18000)  # high bits set at 32 and 16 bits


@pytest.mark.parametrize(
    ("basis", "how"),
    [
        (0xCBF29CE484222352, "hex digits 15 and 16 swapped"),
        (0xCBF29CE484222235, "hex digits 14 and 15 swapped"),
        (0xCBF29CE484232325, "hex digit 12 (3 for 2) mistyped"),
        (0x811C9DC5, "the 32-bit FNV offset basis"),
    ],
)
def test_a_mistyped_offset_basis_is_recovered(basis: int, how: str) -> None:
    got = _hash_diagnosis(_fnv(struct.pack("<Q4I", PARENT, *TOKENS), basis))
    assert _named(got) == [f"hash-offset-basis:{basis:#x}"]
    assert got.cause.title == (
        f"the FNV-1a offset basis is {basis:#x}, not 0xcbf29ce484222325 ({how})"
    )
    assert got.blamed == ("HASH-FNV",)


def test_an_offset_basis_no_engine_would_type_is_not_named() -> None:
    # Any hash is FNV-1a from some basis: one far from the spec's explains nothing.
    far = 0x0123456789ABCDEF
    assert _hash_diagnosis(_fnv(struct.pack("<Q4I", PARENT, *TOKENS), far)).cause is None


def test_the_32_bit_prime() -> None:
    got = _hash_diagnosis(_fnv(struct.pack("<Q4I", PARENT, *TOKENS), prime=0x01000193))
    assert _named(got) == ["hash-fnv-prime:0x01000193"]
    assert "0x01000193 (the 32-bit FNV prime), not 0x100000001b3" in got.cause.title
    assert got.blamed == ("HASH-FNV",)


@pytest.mark.parametrize(
    ("cause", "pack"),
    [
        ("hash-token-width:uint32-in-8", lambda t: struct.pack("<Q4Q", PARENT, *t)),
        (
            "hash-token-width:int32-in-8",
            lambda t: struct.pack("<Q4q", PARENT, *(x - 2**32 if x >= 2**31 else x for x in t)),
        ),
        (
            "hash-token-width:uint16-in-2",
            lambda t: struct.pack("<Q4H", PARENT, *(x % 2**16 for x in t)),
        ),
        (
            "hash-token-held-in:int16",
            lambda t: struct.pack(
                "<Q4i", PARENT, *(x % 2**16 - (2**16 if x % 2**16 >= 2**15 else 0) for x in t)
            ),
        ),
        ("hash-token-skipped:last", lambda t: struct.pack("<Q3I", PARENT, *t[:-1])),
        ("hash-token-skipped:first", lambda t: struct.pack("<Q3I", PARENT, *t[1:])),
        ("hash-parent-absent", lambda t: struct.pack("<4I", *t)),
        ("hash-parent-width:4", lambda t: struct.pack("<I4I", PARENT % 2**32, *t)),
        (
            "hash-token-width:uint8-in-1",
            lambda t: struct.pack("<Q4B", PARENT, *(x % 256 for x in t)),
        ),
        ("hash-token-order-reversed", lambda t: struct.pack("<Q4I", PARENT, *t[::-1])),
    ],
)
def test_token_and_parent_encodings(cause: str, pack) -> None:
    got = _hash_diagnosis(_fnv(pack(LARGE_TOKENS)), tokens=LARGE_TOKENS)
    assert _named(got) == [cause]
    assert got.blamed == (("HASH-CHAIN",) if cause == "hash-parent-absent" else ("HASH-INPUT",))


def test_tokens_widened_below_2_to_31_are_one_of_the_extensions_until_the_run_tells() -> None:
    small = _hash_diagnosis(_fnv(struct.pack("<Q4Q", PARENT, *TOKENS)))
    assert small.cause.id == ("one-of:hash-token-width:uint32-in-8+hash-token-width:int32-in-8")
    assert small.cause.title.startswith("one of: token ids hashed as 8-byte integers")
    large = _hash_diagnosis(_fnv(struct.pack("<Q4Q", PARENT, *LARGE_TOKENS)), tokens=LARGE_TOKENS)
    run = diagnose_run({"small": small, "large": large})
    assert run.attributions["small"].cause.id == "hash-token-width:uint32-in-8"
    assert [f.cause.id for f in run.findings] == ["hash-token-width:uint32-in-8"]


def test_the_tokens_hashed_on_from_the_parent() -> None:
    # fnv1a64(tokens, state=parent): the chain kept, the parent's bytes and the basis not
    got = _hash_diagnosis(_fnv(struct.pack("<4I", *TOKENS), basis=PARENT))
    assert _named(got) == ["hash-parent-as-state"]
    assert got.blamed == ("HASH-CHAIN",)


def test_a_mistyped_prime() -> None:
    got = _hash_diagnosis(_fnv(struct.pack("<Q4I", PARENT, *TOKENS), prime=0x100000001C3))
    assert _named(got) == ["hash-fnv-prime:0x100000001c3"]
    assert got.cause.title == (
        "the FNV prime is 0x100000001c3 (hex digit 10 (c for b) mistyped), not 0x100000001b3"
    )


@pytest.mark.parametrize(
    ("cause", "returned"),
    [
        ("hash-low-bit-set", lambda h: h | 1),
        ("hash-result-byte-swapped", lambda h: int.from_bytes(h.to_bytes(8, "little"), "big")),
        ("hash-result-32-bit", lambda h: h % 2**32),
    ],
)
def test_a_hash_returned_otherwise_than_computed(cause: str, returned) -> None:
    tokens = (1, 2, 3, 5)
    right = _fnv(struct.pack("<Q4I", PARENT, *tokens))
    assert right % 2 == 0  # so that setting the low bit changes it
    got = _hash_diagnosis(returned(right), tokens=tokens)
    assert _named(got) == [cause]


def test_two_mistakes_at_once_are_named_together() -> None:
    data = struct.pack(">Q", PARENT) + struct.pack(">4I", *TOKENS)
    got = _hash_diagnosis(_fnv(data))
    assert got.cause.id == "hash-token-big-endian&hash-parent-big-endian"
    assert got.cause.title == "token ids hashed big-endian; and the parent hash hashed big-endian"


# The first block whose raw FNV-1a-64 is 0 (B = 16, parent 0; docs/zero-hash-search.md, found
# by generators/zero_hash_search.py): a correct engine gives it hash 1.
ZERO_HASH_TOKENS = (56125, 6306, 34936, 68013, 64691, 54075, 31170, 5667, 13826, 24849, 9532)
ZERO_HASH_TOKENS += (40755, 63468, 47930, 77465, 29631)


def test_zero_rule() -> None:
    # the independent reader's FNV-1a: the input really is a zero-hash one
    assert vr.fnv1a64(struct.pack("<Q16I", 0, *ZERO_HASH_TOKENS)) == 0
    got = _diagnosed(HashEvidence(0, ZERO_HASH_TOKENS, 1, 0))
    assert got.cause is not None
    assert (got.cause.id, got.blamed) == ("hash-no-zero-rule", ("HASH-ZERO",))
    # The same answer from an input that does not hash to 0 is not that mistake.
    other = _diagnosed(HashEvidence(0, (1, *ZERO_HASH_TOKENS[1:]), 1, 0))
    assert other.cause is None or other.cause.id != "hash-no-zero-rule"


@pytest.mark.parametrize("replacement", [2**64 - 1, 2**32 - 1, 2])
def test_zero_replaced_by_another_constant(replacement: int) -> None:
    got = _diagnosed(HashEvidence(0, ZERO_HASH_TOKENS, 1, replacement))
    assert _named(got) == [f"hash-zero-replaced:{replacement:#x}"]
    assert got.cause.title == f"a computed hash of 0 replaced by {replacement:#x}, not 1"
    assert got.blamed == ("HASH-ZERO",)
    # Any other value for that block is no constant an engine would pick.
    assert _diagnosed(HashEvidence(0, ZERO_HASH_TOKENS, 1, 0x5EED5EED5EED)).cause is None


# -- the CRC ----------------------------------------------------------------------------------


def _crc32c_reference(data: bytes, xor_out: int = 0xFFFFFFFF) -> int:
    """Bitwise CRC-32C (reflected 0x82F63B78), with the final XOR as given."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ xor_out


def _rocksoft(
    data: bytes,
    poly: int = 0x1EDC6F41,  # normal form, as the Rocksoft model writes it
    *,
    reflected: bool = True,
    init: int = 0xFFFFFFFF,
    xorout: int = 0xFFFFFFFF,
    shift_right_with: int | None = None,
) -> int:
    """A bitwise CRC-32 of the Rocksoft model, written apart from the diagnosis' tables:
    reflected in and out, or neither. `shift_right_with`: a reflected register shifted with this
    constant as it is (the mistake of a normal-form polynomial in a shift-right loop)."""
    bits = int(f"{poly:032b}"[::-1], 2) if shift_right_with is None else shift_right_with
    crc = init
    for byte in data:
        if reflected:
            crc ^= byte
            for _ in range(8):
                crc = (crc >> 1) ^ (bits if crc & 1 else 0)
        else:
            crc ^= byte << 24
            for _ in range(8):
                crc = ((crc << 1) & 0xFFFFFFFF) ^ (poly if crc & 0x80000000 else 0)
    return crc ^ xorout


def test_the_tests_crc_model_gives_the_catalogued_check_values() -> None:
    """The check values of "123456789" from the catalogue of parametrised CRC algorithms
    (reveng.sourceforge.io/crc-catalogue): each model below is the one named."""
    check = b"123456789"
    assert _rocksoft(check) == 0xE3069283  # CRC-32C (iSCSI), the spec's
    assert _rocksoft(check, 0x04C11DB7) == 0xCBF43926 == zlib.crc32(check)  # CRC-32 (IEEE)
    assert _rocksoft(check, 0x04C11DB7, xorout=0) == 0x340BC6D9  # CRC-32/JAMCRC
    assert _rocksoft(check, 0x04C11DB7, reflected=False) == 0xFC891918  # CRC-32/BZIP2
    assert _rocksoft(check, 0x04C11DB7, reflected=False, xorout=0) == 0x0376E6E7  # MPEG-2
    assert _rocksoft(check, 0x04C11DB7, reflected=False, init=0) == 0x765E7680  # POSIX
    assert _rocksoft(check) == _crc32c_reference(check)


CRC_MISTAKES = {
    "crc-no-final-xor": lambda body: struct.pack("<I", _crc32c_reference(body, 0)),
    "crc-ieee-polynomial": lambda body: struct.pack("<I", zlib.crc32(body)),
    "crc-records-only": lambda body: struct.pack("<I", _crc32c_reference(body[28:])),
    "crc-misses-last-byte": lambda body: struct.pack("<I", _crc32c_reference(body[:-1])),
    "crc-trailer-big-endian": lambda body: struct.pack(">I", _crc32c_reference(body)),
}
# Other members of the parametrised CRC, one parameter off each (a reader probe tries them too).
CRC_MODEL_MISTAKES = {
    "crc-init-zero": lambda body: struct.pack("<I", _rocksoft(body, init=0)),
    "crc-init-zero&crc-no-final-xor": lambda body: struct.pack(
        "<I", _rocksoft(body, init=0, xorout=0)
    ),
    "crc-polynomial:right-0x1edc6f41": lambda body: struct.pack(
        "<I", _rocksoft(body, shift_right_with=0x1EDC6F41)
    ),
    "crc-polynomial:left-0x1edc6f41": lambda body: struct.pack(
        "<I", _rocksoft(body, reflected=False)
    ),
    "crc-polynomial:right-0xeb31d82e": lambda body: struct.pack("<I", _rocksoft(body, 0x741B8CD7)),
    "crc-skips-magic": lambda body: struct.pack("<I", _rocksoft(body[4:])),
    "crc-includes-trailer": lambda body: struct.pack("<I", _rocksoft(body + bytes(4))),
    "crc-result-bits-reversed": lambda body: struct.pack(
        "<I", int(f"{_rocksoft(body):032b}"[::-1], 2)
    ),
}
# Several parameters off at once: a writer's trailer names them all (a reader is probed with
# one parameter off at a time).
CRC_MISTAKES_COMBINED = {
    "crc-init-zero&crc-no-final-xor&crc-records-only&crc-trailer-big-endian": lambda body: (
        struct.pack(">I", _rocksoft(body[28:], init=0, xorout=0))
    ),
    "crc-polynomial:left-0x04c11db7&crc-header-only": lambda body: struct.pack(
        "<I", _rocksoft(body[:28], 0x04C11DB7, reflected=False)
    ),
    "crc-ieee-polynomial&crc-no-final-xor&crc-misses-last-byte": lambda body: struct.pack(
        "<I", _rocksoft(body[:-1], 0x04C11DB7, xorout=0)
    ),
}


@pytest.mark.parametrize("cause", sorted(CRC_MISTAKES))
def test_crc_mistakes_in_an_export(cause: str) -> None:
    blocks = _blocks()
    expected = oracle.encode(GEOMETRY, blocks, 1)
    body = expected[:-4]
    got = _diagnosed(EnvelopeEvidence(expected, body + CRC_MISTAKES[cause](body), ()))
    assert (got.cause.id, got.blamed, got.symptom) == (cause, ("ENV-CRC",), "crc-only")
    assert "valid-refused:EFORMAT" in got.cause.explains


def _crc_envelope() -> bytes:
    """An envelope of values of its own generator: the module's RNG stream stays as the tests
    below were written against."""
    values = np.random.default_rng(27).standard_normal(GEOMETRY.values_shape).astype(F32)
    return oracle.encode(GEOMETRY, _blocks(values=values), 1)


@pytest.mark.parametrize("cause", sorted(CRC_MODEL_MISTAKES | CRC_MISTAKES_COMBINED))
def test_crc_model_mistakes_in_an_export(cause: str) -> None:
    expected = _crc_envelope()
    body = expected[:-4]
    mistaken = (CRC_MODEL_MISTAKES | CRC_MISTAKES_COMBINED)[cause](body)
    got = _diagnosed(EnvelopeEvidence(expected, body + mistaken, ()))
    assert (got.cause.id, got.blamed, got.symptom) == (cause, ("ENV-CRC",), "crc-only")
    assert "valid-refused:EFORMAT" in got.cause.explains


def test_crc_titles_say_the_parameters_found() -> None:
    expected = _crc_envelope()
    body = expected[:-4]
    zero = CRC_MODEL_MISTAKES["crc-init-zero"](body)
    zero = _diagnosed(EnvelopeEvidence(expected, body + zero))
    assert zero.cause.title == "CRC-32C computed with init 0 instead of 0xFFFFFFFF"
    normal = CRC_MODEL_MISTAKES["crc-polynomial:right-0x1edc6f41"](body)
    got = _diagnosed(EnvelopeEvidence(expected, body + normal))
    assert "polynomial in normal form (0x1edc6f41) in a reflected, shift-right CRC" in (
        got.cause.title
    )


def test_a_trailer_no_crc_model_gives_is_no_crc_mistake() -> None:
    expected = _crc_envelope()
    body = expected[:-4]
    # The right CRC plus one: no parameter of the model gives it.
    off_by_one = struct.pack("<I", (_crc32c_reference(body) + 1) & 0xFFFFFFFF)
    got = _diagnosed(EnvelopeEvidence(expected, body + off_by_one))
    assert (got.cause, got.blamed, got.symptom) == (None, ("ENV-CRC",), "crc-only")


def test_no_final_xor_says_so() -> None:
    expected = oracle.encode(GEOMETRY, _blocks(), 1)
    body = expected[:-4]
    got = _diagnosed(EnvelopeEvidence(expected, body + CRC_MISTAKES["crc-no-final-xor"](body)))
    assert "XOR 0xffffffff" in got.cause.evidence


def test_a_crc_that_follows_the_payload_is_not_blamed() -> None:
    """Only the payload's own requirement: the CRC differs because the payload does."""
    blocks = _blocks()
    expected = oracle.encode(GEOMETRY, blocks, 1)
    wrong = bytearray(expected[:-4])
    # One f16 element a step away from zero (its magnitude's bits plus one): a step toward zero
    # would be a known mistake (f16-round-toward-zero), whichever values the RNG gave.
    at = oracle.HEADER_SIZE + 12 + 6
    struct.pack_into("<H", wrong, at, struct.unpack_from("<H", wrong, at)[0] + 1)
    got = _diagnosed(EnvelopeEvidence(expected, oracle.seal(bytes(wrong)), tuple(blocks)))
    assert got.cause is None
    assert got.blamed == ("V1-F16",)


# -- integers and records ---------------------------------------------------------------------


def test_big_endian_header_and_record_fields() -> None:
    blocks = _blocks()
    expected = oracle.encode(GEOMETRY, blocks, 1)
    header = b"TLKV" + struct.pack(">HHIIIII", 1, 1, 1, *GEOMETRY.as_dict().values())
    record = struct.pack(">QI", blocks[0].block_hash, blocks[0].n_tokens)
    payload = oracle.encode_payload(GEOMETRY, 1, 4, blocks[0].values)
    actual = oracle.seal(header + record + payload)
    got = _diagnosed(EnvelopeEvidence(expected, actual, tuple(blocks)))
    assert (got.cause.id, got.blamed) == ("integers-big-endian", ("ENV-LE",))


def test_record_field_order() -> None:
    blocks = _blocks()
    expected = oracle.encode(GEOMETRY, blocks, 1)
    record = struct.pack("<IQ", blocks[0].n_tokens, blocks[0].block_hash)
    payload = oracle.encode_payload(GEOMETRY, 1, 4, blocks[0].values)
    actual = oracle.seal(oracle.encode_header(GEOMETRY, 1, 1) + record + payload)
    got = _diagnosed(EnvelopeEvidence(expected, actual, tuple(blocks)))
    assert (got.cause.id, got.blamed) == ("record-field-order", ("ENV-RECORD",))


def test_size_without_trailer() -> None:
    expected = oracle.encode(GEOMETRY, _blocks(), 1)
    got = _diagnosed(EnvelopeEvidence(expected, expected[:-4]))
    assert (got.cause.id, got.blamed) == ("size-without-trailer", ("ENV-SIZE",))
    size = _diagnosed(SizeEvidence(1, 1, len(expected), len(expected) - 4))
    assert size.cause.id == "size-without-trailer"


# -- layout -------------------------------------------------------------------------------------


def test_k_and_v_swapped() -> None:
    blocks = _blocks()
    swapped = blocks[0].values[:, ::-1].copy()
    for version in (1, 2):
        payload = oracle.encode_payload(GEOMETRY, version, 4, swapped)
        got = _envelope_case(version, payload, blocks)
        assert (got.cause.id, got.blamed) == ("k-v-swapped", (f"V{version}-LAYOUT",))


def test_layer_and_head_axes_swapped() -> None:
    blocks = _blocks()
    f16 = oracle.f32_to_f16_bits(blocks[0].values)  # [L][2][Hkv][B][D]
    payload = np.ascontiguousarray(f16.transpose(2, 1, 0, 3, 4)).astype("<u2").tobytes()
    got = _envelope_case(1, payload, blocks)
    assert got.cause.id == "axes-order:[Hkv][2][L][B][D]"
    assert got.blamed == ("V1-LAYOUT",)


def test_v2_scales_placement() -> None:
    blocks = _blocks()
    first = _v2_payload(blocks[0].values, 4, _right_scale, _right_quotient, order="first")
    assert _envelope_case(2, first, blocks).cause.id == "v2-scales-first"
    right = oracle.encode_payload(GEOMETRY, 2, 4, blocks[0].values)
    n = GEOMETRY.n_elements
    slab = GEOMETRY.block_tokens * GEOMETRY.head_dim
    per_slab = b"".join(
        right[i * slab : (i + 1) * slab] + right[n + 4 * i : n + 4 * i + 4]
        for i in range(n // slab)
    )
    got = _envelope_case(2, per_slab, blocks)
    assert (got.cause.id, got.blamed) == ("v2-scale-after-each-slab", ("V2-LAYOUT",))


def test_stale_padding() -> None:
    values = oracle.round_to_f16(_values())
    blocks = _blocks(fill=2, values=values)
    stale = oracle.f32_to_f16_bits(values).astype("<u2").tobytes()  # past the fill kept
    got = _envelope_case(1, stale, blocks)
    assert (got.cause.id, got.blamed) == ("stale-padding", ("V1-PAD",))


# -- v1 values ------------------------------------------------------------------------------------


def test_f16_zeros_and_subnormals_flushed() -> None:
    values = oracle.round_to_f16(_values())
    values[0, 0, 0, 0, 0] = -0.0
    values[0, 0, 0, 0, 1] = 3e-6  # an f16 subnormal
    blocks = _blocks(values=values)
    flushed = values.copy()
    flushed[0, 0, 0, 0, :2] = 0.0
    got = _envelope_case(1, oracle.encode_payload(GEOMETRY, 1, 4, flushed), blocks)
    assert (got.cause.id, got.blamed) == ("f16-negative-zero-flushed", ("V1-F16",))
    values[0, 0, 0, 0, 0] = 1.0
    flushed[0, 0, 0, 0, 0] = 1.0
    got = _envelope_case(1, oracle.encode_payload(GEOMETRY, 1, 4, flushed), _blocks(values=values))
    assert got.cause.id == "f16-subnormals-flushed"


def test_a_v2_export_losing_negative_zero_is_the_store_or_the_e4m3_sign() -> None:
    """-0.0 exported as the e4m3 code of +0.0 (00 for 80): a pool that stored it as +0.0, or
    an e4m3 encoder taking the sign from x < 0; one of them, unless the blocks were read back
    right just before the export: then the store is right, and the encoder is named."""
    values = oracle.round_to_f16(_values())
    values[0, 0, 0, 0, :3] = -0.0
    blocks = _blocks(values=values)
    expected = oracle.encode(GEOMETRY, blocks, 2)
    plus = [
        oracle.Block(b.block_hash, b.n_tokens, np.where(b.values == 0, F32(0), b.values))
        for b in blocks
    ]
    actual = oracle.encode(GEOMETRY, plus, 2)
    assert actual != expected
    unsure = _diagnosed(EnvelopeEvidence(expected, actual, tuple(blocks)))
    assert [c.id for c in unsure.causes] == [
        "one-of:v2-negative-zero-unsigned+f16-negative-zero-flushed",
        "v2-negative-zero-unsigned",
        "f16-negative-zero-flushed",
    ]
    read_back = EnvelopeEvidence(expected, actual, tuple(blocks), held_read_back=True)
    sure = _diagnosed(read_back)
    assert [c.id for c in sure.causes] == ["v2-negative-zero-unsigned"]
    assert sure.blamed == ("V2-E4M3",)


def test_zeroed_values_are_no_sign_of_a_flushed_negative_zero() -> None:
    """Values read back as +0.0 are "-0.0 flushed" only when each of them was -0.0 (or an f16
    subnormal: both flushed): a normal value zeroed too (a fill that cut the wrong axis) is
    another mistake, which it does not explain."""
    values = oracle.round_to_f16(_values())
    values[0, 0, 0, 0, 0] = -0.0
    blocks = _blocks(values=values)
    zeroed = values.copy()
    zeroed[0, 0, 0, 0, :2] = 0.0  # the -0.0 and a normal value
    assert values[0, 0, 0, 0, 1] != 0
    got = attribute(
        EnvelopeEvidence(
            oracle.encode(GEOMETRY, blocks, 1),
            _body(1, blocks, oracle.encode_payload(GEOMETRY, 1, 4, zeroed)),
            tuple(blocks),
        ),
        [],
    )
    assert "f16-negative-zero-flushed" not in [c.id for c in got.causes]


def test_f16_truncation_in_an_export() -> None:
    """A pool that truncates what an import decoded: every differing value is one f16 step
    toward zero (the suite knows the pool's values only in f16 here)."""
    exact = _values()
    rne = oracle.f32_to_f16_bits(exact)
    truncated = np.where(
        np.abs(oracle.f16_bits_to_f32(rne)) > np.abs(exact), rne.astype(np.int32) - 1, rne
    ).astype("<u2")
    blocks = [oracle.Block(0x1234, 4, oracle.f16_bits_to_f32(rne))]
    got = _envelope_case(1, truncated.tobytes(), blocks)
    assert (got.cause.id, got.blamed) == ("f16-round-toward-zero", ("V1-F16",))


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")
def test_f16_overflow_truncated_or_saturated() -> None:
    """f32 values past the f16 range (an f32 pool's) are infinities in f16; a truncating
    converter and a saturating one both write +-65504 (7b ff, fb ff) for them. Only those
    differing, the bytes cannot tell the two apart; beside a value truncation rounds down
    (1 + 3 * 2^-12: nearest 1 + 2^-10, truncated 1.0), only truncation explains them."""
    values = np.zeros(GEOMETRY.values_shape, dtype=F32)
    values[0, 0, 0, 0, :3] = 70000.0, -1e6, 1.0
    written = oracle.f32_to_f16_bits(values).astype("<u2")
    assert list(written[0, 0, 0, 0, :2]) == [0x7C00, 0xFC00]
    written[0, 0, 0, 0, :2] = 0x7BFF, 0xFBFF
    blocks = [oracle.Block(0x1234, 4, values)]
    got = _envelope_case(1, written.tobytes(), blocks)
    assert (got.cause.id, got.blamed) == (
        "one-of:f16-round-toward-zero+f16-saturated",
        ("V1-F16",),
    )
    assert got.cause.title.startswith("one of: f32 values rounded to f16 by truncation")
    values[0, 0, 0, 0, 2] = 1.0 + 3 * 2.0**-12
    assert oracle.f32_to_f16_bits(values)[0, 0, 0, 0, 2] == 0x3C01
    written[0, 0, 0, 0, 2] = 0x3C00
    got = _envelope_case(1, written.tobytes(), [oracle.Block(0x1234, 4, values)])
    assert (got.cause.id, got.blamed) == ("f16-round-toward-zero", ("V1-F16",))


def test_nan_payload_and_sign() -> None:
    values = oracle.round_to_f16(_values())
    bits = oracle.f32_to_f16_bits(values).copy()
    bits[0, 1, 0, 0, 0] = 0x7E55  # a quiet NaN with a payload
    blocks = [oracle.Block(0x1234, 4, oracle.f16_bits_to_f32(bits))]
    default = bits.copy()
    default[0, 1, 0, 0, 0] = 0x7E00
    got = _envelope_case(1, default.astype("<u2").tobytes(), blocks)
    assert (got.cause.id, got.blamed) == ("nan-payload-dropped", ("V1-F16-NAN-PAYLOAD",))
    negative = bits.copy()
    negative[0, 1, 0, 0, 0] = 0xFE55
    got = _envelope_case(1, negative.astype("<u2").tobytes(), blocks)
    assert (got.cause.id, got.blamed) == ("nan-sign-lost", ("NAN-SIGN",))


# -- v2 numerics ---------------------------------------------------------------------------------

V2_MISTAKES = {
    "v2-scale-reciprocal": (lambda a: F32(a * F32(F32(1) / F32(448))), _right_quotient),
    "v2-scale-fnuz-max": (lambda a: F32(a / F32(240)), _right_quotient),
    "v2-round-toward-zero": (
        _right_scale,
        lambda x, s, a: _e4m3(np.trunc(0) + _toward_zero_reference((x / s).astype(F32))),
    ),
    "v2-quotient-reciprocal": (
        _right_scale,
        lambda x, s, a: _e4m3((x * (F32(1) / s).astype(F32)).astype(F32)),
    ),
}


def _toward_zero_reference(q: np.ndarray) -> np.ndarray:
    """The largest-magnitude e4m3 value not beyond each q, by search over every finite code."""
    table = oracle.e4m3_codes_to_f32(np.arange(0x7F, dtype=np.uint8))  # +0 .. 448
    magnitude = np.abs(q)
    index = np.searchsorted(table, magnitude, side="right") - 1
    return (np.sign(q) * table[index]).astype(F32)


@pytest.mark.parametrize("cause", sorted(V2_MISTAKES))
def test_v2_numeric_mistakes(cause: str) -> None:
    scale_of, quotient_of = V2_MISTAKES[cause]
    for _ in range(50):  # values on which the mistake shows (x * (1/s) rarely differs)
        blocks = _blocks(values=_values(scale=100.0))
        payload = _v2_payload(blocks[0].values, 4, scale_of, quotient_of)
        if payload != oracle.encode_payload(GEOMETRY, 2, 4, blocks[0].values):
            break
    got = _envelope_case(2, payload, blocks)
    assert got.cause is not None, got
    # where another mistake gives the same codes (x * (1/s) under an f32 quotient that is an
    # exact e4m3 tie rounds as ties toward zero does), "one of" them, this one among them
    assert cause in got.cause.id.removeprefix("one-of:").split("+"), got.cause.id
    assert got.blamed == (("V2-SCALE",) if "scale" in cause else ("V2-E4M3",))


def test_v2_zero_slab_scale_zero() -> None:
    values = oracle.round_to_f16(_values())
    values[0, 0, 0] = 0.0
    blocks = _blocks(values=values)
    payload = _v2_payload(
        values,
        4,
        lambda a: F32(0) if a == 0 else _right_scale(a),
        lambda x, s, a: _e4m3(np.where(s == 0, 0, x / np.where(s == 0, 1, s)).astype(F32)),
    )
    got = _envelope_case(2, payload, blocks)
    assert (got.cause.id, got.blamed) == ("v2-zero-slab-scale-zero", ("V2-SCALE-ZERO",))


def test_v2_amax_over_unfilled_positions() -> None:
    values = oracle.round_to_f16(_values())
    values[..., 2:, :] *= 10  # larger values past the fill (a reused slot)
    blocks = _blocks(fill=2, values=values)
    values = blocks[0].values  # as the pool holds them (x10 is not always an f16)
    amax_all = np.abs(values).max(axis=(-2, -1)).astype(F32)
    scales = (amax_all / F32(448)).astype(F32)
    codes = np.zeros(GEOMETRY.values_shape, dtype=np.uint8)
    codes[..., :2, :] = _e4m3((values[..., :2, :] / scales[..., None, None]).astype(F32))
    got = _envelope_case(2, codes.tobytes() + scales.astype("<f4").tobytes(), blocks)
    assert (got.cause.id, got.blamed) == ("v2-amax-over-unfilled", ("V2-SCALE",))


def _payload_scaled(values: np.ndarray, fill: int, scales: np.ndarray) -> bytes:
    """A v2 payload of `values`' filled positions encoded right with the scales given."""
    codes = np.zeros(GEOMETRY.values_shape, dtype=np.uint8)
    codes[..., :fill, :] = _e4m3((values[..., :fill, :] / scales[..., None, None]).astype(F32))
    return codes.tobytes() + scales.astype("<f4").tobytes()


def test_v2_amax_over_a_reused_slot_names_the_released_values() -> None:
    # The slot held a released block of larger values; the block written over it fills 2 of
    # its positions, and the pool kept the rest: amax is taken over what the slot holds.
    blocks = _blocks(fill=2)
    released = oracle.Block(0x99, GEOMETRY.block_tokens, oracle.round_to_f16(_values(10.0)))
    slot = blocks[0].values.copy()
    slot[..., 2:, :] = released.values[..., 2:, :]
    scales = (np.abs(slot).max(axis=(-2, -1)) / F32(448)).astype(F32)
    actual = _body(2, blocks, _payload_scaled(blocks[0].values, 2, scales))
    expected = oracle.encode(GEOMETRY, blocks, 2)
    named = _diagnosed(EnvelopeEvidence(expected, actual, tuple(blocks), released=(released,)))
    assert (named.cause.id, named.blamed) == ("v2-amax-over-unfilled", ("V2-SCALE",))
    # Without the released block the evidence does not explain these scales: no name.
    unknown = _diagnosed(EnvelopeEvidence(expected, actual, tuple(blocks)))
    assert unknown.cause is None


def test_v2_scale_larger_than_any_slot_amax_names_nothing() -> None:
    # Scales 1.5 times due, codes consistent with them: no amax over any slot gives them.
    blocks = _blocks(fill=2)
    filled = blocks[0].values[..., :2, :]
    scales = (np.abs(filled).max(axis=(-2, -1)) / F32(448) * F32(1.5)).astype(F32)
    got = _envelope_case(2, _payload_scaled(blocks[0].values, 2, scales), blocks)
    assert got.cause is None


@pytest.mark.parametrize(
    ("narrow", "cause_id"),
    [(np.float16, "v2-scale-rounded:f16"), (ml_dtypes.bfloat16, "v2-scale-rounded:bf16")],
)
def test_v2_scale_rounded_to_a_narrower_format(narrow, cause_id: str) -> None:
    blocks = _blocks(fill=GEOMETRY.block_tokens)
    amax = np.abs(blocks[0].values).max(axis=(-2, -1)).astype(F32)
    scales = (amax / F32(448)).astype(narrow).astype(F32)  # numpy / ml_dtypes round to nearest
    assert (scales != (amax / F32(448)).astype(F32)).any()
    payload = _payload_scaled(blocks[0].values, GEOMETRY.block_tokens, scales)
    got = _envelope_case(2, payload, blocks)
    assert (got.cause.id, got.blamed) == (cause_id, ("V2-SCALE",))


def _tie_rounded_to_even(amax: float, x: float, up: float) -> Attribution:
    """A slab of amax, x (whose exact quotient x * 448 / amax is an e4m3 midpoint, rounded up
    in f32) and `up` (a quotient rounded up, not a tie; 0: none), the tie's code written as
    the exact quotient rounds it, to the even code one step toward zero."""
    values = np.zeros(GEOMETRY.values_shape, dtype=F32)
    values[0, 0, 0, 0, :3] = amax, x, up
    blocks = [oracle.Block(0x1234, 4, values)]
    wrong = bytearray(oracle.encode_payload(GEOMETRY, 2, 4, values))
    assert wrong[1] & 0x7F in (0x73, 0x6B), hex(wrong[1])  # 168.00002 or 84.00001: odd codes
    wrong[1] -= 1  # 168 or 84 exactly rounds to even
    return _envelope_case(2, bytes(wrong), blocks)


def test_v2_quotient_in_f64_at_a_tie() -> None:
    """The issue's tie: amax 0.88671875, x -0.33251953125: f32 168.00002 -> 0xF3, exact 168 ->
    0xF2. Alone, a truncating encoder gives it too (one of the two); beside a quotient that
    rounds up (0.2 -> 101.05 -> 104, 0x6D; truncated 96), only the f64 quotient does."""
    got = _tie_rounded_to_even(0.88671875, -0.33251953125, 0.0)
    assert (got.cause.id, got.blamed) == (
        "one-of:v2-quotient-in-f64+v2-round-toward-zero",
        ("V2-E4M3",),
    )
    assert got.cause.title.startswith("one of: the quotient computed in f64")
    got = _tie_rounded_to_even(0.88671875, -0.33251953125, 0.2)
    assert (got.cause.id, got.blamed) == ("v2-quotient-in-f64", ("V2-E4M3",))


def test_v2_quotient_in_f64_or_reciprocal_at_the_same_tie() -> None:
    """amax 0.2225341796875 (scale 4.967281e-4), x 0.0834503173828125: exactly 84, an e4m3
    midpoint; x / scale is 84.00001 (0x6B), x * (1/scale) is 84.0, as is the f64 quotient, and
    both round it to the even 0x6A. The bytes cannot tell the two apart: one of them, not
    either alone."""
    got = _tie_rounded_to_even(0.2225341796875, 0.0834503173828125, 0.05)
    assert (got.cause.id, got.blamed) == (
        "one-of:v2-quotient-in-f64+v2-quotient-reciprocal",
        ("V2-E4M3",),
    )
    assert "x * (1/scale)" in got.cause.title


def test_v2_nan_at_the_top() -> None:
    blocks = _blocks()
    right = bytearray(oracle.encode_payload(GEOMETRY, 2, 4, blocks[0].values))
    top = [i for i in range(GEOMETRY.n_elements) if right[i] & 0x7F == 0x7E]
    for i in top:
        right[i] |= 0x7F
    got = _envelope_case(2, bytes(right), blocks)
    assert (got.cause.id, got.blamed) == ("v2-nan-at-the-top", ("V2-NOSAT",))


def test_v2_nan_at_the_top_keeps_the_due_sign() -> None:
    """An overflow test at the top of e4m3's range writes the NaN of the value's own sign
    (0x7E -> 0x7F, 0xFE -> 0xFF): the NaN of the other sign in place of +-448 is another
    mistake (the sign written elsewhere), and v2-nan-at-the-top does not explain it."""
    blocks = _blocks()
    right = bytearray(oracle.encode_payload(GEOMETRY, 2, 4, blocks[0].values))
    top = [i for i in range(GEOMETRY.n_elements) if right[i] & 0x7F == 0x7E]
    assert top
    for i in top:
        right[i] = 0xFF if right[i] == 0x7E else 0x7F
    got = _envelope_case(2, bytes(right), blocks)
    assert got.cause is None or got.cause.id != "v2-nan-at-the-top", got.cause


# -- values read back ------------------------------------------------------------------------------


def _v2_record(values: np.ndarray, fill: int = 4) -> tuple[bytes, int]:
    data = oracle.encode(GEOMETRY, [oracle.Block(0, fill, values)], 2)
    return data, oracle.HEADER_SIZE


def test_reader_e4m3_nan_as_480() -> None:
    values = _values()
    data, offset = _v2_record(values)
    data = bytearray(data)
    data[offset + 12] = 0x7F  # K[0][0][0][0] is NaN
    data = oracle.seal(bytes(data[:-4]))
    decoded = oracle.decode(data).records[0].decoded
    expected = decoded.values.copy()
    expected[..., 4:, :] = 0
    actual = expected.copy()
    actual[0, 0, 0, 0, 0] = F32(480) * decoded.scales[0, 0, 0]
    got = _diagnosed(ValuesEvidence(expected, actual, 4, "f32", (data, offset)))
    assert (got.cause.id, got.blamed) == ("e4m3-nan-as-480", ("V2-E4M3",))


def _truncated_to_f16(values: np.ndarray) -> np.ndarray:
    """f32 values rounded to f16 toward zero (worked from the nearest-even f16: one f16 step
    back toward zero where it lies farther from zero than the value)."""
    bits = values.astype(np.float16).view(np.uint16).astype(np.int32)
    over = np.abs(oracle.f16_bits_to_f32(bits.astype(np.uint16))) > np.abs(values)
    return oracle.f16_bits_to_f32(np.where(over, bits - 1, bits).astype(np.uint16))


class _StorePool(PoolHandle):
    """An f16 pool of one block whose store is `_Storing.store`."""

    dtype = "f16"

    def __init__(self, owner: _Storing, capacity: int) -> None:
        super().__init__(GEOMETRY, capacity)
        self.owner, self.held = owner, None

    def write(self, block_hash: int, n_tokens: int, values: np.ndarray) -> int:
        self.owner.writes.append((block_hash, n_tokens, np.array(values)))
        self.held = (block_hash, n_tokens, self.owner.store(np.asarray(values, F32)))
        return 3

    def read(self, block: int):
        assert block == 3
        assert self.held is not None
        return ReadBack(*self.held)

    def release(self, block: int) -> None:
        self.owner.released += 1

    def free_blocks(self) -> int:
        raise NotImplementedError

    find = import_envelope = export_bytes = export = free_blocks  # type: ignore[assignment]


class _Storing(Adapter):
    def __init__(self, store) -> None:
        super().__init__("storing")
        self.store, self.writes, self.released = store, [], 0

    def info(self) -> ImplInfo:
        return ImplInfo(frozenset({1, 2}), frozenset({1, 2}), "f16")

    def block_hash(self, parent: int, tokens: list[int]) -> int:
        raise NotImplementedError

    def open_pool(self, geometry: oracle.Geometry, capacity: int) -> PoolHandle:
        assert geometry == GEOMETRY
        return _StorePool(self, capacity)


def test_reader_scale_ignored_and_f16_truncation() -> None:
    values = _values()
    data, offset = _v2_record(values)
    decoded = oracle.decode(data).records[0].decoded
    expected = decoded.values.copy()
    bare = oracle.e4m3_codes_to_f32(decoded.codes)
    got = _diagnosed(ValuesEvidence(expected, bare, 4, "f32", (data, offset)), ["READ-ACCEPT"])
    assert (got.cause.id, got.blamed) == ("v2-scale-ignored", ("V2-DECODE",))


def test_a_v2_import_misrounded_in_an_f16_pool_is_the_stores_only_where_a_write_shows_it() -> None:
    # A v2 import into an f16 pool read back with each value one f16 step toward zero: a store
    # that truncates gives that, and so does a decoder that computes in f16 by truncation. The
    # probe writes the values the record decodes to into a new pool and reads them back.
    values = _values()
    data, offset = _v2_record(values)
    decoded = oracle.decode(data).records[0].decoded.values
    due = oracle.round_to_f16(decoded)
    truncated = _truncated_to_f16(decoded)
    assert (truncated != due).any()
    evidence = ValuesEvidence(due, truncated, 4, "f16", (data, offset))
    truncating = _Storing(_truncated_to_f16)
    got = attribute(evidence, ["V2-DECODE"], truncating)
    assert got.cause.id == "f16-round-toward-zero"
    [(block_hash, n_tokens, written)] = truncating.writes
    given = decoded.copy()
    given[..., 4:, :] = 0
    assert (block_hash, n_tokens, truncating.released) == (0, 4, 1)
    assert (written.view(np.uint32) == given.view(np.uint32)).all()
    # A store that rounds to nearest even: the decoder, not the store, read them so.
    right = _Storing(oracle.round_to_f16)
    got = attribute(evidence, ["V2-DECODE"], right)
    assert (got.cause, got.blamed) == (None, ("V2-DECODE",))
    assert len(right.writes) == 1
    # A store that misrounds them otherwise (to +0.0 throughout) explains nothing either.
    assert attribute(evidence, ["V2-DECODE"], _Storing(np.zeros_like)).cause is None
    # Nothing to probe: no store mistake named.
    assert attribute(evidence, ["V2-DECODE"]).cause is None


@pytest.mark.parametrize(("name", "narrow"), [("f16", np.float16), ("bf16", ml_dtypes.bfloat16)])
def test_a_v2_decode_computed_in_a_narrower_format(name: str, narrow) -> None:
    # code x scale multiplied in f16 (or bf16) by numpy's own arithmetic of that type.
    data, offset = _v2_record(_values())
    decoded = oracle.decode(data).records[0].decoded
    codes = oracle.e4m3_codes_to_f32(decoded.codes)
    product = codes.astype(narrow) * decoded.scales[..., None, None].astype(narrow)
    actual = np.asarray(product, dtype=F32)
    actual[..., 4:, :] = 0
    due = decoded.values.copy()
    due[..., 4:, :] = 0
    assert (actual != due).any()
    got = _diagnosed(ValuesEvidence(due, actual, 4, "f32", (data, offset)), ["READ-ACCEPT"])
    assert (got.cause.id, got.blamed) == (f"v2-decode-in:{name}", ("V2-DECODE",))
    # Into an f16 pool whose store is right: the decoder's, with no store mistake beside it.
    stored = oracle.round_to_f16(actual)
    if (stored != oracle.round_to_f16(due)).any():
        evidence = ValuesEvidence(oracle.round_to_f16(due), stored, 4, "f16", (data, offset))
        got = attribute(evidence, ["READ-ACCEPT"], _Storing(oracle.round_to_f16))
        # f16 only: the scale alone rounded to f16, the product in f32, gives the same f16
        # values (e4m3 value x f16 scale is exact in f32), so "one of" the two
        same = {"f16": ["v2-decode-scale-form:f16"], "bf16": []}[name]
        ids = [*same, f"v2-decode-in:{name}"]
        one_of = ["one-of:" + "+".join(ids)] if same else []
        assert [c.id for c in got.causes] == [*one_of, *ids]


def test_an_e4m3_negative_zero_decoded_without_its_sign_is_no_f16_store_mistake() -> None:
    # The code 0x80 (-0, the sign of a subnormal code) decoded as +0, with scale 1.0: read
    # back +0.0 where -0.0 is due, which an f16 store flushing -0.0 gives too.
    data, offset = _v2_record(np.zeros(GEOMETRY.values_shape, F32))
    data = bytearray(data)
    data[offset + 12] = 0x80
    data = oracle.seal(bytes(data[:-4]))
    due = oracle.round_to_f16(oracle.decode(data).records[0].decoded.values)
    assert due.view(np.uint32)[0, 0, 0, 0, :2].tolist() == [0x80000000, 0]
    unsigned = np.zeros_like(due)
    evidence = ValuesEvidence(due, unsigned, 4, "f16", (data, offset))
    # A store that keeps -0.0 (written directly): the decoder dropped the sign.
    assert attribute(evidence, [], _Storing(oracle.round_to_f16)).cause is None
    # A store that flushes -0.0 to +0.0 when written directly: the store's mistake.
    flushing = _Storing(lambda v: np.where(v == 0, F32(0), oracle.round_to_f16(v)))
    assert attribute(evidence, [], flushing).cause.id == "f16-negative-zero-flushed"


def test_read_past_fill_and_padding_kept() -> None:
    values = oracle.round_to_f16(_values())
    expected = values.copy()
    expected[..., 2:, :] = 0
    got = _diagnosed(ValuesEvidence(expected, values, 2, "f32", written=values))
    assert (got.cause.id, got.blamed) == ("read-past-fill", ("POOL-WRITE-READ",))


# -- refusals and the run-level view ----------------------------------------------------------


def test_more_blocks_free_after_releases_is_the_count() -> None:
    """More blocks free after releases than due, with no block shown freed while held (the
    pool-script case checks that by finding each): the count moved, and says no more."""
    got = _diagnosed(CountEvidence(1, 2, True), ["POOL-REFS", "POOL-FIND"])
    assert (got.cause.id, got.blamed) == ("free-count", ("POOL-REFS",))
    fewer = _diagnosed(CountEvidence(2, 1, True), ["POOL-REFS"])
    assert fewer.cause.id == "release-not-freed"


def test_refusals() -> None:
    accepted = _diagnosed(RefusalEvidence(frozenset({"READ-MAGIC"}), frozenset({"EFORMAT"}), None))
    assert (accepted.cause.id, accepted.blamed) == ("rule-not-enforced:READ-MAGIC", ("READ-MAGIC",))
    wrong = _diagnosed(
        RefusalEvidence(frozenset({"READ-GEOMETRY"}), frozenset({"ESHAPE"}), "EFORMAT")
    )
    assert wrong.cause.id == "wrong-status:READ-GEOMETRY"
    assert wrong.symptom == "refused:EFORMAT"
    valid = _diagnosed(RefusalEvidence(frozenset(), frozenset(), "EFORMAT", b"x"), ["READ-ACCEPT"])
    assert (valid.cause, valid.blamed, valid.symptom) == (
        None,
        ("READ-ACCEPT",),
        "valid-refused:EFORMAT",
    )


def test_a_symptom_explained_elsewhere_is_a_consequence() -> None:
    expected = oracle.encode(GEOMETRY, _blocks(), 1)
    body = expected[:-4]
    crc = _diagnosed(EnvelopeEvidence(expected, body + CRC_MISTAKES["crc-no-final-xor"](body)))
    refused = _diagnosed(RefusalEvidence(frozenset(), frozenset(), "EFORMAT", expected))
    run = diagnose_run({"export": crc, "import": refused})
    assert [(f.cause.id, f.shown_by, f.explains) for f in run.findings] == [
        ("crc-no-final-xor", ["export"], ["import"])
    ]
    assert run.attributions["export"] == crc
    settled = run.attributions["import"]
    assert (settled.consequence, settled.blamed) == ("crc-no-final-xor", ("ENV-CRC",))


@pytest.mark.parametrize("crc", ["crc-init-zero", "crc-polynomial:right-0x1edc6f41"])
def test_a_status_mixup_yields_to_any_crc_mistake_of_the_run(crc: str) -> None:
    """A reader whose CRC refuses every envelope refuses a geometry case with its CRC's
    EFORMAT: that is the CRC mistake's consequence, not a status mix-up of its own."""
    expected = _crc_envelope()
    body = expected[:-4]
    export = _diagnosed(EnvelopeEvidence(expected, body + CRC_MODEL_MISTAKES[crc](body)))
    geometry = _diagnosed(
        RefusalEvidence(frozenset({"READ-GEOMETRY"}), frozenset({"ESHAPE"}), "EFORMAT")
    )
    assert geometry.cause.id == "wrong-status:READ-GEOMETRY"
    run = diagnose_run({"export": export, "geometry": geometry, "again": geometry})
    assert [(f.cause.id, f.shown_by, f.explains) for f in run.findings] == [
        (crc, ["export"], ["geometry", "again"])
    ]
    assert run.attributions["geometry"].consequence == crc
    # Without a CRC mistake in the run, the mix-up stays the cause.
    alone = diagnose_run({"geometry": geometry})
    assert [f.cause.id for f in alone.findings] == ["wrong-status:READ-GEOMETRY"]


def test_a_status_mixup_is_withdrawn_when_valid_envelopes_get_that_status_too() -> None:
    """A reader that refuses every envelope with EFORMAT (a magic compared over 5 bytes)
    refuses a geometry case with EFORMAT too: no status mix-up of READ-GEOMETRY is shown, and
    none is named (the case keeps its blame); another status leaves the mix-up standing."""
    geometry = _diagnosed(
        RefusalEvidence(frozenset({"READ-GEOMETRY"}), frozenset({"ESHAPE"}), "EFORMAT")
    )
    valid = _diagnosed(RefusalEvidence(frozenset(), frozenset(), "EFORMAT", b"x"), ["READ-ACCEPT"])
    run = diagnose_run({"geometry": geometry, "valid": valid})
    assert run.findings == []
    settled = run.attributions["geometry"]
    assert (settled.cause, settled.blamed) == (None, ("READ-GEOMETRY",))
    assert "valid-refused:EFORMAT" in settled.note
    other = _diagnosed(RefusalEvidence(frozenset(), frozenset(), "ENOMEM", b"x"), ["READ-ACCEPT"])
    run = diagnose_run({"geometry": geometry, "valid": other})
    assert [f.cause.id for f in run.findings] == ["wrong-status:READ-GEOMETRY"]


def test_the_run_puts_the_cause_it_shows_most_first() -> None:
    """A failure matching two causes is the one the run's other failures show."""
    first, second = (Cause(c, c, (r,)) for c, r in (("a", "HASH-CHAIN"), ("b", "HASH-INPUT")))
    both = Attribution((first, second), ("HASH-CHAIN",))
    run = diagnose_run({"both": both, "other": Attribution((second,), ("HASH-INPUT",))})
    assert [c.id for c in run.attributions["both"].causes] == ["b", "a"]
    assert run.attributions["both"].blamed == ("HASH-INPUT",)
    assert [(f.cause.id, f.shown_by) for f in run.findings] == [("b", ["both", "other"])]


# -- probing a reader again, through the adapter's probe operation -----------------------------


class _Pool(PoolHandle):
    """A reader that reads an envelope as it should (accepts a valid one, refuses an invalid
    one with `due`) only when its trailer is `mistake`'s, and refuses anything else with
    EFORMAT."""

    def __init__(self, reader: _Reader, capacity: int) -> None:
        super().__init__(GEOMETRY, capacity)
        self.reader = reader

    dtype = "f32"

    def import_envelope(self, data: bytes, max_blocks: int) -> list[int]:
        self.reader.imports.append((self.capacity, max_blocks))
        body, trailer = data[:-4], data[-4:]
        mistaken = (CRC_MISTAKES | CRC_MODEL_MISTAKES).get(self.reader.mistake or "")
        if mistaken is None or trailer != mistaken(body):
            raise Refused("EFORMAT", "import")
        if self.reader.due:
            raise Refused(self.reader.due, "import")
        self.reader.held += 1
        return [7]

    def release(self, block: int) -> None:
        assert block == 7
        self.reader.held -= 1

    def close(self) -> None:
        self.reader.open_pools -= 1

    def free_blocks(self) -> int:
        raise NotImplementedError

    write = read = find = export_bytes = export = free_blocks  # type: ignore[assignment]


class _Reader(Adapter):
    def __init__(self, mistake: str | None, due: str = "", status_domain: str = "c") -> None:
        super().__init__("probed")
        self.mistake, self.due, self.status_domain = mistake, due, status_domain
        self.imports: list[tuple[int, int]] = []
        self.held = self.open_pools = 0

    def info(self) -> ImplInfo:
        return ImplInfo(frozenset({1}), frozenset({1}), "f32")

    def block_hash(self, parent: int, tokens: list[int]) -> int:
        raise NotImplementedError

    def open_pool(self, geometry: oracle.Geometry, capacity: int) -> PoolHandle:
        assert geometry == GEOMETRY
        self.open_pools += 1
        return _Pool(self, capacity)


class _RegistryPool(PoolHandle):
    """A pool handing out ids from 0 whose registry has one mistake (`_Registering`)."""

    dtype = "f32"

    def __init__(self, owner: _Registering, capacity: int) -> None:
        super().__init__(GEOMETRY, capacity)
        self.owner, self.registry, self.next = owner, {}, 0

    def _allocate(self) -> int:
        self.next += 1
        return self.next - 1

    def write(self, block_hash: int, n_tokens: int, values: np.ndarray) -> int:
        block = self._allocate()
        if self.owner.mistake != "write-registers-nothing":
            self.registry[block_hash] = block
        return block

    def import_envelope(self, data: bytes, max_blocks: int) -> list[int]:
        blocks = []
        for record in oracle.decode(data).records:
            blocks.append(self._allocate())
            if self.owner.mistake == "import-registers-nothing":
                continue
            signed = self.owner.mistake == "signed-hash" and record.block_hash >= 2**63
            self.registry[record.block_hash - 2**64 if signed else record.block_hash] = blocks[-1]
        return blocks

    def find(self, block_hash: int) -> int:
        block = self.registry.get(block_hash)
        if block is None or (self.owner.mistake == "block-zero-falsy" and block == 0):
            raise Refused("ENOTFOUND", "find")
        return block

    def release(self, block: int) -> None:
        self.owner.released += 1

    def free_blocks(self) -> int:
        raise NotImplementedError

    read = export_bytes = export = free_blocks  # type: ignore[assignment]


class _Registering(Adapter):
    def __init__(self, mistake: str) -> None:
        super().__init__("registering")
        self.mistake, self.released = mistake, 0

    def info(self) -> ImplInfo:
        return ImplInfo(frozenset({1}), frozenset({1}), "f32")

    def block_hash(self, parent: int, tokens: list[int]) -> int:
        raise NotImplementedError

    def open_pool(self, geometry: oracle.Geometry, capacity: int) -> PoolHandle:
        return _RegistryPool(self, capacity)


@pytest.mark.parametrize(
    ("mistake", "named"),
    [
        ("import-registers-nothing", "import-not-registered"),
        ("write-registers-nothing", "write-not-registered"),
        ("", "registry-shared-between-pools"),
        ("block-zero-falsy", None),
        ("signed-hash", None),
    ],
)
def test_a_refused_find_is_named_only_where_the_registry_probe_answers_as_its_cause(
    mistake: str, named: str | None
) -> None:
    # find refused a hash: an import or a write that registers nothing, another pool's
    # registry, a find that misses block 0, an import that reads hashes of 2^63 and more as
    # signed all give that; the probe's four blocks tell them apart.
    for cause_id in (
        "import-not-registered",
        "write-not-registered",
        "registry-shared-between-pools",
    ):
        refused = KnownMistake(cause_id, cause_id, ("READ-ACCEPT",), registry_probe=GEOMETRY)
        implementation = _Registering(mistake)
        got = attribute(refused, ["READ-ACCEPT"], implementation)
        assert (got.cause.id if got.cause else None) == (cause_id if cause_id == named else None)
        # the probe's blocks given back: two sets of four, and one hashed block alone with
        # one of hash 0, written, then imported
        assert implementation.released == 12
        # Nothing to probe: nothing named.
        assert attribute(refused, ["READ-ACCEPT"]).cause is None


@pytest.mark.parametrize("mistake", sorted(CRC_MISTAKES))
def test_a_valid_envelope_refused_is_probed_for_the_reader_crc(mistake: str) -> None:
    envelope = oracle.encode(GEOMETRY, _blocks(), 1)
    reader = _Reader(mistake)
    refused = RefusalEvidence(
        frozenset(), frozenset(), "EFORMAT", envelope, pool=ReaderPool(GEOMETRY, 2, 3)
    )
    got = attribute(refused, ["READ-ACCEPT"], reader)
    assert (got.cause.id, got.blamed, got.note) == (mistake, ("READ-CRC",), "")
    assert "accepted once its trailer was written that way" in got.cause.evidence
    # Each probe a new pool with as many blocks free as the case's and its max_blocks, given
    # back with its blocks.
    assert reader.imports
    assert set(reader.imports) == {(2, 3)}
    assert (reader.open_pools, reader.held) == (0, 0)


@pytest.mark.parametrize("mistake", sorted(CRC_MODEL_MISTAKES))
def test_a_reader_is_probed_for_each_single_crc_parameter(mistake: str) -> None:
    reader = _Reader(mistake)
    refused = RefusalEvidence(
        frozenset(), frozenset(), "EFORMAT", _crc_envelope(), pool=ReaderPool(GEOMETRY, 2, 3)
    )
    got = attribute(refused, ["READ-ACCEPT"], reader)
    assert (got.cause.id, got.blamed, got.note) == (mistake, ("READ-CRC",), "")
    # The envelope as it is (the control), then one probe a model (the tail truncations: 4),
    # a bounded few.
    assert len(reader.imports) <= 24
    # The model found is probed first on the reader's next refusal, after the control.
    reader.imports.clear()
    again = attribute(refused, ["READ-ACCEPT"], reader)
    assert (again.cause.id, len(reader.imports)) == (mistake, 2)


def test_a_rejection_refused_with_another_status_is_probed_for_the_due_one() -> None:
    envelope = oracle.encode(GEOMETRY, _blocks(), 1)
    rules, due = frozenset({"READ-GEOMETRY"}), frozenset({"ESHAPE"})
    reader = _Reader("crc-ieee-polynomial", due="ESHAPE")
    got = attribute(
        RefusalEvidence(rules, due, "EFORMAT", envelope, pool=ReaderPool(GEOMETRY, 2, 2)),
        [],
        reader,
    )
    assert (got.cause.id, got.blamed) == ("crc-ieee-polynomial", ("READ-CRC",))
    # Over gRPC DATA_LOSS is the CRC rule's status too: a probe would say nothing.
    grpc = _Reader("crc-ieee-polynomial", due="DATA_LOSS", status_domain="grpc")
    due = frozenset({"DATA_LOSS"})
    got = attribute(
        RefusalEvidence(rules, due, "INVALID_ARGUMENT", envelope, pool=ReaderPool(GEOMETRY, 2, 2)),
        [],
        grpc,
    )
    assert (got.cause.id, grpc.imports) == ("wrong-status:READ-GEOMETRY", [])


def test_no_probe_without_a_pool_nor_a_cause_without_the_mistake() -> None:
    envelope = oracle.encode(GEOMETRY, _blocks(), 1)
    unprobed = _Reader("crc-no-final-xor")
    got = attribute(RefusalEvidence(frozenset(), frozenset(), "EFORMAT", envelope), [], unprobed)
    assert (got.cause, got.symptom, unprobed.imports) == (None, "valid-refused:EFORMAT", [])
    sound = _Reader(None)  # refuses every trailer: no CRC mistake to name
    refused = RefusalEvidence(
        frozenset(), frozenset(), "EFORMAT", envelope, pool=ReaderPool(GEOMETRY, 2, 2)
    )
    got = attribute(refused, ["READ-ACCEPT"], sound)
    assert (got.cause, got.blamed, got.note) == (None, ("READ-ACCEPT",), "")
    assert len(sound.imports) >= len(CRC_MISTAKES)


class _Server:
    """A decode server's transfer whose chunk check computes `field` (the spec's: the CRC-32C
    of the whole payload) and refuses any other crc32c with DATA_LOSS."""

    def __init__(self, field) -> None:
        self.field = field
        self.geometry = GEOMETRY
        self.read_versions = frozenset({2})
        self.pushed: list[Chunk] = []

    def new_request_id(self) -> str:
        return f"probe-{len(self.pushed)}"

    def push(self, chunks):
        self.pushed.extend(chunks)
        for chunk in chunks:
            if chunk.crc32c != self.field(chunk.payload):
                raise Refused("DATA_LOSS", "PushKv")
        return PushCounts(len(chunks), 0, sum(len(c.payload) for c in chunks))


def _decode_server(field) -> _Reader:
    server = _Reader(None, status_domain="grpc")
    server.transfer = _Server(field)
    return server


@pytest.mark.parametrize(
    ("cause", "field"),
    [
        # the envelope's own CRC: the CRC-32C of the payload less its trailer
        ("crc-chunk-over-envelope-body", lambda p: _rocksoft(p[:-4])),
        ("crc-chunk-over-records", lambda p: _rocksoft(p[28:-4])),
        ("crc-chunk:crc-init-zero", lambda p: _rocksoft(p, init=0)),
        ("crc-chunk:crc-ieee-polynomial", zlib.crc32),
        (
            "crc-chunk:crc-trailer-big-endian",
            lambda p: int.from_bytes(_rocksoft(p).to_bytes(4, "little"), "big"),
        ),
    ],
)
def test_a_server_refusing_valid_chunks_is_probed_for_its_chunk_crc(cause: str, field) -> None:
    server = _decode_server(field)
    refused = RefusalEvidence(frozenset(), frozenset(), "DATA_LOSS")
    got = attribute(refused, ["XFER-READER"], server)
    assert (got.cause.id, got.blamed) == (cause, ("XFER-CHUNK-CRC",))
    assert "valid-refused:DATA_LOSS" in got.cause.explains
    # Each probe one valid partial block (no hash registered), its field right first.
    first = server.transfer.pushed[0]
    assert (first.block_hash, first.crc32c) == (0, oracle.crc32c(first.payload))
    assert first.kv_format == oracle.decode(first.payload).version == 2  # valid, a version read
    # Probed once a run: the next refusal costs no chunk.
    probes = len(server.transfer.pushed)
    again = attribute(refused, ["XFER-READER"], server)
    assert (again.cause.id, len(server.transfer.pushed)) == (cause, probes)


def test_a_server_whose_chunk_crc_is_right_is_probed_once() -> None:
    server = _decode_server(oracle.crc32c)
    refused = RefusalEvidence(frozenset(), frozenset(), "DATA_LOSS")
    assert attribute(refused, ["XFER-READER"], server).cause is None
    assert attribute(refused, ["XFER-READER"], server).cause is None
    assert len(server.transfer.pushed) == 1  # the right field, accepted: nothing to look for
    # DATA_LOSS due (a rule the server must refuse so): no probe.
    other = _decode_server(oracle.crc32c)
    due = RefusalEvidence(frozenset({"READ-MAGIC"}), frozenset({"DATA_LOSS"}), "DATA_LOSS")
    attribute(due, [], other)
    assert other.transfer.pushed == []


@pytest.mark.parametrize(
    ("cause", "field"),
    [
        ("prefill-envelope-crc-in-chunk", lambda p: int.from_bytes(p[-4:], "little")),
        ("prefill-crc-chunk-over-records", lambda p: _rocksoft(p[28:-4])),
        ("prefill-crc-chunk:crc-no-final-xor", lambda p: _rocksoft(p, xorout=0)),
        (
            "prefill-crc-chunk:crc-polynomial:left-0x04c11db7",
            lambda p: _rocksoft(p, 0x04C11DB7, reflected=False),
        ),
    ],
)
def test_how_a_client_computed_a_chunks_crc(cause: str, field) -> None:
    payload = _crc_envelope()
    generic = KnownMistake(
        "prefill-chunk-crc",
        "the chunk's crc32c is not the CRC-32C of its payload",
        ("PREFILL-CHUNK-CRC",),
        chunk_crc=(payload, field(payload)),
    )
    got = _diagnosed(generic)
    assert (got.cause.id, got.blamed) == (cause, ("PREFILL-CHUNK-CRC",))
    assert got.cause.title.startswith("the chunk's crc32c field computed as ")
    # A field no model gives keeps the check's own, general cause.
    unknown = replace(generic, chunk_crc=(payload, (oracle.crc32c(payload) + 1) & 0xFFFFFFFF))
    assert _diagnosed(unknown).cause.id == "prefill-chunk-crc"


def test_a_diagnosis_never_raises() -> None:
    broken = EnvelopeEvidence(b"TLKV", b"TLKW")
    got = attribute(broken, ["ENV-HEADER"])
    assert got.cause is None
    assert got.blamed == ("ENV-HEADER",)  # an unreadable expected envelope: what is cited


def test_reader_e4m3_nan_as_448_and_nan_not_nan() -> None:
    values = _values()
    data, offset = _v2_record(values)
    data = bytearray(data)
    data[offset + 12] = 0xFF  # K[0][0][0][0] is a negative NaN
    data = oracle.seal(bytes(data[:-4]))
    decoded = oracle.decode(data).records[0].decoded
    expected = decoded.values.copy()
    expected[..., 4:, :] = 0
    saturated = expected.copy()
    saturated[0, 0, 0, 0, 0] = F32(-448) * decoded.scales[0, 0, 0]
    got = _diagnosed(ValuesEvidence(expected, saturated, 4, "f32", (data, offset)))
    assert (got.cause.id, got.blamed) == ("e4m3-nan-as-448", ("V2-E4M3",))
    zeroed = expected.copy()
    zeroed[0, 0, 0, 0, 0] = 0
    got = _diagnosed(ValuesEvidence(expected, zeroed, 4, "f32", (data, offset)))
    assert (got.cause.id, got.blamed) == ("nan-not-nan", ("V2-DECODE",))


def test_nan_read_back_as_infinity_or_other_sign() -> None:
    bits = oracle.f32_to_f16_bits(oracle.round_to_f16(_values())).copy()
    bits[0, 1, 0, 0, :2] = (0xFE55, 0x7E00)
    expected = oracle.f16_bits_to_f32(bits)
    infinite = expected.copy()
    infinite[0, 1, 0, 0, :2] = (-np.inf, np.inf)
    got = _diagnosed(ValuesEvidence(expected, infinite, 4, "f16"))
    assert (got.cause.id, got.blamed) == ("nan-not-nan", ("V1-F16",))
    canonical = expected.copy()
    canonical.view(np.uint32)[0, 1, 0, 0, :2] = 0x7FFFFFFF
    got = _diagnosed(ValuesEvidence(expected, canonical, 4, "f16"))
    assert (got.cause.id, got.blamed) == ("nan-sign-lost", ("NAN-SIGN",))


def test_nan_not_nan_only_where_the_numbers_read_back_right() -> None:
    # f16 bit patterns converted as integers (astype where view was meant): 0x7E00 reads back
    # as 32256.0, 0x3C00 (1.0) as 15360.0. The NaNs come back as numbers, but so does every
    # other value: no NaN mistake explains 1.0 read as 15360.0.
    bits = np.resize(np.array([0x7E00, 0xFE00, 0x3C00, 0x0000], np.uint16), (1, 2, 1, 1, 8))
    due = oracle.f16_bits_to_f32(bits)
    as_integers = bits.astype(F32)
    assert as_integers[0, 0, 0, 0, :3].tolist() == [32256.0, 65024.0, 15360.0]
    got = _diagnosed(ValuesEvidence(due, as_integers, 1, "f16"))
    assert got.cause is None
    # Every value a NaN (or +0.0, which reads as 0 either way): nothing shows that the numbers
    # read back right, so nothing is named.
    nan_bits = np.resize(np.array([0x7E00, 0xFE00, 0x0000], np.uint16), (1, 2, 1, 1, 6))
    got = _diagnosed(
        ValuesEvidence(oracle.f16_bits_to_f32(nan_bits), nan_bits.astype(F32), 1, "f16")
    )
    assert got.cause is None
    # The same NaNs read back as 0.0 where 1.0 reads back as 1.0: nan-not-nan.
    zeroed = due.copy()
    zeroed[np.isnan(zeroed)] = 0
    got = _diagnosed(ValuesEvidence(due, zeroed, 1, "f16"))
    assert (got.cause.id, got.blamed) == ("nan-not-nan", ("V1-F16",))


def test_nans_of_other_payloads_read_back_are_no_nan_mistake() -> None:
    """A NaN mistake writes one NaN in every place (the canonical NaN, or the default NaN of
    each sign), or flips the due NaN's sign. NaNs of other payloads and signs are other values
    read in their place (another slab's, another record's): no NaN cause is named."""
    bits = np.resize(np.array([0x7E01, 0xFE02, 0x3C00, 0x7E03], np.uint16), (1, 2, 1, 1, 8))
    due = oracle.f16_bits_to_f32(bits)
    others = bits.copy()
    others[bits == 0x7E01], others[bits == 0xFE02] = 0xFE05, 0x7E07
    others[bits == 0x7E03] = 0xFE09
    got = _diagnosed(ValuesEvidence(due, oracle.f16_bits_to_f32(others), 1, "f16"))
    assert got.cause is None
    # The canonical NaN (f16 0x7E00, f32 0x7FC00000) in every NaN's place: the sign of 0xFE02
    # is lost.
    canonical = bits.copy()
    canonical[np.isin(bits, (0x7E01, 0xFE02, 0x7E03))] = 0x7E00
    got = _diagnosed(ValuesEvidence(due, oracle.f16_bits_to_f32(canonical), 1, "f16"))
    assert (got.cause.id, got.blamed) == ("nan-sign-lost", ("NAN-SIGN",))


# -- orders and header fields from another source -------------------------------------------


def _four_blocks() -> list[oracle.Block]:
    """Four full blocks whose hashes sort otherwise than their ids (7, 3, 9, 5 below)."""
    return [oracle.Block(h, 4, oracle.round_to_f16(_values())) for h in (0x40, 0x30, 0x10, 0x20)]


@pytest.mark.parametrize(
    ("written", "cause"),
    [
        ((1, 3, 0, 2), "export-order:by-block-id"),  # ids 3, 5, 7, 9
        ((3, 2, 1, 0), "export-order:reversed"),
        ((2, 3, 1, 0), "export-order:by-hash"),  # hashes 0x10, 0x20, 0x30, 0x40
        ((0, 2, 1, 3), "export-order:permuted"),
    ],
)
def test_an_export_of_the_blocks_in_another_order(written: tuple[int, ...], cause: str) -> None:
    blocks = _four_blocks()
    expected = oracle.encode(GEOMETRY, blocks, 1)
    actual = oracle.encode(GEOMETRY, [blocks[i] for i in written], 1)
    got = _diagnosed(EnvelopeEvidence(expected, actual, tuple(blocks), (7, 3, 9, 5), "f16"))
    assert (got.cause.id, got.blamed) == (cause, ("ENV-RECORD",))


def test_blocks_in_another_order_and_changed_are_not_named_an_order() -> None:
    blocks = _four_blocks()
    expected = oracle.encode(GEOMETRY, blocks, 1)
    changed = oracle.Block(0x41, 4, blocks[0].values)  # block 0 exported with another hash
    actual = oracle.encode(GEOMETRY, [blocks[3], blocks[2], blocks[1], changed], 1)
    got = _diagnosed(EnvelopeEvidence(expected, actual, tuple(blocks), (7, 3, 9, 5)))
    assert got.cause is None or not got.cause.id.startswith(("export-order", "one-of"))


def test_an_import_returning_its_ids_in_another_order() -> None:
    keys = (("hash", (0x30, 0x10, 0x20)),)
    reversed_ids = _diagnosed(OrderEvidence("import", (2, 1, 0), ("IMPORT-ORDER",), keys))
    assert (reversed_ids.cause.id, reversed_ids.blamed) == (
        "import-ids-order:reversed",
        ("IMPORT-ORDER",),
    )
    by_hash = _diagnosed(OrderEvidence("import", (1, 2, 0), ("IMPORT-ORDER",), keys))
    # the hashes ascending are the records 1, 2, 0; so is a rotation by one: both named
    assert by_hash.cause.id == "one-of:import-ids-order:rotated+import-ids-order:by-hash"


def test_the_import_order_is_read_from_the_blocks_the_ids_hold() -> None:
    from tlkv_conformance.adapters import ReadBack
    from tlkv_conformance.cases.kinds._base import import_order_evidence

    blocks = _four_blocks()[:3]
    records = oracle.decode(oracle.encode(GEOMETRY, blocks, 1)).records
    held = [ReadBack(b.block_hash, b.n_tokens, b.values) for b in blocks[::-1]]
    evidence = import_order_evidence(records, held)
    assert evidence is not None
    assert evidence.order == (2, 1, 0)
    assert dict(evidence.keys)["hash"] == (0x40, 0x30, 0x10)
    assert import_order_evidence(records, held[::-1]) is None


@pytest.mark.parametrize("version", [1, 2])
def test_the_payload_written_token_major(version: int) -> None:
    blocks = _blocks(fill=3)
    right = oracle.encode_payload(GEOMETRY, version, 3, blocks[0].values)
    if version == 1:
        values = blocks[0].values.copy()
        values[..., 3:, :] = 0  # the padding, zero, moves with the layout
        f16 = oracle.f32_to_f16_bits(values)
        payload = np.ascontiguousarray(f16.transpose(0, 1, 3, 2, 4)).astype("<u2").tobytes()
    else:
        n = GEOMETRY.n_elements
        codes = np.frombuffer(right[:n], dtype=np.uint8).reshape(GEOMETRY.values_shape)
        payload = np.ascontiguousarray(codes.transpose(0, 1, 3, 2, 4)).tobytes() + right[n:]
    got = _envelope_case(version, payload, blocks)
    assert (got.cause.id, got.blamed) == ("axes-order:[L][2][B][Hkv][D]", (f"V{version}-LAYOUT",))


def _sealed_with(expected: bytes, **fields: int) -> bytes:
    """`expected` with header fields (or, as n_tokens_<i>, record i's n_tokens) rewritten, its
    CRC recomputed: a writer that took those values from elsewhere."""
    data = bytearray(expected[:-4])
    size = oracle.RECORD_PREFIX_SIZE + GEOMETRY.payload_size(
        oracle.HEADER_FIELDS["version"].read(expected)
    )
    for name, value in fields.items():
        if name.startswith("n_tokens_"):
            at = oracle.HEADER_SIZE + int(name.removeprefix("n_tokens_")) * size + 8
            struct.pack_into("<I", data, at, value)
        else:
            oracle.HEADER_FIELDS[name].write(data, value)
    return oracle.seal(bytes(data))


def test_header_and_record_fields_from_another_source() -> None:
    full, partial = _blocks(fill=4)[0], _blocks(fill=2)[0]
    blocks = (full, partial)
    v1 = oracle.encode(GEOMETRY, list(blocks), 1)

    def diagnosed(actual: bytes, pool_dtype: str = "f16") -> Attribution:
        return _diagnosed(EnvelopeEvidence(v1, actual, blocks, (), pool_dtype))

    always_full = diagnosed(_sealed_with(v1, n_tokens_1=4))
    assert (always_full.cause.id, always_full.blamed) == (
        "field-source:n_tokens=block_tokens",
        ("ENV-RECORD",),
    )
    assert "block_tokens (4) instead of the block's 2 tokens" in always_full.cause.title
    one_less = diagnosed(_sealed_with(v1, n_tokens_0=3, n_tokens_1=1))
    assert one_less.cause.id == "field-source:n_tokens=minus-one"
    # 0 is the f32 pool's dtype and an unset field alike: both named
    f32_dtype = diagnosed(_sealed_with(v1, dtype=0), "f32")
    assert f32_dtype.cause.id == "one-of:field-source:dtype=zero+field-source:dtype=pool-dtype"
    assert f32_dtype.blamed == ("ENV-VERSION-DTYPE",)
    assert diagnosed(_sealed_with(v1, dtype=0)).cause.id == "field-source:dtype=zero"
    assert diagnosed(_sealed_with(v1, version=2)).cause.id == "field-source:version=other-version"
    swapped = diagnosed(_sealed_with(v1, n_layers=GEOMETRY.head_dim))
    assert swapped.cause.id == "field-source:n_layers=head_dim"


def test_a_field_no_source_explains_is_not_named() -> None:
    full, partial = _blocks(fill=4)[0], _blocks(fill=2)[0]
    v1 = oracle.encode(GEOMETRY, [full, partial], 1)
    for actual in (
        _sealed_with(v1, n_layers=7),  # no other field holds 7
        _sealed_with(v1, n_tokens_1=3),  # 3 tokens: neither block_tokens nor one off for both
        _sealed_with(v1, n_tokens_1=4)[:-4] + b"\0\0\0\0",  # and the CRC not the bytes'
    ):
        got = _diagnosed(EnvelopeEvidence(v1, actual, (full, partial)))
        assert got.cause is None or not got.cause.id.startswith(("field-source", "one-of"))


# -- numeric mistakes as parametrised codecs, fitted to the evidence ------------------------------


def test_the_codec_model_right_encoders_are_the_oracles() -> None:
    """The model's encoders with no mistake write the oracle's codes (numpy's f16, ml_dtypes'
    e4m3), edges included: so that a fitted variant differs from the right codec by its one
    parameter alone."""
    from tlkv_conformance.diagnosis._codec_model import E4M3, F16, Encoder

    magnitudes = 10.0 ** RNG.integers(-9, 6, 20000)
    x = (RNG.standard_normal(20000) * magnitudes).astype(F32)
    edges = [0.0, -0.0, 65504, 65520, 2.0**-24, 2.0**-25, 3 * 2.0**-26, 448, 464, 465, 2.0**-10]
    x = np.concatenate([x, np.array([*edges, np.inf, -np.inf, np.nan], dtype=F32)])
    with np.errstate(all="ignore"):
        assert (Encoder().encode(F16, x) == oracle.f32_to_f16_bits(x)).all()
        assert (Encoder().encode(E4M3, x) == oracle.f32_to_e4m3_codes(x)).all()


def test_f16_subnormals_halved_by_the_store() -> None:
    """A store shifting f16 subnormals one bit too far: 3 and 5 least subnormals become 1.5 and
    2.5, rounded to even 2 and 2; 256 becomes 128; the least normal 2^-14 and -0.0 stay."""
    tiny = F32(2.0**-24)
    written = oracle.round_to_f16(_values())
    written[0, 0, 0, 0, :5] = 3 * tiny, -5 * tiny, 256 * tiny, F32(2.0**-14), F32(-0.0)
    actual = written.copy()
    actual[0, 0, 0, 0, :3] = 2 * tiny, -2 * tiny, 128 * tiny
    expected, actual = written.copy(), actual
    expected[..., 4:, :] = actual[..., 4:, :] = 0
    got = _diagnosed(ValuesEvidence(expected, actual, 4, "f16", written=written))
    assert (got.cause.id, got.blamed) == ("f16-subnormals:halved", ("V1-F16",))
    assert got.cause.title == "f16 subnormals written at half their value (shifted one bit too far)"


def _v2_envelope_with(values: np.ndarray, codes_at: dict[tuple, int]) -> Attribution:
    """An export of `values` (one block filled to 4) as the oracle writes it but for the codes
    at the given element indices."""
    blocks = [oracle.Block(0x1234, 4, values)]
    payload = bytearray(oracle.encode_payload(GEOMETRY, 2, 4, values))
    for index, code in codes_at.items():
        payload[int(np.ravel_multi_index(index, GEOMETRY.values_shape))] = code
    return _envelope_case(2, bytes(payload), blocks)


def test_e4m3_ties_away_from_zero() -> None:
    """A slab of amax 448 (scale 1.0): 8.5 and -8.5 are ties of the step 1 above 8, due as the
    even 8 (0x50, 0xd0), written away from zero as 9 (0x51, 0xd1); 8.25, no tie, stays 8 (so
    no rounding away from zero), and the negative tie rounded away rules out ties toward
    +infinity."""
    values = np.zeros(GEOMETRY.values_shape, dtype=F32)
    values[0, 0, 0, 0, :4] = 448, 8.5, -8.5, 8.25
    assert list(oracle.encode_payload(GEOMETRY, 2, 4, values)[1:4]) == [0x50, 0xD0, 0x50]
    got = _v2_envelope_with(values, {(0, 0, 0, 0, 1): 0x51, (0, 0, 0, 0, 2): 0xD1})
    assert (got.cause.id, got.blamed) == ("v2-rounding:ties-away", ("V2-E4M3",))
    assert "ties away from zero" in got.cause.title
    # the negative tie kept even: ties toward +infinity alone fits
    got = _v2_envelope_with(values, {(0, 0, 0, 0, 1): 0x51})
    assert got.cause.id == "v2-rounding:ties-up"
    # no negative tie: the bytes cannot tell ties away from ties toward +infinity
    values[0, 0, 0, 0, 2] = -8.0
    got = _v2_envelope_with(values, {(0, 0, 0, 0, 1): 0x51})
    assert got.cause.id == "one-of:v2-rounding:ties-away+v2-rounding:ties-up"


def test_e4m3_encoder_bias_six() -> None:
    """An encoder writing exponent field e + 6: 1.0 (0x38 due) written 0x30, 448 (0x7e) 0x76."""
    values = np.zeros(GEOMETRY.values_shape, dtype=F32)
    values[0, 0, 0, 0, :2] = 448, 1.0
    got = _v2_envelope_with(values, {(0, 0, 0, 0, 0): 0x76, (0, 0, 0, 0, 1): 0x30})
    assert (got.cause.id, got.blamed) == ("v2-exponent-bias:6", ("V2-E4M3",))


def _written_with_scales(values: np.ndarray, scales: np.ndarray, fill: int = 4) -> Attribution:
    """An export of `values` whose slabs have `scales`, the codes right for them."""
    codes = np.zeros(GEOMETRY.values_shape, dtype=np.uint8)
    codes[..., :fill, :] = _e4m3(values[..., :fill, :] / scales[..., None, None])
    blocks = [oracle.Block(0x1234, fill, values)]
    return _envelope_case(2, codes.tobytes() + scales.astype("<f4").tobytes(), blocks)


def test_v2_amax_taken_other_ways() -> None:
    values = oracle.round_to_f16(_values())
    filled = values[..., :4, :]
    signed = filled.max(axis=(-2, -1))
    got = _written_with_scales(values, (signed / F32(448)).astype(F32))
    assert (got.cause.id, got.blamed) == ("v2-amax:signed-max", ("V2-SCALE",))
    together = np.abs(filled).max(axis=(1, 3, 4), keepdims=True)[..., 0, 0]
    shared = np.broadcast_to(together, signed.shape)
    got = _written_with_scales(values, (shared / F32(448)).astype(F32))
    assert (got.cause.id, got.blamed) == ("v2-amax:k-and-v-together", ("V2-SCALE",))


def test_v2_scale_of_another_divisor() -> None:
    """amax / 256: the constant read off the evidence, then every slab's scale checked."""
    values = oracle.round_to_f16(_values())
    amax = np.abs(values[..., :4, :]).max(axis=(-2, -1))
    got = _written_with_scales(values, (amax / F32(256)).astype(F32))
    assert (got.cause.id, got.blamed) == ("v2-scale-divisor:256", ("V2-SCALE",))
    assert got.cause.title == "scale = amax / 256 instead of amax / 448"


def test_v2_scale_divisor_needs_a_second_slab_to_confirm_it() -> None:
    """One slab of non-zero values, the rest all zero (scale 1.0): its scale alone fits
    amax / d for some d, whatever the writer did, so no divisor is named."""
    values = np.zeros(GEOMETRY.values_shape, dtype=F32)
    values[0, 0, 0] = oracle.round_to_f16(_values())[0, 0, 0]
    amax = np.abs(values[..., :4, :]).max(axis=(-2, -1))
    scales = np.where(amax == 0, F32(1), amax / F32(256)).astype(F32)
    got = _written_with_scales(values, scales)
    assert got.cause is None or not got.cause.id.startswith("v2-scale-divisor")


def test_v2_decoder_bias_and_division() -> None:
    """Values read back from a v2 import: normal codes decoded at half their value (bias 8),
    subnormal codes as they are; or every value divided by its slab's scale."""
    data, offset = _v2_record(_values())
    decoded = oracle.decode(data).records[0].decoded
    expected = decoded.values.copy()
    expected[..., 4:, :] = 0
    bare = oracle.e4m3_codes_to_f32(decoded.codes)
    normal = ((decoded.codes >> 3) & 0xF) != 0
    scales = decoded.scales[..., None, None]
    half = (np.where(normal, bare / 2, bare) * scales).astype(F32)
    half[..., 4:, :] = 0
    got = _diagnosed(ValuesEvidence(expected, half, 4, "f32", (data, offset)))
    assert (got.cause.id, got.blamed) == ("e4m3-decode-bias:8", ("V2-DECODE",))
    divided = (bare / scales).astype(F32)
    divided[..., 4:, :] = 0
    got = _diagnosed(ValuesEvidence(expected, divided, 4, "f32", (data, offset)))
    assert (got.cause.id, got.blamed) == ("v2-decode-divides", ("V2-DECODE",))


def test_an_import_reading_the_reused_value_is_no_write_keeping_its_array() -> None:
    """The value the suite writes into its array after a write is a write's evidence only: an
    import whose decoder happens to give it (here every value, as a decoder ignoring the
    payload would) is not "write keeps the caller's array"."""
    from tlkv_conformance.adapters import REUSED_BUFFER_VALUE

    data, offset = _v2_record(_values())
    expected = oracle.decode(data).records[0].decoded.values.copy()
    expected[..., 4:, :] = 0
    actual = np.full(GEOMETRY.values_shape, REUSED_BUFFER_VALUE, dtype=F32)
    got = _diagnosed(ValuesEvidence(expected, actual, 4, "f32", (data, offset)))
    assert got.cause is None or got.cause.id != "write-keeps-reference"
    got = _diagnosed(ValuesEvidence(expected, actual, 4, "f32", written=expected))
    assert got.cause.id == "write-keeps-reference"


def test_e4m3_codes_one_step_off_with_no_rule() -> None:
    """9.75 (due 10, 0x52) written 0x51, one step toward zero, while 10.75 (due 11, 0x53) is
    written right: truncation would write 10 for it, and 9.75 is no tie; no rounding rule gives
    these codes, so what was seen is said."""
    values = np.zeros(GEOMETRY.values_shape, dtype=F32)
    values[0, 0, 0, 0, :4] = 448, 8.25, 9.75, 10.75
    assert list(oracle.encode_payload(GEOMETRY, 2, 4, values)[1:4]) == [0x50, 0x52, 0x53]
    got = _v2_envelope_with(values, {(0, 0, 0, 0, 2): 0x51})
    assert (got.cause.id, got.blamed) == ("v2-codes-one-step", ("V2-E4M3",))
    assert got.cause.title.startswith("e4m3 codes one step toward zero")


def test_v2_scale_one_ulp_off() -> None:
    """A slab of amax 1344: scale 3.0 due (exactly), 2.9999998 written (one unit in the last
    place below), the codes right for it; amax * (1/448) is not it (3.0000002)."""
    values = oracle.round_to_f16(_values())
    values[0, 0, 0, 0, 0] = 1344
    amax = np.abs(values[..., :4, :]).max(axis=(-2, -1))
    scales = (amax / F32(448)).astype(F32)
    assert scales[0, 0, 0] == 3.0
    assert F32(1344) * F32(F32(1) / F32(448)) == np.nextafter(F32(3), F32(4))
    scales[0, 0, 0] = np.nextafter(F32(3), F32(2))
    got = _written_with_scales(values, scales)
    assert (got.cause.id, got.blamed) == ("v2-scale-one-ulp", ("V2-SCALE",))
    assert got.cause.title.startswith("scales one f32 unit in the last place below")


# -- a valid envelope refused: at a limit, by an over-enforced rule --------------------------


class _LimitPool(_Pool):
    """A pool of the oracle's reader with the limits as `reader` writes them, refusing in
    addition the envelopes `reader.also_refuses` says."""

    def import_envelope(self, data: bytes, max_blocks: int) -> list[int]:
        reader = self.reader
        reader.imports.append((self.capacity, max_blocks))
        try:
            envelope = oracle.decode(data, oracle.ReaderProfile(GEOMETRY))
        except oracle.Rejected:
            raise Refused("EFORMAT", "import") from None
        records = [(r.block_hash, r.n_tokens) for r in envelope.records]
        if reader.also_refuses(records):
            raise Refused("EFORMAT", "import")
        n = envelope.n_blocks
        if n > max_blocks or (reader.inclusive == "max_blocks" and n == max_blocks):
            raise Refused("EINVAL", "import")
        if n > self.capacity or (reader.inclusive == "free" and n == self.capacity):
            raise Refused("ENOMEM", "import")
        reader.held += n
        return [7] * n

    def release(self, block: int) -> None:
        self.reader.held -= 1


class _LimitReader(_Reader):
    def __init__(self, inclusive: str = "", also_refuses=lambda records: False) -> None:
        super().__init__(None)
        self.inclusive, self.also_refuses = inclusive, also_refuses

    def open_pool(self, geometry: oracle.Geometry, capacity: int) -> PoolHandle:
        assert geometry == GEOMETRY
        self.open_pools += 1
        return _LimitPool(self, capacity)


def _full(block_hash: int) -> oracle.Block:
    return oracle.Block(block_hash, GEOMETRY.block_tokens, _blocks()[0].values)


@pytest.mark.parametrize(
    ("inclusive", "status", "cause", "req"),
    [
        ("free", "ENOMEM", "refused-at-limit:free-blocks", "IMPORT-ENOMEM"),
        ("max_blocks", "EINVAL", "refused-at-limit:max-blocks", "IMPORT-EINVAL"),
    ],
)
def test_a_valid_import_refused_at_exactly_a_limit(inclusive, status, cause, req) -> None:
    envelope = oracle.encode(GEOMETRY, [_full(0x1234), _full(0x5678)], 1)
    reader = _LimitReader(inclusive)
    refused = RefusalEvidence(
        frozenset(), frozenset(), status, envelope, pool=ReaderPool(GEOMETRY, 2, 2)
    )
    got = attribute(refused, ["READ-ACCEPT"], reader)
    assert (got.cause.id, got.blamed, got.symptom) == (cause, (req,), f"valid-refused:{status}")
    assert "2 blocks refused with " + status in got.cause.evidence
    assert "accepted with 3" in got.cause.evidence
    assert (reader.open_pools, reader.held) == (0, 0)
    # The case's pool not at that limit (3 free, max_blocks 3): not this mistake.
    elsewhere = RefusalEvidence(
        frozenset(), frozenset(), status, envelope, pool=ReaderPool(GEOMETRY, 3, 3)
    )
    assert attribute(elsewhere, ["READ-ACCEPT"], _LimitReader(inclusive)).cause is None
    # A sound pool refusing it for want of room has no such mistake.
    assert attribute(refused, ["READ-ACCEPT"], _LimitReader()).cause is None


B = GEOMETRY.block_tokens
PARTIAL = oracle.Block(0, B - 1, _blocks(B - 1)[0].values)
OVER_ENFORCED = {
    # cause: (what the reader also refuses, a valid envelope it refuses for it)
    "refuses-valid:zero-blocks": (lambda records: not records, []),
    "refuses-valid:full-block-hash-zero": (
        lambda records: any(h == 0 and n == B for h, n in records),
        [_full(0x1234), _full(0)],
    ),
    "refuses-valid:partial-before-last": (
        lambda records: any(n < B for _, n in records[:-1]),
        [PARTIAL, _full(0x1234)],
    ),
    "refuses-valid:partial-block": (lambda records: any(n < B for _, n in records), [PARTIAL]),
    "refuses-valid:hash-one": (lambda records: any(h == 1 for h, _ in records), [_full(1)]),
}


@pytest.mark.parametrize("cause", sorted(OVER_ENFORCED))
def test_a_valid_envelope_refused_by_an_over_enforced_rule(cause: str) -> None:
    refuses, blocks = OVER_ENFORCED[cause]
    envelope = oracle.encode(GEOMETRY, blocks, 1)
    reader = _LimitReader(also_refuses=refuses)
    refused = RefusalEvidence(
        frozenset(), frozenset(), "EFORMAT", envelope, pool=ReaderPool(GEOMETRY, 3, 3)
    )
    got = attribute(refused, ["READ-ACCEPT"], reader)
    assert ([c.id for c in got.causes], got.blamed) == ([cause], ("READ-ACCEPT",))
    assert (reader.open_pools, reader.held) == (0, 0)
    # The same envelope refused by a reader without that rule (a sound one: for another
    # reason the probes cannot reproduce) names nothing.
    assert attribute(refused, ["READ-ACCEPT"], _LimitReader()).cause is None


def test_a_rule_answered_by_the_property_an_over_enforced_rule_refuses() -> None:
    """An envelope of 0 blocks breaking READ-GEOMETRY refused with EFORMAT: the run's
    refuses-valid:zero-blocks accounts for it, not a status mix-up."""
    empty = oracle.encode(oracle.Geometry(4, 2, 3, 16), [], 1)
    wrong = _diagnosed(
        RefusalEvidence(frozenset({"READ-GEOMETRY"}), frozenset({"ESHAPE"}), "EFORMAT", empty)
    )
    assert wrong.cause.id == "wrong-status:READ-GEOMETRY"
    valid = RefusalEvidence(
        frozenset(),
        frozenset(),
        "EFORMAT",
        oracle.encode(GEOMETRY, [], 1),
        pool=ReaderPool(GEOMETRY, 3, 3),
    )
    refused = attribute(valid, [], _LimitReader(also_refuses=lambda records: not records))
    run = diagnose_run({"geometry": wrong, "empty": refused})
    assert [(f.cause.id, f.shown_by, f.explains) for f in run.findings] == [
        ("refuses-valid:zero-blocks", ["empty"], ["geometry"])
    ]


def test_a_limit_answered_before_a_rule_says_which() -> None:
    """EINVAL for an envelope breaking READ-LENGTH whose header claims 5 blocks, max_blocks 4:
    the limit was checked first, even in a case that does not demand the rules first."""
    envelope = bytearray(oracle.encode(GEOMETRY, [_full(0x1234)], 1))
    oracle.HEADER_FIELDS["n_blocks"].write(envelope, 5)
    evidence = RefusalEvidence(
        frozenset({"READ-LENGTH"}),
        frozenset({"EFORMAT"}),
        "EINVAL",
        oracle.seal(bytes(envelope[:-4])),
        pool=ReaderPool(GEOMETRY, 2, 4),
    )
    got = _diagnosed(evidence)
    assert (got.cause.id, got.blamed) == ("limits-before-rules", ("READ-RULES-FIRST",))
    assert "IMPORT-EINVAL's (the header's 5 blocks, max_blocks 4)" in got.cause.evidence
    assert "checked before READ-LENGTH" in got.cause.evidence
    # 5 blocks within max_blocks 8: EINVAL is no limit's answer here.
    within = replace(evidence, pool=ReaderPool(GEOMETRY, 8, 8))
    assert _diagnosed(within).cause.id == "wrong-status:READ-LENGTH"


def test_n_out_left_after_a_refusal_is_its_own_cause() -> None:
    fault = "tl_kv_import refused with ENOMEM but left *n_out = 3 (it must be 0 after any failure)"
    got = _diagnosed(
        RefusalEvidence(
            frozenset({"IMPORT-ENOMEM"}), frozenset({"ENOMEM"}), "fault", b"", fault=fault
        )
    )
    assert (got.cause.id, got.blamed) == ("n-out-after-refusal", ("IMPORT-ENOMEM",))
    assert got.cause.title == (
        "tl_kv_import refuses with ENOMEM but leaves *n_out = 3 (0 is due after any failure) "
        "on input breaking IMPORT-ENOMEM"
    )
    raised = _diagnosed(
        RefusalEvidence(
            frozenset({"POOL-FIND"}),
            frozenset({"ENOTFOUND"}),
            "fault",
            fault="Pool.find raised KeyError: 0x1234",
        )
    )
    assert (raised.cause.id, raised.cause.title) == (
        "fault-on:POOL-FIND",
        "Pool.find raises KeyError on input breaking POOL-FIND",
    )


def test_a_limit_breached_is_no_limit_answered_before_a_rule() -> None:
    """An import of 3 blocks, 2 free, max_blocks 2, refused with EINVAL where ENOMEM is due
    breaks no reader rule: a status mix-up of IMPORT-ENOMEM, not the limits checked first."""
    envelope = oracle.encode(GEOMETRY, [_full(0x1234), _full(0x5678), _full(0x9ABC)], 1)
    evidence = RefusalEvidence(
        frozenset({"IMPORT-ENOMEM"}),
        frozenset({"ENOMEM"}),
        "EINVAL",
        envelope,
        pool=ReaderPool(GEOMETRY, 2, 2),
    )
    assert _diagnosed(evidence).cause.id == "wrong-status:IMPORT-ENOMEM"
