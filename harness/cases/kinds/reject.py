"""The `reject` kind: an envelope breaking reader rules is refused, and the pool unchanged."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from ... import oracle
from ...adapters import Capability
from ...checks import (
    CaseFailure,
    compare_snapshots,
    snapshot,
)
from ...errors import ImplementationFault, Refused
from ...evidence import FaultEvidence, RefusalEvidence
from ...testee import Testee
from .._sources import (
    CaseDataError,
    mutate,
)
from ._base import (
    ALL_READS,
    V1_ONLY,
    Case,
    FileContext,
    PoolSetup,
    header_field,
    needs,
    reader_reason,
    reads_for,
    record_hashes,
)


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


@dataclass(frozen=True, eq=False)
class Variant:
    """An envelope's bytes: given outright, or a prefix or a one-bit flip of a shared base. A
    variant keeps only its change: a thousand variants of a 2 MiB envelope must not hold 2 GiB
    from collection to the end of the run."""

    base: bytes
    prefix: int | None = None
    flip: tuple[int, int] | None = None  # (offset, bit)
    reseal: bool = False  # the flip's CRC trailer recomputed: the case is about the field

    @property
    def data(self) -> bytes:
        if self.prefix is not None:
            return self.base[: self.prefix]
        if self.flip is not None:
            offset, bit = self.flip
            flipped = bytearray(self.base)
            flipped[offset] ^= 1 << bit
            if self.reseal:
                return oracle.seal(bytes(flipped[: -oracle.CRC_SIZE]))
            return bytes(flipped)
        return self.base


@dataclass(frozen=True, eq=False, kw_only=True)
class RejectCase(Case):
    kind = "reject"
    markers = ("reader",)

    variant: Variant
    version: int | None
    pool: PoolSetup
    reads: frozenset[int] | None
    rule: str | None
    also: frozenset[str]
    code: str | None
    grpc: str | None
    rules_first: bool

    @property
    def data(self) -> bytes:
        return self.variant.data

    @property
    def generated(self) -> bool:
        return self.variant.prefix is not None or self.variant.flip is not None

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
            mutated = mutate(base.data, raw.get("mutate", []), reseal, ctx.resolver)
            variants = [("", Variant(mutated))]
        elif raw.get("mutate"):
            raise CaseDataError("a case with expand takes no mutate list")
        pool = PoolSetup.build(raw.get("pool"), base, ctx)
        reads = reads_for(raw.get("reader"))
        expect = raw["expect"]
        version = base.version or header_field(base.data, "version")
        cases: list[Case] = []
        for suffix, variant in variants:
            case = cls(
                **{**common, "id": common["id"] + suffix},
                variant=variant,
                version=version,
                pool=pool,
                reads=reads,
                rule=expect.get("rule"),
                also=frozenset(expect.get("also", [])),
                code=expect.get("code"),
                grpc=expect.get("grpc"),
                rules_first=expect.get("rules_first", False),
            )
            if variant.reseal and not case._primary().rule_ids:
                continue  # a field flip the oracle accepts (a full block's hash): no rejection
            # A prefix is short and an unresealed bit flip breaks the CRC-32C (which detects
            # every single-bit error): the oracle refuses each, so the thousands of generated
            # variants are judged when they run, not all at collection.
            if not case.generated or variant.reseal:
                case._confirm_single_fault()
            cases.append(case)
        return cases

    @cached_property
    def verdicts(self) -> tuple[tuple[frozenset[int], Verdict], ...]:
        """The oracle's verdict per reader (all versions / v1 only)."""
        data, geometry = self.data, self.pool.geometry
        reads = (self.reads,) if self.reads else (ALL_READS, V1_ONLY)
        return tuple((r, _verdict(data, geometry, r)) for r in reads)

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
        return (
            (*self.markers, f"v{self.version}")
            if self.version in oracle.KNOWN_VERSIONS
            else self.markers
        )

    def _verdict_for(self, testee: Testee) -> Verdict | None:
        for reads, verdict in self.verdicts:
            if reads == testee.info.read_versions:
                return verdict
        return None

    def skip_reason(self, testee: Testee) -> str | None:
        if reason := needs(testee, Capability.POOL, Capability.IMPORT):
            return reason
        if reason := reader_reason(testee, self.reads):
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

    def _limit_codes(self, testee: Testee, free: int | None) -> set[str]:
        """Refusals the contract also allows when the header claims more blocks than the
        caller's max_blocks (EINVAL) or the free blocks (ENOMEM): the spec does not order them
        against the reader rules. Cases with `rules_first` demand the rule's code alone."""
        declared = header_field(self.data, "n_blocks")
        if self.rules_first or declared is None or not self.rules:
            return set()
        codes = set()
        if declared > self.pool.capacity and testee.adapter.status_domain == "c":
            codes.add("EINVAL")
        if free is not None and declared > free:
            codes.add(testee.refusal("ENOMEM"))
        return codes

    def run(self, testee: Testee) -> None:
        verdict = self._verdict_for(testee)
        assert verdict is not None
        pool, preload_ids = self.pool.open(testee)
        with pool:
            watched = sorted(set(self.pool.hashes) | set(record_hashes(self.data)))
            before = snapshot(pool, preload_ids, watched)
            acceptable = self._acceptable(testee, verdict) | self._limit_codes(testee, before.free)
            why = verdict.detail or f"expected {self.code}"
            # The rules this envelope breaks for this reader (a generated case names none).
            rules = self.rules or frozenset(verdict.rule_ids) or frozenset(self.reqs)
            try:
                ids = pool.import_envelope(self.data, self.pool.capacity)
            except ImplementationFault as fault:
                # Not called at all (quarantined after earlier faults), or an operation that
                # answers nothing: not this input's doing.
                evidence = FaultEvidence.of_operation(fault) or RefusalEvidence(
                    rules, frozenset(acceptable), "fault", self.data, fault=str(fault)
                )
                raise CaseFailure(f"implementation fault: {fault}", evidence) from None
            except Refused as refusal:
                if refusal.code not in acceptable:
                    said = f"; it said: {refusal.detail}" if refusal.detail else ""
                    raise CaseFailure(
                        f"refused with {refusal.code}, expected {' or '.join(sorted(acceptable))} "
                        f"({why}){said}",
                        RefusalEvidence(
                            rules,
                            frozenset(acceptable),
                            refusal.code,
                            self.data,
                            self.rules_first,
                            self.pool.probed,
                        ),
                    ) from None
            else:
                raise CaseFailure(
                    f"accepted (block ids {ids}) an envelope it must refuse with "
                    f"{' or '.join(sorted(acceptable))}: {why}",
                    RefusalEvidence(rules, frozenset(acceptable), None, self.data),
                )
            after = snapshot(pool, preload_ids, watched, reference=before)
            compare_snapshots(before, after, "the rejected import")


