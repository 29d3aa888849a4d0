"""Build, rebuild and check the golden vectors under parity/ (docs/golden.md).

    tlkv-conformance golden            # rewrite the standard set, rebuild other folders
    tlkv-conformance golden --check    # regenerate into a temporary folder and compare
    tlkv-conformance golden new --name myengine --block-tokens 16 --n-layers 4 \
        --n-kv-heads 8 --head-dim 128 --version 2

(`python -m tlkv_conformance.generators.golden` is the same.)

The manifest is the source of truth. Every blob is rebuilt from its manifest entry through the
oracle (tlkv_conformance.golden.GoldenEntry.encode), and every value comes from a
tlkv_conformance.values recipe built on PCG64's raw output, integer and float64 arithmetic and
IEEE conversions, so the bytes are the same on any machine and numpy version. The standard set
(kv.wire.v1, kv.wire.v2) is also defined here, and --check insists its manifests equal that
definition byte for byte.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import shutil
import sys
import tempfile
import textwrap
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tlkv_conformance import corpus, oracle
from tlkv_conformance.golden import (
    MANIFEST_FILE,
    MANIFEST_FORMAT,
    NAME_PATTERN,
    GoldenBlock,
    GoldenEntry,
    ManifestError,
    load_manifest,
    manifest_folders,
)
from tlkv_conformance.values import pcg64_raw

DEFAULT_PARITY_ROOT = corpus.parity_dir()

VOCAB = 128_256  # a Llama-3-sized vocabulary, so token ids look like real ones
BOS = 128_000
TOKEN_SALT = 0x70C5  # keeps token draws apart from value draws that share a seed
WRAP = 100

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


def _shape(g: oracle.Geometry) -> str:
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
        f"A {count}-token prompt in {len(chunks)} blocks ({_shape(g)}): full blocks with "
        f"chained hashes, {tail_words} (its unfilled positions hold values too, which the "
        f"writer must not export); values uniform in [{low}, {high}) rounded to f16 (pcg64 "
        f"seed {seed}, salt = block index)."
    )
    return Draft(name, description, version, g, chain(g, specs))


def empty(g: oracle.Geometry, version: int, name: str = "empty") -> Draft:
    return Draft(
        name,
        f"n_blocks = 0 ({_shape(g)}): the 28-byte header and the CRC of it, 32 bytes.",
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
        f"Blocks without a hash ({_shape(g)}): {words}; values pcg64 seed {seed} in [-2, 2).",
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
        f"Special binary16 values ({_shape(g)}): a full block cycling through +-0.0, "
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
        f"One full block ({_shape(g)}) of random finite binary16 bit patterns (pcg64_f16_bits "
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
        f"All-zero slabs ({_shape(g)}): {words}. Every zero slab has scale 1.0 and codes 0.",
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
        f"Slabs whose amax / (amax / 448) exceeds 448 in f32 ({_shape(g)}): {words}; each "
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
        f"Round to nearest even ({_shape(g)}): one full block cycling through every midpoint "
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
        f"Edge values in v2 ({_shape(g)}): {words}.",
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
        f"A full block (pcg64 seed {seed}) and a {fill}-token tail ({_shape(g)}) holding an "
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


D128 = oracle.Geometry(block_tokens=16, n_layers=2, n_kv_heads=2, head_dim=128)
D64 = oracle.Geometry(block_tokens=16, n_layers=3, n_kv_heads=4, head_dim=64)
SMALL = oracle.Geometry(block_tokens=16, n_layers=2, n_kv_heads=2, head_dim=64)
ONE_LAYER = oracle.Geometry(block_tokens=16, n_layers=1, n_kv_heads=2, head_dim=64)
WIDE_HEADS = oracle.Geometry(block_tokens=16, n_layers=2, n_kv_heads=4, head_dim=64)


def standard_set() -> list[FolderPlan]:
    """The committed golden vectors (kept small: all blobs together well under 2 MiB)."""
    v1 = FolderPlan(
        "kv.wire.v1",
        "TLKV envelope format v1 (f16)",
        (
            spec_example(),
            empty(SMALL, 1),
            sequence(D128, 1, name="seq-d128", blocks=3, tail=1, seed=11),
            sequence(D64, 1, name="seq-d64", blocks=3, tail=15, seed=13, low=-0.5, high=0.5),
            unregistered(SMALL, 1),
            f16_specials(SMALL),
            f16_all_binades(D128),
        ),
    )
    v2 = FolderPlan(
        "kv.wire.v2",
        "TLKV envelope format v2 (fp8 e4m3 with per-slab f32 scales)",
        (
            empty(SMALL, 2),
            sequence(D128, 2, name="seq-d128", blocks=3, tail=1, seed=11),
            sequence(D64, 2, name="seq-d64", blocks=3, tail=15, seed=13, low=-0.5, high=0.5),
            unregistered(SMALL, 2),
            zero_slabs(SMALL),
            nosat_448(WIDE_HEADS),
            e4m3_ties(ONE_LAYER),
            specials_v2(ONE_LAYER),
            partial_tail_amax(D128),
        ),
    )
    return [v1, v2]


# -- manifests: writing ------------------------------------------------------------------------

_PLAIN = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_YAML_WORDS = frozenset({"y", "n", "yes", "no", "on", "off", "true", "false", "null"})


def _float(value: float) -> str:
    """A float YAML 1.1 reads back exactly (PyYAML needs a '.' and a signed exponent)."""
    if math.isnan(value):
        return ".nan"
    if math.isinf(value):
        return ".inf" if value > 0 else "-.inf"
    mantissa, _, exponent = repr(float(value)).partition("e")
    if "." not in mantissa:
        mantissa += ".0"
    if not exponent:
        return mantissa
    return f"{mantissa}e{exponent if exponent[0] in '+-' else '+' + exponent}"


def _flow(value: Any, hex_ints: bool = False) -> str:
    """One value in YAML flow style; ints under an f16_bits key in hex."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_flow(v, k == 'f16_bits')}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_flow(v, hex_ints) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"{value:#06x}" if hex_ints else str(value)
    if isinstance(value, float):
        return _float(value)
    if value is None:
        return "null"
    text = str(value)
    if text and set(text) <= _PLAIN and not text[0].isdigit() and text.lower() not in _YAML_WORDS:
        return text
    return json.dumps(text)


def _wrapped(prefix: str, flow: str, indent: int) -> list[str]:
    """`prefix + flow`, broken after commas so lines stay near WRAP columns."""
    first, *pieces = flow.split(", ")
    lines: list[str] = []
    current = prefix + first
    for piece in pieces:
        if len(current) + 2 + len(piece) >= WRAP:
            lines.append(current + ",")
            current = " " * indent + piece
        else:
            current += ", " + piece
    return [*lines, current]


def render_manifest(title: str, entries: Sequence[GoldenEntry]) -> str:
    """A manifest's text: one canonical form, so regenerating it is byte for byte."""
    lines = [
        "# Golden TLKV envelopes: how each blob was made and what its bytes must be.",
        "# See docs/golden.md. Written by `tlkv-conformance golden`, which rebuilds every",
        "# blob from these entries; `tlkv-conformance golden --check` compares them.",
        f"format: {MANIFEST_FORMAT}",
        f"title: {json.dumps(title)}",
        "entries:" if entries else "entries: []",
    ]
    for e in entries:
        if "  " in e.description or "\n" in e.description:
            raise ValueError(f"{e.name}: a description is one line with single spaces")
        lines += [f"- name: {e.name}", f"  file: {e.file}", "  description: >-"]
        lines += textwrap.wrap(
            e.description, WRAP, initial_indent="    ", subsequent_indent="    ",
            break_on_hyphens=False,
        )  # fmt: skip
        lines += [
            f"  version: {e.version}",
            f"  geometry: {_flow(e.geometry.as_dict())}",
            "  blocks:" if e.blocks else "  blocks: []",
        ]
        for b in e.blocks:
            tokens = "null" if b.tokens is None else _flow(list(b.tokens))
            lines += _wrapped("  - tokens: ", tokens, 6)
            lines += [f"    hash: {b.block_hash:#018x}", f"    n_tokens: {b.n_tokens}"]
            lines += _wrapped("    values: ", _flow(b.values), 6)
        lines += [
            f"  size: {e.size}",
            f'  sha256: "{e.sha256}"',
            f"  crc32c: {e.crc32c:#010x}",
        ]
    return "\n".join(lines) + "\n"


def _sealed(entry: GoldenEntry) -> tuple[GoldenEntry, bytes]:
    """The entry with its blob's facts filled in, and the blob."""
    data = entry.encode()
    trailer = int.from_bytes(data[-oracle.CRC_SIZE :], "little")
    facts = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest(), "crc32c": trailer}
    return dataclasses.replace(entry, **facts), data


