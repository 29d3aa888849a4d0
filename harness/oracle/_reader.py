"""Reading envelopes: every reader rule, each with a stable id, its C code and its gRPC status.

The checks run in exact integer arithmetic and look only at bytes that exist, so any input is
safe: a count is never used to size anything before the length rule has confirmed it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from ._checksum import crc32c
from ._layout import (
    CRC_SIZE,
    GEOMETRY_FIELDS,
    HEADER_FIELDS,
    HEADER_SIZE,
    MAGIC,
    MIN_ENVELOPE_SIZE,
    RECORD_FIELDS,
    RECORD_PREFIX_SIZE,
    SCALE_SIZE,
    VERSION_DTYPES,
    Geometry,
)
from ._payload import DecodedPayload, decode_payload


@dataclass(frozen=True)
class ReaderRule:
    """One rule a reader enforces, and how a refusal is reported in C and over gRPC."""

    id: str
    c_code: str
    grpc_status: str
    text: str


_RULES = (
    ReaderRule("READ-LENGTH-MIN", "EFORMAT", "DATA_LOSS", "the length is at least 32"),
    ReaderRule(
        "READ-LENGTH",
        "EFORMAT",
        "DATA_LOSS",
        "the length equals 28 + n * (12 + P) + 4 for the header's values",
    ),
    ReaderRule("READ-MAGIC", "EFORMAT", "DATA_LOSS", "the magic is TLKV"),
    ReaderRule("READ-CRC", "EFORMAT", "DATA_LOSS", "the CRC-32C trailer matches"),
    ReaderRule(
        "READ-VERSION",
        "EFORMAT",
        "FAILED_PRECONDITION",
        "the version is one this reader supports",
    ),
    ReaderRule(
        "READ-DTYPE", "EFORMAT", "DATA_LOSS", "the dtype is the version's (1 with v1, 3 with v2)"
    ),
    ReaderRule(
        "READ-GEOMETRY",
        "ESHAPE",
        "DATA_LOSS",
        "block_tokens, n_layers, n_kv_heads, head_dim equal the receiving pool's",
    ),
    ReaderRule("READ-NTOKENS", "EFORMAT", "DATA_LOSS", "every n_tokens is in 1..B"),
    ReaderRule("READ-HASH-FILL", "EFORMAT", "DATA_LOSS", "a non-zero block_hash has n_tokens == B"),
)
READER_RULES: dict[str, ReaderRule] = {rule.id: rule for rule in _RULES}


@dataclass(frozen=True)
class ReaderProfile:
    """What a receiving reader accepts: its pool's geometry and the versions it reads."""

    geometry: Geometry
    read_versions: frozenset[int] = frozenset(VERSION_DTYPES)


@dataclass(frozen=True)
class Violation:
    rule: ReaderRule
    detail: str

    def __str__(self) -> str:
        return f"{self.rule.id}: {self.detail}"


class Rejected(Exception):
    """The envelope fails one or more reader rules."""

    def __init__(self, violations: tuple[Violation, ...]) -> None:
        super().__init__("; ".join(str(v) for v in violations))
        self.violations = violations

    @property
    def rule_ids(self) -> frozenset[str]:
        return frozenset(v.rule.id for v in self.violations)

    @property
    def c_codes(self) -> frozenset[str]:
        return frozenset(v.rule.c_code for v in self.violations)

    @property
    def grpc_statuses(self) -> frozenset[str]:
        return frozenset(v.rule.grpc_status for v in self.violations)


def _hex(data: bytes) -> str:
    return data.hex(" ") if data else "(none)"


def _payload_size(dims: dict[str, int], version: int) -> int:
    """P from raw header values, which may be zero or huge (exact integers, no wrap)."""
    slabs = dims["n_layers"] * 2 * dims["n_kv_heads"]
    if version == 1:
        return slabs * dims["block_tokens"] * dims["head_dim"] * 2
    return slabs * (dims["block_tokens"] * dims["head_dim"] + SCALE_SIZE)


