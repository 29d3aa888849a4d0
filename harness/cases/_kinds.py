"""The kinds of case: what each declares, what the oracle confirms at collection, how it runs.

A case is built once, when its file is collected; expected values are computed then, from the
spec's numbers given in the file, golden files, or the oracle. `run` only calls the testee.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from .. import oracle
from ..adapters import Capability, PoolHandle
from ..checks import (
    CaseFailure,
    ValueSource,
    compare_envelopes,
    compare_readback,
    compare_snapshots,
    in_pool_precision,
    refused_with,
    snapshot,
)
from ..diff import envelope_diff
from ..errors import Refused
from ..testee import Testee
from ._sources import (
    BlockPlan,
    BuiltEnvelope,
    CaseDataError,
    EnvelopeResolver,
    geometry_of,
    mutate,
    plan_blocks,
    tokens_of,
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


def _needs(testee: Testee, *capabilities: str) -> str | None:
    for capability in capabilities:
        if not testee.can(capability):
            return f"{testee.label} cannot observe {capability} through this way in"
    return None


def _needs_write(testee: Testee, version: int) -> str | None:
    if version not in testee.info.write_versions:
        return f"{testee.label} does not write v{version}"
    return None


def _v2_level(raw_level: str | None, testee: Testee) -> str:
    return raw_level or testee.v2_level


# -- hashing ----------------------------------------------------------------------------------


def _quote_input(parent: int, tokens: list[int]) -> str:
    data = oracle.hash_input(parent, tokens)
    shown = data[:48].hex(" ") + (" ..." if len(data) > 48 else "")
    return f"{len(data)} bytes hashed: {shown}"


@dataclass(frozen=True, eq=False, kw_only=True)
class HashCase(Case):
    kind = "hash"
    markers = ("hash",)

    parent: int
    tokens: tuple[int, ...]
    expected: int

    @classmethod
    def build(cls, raw: Mapping[str, Any], common: dict[str, Any], ctx: FileContext) -> list[Case]:
        parent, tokens = raw.get("parent", 0), tokens_of(raw["tokens"])
        computed = oracle.block_hash(parent, tokens)
        if "expect" in raw and raw["expect"] != computed:
            raise CaseDataError(f"expect is {raw['expect']:#x}, the oracle computes {computed:#x}")
        return [cls(**common, parent=parent, tokens=tuple(tokens), expected=computed)]

    def skip_reason(self, testee: Testee) -> str | None:
        return _needs(testee, Capability.HASH)

    def run(self, testee: Testee) -> None:
        got = testee.adapter.block_hash(self.parent, list(self.tokens))
        if got != self.expected:
            raise CaseFailure(
                f"block_hash(parent {self.parent:#x}, {len(self.tokens)} tokens) = {got:#018x}, "
                f"expected {self.expected:#018x}\n{_quote_input(self.parent, list(self.tokens))}"
            )


@dataclass(frozen=True, eq=False, kw_only=True)
class HashSequenceCase(Case):
    kind = "hash-sequence"
    markers = ("hash",)

    block_tokens: int
    tokens: tuple[int, ...]
    expected: tuple[int, ...]

    @classmethod
    def build(cls, raw: Mapping[str, Any], common: dict[str, Any], ctx: FileContext) -> list[Case]:
        tokens, block_tokens = tokens_of(raw["tokens"]), raw["block_tokens"]
        full = [h for h in oracle.sequence_hashes(tokens, block_tokens) if h != oracle.NO_HASH]
        if "expect" in raw and list(raw["expect"]) != full:
            raise CaseDataError(
                "expect differs from the oracle's hashes: " + ", ".join(f"{h:#x}" for h in full)
            )
        if not full:
            raise CaseDataError("the sequence has no full block, so nothing to hash")
        return [
            cls(**common, block_tokens=block_tokens, tokens=tuple(tokens), expected=tuple(full))
        ]

    def skip_reason(self, testee: Testee) -> str | None:
        return _needs(testee, Capability.HASH)

    def run(self, testee: Testee) -> None:
        parent = oracle.NO_HASH
        b = self.block_tokens
        for index, expected in enumerate(self.expected):
            block = list(self.tokens[index * b : (index + 1) * b])
            got = testee.adapter.block_hash(parent, block)
            if got != expected:
                raise CaseFailure(
                    f"block {index} of {len(self.expected)} (B = {b}): hash {got:#018x}, expected "
                    f"{expected:#018x} (parent {parent:#x})\n{_quote_input(parent, block)}"
                )
            parent = got


# -- pools ------------------------------------------------------------------------------------


def _write_all(pool: PoolHandle, plans: list[BlockPlan], what: str) -> list[int]:
    ids = []
    for index, plan in enumerate(plans):
        try:
            ids.append(pool.write(plan.block_hash, plan.n_tokens, plan.values))
        except Refused as refusal:
            raise CaseFailure(f"{what} block {index}: {refusal}") from None
    return ids


def _default_preload(geometry: oracle.Geometry) -> list[BlockPlan]:
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
            else _default_preload(geometry)
        )
        capacity = raw.get("capacity")
        if capacity is None:
            capacity = min(MAX_DEFAULT_CAPACITY, len(preload) + _real_blocks(envelope.data) + 1)
        if capacity < len(preload):
            raise CaseDataError(f"capacity {capacity} cannot hold {len(preload)} preloaded blocks")
        return cls(geometry=geometry, capacity=capacity, preload=tuple(preload))

    def open(self, testee: Testee) -> tuple[PoolHandle, list[int]]:
        pool = testee.adapter.open_pool(self.geometry, self.capacity)
        try:
            ids = _write_all(pool, list(self.preload), "preloading")
        except BaseException:
            pool.close()
            raise
        return pool, ids

    @property
    def hashes(self) -> list[int]:
        return [p.block_hash for p in self.preload if p.block_hash]


def _real_blocks(data: bytes) -> int:
    """How many whole records the bytes hold, whatever the header claims."""
    try:
        geometry = oracle.header_geometry(data)
        record = geometry.record_size(oracle.HEADER_FIELDS["version"].read(data))
    except ValueError:
        return 0
    return max(0, (len(data) - oracle.MIN_ENVELOPE_SIZE) // record)


def _record_hashes(data: bytes) -> list[int]:
    """The block hashes of the records the bytes hold, as far as they can be read."""
    try:
        geometry = oracle.header_geometry(data)
        version = oracle.HEADER_FIELDS["version"].read(data)
        geometry.record_size(version)
    except ValueError:
        return []
    return [
        oracle.RECORD_FIELDS["block_hash"].read(data, geometry.record_offset(i, version))
        for i in range(_real_blocks(data))
    ]


def _reader_reason(testee: Testee, reads: frozenset[int] | None) -> str | None:
    if reads is not None and testee.info.read_versions != reads:
        have = ",".join(f"v{v}" for v in sorted(testee.info.read_versions))
        want = ",".join(f"v{v}" for v in sorted(reads))
        return f"this case is for a reader of {want}; {testee.label} reads {have}"
    return None


# -- export -----------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False, kw_only=True)
class ExportCase(Case):
    kind = "export"
    markers = ("writer",)

    geometry: oracle.Geometry
    version: int
    history: tuple[BlockPlan, ...]
    blocks: tuple[BlockPlan, ...]
    expected: bytes
    v2_level: str | None

    @classmethod
    def build(cls, raw: Mapping[str, Any], common: dict[str, Any], ctx: FileContext) -> list[Case]:
        geometry, version = geometry_of(raw["geometry"]), raw["version"]
        blocks = plan_blocks(geometry, raw["blocks"])
        history = plan_blocks(geometry, raw.get("history", []), salt=500)
        try:
            computed = oracle.encode(geometry, [b.as_oracle_block() for b in blocks], version)
        except ValueError as exc:
            raise CaseDataError(str(exc)) from None
        expected = _given_bytes(raw.get("expect"), ctx)
        if expected is not None and expected != computed:
            raise CaseDataError(
                "the expected bytes differ from the oracle's encoding of these blocks:\n"
                + _indent(envelope_diff(computed, expected))
            )
        return [
            cls(
                **common,
                geometry=geometry,
                version=version,
                history=tuple(history),
                blocks=tuple(blocks),
                expected=computed,
                v2_level=raw.get("v2_level"),
            )
        ]

    def item_markers(self) -> tuple[str, ...]:
        return (*self.markers, f"v{self.version}")

    def skip_reason(self, testee: Testee) -> str | None:
        return _needs(testee, Capability.POOL, Capability.EXPORT) or _needs_write(
            testee, self.version
        )

    def run(self, testee: Testee) -> None:
        capacity = max(len(self.blocks), len(self.history), 1)
        with testee.adapter.open_pool(self.geometry, capacity) as pool:
            for block in _write_all(pool, list(self.history), "history"):
                pool.release(block)
            ids = _write_all(pool, list(self.blocks), "writing")
            size = pool.export_bytes(len(ids), self.version)
            if size != len(self.expected):
                raise CaseFailure(
                    f"export_bytes({len(ids)}, v{self.version}) = {size}, expected "
                    f"{len(self.expected)} (28 + n * (12 + P) + 4)"
                )
            data = pool.export(ids, self.version)
            compare_envelopes(
                self.expected,
                data,
                _v2_level(self.v2_level, testee) if self.version == 2 else "strict",
            )


def _given_bytes(raw: Mapping[str, Any] | None, ctx: FileContext) -> bytes | None:
    if raw is None:
        return None
    return ctx.resolver.resolve(raw).data


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())


# -- import -----------------------------------------------------------------------------------


def _reads_for(raw_reader: str | None) -> frozenset[int] | None:
    return V1_ONLY if raw_reader == "v1-only" else None


@dataclass(frozen=True, eq=False, kw_only=True)
class ImportCase(Case):
    kind = "import"
    markers = ("reader",)

    data: bytes
    envelope: oracle.Envelope
    pool: PoolSetup
    reads: frozenset[int] | None

    @classmethod
    def build(cls, raw: Mapping[str, Any], common: dict[str, Any], ctx: FileContext) -> list[Case]:
        built = ctx.resolver.resolve(raw["envelope"])
        pool = PoolSetup.build(raw.get("pool"), built)
        reads = _reads_for(raw.get("reader"))
        try:
            envelope = oracle.decode(
                built.data, oracle.ReaderProfile(pool.geometry, reads or ALL_READS)
            )
        except oracle.Rejected as exc:
            raise CaseDataError(f"the oracle rejects this envelope: {exc}") from None
        if envelope.n_blocks > pool.capacity - len(pool.preload):
            raise CaseDataError(f"the pool has no room for {envelope.n_blocks} blocks")
        return [cls(**common, data=built.data, envelope=envelope, pool=pool, reads=reads)]

    def item_markers(self) -> tuple[str, ...]:
        return (*self.markers, f"v{self.envelope.version}")

    def skip_reason(self, testee: Testee) -> str | None:
        if reason := _needs(testee, Capability.POOL, Capability.IMPORT):
            return reason
        if reason := _reader_reason(testee, self.reads):
            return reason
        if self.envelope.version not in testee.info.read_versions:
            return f"{testee.label} does not read v{self.envelope.version}"
        return None

    def run(self, testee: Testee) -> None:
        pool, preload_ids = self.pool.open(testee)
        with pool:
            free_before = pool.free_blocks()
            try:
                ids = pool.import_envelope(self.data, self.pool.capacity)
            except Refused as refusal:
                raise CaseFailure(f"a valid envelope was refused: {refusal}") from None
            check_imported(pool, self.envelope, ids, preload_ids, free_before, self.data)


def check_imported(
    pool: PoolHandle,
    envelope: oracle.Envelope,
    ids: list[int],
    preload_ids: list[int],
    free_before: int,
    data: bytes,
) -> None:
    if len(ids) != envelope.n_blocks:
        raise CaseFailure(f"import returned {len(ids)} block ids for {envelope.n_blocks} blocks")
    if len(set(ids)) != len(ids) or set(ids) & set(preload_ids):
        raise CaseFailure(
            f"import returned ids {ids}, which repeat or reuse held blocks {preload_ids}"
        )
    free_after = pool.free_blocks()
    if free_after != free_before - len(ids):
        raise CaseFailure(
            f"free blocks {free_before} before importing {len(ids)}, {free_after} after"
        )
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


@dataclass(frozen=True)
class Verdict:
    """What the oracle says of an envelope under one reader profile."""

    rule_ids: frozenset[str]
    c_codes: frozenset[str]
    grpc_statuses: frozenset[str]
    detail: str


def _verdict(data: bytes, geometry: oracle.Geometry, reads: frozenset[int]) -> Verdict:
    violations = oracle.find_violations(data, oracle.ReaderProfile(geometry, reads))
    rejected = oracle.Rejected(violations)
    return Verdict(rejected.rule_ids, rejected.c_codes, rejected.grpc_statuses, str(rejected))


@dataclass(frozen=True, eq=False, kw_only=True)
class RejectCase(Case):
    kind = "reject"
    markers = ("reader",)

    data: bytes
    version: int | None
    pool: PoolSetup
    reads: frozenset[int] | None
    # The oracle's verdict per reader (all versions / v1 only), and what the case expects.
    verdicts: tuple[tuple[frozenset[int], Verdict], ...]
    rule: str | None
    also: frozenset[str]
    code: str | None
    grpc: str | None
    rules_first: bool

    @property
    def rules(self) -> frozenset[str]:
        """Every rule the envelope breaks: the named one and those it cannot help breaking."""
        return frozenset({self.rule} if self.rule else set()) | self.also

    @classmethod
    def build(cls, raw: Mapping[str, Any], common: dict[str, Any], ctx: FileContext) -> list[Case]:
        # Every rejection case also checks that the refused import left the pool untouched.
        if "READ-ATOMIC" not in common["reqs"]:
            common = {**common, "reqs": (*common["reqs"], "READ-ATOMIC")}
        base = ctx.resolver.resolve(raw["envelope"])
        reseal = raw.get("reseal", True)
        variants = list(_expansions(raw.get("expand"), base.data, reseal))
        if not variants:
            variants = [("", mutate(base.data, raw.get("mutate", []), reseal, ctx.resolver))]
        elif raw.get("mutate"):
            raise CaseDataError("a case with expand takes no mutate list")
        pool = PoolSetup.build(raw.get("pool"), base)
        reads = _reads_for(raw.get("reader"))
        expect = raw["expect"]
        version = base.version or _header_field(base.data, "version")
        cases: list[Case] = []
        for suffix, data in variants:
            verdicts = tuple(
                (r, _verdict(data, pool.geometry, r))
                for r in ((reads,) if reads else (ALL_READS, V1_ONLY))
            )
            case = cls(
                **{**common, "id": common["id"] + suffix},
                data=data,
                version=version,
                pool=pool,
                reads=reads,
                verdicts=verdicts,
                rule=expect.get("rule"),
                also=frozenset(expect.get("also", [])),
                code=expect.get("code"),
                grpc=expect.get("grpc"),
                rules_first=expect.get("rules_first", False),
            )
            case._confirm_single_fault()
            cases.append(case)
        return cases

    def _primary(self) -> Verdict:
        return self.verdicts[0][1]

    def _confirm_single_fault(self) -> None:
        """The collection-time check that the envelope breaks the named rule and no other."""
        verdict = self._primary()
        if self.rule is not None:
            unknown = sorted(self.rules - set(oracle.READER_RULES))
            if unknown:
                raise CaseDataError(
                    f"no reader rule {', '.join(unknown)}; rules: {', '.join(oracle.READER_RULES)}"
                )
            if verdict.rule_ids != self.rules:
                broken = ", ".join(sorted(verdict.rule_ids)) or "none"
                named = ", ".join(sorted(self.rules))
                raise CaseDataError(
                    f"the envelope must break {named} and no other rule; the oracle finds: "
                    f"{broken}" + (f" ({verdict.detail})" if verdict.detail else "")
                )
            for other in sorted(self.rules):
                codes = oracle.READER_RULES[other]
                if (self.code, self.grpc) != (codes.c_code, codes.grpc_status):
                    raise CaseDataError(
                        f"{other} is refused with {codes.c_code} / {codes.grpc_status}, "
                        f"the case expects {self.code} / {self.grpc}"
                    )
        elif self.code is not None:  # a pool refusal (ENOMEM, EINVAL): a readable envelope
            if verdict.rule_ids:
                raise CaseDataError(
                    f"a {self.code} case needs an envelope the oracle accepts; it finds: "
                    + verdict.detail
                )
        elif not verdict.rule_ids:
            raise CaseDataError("the oracle accepts this envelope, so nothing can reject it")

    def item_markers(self) -> tuple[str, ...]:
        return (*self.markers, f"v{self.version}") if self.version in (1, 2) else self.markers

    def _verdict_for(self, testee: Testee) -> Verdict | None:
        for reads, verdict in self.verdicts:
            if reads == testee.info.read_versions:
                return verdict
        return None

    def skip_reason(self, testee: Testee) -> str | None:
        if reason := _needs(testee, Capability.POOL, Capability.IMPORT):
            return reason
        if reason := _reader_reason(testee, self.reads):
            return reason
        verdict = self._verdict_for(testee)
        if verdict is None:
            return f"no oracle verdict for a reader of {sorted(testee.info.read_versions)}"
        if self.rule is not None and verdict.rule_ids != self.rules:
            return (
                f"for {testee.label}'s reader this envelope breaks more than {self.rule} "
                f"({', '.join(sorted(verdict.rule_ids))})"
            )
        if self.code is not None and self.rule is None and verdict.rule_ids:
            return f"for {testee.label}'s reader this envelope breaks {verdict.detail}"
        return None

    def _acceptable(self, testee: Testee, verdict: Verdict) -> set[str]:
        if self.code is not None:
            return {testee.refusal(self.code, self.grpc)}
        domain = (
            verdict.grpc_statuses if testee.adapter.status_domain == "grpc" else verdict.c_codes
        )
        return set(domain)

    def _limit_codes(self, testee: Testee, free: int) -> set[str]:
        """Refusals the contract also allows when the header claims more blocks than the
        caller's max_blocks (EINVAL) or the free blocks (ENOMEM): the spec does not order them
        against the reader rules. Cases with `rules_first` demand the rule's code alone."""
        declared = _header_field(self.data, "n_blocks")
        if self.rules_first or declared is None or not self.rules:
            return set()
        codes = set()
        if declared > self.pool.capacity and testee.adapter.status_domain == "c":
            codes.add("EINVAL")
        if declared > free:
            codes.add(testee.refusal("ENOMEM"))
        return codes

    def run(self, testee: Testee) -> None:
        verdict = self._verdict_for(testee)
        assert verdict is not None
        pool, preload_ids = self.pool.open(testee)
        with pool:
            watched = sorted(set(self.pool.hashes) | set(_record_hashes(self.data)))
            before = snapshot(pool, preload_ids, watched)
            acceptable = self._acceptable(testee, verdict) | self._limit_codes(testee, before.free)
            why = verdict.detail or f"expected {self.code}"
            try:
                ids = pool.import_envelope(self.data, self.pool.capacity)
            except Refused as refusal:
                if refusal.code not in acceptable:
                    said = f"; it said: {refusal.detail}" if refusal.detail else ""
                    raise CaseFailure(
                        f"refused with {refusal.code}, expected {' or '.join(sorted(acceptable))} "
                        f"({why}){said}"
                    ) from None
            else:
                raise CaseFailure(
                    f"accepted (block ids {ids}) an envelope it must refuse with "
                    f"{' or '.join(sorted(acceptable))}: {why}"
                )
            compare_snapshots(before, snapshot(pool, preload_ids, watched), "the rejected import")