def _entry_of(draft: Draft, folder: Path) -> GoldenEntry:
    if not NAME_PATTERN.match(draft.name):
        raise ValueError(f"entry name {draft.name!r} must match {NAME_PATTERN.pattern}")
    return GoldenEntry(
        folder=folder,
        display_folder=folder.name,
        name=draft.name,
        file=f"{draft.name}.bin",
        description=draft.description,
        version=draft.version,
        geometry=draft.geometry,
        blocks=draft.blocks,
        size=0,
        sha256="",
        crc32c=0,
    )


def _same_block(a: GoldenBlock, b: GoldenBlock) -> bool:
    return (a.tokens, a.block_hash, a.n_tokens, a.values) == (
        b.tokens,
        b.block_hash,
        b.n_tokens,
        b.values,
    )


def write_folder(folder: Path, title: str, entries: Sequence[GoldenEntry]) -> list[GoldenEntry]:
    """Build every blob, write blobs and manifest, drop blobs the manifest no longer lists.

    The manifest is then read back and every blob rebuilt from it, so what is written is
    exactly what the manifest reproduces.
    """
    folder.mkdir(parents=True, exist_ok=True)
    sealed = [_sealed(dataclasses.replace(e, folder=folder)) for e in entries]
    for entry, data in sealed:
        (folder / entry.file).write_bytes(data)
    (folder / MANIFEST_FILE).write_text(
        render_manifest(title, [e for e, _ in sealed]), encoding="utf-8"
    )
    listed = {e.file for e, _ in sealed}
    for stale in folder.glob("*.bin"):
        if stale.name not in listed:
            stale.unlink()
    reread = load_manifest(folder / MANIFEST_FILE)
    for (written, data), again in zip(sealed, reread.entries, strict=True):
        same = (
            written.name == again.name
            and written.description == again.description
            and written.version == again.version
            and written.geometry == again.geometry
            and len(written.blocks) == len(again.blocks)
            and all(map(_same_block, written.blocks, again.blocks))
        )
        if not same or again.encode() != data or again.problems(data):
            raise RuntimeError(f"{folder / MANIFEST_FILE}: {written.name} does not read back")
    return list(reread.entries)


