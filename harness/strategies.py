"""Hypothesis strategies for the suite's fuzzing, all in one place.

They draw *case specs*: the same dictionaries a YAML case file holds (docs/cases.md). A drawn
spec is built and checked by the very case kinds the corpus uses, and a failing one prints as
a case ready to commit to cases/regressions/.
"""

from __future__ import annotations

import functools
from typing import Any

from hypothesis import strategies as st

from . import oracle

U32_MAX = (1 << 32) - 1
LARGE_BLOCK = 1 << 18  # elements in a block past which an envelope draws at most two
U64_MAX = (1 << 64) - 1
EDGE_TOKENS = (0, 1, 65535, 65536, 151935, 1 << 31, U32_MAX)
EDGE_U32 = (0, 1, 2, 3, 4, 255, 256, 65535, 65536, 1 << 30, (1 << 30) + 1, 1 << 31, U32_MAX)
# f16 patterns: -0.0, subnormals, the largest finite, the smallest normal, infinities and quiet
# NaNs with payloads. Signalling NaNs are left out: carrying them is a SHOULD (V1-F16-SNAN).
SPECIAL_F16 = (0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x7BFF, 0xFBFF, 0x3C00, 0xBC00)
NON_FINITE_F16 = (0x7C00, 0xFC00, 0x7E00, 0xFE00, 0x7E55, 0xFFFF)


def geometries(
    realistic: bool = True, fixed: oracle.Geometry | None = None
) -> st.SearchStrategy[list[int]]:
    """[B, L, Hkv, D]: small by default, sometimes an engine's real shape (B = 16, D 64/128);
    `fixed`, the one geometry an implementation serves, when it serves one."""
    if fixed is not None:
        return st.just([fixed.block_tokens, fixed.n_layers, fixed.n_kv_heads, fixed.head_dim])
    return _drawn_geometries(realistic)


# Each strategy of given arguments is built once (functools.cache): a new strategy object is
# validated again at its first draw, which cost a whole conformance run over a second of CPU,
# for the same examples.
@functools.cache
def _drawn_geometries(realistic: bool) -> st.SearchStrategy[list[int]]:
    small = st.lists(st.integers(1, 6), min_size=4, max_size=4).map(
        lambda dims: [dims[0], dims[1] % 3 + 1, dims[2] % 3 + 1, dims[3] * 2]
    )
    if not realistic:
        return small
    engine = st.tuples(st.integers(1, 4), st.integers(1, 8), st.sampled_from([64, 128])).map(
        lambda t: [16, t[0], t[1], t[2]]
    )
    return st.one_of(small, small, small, engine)


@functools.cache
def tokens(min_size: int = 0, max_size: int = 64) -> st.SearchStrategy[list[int]]:
    """Token ids over the full u32 range, with the edges of narrower types well represented."""
    token = st.one_of(st.integers(0, U32_MAX), st.sampled_from(EDGE_TOKENS), st.integers(0, 151935))
    return st.lists(token, min_size=min_size, max_size=max_size)


@functools.cache
def values_recipes(version: int) -> st.SearchStrategy[dict[str, Any]]:
    """A values recipe (tlkv_conformance.values): finite for v2, specials allowed for v1."""
    seed = st.integers(0, 2**32 - 1)
    ranges = st.sampled_from([(-1.0, 1.0), (-448.0, 448.0), (-0.01, 0.01), (0.0, 60000.0)])
    patterns = SPECIAL_F16 + (NON_FINITE_F16 if version == 1 else ())
    bits = st.lists(
        st.one_of(st.sampled_from(patterns), st.integers(0, 0xFFFF)), min_size=1, max_size=16
    )
    if version == 2:
        bits = bits.map(lambda bs: [b if (b & 0x7C00) != 0x7C00 else b & 0xFBFF for b in bs])
    else:
        bits = bits.map(lambda bs: [quiet_f16(b) for b in bs])
    return st.one_of(
        st.builds(lambda s, r: {"pcg64": {"seed": s, "low": r[0], "high": r[1]}}, seed, ranges),
        # Finite: random bits would hold signalling NaNs; the lists above carry the others.
        st.builds(lambda s: {"pcg64_f16_bits": {"seed": s, "finite": True}}, seed),
        bits.map(lambda b: {"f16_bits": b}),
        st.just({"zeros": True}),
    )


