"""The `import` kind: a valid envelope is read, and reads back what the oracle decodes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ... import oracle
from ...adapters import Capability
from ...checks import (
    CaseFailure,
    free_count,
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
    Case,
    FileContext,
    PoolSetup,
    check_imported,
    needs,
    reader_reason,
    reads_for,
)


@dataclass(frozen=True, eq=False, kw_only=True)
class ImportCase(Case):
    kind = "import"
    markers = ("reader",)

    data: bytes
    version: int
    pool: PoolSetup
    reads: frozenset[int] | None
    nan: str  # how NaNs compare (tlkv_conformance.diff.NAN_POLICIES)

    @classmethod
    def build(cls, raw: Mapping[str, Any], common: dict[str, Any], ctx: FileContext) -> list[Case]:
        built = ctx.resolver.resolve(raw["envelope"])
        data = built.data
        if raw.get("mutate"):
            data = mutate(data, raw["mutate"], raw.get("reseal", True), ctx.resolver)
        pool = PoolSetup.build(raw.get("pool"), built, ctx)
        reads = reads_for(raw.get("reader"))
        try:
            envelope = oracle.decode(data, oracle.ReaderProfile(pool.geometry, reads or ALL_READS))
        except oracle.Rejected as exc:
            raise CaseDataError(f"the oracle rejects this envelope: {exc}") from None
        if envelope.n_blocks > pool.capacity - len(pool.preload):
            raise CaseDataError(f"the pool has no room for {envelope.n_blocks} blocks")
        nan = raw.get("nan", "any")
        return [cls(**common, data=data, version=envelope.version, pool=pool, reads=reads, nan=nan)]

    def item_markers(self) -> tuple[str, ...]:
        return (*self.markers, f"v{self.version}")

    def skip_reason(self, testee: Testee) -> str | None:
        if reason := needs(testee, Capability.POOL, Capability.IMPORT):
            return reason
        if reason := reader_reason(testee, self.reads):
            return reason
        if self.version not in testee.info.read_versions:
            return f"{testee.label} does not read v{self.version}"
        return None

    def run(self, testee: Testee) -> None:
        pool, preload_ids = self.pool.open(testee)
        with pool:
            free_before = free_count(pool)
            try:
                ids = pool.import_envelope(self.data, self.pool.capacity)
            except Refused as refusal:
                raise CaseFailure(
                    f"a valid envelope was refused: {refusal}",
                    RefusalEvidence(
                        frozenset(),
                        frozenset(),
                        refusal.code,
                        self.data,
                        pool=self.pool.probed,
                    ),
                ) from None
            except ImplementationFault as fault:
                evidence = FaultEvidence.of_operation(fault) or RefusalEvidence(
                    frozenset(), frozenset(), "fault", self.data, fault=str(fault)
                )
                raise CaseFailure(f"implementation fault: {fault}", evidence) from None
            # Decoded here, not kept from collection: at a real geometry a decoded block is MiBs.
            envelope = oracle.decode(self.data, oracle.ReaderProfile(self.pool.geometry))
            check_imported(pool, envelope, ids, preload_ids, free_before, self.data, self.nan)
