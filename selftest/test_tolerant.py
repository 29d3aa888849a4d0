"""The tolerant v2 level (--v2-level tolerant, docs/decisions.md "The tolerant v2 level"): each
e4m3 code within one step of the expected one on the number line of codes, +0 and -0 the same
step, a NaN code only where a NaN is expected (as `nan` allows), everything else exact."""

from __future__ import annotations

import numpy as np
import pytest
from tlkv_conformance import oracle
from tlkv_conformance.checks import CaseFailure, compare_envelopes

GEOMETRY = oracle.Geometry(block_tokens=2, n_layers=1, n_kv_heads=1, head_dim=2)
CODES = oracle.HEADER_SIZE + oracle.RECORD_PREFIX_SIZE  # the first code of block 0
# K: 448, 1.0, +0, 2.0 (amax 448: scale 1.0); V: all zero (scale 1.0, codes 0).
VALUES = np.array([448.0, 1.0, 0.0, 2.0, 0, 0, 0, 0], dtype=np.float32).reshape(
    GEOMETRY.values_shape
)


def _with_codes(data: bytes, changes: dict[int, int]) -> bytes:
    """`data` with the codes at these element indices replaced, the CRC recomputed."""
    body = bytearray(data[: -oracle.CRC_SIZE])
    for element, code in changes.items():
        body[CODES + element] = code
    return bytes(body) + oracle.crc32c(bytes(body)).to_bytes(4, "little")


# A writer cannot be given a NaN for v2 (docs/decisions.md): the fourth code is made one, as a
# re-export of an imported NaN code holds it.
EXPECTED = _with_codes(oracle.encode(GEOMETRY, [oracle.Block(0, 2, VALUES)], 2), {3: 0x7F})


def test_the_expected_codes_are_the_ones_the_cases_below_change() -> None:
    assert EXPECTED[CODES : CODES + 4] == bytes([0x7E, 0x38, 0x00, 0x7F])  # 448, 1.0, +0, NaN


@pytest.mark.parametrize(
    ("changes", "nan"),
    [
        ({0: 0x7D}, "any"),  # 416 for 448: one step
        ({1: 0x37}, "any"),  # 0.875 for 1.0: one step
        ({2: 0x80}, "any"),  # -0 for +0: the same step
        ({2: 0x81}, "any"),  # the least negative subnormal for +0: one step
        ({0: 0x7D, 3: 0xFF}, "any"),  # and the NaN's sign, which `any` lets go
    ],
)
def test_within_one_step_passes(changes: dict[int, int], nan: str) -> None:
    compare_envelopes(EXPECTED, _with_codes(EXPECTED, changes), level="tolerant", nan=nan)


@pytest.mark.parametrize(
    ("changes", "nan", "why"),
    [
        ({0: 0x7C}, "any", "more than one e4m3 code away"),  # 384 for 448: two steps
        ({0: 0x7F}, "any", "a NaN code where a number is expected"),  # NaN for 448
        ({3: 0x7E}, "any", "a number where a NaN is expected"),  # 448 for NaN
        ({0: 0x7D, 3: 0xFF}, "sign", "NaN codes that differ"),  # the NaN's sign, asked for
    ],
)
def test_past_one_step_or_across_nan_fails(changes: dict[int, int], nan: str, why: str) -> None:
    with pytest.raises(CaseFailure, match=why):
        compare_envelopes(EXPECTED, _with_codes(EXPECTED, changes), level="tolerant", nan=nan)