def quiet_f16(bits: int) -> int:
    """A signalling-NaN f16 pattern made quiet (payload kept); any other pattern as it is."""
    if bits & 0x7C00 == 0x7C00 and bits & 0x03FF and not bits & 0x0200:
        return bits | 0x0200
    return bits


def block_specs(geometry: list[int], version: int) -> st.SearchStrategy[dict[str, Any]]:
    """One block: full with tokens (hashed), full without a hash, or partial."""
    return _block_specs(tuple(geometry), version)


@functools.cache
def _block_kinds(block_tokens: int) -> st.SearchStrategy[str]:
    kinds = ["full", "full", "unhashed", "partial"] if block_tokens > 1 else ["full"]
    return st.sampled_from(kinds)


@functools.cache
@st.composite
def _block_specs(draw: st.DrawFn, geometry: tuple[int, ...], version: int) -> dict[str, Any]:
    b = geometry[0]
    kind = draw(_block_kinds(b))
    spec: dict[str, Any] = {"values": draw(values_recipes(version))}
    if kind == "full":
        spec["tokens"] = draw(tokens(b, b))
    elif kind == "unhashed":
        spec.update(n_tokens=b, hash=0)
    else:
        spec["tokens"] = draw(tokens(1, b - 1))
    return spec


@st.composite
def envelope_specs(
    draw: st.DrawFn,
    version: int | None = None,
    min_blocks: int = 0,
    max_blocks: int = 3,
    realistic: bool = True,
    fixed: oracle.Geometry | None = None,
) -> dict[str, Any]:
    """{build: {geometry, version, blocks}}, an envelope the oracle encodes (at `fixed`, the
    geometry under test, when the implementation serves one)."""
    version = version or draw(st.sampled_from(sorted(oracle.KNOWN_VERSIONS)))
    geometry = draw(geometries(realistic, fixed))
    if oracle.Geometry(*geometry).n_elements > LARGE_BLOCK:
        max_blocks = min(max_blocks, 2)  # a real geometry's blocks are MiBs each
    blocks = draw(
        st.lists(block_specs(geometry, version), min_size=min_blocks, max_size=max_blocks)
    )
    return {"build": {"geometry": geometry, "version": version, "blocks": blocks}}


