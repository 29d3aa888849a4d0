"""A partial block's padding zeroed along another axis (tlkv_conformance.diagnosis._padding_axis):
each mistaken export is written here by hand with explicit loops over the positions, the right
one from the oracle."""

from __future__ import annotations

import numpy as np
from tlkv_conformance import oracle
from tlkv_conformance.diagnosis import Attribution, attribute
from tlkv_conformance.evidence import EnvelopeEvidence

GEOMETRY = oracle.Geometry(4, 2, 3, 6)  # B=4, L=2, Hkv=3, D=6
FILL = 2
F32 = np.float32


def _values() -> np.ndarray:
    rng = np.random.default_rng(3)
    values = oracle.round_to_f16(rng.uniform(0.5, 2, GEOMETRY.values_shape).astype(F32))
    values[..., FILL:, :] = 0  # a pool holds zeros past the fill
    return values


def _export(values: np.ndarray, version: int, zeroed) -> tuple[bytes, bytes]:
    """(the oracle's export of one block of `values` filled to FILL, the same written with the
    elements at (layer, kv, head, pos, dim) where `zeroed(...)` holds as zero codes)."""
    block = oracle.Block(0, FILL, values)
    expected = oracle.encode(GEOMETRY, [block], version)
    start = oracle.HEADER_SIZE + oracle.RECORD_PREFIX_SIZE
    width = 2 if version == 1 else 1
    body = bytearray(expected[:-4])
    element = 0
    for layer in range(GEOMETRY.n_layers):
        for kv in range(2):
            for head in range(GEOMETRY.n_kv_heads):
                for pos in range(GEOMETRY.block_tokens):
                    for dim in range(GEOMETRY.head_dim):
                        if zeroed(layer, kv, head, pos, dim):
                            at = start + element * width
                            body[at : at + width] = bytes(width)
                        element += 1
    return expected, oracle.seal(bytes(body))


def _attributed(expected: bytes, actual: bytes, values: np.ndarray) -> Attribution:
    assert expected != actual
    evidence = EnvelopeEvidence(expected, actual, (oracle.Block(0, FILL, values),))
    attribution = attribute(evidence, [])
    assert attribution.note == "", attribution.note
    return attribution


def test_v1_padding_zeroed_along_the_head_dimension() -> None:
    """bits[..., n_tokens:] = 0: every position's dims 2 to 5 written as zeros."""
    values = _values()
    expected, actual = _export(values, 1, lambda layer, kv, head, pos, dim: dim >= FILL)
    got = _attributed(expected, actual, values)
    assert (got.cause.id, got.blamed) == ("padding-axis:D", ("V1-LAYOUT",))
    assert "along the head dimension D" in got.cause.title


def test_v2_padding_zeroed_along_the_heads() -> None:
    """codes[:, :, n_tokens:] = 0 in v2: head 2's codes zero, the scales right."""
    values = _values()
    expected, actual = _export(values, 2, lambda layer, kv, head, pos, dim: head >= FILL)
    got = _attributed(expected, actual, values)
    assert (got.cause.id, got.blamed) == ("padding-axis:Hkv", ("V2-LAYOUT",))


def test_zeros_matching_no_axis_name_none() -> None:
    """Dims 2 to 5 zeroed at position 0 only: no whole axis from n_tokens on."""
    values = _values()
    expected, actual = _export(values, 1, lambda layer, kv, head, pos, dim: dim >= 2 and pos == 0)
    got = _attributed(expected, actual, values)
    assert got.cause is None or not got.cause.id.startswith("padding-axis")
