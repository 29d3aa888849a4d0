"""The TLKV envelope's byte layout: header fields, record fields, sizes."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

MAGIC = b"TLKV"
HEADER_SIZE = 28
RECORD_PREFIX_SIZE = 12  # u64 block_hash, u32 n_tokens
CRC_SIZE = 4
MIN_ENVELOPE_SIZE = HEADER_SIZE + CRC_SIZE
SCALE_SIZE = 4  # one f32 scale per (layer, K or V, head) slab in v2


class DType(IntEnum):
    """The tl_dtype values the envelope's dtype field uses."""

    F32 = 0
    F16 = 1
    BF16 = 2
    F8_E4M3 = 3


# Each format version and the dtype its payload is written in.
VERSION_DTYPES: dict[int, DType] = {1: DType.F16, 2: DType.F8_E4M3}
KNOWN_VERSIONS = frozenset(VERSION_DTYPES)


@dataclass(frozen=True)
class Field:
    """One fixed-width little-endian integer field."""

    name: str
    offset: int
    fmt: str  # a struct format character

    @property
    def size(self) -> int:
        return struct.calcsize("<" + self.fmt)

    def read(self, data: bytes, base: int = 0) -> int:
        return struct.unpack_from("<" + self.fmt, data, base + self.offset)[0]

    def write(self, data: bytearray, value: int, base: int = 0) -> None:
        struct.pack_into("<" + self.fmt, data, base + self.offset, value)


HEADER_FIELDS: dict[str, Field] = {
    f.name: f
    for f in (
        Field("magic", 0, "I"),
        Field("version", 4, "H"),
        Field("dtype", 6, "H"),
        Field("n_blocks", 8, "I"),
        Field("block_tokens", 12, "I"),
        Field("n_layers", 16, "I"),
        Field("n_kv_heads", 20, "I"),
        Field("head_dim", 24, "I"),
    )
}
# Offsets relative to the start of a block record.
RECORD_FIELDS: dict[str, Field] = {
    f.name: f for f in (Field("block_hash", 0, "Q"), Field("n_tokens", 8, "I"))
}
GEOMETRY_FIELDS = ("block_tokens", "n_layers", "n_kv_heads", "head_dim")


@dataclass(frozen=True)
class Geometry:
    """A pool's shape: token positions per block, layers, KV heads, head dimension."""

    block_tokens: int
    n_layers: int
    n_kv_heads: int
    head_dim: int

    def __post_init__(self) -> None:
        for name in GEOMETRY_FIELDS:
            value = getattr(self, name)
            if not isinstance(value, int) or not 1 <= value <= 0xFFFFFFFF:
                raise ValueError(f"geometry {name} must be a u32 of at least 1, not {value!r}")

    @property
    def values_shape(self) -> tuple[int, int, int, int, int]:
        """The shape of a block's values, [L][2][Hkv][B][D]."""
        return (self.n_layers, 2, self.n_kv_heads, self.block_tokens, self.head_dim)

    @property
    def n_elements(self) -> int:
        return self.n_layers * 2 * self.n_kv_heads * self.block_tokens * self.head_dim

    @property
    def n_slabs(self) -> int:
        return self.n_layers * 2 * self.n_kv_heads

    def payload_size(self, version: int) -> int:
        """P, the payload bytes of one block record in `version`."""
        if version == 1:
            return self.n_elements * 2
        if version == 2:
            return self.n_slabs * (self.block_tokens * self.head_dim + SCALE_SIZE)
        raise ValueError(f"no payload layout for envelope version {version}")

    def record_size(self, version: int) -> int:
        return RECORD_PREFIX_SIZE + self.payload_size(version)

    def envelope_size(self, n_blocks: int, version: int) -> int:
        """28 + n * (12 + P) + 4, in exact integer arithmetic."""
        return HEADER_SIZE + n_blocks * self.record_size(version) + CRC_SIZE

    def record_offset(self, index: int, version: int) -> int:
        return HEADER_SIZE + index * self.record_size(version)

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in GEOMETRY_FIELDS}

    def __str__(self) -> str:
        """B x L x Hkv x D, as --impl ...,geometry= takes it: 16x32x8x128."""
        return "x".join(str(getattr(self, name)) for name in GEOMETRY_FIELDS)

    @classmethod
    def parse(cls, text: str) -> Geometry:
        """`BxLxHkvxD` -> Geometry (ValueError with the text quoted)."""
        parts = text.lower().split("x")
        try:
            if len(parts) != 4:
                raise ValueError
            return cls(*(int(p) for p in parts))
        except ValueError:
            raise ValueError(
                f"geometry {text!r} is not BxLxHkvxD (block_tokens x n_layers x n_kv_heads x "
                "head_dim, each a positive integer), e.g. 16x32x8x128"
            ) from None
