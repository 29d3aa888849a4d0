"""An export that differs from the oracle's envelope: which fields differ (and so which
requirements), and which known mistake of a writer gives exactly the bytes written (a mistake
of the f16 or e4m3 encoder itself is told by `_f16_signatures` or `_e4m3_signatures`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .. import oracle
from ._causes import Cause
from ._codec_model import held_f16_causes
from ._crc_signatures import crc_trailer_causes
from ._crc_tables import table_trailer_causes
from ._e4m3_signatures import code_causes, scale_causes
from ._f16_signatures import f16_causes
from ._forms import magic_order_causes
from ._orders import axis_order_layouts, field_source_causes, records_permuted_causes
from ._padding_axis import padding_axis_causes
from ._scale_floor import scale_floor_causes
from ._v2_layout import ScaledRecord, v2_writer_causes
from ._widths import field_width_causes

# The requirement each header field's bytes belong to.
_HEADER_REQS = {
    "magic": "ENV-HEADER",
    "version": "ENV-VERSION-DTYPE",
    "dtype": "ENV-VERSION-DTYPE",
    "n_blocks": "ENV-HEADER",
    "block_tokens": "ENV-HEADER",
    "n_layers": "ENV-HEADER",
    "n_kv_heads": "ENV-HEADER",
    "head_dim": "ENV-HEADER",
}


@dataclass(frozen=True)
class _Record:
    index: int
    offset: int  # of its block_hash
    n_tokens: int
    payload: slice


class _Shape:
    """The expected envelope's layout, as numbers (it is the oracle's, so it reads)."""

    def __init__(self, data: bytes) -> None:
        self.geometry = oracle.header_geometry(data)
        self.version = oracle.HEADER_FIELDS["version"].read(data)
        self.n_blocks = oracle.HEADER_FIELDS["n_blocks"].read(data)
        self.record_size = self.geometry.record_size(self.version)
        self.size = len(data)
        self.records = []
        for index in range(self.n_blocks):
            offset = oracle.HEADER_SIZE + index * self.record_size
            start = offset + oracle.RECORD_PREFIX_SIZE
            n_tokens = int.from_bytes(data[offset + 8 : offset + 12], "little")
            self.records.append(
                _Record(index, offset, n_tokens, slice(start, offset + self.record_size))
            )

    @property
    def pad_req(self) -> str:
        return "V1-PAD" if self.version == 1 else "V2-PAD"

    @property
    def layout_req(self) -> str:
        return "V1-LAYOUT" if self.version == 1 else "V2-LAYOUT"

    def field_reqs(self, expected: bytes, differing: np.ndarray) -> set[str]:
        """The requirements of the fields the differing byte offsets lie in."""
        reqs: set[str] = set()
        header = differing[differing < oracle.HEADER_SIZE]
        for field in oracle.HEADER_FIELDS.values():
            if ((header >= field.offset) & (header < field.offset + field.size)).any():
                reqs.add(_HEADER_REQS.get(field.name, "ENV-HEADER"))
        if (differing >= self.size - oracle.CRC_SIZE).any():
            reqs.add("ENV-CRC")
        body = differing[
            (differing >= oracle.HEADER_SIZE) & (differing < self.size - oracle.CRC_SIZE)
        ]
        if not body.size:
            return reqs
        index, within = np.divmod(body - oracle.HEADER_SIZE, self.record_size)
        if (within < 8).any():
            reqs.add("ENV-RECORD-HASH")
        if ((within >= 8) & (within < oracle.RECORD_PREFIX_SIZE)).any():
            reqs.add("ENV-RECORD")
        inside = within >= oracle.RECORD_PREFIX_SIZE
        index, payload = index[inside], within[inside] - oracle.RECORD_PREFIX_SIZE
        if not payload.size:
            return reqs
        b, d = self.geometry.block_tokens, self.geometry.head_dim
        fills = np.array([r.n_tokens for r in self.records] or [0])[
            np.minimum(index, len(self.records) - 1)
        ]
        if self.version == 1:
            position = (payload // 2 // d) % b
            if (position < fills).any():
                reqs.add("V1-F16")
            if (position >= fills).any():
                reqs.add("V1-PAD")
            return reqs
        codes = payload < self.geometry.n_elements
        position = (payload // d) % b
        if (codes & (position < fills)).any():
            reqs.add("V2-E4M3")
        if (codes & (position >= fills)).any():
            reqs.add("V2-PAD")
        if (~codes).any():
            reqs.add("V2-SCALE")
        return reqs


def _differing(expected: bytes, actual: bytes) -> np.ndarray:
    a = np.frombuffer(expected, dtype=np.uint8)
    b = np.frombuffer(actual, dtype=np.uint8)
    return np.flatnonzero(a != b)


def envelope_attribution(
    expected: bytes,
    actual: bytes,
    blocks: Sequence[oracle.Block],
    block_ids: Sequence[int] = (),
    pool_dtype: str = "",
    held_read_back: bool = False,
    released: Sequence[oracle.Block] = (),
    given: Sequence[oracle.Block] = (),
) -> tuple[list[Cause], set[str], str]:
    """(causes, the requirements of the fields that differ, symptom) for an export `actual`
    where the oracle wrote `expected` from `blocks` (when known), the blocks `block_ids` of a
    pool of `pool_dtype` (when known). A mistake of the pool's store (what it holds) is named
    only where the blocks were not read back right first (`held_read_back`), and in a v2 export,
    where the codes come from what the pool holds, alongside the e4m3 writer's mistakes that
    give the same bytes ("one of"); in a v1 export the store and the f16 conversion are one.
    `released`: blocks the pool held and released before, whose slot a block may reuse;
    `given`: the blocks as the writes gave them in f32 (when known), what a v1 export's f16
    store or converter is fitted on."""
    if len(expected) != len(actual):
        return _length_causes(expected, actual), {"ENV-SIZE"}, ""
    try:
        shape = _Shape(expected)
    except (ValueError, KeyError):
        return [], set(), ""
    differing = _differing(expected, actual)
    reqs = shape.field_reqs(expected, differing)
    crc_at = shape.size - oracle.CRC_SIZE
    if reqs == {"ENV-CRC"}:
        body, trailer = actual[:crc_at], actual[crc_at:]
        causes = crc_trailer_causes(body, trailer, ("ENV-CRC",)) or table_trailer_causes(
            body, trailer, ("ENV-CRC",)
        )
        return causes, reqs, "crc-only"
    # The CRC covers every byte before it: when any of them differs, so does the CRC.
    reqs.discard("ENV-CRC")
    offsets = [r.offset for r in shape.records]
    causes = _integer_causes(shape, expected, actual, differing) or field_width_causes(
        expected, actual, offsets, _HEADER_REQS, differing
    )
    causes += _record_order_causes(shape, expected, actual)
    causes += _payload_layout_causes(shape, expected, actual)
    if not causes:
        causes = records_permuted_causes(
            expected, actual, offsets, shape.record_size, block_ids
        ) or field_source_causes(expected, actual, offsets, _HEADER_REQS, pool_dtype)
    if not causes:
        causes = magic_order_causes(expected, actual)
    if not causes:
        causes = _padding_causes(shape, reqs)
    if not causes and blocks:
        records = [(r.payload, r.n_tokens) for r in shape.records]
        causes = padding_axis_causes(shape.version, expected, actual, records, blocks)
    if causes or not blocks:
        return causes, reqs, ""
    if shape.version == 1:
        # the f16 conversion recomputed on the values it was given first: the codes alone
        # (_v1_value_causes) cannot tell which values past the range were written how
        causes = (
            _held_value_causes(shape, actual, blocks)
            or held_f16_causes([], shape.geometry, 1, actual, given or blocks)
            or _v1_value_causes(shape, expected, actual)
        )
        return causes, reqs, ""
    records = _scaled_records(shape, expected, actual, blocks)
    causes = (
        _v2_numeric_causes(shape, expected, actual, blocks, released)
        or v2_writer_causes(records)
        or scale_floor_causes(records)
    )
    if not held_read_back:
        causes = held_f16_causes(
            [*causes, *_held_value_causes(shape, actual, blocks)],
            shape.geometry,
            2,
            actual,
            blocks,
        )
    return causes, reqs, ""


_F16_TINY = np.float32(2.0**-14)  # the smallest normal f16


_F32_TINY = np.float32(np.finfo(np.float32).tiny)


def _to_plus_zero(below: np.float32):
    """-0.0, and values of magnitude under `below`, stored as +0.0."""
    return lambda v: np.where((v == 0) | (np.abs(v) < below), np.float32(0), v)


def _subnormals_to_signed_zero(values: np.ndarray) -> np.ndarray:
    tiny = (values != 0) & (np.abs(values) < _F16_TINY)
    return np.where(tiny, np.copysign(np.float32(0), values), values).astype(np.float32)


# Mistakes of a pool in what it holds, seen in any export of it: the blocks so changed and
# encoded by the oracle give exactly the bytes written. The narrower first.
_HELD_MISTAKES = (
    ("f16-negative-zero-flushed", "-0.0 stored as +0.0", _to_plus_zero(np.float32(0))),
    ("f16-subnormals-flushed", "f16 subnormals flushed to zero", _subnormals_to_signed_zero),
    (
        "f16-negative-zero-flushed",
        "-0.0 and f32 subnormals stored as +0.0",
        _to_plus_zero(_F32_TINY),
    ),
    (
        "f16-negative-zero-flushed",
        "-0.0 and f16 subnormals stored as +0.0",
        _to_plus_zero(_F16_TINY),
    ),
)


def _held_value_causes(shape: _Shape, actual: bytes, blocks: Sequence[oracle.Block]) -> list[Cause]:
    for cause_id, title, change in _HELD_MISTAKES:
        changed = [
            oracle.Block(b.block_hash, b.n_tokens, change(np.asarray(b.values, dtype=np.float32)))
            for b in blocks
        ]
        try:
            mistaken = oracle.encode(shape.geometry, changed, shape.version)
        except ValueError:
            continue
        if mistaken == actual:
            return [
                Cause(
                    cause_id,
                    title,
                    ("V1-F16",),
                    f"the v{shape.version} export is exactly the blocks so stored, encoded",
                )
            ]
    return []


def _length_causes(expected: bytes, actual: bytes) -> list[Cause]:
    missing = len(expected) - len(actual)
    if missing == oracle.CRC_SIZE:
        return [
            Cause(
                "size-without-trailer",
                "the envelope's size computed without the 4-byte CRC trailer",
                ("ENV-SIZE",),
                f"{len(actual)} bytes written, {len(expected)} = 28 + n * (12 + P) + 4 due",
            )
        ]
    return []


def _integer_causes(
    shape: _Shape, expected: bytes, actual: bytes, differing: np.ndarray
) -> list[Cause]:
    """Header or record integers written big-endian."""
    spans = [(f.offset, f.size) for f in oracle.HEADER_FIELDS.values() if f.name != "magic"]
    for record in shape.records:
        spans += [(record.offset, 8), (record.offset + 8, 4)]
    swapped, touched = [], False
    for start, size in spans:
        want, got = expected[start : start + size], actual[start : start + size]
        if want == got:
            continue
        touched = True
        if got != want[::-1]:
            return []
        swapped.append(start)
    if not touched:
        return []
    outside = differing[~np.isin(differing, [s + i for s, n in spans for i in range(n)])]
    if (outside < shape.size - oracle.CRC_SIZE).any():
        return []
    return [
        Cause(
            "integers-big-endian",
            "integers written big-endian",
            ("ENV-LE",),
            f"{len(swapped)} header or record fields hold the expected bytes reversed",
        )
    ]


def _record_order_causes(shape: _Shape, expected: bytes, actual: bytes) -> list[Cause]:
    for record in shape.records:
        o = record.offset
        want, got = expected[o : o + 12], actual[o : o + 12]
        if want != got and got == want[8:12] + want[0:8]:
            return [
                Cause(
                    "record-field-order",
                    "a record's n_tokens written before its block_hash",
                    ("ENV-RECORD",),
                    f"block {record.index}'s first 12 bytes are n_tokens then block_hash",
                )
            ]
    return []


def _payload_layouts(shape: _Shape, payload: bytes) -> dict[str, tuple[str, bytes]]:
    """The payload as known layout mistakes would write the same values."""
    g = shape.geometry
    lead = g.values_shape[:3]
    inner = g.block_tokens * g.head_dim
    width = 2 if shape.version == 1 else 1
    n = g.n_elements * width
    codes = np.frombuffer(payload[:n], dtype=np.uint8).reshape(*lead, inner * width)
    scales = payload[n:]
    slab_scales = (
        np.frombuffer(scales, dtype=np.uint8).reshape(*lead, oracle.SCALE_SIZE) if scales else None
    )
    out: dict[str, tuple[str, bytes]] = {}

    swapped = np.ascontiguousarray(codes[:, ::-1]).tobytes()
    if slab_scales is not None:
        swapped += np.ascontiguousarray(slab_scales[:, ::-1]).tobytes()
    out["k-v-swapped"] = ("K and V in each other's place", swapped)
    out.update(axis_order_layouts(g, shape.version, payload))
    if shape.version == 1:
        out["f16-big-endian"] = (
            "f16 elements written big-endian",
            np.frombuffer(payload, dtype="<u2").byteswap().tobytes(),
        )
    else:
        out["v2-scales-first"] = (
            "the scales written before the codes instead of after all of them",
            scales + payload[:n],
        )
        per_slab = (
            np.concatenate([codes, slab_scales], axis=-1) if slab_scales is not None else codes
        )
        out["v2-scale-after-each-slab"] = (
            "each slab's scale written right after its codes instead of after all codes",
            per_slab.tobytes(),
        )
    return out


def _payload_layout_causes(shape: _Shape, expected: bytes, actual: bytes) -> list[Cause]:
    for record in shape.records:
        want, got = expected[record.payload], actual[record.payload]
        if want == got:
            continue
        for cause_id, (title, variant) in _payload_layouts(shape, want).items():
            if variant == got != want:
                req = "ENV-LE" if cause_id == "f16-big-endian" else shape.layout_req
                return [
                    Cause(
                        cause_id,
                        title,
                        (req,),
                        f"block {record.index}'s payload is exactly the expected one so arranged",
                    )
                ]
        return []
    return []


def _padding_causes(shape: _Shape, reqs: set[str]) -> list[Cause]:
    if reqs == {shape.pad_req}:
        return [
            Cause(
                "stale-padding",
                "positions at or past n_tokens exported with what the slot held, not zero bytes",
                (shape.pad_req,),
                "only bytes past the blocks' fill differ",
            )
        ]
    return []


# -- values: the records' payloads, as the f16 and e4m3 signatures read them -------------------


def _v1_value_causes(shape: _Shape, expected: bytes, actual: bytes) -> list[Cause]:
    want_parts, got_parts = [], []
    for record in shape.records:
        w = np.frombuffer(expected[record.payload], dtype="<u2").reshape(
            shape.geometry.values_shape
        )
        g = np.frombuffer(actual[record.payload], dtype="<u2").reshape(shape.geometry.values_shape)
        want_parts.append(w[..., : record.n_tokens, :].ravel())
        got_parts.append(g[..., : record.n_tokens, :].ravel())
    if not want_parts:
        return []
    want, got = np.concatenate(want_parts), np.concatenate(got_parts)
    return f16_causes(want, got, "exported")


def _scaled_records(
    shape: _Shape, expected: bytes, actual: bytes, blocks: Sequence[oracle.Block]
) -> list[ScaledRecord]:
    """Every record of a v2 export, with its block's filled values where they are known."""
    g = shape.geometry
    out = []
    for index, record in enumerate(shape.records):
        values = None
        if index < len(blocks) and np.shape(blocks[index].values) == g.values_shape:
            values = np.asarray(blocks[index].values, dtype=np.float32)[..., : record.n_tokens, :]
        out.append(
            ScaledRecord(
                expected[record.payload],
                actual[record.payload],
                g.n_elements,
                g.values_shape[:3],
                values,
            )
        )
    return out


