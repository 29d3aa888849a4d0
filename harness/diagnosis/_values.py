"""Values read back from a pool that differ from what it should hold: where they differ, and
which known mistake of a pool or a reader gives exactly the values returned."""

from __future__ import annotations

import struct
from collections.abc import Callable

import numpy as np

from .. import oracle
from ..adapters import REUSED_BUFFER_VALUE, Adapter
from ..evidence import ValuesEvidence
from ._causes import Cause
from ._codec_model import decode_causes, f16_store_causes, named
from ._f16_models import f16_decode_causes
from ._f16_signatures import f16_causes
from ._layout import payload_offset_causes
from ._probe import stored_as
from ._v2_decoder import v2_decode_causes

F32 = np.float32


def _bits(values: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)


def _same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Bit-equal, or both NaN of one sign."""
    a_bits, b_bits = _bits(a), _bits(b)
    both_nan = np.isnan(a) & np.isnan(b) & ((a_bits >> 31) == (b_bits >> 31))
    return (a_bits == b_bits) | both_nan


def values_attribution(
    ev: ValuesEvidence, implementation: Adapter | None = None
) -> tuple[list[Cause], set[str]]:
    """The causes of values read back otherwise than due. `implementation`: the way in the
    test ran against, probed again where an f16 store would explain what a v2 import reads
    back (`_store_misrounds`)."""
    expected = np.asarray(ev.expected, dtype=np.float32)
    actual = np.asarray(ev.actual, dtype=np.float32)
    if expected.shape != actual.shape:
        return [], {"POOL-WRITE-READ"}
    # NaN for NaN is the MUST: a NaN's sign or payload is what differs only when nothing else
    # does (a SHOULD case, failing on them alone).
    differ = _bits(expected) != _bits(actual)
    nan_for_nan = np.isnan(expected) & np.isnan(actual)
    if (differ & ~nan_for_nan).any():
        differ &= ~nan_for_nan
    fill = ev.n_tokens
    past = np.zeros(expected.shape, dtype=bool)
    past[..., fill:, :] = True
    version = None
    decoded = None
    if ev.source is not None:
        data, offset = ev.source
        version = oracle.HEADER_FIELDS["version"].read(data)
        geometry = oracle.header_geometry(data)
        start = offset + oracle.RECORD_PREFIX_SIZE
        decoded = oracle.decode_payload(
            geometry, version, data[start : start + geometry.payload_size(version)]
        )
    reqs = _field_reqs(differ, past, version, ev.written is not None)
    reused = [
        REUSED_BUFFER_VALUE,
        oracle.round_to_f16(np.array([REUSED_BUFFER_VALUE], dtype=np.float32))[0],
    ]
    # Its own evidence: a write's values (not an import's), every differing one the value the
    # suite wrote into its array after the write returned (a decoder's value may equal it).
    kept = ev.written is not None and ev.source is None
    if kept and np.isin(actual[differ], reused).all() and not np.isin(expected, reused).any():
        return [
            Cause(
                "write-keeps-reference",
                "write keeps the caller's array instead of copying it",
                ("POOL-WRITE-COPIES",),
                f"the block reads back {float(REUSED_BUFFER_VALUE)!r}, which the suite wrote "
                "into its own array after the write returned",
            )
        ], reqs
    if not (differ & ~past).any():
        return _past_fill_causes(ev, actual, past, differ, decoded), reqs
    causes = _nan_causes(expected, actual, differ) or _fill_boundary_causes(
        expected, actual, fill, ev.source is not None, _held(ev.written, ev.dtype)
    )

    def store_misrounds() -> bool:
        assert ev.source is not None
        assert decoded is not None
        return _store_misrounds(implementation, ev.source, decoded.values, actual, fill)

    if not causes and decoded is not None and version == 2:
        causes = _v2_read_causes(decoded, expected, actual, differ, fill, ev.dtype, store_misrounds)
    if not causes and decoded is not None:
        causes = _layout_read_causes(expected, actual, version or 1)
    if not causes and ev.source is not None:
        causes = payload_offset_causes(ev.source, actual, fill)
    if not causes and ev.dtype == "f16" and (version != 2 or store_misrounds()):
        causes = f16_causes(
            oracle.f32_to_f16_bits(expected[differ]),
            oracle.f32_to_f16_bits(actual[differ]),
            "read back",
        )
        if ev.source is None:
            # the f16 store fitted to the values written (else those due, f16 already: its
            # subnormals and range still show): the encoder's one mistake
            given = expected if ev.written is None else np.asarray(ev.written, dtype=np.float32)
            stored = f16_store_causes(given[~past], actual[~past], "read back")
            causes = named([*stored, *causes])
    if not causes:
        causes = _nan_lost_causes(expected, actual, differ, past, version)
    if not causes and decoded is not None and version == 1 and ev.dtype == "f32":
        # an f32 pool's v1 import: the f16 decoder wrong on one class of codes
        codes = oracle.f32_to_f16_bits(decoded.values)
        causes = named(
            f16_decode_causes(codes, lambda v: bool(_same(v, actual)[~past].all()), differ & ~past)
        )
    return causes, reqs


def _field_reqs(
    differ: np.ndarray, past: np.ndarray, version: int | None, written: bool
) -> set[str]:
    reqs = set()
    if (differ & past).any():
        reqs.add("POOL-WRITE-READ")
    if (differ & ~past).any():
        reqs.add({None: "POOL-WRITE-READ", 1: "V1-F16", 2: "V2-DECODE"}[version])
    return reqs


def _past_fill_causes(
    ev: ValuesEvidence,
    actual: np.ndarray,
    past: np.ndarray,
    differ: np.ndarray,
    decoded: oracle.DecodedPayload | None,
) -> list[Cause]:
    if ev.written is not None:
        written = np.asarray(ev.written, dtype=np.float32)
        if ev.dtype == "f16":
            written = oracle.round_to_f16(written)
        if _same(written, actual)[past].all():
            return [
                Cause(
                    "read-past-fill",
                    "the pool keeps and reads back what was written past n_tokens",
                    ("POOL-WRITE-READ",),
                    f"{int(differ.sum())} values past the fill read back as written, not as 0",
                )
            ]
    for old in ev.released:
        held = _held(old, ev.dtype)
        if held is not None and held.shape == actual.shape and _same(held, actual)[past].all():
            return [
                Cause(
                    "slot-not-cleared",
                    "a block stored into a freed slot over what it held: past the fill it reads "
                    "back the slot's previous block, not 0",
                    ("POOL-WRITE-READ",),
                    f"{int(differ.sum())} values past the fill are a released block's",
                )
            ]
    if decoded is not None:
        held = decoded.values
        if ev.dtype == "f16":
            held = oracle.round_to_f16(held)
        if _same(held, actual)[past].all():
            return [
                Cause(
                    "import-keeps-padding",
                    "an import keeps the payload's bytes past n_tokens and read returns them",
                    ("READ-ACCEPT", "POOL-WRITE-READ"),
                    f"{int(differ.sum())} values past the fill are the envelope's, not 0",
                )
            ]
    return []


# Where a block's fill may be taken to end, wrongly, in each slab [block_tokens][head_dim]:
# (name, what it keeps, which values of the slab it zeroes given its positions, its dims and
# n_tokens). What it does not zero past the fill is what the pool was given there.
_FILL_BOUNDARIES = (
    (
        "elements",
        "only the first n_tokens values of each slab, not n_tokens rows of head_dim (the fill "
        "counted in elements)",
        lambda b, d, n, dim: b * dim + d >= n,
    ),
    (
        "head-dim-axis",
        "only the first n_tokens dims of each position (the fill taken along head_dim, not "
        "along the positions)",
        lambda b, d, n, dim: d >= n,
    ),
)


def _held(values: np.ndarray | None, dtype: str) -> np.ndarray | None:
    """`values` as a pool of `dtype` holds them."""
    if values is None:
        return None
    return oracle.round_to_f16(values) if dtype == "f16" else np.asarray(values, dtype=F32)


def _fill_boundary_causes(
    expected: np.ndarray,
    actual: np.ndarray,
    fill: int,
    imported: bool,
    given: np.ndarray | None = None,
) -> list[Cause]:
    """A block of which the pool keeps other values than its fill, the rest read back as +0:
    named for the boundary that gives every value read back exactly (a full block's fill too:
    the boundary is computed for every record). `given`: what a write gave the pool past the
    fill (in its precision; an import's padding is 0, as `expected` has it)."""
    positions, dims = expected.shape[-2:]
    if fill <= 0:
        return []
    b = np.arange(positions)[:, None]
    d = np.arange(dims)[None, :]
    past = np.broadcast_to(b >= fill, expected.shape)
    base = (
        expected
        if given is None or given.shape != expected.shape
        else np.where(past, given, expected)
    )
    causes = []
    for name, kept, zeroed in _FILL_BOUNDARIES:
        mask = np.broadcast_to(zeroed(b, d, fill, dims), expected.shape)
        predicted = np.where(mask, F32(0), base).astype(F32)
        if not _same(predicted, expected).all() and _same(predicted, actual).all():
            causes.append(
                Cause(
                    f"{'read' if imported else 'write'}-fill:{name}",
                    f"{'an import' if imported else 'a write'} keeps {kept}: "
                    "the rest reads back as 0",
                    ("READ-ACCEPT", "POOL-WRITE-READ") if imported else ("POOL-WRITE-READ",),
                    f"{int(mask.sum())} values zeroed, n_tokens {fill} of {positions} positions "
                    f"x {dims} dims",
                )
            )
    return named(causes)


def _nan_causes(expected: np.ndarray, actual: np.ndarray, differ: np.ndarray) -> list[Cause]:
    """NaNs read back as NaNs of another sign or payload (SHOULDs, docs/decisions.md)."""
    want, got = expected[differ], actual[differ]
    if not (np.isnan(want) & np.isnan(got)).all():
        return []
    want_bits, got_bits = _bits(want), _bits(got)
    # Each NaN read back is explained: the due one with its sign flipped, or one NaN (of either
    # sign) written in every place. NaNs of other payloads are other values read in their place
    # (another slab, another record), which no NaN mistake explains.
    sign_flipped = ((want_bits ^ got_bits) == 0x8000_0000).all()
    one_nan_written = len({int(b) & 0x7FFF_FFFF for b in got_bits}) == 1
    if not (sign_flipped or one_nan_written):
        return []
    shown = ", ".join(sorted({f"{int(b):#010x}" for b in got_bits[:4]}))
    if ((want_bits ^ got_bits) >> 31).any():
        return [
            Cause(
                "nan-sign-lost",
                "NaNs read back with another sign (a canonical NaN written in their place)",
                ("NAN-SIGN",),
                f"{want.size} NaNs read back as {shown}",
            )
        ]
    return [
        Cause(
            "nan-payload-dropped",
            "a quiet NaN's payload dropped (a default NaN written)",
            ("V1-F16-NAN-PAYLOAD",),
            f"{want.size} NaNs read back with another payload, e.g. {int(want_bits[0]):#010x} "
            f"as {int(got_bits[0]):#010x}",
        )
    ]


def _nan_lost_causes(
    expected: np.ndarray,
    actual: np.ndarray,
    differ: np.ndarray,
    past: np.ndarray,
    version: int | None,
) -> list[Cause]:
    """NaNs that came back as numbers, zeros or infinities (a MUST, unlike their sign), where
    the same evidence shows numbers read back right: a reader or pool that misreads every
    value (f16 bit patterns converted as integers) turns NaNs into numbers too. A +0.0 shows
    nothing (zero bits read as zero in most misreadings), nor does a value past the fill."""
    want, got = expected[differ], actual[differ]
    if not want.size or not np.isnan(want).all() or np.isnan(got).any():
        return []
    telling = ~np.isnan(expected) & (_bits(expected) != 0) & ~differ & ~past
    if not telling.any():  # every value a NaN (or +0.0): nothing shows the others read right
        return []
    shown = "infinities" if np.isinf(got).all() else "zeros" if (got == 0).all() else "numbers"
    return [
        Cause(
            "nan-not-nan",
            "NaNs read back as numbers or infinities (a NaN must stay a NaN)",
            ("V2-DECODE" if version == 2 else "V1-F16",),
            f"{want.size} NaNs read back as {shown}, e.g. {float(got[0])!r}, where "
            f"{int(telling.sum())} numbers read back right",
        )
    ]


def _v2_read_causes(
    decoded: oracle.DecodedPayload,
    expected: np.ndarray,
    actual: np.ndarray,
    differ: np.ndarray,
    fill: int,
    dtype: str,
    store_misrounds: Callable[[], bool],
) -> list[Cause]:
    """`store_misrounds`: whether the pool's f16 store, given the values decoded right, reads
    them back as the import did (asked only where an f16 store mistake would fit)."""
    assert decoded.codes is not None
    assert decoded.scales is not None
    codes, scales = decoded.codes, decoded.scales[..., None, None]
    filled = np.zeros(codes.shape, dtype=bool)
    filled[..., :fill, :] = True

    def matches(values: np.ndarray) -> bool:
        held = oracle.round_to_f16(values) if dtype == "f16" else values.astype(F32)
        return bool(_same(held, actual)[filled].all())

    as_f32 = oracle.e4m3_codes_to_f32(codes)
    nan_codes = (codes & 0x7F) == 0x7F
    # 480: the code read as if e4m3 had no NaN; 448: saturated to the largest finite value.
    for number in (480, 448) if nan_codes[differ].any() else ():
        as_number = np.where(nan_codes, np.copysign(F32(number), as_f32), as_f32)
        if matches((as_number * scales).astype(F32)):
            return [
                Cause(
                    f"e4m3-nan-as-{number}",
                    f"the e4m3 NaN codes 0x7F / 0xFF decoded as +-{number}",
                    ("V2-E4M3",),
                    f"every NaN code read back as {number} x its slab's scale",
                )
            ]
    if matches(as_f32):
        return [
            Cause(
                "v2-scale-ignored",
                "the slab's scale not applied on decode",
                ("V2-DECODE",),
                "the values read back are the bare e4m3 values",
            )
        ]
    subnormal = ((codes >> 3) & 0xF) == 0
    causes = []
    for factor, name in ((F32(0.5), "one too small"), (F32(2), "one too large")):
        variant = np.where(subnormal, as_f32 * factor, as_f32)
        if subnormal[differ].any() and matches((variant * scales).astype(F32)):
            causes.append(
                Cause(
                    "e4m3-subnormal-exponent",
                    f"e4m3 subnormals decoded with an exponent {name}",
                    ("V2-E4M3",),
                    "every differing value decodes a subnormal code (exponent bits 0)",
                )
            )
    causes += decode_causes(codes, decoded.scales, matches)
    causes += v2_decode_causes(codes, decoded.scales, matches)
    if dtype == "f16":
        # the values decoded right, stored by an f16 encoder with one mistake: the pool's, not
        # the decoder's (a value of an f16 subnormal halved by either looks the same)
        exact = (as_f32 * scales).astype(F32)
        stored = f16_store_causes(exact[filled], actual[filled], "read back")
        if stored and store_misrounds():
            causes += stored
    return named(causes)


def _store_misrounds(
    implementation: Adapter | None,
    source: tuple[bytes, int],
    decoded: np.ndarray,
    actual: np.ndarray,
    fill: int,
) -> bool:
    """Whether the pool's f16 store is what a v2 import's values show: the values the record
    decodes to (the oracle's f32 decode, zero past the fill), written into a new pool and read
    back (`stored_as`), read back as the import did. A store that holds them as the oracle's
    f16 rounding says leaves the decoder, not the store, to explain them; a probe that cannot
    tell names no store mistake either."""
    data, offset = source
    block_hash = struct.unpack_from("<Q", data, offset)[0]
    given = np.array(decoded, dtype=F32)
    given[..., fill:, :] = 0
    stored = stored_as(implementation, oracle.header_geometry(data), block_hash, fill, given)
    if stored is None or stored.shape != actual.shape:
        return False
    return bool(_same(stored, actual)[..., :fill, :].all())


def _layout_read_causes(expected: np.ndarray, actual: np.ndarray, version: int) -> list[Cause]:
    swapped = expected[:, ::-1]
    if not _same(swapped, expected).all() and _same(swapped, actual).all():
        return [
            Cause(
                "k-v-swapped-on-read",
                "K and V in each other's place when imported",
                ("V1-LAYOUT" if version == 1 else "V2-LAYOUT",),
                "the values read back are the expected ones with K and V exchanged",
            )
        ]
    return []
