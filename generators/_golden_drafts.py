"""The golden vectors' entries before their blobs exist (drafts): for any geometry, the blocks
each entry holds (token ids, chained hashes, fills) and the recipes of their values, with the
f16 and e4m3 values worth pinning. `tlkv_conformance.generators.golden` writes them.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from tlkv_conformance import oracle
from tlkv_conformance.golden import GoldenBlock
from tlkv_conformance.values import pcg64_raw

VOCAB = 128_256  # a Llama-3-sized vocabulary, so token ids look like real ones
BOS = 128_000
TOKEN_SALT = 0x70C5  # keeps token draws apart from value draws that share a seed

Recipe = dict[str, Any]
BlockSpec = tuple[Sequence[int] | None, int, Recipe]  # tokens (or None), n_tokens, values


# -- entries -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Draft:
    """An entry before its blob exists: name, words, version, geometry, blocks."""

    name: str
    description: str
    version: int
    geometry: oracle.Geometry
    blocks: tuple[GoldenBlock, ...]


@dataclass(frozen=True)
class FolderPlan:
    """One folder of golden vectors: its name under the parity root, a title, its entries."""

    folder: str
    title: str
    drafts: tuple[Draft, ...]


def chain(geometry: oracle.Geometry, specs: Sequence[BlockSpec]) -> tuple[GoldenBlock, ...]:
    """Blocks with the hashes a sequence gives them: a full block with tokens chains from the
    previous hashed block, a partial block or one without tokens has hash 0."""
    blocks = []
    parent = oracle.NO_HASH
    for tokens, n_tokens, recipe in specs:
        block_hash = oracle.NO_HASH
        if tokens is not None:
            tokens = tuple(int(t) for t in tokens)
            if n_tokens == geometry.block_tokens:
                block_hash = parent = oracle.block_hash(parent, tokens)
        blocks.append(GoldenBlock(tokens, block_hash, n_tokens, recipe))
    return tuple(blocks)


def token_ids(seed: int, count: int) -> list[int]:
    """A prompt-like token sequence: BOS, then ids drawn from PCG64's raw output."""
    draws = pcg64_raw(seed, TOKEN_SALT, count) % np.uint64(VOCAB)
    return [BOS, *(int(d) for d in draws[1:])][:count]


def split(tokens: Sequence[int], block_tokens: int) -> list[list[int]]:
    return [list(tokens[i : i + block_tokens]) for i in range(0, len(tokens), block_tokens)]


def shape_words(g: oracle.Geometry) -> str:
    return (
        f"B = {g.block_tokens}, {g.n_layers} layers, {g.n_kv_heads} KV heads, head_dim {g.head_dim}"
    )


def _slabs(g: oracle.Geometry) -> Iterator[tuple[int, int, str, int]]:
    """Every (index, layer, K or V, head) slab, in payload order."""
    index = 0
    for layer in range(g.n_layers):
        for kv in "KV":
            for head in range(g.n_kv_heads):
                yield index, layer, kv, head
                index += 1


def _bits(value: float) -> int:
    """The binary16 bit pattern of an f16-representable value."""
    bits = int(np.array([value], dtype=np.float64).astype(np.float16).view(np.uint16)[0])
    if float(np.uint16(bits).view(np.float16)) != value:
        raise ValueError(f"{value!r} is not exactly representable in f16")
    return bits


# -- f16 and e4m3 values worth pinning -----------------------------------------------------------

