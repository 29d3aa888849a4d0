"""A v2 writer's scale clamped below at a floor (tlkv_conformance.diagnosis._scale_floor): each
mistaken export is written here by hand, its scales worked out on paper (or read off a real
writer's output), the codes and the right bytes from the oracle."""

from __future__ import annotations

import struct

import numpy as np
from tlkv_conformance import oracle
from tlkv_conformance.diagnosis import Attribution, attribute
from tlkv_conformance.evidence import EnvelopeEvidence

GEOMETRY = oracle.Geometry(4, 1, 1, 8)  # two slabs: K and V of one layer and head
N = GEOMETRY.n_elements
F32 = np.float32


def _written(values: np.ndarray, scale_bits: tuple[int, int]) -> tuple[bytes, bytes]:
    """(the oracle's export of one full block of `values`, the same written with the scales of
    bit patterns `scale_bits` (K, V) and the values encoded with them)."""
    block = oracle.Block(0x1234, 4, values)
    expected = oracle.encode(GEOMETRY, [block], 2)
    scales = np.array(scale_bits, dtype=np.uint32).view(F32).reshape(1, 2, 1)
    codes = oracle.f32_to_e4m3_codes(oracle.e4m3_quotients(values, scales))
    payload = codes.tobytes() + struct.pack("<2I", *scale_bits)
    head = expected[: oracle.HEADER_SIZE + oracle.RECORD_PREFIX_SIZE]
    return expected, oracle.seal(head + payload)


def _attributed(expected: bytes, actual: bytes, values: np.ndarray) -> Attribution:
    evidence = EnvelopeEvidence(expected, actual, (oracle.Block(0x1234, 4, values),))
    attribution = attribute(evidence, [])
    assert attribution.note == "", attribution.note
    return attribution


def _k_slab() -> np.ndarray:
    values = np.zeros(GEOMETRY.values_shape, dtype=F32)
    values[0, 0] = oracle.round_to_f16(np.linspace(-3, 5, 32, dtype=F32).reshape(4, 8))
    return values


def test_an_amax_clamped_at_1e_12_scales_a_slab_of_zeros() -> None:
    """max(amax, 1e-12f) / 448: the zero V slab's scale 0x2720D7C5 (2.2321429e-15, as a Python
    writer so clamped wrote it), not 1.0; the K slab's amax 5 / 448 right (0x3C36DB6E)."""
    values = _k_slab()
    assert struct.unpack("<I", struct.pack("<f", 5 / 448))[0] == 0x3C36DB6E
    expected, actual = _written(values, (0x3C36DB6E, 0x2720D7C5))
    got = _attributed(expected, actual, values)
    assert (got.cause.id, got.blamed) == ("v2-scale-floor:amax-1e-12", ("V2-SCALE-ZERO",))
    assert got.cause.title.startswith("amax clamped below at 1e-12 before the division by 448")


def test_a_scale_clamped_at_flt_min_in_a_tiny_slab() -> None:
    """max(amax / 448, FLT_MIN) in an f32 pool: the V slab of amax 1e-36 (amax / 448 under
    2^-126) gets the scale 2^-126 (0x00800000); the zero slab keeps 1.0 (guarded first)."""
    values = np.zeros((1, 2, 1, 4, 8), dtype=F32)
    values[0, 1, 0, 0, :3] = F32(1e-36), F32(-5e-37), F32(2.5e-37)
    expected, actual = _written(values, (0x3F800000, 0x00800000))
    got = _attributed(expected, actual, values)
    assert (got.cause.id, got.blamed) == ("v2-scale-floor:scale-2^-126", ("V2-SCALE",))


def test_a_scale_of_no_floor_names_none() -> None:
    """The zero slab's scale 0x27582BE8 (3.0e-15): neither form gives it with any floor."""
    values = _k_slab()
    expected, actual = _written(values, (0x3C36DB6E, 0x27582BE8))
    got = _attributed(expected, actual, values)
    assert got.cause is None or not got.cause.id.startswith("v2-scale-floor")