@st.composite
def mutation_lists(
    draw: st.DrawFn, data: bytes, envelope: dict[str, Any], reseal: bool
) -> list[dict[str, Any]]:
    """Structured mutations of an envelope whose bytes are `data` (docs/cases.md), biased to
    the values each reader rule turns on: header edges, fills around B, the 32-bit wrap."""
    build = envelope["build"]
    size = len(data) - (oracle.CRC_SIZE if reseal else 0)
    n_records = len(build["blocks"])
    block_tokens = build["geometry"][0]
    # Offsets in the header and the first record's head are where most rules live.
    offset = st.one_of(st.integers(0, min(size, 40) - 1), st.integers(0, size - 1))
    options = [
        st.sampled_from(list(oracle.HEADER_FIELDS.values())).flatmap(
            lambda field: _header_edits(field, build)
        ),
        st.builds(lambda o, b: {"flip_bit": {"offset": o, "bit": b}}, offset, st.integers(0, 7)),
        st.builds(lambda n: {"truncate": n}, st.integers(1, max(1, size - 1))),
        st.builds(lambda n: {"append": {"zeros": n}}, st.integers(1, 64)),
        st.builds(
            lambda o, b: {"set_bytes": {"offset": o, "hex": b.hex()}},
            offset,
            st.binary(min_size=1, max_size=8),
        ),
    ]
    if n_records:
        fills = [0, 1, block_tokens - 1, block_tokens, block_tokens + 1, U32_MAX]
        options.append(
            st.builds(
                lambda i, edit: {"set_block": {"block": i, **edit}},
                st.integers(0, n_records - 1),
                st.one_of(
                    st.sampled_from(fills).map(lambda v: {"field": "n_tokens", "value": v}),
                    st.one_of(st.sampled_from([0, 1]), st.integers(0, U64_MAX)).map(
                        lambda v: {"field": "block_hash", "value": v}
                    ),
                ),
            )
        )
        options.append(_splices(envelope, n_records))
    if not reseal:
        options.append(st.sampled_from(CRC_FAULTS).map(lambda v: {"set_crc": v}))
    # Half the time one fault aimed at one rule (so a reader that drops only that rule is
    # seen), a quarter any mix of edits, a quarter none (then the pool's geometry, drawn by
    # pool_geometries, is the only possible fault).
    plan = draw(st.sampled_from(["rule", "rule", "mix", "none"]))
    if plan == "none":
        return []
    if plan == "rule":
        faults = _rule_faults(data, build, reseal)
        return [draw(st.sampled_from(faults).flatmap(lambda fault: fault))]
    mutations = draw(st.lists(st.one_of(*options), min_size=1, max_size=3))
    # Edits first, then changes of length, so every offset means what it meant when drawn.
    return sorted(mutations, key=lambda m: next(iter(m)) in ("truncate", "truncate_to", "append"))


def _rule_faults(
    data: bytes, build: dict[str, Any], reseal: bool
) -> list[st.SearchStrategy[dict[str, Any]]]:
    """Edits aimed at one reader rule each, as a YAML rejection case would make them."""
    records = oracle.decode(data).records
    b = build["geometry"][0]
    magic = oracle.HEADER_FIELDS["magic"]
    faults = [
        st.integers(0, 31).map(lambda n: {"truncate_to": n}),
        st.builds(
            lambda offset, byte: {"set_bytes": {"offset": offset, "hex": f"{byte:02x}"}},
            st.integers(0, magic.size - 1),
            st.integers(0, 255).filter(lambda v: v not in oracle.MAGIC),
        ),
        st.sampled_from([0, 3, 256, 257, 258, 0xFFFF]).map(
            lambda v: {"set_header": {"field": "version", "value": v}}
        ),
        st.sampled_from([0, 2, 4, 256, 259, 3 if build["version"] == 1 else 1]).map(
            lambda v: {"set_header": {"field": "dtype", "value": v}}
        ),
        st.sampled_from(
            [v for v in (_wrapping_count(build), U32_MAX, len(records) + 1) if v is not None]
        ).map(lambda v: {"set_header": {"field": "n_blocks", "value": v}}),
    ]
    unhashed = [r.index for r in records if r.block_hash == 0]
    hashed = [r.index for r in records if r.block_hash != 0]
    partial = [r.index for r in records if r.n_tokens < b]
    if unhashed:  # a bad fill alone (a hashed block would break the hash/fill rule too)
        faults.append(
            st.builds(
                lambda i, v: {"set_block": {"block": i, "field": "n_tokens", "value": v}},
                st.sampled_from(unhashed),
                st.sampled_from([0, b + 1, U32_MAX]),
            )
        )
    if partial:
        faults.append(
            st.builds(
                lambda i, v: {"set_block": {"block": i, "field": "block_hash", "value": v}},
                st.sampled_from(partial),
                st.integers(1, U64_MAX),
            )
        )
    if hashed and b > 1:
        faults.append(
            st.builds(
                lambda i, v: {"set_block": {"block": i, "field": "n_tokens", "value": v}},
                st.sampled_from(hashed),
                st.integers(1, b - 1),
            )
        )
    if not reseal:
        faults.append(st.sampled_from(CRC_FAULTS).map(lambda v: {"set_crc": v}))
    return faults


