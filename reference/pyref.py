"""The bundled Python reference implementation of the testee protocol (docs/contract.md).

It is written from the spec alone and shares no code with the oracle in
`tlkv_conformance.oracle`, so that a mistake in one is caught by the other. Storage is f16; it
reads and writes v1 and v2.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import crc32c
import numpy as np

READ_VERSIONS = frozenset({1, 2})
WRITE_VERSIONS = frozenset({1, 2})

_FNV_BASIS = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3
_MASK64 = 0xFFFFFFFFFFFFFFFF
_DTYPE_OF_VERSION = {1: 1, 2: 3}
_HEADER = struct.Struct("<4sHHIIIII")
_RECORD = struct.Struct("<QI")


class KvError(Exception):
    """A refusal; `code` is EINVAL, ENOMEM, EFORMAT, ESHAPE or ENOTFOUND."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


def block_hash(parent: int, tokens: Sequence[int]) -> int:
    h = _FNV_BASIS
    for byte in struct.pack(f"<Q{len(tokens)}I", parent, *tokens):
        h = ((h ^ byte) * _FNV_PRIME) & _MASK64
    return h or 1


def _e4m3_encode(x: np.ndarray) -> np.ndarray:
    """f32 -> OCP E4M3 fn codes, round half to even; magnitudes rounding past 448 give NaN."""
    x = x.astype(np.float32)
    sign = np.signbit(x).astype(np.uint8) << 7
    a = np.abs(x).astype(np.float64)
    _, exp2 = np.frexp(a)
    exponent = np.maximum(exp2 - 1, -6)  # below 2^-6 the quantum stays that of the subnormals
    quantum = np.ldexp(1.0, exponent - 3)
    rounded = np.rint(a / quantum) * quantum
    codes = np.zeros(x.shape, dtype=np.uint8)
    subnormal = rounded < 2.0**-6
    codes[subnormal] = (rounded[subnormal] / 2.0**-9).astype(np.uint8)
    normal = ~subnormal
    _, e2 = np.frexp(rounded[normal])
    e = e2 - 1
    mantissa = (np.ldexp(rounded[normal], -e) * 8 - 8).astype(np.int64)
    codes[normal] = (((e + 7) << 3) | mantissa).astype(np.uint8)
    codes[(rounded > 448.0) | np.isnan(a)] = 0x7F
    return codes | sign


def _e4m3_decode(codes: np.ndarray) -> np.ndarray:
    codes = codes.astype(np.int64)
    exponent = (codes >> 3) & 0xF
    mantissa = (codes & 0x7).astype(np.float64)
    magnitude = np.where(
        exponent == 0, mantissa * 2.0**-9, np.ldexp(1.0 + mantissa / 8, exponent - 7)
    )
    magnitude[(codes & 0x7F) == 0x7F] = np.nan
    return np.where(codes & 0x80, -magnitude, magnitude).astype(np.float32)


def _payload_size(dims: Sequence[int], version: int) -> int:
    tokens, n_layers, heads, dim = dims
    if version == 1:
        return n_layers * 2 * heads * tokens * dim * 2
    return n_layers * 2 * heads * (tokens * dim + 4)