def write_plan(plan: FolderPlan, root: Path) -> list[GoldenEntry]:
    folder = root / plan.folder
    return write_folder(folder, plan.title, [_entry_of(d, folder) for d in plan.drafts])


def rebuild_folder(source: Path, target: Path) -> list[GoldenEntry]:
    """Rebuild a folder's blobs and manifest from its manifest alone, into `target`."""
    manifest = load_manifest(source / MANIFEST_FILE)
    return write_folder(target, manifest.title, list(manifest.entries))


# -- commands ------------------------------------------------------------------------------------


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _first_difference(a: bytes, b: bytes) -> int:
    pairs = enumerate(zip(a, b, strict=False))
    return next((i for i, (x, y) in pairs if x != y), min(len(a), len(b)))


def _compare_folder(committed: Path, regenerated: Path) -> str | None:
    """The first file that differs, as a message (None when the folders match)."""
    names = sorted(
        {p.name for p in committed.glob("*.bin")} | {p.name for p in regenerated.glob("*.bin")}
    )
    for name in [*names, MANIFEST_FILE]:  # a blob's difference says more than its digest's
        mine, theirs = committed / name, regenerated / name
        if not mine.exists():
            return f"{_shown(mine)}: missing (the regeneration writes it)"
        if not theirs.exists():
            return f"{_shown(mine)}: not listed in the manifest (a stray blob)"
        a, b = mine.read_bytes(), theirs.read_bytes()
        if a != b:
            return (
                f"{_shown(mine)}: differs from its regeneration ({len(a)} bytes committed, "
                f"{len(b)} regenerated; first difference at byte {_first_difference(a, b)})"
            )
    return None