# Envelopes up to this size are expanded in full: every prefix, every bit.
EXHAUSTIVE_BYTES = 128
SPREAD = 16  # payload positions sampled, evenly, in a larger envelope


def expansion_offsets(data: bytes, how: str) -> list[tuple[int, tuple[int, ...]]]:
    """Where an envelope is cut or flipped, and which bits of each byte: all of a small one;
    of a larger one its structure (every bit of the header, of each record's head and of the
    trailer; the bytes around each record boundary), and one bit of each of an even spread of
    payload bytes (there, any flip is a CRC test like another)."""
    size = len(data)
    every = tuple(range(8))
    if size <= EXHAUSTIVE_BYTES:
        return [(o, every) for o in range(size)]
    chosen: dict[int, tuple[int, ...]] = {o: every for o in range(oracle.HEADER_SIZE)}
    chosen.update({o: every for o in range(size - oracle.CRC_SIZE, size)})
    try:
        geometry = oracle.header_geometry(data)
        record = geometry.record_size(oracle.HEADER_FIELDS["version"].read(data))
    except ValueError:
        record = size
    for start in range(oracle.HEADER_SIZE, size - oracle.CRC_SIZE, record):
        chosen.update({o: every for o in range(start, start + oracle.RECORD_PREFIX_SIZE)})
        chosen.setdefault(start - 1, every)
    for k in range(SPREAD):
        offset = size * k // SPREAD
        chosen.setdefault(offset, (offset % 8,))
    if how == "prefixes":
        chosen.setdefault(oracle.MIN_ENVELOPE_SIZE, every)
        # every prefix up to the first payload byte: the first record's head complete
        chosen.setdefault(oracle.HEADER_SIZE + oracle.RECORD_PREFIX_SIZE, every)
    return sorted((o, bits) for o, bits in chosen.items() if 0 <= o < size)


# Header fields read alike whatever the version: their flips are made in v1 envelopes alone.
VERSION_BLIND_FIELDS = ("magic", *oracle.GEOMETRY_FIELDS)


def field_flips(data: bytes) -> list[tuple[int, tuple[int, ...]]]:
    """Where an envelope's fields are flipped (the CRC resealed), and which bits: every bit of
    each header field (of a v2 envelope those whose check depends on the version: version,
    dtype, n_blocks), every bit of each record's n_tokens, and one bit of each byte of a partial
    block's hash (any bit breaks READ-HASH-FILL alike; a full block's hash may be any value)."""
    every = tuple(range(8))
    version = oracle.HEADER_FIELDS["version"].read(data)
    chosen = [
        (offset, every)
        for field in oracle.HEADER_FIELDS.values()
        if version == 1 or field.name not in VERSION_BLIND_FIELDS
        for offset in range(field.offset, field.offset + field.size)
    ]
    geometry = oracle.header_geometry(data)
    block_hash, fill = oracle.RECORD_FIELDS["block_hash"], oracle.RECORD_FIELDS["n_tokens"]
    for start in range(
        oracle.HEADER_SIZE, len(data) - oracle.CRC_SIZE, geometry.record_size(version)
    ):
        if fill.read(data, start) != geometry.block_tokens:
            first = start + block_hash.offset
            chosen += [(o, (o % 8,)) for o in range(first, first + block_hash.size)]
        first = start + fill.offset
        chosen += [(o, every) for o in range(first, first + fill.size)]
    return chosen


def _expansions(how: str | None, data: bytes, reseal: bool) -> Iterator[tuple[str, Variant]]:
    """Generated variants: every proper prefix, or every single-bit flip, of the envelope (of a
    large one, those at its structure: expansion_offsets)."""
    if how is None:
        return
    if how == "field-bit-flips":
        if not reseal:
            raise CaseDataError("field-bit-flips reseal the CRC: set reseal: true")
        for offset, bits in field_flips(data):
            for bit in bits:
                yield f"-{offset}.{bit}", Variant(data, flip=(offset, bit), reseal=True)
        return
    if reseal:
        raise CaseDataError("expanded cases take the bytes as they are: set reseal: false")
    if how == "prefixes":
        for length, _ in expansion_offsets(data, how):
            yield f"-{length}", Variant(data, prefix=length)
    elif how == "bit-flips":
        for offset, bits in expansion_offsets(data, how):
            for bit in bits:
                yield f"-{offset}.{bit}", Variant(data, flip=(offset, bit))


# -- round trip -------------------------------------------------------------------------------