# Signed zeros, subnormals (smallest, largest, one in between), the smallest normal, 65504,
# infinities and quiet NaNs with payloads (sNaN is left to a SHOULD case: hardware f16
# conversions may quiet it). 29 entries, so the cycle lands on different dims in every row.
F16_SPECIALS = (
    0x0000, 0x8000, 0x0001, 0x8001, 0x0155, 0x03FF, 0x83FF, 0x0400, 0x8400,
    0x7BFF, 0xFBFF, 0x7BFE, 0x7C00, 0xFC00, 0x7E00, 0xFE00, 0x7E01, 0x7FFF,
    0xFFFF, 0x7F00, 0xFE55, 0x3C00, 0xBC00, 0x3BFF, 0x3C01, 0x3555, 0x1400,
    0x0200, 0x8200,
)  # fmt: skip
F16_INF_NAN = (0x7C00, 0xFC00, 0x7E00, 0xFE00, 0x7E01, 0x7FFF, 0xFFFF, 0x7F55)
# Tiny f16 values only: a slab whose amax is a subnormal has a scale far below 1.
F16_TINY = (0x0000, 0x8000, 0x0001, 0x8001, 0x0002, 0x0155, 0x8155, 0x0200, 0x8200, 0x03FF, 0x83FF)
# 65504 beside small values: these land on e4m3 subnormals, zero, or negative zero (0x80).
F16_WIDE = (
    0x7BFF, 0xFBFF, 0x3C00, 0xBC00, 0x2000, 0xA000, 0x0001, 0x8001,
    0x0000, 0x8000, 0x5BFF, 0xDA00, 0x4900, 0x1400, 0x9400,
)  # fmt: skip


def e4m3_values() -> np.ndarray:
    """Every non-negative finite E4M3 value, ascending (codes 0x00..0x7E)."""
    return oracle.e4m3_codes_to_f32(np.arange(0x7F, dtype=np.uint8)).astype(np.float64)


def e4m3_midpoints() -> list[int]:
    """f16 bits of every value exactly halfway between two adjacent E4M3 values, each sign:
    round to nearest even decides all of them (all are exact in f16)."""
    values = e4m3_values()
    midpoints = (values[:-1] + values[1:]) / 2
    bits: list[int] = []
    for m in midpoints:
        bits += [_bits(float(m)), _bits(-float(m))]
    return bits


def nosat_amaxes() -> list[int]:
    """f16 bits of amax values, one per binade from 1 to 65504, for which amax / (amax / 448)
    exceeds 448 in f32 arithmetic: a writer that checks the quotient against 448 (instead of
    rounding it) saturates or makes NaN; the right answer encodes 0x7E."""
    found = []
    limit = np.float32(448.0)
    for exponent in range(15, 31):  # binary16 biased exponents of 1.0 .. 32768
        for mantissa in range(1024):
            bits = (exponent << 10) | mantissa
            amax = np.float32(np.uint16(bits).view(np.float16))
            scale = np.float32(amax / limit)
            if np.float32(amax / scale) > limit:
                found.append(bits)
                break
    return found


# -- entry builders (any geometry) --------------------------------------------------------------


def _uniform(seed: int, low: float, high: float) -> Recipe:
    return {"pcg64": {"seed": seed, "low": low, "high": high}}


def _fill_of_tail(g: oracle.Geometry, wanted: int) -> int:
    return min(max(1, wanted), g.block_tokens - 1)


