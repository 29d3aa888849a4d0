"""What every kind of case shares: the case, its origin, the pool it acts on, the checks
after an import."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import yaml

from ... import oracle
from ...adapters import PoolHandle, ReadBack
from ...checks import (
    CaseFailure,
    ValueSource,
    compare_readback,
    expect_free,
)
from ...errors import Refused
from ...evidence import NOT_HELD, KnownMistake, OrderEvidence, ReaderPool, RefusalEvidence
from ...exprs import BuildTarget, resolve_geometry
from ...testee import Testee
from .._sources import (
    BlockPlan,
    BuiltEnvelope,
    CaseDataError,
    EnvelopeResolver,
    plan_blocks,
)

ALL_READS = oracle.KNOWN_VERSIONS  # a reader of every version the format has
V1_ONLY = frozenset({1})
MAX_DEFAULT_CAPACITY = 64
PRELOAD_VALUES = {"kv": {"seed": 7}}


@dataclass(frozen=True)
class CaseOrigin:
    """Where a case was declared: its file and line, and its YAML (a generated case keeps its
    spec, dumped only when a failure shows it)."""

    file: Path
    line: int
    text: str  # the case's YAML text, as the file has it
    raw: Mapping[str, Any] | None = field(default=None, compare=False)

    @property
    def source(self) -> str:
        if self.text or self.raw is None:
            return self.text
        dumped = yaml.safe_dump(dict(self.raw), sort_keys=False, default_flow_style=None, width=100)
        return dumped.rstrip()


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

    @property
    def generated(self) -> bool:
        """Made by a generator (`expand`) rather than written out in its file."""
        return False

    def skip_reason(self, testee: Testee) -> str | None:
        """Why this testee cannot be checked by this case, or None."""
        return None

    def run(self, testee: Testee) -> None:
        raise NotImplementedError

    def item_markers(self) -> tuple[str, ...]:
        return self.markers


@dataclass(frozen=True, eq=False, kw_only=True)
class NotApplicableCase(Case):
    """A case that means nothing at the geometry under test: skipped, with the reason."""

    kind = "not-applicable"
    reason: str

    def skip_reason(self, testee: Testee) -> str | None:
        return self.reason


@dataclass(frozen=True)
class FileContext:
    """What building a case needs from its file: its named envelopes, where each case was
    declared, and what the cases are built for (the geometry under test, the hash salt)."""

    resolver: EnvelopeResolver
    origin: Callable[[Mapping[str, Any]], CaseOrigin]
    target: BuildTarget = field(default_factory=BuildTarget)

    def geometry(self, raw: Any) -> oracle.Geometry:
        """A case's geometry (`testee` when it gives none)."""
        return resolve_geometry(raw, self.target.geometry)

    def plan(
        self,
        geometry: oracle.Geometry,
        raws: Sequence[Mapping[str, Any]],
        salt: int = 0,
        fixed: bool = False,
    ) -> list[BlockPlan]:
        """Block specs to plans. At the geometry under test their hash chain is the target's
        (a run's own hashes, for a server that keeps blocks); a case at a written-out geometry
        keeps the hashes its file gives (the spec's example, say)."""
        return plan_blocks(geometry, raws, salt=salt, chain=0 if fixed else self.target.salt)


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


def write_all(
    pool: PoolHandle, plans: list[BlockPlan], what: str, preload: bool = False
) -> list[int]:
    ids = []
    write = pool.write_preload if preload else pool.write
    for index, plan in enumerate(plans):
        try:
            ids.append(write(plan.block_hash, plan.n_tokens, plan.values))
        except Refused as refusal:
            raise CaseFailure(
                f"{what} block {index}: {refusal}",
                RefusalEvidence(
                    frozenset(),
                    frozenset(),
                    refusal.code,
                    write=(pool.geometry, plan.block_hash, plan.n_tokens),
                ),
            ) from None
    return ids


DEFAULT_PRELOAD: tuple[Mapping[str, Any], ...] = (
    {"tokens": {"range": [900_000, "900000+B"]}, "values": PRELOAD_VALUES},
    # A partial block (a second full, unregistered, block when B is 1).
    {"n_tokens": "max(1, B-1)", "values": PRELOAD_VALUES},
)