CRC_FAULTS = (
    "crc32-ieee",
    "no-final-xor",
    "no-initial-inversion",
    "records-only",
    "big-endian",
    "zero",
)


def _wrapping_count(build: dict[str, Any]) -> int | None:
    """A block count for which 28 + n * (12 + P) + 4 wraps 32-bit arithmetic to the real
    length (None when no u32 count does)."""
    record = oracle.Geometry(*build["geometry"]).record_size(build["version"])
    step = (1 << 32) >> min(32, (record & -record).bit_length() - 1)
    count = len(build["blocks"]) + step
    return count if count <= U32_MAX else None


def _header_edits(field: oracle.Field, build: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    top = (1 << (8 * field.size)) - 1
    n = len(build["blocks"])
    edges: dict[str, list[int | None]] = {
        "version": [0, 1, 2, 3, 256, 257, 258, top],
        "dtype": [0, 1, 2, 3, 256, 259, top],
        "n_blocks": [0, max(0, n - 1), n + 1, 65537, 1 << 30, _wrapping_count(build), top],
    }
    default = [0, 1, 2, 16, 17, 1 << 16, 1 << 31, top]
    if field.name in oracle.GEOMETRY_FIELDS:
        value = build["geometry"][list(oracle.GEOMETRY_FIELDS).index(field.name)]
        default = [0, 1, value - 1, value + 1, value * 2, top]
    choices = [v for v in edges.get(field.name, default) if v is not None and 0 <= v <= top]
    value = st.one_of(st.sampled_from(choices), st.integers(0, top))
    return value.map(lambda v: {"set_header": {"field": field.name, "value": v}})


def other_geometries(geometry: list[int]) -> st.SearchStrategy[list[int]]:
    """The geometry itself, or (a quarter of the time) one differing in one dimension: the
    pool for an envelope (or, for an implementation of one geometry, the envelope for its
    pool)."""

    def changed(index: int, delta: int) -> list[int]:
        dims = list(geometry)
        dims[index] = max(1, dims[index] + delta) if dims[index] + delta != dims[index] else 1
        return dims if dims != geometry else [*dims[:index], dims[index] + 1, *dims[index + 1 :]]

    other = st.builds(changed, st.integers(0, 3), st.sampled_from([-1, 1, 2]))
    return st.one_of(
        st.just(list(geometry)), st.just(list(geometry)), st.just(list(geometry)), other
    )


def _splices(envelope: dict[str, Any], n_records: int) -> st.SearchStrategy[dict[str, Any]]:
    build = envelope["build"]
    donor = st.lists(block_specs(build["geometry"], build["version"]), min_size=1, max_size=2).map(
        lambda blocks: {"build": {**build, "blocks": blocks}}
    )
    return st.builds(
        lambda i, d, j: {
            "splice": {"block": i, "from": d, "from_block": min(j, len(d["build"]["blocks"]) - 1)}
        },
        st.integers(0, n_records - 1),
        donor,
        st.integers(0, 1),
    )


def random_envelopes() -> st.SearchStrategy[dict[str, Any]]:
    """Arbitrary bytes, sometimes starting with a plausible header: {hex: ...}."""
    header = st.builds(
        lambda v, n, dims: oracle.encode_header(oracle.Geometry(*dims), v, n),
        st.sampled_from(sorted(oracle.KNOWN_VERSIONS)),
        st.one_of(st.integers(0, 3), st.sampled_from([65537, 1 << 30, U32_MAX])),
        geometries(realistic=False),
    )
    return st.tuples(st.one_of(st.just(b""), header), st.binary(max_size=96)).map(
        lambda parts: {"hex": (parts[0] + parts[1]).hex()}
    )