def _header_field(data: bytes, name: str) -> int | None:
    """A header field of possibly short bytes, or None where the bytes end first."""
    field = oracle.HEADER_FIELDS[name]
    return field.read(data) if len(data) >= field.offset + field.size else None


def _expansions(how: str | None, data: bytes, reseal: bool) -> Iterator[tuple[str, bytes]]:
    """Generated variants: every proper prefix, or every single-bit flip, of the envelope."""
    if how is None:
        return
    if reseal:
        raise CaseDataError("expanded cases take the bytes as they are: set reseal: false")
    if how == "prefixes":
        for length in range(len(data)):
            yield f"-{length}", data[:length]
    elif how == "bit-flips":
        for offset in range(len(data)):
            for bit in range(8):
                flipped = bytearray(data)
                flipped[offset] ^= 1 << bit
                yield f"-{offset}.{bit}", bytes(flipped)


# -- round trip -------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False, kw_only=True)
class RoundtripCase(Case):
    kind = "roundtrip"
    markers = ("writer", "reader")

    geometry: oracle.Geometry
    version: int
    blocks: tuple[BlockPlan, ...]
    expected: bytes
    v2_level: str | None

    @classmethod
    def build(cls, raw: Mapping[str, Any], common: dict[str, Any], ctx: FileContext) -> list[Case]:
        geometry, version = geometry_of(raw["geometry"]), raw["version"]
        blocks = plan_blocks(geometry, raw["blocks"])
        try:
            expected = oracle.encode(geometry, [b.as_oracle_block() for b in blocks], version)
        except ValueError as exc:
            raise CaseDataError(str(exc)) from None
        return [
            cls(
                **common,
                geometry=geometry,
                version=version,
                blocks=tuple(blocks),
                expected=expected,
                v2_level=raw.get("v2_level"),
            )
        ]

    def item_markers(self) -> tuple[str, ...]:
        return (*self.markers, f"v{self.version}")

    def skip_reason(self, testee: Testee) -> str | None:
        if reason := _needs(testee, Capability.POOL, Capability.EXPORT, Capability.IMPORT):
            return reason
        if reason := _needs_write(testee, self.version):
            return reason
        if self.version not in testee.info.read_versions:
            return f"{testee.label} does not read v{self.version}"
        return None

    def run(self, testee: Testee) -> None:
        n = max(len(self.blocks), 1)
        with testee.adapter.open_pool(self.geometry, n) as source:
            ids = _write_all(source, list(self.blocks), "writing")
            for index, (plan, block) in enumerate(zip(self.blocks, ids, strict=True)):
                compare_readback(
                    plan.as_oracle_block(),
                    source.read(block),
                    source.dtype,
                    f"written block {index} (id {block})",
                    block=f"block {index}",
                )
            data = source.export(ids, self.version)
        compare_envelopes(
            self.expected, data, _v2_level(self.v2_level, testee) if self.version == 2 else "strict"
        )
        envelope = oracle.decode(data)
        with testee.adapter.open_pool(self.geometry, n) as target:
            free_before = target.free_blocks()
            try:
                imported = target.import_envelope(data, n)
            except Refused as refusal:
                raise CaseFailure(f"its own export was refused on import: {refusal}") from None
            check_imported(target, envelope, imported, [], free_before, data)
            for block in imported:
                target.release(block)
            if target.free_blocks() != free_before:
                raise CaseFailure(
                    f"releasing every imported block left {target.free_blocks()} free, "
                    f"expected {free_before}"
                )


