"""What every kind of case shares: the case, its origin, the pool it acts on, the checks
after an import."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from ... import oracle
from ...adapters import PoolHandle
from ...checks import (
    CaseFailure,
    ValueSource,
    compare_readback,
    expect_free,
)
from ...errors import Refused
from ...testee import Testee
from .._sources import (
    BlockPlan,
    BuiltEnvelope,
    CaseDataError,
    EnvelopeResolver,
    geometry_of,
    plan_blocks,
)

ALL_READS = frozenset({1, 2})
V1_ONLY = frozenset({1})
MAX_DEFAULT_CAPACITY = 64
PRELOAD_VALUES = {"pcg64": {"seed": 7, "low": -8.0, "high": 8.0}}


@dataclass(frozen=True)
class CaseOrigin:
    """Where a case was declared."""

    file: Path
    line: int
    source: str  # the case's YAML text


@dataclass(frozen=True, eq=False, kw_only=True)
class Case:
    """One conformance case. Subclasses add their data and `run`."""

    kind: ClassVar[str]
    markers: ClassVar[tuple[str, ...]] = ()

    id: str
    reqs: tuple[str, ...]
    level: str
    doc: str
    origin: CaseOrigin

    def skip_reason(self, testee: Testee) -> str | None:
        """Why this testee cannot be checked by this case, or None."""
        return None

    def run(self, testee: Testee) -> None:
        raise NotImplementedError

    def item_markers(self) -> tuple[str, ...]:
        return self.markers


@dataclass(frozen=True)
class FileContext:
    """What building a case needs from its file."""

    resolver: EnvelopeResolver
    origin: Callable[[Mapping[str, Any]], CaseOrigin]


def needs(testee: Testee, *capabilities: str) -> str | None:
    for capability in capabilities:
        if not testee.can(capability):
            return f"{testee.label} cannot observe {capability} through this way in"
    return None


def needs_write(testee: Testee, version: int) -> str | None:
    if version not in testee.info.write_versions:
        return f"{testee.label} does not write v{version}"
    return None


def v2_level_for(raw_level: str | None, testee: Testee) -> str:
    return raw_level or testee.v2_level


# -- pools ------------------------------------------------------------------------------------


def write_all(pool: PoolHandle, plans: list[BlockPlan], what: str) -> list[int]:
    ids = []
    for index, plan in enumerate(plans):
        try:
            ids.append(pool.write(plan.block_hash, plan.n_tokens, plan.values))
        except Refused as refusal:
            raise CaseFailure(f"{what} block {index}: {refusal}") from None
    return ids


def default_preload(geometry: oracle.Geometry) -> list[BlockPlan]:
    """Two blocks every import or rejection case starts from: a registered full block and a
    partial one (a second full, unregistered, block when B is 1)."""
    b = geometry.block_tokens
    raws: list[dict[str, Any]] = [
        {"tokens": list(range(900_000, 900_000 + b)), "values": PRELOAD_VALUES},
        {"n_tokens": max(1, b - 1), "values": PRELOAD_VALUES},
    ]
    return plan_blocks(geometry, raws, salt=1000)


@dataclass(frozen=True, eq=False, kw_only=True)
class PoolSetup:
    """The pool an import or rejection case acts on."""

    geometry: oracle.Geometry
    capacity: int
    preload: tuple[BlockPlan, ...]

    @classmethod
    def build(cls, raw: Mapping[str, Any] | None, envelope: BuiltEnvelope) -> PoolSetup:
        raw = raw or {}
        if "geometry" in raw:
            geometry = geometry_of(raw["geometry"])
        elif envelope.geometry is not None:
            geometry = envelope.geometry
        else:
            try:
                geometry = oracle.header_geometry(envelope.data)
            except ValueError as exc:
                raise CaseDataError(f"the pool needs a geometry: {exc}") from None
        preload = (
            plan_blocks(geometry, raw["preload"], salt=1000)
            if "preload" in raw
            else default_preload(geometry)
        )
        capacity = raw.get("capacity")
        if capacity is None:
            capacity = min(MAX_DEFAULT_CAPACITY, len(preload) + real_blocks(envelope.data) + 1)
        if capacity < len(preload):
            raise CaseDataError(f"capacity {capacity} cannot hold {len(preload)} preloaded blocks")
        return cls(geometry=geometry, capacity=capacity, preload=tuple(preload))

    def open(self, testee: Testee) -> tuple[PoolHandle, list[int]]:
        pool = testee.adapter.open_pool(self.geometry, self.capacity)
        try:
            ids = write_all(pool, list(self.preload), "preloading")
        except BaseException:
            pool.close()
            raise
        return pool, ids

    @property
    def hashes(self) -> list[int]:
        return [p.block_hash for p in self.preload if p.block_hash]


def real_blocks(data: bytes) -> int:
    """How many whole records the bytes hold, whatever the header claims."""
    try:
        geometry = oracle.header_geometry(data)
        record = geometry.record_size(oracle.HEADER_FIELDS["version"].read(data))
    except ValueError:
        return 0
    return max(0, (len(data) - oracle.MIN_ENVELOPE_SIZE) // record)


def record_hashes(data: bytes) -> list[int]:
    """The block hashes of the records the bytes hold, as far as they can be read."""
    try:
        geometry = oracle.header_geometry(data)
        version = oracle.HEADER_FIELDS["version"].read(data)
        geometry.record_size(version)
    except ValueError:
        return []
    return [
        oracle.RECORD_FIELDS["block_hash"].read(data, geometry.record_offset(i, version))
        for i in range(real_blocks(data))
    ]


def reader_reason(testee: Testee, reads: frozenset[int] | None) -> str | None:
    if reads is not None and testee.info.read_versions != reads:
        have = ",".join(f"v{v}" for v in sorted(testee.info.read_versions))
        want = ",".join(f"v{v}" for v in sorted(reads))
        return f"this case is for a reader of {want}; {testee.label} reads {have}"
    return None


# -- export -----------------------------------------------------------------------------------


def given_bytes(raw: Mapping[str, Any] | None, ctx: FileContext) -> bytes | None:
    if raw is None:
        return None
    return ctx.resolver.resolve(raw).data


def indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())


# -- import -----------------------------------------------------------------------------------


def reads_for(raw_reader: str | None) -> frozenset[int] | None:
    return V1_ONLY if raw_reader == "v1-only" else None


def check_imported(
    pool: PoolHandle,
    envelope: oracle.Envelope,
    ids: list[int],
    preload_ids: list[int],
    free_before: int | None,
    data: bytes,
) -> None:
    if len(ids) != envelope.n_blocks:
        raise CaseFailure(f"import returned {len(ids)} block ids for {envelope.n_blocks} blocks")
    if len(set(ids)) != len(ids) or set(ids) & set(preload_ids):
        raise CaseFailure(
            f"import returned ids {ids}, which repeat or reuse held blocks {preload_ids}"
        )
    expect_free(pool, free_before, -len(ids), f"importing {len(ids)} blocks")
    for record, block in zip(envelope.records, ids, strict=True):
        expected = oracle.Block(record.block_hash, record.n_tokens, record.decoded.values)
        compare_readback(
            expected,
            pool.read(block),
            pool.dtype,
            f"imported block {record.index} (id {block})",
            block=f"block {record.index}",
            source=ValueSource.of_record(data, record),
        )
        if record.block_hash:
            try:
                found = pool.find(record.block_hash)
            except Refused as refusal:
                raise CaseFailure(
                    f"imported block {record.index} hash {record.block_hash:#x} is not "
                    f"registered: {refusal}"
                ) from None
            if pool.read(found).block_hash != record.block_hash:
                raise CaseFailure(
                    f"find({record.block_hash:#x}) gave block {found} of another hash"
                )


# -- rejection --------------------------------------------------------------------------------


def header_field(data: bytes, name: str) -> int | None:
    """A header field of possibly short bytes, or None where the bytes end first."""
    field = oracle.HEADER_FIELDS[name]
    return field.read(data) if len(data) >= field.offset + field.size else None
