"""The general f16 models (tlkv_conformance.diagnosis._f16_models): an encoder's overflow
threshold and a decoder wrong on one class of codes. Each mistaken export or read-back is
written here by hand, its codes and values worked out on paper; the right ones come from the
oracle."""

from __future__ import annotations

import numpy as np
from tlkv_conformance import oracle
from tlkv_conformance.diagnosis import Attribution, attribute
from tlkv_conformance.evidence import EnvelopeEvidence, ValuesEvidence

GEOMETRY = oracle.Geometry(4, 1, 1, 8)
FILL = 4
F32 = np.float32
INF, NEG_INF, MAX, NEG_MAX = 0x7C00, 0xFC00, 0x7BFF, 0xFBFF
# the top of the f16 range: f32 value, its nearest-even f16 code
TOP = {
    65504.0: MAX,  # the largest f16
    65505.0: MAX,
    65519.0: MAX,
    65520.0: INF,  # the midpoint: ties to even carry to infinity
    65520.00390625: INF,  # the next f32 above it
    1e30: INF,
    -65505.0: NEG_MAX,
    1.0 + 2.0**-12: 0x3C00,  # a quarter step above 1: nearest 1.0, away from zero 0x3C01
    1.0 + 3 * 2.0**-11: 0x3C02,  # a tie: to even 0x3C02, toward zero 0x3C01
}


def _values() -> np.ndarray:
    rng = np.random.default_rng(7)
    values = oracle.round_to_f16(rng.uniform(-1, 1, GEOMETRY.values_shape).astype(F32))
    flat = values.reshape(-1)
    flat[: len(TOP)] = list(TOP)
    return values


def _export(values: np.ndarray, codes: dict[float, int]) -> tuple[bytes, bytes]:
    """(the oracle's v1 export of `values`, the same written with `codes` for the top values)."""
    block = oracle.Block(0x1234, FILL, values)
    expected = oracle.encode(GEOMETRY, [block], 1)
    bits = oracle.f32_to_f16_bits(values).copy().reshape(-1)
    assert [int(b) for b in bits[: len(TOP)]] == list(TOP.values())  # the oracle's, as worked
    bits[: len(TOP)] = [codes.get(v, c) for v, c in TOP.items()]
    head = expected[: oracle.HEADER_SIZE + oracle.RECORD_PREFIX_SIZE]
    actual = oracle.seal(head + bits.astype("<u2").tobytes())
    return expected, actual


def _attributed(evidence) -> Attribution:
    attribution = attribute(evidence, [])
    assert attribution.note == "", attribution.note
    return attribution


def test_f16_overflow_from_above_the_largest_f16() -> None:
    """A converter sending every magnitude above 65504 to infinity before rounding: 65505 and
    65519, due 65504, written as infinities; 65504 itself stays. 65504 tells > from >=."""
    values = _values()
    expected, actual = _export(values, {65505.0: INF, 65519.0: INF, -65505.0: NEG_INF})
    block = oracle.Block(0x1234, FILL, values)
    got = _attributed(EnvelopeEvidence(expected, actual, (block,)))
    assert (got.cause.id, got.blamed) == ("f16-overflow:above-65504", ("V1-F16",))
    assert "above 65504" in got.cause.title
    # 65504 written as an infinity too: the test is >=
    written = {65504.0: INF, 65505.0: INF, 65519.0: INF, -65505.0: NEG_INF}
    expected, actual = _export(values, written)
    got = _attributed(EnvelopeEvidence(expected, actual, (block,)))
    assert got.cause.id == "f16-overflow:from-65504"


def test_f16_overflow_above_the_midpoint() -> None:
    """A converter whose overflow test is > 65520 with the rounding's carry clamped: 65520, due
    an infinity, written as 65504; 65520.004 and above still infinities."""
    values = _values()
    expected, actual = _export(values, {65520.0: MAX})
    got = _attributed(EnvelopeEvidence(expected, actual, (oracle.Block(0x1234, FILL, values),)))
    assert got.cause.id == "f16-overflow:above-65520"
    assert got.cause.title.startswith("f32 magnitudes above 65520 sent to an f16 infinity")


