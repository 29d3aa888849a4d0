"""Element encodings: IEEE binary16 through numpy, OCP FP8 E4M3 "fn" through ml_dtypes."""

from __future__ import annotations

import ml_dtypes
import numpy as np

E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)
E4M3_MAX = np.float32(448.0)
E4M3_MAX_CODE = 0x7E


def f32_to_f16_bits(values: np.ndarray) -> np.ndarray:
    """Round f32 values to binary16 (nearest even) and return the u16 bit patterns."""
    return np.asarray(values, dtype=np.float32).astype(np.float16).view(np.uint16)


def f16_bits_to_f32(bits: np.ndarray) -> np.ndarray:
    """Widen binary16 bit patterns to f32 exactly (NaN payloads included)."""
    return np.asarray(bits, dtype=np.uint16).view(np.float16).astype(np.float32)


def round_to_f16(values: np.ndarray) -> np.ndarray:
    """The f32 value an f16 store of `values` reads back as."""
    return f16_bits_to_f32(f32_to_f16_bits(values))


def f32_to_e4m3_codes(values: np.ndarray) -> np.ndarray:
    """Encode f32 values as E4M3 codes, round to nearest even (magnitudes past 464 become NaN)."""
    return np.asarray(values, dtype=np.float32).astype(E4M3).view(np.uint8)


def e4m3_codes_to_f32(codes: np.ndarray) -> np.ndarray:
    """Decode E4M3 codes to f32 exactly (0x7F and 0xFF are NaN)."""
    return np.asarray(codes, dtype=np.uint8).view(E4M3).astype(np.float32)


def e4m3_scale(amax: np.float32) -> np.float32:
    """A v2 writer's slab scale: amax / 448 as an f32 division, 1.0 for an all-zero slab."""
    amax = np.float32(amax)
    if amax == 0:
        return np.float32(1.0)
    return np.float32(amax / E4M3_MAX)