def check(root: Path) -> str | None:
    """Regenerate everything into a temporary folder and compare; the first problem or None."""
    plans = {plan.folder: plan for plan in standard_set()}
    with tempfile.TemporaryDirectory(prefix="tlkv-golden-") as tmp:
        scratch = Path(tmp)
        # The suite's own root must hold the standard set; another root holds what it holds.
        required = plans if root.resolve() == DEFAULT_PARITY_ROOT.resolve() else {}
        folders = sorted({*(root / name for name in required), *manifest_folders(root)})
        for folder in folders:
            try:
                if folder.name in plans:
                    write_plan(plans[folder.name], scratch)
                else:
                    rebuild_folder(folder, scratch / folder.name)
            except (ManifestError, ValueError) as exc:
                return f"{_shown(folder)}: cannot regenerate: {exc}"
            problem = _compare_folder(folder, scratch / folder.name)
            if problem:
                return problem
    return None


def regenerate(root: Path) -> list[GoldenEntry]:
    """Rewrite the standard set from its definition and every other folder from its manifest."""
    written: list[GoldenEntry] = []
    plans = standard_set()
    for plan in plans:
        written += write_plan(plan, root)
    standard = {plan.folder for plan in plans}
    for folder in manifest_folders(root):
        if folder.name not in standard:
            with tempfile.TemporaryDirectory(prefix="tlkv-golden-") as tmp:
                rebuilt = rebuild_folder(folder, Path(tmp) / folder.name)
                for path in Path(tmp, folder.name).iterdir():
                    shutil.copyfile(path, folder / path.name)
                for stale in folder.glob("*.bin"):
                    if not Path(tmp, folder.name, stale.name).exists():
                        stale.unlink()
            written += [dataclasses.replace(e, folder=folder) for e in rebuilt]
    return written


def new_folder(
    out: Path, name: str, geometry: oracle.Geometry, version: int, blocks: int
) -> list[GoldenEntry]:
    title = f"{name}: TLKV envelope format v{version}, {_shape(geometry)}"
    drafts = drafts_for(geometry, version, blocks)
    return write_folder(out, title, [_entry_of(d, out) for d in drafts])


def chunk_warning(entries: Sequence[GoldenEntry]) -> str | None:
    """One line when some blob's blocks are over 4 MiB each as a one-block envelope: a replay
    over gRPC sends every block in a KvChunk of its own, and such a block does not fit one."""
    over = [
        e
        for e in entries
        if e.n_blocks and e.geometry.envelope_size(1, e.version) > oracle.MAX_CHUNK_PAYLOAD
    ]
    if not over:
        return None
    first = over[0]
    size = first.geometry.envelope_size(1, first.version)
    others = f" and {len(over) - 1} more" if len(over) > 1 else ""
    return (
        f"warning: {first.file}{others}: a block of {first.geometry} in v{first.version} is "
        f"{size:,} bytes as a one-block envelope, over the 4 MiB of a KvChunk: it cannot cross "
        "a single KvChunk over gRPC, so these blobs replay through ctypes or py, not over gRPC"
    )