# -- pool scripts -----------------------------------------------------------------------------


@dataclass(frozen=True, eq=False, kw_only=True)
class PoolCase(Case):
    """A script of pool operations, each with its expectation."""

    kind = "pool"
    markers = ("pool",)

    geometry: oracle.Geometry
    capacity: int
    steps: tuple[tuple[str, Any], ...]
    writes: frozenset[int] | None  # only for implementations writing exactly these versions

    @classmethod
    def build(cls, raw: Mapping[str, Any], common: dict[str, Any], ctx: FileContext) -> list[Case]:
        geometry = geometry_of(raw["geometry"])
        steps: list[tuple[str, Any]] = []
        labels: set[str] = set()
        writes: list[Mapping[str, Any]] = []  # every write so far: hashes chain through them
        for raw_step in raw["steps"]:
            ((op, arg),) = raw_step.items()
            for label in _labels_used(op, arg):
                if label not in labels:
                    raise CaseDataError(f"{op}: no block is labelled {label!r} before this step")
            if op == "write":
                writes.append(arg)
                arg = plan_blocks(geometry, writes)[-1]
                if arg.label:
                    labels.add(arg.label)
            elif op == "import":
                labels.update(arg.get("as", []))
                arg = {**arg, "data": ctx.resolver.resolve(arg["envelope"]).data}
            steps.append((op, arg))
        writes = V1_ONLY if raw.get("writer") == "v1-only" else None
        return [
            cls(
                **common,
                geometry=geometry,
                capacity=raw["capacity"],
                steps=tuple(steps),
                writes=writes,
            )
        ]

    def skip_reason(self, testee: Testee) -> str | None:
        if self.writes is not None and testee.info.write_versions != self.writes:
            want = ",".join(f"v{v}" for v in sorted(self.writes))
            return f"this case is for a writer of {want} only"
        needs = [Capability.POOL]
        for op, arg in self.steps:
            if op in ("export", "export_bytes"):
                needs.append(Capability.EXPORT)
                if (
                    arg.get("expect") is None
                    and op == "export"
                    and (reason := _needs_write(testee, arg["version"]))
                ):
                    return reason
            if op == "import":
                needs.append(Capability.IMPORT)
        return _needs(testee, *needs)

    def run(self, testee: Testee) -> None:
        with testee.adapter.open_pool(self.geometry, self.capacity) as pool:
            _PoolScript(pool, testee).run(self.steps)


