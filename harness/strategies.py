"""Hypothesis strategies for the suite's fuzzing, all in one place.

They draw *case specs*: the same dictionaries a YAML case file holds (docs/cases.md). A drawn
spec is built and checked by the very case kinds the corpus uses, and a failing one prints as
a case ready to commit to cases/regressions/.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from . import oracle

U32_MAX = (1 << 32) - 1
U64_MAX = (1 << 64) - 1
EDGE_TOKENS = (0, 1, 65535, 65536, 151935, 1 << 31, U32_MAX)
EDGE_U32 = (0, 1, 2, 3, 4, 255, 256, 65535, 65536, 1 << 30, (1 << 30) + 1, 1 << 31, U32_MAX)
# f16 patterns: -0.0, subnormals, the largest finite, the smallest normal, infinities and quiet
# NaNs with payloads. Signalling NaNs are left out: carrying them is a SHOULD (V1-F16-SNAN).
SPECIAL_F16 = (0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x7BFF, 0xFBFF, 0x3C00, 0xBC00)
NON_FINITE_F16 = (0x7C00, 0xFC00, 0x7E00, 0xFE00, 0x7E55, 0xFFFF)


def geometries(realistic: bool = True) -> st.SearchStrategy[list[int]]:
    """[B, L, Hkv, D]: small by default, sometimes an engine's real shape (B = 16, D 64/128)."""
    small = st.lists(st.integers(1, 6), min_size=4, max_size=4).map(
        lambda dims: [dims[0], dims[1] % 3 + 1, dims[2] % 3 + 1, dims[3] * 2]
    )
    if not realistic:
        return small
    engine = st.tuples(st.integers(1, 4), st.integers(1, 8), st.sampled_from([64, 128])).map(
        lambda t: [16, t[0], t[1], t[2]]
    )
    return st.one_of(small, small, small, engine)


def tokens(min_size: int = 0, max_size: int = 64) -> st.SearchStrategy[list[int]]:
    """Token ids over the full u32 range, with the edges of narrower types well represented."""
    token = st.one_of(st.integers(0, U32_MAX), st.sampled_from(EDGE_TOKENS), st.integers(0, 151935))
    return st.lists(token, min_size=min_size, max_size=max_size)


def values_recipes(version: int) -> st.SearchStrategy[dict[str, Any]]:
    """A values recipe (harness/values.py): finite for v2, specials allowed for v1."""
    seed = st.integers(0, 2**32 - 1)
    ranges = st.sampled_from([(-1.0, 1.0), (-448.0, 448.0), (-0.01, 0.01), (0.0, 60000.0)])
    patterns = SPECIAL_F16 + (NON_FINITE_F16 if version == 1 else ())
    bits = st.lists(
        st.one_of(st.sampled_from(patterns), st.integers(0, 0xFFFF)), min_size=1, max_size=16
    )
    if version == 2:
        bits = bits.map(lambda bs: [b if (b & 0x7C00) != 0x7C00 else b & 0xFBFF for b in bs])
    return st.one_of(
        st.builds(lambda s, r: {"pcg64": {"seed": s, "low": r[0], "high": r[1]}}, seed, ranges),
        st.builds(lambda s: {"pcg64_f16_bits": {"seed": s, "finite": version == 2}}, seed),
        bits.map(lambda b: {"f16_bits": b}),
        st.just({"zeros": True}),
    )


@st.composite
def block_specs(draw: st.DrawFn, geometry: list[int], version: int) -> dict[str, Any]:
    """One block: full with tokens (hashed), full without a hash, or partial."""
    b = geometry[0]
    kind = draw(st.sampled_from(["full", "full", "unhashed", "partial"] if b > 1 else ["full"]))
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
    draw: st.DrawFn, version: int | None = None, max_blocks: int = 3, realistic: bool = True
) -> dict[str, Any]:
    """{build: {geometry, version, blocks}}, an envelope the oracle encodes."""
    version = version or draw(st.sampled_from([1, 2]))
    geometry = draw(geometries(realistic))
    blocks = draw(st.lists(block_specs(geometry, version), min_size=0, max_size=max_blocks))
    return {"build": {"geometry": geometry, "version": version, "blocks": blocks}}


def _record_count(spec: dict[str, Any]) -> int:
    return len(spec["build"]["blocks"])


@st.composite
def mutation_lists(
    draw: st.DrawFn, data: bytes, envelope: dict[str, Any], reseal: bool
) -> list[dict[str, Any]]:
    """Structured mutations of an envelope whose bytes are `data` (docs/cases.md)."""
    size = len(data) - (oracle.CRC_SIZE if reseal else 0)
    n_records = _record_count(envelope)
    options = [
        st.sampled_from(list(oracle.HEADER_FIELDS.values())).flatmap(_header_edits),
        st.builds(
            lambda o, b: {"flip_bit": {"offset": o, "bit": b}},
            st.integers(0, size - 1),
            st.integers(0, 7),
        ),
        st.builds(lambda n: {"truncate": n}, st.integers(1, max(1, size - 1))),
        st.builds(lambda n: {"append": {"zeros": n}}, st.integers(1, 64)),
        st.builds(
            lambda o, b: {"set_bytes": {"offset": o, "hex": b.hex()}},
            st.integers(0, size - 1),
            st.binary(min_size=1, max_size=8),
        ),
    ]
    if n_records:
        options.append(
            st.builds(
                lambda i, f, v: {"set_block": {"block": i, "field": f, "value": v}},
                st.integers(0, n_records - 1),
                st.sampled_from(["block_hash", "n_tokens"]),
                st.one_of(
                    st.sampled_from(EDGE_U32),
                    st.integers(0, 2 * envelope["build"]["geometry"][0] + 1),
                ),
            )
        )
        options.append(_splices(envelope, n_records))
    if not reseal:
        options.append(
            st.builds(
                lambda v: {"set_crc": v},
                st.sampled_from(
                    [
                        "crc32-ieee",
                        "no-final-xor",
                        "no-initial-inversion",
                        "records-only",
                        "big-endian",
                    ]
                ),
            )
        )
    mutations = draw(st.lists(st.one_of(*options), min_size=1, max_size=3))
    # A truncation or splice first keeps later offsets meaningful: apply edits, then length.
    return sorted(mutations, key=lambda m: next(iter(m)) in ("truncate", "append"))


def _header_edits(field: oracle.Field) -> st.SearchStrategy[dict[str, Any]]:
    top = (1 << (8 * field.size)) - 1
    value = st.one_of(st.sampled_from([v for v in EDGE_U32 if v <= top]), st.integers(0, 16))
    return value.map(lambda v: {"set_header": {"field": field.name, "value": v}})


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
        st.sampled_from([1, 2]),
        st.integers(0, 3),
        geometries(realistic=False),
    )
    return st.tuples(st.one_of(st.just(b""), header), st.binary(max_size=96)).map(
        lambda parts: {"hex": (parts[0] + parts[1]).hex()}
    )