def _v2_numeric_causes(
    shape: _Shape,
    expected: bytes,
    actual: bytes,
    blocks: Sequence[oracle.Block],
    released: Sequence[oracle.Block] = (),
) -> list[Cause]:
    g = shape.geometry
    n = g.n_elements
    lead = g.values_shape[:3]
    for record, block in zip(shape.records, blocks, strict=False):
        want, got = expected[record.payload], actual[record.payload]
        if want == got:
            continue
        fill = record.n_tokens
        values = np.asarray(block.values, dtype=np.float32)
        if values.shape != g.values_shape or not np.isfinite(values[..., :fill, :]).all():
            return []
        x = values[..., :fill, :]
        amax = np.abs(x).max(axis=(-2, -1)).astype(np.float32)
        want_scales = np.frombuffer(want[n:], dtype="<f4").reshape(lead)
        got_scales = np.frombuffer(got[n:], dtype="<f4").reshape(lead)
        got_codes = np.frombuffer(got[:n], dtype=np.uint8).reshape(g.values_shape)[..., :fill, :]
        want_codes = np.frombuffer(want[:n], dtype=np.uint8).reshape(g.values_shape)[..., :fill, :]
        # What the slot may hold past the fill: the values written there, or a released
        # block's left in a reused slot.
        filled = np.arange(g.block_tokens)[:, None] < fill
        slots = [values] + [
            np.where(filled, values, np.asarray(r.values, dtype=np.float32))
            for r in released
            if np.shape(r.values) == g.values_shape
        ]
        found = scale_causes(amax, want_scales, got_scales, x, got_codes, slots)
        if found is None:
            found = code_causes(x, amax, want_scales, want_codes, got_codes)
        return found
    return []