def sequence(
    g: oracle.Geometry,
    version: int,
    *,
    name: str = "sequence",
    blocks: int = 3,
    tail: int | None = None,
    seed: int = 11,
    low: float = -4.0,
    high: float = 4.0,
) -> Draft:
    """A prompt cut into blocks: full blocks with chained hashes, then a partial tail."""
    b = g.block_tokens
    if b == 1 or blocks == 1:
        count = blocks * b
    else:
        count = (blocks - 1) * b + _fill_of_tail(g, b // 3 if tail is None else tail)
    chunks = split(token_ids(seed, count), b)
    specs = [(t, len(t), _uniform(seed, low, high)) for t in chunks]
    last = len(chunks[-1])
    plural = "s" if last > 1 else ""
    tail_words = f"a partial tail of {last} token{plural}" if last < b else "no partial tail"
    description = (
        f"A {count}-token prompt in {len(chunks)} blocks ({shape_words(g)}): full blocks with "
        f"chained hashes, {tail_words} (its unfilled positions hold values too, which the "
        f"writer must not export); values uniform in [{low}, {high}) rounded to f16 (pcg64 "
        f"seed {seed}, salt = block index)."
    )
    return Draft(name, description, version, g, chain(g, specs))


def empty(g: oracle.Geometry, version: int, name: str = "empty") -> Draft:
    return Draft(
        name,
        f"n_blocks = 0 ({shape_words(g)}): the 28-byte header and the CRC of it, 32 bytes.",
        version,
        g,
        (),
    )


def unregistered(g: oracle.Geometry, version: int, seed: int = 23) -> Draft:
    """Hash 0 on a full block (exported without registering it), and a prompt shorter than B."""
    b = g.block_tokens
    specs: list[BlockSpec] = [(None, b, _uniform(seed, -2.0, 2.0))]
    words = "a full block with hash 0 (written unregistered)"
    if b > 1:
        short = token_ids(seed, _fill_of_tail(g, b // 2 - 1))
        specs.append((short, len(short), _uniform(seed, -2.0, 2.0)))
        words += f", then a {len(short)}-token prompt's only (partial, unhashed) block"
    return Draft(
        "unregistered",
        f"Blocks without a hash ({shape_words(g)}): {words}; values pcg64 seed {seed} in [-2, 2).",
        version,
        g,
        chain(g, specs),
    )


def f16_specials(g: oracle.Geometry, seed: int = 31) -> Draft:
    """v1: special binary16 values must cross the f32 interface and the export unchanged."""
    b = g.block_tokens
    fill = _fill_of_tail(g, b // 2 + 1) if b > 1 else b
    tokens = token_ids(seed, b + (fill if b > 1 else 0))
    overrides = [
        {"at": [layer, kv, head, i % fill, (3 * i) % g.head_dim], "f16_bits": bits}
        for (i, layer, kv, head), bits in zip(
            _slabs(g), (F16_INF_NAN * g.n_slabs)[: g.n_slabs], strict=True
        )
    ]
    specs: list[BlockSpec] = [(tokens[:b], b, {"f16_bits": list(F16_SPECIALS)})]
    if b > 1:
        specs.append(
            (
                tokens[b:],
                fill,
                {"pcg64_f16_bits": {"seed": seed, "finite": True}, "set": overrides},
            )
        )
    return Draft(
        "f16-specials",
        f"Special binary16 values ({shape_words(g)}): a full block cycling through +-0.0, "
        "subnormals, the smallest normal, +-65504, +-inf and quiet NaNs with payloads; then a "
        "partial block of random finite f16 bit patterns with one inf or quiet NaN per slab. "
        "f16 and f32 pools must export these bits unchanged.",
        1,
        g,
        chain(g, specs),
    )


def f16_all_binades(g: oracle.Geometry, seed: int = 37) -> Draft:
    """v1: random bit patterns reach every f16 exponent, subnormals included."""
    tokens = token_ids(seed, g.block_tokens)
    recipe = {"pcg64_f16_bits": {"seed": seed, "finite": True}}
    return Draft(
        "f16-all-binades",
        f"One full block ({shape_words(g)}) of random finite binary16 bit patterns (pcg64_f16_bits "
        f"seed {seed}): every exponent and sign, subnormals and +-0.0 included.",
        1,
        g,
        chain(g, [(tokens, g.block_tokens, recipe)]),
    )


def zero_slabs(g: oracle.Geometry, seed: int = 41) -> Draft:
    """v2: a slab whose filled positions are all zero has scale 1.0, whatever lies past them."""
    b = g.block_tokens
    fill = _fill_of_tail(g, b // 4) if b > 1 else b
    tokens = token_ids(seed, 2 * b + (fill if b > 1 else 0))
    some = [
        {"at": [layer, kv, head, (i + k) % b, (5 * k + i) % g.head_dim], "value": value}
        for i, layer, kv, head in _slabs(g)
        if i % 2 == 0
        for k, value in enumerate((0.5, -3.0, 1.25))
    ]
    specs: list[BlockSpec] = [
        (tokens[:b], b, {"zeros": {}}),
        (tokens[b : 2 * b], b, {"zeros": {}, "set": some}),
    ]
    words = (
        "an all-zero block, then a block whose even slabs hold three values and odd slabs stay zero"
    )
    if b > 1:
        past = [
            {"at": [layer, kv, head, fill + i % (b - fill), i % g.head_dim], "value": 300.0}
            for i, layer, kv, head in _slabs(g)
        ]
        specs.append((tokens[2 * b :], fill, {"zeros": {}, "set": past}))
        words += (
            f", then a {fill}-token tail that is zero where filled and holds 300.0 past its "
            "fill in every slab (amax over filled positions is 0)"
        )
    return Draft(
        "zero-slabs",
        f"All-zero slabs ({shape_words(g)}): {words}. Every zero slab has scale 1.0 and codes 0.",
        2,
        g,
        chain(g, specs),
    )


def nosat_448(g: oracle.Geometry, seed: int = 43) -> Draft:
    """v2: amax values whose f32 quotient amax / scale exceeds 448 still encode 0x7E."""
    amaxes = nosat_amaxes()
    b = g.block_tokens
    fill = _fill_of_tail(g, b // 2) if b > 1 else b

    def overrides(filled: int, offset: int) -> list[dict[str, Any]]:
        out = []
        for i, layer, kv, head in _slabs(g):
            bits = amaxes[(i + offset) % len(amaxes)] | (0x8000 if i % 2 else 0)
            pos = filled - 1 if offset else (5 * i) % filled
            out.append({"at": [layer, kv, head, pos, (7 * i) % g.head_dim], "f16_bits": bits})
        return out

    tokens = token_ids(seed, b + (fill if b > 1 else 0))
    base = _uniform(seed, -1.0, 1.0)
    specs: list[BlockSpec] = [(tokens[:b], b, {**base, "set": overrides(b, 0)})]
    words = "a full block"
    if b > 1:
        past = [
            {"at": [layer, kv, head, b - 1, i % g.head_dim], "f16_bits": 0x7BFF}
            for i, layer, kv, head in _slabs(g)
        ]
        specs.append((tokens[b:], fill, {**base, "set": overrides(fill, 1) + past}))
        words += f" and a {fill}-token tail (amax at its last filled position, 65504 past the fill)"
    return Draft(
        "nosat-448",
        f"Slabs whose amax / (amax / 448) exceeds 448 in f32 ({shape_words(g)}): {words}; each "
        "slab holds values in [-1, 1) (pcg64) and one amax from "
        + ", ".join(f"{float(np.uint16(a).view(np.float16))!r}" for a in amaxes[:4])
        + ", ... (sign alternating by slab), which must encode 0x7E (0xFE if negative).",
        2,
        g,
        chain(g, specs),
    )


def e4m3_ties(g: oracle.Geometry, seed: int = 47) -> Draft:
    """v2: with amax 448 the scale is exactly 1.0, so every element is its own quotient and
    each midpoint between two E4M3 values is a true tie for round to nearest even."""
    tokens = token_ids(seed, g.block_tokens)
    amax = [
        {"at": [layer, kv, head, 0, 0], "value": -448.0 if i % 2 else 448.0}
        for i, layer, kv, head in _slabs(g)
    ]
    return Draft(
        "e4m3-ties",
        f"Round to nearest even ({shape_words(g)}): one full block cycling through every midpoint "
        "between adjacent E4M3 values (both signs, 2^-10 up to 432), each slab's first "
        "element +-448 so the scale is exactly 1.0.",
        2,
        g,
        chain(g, [(tokens, g.block_tokens, {"f16_bits": e4m3_midpoints(), "set": amax})]),
    )


def specials_v2(g: oracle.Geometry, seed: int = 53) -> Draft:
    """v2: tiny and huge amax, signed zeros and values that vanish next to 65504."""
    b = g.block_tokens
    fill = _fill_of_tail(g, b // 2) if b > 1 else b
    tokens = token_ids(seed, 2 * b + (fill if b > 1 else 0))
    specs: list[BlockSpec] = [
        (tokens[:b], b, {"f16_bits": list(F16_TINY)}),
        (tokens[b : 2 * b], b, {"f16_bits": list(F16_WIDE)}),
    ]
    words = (
        "a full block of f16 subnormals and signed zeros only (amax 0x03FF, a tiny scale), "
        "a full block of +-65504 beside small values (which round to e4m3 subnormals, 0 or "
        "-0 = 0x80)"
    )
    if b > 1:
        specs.append((tokens[2 * b :], fill, {"f16_bits": [0x8000]}))
        words += f", a {fill}-token tail of -0.0 (amax 0: scale 1.0, codes 0x80)"
    return Draft(
        "specials",
        f"Edge values in v2 ({shape_words(g)}): {words}.",
        2,
        g,
        chain(g, specs),
    )


def partial_tail_amax(g: oracle.Geometry, version: int = 2, seed: int = 59) -> Draft:
    """A tail whose unfilled positions hold larger values than its filled ones: amax (v2) and
    the exported bytes (v1, v2) depend on the filled positions only."""
    b = g.block_tokens
    if b == 1:
        raise ValueError("a partial tail needs block_tokens of at least 2")
    fill = _fill_of_tail(g, b // 3)
    tokens = token_ids(seed, b + fill)
    step = min(1.0, 2.0 ** math.floor(math.log2(30000 / g.n_elements)))
    past = [
        {"at": [layer, kv, head, b - 1, i % g.head_dim], "f16_bits": 0xFBFF if i % 2 else 0x7BFF}
        for i, layer, kv, head in _slabs(g)
    ]
    specs: list[BlockSpec] = [
        (tokens[:b], b, _uniform(seed, -4.0, 4.0)),
        (tokens[b:], fill, {"ramp": {"start": 0.0, "step": step}, "set": past}),
    ]
    what = "the scale comes from the filled positions only and " if version == 2 else ""
    return Draft(
        "partial-tail-amax",
        f"A full block (pcg64 seed {seed}) and a {fill}-token tail ({shape_words(g)}) holding an "
        f"increasing ramp (step {step}), so every slab's unfilled positions exceed its filled "
        f"ones, plus +-65504 at the last position: {what}the unfilled positions export as zero "
        "bytes.",
        version,
        g,
        chain(g, specs),
    )


def spec_example() -> Draft:
    """The spec's 60-byte worked example (v1)."""
    g = oracle.Geometry(2, 1, 1, 2)
    values = {"literal": [[[[[1, 2], [3, 4]]], [[[0.5, -1], [0, 0.25]]]]]}
    return Draft(
        "spec-example",
        "The spec's worked example (B = 2, L = 1, Hkv = 1, D = 2): one full block of tokens "
        "[1, 2], K = [[1, 2], [3, 4]], V = [[0.5, -1], [0, 0.25]]; 60 bytes, hash "
        "0xA91AB0C1027B9366, crc32c 0x4F0B541C.",
        1,
        g,
        chain(g, [([1, 2], 2, values)]),
    )


def drafts_for(geometry: oracle.Geometry, version: int, blocks: int = 3) -> list[Draft]:
    """The entries `new` writes for an engine's geometry and version."""
    b = geometry.block_tokens
    drafts = [sequence(geometry, version, blocks=blocks), empty(geometry, version)]
    drafts.append(unregistered(geometry, version))
    if version == 1:
        drafts += [f16_specials(geometry), f16_all_binades(geometry)]
        if b > 1:
            drafts.append(partial_tail_amax(geometry, version=1))
    else:
        drafts += [zero_slabs(geometry), nosat_448(geometry), e4m3_ties(geometry)]
        drafts.append(specials_v2(geometry))
        if b > 1:
            drafts.append(partial_tail_amax(geometry))
    return drafts
