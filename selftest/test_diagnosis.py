"""The diagnosis names each known mistake from its output alone, and blames the requirements
whose own bytes differ. Each mistaken output is built here from the blocks, the way the mistake
would build it (not by the diagnosis' own transformations), and the right output comes from
the oracle."""

from __future__ import annotations

import struct
import zlib
from dataclasses import replace

import numpy as np
import pytest
from tlkv_conformance import oracle
from tlkv_conformance.adapters import Adapter, ImplInfo, PoolHandle
from tlkv_conformance.diagnosis import Attribution, Cause, attribute, diagnose_run
from tlkv_conformance.errors import Refused
from tlkv_conformance.evidence import (
    EnvelopeEvidence,
    HashEvidence,
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


@pytest.mark.parametrize("cause", sorted(HASH_MISTAKES))
def test_hash_mistakes(cause: str) -> None:
    expected = oracle.block_hash(PARENT, TOKENS)
    got = _diagnosed(HashEvidence(PARENT, TOKENS, expected, HASH_MISTAKES[cause]))
    assert got.cause is not None
    assert got.cause.id == cause
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


# -- the CRC ----------------------------------------------------------------------------------


def _crc32c_reference(data: bytes, xor_out: int = 0xFFFFFFFF) -> int:
    """Bitwise CRC-32C (reflected 0x82F63B78), with the final XOR as given."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ xor_out


CRC_MISTAKES = {
    "crc-no-final-xor": lambda body: struct.pack("<I", _crc32c_reference(body, 0)),
    "crc-ieee-polynomial": lambda body: struct.pack("<I", zlib.crc32(body)),
    "crc-records-only": lambda body: struct.pack("<I", _crc32c_reference(body[28:])),
    "crc-misses-last-byte": lambda body: struct.pack("<I", _crc32c_reference(body[:-1])),
    "crc-trailer-big-endian": lambda body: struct.pack(">I", _crc32c_reference(body)),
}


@pytest.mark.parametrize("cause", sorted(CRC_MISTAKES))
def test_crc_mistakes_in_an_export(cause: str) -> None:
    blocks = _blocks()
    expected = oracle.encode(GEOMETRY, blocks, 1)
    body = expected[:-4]
    got = _diagnosed(EnvelopeEvidence(expected, body + CRC_MISTAKES[cause](body), ()))
    assert (got.cause.id, got.blamed, got.symptom) == (cause, ("ENV-CRC",), "crc-only")
    assert "valid-refused:EFORMAT" in got.cause.explains


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
    assert got.cause.id == "axes-order:[Hkv][2][L]"
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
    assert got.cause.id == cause
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
    amax_all = np.abs(values).max(axis=(-2, -1)).astype(F32)
    scales = (amax_all / F32(448)).astype(F32)
    codes = np.zeros(GEOMETRY.values_shape, dtype=np.uint8)
    codes[..., :2, :] = _e4m3((values[..., :2, :] / scales[..., None, None]).astype(F32))
    got = _envelope_case(2, codes.tobytes() + scales.astype("<f4").tobytes(), blocks)
    assert (got.cause.id, got.blamed) == ("v2-amax-over-unfilled", ("V2-SCALE",))


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


def test_reader_scale_ignored_and_f16_truncation() -> None:
    values = _values()
    data, offset = _v2_record(values)
    decoded = oracle.decode(data).records[0].decoded
    expected = decoded.values.copy()
    bare = oracle.e4m3_codes_to_f32(decoded.codes)
    got = _diagnosed(ValuesEvidence(expected, bare, 4, "f32", (data, offset)), ["READ-ACCEPT"])
    assert (got.cause.id, got.blamed) == ("v2-scale-ignored", ("V2-DECODE",))
    # into an f16 pool, truncated: each value's f16 bits rounded toward zero
    bits = decoded.values.astype(np.float16).view(np.uint16).astype(np.int32)
    over = np.abs(oracle.f16_bits_to_f32(bits.astype(np.uint16))) > np.abs(decoded.values)
    truncated = oracle.f16_bits_to_f32(np.where(over, bits - 1, bits).astype(np.uint16))
    if (truncated != oracle.round_to_f16(decoded.values)).any():
        got = _diagnosed(
            ValuesEvidence(oracle.round_to_f16(expected), truncated, 4, "f16", (data, offset))
        )
        assert got.cause.id == "f16-round-toward-zero"


def test_read_past_fill_and_padding_kept() -> None:
    values = oracle.round_to_f16(_values())
    expected = values.copy()
    expected[..., 2:, :] = 0
    got = _diagnosed(ValuesEvidence(expected, values, 2, "f32", written=values))
    assert (got.cause.id, got.blamed) == ("read-past-fill", ("POOL-WRITE-READ",))


# -- refusals and the run-level view ----------------------------------------------------------


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
        if self.reader.mistake is None or trailer != CRC_MISTAKES[self.reader.mistake](body):
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
