"""Block payloads: v1 f16 and v2 e4m3 with per-slab scales, encoded and decoded."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._layout import Geometry
from ._numerics import (
    e4m3_codes_to_f32,
    e4m3_quotients,
    e4m3_scale,
    f16_bits_to_f32,
    f32_to_e4m3_codes,
    f32_to_f16_bits,
)


def _check_values(geometry: Geometry, n_tokens: int, values: np.ndarray) -> np.ndarray:
    if not 1 <= n_tokens <= geometry.block_tokens:
        raise ValueError(f"n_tokens {n_tokens} is outside 1..{geometry.block_tokens}")
    values = np.asarray(values, dtype=np.float32)
    if values.shape != geometry.values_shape:
        raise ValueError(f"values have shape {values.shape}, expected {geometry.values_shape}")
    return values


def slab_scales(geometry: Geometry, n_tokens: int, values: np.ndarray) -> np.ndarray:
    """The v2 scale of every (layer, K or V, head) slab, f32 [L][2][Hkv]."""
    values = _check_values(geometry, n_tokens, values)
    filled = values[..., :n_tokens, :]
    if not np.isfinite(filled).all():
        raise ValueError("a v2 payload needs finite values at the filled positions")
    amax = np.abs(filled).max(axis=(-2, -1))
    return np.vectorize(e4m3_scale, otypes=[np.float32])(amax).reshape(amax.shape)


def encode_payload(geometry: Geometry, version: int, n_tokens: int, values: np.ndarray) -> bytes:
    """The payload of one block record; positions at or past n_tokens are zero bytes."""
    values = _check_values(geometry, n_tokens, values)
    if version == 1:
        bits = f32_to_f16_bits(values).copy()
        bits[..., n_tokens:, :] = 0
        return bits.astype("<u2").tobytes()
    if version == 2:
        scales = slab_scales(geometry, n_tokens, values)
        codes = np.zeros(geometry.values_shape, dtype=np.uint8)
        codes[..., :n_tokens, :] = f32_to_e4m3_codes(
            e4m3_quotients(values[..., :n_tokens, :], scales)
        )
        return codes.tobytes() + scales.astype("<f4").tobytes()
    raise ValueError(f"no payload layout for envelope version {version}")


@dataclass(frozen=True, eq=False)
class DecodedPayload:
    """A payload's values in f32 [L][2][Hkv][B][D]; for v2 also its raw codes and scales."""

    values: np.ndarray
    codes: np.ndarray | None = None
    scales: np.ndarray | None = None


def decode_payload(geometry: Geometry, version: int, payload: bytes) -> DecodedPayload:
    """Decode one record's payload bytes (which must be exactly P bytes long)."""
    size = geometry.payload_size(version)
    if len(payload) != size:
        raise ValueError(f"payload is {len(payload)} bytes, expected {size}")
    shape = geometry.values_shape
    if version == 1:
        bits = np.frombuffer(payload, dtype="<u2").reshape(shape)
        return DecodedPayload(values=f16_bits_to_f32(bits))
    codes = np.frombuffer(payload, dtype=np.uint8, count=geometry.n_elements).reshape(shape)
    scales = np.frombuffer(payload, dtype="<f4", offset=geometry.n_elements).reshape(shape[:3])
    scales = scales.astype(np.float32)
    values = e4m3_codes_to_f32(codes) * scales[..., np.newaxis, np.newaxis]
    return DecodedPayload(values=values.astype(np.float32), codes=codes, scales=scales)
