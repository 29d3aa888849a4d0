"""`--v2-level=tolerant` tolerates what it says and nothing more: one e4m3 step between finite
codes of the same sign; never a NaN code for a number, never a sign change."""

from __future__ import annotations

import numpy as np
import pytest
from tlkv_conformance import oracle
from tlkv_conformance.checks import CaseFailure, compare_envelopes

# B = 2, L = 1, Hkv = 1, D = 2: two slabs (K, V) of four elements, each with amax 448 (scale 1)
GEOMETRY = oracle.Geometry(2, 1, 1, 2)
K = [[448.0, 0.0], [1.0, -3.0]]
V = [[-448.0, 2.0], [0.5, -0.0]]
CODES = oracle.HEADER_SIZE + oracle.RECORD_PREFIX_SIZE  # where the first code lies


def _expected() -> bytes:
    values = np.array([[K, V]], dtype=np.float32).reshape(1, 2, 1, 2, 2)
    block = oracle.Block(oracle.block_hash(0, [1, 2]), 2, values)
    return oracle.encode(GEOMETRY, [block], 2)


def _with_code(element: int, code: int) -> bytes:
    """The expected envelope with one code replaced, its CRC recomputed (so that only the
    code differs)."""
    data = bytearray(_expected())
    data[CODES + element] = code
    return oracle.seal(bytes(data[: -oracle.CRC_SIZE]))


def test_the_expected_codes() -> None:
    """The codes these tests change, as OCP E4M3 "fn" encodes them (the format's table)."""
    codes = _expected()[CODES : CODES + 8]
    assert list(codes) == [0x7E, 0x00, 0x38, 0xC4, 0xFE, 0x40, 0x30, 0x80]


@pytest.mark.parametrize(
    ("element", "code"),
    [(2, 0x39), (2, 0x37), (3, 0xC5), (3, 0xC3), (0, 0x7D), (4, 0xFD), (1, 0x01), (7, 0x81)],
    ids=["up", "down", "neg-up", "neg-down", "below-max", "below-neg-max", "zero-up", "negzero"],
)
def test_one_finite_step_of_the_same_sign_passes(element: int, code: int) -> None:
    compare_envelopes(_expected(), _with_code(element, code), "tolerant")
    with pytest.raises(CaseFailure):
        compare_envelopes(_expected(), _with_code(element, code), "strict")


@pytest.mark.parametrize(
    ("element", "code", "why"),
    [
        (0, 0x7F, "NaN"),  # 448 written as NaN: the V2-NOSAT mistake
        (4, 0xFF, "NaN"),  # -448 written as NaN
        (1, 0x80, "sign"),  # +0 written as -0
        (1, 0x81, "sign"),  # +0 written as the smallest negative
        (7, 0x00, "sign"),  # -0 written as +0
        (7, 0x01, "sign"),
        (2, 0x3A, "more than one"),
        (3, 0xC2, "more than one"),
    ],
    ids=["nan-max", "nan-neg-max", "neg-zero", "neg-sub", "pos-zero", "pos-sub", "two", "neg-two"],
)
def test_nan_sign_change_and_two_steps_fail(element: int, code: int, why: str) -> None:
    with pytest.raises(CaseFailure, match=f"v2 \\(tolerant\\).*{why}"):
        compare_envelopes(_expected(), _with_code(element, code), "tolerant")


def test_a_nan_expected_is_no_step_from_a_number() -> None:
    """Where the expected code is NaN, no number passes, not even 448; a NaN of the other sign
    is the NaN policy's to judge, never a rounding step (with `nan="exact"` it fails)."""
    expected = _with_code(2, 0x7F)
    compare_envelopes(expected, expected, "tolerant")
    for code in (0x7E, 0x7D):
        with pytest.raises(CaseFailure, match="NaN"):
            compare_envelopes(expected, _with_code(2, code), "tolerant")
    with pytest.raises(CaseFailure, match="NaN"):
        compare_envelopes(expected, _with_code(2, 0xFF), "tolerant", nan="exact")


def test_a_nan_of_the_other_sign_beside_a_rounding_step_is_the_nan_policys() -> None:
    """A NaN code that changed sign next to a one-step rounding elsewhere: the NaN is judged by
    the NaN policy (any sign passes by default, NAN-SIGN being a SHOULD), the step by the
    tolerance; neither hides a real difference."""
    data = bytearray(_with_code(2, 0x7F))
    expected = bytes(data)
    data[CODES + 2] = 0xFF  # the NaN with the other sign
    data[CODES + 3] = 0xC5  # -3.0 one step away
    actual = oracle.seal(bytes(data[: -oracle.CRC_SIZE]))
    compare_envelopes(expected, actual, "tolerant")
    with pytest.raises(CaseFailure, match="NaN"):
        compare_envelopes(expected, actual, "tolerant", nan="sign")
    data[CODES + 3] = 0xC6  # two steps: the tolerance still refuses it
    with pytest.raises(CaseFailure, match="more than one"):
        compare_envelopes(expected, oracle.seal(bytes(data[: -oracle.CRC_SIZE])), "tolerant")


def test_scales_header_and_crc_stay_exact() -> None:
    data = bytearray(_expected())
    scale = CODES + GEOMETRY.n_elements
    data[scale] ^= 1
    with pytest.raises(CaseFailure, match="scales differ"):
        compare_envelopes(_expected(), oracle.seal(bytes(data[: -oracle.CRC_SIZE])), "tolerant")
    stale_crc = bytearray(_with_code(2, 0x39))
    stale_crc[-oracle.CRC_SIZE :] = _expected()[-oracle.CRC_SIZE :]
    with pytest.raises(CaseFailure, match="CRC-32C"):
        compare_envelopes(_expected(), bytes(stale_crc), "tolerant")


def test_the_references_pass_the_v2_cases_when_tolerant(run_suite) -> None:
    """Tolerant mode fails no correct writer: every v2 writer case passes against the bundled
    Python reference."""
    run = run_suite("--impl=ref", "--v2-level=tolerant", "cases/writer-v2.yaml")
    assert run.returncode == 0, run.output[-3000:]
    assert run.passed, run.output[-3000:]
    assert not run.failed, run.output[-3000:]
