"""Field-aware differences between two envelopes, for failure messages.

The expected envelope's own layout names each differing byte: the header field, or the block,
its record field, or the payload element with its [layer][head][pos][dim] index, decoded.
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
    VERSION_DTYPES,
    Geometry,
    e4m3_codes_to_f32,
    f16_bits_to_f32,
    header_geometry,
)

MAX_FIELDS_SHOWN = 8
WINDOW = 16


@dataclass(frozen=True)
class Span:
    """A named byte range of an envelope and how to show its value."""

    name: str
    start: int
    size: int
    kind: str  # "u16" | "u32" | "u64" | "f16" | "e4m3" | "f32" | "magic" | "crc"

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
            value = e4m3_codes_to_f32(np.frombuffer(raw, dtype=np.uint8))[0]
        else:
            value = struct.unpack("<f", raw)[0]
        return f"{float(value)!r} ({hexed})"


def _element_name(geometry: Geometry, flat: int) -> str:
    layer, kv, head, pos, dim = np.unravel_index(flat, geometry.values_shape)
    return f"{'KV'[kv]}[layer {layer}][head {head}][pos {pos}][dim {dim}]"


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
            return Span(
                f"block {index} {_element_name(self.geometry, within)}", payload + within, 1, "e4m3"
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
        end = span.start + span.size - 1
        lines.append(
            f"{span.name} (bytes {span.start}..{end}): "
            f"expected {span.show(expected)}, got {span.show(actual)}"
        )
    spans_total = len({layout.span_at(int(o)).start for o in differing}) if layout else 0
    if spans_total > len(shown):
        lines.append(f"... and {spans_total - len(shown)} more differing fields")
    if layout is None and differing.size:
        lines.append(f"{differing.size} differing bytes, first at offset {first}")
    lines.append(f"expected, around offset {first}:")
    lines.append(hex_window(expected, first))
    lines.append(f"got, around offset {first}:")
    lines.append(hex_window(actual, first))
    return "\n".join(lines)