class Pool:
    """A block pool with f16 storage, reference counts and a hash registry."""

    dtype = "f16"

    def __init__(
        self, block_tokens: int, n_layers: int, n_kv_heads: int, head_dim: int, capacity: int
    ) -> None:
        dims = (block_tokens, n_layers, n_kv_heads, head_dim, capacity)
        if any(not isinstance(d, int) or d < 1 for d in dims):
            raise KvError("EINVAL", f"pool dimensions must be positive integers, got {dims}")
        self.block_tokens = block_tokens
        self.dims = (block_tokens, n_layers, n_kv_heads, head_dim)
        self.shape = (n_layers, 2, n_kv_heads, block_tokens, head_dim)
        self.capacity = capacity
        self._values = np.zeros((capacity, *self.shape), dtype=np.float16)
        self._hash = [0] * capacity
        self._fill = [0] * capacity
        self._refs = [0] * capacity
        self._registry: dict[int, int] = {}

    # -- blocks ---------------------------------------------------------------------------
    def free_blocks(self) -> int:
        return self._refs.count(0)

    def _check_block(self, block: int) -> None:
        if not (isinstance(block, int) and 0 <= block < self.capacity and self._refs[block]):
            raise KvError("EINVAL", f"block {block} is not allocated")

    def _allocate(self, block_hash: int, n_tokens: int, values: np.ndarray) -> int:
        block = self._refs.index(0)
        stored = np.zeros(self.shape, dtype=np.float16)
        stored[..., :n_tokens, :] = values[..., :n_tokens, :]
        self._values[block] = stored
        self._hash[block], self._fill[block], self._refs[block] = block_hash, n_tokens, 1
        if block_hash:
            self._registry.setdefault(block_hash, block)
        return block

    def write(self, block_hash: int, n_tokens: int, kv: np.ndarray) -> int:
        if not 1 <= n_tokens <= self.block_tokens:
            raise KvError("EINVAL", f"n_tokens {n_tokens} outside 1..{self.block_tokens}")
        if block_hash and n_tokens != self.block_tokens:
            raise KvError("EINVAL", "a hashed block must be full")
        kv = np.asarray(kv, dtype=np.float32)
        if kv.shape != self.shape:
            raise KvError("EINVAL", f"values of shape {kv.shape}, expected {self.shape}")
        if not self.free_blocks():
            raise KvError("ENOMEM", "no free block")
        return self._allocate(block_hash, n_tokens, kv)

    def read(self, block: int) -> tuple[int, int, np.ndarray]:
        self._check_block(block)
        return self._hash[block], self._fill[block], self._values[block].astype(np.float32)

    def find(self, block_hash: int) -> int:
        if block_hash not in self._registry:
            raise KvError("ENOTFOUND", f"no block has hash {block_hash:#x}")
        return self._registry[block_hash]

    def retain(self, block: int) -> None:
        self._check_block(block)
        self._refs[block] += 1

    def release(self, block: int) -> None:
        self._check_block(block)
        self._refs[block] -= 1
        if not self._refs[block]:
            if self._registry.get(self._hash[block]) == block:
                del self._registry[self._hash[block]]
            self._hash[block] = self._fill[block] = 0

    # -- envelopes ------------------------------------------------------------------------
    def export_bytes(self, n_blocks: int, version: int) -> int:
        if version not in WRITE_VERSIONS:
            return 0
        return 28 + n_blocks * (12 + _payload_size(self.dims, version)) + 4

    def _payload(self, block: int, version: int) -> bytes:
        n_tokens = self._fill[block]
        values = self._values[block].astype(np.float32)
        if version == 1:
            bits = self._values[block].view(np.uint16).copy()
            bits[..., n_tokens:, :] = 0
            return bits.astype("<u2").tobytes()
        filled = values[..., :n_tokens, :]
        amax = np.abs(filled).max(axis=(3, 4))
        scales = np.where(amax == 0, np.float32(1), amax / np.float32(448)).astype(np.float32)
        # A tiny slab (amax / 448 not a normal f32): quotients clamped to +-448, and a scale
        # of 0 made 1.0 (docs/decisions.md, V2-TINY-SLAB).
        tiny = scales < np.finfo(np.float32).tiny
        scales = np.where(scales == 0, np.float32(1), scales).astype(np.float32)
        quotients = filled / scales[..., None, None]
        quotients = np.where(tiny[..., None, None], np.clip(quotients, -448, 448), quotients)
        codes = np.zeros(self.shape, dtype=np.uint8)
        codes[..., :n_tokens, :] = _e4m3_encode(quotients)
        return codes.tobytes() + scales.astype("<f4").tobytes()

    def export(self, blocks: Sequence[int], version: int) -> bytes:
        if version not in WRITE_VERSIONS:
            raise KvError("EINVAL", f"version {version} is not written")
        for block in blocks:
            self._check_block(block)
        body = _HEADER.pack(
            b"TLKV", version, _DTYPE_OF_VERSION[version], len(blocks), *self.dims
        ) + b"".join(
            _RECORD.pack(self._hash[b], self._fill[b]) + self._payload(b, version) for b in blocks
        )
        return body + struct.pack("<I", crc32c.crc32c(body))

    def import_envelope(self, data: bytes, max_blocks: int | None = None) -> list[int]:
        data = bytes(data)
        if len(data) < 32:
            raise KvError("EFORMAT", f"{len(data)} bytes is shorter than an empty envelope")
        magic, version, dtype, n_blocks, *dims = _HEADER.unpack_from(data)
        if version not in READ_VERSIONS:
            raise KvError("EFORMAT", f"version {version} is not read")
        record = 12 + _payload_size(dims, version)
        if len(data) != 28 + n_blocks * record + 4:
            raise KvError("EFORMAT", "length does not match the header")
        if magic != b"TLKV":
            raise KvError("EFORMAT", f"bad magic {magic!r}")
        if struct.unpack_from("<I", data, len(data) - 4)[0] != crc32c.crc32c(data[:-4]):
            raise KvError("EFORMAT", "CRC mismatch")
        if dtype != _DTYPE_OF_VERSION[version]:
            raise KvError("EFORMAT", f"dtype {dtype} with version {version}")
        if tuple(dims) != self.dims:
            raise KvError("ESHAPE", f"geometry {tuple(dims)}, pool {self.dims}")
        records = []
        for index in range(n_blocks):
            base = 28 + index * record
            block_hash, n_tokens = _RECORD.unpack_from(data, base)
            if not 1 <= n_tokens <= self.block_tokens:
                raise KvError("EFORMAT", f"block {index} n_tokens {n_tokens}")
            if block_hash and n_tokens != self.block_tokens:
                raise KvError("EFORMAT", f"block {index} hashed but partial")
            records.append((block_hash, n_tokens, data[base + 12 : base + record]))
        if max_blocks is not None and n_blocks > max_blocks:
            raise KvError("EINVAL", f"{n_blocks} blocks, room for {max_blocks}")
        if n_blocks > self.free_blocks():
            raise KvError("ENOMEM", f"{n_blocks} blocks, {self.free_blocks()} free")
        return [self._allocate(h, n, self._decode(p, version)) for h, n, p in records]

    def _decode(self, payload: bytes, version: int) -> np.ndarray:
        if version == 1:
            return np.frombuffer(payload, dtype="<f2").reshape(self.shape).astype(np.float32)
        n = int(np.prod(self.shape))
        codes = np.frombuffer(payload, dtype=np.uint8, count=n).reshape(self.shape)
        scales = np.frombuffer(payload, dtype="<f4", offset=n).reshape(self.shape[:3])
        return _e4m3_decode(codes) * scales[..., None, None].astype(np.float32)
