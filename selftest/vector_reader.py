"""A second, independent reader of the TLKV format, standard library only.

It checks the portable vectors (tlkv_conformance.vectors) without trusting the suite's oracle: every
hash, CRC, reader verdict and decoded value here is derived from the format's text alone, the
way an engine team in another language would write it. It shares no code with the oracle (no
numpy, no crc32c package, no ml_dtypes, no tlkv_conformance import), so a bug in the oracle
shows up as a disagreement instead of being copied into the vectors.
"""

from __future__ import annotations

import bisect
import math
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

# -- the block hash ---------------------------------------------------------------------------

FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
U64 = (1 << 64) - 1


def fnv1a64(data: bytes) -> int:
    h = FNV_OFFSET
    for byte in data:
        h = ((h ^ byte) * FNV_PRIME) & U64
    return h


def hash_input(parent: int, tokens: Sequence[int]) -> bytes:
    return parent.to_bytes(8, "little") + b"".join(t.to_bytes(4, "little") for t in tokens)


def block_hash(parent: int, tokens: Sequence[int]) -> int:
    # 0 means "no hash" (a partial block), so a full block that hashes to 0 is given 1.
    return fnv1a64(hash_input(parent, tokens)) or 1


# -- CRC-32C ----------------------------------------------------------------------------------


def _crc_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC_TABLE = _crc_table()


def crc32c(data: bytes) -> int:
    """Castagnoli, reflected: poly 0x82F63B78, init and final XOR 0xFFFFFFFF."""
    crc = 0xFFFFFFFF
    table = _CRC_TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


# -- element decoding -------------------------------------------------------------------------


def _e4m3_value(code: int) -> float:
    """OCP FP8 E4M3 "fn": 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities; only
    S.1111.111 is NaN; exponent field 0 is subnormal, m/8 * 2^-6."""
    sign = -1.0 if code & 0x80 else 1.0
    exponent = (code >> 3) & 0xF
    mantissa = code & 0x7
    if exponent == 0xF and mantissa == 0x7:
        return math.copysign(math.nan, sign)
    if exponent == 0:
        return sign * (mantissa / 8) * 2.0**-6
    return sign * (1 + mantissa / 8) * 2.0 ** (exponent - 7)


E4M3 = tuple(_e4m3_value(code) for code in range(256))


def f32(value: float) -> float:
    """`value` rounded to binary32 (nearest even), as a Python float.

    An f32 product computed in double and rounded once is the correctly rounded f32 product:
    an e4m3 value has 4 significant bits and a scale 24, so the double product is exact."""
    try:
        return struct.unpack("<f", struct.pack("<f", value))[0]
    except OverflowError:  # beyond the largest f32 after rounding: IEEE gives infinity
        return math.copysign(math.inf, value)


def f32_bits(value: float) -> int:
    try:
        return struct.unpack("<I", struct.pack("<f", value))[0]
    except OverflowError:
        return 0xFF800000 if value < 0 else 0x7F800000


def f16_round(value: float) -> float:
    """`value` rounded to binary16 (nearest even), as a Python float."""
    try:
        return struct.unpack("<e", struct.pack("<e", value))[0]
    except OverflowError:
        return math.copysign(math.inf, value)


def same_f32(expected_bits: int, got_bits: int) -> bool:
    """Bit for bit (so -0.0 counts), except that a NaN matches a NaN of the same sign: the
    payload of a NaN does not survive every conversion (Python's f16 unpacking drops it)."""
    if expected_bits == got_bits:
        return True
    both_nan = _is_nan(expected_bits) and _is_nan(got_bits)
    return both_nan and expected_bits >> 31 == got_bits >> 31


def _is_nan(bits: int) -> bool:
    return (bits & 0x7F800000) == 0x7F800000 and bool(bits & 0x007FFFFF)


# -- element encoding (a v2 writer) -----------------------------------------------------------

E4M3_MAX = 448.0
# The non-negative finite codes 0x00..0x7E, in increasing value (the code order is the value's).
_E4M3_MAGNITUDES = E4M3[:0x7F]