def _warn_of_chunks(entries: Sequence[GoldenEntry]) -> None:
    warning = chunk_warning(entries)
    if warning:
        print(warning, file=sys.stderr)


def _summary(entries: Sequence[GoldenEntry]) -> str:
    total = sum(e.size for e in entries)
    return f"{len(entries)} blobs, {total} bytes ({total / 1024:.1f} KiB)"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tlkv_conformance.generators.golden",
        description="Build, rebuild or check the golden TLKV envelopes (docs/golden.md).",
    )
    parser.add_argument(
        "--root",
        type=Path,
        default=DEFAULT_PARITY_ROOT,
        help="the parity root holding one folder per manifest (default: the suite's parity/)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="regenerate into a temporary folder and compare with the files on disk",
    )
    commands = parser.add_subparsers(dest="command")
    new = commands.add_parser(
        "new",
        help="write a folder of golden vectors for your engine's geometry and version",
        description="Write a new folder of golden vectors (blobs and manifest) for a geometry.",
    )
    new.add_argument("--name", required=True, help="a short name: lower case, digits, . _ -")
    for flag, meaning in (
        ("--block-tokens", "B, token positions per block"),
        ("--n-layers", "L, layers"),
        ("--n-kv-heads", "Hkv, KV heads"),
        ("--head-dim", "D, head dimension"),
    ):
        new.add_argument(flag, type=int, required=True, help=meaning)
    new.add_argument(
        "--version",
        type=int,
        choices=sorted(oracle.KNOWN_VERSIONS),
        required=True,
        help="envelope format",
    )
    new.add_argument(
        "--blocks", type=int, default=3, help="blocks in the sequence entry (default 3)"
    )
    new.add_argument("--out", type=Path, help="the folder (default: ROOT/kv.wire.vV-NAME)")
    new.add_argument("--force", action="store_true", help="overwrite an existing folder")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    root: Path = args.root
    if args.command == "new":
        return _new(args, root)
    if args.check:
        problem = check(root)
        if problem:
            print(f"golden vectors out of date: {problem}", file=sys.stderr)
            print("rebuild with: python -m tlkv_conformance.generators.golden", file=sys.stderr)
            return 1
        entries = [e for f in manifest_folders(root) for e in load_manifest(f / MANIFEST_FILE)]
        print(f"golden vectors match their manifests: {_summary(entries)} under {_shown(root)}")
        return 0
    written = regenerate(root)
    _warn_of_chunks(written)
    print(f"wrote {_summary(written)} under {_shown(root)}")
    return 0


def _new(args: argparse.Namespace, root: Path) -> int:
    if not NAME_PATTERN.match(args.name):
        print(f"--name {args.name!r}: use lower case letters, digits, . _ -", file=sys.stderr)
        return 2
    try:
        geometry = oracle.Geometry(args.block_tokens, args.n_layers, args.n_kv_heads, args.head_dim)
    except ValueError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    if args.blocks < 1:
        print("--blocks must be at least 1", file=sys.stderr)
        return 2
    out: Path = args.out or root / f"kv.wire.v{args.version}-{args.name}"
    if out.exists() and any(out.iterdir()) and not args.force:
        print(f"{_shown(out)} exists; pick another --name or --out, or --force", file=sys.stderr)
        return 2
    entries = new_folder(out, args.name, geometry, args.version, args.blocks)
    _warn_of_chunks(entries)
    for entry in entries:
        blocks = f"{entry.n_blocks} block{'' if entry.n_blocks == 1 else 's'}"
        print(f"  {entry.file:24} {entry.size:>10} bytes  {blocks}")
    print(f"wrote {_summary(entries)} to {_shown(out)}")
    if out.parent.resolve() != DEFAULT_PARITY_ROOT.resolve():
        print(f"replay them with: pytest conformance/test_parity.py --parity-root {out.parent}")
    else:
        print("replay them with: pytest conformance/test_parity.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
