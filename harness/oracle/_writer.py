"""Building envelopes: header, block records, CRC-32C trailer."""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from ._checksum import crc32c
from ._layout import HEADER_FIELDS, MAGIC, VERSION_DTYPES, Geometry
from ._payload import encode_payload


@dataclass(frozen=True, eq=False)
class Block:
    """A block as a pool holds it: hash (0 if unregistered), fill, f32 values [L][2][Hkv][B][D]."""

    block_hash: int
    n_tokens: int
    values: np.ndarray


def encode_header(
    geometry: Geometry, version: int, n_blocks: int, dtype: int | None = None
) -> bytes:
    header = bytearray(28)
    header[0:4] = MAGIC
    fields = {
        "version": version,
        "dtype": VERSION_DTYPES[version] if dtype is None else dtype,
        "n_blocks": n_blocks,
        **geometry.as_dict(),
    }
    for name, value in fields.items():
        HEADER_FIELDS[name].write(header, value)
    return bytes(header)


def encode_record(geometry: Geometry, version: int, block: Block) -> bytes:
    payload = encode_payload(geometry, version, block.n_tokens, block.values)
    return struct.pack("<QI", block.block_hash, block.n_tokens) + payload


def seal(body: bytes) -> bytes:
    """Append the CRC-32C trailer of `body`."""
    return body + struct.pack("<I", crc32c(body))


def encode(geometry: Geometry, blocks: Iterable[Block], version: int) -> bytes:
    """The envelope a writer of `version` produces for `blocks`."""
    blocks = list(blocks)
    for block in blocks:
        if block.block_hash != 0 and block.n_tokens != geometry.block_tokens:
            raise ValueError(
                f"block hash {block.block_hash:#x} on a partial block ({block.n_tokens} tokens)"
            )
    body = encode_header(geometry, version, len(blocks)) + b"".join(
        encode_record(geometry, version, block) for block in blocks
    )
    return seal(body)