def test_f16_overflow_without_65504_in_the_evidence_is_one_of_the_two_tests() -> None:
    """Without 65504 itself among the values, > 65504 and >= 65504 write the same bytes."""
    values = _values()
    values.reshape(-1)[0] = F32(1.0)  # 65504 gone
    block = oracle.Block(0x1234, FILL, values)
    expected = oracle.encode(GEOMETRY, [block], 1)
    bits = oracle.f32_to_f16_bits(values).copy().reshape(-1)
    bits[1:3] = INF  # 65505, 65519
    bits[6] = NEG_INF  # -65505
    head = expected[: oracle.HEADER_SIZE + oracle.RECORD_PREFIX_SIZE]
    actual = oracle.seal(head + bits.astype("<u2").tobytes())
    got = _attributed(EnvelopeEvidence(expected, actual, (block,)))
    assert got.cause.id == "one-of:f16-overflow:above-65504+f16-overflow:from-65504"


def test_an_f16_pool_s_overflow_is_fitted_on_the_values_given() -> None:
    """An f16 pool holds 65505 as 65504: on the held values alone a store sending 65505 to
    infinity looks like one sending 65504 there. The values the write gave (`given`) tell."""
    values = _values()
    expected, actual = _export(values, {65505.0: INF, 65519.0: INF, -65505.0: NEG_INF})
    held = oracle.Block(0x1234, FILL, oracle.round_to_f16(values))
    given = oracle.Block(0x1234, FILL, values)
    expected = oracle.encode(GEOMETRY, [held], 1)
    got = _attributed(EnvelopeEvidence(expected, actual, (held,), given=(given,)))
    assert got.cause.id == "f16-overflow:above-65504"


# -- the decoder ---------------------------------------------------------------------------


def _imported(codes: list[int]) -> tuple[bytes, np.ndarray]:
    """A v1 envelope of one block whose first codes are `codes` (the rest 1.0), and the values
    the oracle reads from it."""
    bits = np.full(GEOMETRY.values_shape, 0x3C00, dtype="<u2")
    bits[..., FILL:, :] = 0
    bits.reshape(-1)[: len(codes)] = codes
    head = oracle.encode_header(GEOMETRY, 1, 1) + (0x1234).to_bytes(8, "little")
    data = oracle.seal(head + FILL.to_bytes(4, "little") + bits.tobytes())
    return data, oracle.decode(data).records[0].decoded.values


def test_f16_subnormals_decoded_as_normals() -> None:
    """f16 -> f32 testing the exponent field 0 for the zeros only: 0x0001 (2^-24) read as
    2^-15 x (1 + 1/1024), 0x8200 (-2^-15 as a subnormal, m = 512) as -2^-15 x 1.5; zeros and
    normals right."""
    data, expected = _imported([0x0001, 0x8200, 0x0000, 0x8000, 0x0400])
    actual = expected.copy()
    actual.reshape(-1)[:2] = F32(2.0**-15 + 2.0**-25), F32(-(2.0**-15 + 2.0**-16))
    got = _attributed(ValuesEvidence(expected, actual, FILL, "f32", source=(data, 28)))
    assert (got.cause.id, got.blamed) == ("f16-decode-table:subnormal-as-normal", ("V1-F16",))


def test_f16_subnormals_decoded_as_zero() -> None:
    data, expected = _imported([0x0001, 0x8200, 0x0400])
    actual = expected.copy()
    actual.reshape(-1)[:2] = F32(0.0), F32(-0.0)
    got = _attributed(ValuesEvidence(expected, actual, FILL, "f32", source=(data, 28)))
    assert got.cause.id == "f16-decode-table:subnormals-flushed"


def test_f16_normals_decoded_with_bias_14() -> None:
    """Every normal code at twice its value (1.0 everywhere read back 2.0); a subnormal among
    them read right."""
    data, expected = _imported([0x0001, 0x3C00, 0xC000])
    actual = np.where(np.abs(expected) >= 2.0**-14, expected * F32(2), expected).astype(F32)
    got = _attributed(ValuesEvidence(expected, actual, FILL, "f32", source=(data, 28)))
    assert got.cause.id == "f16-decode-table:bias-14"


def test_an_f16_decoder_changing_other_codes_too_is_not_named() -> None:
    """Subnormals read as normals, and one normal value wrong as well: no table explains it."""
    data, expected = _imported([0x0001, 0x8200, 0x0400])
    actual = expected.copy()
    actual.reshape(-1)[:3] = F32(2.0**-15 + 2.0**-25), F32(-(2.0**-15 + 2.0**-16)), F32(1.0)
    got = _attributed(ValuesEvidence(expected, actual, FILL, "f32", source=(data, 28)))
    assert got.cause is None or not got.cause.id.startswith("f16-decode-table")
