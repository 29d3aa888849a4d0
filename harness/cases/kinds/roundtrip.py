"""The `roundtrip` kind: write, read back, export, import into a fresh pool, read back."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ... import oracle
from ...adapters import Capability
from ...checks import (
    CaseFailure,
    compare_envelopes,
    compare_readback,
    expect_free,
    free_count,
)
from ...errors import Refused
from ...evidence import ReaderPool, RefusalEvidence
from ...exprs import is_fixed
from ...testee import Testee
from .._sources import (
    BlockPlan,
    CaseDataError,
)
from ._base import (
    Case,
    FileContext,
    check_imported,
    needs,
    needs_write,
    v2_level_for,
    write_all,
)


@dataclass(frozen=True, eq=False, kw_only=True)
class RoundtripCase(Case):
    kind = "roundtrip"
    markers = ("writer", "reader")

    geometry: oracle.Geometry
    version: int
    blocks: tuple[BlockPlan, ...]
    expected: bytes
    v2_level: str | None
    nan: str  # how NaNs compare (tlkv_conformance.diff.NAN_POLICIES)

    @classmethod
    def build(cls, raw: Mapping[str, Any], common: dict[str, Any], ctx: FileContext) -> list[Case]:
        geometry, version = ctx.geometry(raw.get("geometry")), raw["version"]
        blocks = ctx.plan(geometry, raw["blocks"], fixed=is_fixed(raw.get("geometry")))
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
                nan=raw.get("nan", "any"),
            )
        ]

    def item_markers(self) -> tuple[str, ...]:
        return (*self.markers, f"v{self.version}")

    def skip_reason(self, testee: Testee) -> str | None:
        if reason := needs(testee, Capability.POOL, Capability.EXPORT, Capability.IMPORT):
            return reason
        if reason := needs_write(testee, self.version):
            return reason
        if self.version not in testee.info.read_versions:
            return f"{testee.label} does not read v{self.version}"
        return None

    def run(self, testee: Testee) -> None:
        n = max(len(self.blocks), 1)
        with testee.adapter.open_pool(self.geometry, n) as source:
            ids = write_all(source, list(self.blocks), "writing")
            for index, (plan, block) in enumerate(zip(self.blocks, ids, strict=True)):
                compare_readback(
                    plan.as_oracle_block(),
                    source.read(block),
                    source.dtype,
                    f"written block {index} (id {block})",
                    block=f"block {index}",
                    nan=self.nan,
                )
            data = source.export(ids, self.version)
            dtype = source.dtype
        compare_envelopes(
            self.expected,
            data,
            v2_level_for(self.v2_level, testee) if self.version == 2 else "strict",
            self.nan,
            lambda: [p.as_oracle_block() for p in self.blocks],
            ids,
            dtype,
            held_read_back=True,
        )
        envelope = oracle.decode(data)
        target_pool = (self.geometry, n, n)  # all free, max_blocks as many
        with testee.adapter.open_pool(self.geometry, n) as target:
            free_before = free_count(target)
            try:
                imported = target.import_envelope(data, n)
            except Refused as refusal:
                raise CaseFailure(
                    f"its own export was refused on import: {refusal}",
                    RefusalEvidence(
                        frozenset(), frozenset(), refusal.code, data, pool=ReaderPool(*target_pool)
                    ),
                ) from None
            check_imported(target, envelope, imported, [], free_before, data, self.nan)
            for block in imported:
                target.release(block)
            expect_free(target, free_before, 0, "importing and releasing every block", True)


# -- pool scripts -----------------------------------------------------------------------------