def find_violations(data: bytes, profile: ReaderProfile) -> tuple[Violation, ...]:
    """Every reader rule `data` breaks, each checked wherever the bytes allow it to be."""
    found: list[Violation] = []

    def broke(rule_id: str, detail: str) -> None:
        found.append(Violation(READER_RULES[rule_id], detail))

    size = len(data)
    # Header fields are read only from bytes before the trailer: in a short input, bytes that
    # stand where a field would be are the CRC, and judging them as the field would charge the
    # input with faults it does not have.
    body_size = max(0, size - CRC_SIZE)
    if size < MIN_ENVELOPE_SIZE:
        broke("READ-LENGTH-MIN", f"{size} bytes, fewer than {MIN_ENVELOPE_SIZE}")
    if body_size >= len(MAGIC) and data[: len(MAGIC)] != MAGIC:
        broke("READ-MAGIC", f"magic is {_hex(data[:4])}, expected {_hex(MAGIC)} (TLKV)")
    if size >= CRC_SIZE:
        stored = struct.unpack_from("<I", data, size - CRC_SIZE)[0]
        computed = crc32c(data[: size - CRC_SIZE])
        if stored != computed:
            broke(
                "READ-CRC",
                f"trailer {stored:#010x}, CRC-32C of the bytes before is {computed:#010x}",
            )

    def header(name: str) -> int | None:
        f = HEADER_FIELDS[name]
        return f.read(data) if body_size >= f.offset + f.size else None

    version = header("version")
    if version is not None and version not in profile.read_versions:
        readable = ", ".join(str(v) for v in sorted(profile.read_versions))
        broke("READ-VERSION", f"version {version}, this reader reads {readable}")
    dtype = header("dtype")
    if dtype is not None and version in VERSION_DTYPES and dtype != VERSION_DTYPES[version]:
        broke(
            "READ-DTYPE",
            f"dtype {dtype} with version {version}, expected {VERSION_DTYPES[version]:d}",
        )

    dims = {name: header(name) for name in GEOMETRY_FIELDS}
    expected_dims = profile.geometry.as_dict()
    mismatched = [
        f"{name} {value} (pool {expected_dims[name]})"
        for name, value in dims.items()
        if value is not None and value != expected_dims[name]
    ]
    if mismatched:
        broke("READ-GEOMETRY", ", ".join(mismatched))

    n_blocks = header("n_blocks")
    if size < MIN_ENVELOPE_SIZE or version not in VERSION_DTYPES or n_blocks is None:
        return tuple(found)
    record_size = RECORD_PREFIX_SIZE + _payload_size(dims, version)  # type: ignore[arg-type]
    expected_size = HEADER_SIZE + n_blocks * record_size + CRC_SIZE
    if size != expected_size:
        broke(
            "READ-LENGTH",
            f"{size} bytes, the header's n_blocks {n_blocks} and geometry give {expected_size}",
        )
        return tuple(found)

    block_tokens = dims["block_tokens"]
    for index in range(n_blocks):
        base = HEADER_SIZE + index * record_size
        block_hash = RECORD_FIELDS["block_hash"].read(data, base)
        n_tokens = RECORD_FIELDS["n_tokens"].read(data, base)
        if not 1 <= n_tokens <= block_tokens:  # type: ignore[operator]
            broke("READ-NTOKENS", f"block {index} n_tokens {n_tokens}, outside 1..{block_tokens}")
        if block_hash != 0 and n_tokens != block_tokens:
            broke(
                "READ-HASH-FILL",
                f"block {index} hash {block_hash:#018x} with n_tokens {n_tokens} of {block_tokens}",
            )
    return tuple(found)


@dataclass(frozen=True, eq=False)
class Record:
    """One block record of an accepted envelope."""

    index: int
    offset: int
    block_hash: int
    n_tokens: int
    payload: bytes
    decoded: DecodedPayload = field(repr=False)


@dataclass(frozen=True, eq=False)
class Envelope:
    """An envelope that passed every reader rule."""

    version: int
    geometry: Geometry
    records: tuple[Record, ...]
    crc: int

    @property
    def n_blocks(self) -> int:
        return len(self.records)


def header_geometry(data: bytes) -> Geometry:
    """The geometry an envelope's header declares (ValueError if it has none)."""
    if len(data) < HEADER_SIZE:
        raise ValueError(f"{len(data)} bytes cannot hold a {HEADER_SIZE}-byte header")
    return Geometry(**{name: HEADER_FIELDS[name].read(data) for name in GEOMETRY_FIELDS})


def decode(data: bytes, profile: ReaderProfile | None = None) -> Envelope:
    """Apply every reader rule, then decode. Without a profile, the header's own geometry and
    every known version are accepted (for reading golden files and diffs)."""
    data = bytes(data)
    if profile is None:
        try:
            profile = ReaderProfile(header_geometry(data))
        except ValueError as exc:
            raise Rejected((Violation(READER_RULES["READ-GEOMETRY"], str(exc)),)) from None
    violations = find_violations(data, profile)
    if violations:
        raise Rejected(violations)
    version = HEADER_FIELDS["version"].read(data)
    geometry = profile.geometry
    record_size = geometry.record_size(version)
    records = []
    for index in range(HEADER_FIELDS["n_blocks"].read(data)):
        base = HEADER_SIZE + index * record_size
        payload = data[base + RECORD_PREFIX_SIZE : base + record_size]
        records.append(
            Record(
                index=index,
                offset=base,
                block_hash=RECORD_FIELDS["block_hash"].read(data, base),
                n_tokens=RECORD_FIELDS["n_tokens"].read(data, base),
                payload=payload,
                decoded=decode_payload(geometry, version, payload),
            )
        )
    crc = struct.unpack_from("<I", data, len(data) - CRC_SIZE)[0]
    return Envelope(version=version, geometry=geometry, records=tuple(records), crc=crc)
