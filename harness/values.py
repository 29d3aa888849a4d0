"""Deterministic block values from small recipes, shared by YAML cases and golden generators.

A recipe is a one-key mapping; every recipe yields f32 values of the full block shape
[L][2][Hkv][B][D] that are exactly f16-representable, so f16 and f32 pools hold them unchanged.
Random recipes draw from numpy's PCG64 bit generator's raw output and plain arithmetic, whose
streams numpy keeps stable across versions (unlike its sampling methods).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from .exprs import evaluate, geometry_symbols
from .oracle import Geometry, f16_bits_to_f32

RECIPES = ("zeros", "constant", "ramp", "literal", "f16_bits", "pcg64", "pcg64_f16_bits", "kv")
KV_INDEX = {"K": 0, "V": 1, 0: 0, 1: 1}


def pcg64_raw(seed: int, salt: int, count: int) -> np.ndarray:
    """`count` raw u64 draws of PCG64 seeded with (seed, salt)."""
    return np.random.PCG64([seed, salt]).random_raw(count).astype(np.uint64)


def _uniform(seed: int, salt: int, count: int, low: float, high: float) -> np.ndarray:
    unit = (pcg64_raw(seed, salt, count) >> np.uint64(11)).astype(np.float64) * 2.0**-53
    return low + (high - low) * unit


def _random_f16_bits(seed: int, salt: int, count: int, finite: bool) -> np.ndarray:
    bits = (pcg64_raw(seed, salt, count) & np.uint64(0xFFFF)).astype(np.uint16)
    if finite:  # map inf/NaN exponents onto the largest finite binade, keeping sign and mantissa
        special = (bits & 0x7C00) == 0x7C00
        bits[special] &= np.uint16(0xFBFF)
    return bits


def _literal(nested: Any, geometry: Geometry) -> np.ndarray:
    """A nested list [L][2][Hkv][n][D]; positions past the listed n are zero."""
    array = np.asarray(nested, dtype=np.float64)
    shape = geometry.values_shape
    if array.ndim != 5 or array.shape[:3] != shape[:3] or array.shape[4] != shape[4]:
        raise ValueError(
            f"literal values of shape {array.shape}, expected {shape} (B may be short)"
        )
    if array.shape[3] > shape[3]:
        raise ValueError(f"literal values list {array.shape[3]} positions, B is {shape[3]}")
    values = np.zeros(shape, dtype=np.float64)
    values[..., : array.shape[3], :] = array
    return values


def _kv_like(seed: int, salt: int, geometry: Geometry) -> np.ndarray:
    """Values shaped like a real model's KV cache, in float64 before rounding to f16: each
    (layer, K or V, head) slab has its own magnitude (keys larger than values, log-spread over
    two decades), every element a sum of two uniforms (peaked at 0), and a few outlier channels
    per key head several times the rest, as rotary embeddings leave them."""
    shape = geometry.values_shape
    layers, _, heads, _, dims = shape
    n = geometry.n_elements
    raw = _uniform(seed, salt, 2 * n + 2 * layers * heads + layers * heads * dims, -1.0, 1.0)
    body = (raw[:n] + raw[n : 2 * n]).reshape(shape) / 2
    spread = raw[2 * n : 2 * n + 2 * layers * heads].reshape(layers, 2, heads)
    magnitude = 2.0 ** (spread * 3.0)  # 1/8 .. 8 for keys
    magnitude[:, 1, :] /= 4.0  # values a quarter of that
    channels = raw[2 * n + 2 * layers * heads :].reshape(layers, heads, dims)
    outlier = np.where(np.abs(channels) > 0.9, 6.0, 1.0)  # about 10% of key channels
    values = body * magnitude[..., np.newaxis, np.newaxis]
    values[:, 0] *= outlier[:, :, np.newaxis, :]
    return values


def _to_f16_bits(values: np.ndarray) -> np.ndarray:
    """Round float64 values straight to binary16 bits (one rounding, not via f32)."""
    return np.asarray(values, dtype=np.float64).astype(np.float16).view(np.uint16)


_MADE: dict[str, np.ndarray] = {}
_MADE_LIMIT = 32  # at a real geometry a block's values are MiBs: keep a few


def make_values(recipe: Mapping[str, Any], geometry: Geometry, salt: int = 0) -> np.ndarray:
    """The f32 values a recipe describes (read-only: the same recipe gives the same array, made
    once; a rejection case's preloaded blocks, say, are the same in every case)."""
    key = json.dumps([recipe, str(geometry), salt], sort_keys=True, default=str)
    made = _MADE.get(key)
    if made is None:
        made = _make_values(recipe, geometry, salt)
        made.setflags(write=False)
        if len(_MADE) >= _MADE_LIMIT:
            _MADE.pop(next(iter(_MADE)))
        _MADE[key] = made
    return made


def _make_values(recipe: Mapping[str, Any], geometry: Geometry, salt: int = 0) -> np.ndarray:
    """The f32 values a recipe describes. `salt` varies random recipes per block.

    Values are built as f16 bit patterns and widened to f32 exactly at the end, so NaN payloads
    (signalling ones included) survive: a float64 detour would quiet them.
    """
    names = [key for key in recipe if key != "set"]
    if len(names) != 1:
        raise ValueError(
            f"a values recipe has one of {', '.join(RECIPES)} (and 'set'), got {sorted(recipe)}"
        )
    name = names[0]
    arg = recipe[name]
    n = geometry.n_elements
    shape = geometry.values_shape
    if name == "zeros":
        bits = np.zeros(n, dtype=np.uint16)
    elif name == "constant":
        bits = _to_f16_bits(np.full(n, float(arg)))
    elif name == "ramp":
        bits = _to_f16_bits(arg.get("start", 0.0) + arg.get("step", 1.0) * np.arange(n))
    elif name == "literal":
        bits = _to_f16_bits(_literal(arg, geometry))
    elif name == "f16_bits":
        pattern = np.asarray(arg, dtype=np.uint16)
        bits = np.tile(pattern, -(-n // pattern.size))[:n]  # np.resize, without its slowness
    elif name == "pcg64":
        bits = _to_f16_bits(
            _uniform(arg["seed"], salt, n, arg.get("low", -1.0), arg.get("high", 1.0))
        )
    elif name == "pcg64_f16_bits":
        bits = _random_f16_bits(arg["seed"], salt, n, arg.get("finite", True))
    elif name == "kv":
        bits = _to_f16_bits(_kv_like(arg["seed"], salt, geometry))
    else:
        raise ValueError(f"unknown values recipe {name!r}; known: {', '.join(RECIPES)}")
    bits = bits.reshape(shape).copy()
    symbols = geometry_symbols(geometry)
    wide: list[tuple[tuple[int, ...], int]] = []  # f32 patterns, set after widening
    for override in recipe.get("set", []):
        layer, kv, head, pos, dim = override["at"]
        # Coordinates may be expressions over the geometry ([L-1, V, Hkv-1, B-1, D-1]).
        layer, head, pos, dim = (evaluate(c, symbols) for c in (layer, head, pos, dim))
        index = (layer, KV_INDEX[kv], head, pos, dim)
        if not all(0 <= i < size for i, size in zip(index, shape, strict=True)):
            raise ValueError(f"set at {override['at']} is outside the block {shape}")
        if "f16_bits" in override:
            bits[index] = override["f16_bits"]
        elif "f32_bits" in override:
            wide.append((index, override["f32_bits"]))
        else:
            bits[index] = _to_f16_bits(np.array([override["value"]]))[0]
    values = f16_bits_to_f32(bits)
    for index, pattern in wide:
        # Not f16-representable, as a rule: an f16 pool keeps it rounded (in_pool_precision).
        values.view(np.uint32)[index] = pattern
    return values
