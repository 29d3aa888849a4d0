"""Element encodings: IEEE binary16 through numpy, OCP FP8 E4M3 "fn" through ml_dtypes."""

from __future__ import annotations

import ml_dtypes
import numpy as np

E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)
E4M3_MAX = np.float32(448.0)
E4M3_MAX_CODE = 0x7E


def f32_to_f16_bits(values: np.ndarray) -> np.ndarray:
    """Round f32 values to binary16 (nearest even) and return the u16 bit patterns."""
    with np.errstate(over="ignore"):  # a finite value from 65520 on is an infinity, by IEEE 754
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
    """A v2 writer's slab scale: amax / 448 as an f32 division, 1.0 for an all-zero slab, and
    1.0 where the division underflows to 0 (V2-TINY-SLAB: such a slab is written as all-zero
    codes; docs/decisions.md)."""
    amax = np.float32(amax)
    if amax == 0:
        return np.float32(1.0)
    scale = np.float32(amax / E4M3_MAX)
    return scale if scale != 0 else np.float32(1.0)


def e4m3_quotients(values: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """x / scale in f32 for each slab's filled values; where the scale is below the smallest
    normal f32 (a tiny slab) the quotient may pass 448 and is clamped to +-448 (V2-TINY-SLAB),
    so that no code is NaN."""
    quotients = np.asarray(values, dtype=np.float32) / scales[..., np.newaxis, np.newaxis]
    tiny = (scales < np.finfo(np.float32).tiny)[..., np.newaxis, np.newaxis]
    return np.where(tiny, np.clip(quotients, -E4M3_MAX, E4M3_MAX), quotients).astype(np.float32)