@dataclass(frozen=True, eq=False, kw_only=True)
class PoolSetup:
    """The pool an import or rejection case acts on."""

    geometry: oracle.Geometry
    capacity: int
    preload: tuple[BlockPlan, ...]

    @classmethod
    def build(
        cls, raw: Mapping[str, Any] | None, envelope: BuiltEnvelope, ctx: FileContext
    ) -> PoolSetup:
        """The pool: its own geometry when given, else the geometry under test for an
        envelope built at it (or derived from it), else the envelope's own."""
        raw = raw or {}
        if "geometry" in raw:
            geometry = ctx.geometry(raw["geometry"])
        elif envelope.geometry is not None and not envelope.fixed:
            geometry = ctx.target.geometry
        elif envelope.geometry is not None:
            geometry = envelope.geometry
        else:
            try:
                geometry = oracle.header_geometry(envelope.data)
            except ValueError as exc:
                raise CaseDataError(f"the pool needs a geometry: {exc}") from None
        preload = ctx.plan(geometry, raw.get("preload", DEFAULT_PRELOAD), salt=1000)
        capacity = raw.get("capacity")
        if capacity is None:
            capacity = min(MAX_DEFAULT_CAPACITY, len(preload) + real_blocks(envelope.data) + 1)
        if capacity < len(preload):
            raise CaseDataError(f"capacity {capacity} cannot hold {len(preload)} preloaded blocks")
        return cls(geometry=geometry, capacity=capacity, preload=tuple(preload))

    def open(self, testee: Testee) -> tuple[PoolHandle, list[int]]:
        pool = testee.adapter.open_pool(self.geometry, self.capacity)
        try:
            ids = write_all(pool, list(self.preload), "preloading", preload=True)
        except BaseException:
            pool.close()
            raise
        return pool, ids

    @property
    def hashes(self) -> list[int]:
        return [p.block_hash for p in self.preload if p.block_hash]

    @property
    def probed(self) -> ReaderPool:
        """The pool as the diagnosis makes it again to probe its reader: as many blocks free,
        the same max_blocks (docs/diagnosis.md, "How a reader's mistake is found")."""
        return ReaderPool(self.geometry, self.capacity - len(self.preload), self.capacity)


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
    nan: str = "any",
) -> None:
    """The imported blocks: their ids, the free count, each block's values (NaNs compared as
    `nan` says, tlkv_conformance.diff.NAN_POLICIES) and each hash registered."""
    order = KnownMistake("import-ids", "import returns wrong block ids", ("IMPORT-ORDER",))
    if len(ids) != envelope.n_blocks:
        raise CaseFailure(
            f"import returned {len(ids)} block ids for {envelope.n_blocks} blocks", order
        )
    if len(set(ids)) != len(ids) or set(ids) & set(preload_ids):
        raise CaseFailure(
            f"import returned ids {ids}, which repeat or reuse held blocks {preload_ids}", order
        )
    expect_free(pool, free_before, -len(ids), f"importing {len(ids)} blocks")
    held = [pool.read(block) for block in ids]
    if permuted := import_order_evidence(envelope.records, held):
        raise CaseFailure(import_order_message(ids, permuted), permuted)
    for record, block, got in zip(envelope.records, ids, held, strict=True):
        expected = oracle.Block(record.block_hash, record.n_tokens, record.decoded.values)
        compare_readback(
            expected,
            got,
            pool.dtype,
            f"imported block {record.index} (id {block})",
            block=f"block {record.index}",
            source=ValueSource.of_record(data, record),
            nan=nan,
        )
        if record.block_hash:
            try:
                found = pool.find(record.block_hash)
            except Refused as refusal:
                raise CaseFailure(
                    f"imported block {record.index} hash {record.block_hash:#x} is not "
                    f"registered: {refusal}",
                    KnownMistake(
                        "import-not-registered",
                        "imported blocks stored but their hashes not registered",
                        ("READ-ACCEPT",),
                        f"find({record.block_hash:#x}) refused with {refusal.code} after import",
                        yields_to=NOT_HELD,
                        registry_probe=pool.geometry,
                        imported=(data, record.block_hash),
                    ),
                ) from None
            if pool.read(found).block_hash != record.block_hash:
                raise CaseFailure(
                    f"find({record.block_hash:#x}) gave block {found} of another hash"
                )


def import_order_evidence(
    records: Sequence[oracle.Record], held: Sequence[ReadBack]
) -> OrderEvidence | None:
    """Where the blocks an import's ids name (read back as `held`) hold exactly the
    envelope's records in another order, each told by its hash and fill (all different): that
    order, as evidence. None otherwise (the values' own checks then say what differs)."""
    due = [(r.block_hash, r.n_tokens) for r in records]
    found = [(b.block_hash, b.n_tokens) for b in held]
    if len(set(due)) != len(due) or sorted(found) != sorted(due) or found == due:
        return None
    order = tuple(due.index(key) for key in found)
    # Not the ids as a key: a pool allocates them in the records' order, so the ids sorted
    # would only restate "reversed".
    return OrderEvidence("import", order, ("IMPORT-ORDER",), (("hash", tuple(h for h, _ in due)),))


def import_order_message(ids: Sequence[int], permuted: OrderEvidence) -> str:
    records = ", ".join(str(i) for i in permuted.order)
    return (
        f"import returned ids {list(ids)}, holding the envelope's records {records} in that order"
    )


# -- rejection --------------------------------------------------------------------------------


def header_field(data: bytes, name: str) -> int | None:
    """A header field of possibly short bytes, or None where the bytes end first."""
    field = oracle.HEADER_FIELDS[name]
    return field.read(data) if len(data) >= field.offset + field.size else None