def e4m3_code(q: float) -> int:
    """The e4m3 code of an f32 quotient: the nearest finite value, a tie to the even code (its
    last bit is the mantissa's), NaN past 448 + half a step (the "fn" form has no infinity)."""
    sign = 0x80 if math.copysign(1.0, q) < 0 else 0x00
    magnitude = abs(q)
    if math.isnan(q) or magnitude > 464.0:
        return sign | 0x7F
    above = bisect.bisect_left(_E4M3_MAGNITUDES, magnitude)
    if above == 0x7F:
        return sign | 0x7E
    below = max(above - 1, 0)
    under, over = magnitude - _E4M3_MAGNITUDES[below], _E4M3_MAGNITUDES[above] - magnitude
    if under < over or (under == over and below % 2 == 0):
        return sign | below
    return sign | above


def encode_v2_slab(filled: Sequence[float]) -> tuple[list[int], float]:
    """A slab's codes (its filled positions) and scale, from the format's text: scale = amax /
    448 in f32 (1.0 when that is 0), each code e4m3(x / scale) in f32; where the scale is not a
    normal f32 the quotient is clamped to +-448 (docs/format.md, V2-*)."""
    amax = max((abs(x) for x in filled), default=0.0)
    scale = f32(amax / E4M3_MAX) or 1.0
    tiny = scale < F32_SMALLEST_NORMAL
    codes = []
    for x in filled:
        q = f32(x / scale)
        codes.append(e4m3_code(max(-E4M3_MAX, min(E4M3_MAX, q)) if tiny else q))
    return codes, scale


F32_SMALLEST_NORMAL = 2.0**-126


# -- the envelope -----------------------------------------------------------------------------

HEADER = 28
TRAILER = 4
RECORD_HEAD = 12
DTYPE_OF_VERSION = {1: 1, 2: 3}
GEOMETRY = ("block_tokens", "n_layers", "n_kv_heads", "head_dim")
# Each reader rule and how a refusal of it is reported: C status, gRPC status.
RULE_CODES = {
    "READ-LENGTH-MIN": ("EFORMAT", "DATA_LOSS"),
    "READ-LENGTH": ("EFORMAT", "DATA_LOSS"),
    "READ-MAGIC": ("EFORMAT", "DATA_LOSS"),
    "READ-CRC": ("EFORMAT", "DATA_LOSS"),
    "READ-VERSION": ("EFORMAT", "FAILED_PRECONDITION"),
    "READ-DTYPE": ("EFORMAT", "DATA_LOSS"),
    "READ-GEOMETRY": ("ESHAPE", "DATA_LOSS"),
    "READ-NTOKENS": ("EFORMAT", "DATA_LOSS"),
    "READ-HASH-FILL": ("EFORMAT", "DATA_LOSS"),
}


@dataclass(frozen=True)
class Shape:
    block_tokens: int
    n_layers: int
    n_kv_heads: int
    head_dim: int

    @property
    def slabs(self) -> int:
        return self.n_layers * 2 * self.n_kv_heads

    @property
    def elements(self) -> int:
        return self.slabs * self.block_tokens * self.head_dim

    def payload(self, version: int) -> int:
        if version == 1:
            return self.elements * 2
        return self.slabs * (self.block_tokens * self.head_dim + 4)


@dataclass(frozen=True)
class Block:
    block_hash: int
    n_tokens: int
    values: list[float]  # f32 values, [L][2][Hkv][B][D], positions past n_tokens 0.0
    payload: bytes


@dataclass(frozen=True)
class Verdict:
    broken: frozenset[str]
    version: int | None
    n_blocks: int | None
    blocks: tuple[Block, ...] = ()

    @property
    def valid(self) -> bool:
        return not self.broken


def _u(data: bytes, offset: int, size: int, end: int) -> int | None:
    """A little-endian unsigned field, or None where the bytes before `end` do not hold it."""
    if offset + size > end:
        return None
    return int.from_bytes(data[offset : offset + size], "little")