def _labels_used(op: str, arg: Any) -> list[str]:
    """The block labels a pool step refers to (they must have been given before)."""
    if op in ("read", "release"):
        return [arg["block"]]
    if op == "find":
        return [v for v in (arg["hash"], arg["expect"]) if isinstance(v, str) and v != "ENOTFOUND"]
    if op == "export":
        return list(arg["blocks"])
    return []


class _PoolScript:
    def __init__(self, pool: PoolHandle, testee: Testee) -> None:
        self.pool = pool
        self.testee = testee
        self.ids: dict[str, int] = {}
        self.plans: dict[str, BlockPlan] = {}

    def block(self, label: str) -> int:
        return self.ids[label]

    def run(self, steps: tuple[tuple[str, Any], ...]) -> None:
        for number, (op, arg) in enumerate(steps, 1):
            try:
                getattr(self, "_" + op)(arg)
            except CaseFailure as failure:
                raise CaseFailure(f"step {number} ({op}): {failure}") from None
            except Refused as refusal:
                raise CaseFailure(f"step {number} ({op}): {refusal}") from None

    def _refusal(self, code: str) -> str:
        return self.testee.refusal(code)

    def _write(self, plan: BlockPlan) -> None:
        write = lambda: self.pool.write(plan.block_hash, plan.n_tokens, plan.values)  # noqa: E731
        if plan.expect:
            refused_with(self._refusal(plan.expect), "write", write)
            return
        block = write()
        if plan.label:
            self.ids[plan.label] = block
            self.plans[plan.label] = plan

    def _read(self, arg: Mapping[str, Any]) -> None:
        if arg.get("expect"):
            refused_with(
                self._refusal(arg["expect"]),
                "read",
                lambda: self.pool.read(self.block(arg["block"])),
            )
            return
        plan = self.plans[arg["block"]]
        compare_readback(
            plan.as_oracle_block(),
            self.pool.read(self.block(arg["block"])),
            self.pool.dtype,
            f"block {arg['block']}",
            block=f"block {arg['block']}",
        )

    def _release(self, arg: Mapping[str, Any]) -> None:
        if arg.get("expect"):
            refused_with(
                self._refusal(arg["expect"]),
                "release",
                lambda: self.pool.release(self.block(arg["block"])),
            )
            return
        self.pool.release(self.block(arg["block"]))

    def _find(self, arg: Mapping[str, Any]) -> None:
        key = arg["hash"]
        block_hash = self.plans[key].block_hash if isinstance(key, str) else key
        expect = arg.get("expect")
        if expect == "ENOTFOUND":
            refused_with(
                self._refusal("ENOTFOUND"),
                f"find({block_hash:#x})",
                lambda: self.pool.find(block_hash),
            )
            return
        found = self.pool.find(block_hash)
        if found != self.block(expect):
            raise CaseFailure(
                f"find({block_hash:#x}) = block {found}, expected {expect} "
                f"(block {self.block(expect)})"
            )

    def _free(self, expected: int) -> None:
        got = self.pool.free_blocks()
        if got != expected:
            raise CaseFailure(f"free_blocks() = {got}, expected {expected}")

    def _export(self, arg: Mapping[str, Any]) -> None:
        ids = [self.block(label) for label in arg["blocks"]]
        if arg.get("expect"):
            refused_with(
                self._refusal(arg["expect"]),
                f"export v{arg['version']}",
                lambda: self.pool.export(ids, arg["version"]),
            )
            return
        plans = [self.plans[label].as_oracle_block() for label in arg["blocks"]]
        expected = oracle.encode(self.pool.geometry, plans, arg["version"])
        level = self.testee.v2_level if arg["version"] == 2 else "strict"
        compare_envelopes(expected, self.pool.export(ids, arg["version"]), level)

    def _export_bytes(self, arg: Mapping[str, Any]) -> None:
        got = self.pool.export_bytes(arg["n_blocks"], arg["version"])
        if got != arg["expect"]:
            raise CaseFailure(
                f"export_bytes({arg['n_blocks']}, v{arg['version']}) = {got}, "
                f"expected {arg['expect']}"
            )

    def _import(self, arg: Mapping[str, Any]) -> None:
        max_blocks = arg.get("max_blocks", self.pool.capacity)
        action = lambda: self.pool.import_envelope(arg["data"], max_blocks)  # noqa: E731
        if arg.get("expect"):
            refused_with(self._refusal(arg["expect"]), "import", action)
            return
        ids = action()
        envelope = oracle.decode(arg["data"], oracle.ReaderProfile(self.pool.geometry))
        for label, block, record in zip(arg.get("as", []), ids, envelope.records, strict=False):
            self.ids[label] = block
            # What the pool holds, and so what a later export encodes, is the decoded value
            # in the pool's own precision.
            values = in_pool_precision(record.decoded.values, self.pool.dtype)
            self.plans[label] = BlockPlan(label, record.block_hash, record.n_tokens, values)


KINDS: dict[str, Any] = {
    cls.kind: cls
    for cls in (
        HashCase,
        HashSequenceCase,
        ExportCase,
        ImportCase,
        RejectCase,
        RoundtripCase,
        PoolCase,
    )
}

from ._transfer import TransferCase  # noqa: E402 - it builds on the classes above

KINDS[TransferCase.kind] = TransferCase
