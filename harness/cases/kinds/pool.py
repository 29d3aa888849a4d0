"""The `pool` kind: a script of pool operations, each with its expectation."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ... import oracle
from ...adapters import Capability
from ...exprs import is_fixed
from ...testee import Testee
from .._sources import CaseDataError
from ._base import (
    V1_ONLY,
    Case,
    FileContext,
    needs,
    needs_write,
)
from ._pool_script import FIRST_POOL, PoolScript


@dataclass(frozen=True, eq=False, kw_only=True)
class PoolCase(Case):
    """A script of pool operations, each with its expectation."""

    kind = "pool"
    markers = ("pool",)

    geometry: oracle.Geometry
    capacity: int
    steps: tuple[tuple[str, Any], ...]
    writes: frozenset[int] | None  # only for implementations writing exactly these versions
    nan: str  # how NaNs read back compare (tlkv_conformance.diff.NAN_POLICIES)

    @classmethod
    def build(cls, raw: Mapping[str, Any], common: dict[str, Any], ctx: FileContext) -> list[Case]:
        geometry = ctx.geometry(raw.get("geometry"))
        steps: list[tuple[str, Any]] = []
        labels: dict[str, str] = {}  # block label -> the pool holding the block
        alive, current = {FIRST_POOL}, FIRST_POOL
        writes: list[Mapping[str, Any]] = []  # every write so far: hashes chain through them
        for raw_step in raw["steps"]:
            ((op, arg),) = raw_step.items()
            for label in _labels_used(op, arg):
                if label not in labels:
                    raise CaseDataError(f"{op}: no block is labelled {label!r} before this step")
            for label in _blocks_used(op, arg):
                if labels[label] != current:
                    raise CaseDataError(
                        f"{op}: block {label!r} is in pool {labels[label]!r}, not in the pool "
                        f"in use ({current!r})"
                    )
            if op == "use":
                alive.add(arg)
                current = arg
            elif op == "destroy":
                if arg not in alive or arg == current:
                    raise CaseDataError(f"destroy: {arg!r} is not a pool alive and not in use")
                alive.discard(arg)
            elif op == "write":
                writes.append(arg)
                arg = len(writes) - 1  # the write's plan, made below with the others
                if label := writes[arg].get("as"):
                    labels[label] = current
            elif op == "import":
                labels.update(dict.fromkeys(arg.get("as", []), current))
                arg = {**arg, "data": ctx.resolver.resolve(arg["envelope"]).data}
            elif op == "export_bytes" and "expect" not in arg:
                size = geometry.envelope_size(arg["n_blocks"], arg["version"])
                arg = {**arg, "expect": size}  # the oracle's, computed at collection
            steps.append((op, arg))
        # Planned once for the whole script, not again at each write: a script of many writes
        # at a real geometry would make every block's values as many times as writes follow it.
        plans = ctx.plan(geometry, writes, fixed=is_fixed(raw.get("geometry")))
        steps = [(op, plans[arg] if op == "write" else arg) for op, arg in steps]
        writes = V1_ONLY if raw.get("writer") == "v1-only" else None
        return [
            cls(
                **common,
                geometry=geometry,
                capacity=raw["capacity"],
                steps=tuple(steps),
                writes=writes,
                nan=raw.get("nan", "any"),
            )
        ]

    def skip_reason(self, testee: Testee) -> str | None:
        if self.writes is not None and testee.info.write_versions != self.writes:
            want = ",".join(f"v{v}" for v in sorted(self.writes))
            return f"this case is for a writer of {want} only"
        wanted = [Capability.POOL]
        for op, arg in self.steps:
            if op == "use":
                wanted.append(Capability.SEVERAL_POOLS)
            if op == "retain" and not testee.can(Capability.RETAIN):
                return (
                    f"{testee.label} takes no second reference to a block (retain: optional "
                    "as tl_kv_pool_retain or Pool.retain, absent from tl.kv.v1)"
                )
            if op in ("export", "export_bytes"):
                wanted.append(Capability.EXPORT)
                if (
                    arg.get("expect") is None
                    and op == "export"
                    and (reason := needs_write(testee, arg["version"]))
                ):
                    return reason
            if op == "import":
                wanted.append(Capability.IMPORT)
        return needs(testee, *wanted)

    def run(self, testee: Testee) -> None:
        with contextlib.ExitStack() as pools:
            PoolScript(pools, self.geometry, self.capacity, testee, self.nan).run(self.steps)


def _labels_used(op: str, arg: Any) -> list[str]:
    """The block labels a pool step refers to (they must have been given before)."""
    if op == "find":
        return [v for v in (arg["hash"], arg["expect"]) if isinstance(v, str) and v != "ENOTFOUND"]
    return _blocks_used(op, arg)


def _blocks_used(op: str, arg: Any) -> list[str]:
    """The labels of the blocks a pool step acts on, which must be in the pool in use (a find
    may look for the hash of a block of another pool)."""
    if op in ("read", "release", "retain"):
        return [arg["block"]]
    if op == "find" and arg["expect"] != "ENOTFOUND":
        return [arg["expect"]]
    if op == "export":
        return list(arg["blocks"])
    return []
