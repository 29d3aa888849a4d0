"""The oracle: the suite's own codec for the block hash and the TLKV envelope, and the
tl.kv.v1 chunk limits.

Every expected value the suite checks an implementation against comes from here, from the
spec's worked examples, or from golden files. The oracle itself is pinned by the spec's vectors
and by outside references (selftest/test_oracle.py).
"""

from ._checksum import crc32c
from ._hashing import (
    FNV64_OFFSET_BASIS,
    FNV64_PRIME,
    NO_HASH,
    block_hash,
    fnv1a64,
    hash_input,
    sequence_hashes,
)
from ._layout import (
    CRC_SIZE,
    GEOMETRY_FIELDS,
    HEADER_FIELDS,
    HEADER_SIZE,
    KNOWN_VERSIONS,
    MAGIC,
    MIN_ENVELOPE_SIZE,
    RECORD_FIELDS,
    RECORD_PREFIX_SIZE,
    SCALE_SIZE,
    VERSION_DTYPES,
    DType,
    Field,
    Geometry,
)
from ._numerics import (
    E4M3_MAX,
    E4M3_MAX_CODE,
    e4m3_codes_to_f32,
    e4m3_quotients,
    e4m3_scale,
    f16_bits_to_f32,
    f32_to_e4m3_codes,
    f32_to_f16_bits,
    round_to_f16,
)
from ._payload import DecodedPayload, decode_payload, encode_payload, slab_scales
from ._reader import (
    READER_RULES,
    Envelope,
    ReaderProfile,
    ReaderRule,
    Record,
    Rejected,
    Violation,
    decode,
    find_violations,
    header_geometry,
)
from ._transfer import CHUNK_RECEIVE_LIMIT, MAX_CHUNK_PAYLOAD
from ._writer import Block, encode, encode_header, encode_record, seal

__all__ = [
    "CHUNK_RECEIVE_LIMIT",
    "CRC_SIZE",
    "E4M3_MAX",
    "E4M3_MAX_CODE",
    "FNV64_OFFSET_BASIS",
    "FNV64_PRIME",
    "GEOMETRY_FIELDS",
    "HEADER_FIELDS",
    "HEADER_SIZE",
    "KNOWN_VERSIONS",
    "MAGIC",
    "MAX_CHUNK_PAYLOAD",
    "MIN_ENVELOPE_SIZE",
    "NO_HASH",
    "READER_RULES",
    "RECORD_FIELDS",
    "RECORD_PREFIX_SIZE",
    "SCALE_SIZE",
    "VERSION_DTYPES",
    "Block",
    "DType",
    "DecodedPayload",
    "Envelope",
    "Field",
    "Geometry",
    "ReaderProfile",
    "ReaderRule",
    "Record",
    "Rejected",
    "Violation",
    "block_hash",
    "crc32c",
    "decode",
    "decode_payload",
    "e4m3_codes_to_f32",
    "e4m3_quotients",
    "e4m3_scale",
    "encode",
    "encode_header",
    "encode_payload",
    "encode_record",
    "f16_bits_to_f32",
    "f32_to_e4m3_codes",
    "f32_to_f16_bits",
    "find_violations",
    "fnv1a64",
    "hash_input",
    "header_geometry",
    "round_to_f16",
    "seal",
    "sequence_hashes",
    "slab_scales",
]