def read(data: bytes, pool: Shape, read_versions: Iterable[int]) -> Verdict:
    """Every reader rule `data` breaks, and when it breaks none, its blocks decoded.

    Each rule is judged wherever the bytes allow it: header fields only from bytes before the
    4-byte trailer (in a short input the trailer's bytes are not the field), the length only
    when the header gives a version this format knows and a count, the records only when the
    length is right."""
    reads = set(read_versions)
    broken: set[str] = set()
    size = len(data)
    body = max(0, size - TRAILER)
    if size < HEADER + TRAILER:
        broken.add("READ-LENGTH-MIN")
    if body >= 4 and data[:4] != b"TLKV":
        broken.add("READ-MAGIC")
    if size >= TRAILER and int.from_bytes(data[-TRAILER:], "little") != crc32c(data[:-TRAILER]):
        broken.add("READ-CRC")
    version = _u(data, 4, 2, body)
    if version is not None and version not in reads:
        broken.add("READ-VERSION")
    dtype = _u(data, 6, 2, body)
    if dtype is not None and version in DTYPE_OF_VERSION and dtype != DTYPE_OF_VERSION[version]:
        broken.add("READ-DTYPE")
    n_blocks = _u(data, 8, 4, body)
    dims = [_u(data, 12 + 4 * i, 4, body) for i in range(4)]
    wanted = (pool.block_tokens, pool.n_layers, pool.n_kv_heads, pool.head_dim)
    if any(d is not None and d != w for d, w in zip(dims, wanted, strict=True)):
        broken.add("READ-GEOMETRY")
    if size < HEADER + TRAILER or version not in DTYPE_OF_VERSION or n_blocks is None:
        return Verdict(frozenset(broken), version, n_blocks)
    # The header's own geometry sizes the records (it may differ from the pool's; the length
    # is still judged), in exact integers: a 32-bit product could wrap to the real length.
    shape = Shape(*dims)  # type: ignore[arg-type]
    record = RECORD_HEAD + shape.payload(version)
    if size != HEADER + n_blocks * record + TRAILER:
        broken.add("READ-LENGTH")
        return Verdict(frozenset(broken), version, n_blocks)
    heads = []
    for index in range(n_blocks):
        base = HEADER + index * record
        block_hash = int.from_bytes(data[base : base + 8], "little")
        n_tokens = int.from_bytes(data[base + 8 : base + 12], "little")
        if not 1 <= n_tokens <= shape.block_tokens:
            broken.add("READ-NTOKENS")
        if block_hash != 0 and n_tokens != shape.block_tokens:
            broken.add("READ-HASH-FILL")
        heads.append((block_hash, n_tokens, data[base + RECORD_HEAD : base + record]))
    if broken:
        return Verdict(frozenset(broken), version, n_blocks)
    blocks = tuple(
        Block(h, n, decode_payload(shape, version, n, payload), payload) for h, n, payload in heads
    )
    return Verdict(frozenset(), version, n_blocks, blocks)


def decode_payload(shape: Shape, version: int, n_tokens: int, payload: bytes) -> list[float]:
    """A record's values in f32, [L][2][Hkv][B][D]; positions at or past n_tokens read as 0.0
    whatever their bytes hold (a reader must not take padding for data)."""
    per_slab = shape.block_tokens * shape.head_dim
    filled = n_tokens * shape.head_dim
    values: list[float] = []
    if version == 1:
        elements = struct.unpack(f"<{shape.elements}e", payload)
        for slab in range(shape.slabs):
            start = slab * per_slab
            values += elements[start : start + filled]
            values += [0.0] * (per_slab - filled)
        return values
    scales = struct.unpack_from(f"<{shape.slabs}f", payload, shape.elements)
    for slab, scale in enumerate(scales):
        start = slab * per_slab
        values += [f32(E4M3[code] * scale) for code in payload[start : start + filled]]
        values += [0.0] * (per_slab - filled)
    return values


def header(data: bytes) -> dict[str, int]:
    """The header of an envelope long enough to have one."""
    names = ("version", "dtype", "n_blocks", *GEOMETRY)
    fields = struct.unpack_from("<HHIIIII", data, 4)
    return dict(zip(names, fields, strict=True))
