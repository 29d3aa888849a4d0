"""Field-aware differences, for failure messages: between two envelopes, and between the
values a pool holds and the values it should.

The expected envelope's own layout names each differing byte: the header field, or the block,
its record field, or the payload element with its [layer][head][pos][dim] index, decoded (a v2
element with its e4m3 code and its slab's scale). Values read back from a pool are shown in the
pool's precision, as the bytes it would export, and with the envelope bytes they were imported
from when there were some.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from .oracle import (
    CRC_SIZE,
    HEADER_FIELDS,
    HEADER_SIZE,
    RECORD_FIELDS,
    RECORD_PREFIX_SIZE,
    SCALE_SIZE,
    VERSION_DTYPES,
    Geometry,
    Record,
    e4m3_codes_to_f32,
    f16_bits_to_f32,
    f32_to_f16_bits,
    header_geometry,
)

MAX_FIELDS_SHOWN = 8
MAX_ELEMENTS_SHOWN = 6
MAX_BYTES_COUNTED = 2048
WINDOW = 16


@dataclass(frozen=True)
class Span:
    """A named byte range of an envelope and how to show its value."""

    name: str
    start: int
    size: int
    kind: str  # "u16" | "u32" | "u64" | "f16" | "e4m3" | "f32" | "magic" | "crc"
    scale_start: int | None = None  # e4m3: where its slab's f32 scale lies

    @property
    def end(self) -> int:
        """The last byte of the span (inclusive, as messages quote byte ranges)."""
        return self.start + self.size - 1

    @property
    def where(self) -> str:
        return f"byte {self.start}" if self.size == 1 else f"bytes {self.start}..{self.end}"

    def show(self, data: bytes) -> str:
        raw = data[self.start : self.start + self.size]
        if len(raw) < self.size:
            return f"(missing; {raw.hex(' ') or 'no bytes'})"
        hexed = raw.hex(" ")
        if self.kind == "magic":
            return f"{raw!r} ({hexed})"
        if self.kind in ("u16", "u32", "u64", "crc"):
            value = int.from_bytes(raw, "little")
            shown = f"{value:#x}" if self.kind in ("u64", "crc") else str(value)
            return f"{shown} ({hexed})"
        if self.kind == "f16":
            value = f16_bits_to_f32(np.frombuffer(raw, dtype="<u2"))[0]
        elif self.kind == "e4m3":
            return self._show_e4m3(data, raw)
        else:
            value = struct.unpack("<f", raw)[0]
        return f"{float(value)!r} ({hexed})"

    def _show_e4m3(self, data: bytes, raw: bytes) -> str:
        # A code means nothing without its slab's scale: show what a reader decodes.
        code = e4m3_codes_to_f32(np.frombuffer(raw, dtype=np.uint8))[0]
        scale_raw = b"" if self.scale_start is None else data[self.scale_start :][:SCALE_SIZE]
        if len(scale_raw) < SCALE_SIZE:
            return f"e4m3 {float(code)!r} ({raw.hex()}; no scale)"
        scale = np.frombuffer(scale_raw, dtype="<f4")[0]
        decoded = np.float32(code) * np.float32(scale)
        return f"{float(decoded)!r} ({raw.hex()}: e4m3 {float(code)!r} x scale {float(scale)!r})"


def element_name(shape: tuple[int, ...], flat: int) -> str:
    """K[layer l][head h][pos p][dim d] of element `flat` of values of `shape` [L][2][Hkv][B][D]."""
    layer, kv, head, pos, dim = np.unravel_index(flat, shape)
    return f"{'KV'[kv]}[layer {layer}][head {head}][pos {pos}][dim {dim}]"


def _element_name(geometry: Geometry, flat: int) -> str:
    return element_name(geometry.values_shape, flat)


def _slab_name(geometry: Geometry, flat: int) -> str:
    layer, kv, head = np.unravel_index(flat, geometry.values_shape[:3])
    return f"scale {'KV'[kv]}[layer {layer}][head {head}]"


class Layout:
    """Where every field of an envelope lies, from its header (which must be readable)."""

    def __init__(self, data: bytes) -> None:
        self.geometry = header_geometry(data)
        self.version = HEADER_FIELDS["version"].read(data)
        if self.version not in VERSION_DTYPES:
            raise ValueError(f"version {self.version} has no known layout")
        self.n_blocks = HEADER_FIELDS["n_blocks"].read(data)
        self.record_size = self.geometry.record_size(self.version)
        self.size = len(data)

    def span_at(self, offset: int) -> Span:
        """The field covering byte `offset`."""
        for field in HEADER_FIELDS.values():
            if field.offset <= offset < field.offset + field.size:
                kind = "magic" if field.name == "magic" else f"u{field.size * 8}"
                return Span(f"header {field.name}", field.offset, field.size, kind)
        if offset >= self.size - CRC_SIZE:
            return Span("crc32c", self.size - CRC_SIZE, CRC_SIZE, "crc")
        index, within = divmod(offset - HEADER_SIZE, self.record_size)
        base = HEADER_SIZE + index * self.record_size
        if index >= self.n_blocks:
            return Span(f"bytes past block {self.n_blocks - 1}", offset, 1, "u16")
        for field in RECORD_FIELDS.values():
            if field.offset <= within < field.offset + field.size:
                return Span(
                    f"block {index} {field.name}",
                    base + field.offset,
                    field.size,
                    f"u{field.size * 8}",
                )
        within -= RECORD_PREFIX_SIZE
        payload = base + RECORD_PREFIX_SIZE
        if self.version == 1:
            element = within // 2
            return Span(
                f"block {index} {_element_name(self.geometry, element)}",
                payload + element * 2,
                2,
                "f16",
            )
        n_codes = self.geometry.n_elements
        if within < n_codes:
            slab_elements = self.geometry.block_tokens * self.geometry.head_dim
            return Span(
                f"block {index} {_element_name(self.geometry, within)}",
                payload + within,
                1,
                "e4m3",
                scale_start=payload + n_codes + within // slab_elements * SCALE_SIZE,
            )
        slab = (within - n_codes) // 4
        return Span(
            f"block {index} {_slab_name(self.geometry, slab)}",
            payload + n_codes + slab * 4,
            4,
            "f32",
        )


def hex_window(data: bytes, offset: int) -> str:
    start = max(0, offset - WINDOW) // 16 * 16
    rows = []
    for row in range(start, min(len(data), offset + WINDOW + 1), 16):
        chunk = data[row : row + 16]
        marks = "".join("^^ " if row + i == offset else "   " for i in range(len(chunk))).rstrip()
        rows.append(f"  {row:08x}  {chunk.hex(' ')}")
        if marks.strip():
            rows.append(f"            {marks}")
    return "\n".join(rows) if rows else "  (no bytes)"


def first_difference(expected: bytes, actual: bytes) -> int | None:
    shared = min(len(expected), len(actual))
    a = np.frombuffer(expected[:shared], dtype=np.uint8)
    b = np.frombuffer(actual[:shared], dtype=np.uint8)
    differing = np.flatnonzero(a != b)
    if differing.size:
        return int(differing[0])
    return None if len(expected) == len(actual) else shared


def envelope_diff(expected: bytes, actual: bytes) -> str:
    """Name the fields in which `actual` differs from `expected`, decoded, with a hex window."""
    first = first_difference(expected, actual)
    if first is None:
        return "the envelopes are identical"
    lines = []
    if len(expected) != len(actual):
        lines.append(f"length: expected {len(expected)} bytes, got {len(actual)}")
    shared = min(len(expected), len(actual))
    differing = np.flatnonzero(
        np.frombuffer(expected[:shared], dtype=np.uint8)
        != np.frombuffer(actual[:shared], dtype=np.uint8)
    )
    try:
        layout: Layout | None = Layout(expected)
    except ValueError:
        layout = None
    shown: list[Span] = []
    for offset in differing:
        if layout is None or len(shown) == MAX_FIELDS_SHOWN:
            break
        span = layout.span_at(int(offset))
        if shown and shown[-1].start == span.start:
            continue
        shown.append(span)
        lines.append(
            f"{span.name} ({span.where}): expected {span.show(expected)}, got {span.show(actual)}"
        )
    # Counted over the first differing bytes only: a failing property test pays this for every
    # example it draws and shrinks, and an export of a large geometry can differ everywhere.
    counted = differing[:MAX_BYTES_COUNTED]
    spans_total = len({layout.span_at(int(o)).start for o in counted}) if layout else 0
    if spans_total > len(shown):
        more = spans_total - len(shown)
        if differing.size > MAX_BYTES_COUNTED:
            lines.append(f"... and at least {more} more differing fields ({differing.size} bytes)")
        else:
            lines.append(f"... and {more} more differing fields")
    if layout is None and differing.size:
        lines.append(f"{differing.size} differing bytes, first at offset {first}")
    lines.append(f"expected, around offset {first}:")
    lines.append(hex_window(expected, first))
    lines.append(f"got, around offset {first}:")
    lines.append(hex_window(actual, first))
    return "\n".join(lines)


# -- values read back from a pool ---------------------------------------------------------------


@dataclass(frozen=True)
class ValueSource:
    """The envelope record that expected values were decoded from, so that a value diff can
    quote the bytes (and for v2 the code and scale) a pool was given."""

    data: bytes
    record_offset: int
    version: int

    @classmethod
    def of_record(cls, data: bytes, record: Record) -> ValueSource:
        return cls(data, record.offset, HEADER_FIELDS["version"].read(data))

    def element_offset(self, flat: int) -> int:
        width = 2 if self.version == 1 else 1
        return self.record_offset + RECORD_PREFIX_SIZE + flat * width


def _f16_exact(bits: np.ndarray) -> np.ndarray:
    """Which f32 bit patterns an f16 holds exactly (NaN payloads included)."""
    values = bits.view(np.float32)
    back = f16_bits_to_f32(f32_to_f16_bits(values)).view(np.uint32)
    return back == bits


def _pool_value(bits: np.uint32, dtype: str) -> str:
    """A value as the pool stores it: decoded, and the little-endian bytes it would export."""
    value = float(np.array([bits], dtype=np.uint32).view(np.float32)[0])
    word = np.array([bits], dtype=np.uint32)
    if dtype == "f16":
        if _f16_exact(word)[0]:
            raw = f32_to_f16_bits(word.view(np.float32)).astype("<u2").tobytes()
            return f"{value!r} ({raw.hex(' ')})"
        raw = word.astype("<u4").tobytes()
        return f"{value!r} (f32 {raw.hex(' ')}: not an f16 value)"
    return f"{value!r} ({word.astype('<u4').tobytes().hex(' ')})"


def _as_pool_bytes(values: np.ndarray, width: int) -> bytes:
    flat = np.ascontiguousarray(values, dtype=np.float32).ravel()
    if width == 2:
        return f32_to_f16_bits(flat).astype("<u2").tobytes()
    return flat.view(np.uint32).astype("<u4").tobytes()


# How NaNs compare (docs/decisions.md, "A NaN stays a NaN"): "any" (a NaN stays a NaN of its
# format, whatever its sign and payload: the MUST), "sign" (a NaN of the same sign), "quieted"
# (exactly, or with the quiet bit set: a signalling NaN through IEEE conversions), "exact" (bit
# for bit, payload included). IEEE 754 6.3 does not interpret a NaN's sign in a conversion, so
# the sign and the payload are SHOULDs (NAN-SIGN, V1-F16-NAN-PAYLOAD).
NAN_POLICIES = ("any", "sign", "quieted", "exact")
_F32_SIGN, _F32_QUIET = np.uint32(0x80000000), np.uint32(0x00400000)
_F16_SIGN, _F16_QUIET = np.uint16(0x8000), np.uint16(0x0200)
E4M3_NAN = 0x7F  # a code is NaN when its low seven bits are all set (0x7F, 0xFF)


def nan_tolerated(expected: np.ndarray, actual: np.ndarray, nan: str) -> np.ndarray:
    """Which of the differing bit patterns (u32 of f32, u16 of f16, or u8 e4m3 codes) `nan`
    lets pass. An e4m3 NaN code has no payload: only "any" lets it take the other sign."""
    if nan == "exact" or (nan != "any" and expected.dtype == np.uint8):
        return np.zeros(expected.shape, dtype=bool)
    if expected.dtype == np.uint8:
        return ((expected & E4M3_NAN) == E4M3_NAN) & ((actual & E4M3_NAN) == E4M3_NAN)
    if expected.dtype == np.uint16:
        floats, sign, quiet = np.float16, _F16_SIGN, _F16_QUIET
    else:
        floats, sign, quiet = np.float32, _F32_SIGN, _F32_QUIET
    both_nan = np.isnan(expected.view(floats)) & np.isnan(actual.view(floats))
    if nan == "any":
        return both_nan
    same_sign = (expected & sign) == (actual & sign)
    if nan == "quieted":
        return both_nan & ((actual == expected) | (actual == (expected | quiet)))
    return both_nan & same_sign


def values_diff(
    expected: np.ndarray,
    actual: np.ndarray,
    dtype: str,
    *,
    block: str | None = None,
    source: ValueSource | None = None,
    nan: str = "any",
) -> str | None:
    """Where f32 values [L][2][Hkv][B][D] differ bit for bit (-0.0 counts; NaNs as `nan`
    says, NAN_POLICIES), shown in the pool's precision `dtype`; None when they are the same.
    `block` names the block in each line; `source` is the envelope record the expected values
    came from."""
    expected = np.ascontiguousarray(expected, dtype=np.float32)
    actual = np.ascontiguousarray(actual, dtype=np.float32)
    if expected.shape != actual.shape:
        return f"values of shape {actual.shape}, expected {expected.shape}"
    expected_bits = expected.view(np.uint32).ravel()
    actual_bits = actual.view(np.uint32).ravel()
    unequal = expected_bits != actual_bits
    if unequal.any():
        unequal &= ~nan_tolerated(expected_bits, actual_bits, nan)
    differing = np.flatnonzero(unequal)
    if not differing.size:
        return None
    lines = [
        f"{differing.size} of {expected_bits.size} values differ (pool {dtype}; each value with "
        "its little-endian bytes)"
    ]
    try:
        layout = Layout(source.data) if source is not None else None
    except ValueError:
        layout = None
    prefix = f"{block} " if block else ""
    for flat in differing[:MAX_ELEMENTS_SHOWN]:
        want, got = _pool_value(expected_bits[flat], dtype), _pool_value(actual_bits[flat], dtype)
        line = f"  {prefix}{element_name(expected.shape, int(flat))}: expected {want}, got {got}"
        if layout is not None and source is not None:
            span = layout.span_at(source.element_offset(int(flat)))
            line += f"; imported from {span.where}: {span.show(source.data)}"
        lines.append(line)
    if differing.size > MAX_ELEMENTS_SHOWN:
        lines.append(f"  ... and {differing.size - MAX_ELEMENTS_SHOWN} more")
    first = int(differing[0])
    # An f16 pool's values as f16 bytes, unless what it returned is not f16 at all.
    width = 2 if dtype == "f16" and bool(_f16_exact(actual_bits).all()) else 4
    kind = "f16" if width == 2 else "f32"
    where = f"element {first} ({element_name(expected.shape, first)}), byte {first * width}"
    lines.append(f"expected, as {kind} [L][2][Hkv][B][D], around {where}:")
    lines.append(hex_window(_as_pool_bytes(expected, width), first * width))
    lines.append(f"got, around {where}:")
    lines.append(hex_window(_as_pool_bytes(actual, width), first * width))
    if layout is not None and source is not None:
        offset = source.element_offset(first)
        lines.append(f"the envelope it was imported from, around byte {offset}:")
        lines.append(hex_window(source.data, offset))
    return "\n".join(lines)
