"""The `export` kind: write blocks, export them, compare with the oracle's envelope."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ... import oracle
from ...adapters import Capability
from ...checks import (
    CaseFailure,
    compare_envelopes,
    in_pool_precision,
)
from ...diff import envelope_diff
from ...errors import NotObservable
from ...evidence import SizeEvidence
from ...exprs import is_fixed
from ...testee import Testee
from .._sources import (
    BlockPlan,
    CaseDataError,
)
from ._base import (
    Case,
    FileContext,
    given_bytes,
    indent,
    needs,
    needs_write,
    v2_level_for,
    write_all,
)


@dataclass(frozen=True, eq=False, kw_only=True)
class ExportCase(Case):
    kind = "export"
    markers = ("writer",)

    geometry: oracle.Geometry
    version: int
    history: tuple[BlockPlan, ...]
    blocks: tuple[BlockPlan, ...]
    expected: bytes
    # What an f16 pool exports: the same bytes, unless a value is not f16-representable (an
    # f32 pool's case) and the f16 pool holds it rounded.
    expected_f16: bytes
    v2_level: str | None
    nan: str  # how NaNs compare (tlkv_conformance.diff.NAN_POLICIES)

    @classmethod
    def build(cls, raw: Mapping[str, Any], common: dict[str, Any], ctx: FileContext) -> list[Case]:
        geometry, version = ctx.geometry(raw.get("geometry")), raw["version"]
        fixed = is_fixed(raw.get("geometry"))
        blocks = ctx.plan(geometry, raw["blocks"], fixed=fixed)
        history = ctx.plan(geometry, raw.get("history", []), salt=500, fixed=fixed)
        try:
            computed = oracle.encode(geometry, [b.as_oracle_block() for b in blocks], version)
            in_f16 = oracle.encode(geometry, [_as_held(b, "f16") for b in blocks], version)
        except ValueError as exc:
            raise CaseDataError(str(exc)) from None
        expected = given_bytes(raw.get("expect"), ctx)
        if expected is not None and expected != computed:
            raise CaseDataError(
                "the expected bytes differ from the oracle's encoding of these blocks:\n"
                + indent(envelope_diff(computed, expected))
            )
        return [
            cls(
                **common,
                geometry=geometry,
                version=version,
                history=tuple(history),
                blocks=tuple(blocks),
                expected=computed,
                expected_f16=in_f16,
                v2_level=raw.get("v2_level"),
                nan=raw.get("nan", "any"),
            )
        ]

    def item_markers(self) -> tuple[str, ...]:
        return (*self.markers, f"v{self.version}")

    def skip_reason(self, testee: Testee) -> str | None:
        return needs(testee, Capability.POOL, Capability.EXPORT) or needs_write(
            testee, self.version
        )

    def run(self, testee: Testee) -> None:
        capacity = max(len(self.blocks), len(self.history), 1)
        with testee.adapter.open_pool(self.geometry, capacity) as pool:
            for block in write_all(pool, list(self.history), "history"):
                pool.release(block)
            ids = write_all(pool, list(self.blocks), "writing")
            size = pool.export_bytes(len(ids), self.version)
            if size != len(self.expected):
                raise CaseFailure(
                    f"export_bytes({len(ids)}, v{self.version}) = {size}, expected "
                    f"{len(self.expected)} (28 + n * (12 + P) + 4)",
                    SizeEvidence(len(ids), self.version, len(self.expected), size),
                )
            level = v2_level_for(self.v2_level, testee) if self.version == 2 else "strict"
            expected = self.expected_f16 if pool.dtype == "f16" else self.expected
            try:
                data = pool.export(ids, self.version)
            except NotObservable:
                if len(ids) < 2:
                    raise
                # A way in that exports one block per envelope (PullKv): each block's envelope
                # against the oracle's encoding of that block alone.
                for index, (plan, block) in enumerate(zip(self.blocks, ids, strict=True)):
                    held = _as_held(plan, pool.dtype)
                    single = oracle.encode(self.geometry, [held], self.version)
                    try:
                        exported = pool.export([block], self.version)
                        compare_envelopes(single, exported, level, self.nan, [held])
                    except CaseFailure as failure:
                        raise failure.prefixed(f"block {index} exported alone: ") from None
                return
            dtype = pool.dtype
            compare_envelopes(
                expected,
                data,
                level,
                self.nan,
                lambda: [_as_held(p, dtype) for p in self.blocks],
                ids,
                dtype,
                released=[_as_held(p, dtype) for p in self.history],
                given=lambda: [p.as_oracle_block() for p in self.blocks],
            )


def _as_held(plan: BlockPlan, dtype: str) -> oracle.Block:
    """The block as a pool of `dtype` holds it (an f16 pool rounds what is not an f16)."""
    return oracle.Block(plan.block_hash, plan.n_tokens, in_pool_precision(plan.values, dtype))
