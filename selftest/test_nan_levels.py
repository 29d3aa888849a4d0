"""A NaN stays a NaN (MUST); its sign and payload are SHOULDs (docs/decisions.md): how the
envelope and value comparisons apply the NaN policies, and what they say when only NaNs differ."""

from __future__ import annotations

import numpy as np
import pytest
from tlkv_conformance import oracle
from tlkv_conformance.checks import NAN_BITS_DIFFER, CaseFailure, compare_envelopes
from tlkv_conformance.diagnosis import attribute
from tlkv_conformance.diff import values_diff
from tlkv_conformance.evidence import ValuesEvidence

GEOMETRY = oracle.Geometry(4, 1, 1, 8)  # 64 elements a block
NANS = (0x7E55, 0xFE00, 0xFFFF, 0x7E00)  # quiet NaNs of both signs, with payloads
CANONICAL_F16 = 0x7FFF  # what f16 holds of torch's canonical f32 NaN 0x7FFFFFFF


def _held(bits: np.ndarray) -> list[oracle.Block]:
    """The block a writer held: 4 tokens of `bits` (f16)."""
    values = oracle.f16_bits_to_f32(bits.astype(np.uint16).reshape(GEOMETRY.values_shape))
    return [oracle.Block(0, 4, values)]


def _v1(bits: np.ndarray) -> bytes:
    return oracle.encode(GEOMETRY, _held(bits), 1)


def _f16_bits() -> np.ndarray:
    bits = np.full(GEOMETRY.n_elements, 0x3C00, dtype=np.uint16)  # 1.0
    bits[[3, 17, 40, 63]] = NANS
    return bits


def _replaced(data: bytes, version: int, changes: dict[int, int], reseal: bool = True) -> bytes:
    """`data` with payload elements (flat index -> bits) of block 0 replaced; the trailer the
    CRC-32C of the new bytes when `reseal`, else left as it was."""
    out = bytearray(data)
    width = 2 if version == 1 else 1
    start = oracle.HEADER_SIZE + oracle.RECORD_PREFIX_SIZE
    for index, bits in changes.items():
        at = start + index * width
        out[at : at + width] = bits.to_bytes(width, "little")
    body = bytes(out[: -oracle.CRC_SIZE])
    return oracle.seal(body) if reseal else body + data[-oracle.CRC_SIZE :]


def test_v1_nans_of_another_sign_pass_the_must_and_warn_at_the_should() -> None:
    expected = _v1(_f16_bits())
    canonical = _replaced(expected, 1, {i: CANONICAL_F16 for i in (3, 17, 40, 63)})
    compare_envelopes(expected, canonical)  # "any": the MUST
    for policy in ("sign", "quieted", "exact"):
        with pytest.raises(CaseFailure) as caught:
            compare_envelopes(expected, canonical, nan=policy, blocks=_held(_f16_bits()))
        message = str(caught.value)
        assert message.startswith(NAN_BITS_DIFFER), message
        assert "expected nan (00 fe), got nan (ff 7f)" in message
        # the writer's own CRC is right: the sign is blamed, not the trailer
        attribution = attribute(caught.value.evidence, ("NAN-SIGN", "V1-F16-NAN-PAYLOAD"))
        assert (attribution.cause.id, attribution.blamed) == ("nan-sign-lost", ("NAN-SIGN",))


def test_v1_payload_only_is_a_should_of_its_own() -> None:
    expected = _v1(_f16_bits())
    default_nan = _replaced(expected, 1, {3: 0x7E00})  # 0x7E55's payload dropped
    compare_envelopes(expected, default_nan)
    compare_envelopes(expected, default_nan, nan="sign")
    with pytest.raises(CaseFailure) as caught:
        compare_envelopes(expected, default_nan, nan="exact", blocks=_held(_f16_bits()))
    attribution = attribute(caught.value.evidence, ())
    assert attribution.cause.id == "nan-payload-dropped"


@pytest.mark.parametrize(
    ("bits", "what"), [(0x7C00, "an infinity"), (0x0000, "zero"), (0x5F00, "448")]
)
def test_v1_nan_turned_into_a_number_fails_the_must(bits: int, what: str) -> None:
    expected = _v1(_f16_bits())
    actual = _replaced(expected, 1, {17: bits})
    with pytest.raises(CaseFailure) as caught:
        compare_envelopes(expected, actual)
    assert not str(caught.value).startswith(NAN_BITS_DIFFER), what


def test_v1_nan_with_the_expected_crc_fails_the_must() -> None:
    """Where a NaN's bits differ, the trailer must be the CRC-32C of the bytes written."""
    expected = _v1(_f16_bits())
    stale = _replaced(expected, 1, {3: CANONICAL_F16}, reseal=False)
    with pytest.raises(CaseFailure) as caught:
        compare_envelopes(expected, stale)
    assert not str(caught.value).startswith(NAN_BITS_DIFFER)


def test_v2_nan_codes_match_any_nan_code_at_the_must() -> None:
    values = np.full(GEOMETRY.values_shape, 2.0, dtype=np.float32)
    base = oracle.encode(GEOMETRY, [oracle.Block(0, 4, values)], 2)
    expected = _replaced(base, 2, {0: 0x7F, 1: 0xFF, 30: 0x7F})
    flipped = _replaced(base, 2, {0: 0xFF, 1: 0x7F, 30: 0xFF})
    compare_envelopes(expected, flipped)
    with pytest.raises(CaseFailure) as caught:
        compare_envelopes(expected, flipped, nan="sign")
    assert str(caught.value).startswith(NAN_BITS_DIFFER)
    number = _replaced(base, 2, {0: 0x7E, 1: 0xFF, 30: 0x7F})  # a NaN code written as 448
    with pytest.raises(CaseFailure):
        compare_envelopes(expected, number)


def test_values_any_nan_is_the_must_and_its_sign_a_should() -> None:
    expected = oracle.f16_bits_to_f32(_f16_bits().reshape(GEOMETRY.values_shape))
    canonical = expected.copy()
    canonical.view(np.uint32)[np.isnan(canonical)] = 0x7FFFFFFF
    assert values_diff(expected, canonical, "f16") is None  # "any" by default
    shown = values_diff(expected, canonical, "f16", nan="sign")
    assert shown is not None
    assert "expected nan (00 fe), got nan (f32 ff ff ff 7f: not an f16 value)" in shown
    assert values_diff(expected, canonical, "f16", nan="quieted") is not None
    infinite = expected.copy()
    infinite[np.isnan(infinite)] = np.inf
    assert values_diff(expected, infinite, "f16") is not None


def test_values_diagnosis_names_the_sign_or_the_payload() -> None:
    expected = oracle.f16_bits_to_f32(_f16_bits().reshape(GEOMETRY.values_shape))
    default_nan = expected.copy()
    bits = default_nan.view(np.uint32)
    quiet = np.isnan(default_nan)
    bits[quiet] = (bits[quiet] & np.uint32(0x80000000)) | np.uint32(0x7FC00000)
    got = attribute(ValuesEvidence(expected, default_nan, 4, "f16"), ())
    assert (got.cause.id, got.blamed) == ("nan-payload-dropped", ("V1-F16-NAN-PAYLOAD",))
    canonical = expected.copy()
    canonical.view(np.uint32)[quiet] = 0x7FFFFFFF
    got = attribute(ValuesEvidence(expected, canonical, 4, "f16"), ())
    assert (got.cause.id, got.blamed) == ("nan-sign-lost", ("NAN-SIGN",))
