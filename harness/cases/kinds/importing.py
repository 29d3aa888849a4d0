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
from ...errors import Refused
from ...testee import Testee
from .._sources import (
    CaseDataError,
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
    envelope: oracle.Envelope
    pool: PoolSetup
    reads: frozenset[int] | None

    @classmethod
    def build(cls, raw: Mapping[str, Any], common: dict[str, Any], ctx: FileContext) -> list[Case]:
        built = ctx.resolver.resolve(raw["envelope"])
        pool = PoolSetup.build(raw.get("pool"), built)
        reads = reads_for(raw.get("reader"))
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
        if reason := needs(testee, Capability.POOL, Capability.IMPORT):
            return reason
        if reason := reader_reason(testee, self.reads):
            return reason
        if self.envelope.version not in testee.info.read_versions:
            return f"{testee.label} does not read v{self.envelope.version}"
        return None

    def run(self, testee: Testee) -> None:
        pool, preload_ids = self.pool.open(testee)
        with pool:
            free_before = free_count(pool)
            try:
                ids = pool.import_envelope(self.data, self.pool.capacity)
            except Refused as refusal:
                raise CaseFailure(f"a valid envelope was refused: {refusal}") from None
            check_imported(pool, self.envelope, ids, preload_ids, free_before, self.data)
