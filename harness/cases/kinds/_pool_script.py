"""A pool case's steps run against a testee (tlkv_conformance.cases.kinds.pool): one method
per step, each checking its expectation, and what the diagnosis needs of the steps run so far
to name the mistake a failed step shows."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from ... import oracle
from ...adapters import PoolHandle
from ...checks import (
    CaseFailure,
    compare_envelopes,
    compare_readback,
    in_pool_precision,
    refused_with,
)
from ...errors import ImplementationFault, NotObservable, Refused
from ...evidence import (
    NOT_HELD,
    CountEvidence,
    Evidence,
    FaultEvidence,
    KnownMistake,
    OrderEvidence,
    PoolHistoryEvidence,
    PoolStep,
    RefusalEvidence,
    SizeEvidence,
    StaleHashEvidence,
)
from ...testee import Testee
from .._sources import BlockPlan
from ._base import import_order_evidence, import_order_message
from ._live_blocks import LiveBlocks

# The pool a case's steps act on until a `use` step names another.
FIRST_POOL = "first"


class PoolScript:
    """A pool case's steps, run in order on the testee's pools: step `op` is method `_op`."""

    def __init__(
        self,
        pools: contextlib.ExitStack,
        geometry: oracle.Geometry,
        capacity: int,
        testee: Testee,
        nan: str = "any",
    ) -> None:
        self.pools = pools
        self.geometry = geometry
        self.capacity = capacity
        self.testee = testee
        self.alive: dict[str, PoolHandle] = {}
        self.in_use = FIRST_POOL
        self._use(FIRST_POOL)
        # pool name -> the hashes it registered (written, imported, released after), each with
        # the block that registered it first: what a registry shared between pools confuses
        self.hashes: dict[str, dict[int, int]] = {}
        self.nan = nan
        self.ids: dict[str, int] = {}
        self.plans: dict[str, BlockPlan] = {}
        self.done: list[str] = []  # the steps run so far, for the diagnosis
        self.released: set[tuple[str, int]] = set()  # (pool, hash) of blocks released
        # pool -> the values of the blocks released there (what a reused slot may hold)
        self.released_values: dict[str, list[np.ndarray]] = {}
        # (pool, label) -> (references held, releases made) of each block retained, for the
        # diagnosis
        self.references: dict[tuple[str, str], tuple[int, int]] = {}
        self.imported: set[str] = set()  # labels of blocks that came from an import
        # label -> (envelope, record offset) each imported block came from, for the diagnosis
        self.sources: dict[str, tuple[bytes, int]] = {}
        # (pool, ids, records) of the last import, for the diagnosis
        self.last_import: tuple[str, list[int], list[oracle.Record]] | None = None
        self.history: list[PoolStep] = []  # the steps run so far with their answers, likewise
        self.live = LiveBlocks()  # the blocks held, for the diagnosis

    @property
    def pool(self) -> PoolHandle:
        return self.alive[self.in_use]

    def block(self, label: str) -> int:
        return self.ids[label]

    def _use(self, name: str) -> None:
        if name not in self.alive:
            self.alive[name] = self.pools.enter_context(
                self.testee.adapter.open_pool(self.geometry, self.capacity)
            )
        self.in_use = name

    def _destroy(self, name: str) -> None:
        self.alive.pop(name).close()

    def _registered(self, block_hash: int, block: int) -> None:
        if block_hash:
            self.hashes.setdefault(self.in_use, {}).setdefault(block_hash, block)

    def _shared_registry(
        self, block_hash: int, seen: str, answered: int | None = None
    ) -> KnownMistake | None:
        """The mistake to name when this pool's find answers wrongly for a hash that another
        pool of the case registered (alive or destroyed, released there or not). Where find
        `answered` a block, only when that is the other pool's block of the hash: another
        answer is no sign of the other pool's registry."""
        others = sorted(
            name
            for name, held in self.hashes.items()
            if block_hash in held
            and name != self.in_use
            and (answered is None or held[block_hash] == answered)
        )
        if not others:
            return None
        return KnownMistake(
            "registry-shared-between-pools",
            "one hash registry shared by all pools (a hash registered in one pool is seen "
            "or removed through another)",
            ("POOL-FIND",),
            f"find({block_hash:#x}) in pool {self.in_use!r} {seen}; the hash was registered in "
            f"pool {', '.join(repr(n) for n in others)}",
        )

    def run(self, steps: tuple[tuple[str, Any], ...]) -> None:
        for number, (op, arg) in enumerate(steps, 1):
            try:
                getattr(self, "_" + op)(arg)
            except CaseFailure as failure:
                raise failure.prefixed(f"step {number} ({op}): ") from None
            except Refused as refusal:
                write = (self.geometry, arg.block_hash, arg.n_tokens) if op == "write" else None
                raise CaseFailure(
                    f"step {number} ({op}): {refusal}",
                    RefusalEvidence(frozenset(), frozenset(), refusal.code, write=write),
                ) from None
            except ImplementationFault as fault:
                # a write faulting on this pool's state (not on every call): its history
                if op != "write" or FaultEvidence.of_operation(fault) is not None:
                    raise
                faulted = replace(self._answered(op, arg), answer="fault")
                history = PoolHistoryEvidence(
                    self.geometry, self.capacity, (*self.history, faulted), str(fault)
                )
                raise CaseFailure(
                    f"step {number} ({op}): implementation fault: {fault}", history
                ) from None
            self.done.append(op)
            self.history.append(self._answered(op, arg))

    def _answered(self, op: str, arg: Any) -> PoolStep:
        """A step run as its expectation says, as a pool model replays it."""
        if op == "write":
            return PoolStep(op, arg.label or "", arg.block_hash, arg.expect or "ok")
        if op in ("read", "release", "retain"):
            return PoolStep(op, arg["block"], answer=arg.get("expect") or "ok")
        if op == "find":
            key = arg["hash"]
            block_hash = self.plans[key].block_hash if isinstance(key, str) else key
            return PoolStep(op, block_hash=block_hash, answer=arg["expect"])
        if op == "free":
            return PoolStep(op, answer=arg)
        return PoolStep(op)

    def _refusal(self, code: str) -> str:
        return self.testee.refusal(code)

    def _write(self, plan: BlockPlan) -> None:
        write = lambda: self.pool.write(plan.block_hash, plan.n_tokens, plan.values)  # noqa: E731
        if plan.expect:
            rule = "POOL-ENOMEM" if plan.expect == "ENOMEM" else "POOL-WRITE-ARGS"
            refused_with(self._refusal(plan.expect), "write", write, [rule])
            return
        try:
            block = write()
        except Refused as refusal:
            if mistake := self._registered_hash_refused(plan.block_hash, refusal.code):
                raise CaseFailure(f"write refused with {refusal.code}", mistake) from None
            raise
        self._registered(plan.block_hash, block)
        self.live.stored(self.in_use, plan.label, block, plan.block_hash, written=True)
        if plan.label:
            self.ids[plan.label] = block
            self.plans[plan.label] = plan
            self.sources.pop(plan.label, None)

    def _registered_hash_refused(self, block_hash: int, code: str) -> KnownMistake | None:
        """The mistake to name when a write is refused whose hash a block of this pool holds
        registered (written before and not released)."""
        held = self.hashes.get(self.in_use, {})
        if not block_hash or block_hash not in held or (self.in_use, block_hash) in self.released:
            return None
        return KnownMistake(
            "write-refuses-registered-hash",
            "a write of a hash that a block of the pool already has registered is refused",
            ("POOL-WRITE-READ",),
            f"write of hash {block_hash:#x} refused with {code}; a block written before holds it",
        )

    def _read(self, arg: Mapping[str, Any]) -> None:
        if arg.get("expect"):
            refused_with(
                self._refusal(arg["expect"]),
                "read",
                lambda: self.pool.read(self.block(arg["block"])),
                ["POOL-RELEASE-FREED"],
            )
            return
        plan = self.plans[arg["block"]]
        compare_readback(
            plan.as_oracle_block(),
            self.pool.read(self.block(arg["block"])),
            self.pool.dtype,
            f"block {arg['block']}",
            block=f"block {arg['block']}",
            nan=self.nan,
            written=plan.values,
            released=self.released_values.get(self.in_use, ()),
        )

    def _release(self, arg: Mapping[str, Any]) -> None:
        if arg.get("expect"):
            refused_with(
                self._refusal(arg["expect"]),
                "release",
                lambda: self.pool.release(self.block(arg["block"])),
                ["POOL-RELEASE-FREED"],
            )
            return
        self.pool.release(self.block(arg["block"]))
        self.live.released(self.in_use, arg["block"])
        if (key := (self.in_use, arg["block"])) in self.references:
            held, releases = self.references[key]
            self.references[key] = (held - 1, releases + 1)
        self.released.add((self.in_use, self.plans[arg["block"]].block_hash))
        self.released_values.setdefault(self.in_use, []).append(self.plans[arg["block"]].values)

    def _retain(self, arg: Mapping[str, Any]) -> None:
        if arg.get("expect"):
            refused_with(
                self._refusal(arg["expect"]),
                "retain",
                lambda: self.pool.retain(self.block(arg["block"])),
                ["POOL-REFS"],
            )
            return
        self.pool.retain(self.block(arg["block"]))
        key = (self.in_use, arg["block"])
        held, releases = self.references.get(key, (1, 0))
        self.references[key] = (held + 1, releases)

    def _find(self, arg: Mapping[str, Any]) -> None:
        key = arg["hash"]
        block_hash = self.plans[key].block_hash if isinstance(key, str) else key
        expect = arg.get("expect")
        if expect == "ENOTFOUND":
            try:
                refused_with(
                    self._refusal("ENOTFOUND"),
                    f"find({block_hash:#x})",
                    lambda: self.pool.find(block_hash),
                    ["POOL-FIND"],
                )
            except CaseFailure as failure:
                found = isinstance(failure.evidence, RefusalEvidence) and (
                    failure.evidence.actual is None
                )
                if not found:  # refused with another status: it found nothing
                    raise
                if (self.in_use, block_hash) not in self.released:
                    if shared := self._shared_registry(block_hash, "succeeded"):
                        raise CaseFailure(str(failure), shared) from None
                    raise
                raise CaseFailure(
                    f"{failure} (the block of this hash was released)",
                    StaleHashEvidence(block_hash),
                ) from None
            return
        try:
            found = self.pool.find(block_hash)
        except Refused as refusal:
            if shared := self._shared_registry(block_hash, f"refused with {refusal.code}"):
                # find may miss this hash or block for another reason: a probe tells
                raise CaseFailure(
                    f"find({block_hash:#x}) refused with {refusal.code}, expected block {expect}",
                    replace(shared, registry_probe=self.pool.geometry),
                ) from None
            imported = expect in self.imported
            message = f"find({block_hash:#x}) refused with {refusal.code}, expected block {expect}"
            # Retained or released since it was stored, its hash may have been registered and
            # lost since (a release unregistering it while a reference is left): that it was
            # never registered is not shown.
            touched = (self.in_use, expect) in self.references
            if touched or (self.in_use, block_hash) in self.released:
                code = "ENOTFOUND" if refusal.code == self._refusal("ENOTFOUND") else refusal.code
                refused = PoolStep("find", block_hash=block_hash, answer=code)
                history = PoolHistoryEvidence(
                    self.geometry, self.capacity, (*self.history, refused)
                )
                raise CaseFailure(message, history) from None
            raise CaseFailure(
                message,
                KnownMistake(
                    "import-not-registered" if imported else "write-not-registered",
                    f"{'imported' if imported else 'written'} blocks stored but their hashes "
                    "not registered",
                    ("READ-ACCEPT",) if imported else ("POOL-FIND",),
                    f"find refused with {refusal.code} right after the "
                    f"{'import' if imported else 'write'}",
                    yields_to=NOT_HELD,
                    registry_probe=self.pool.geometry,
                    registered=None
                    if imported
                    else (tuple(self.hashes.get(self.in_use, {})), block_hash),
                ),
            ) from None
        if found != self.block(expect):
            message = (
                f"find({block_hash:#x}) = block {found}, expected {expect} "
                f"(block {self.block(expect)})"
            )
            permuted = self._import_order() if expect in self.imported else None
            if permuted is not None:
                message += f": {import_order_message(self.last_import[1], permuted)}"
            raise CaseFailure(
                message,
                self._shared_registry(block_hash, f"answered block {found}", found)
                or permuted
                or self.live.taken_over(self.in_use, block_hash, expect, found),
            )

    def _import_order(self) -> OrderEvidence | None:
        """The last import's ids read back, where they hold its records in another order."""
        if self.last_import is None or self.last_import[0] != self.in_use:
            return None
        _, ids, records = self.last_import
        try:
            held = [self.pool.read(block) for block in ids]
        except Refused:  # a block since released: the order can no longer be read
            return None
        return import_order_evidence(records, held)

    def _free(self, expected: int) -> None:
        got = self.pool.free_blocks()
        if got != expected:
            evidence = CountEvidence(expected, got, "release" in self.done)
            raise CaseFailure(
                f"free_blocks() = {got}, expected {expected}",
                (self.live.written_twice() if got > expected else None)
                or (self._freed_while_held() if got > expected else None)
                or evidence,
            )

    def _still_found(self, label: str) -> bool:
        """Whether find answers the block by its hash (a probe of the failed case: any other
        answer, a refusal or a fault, is not)."""
        plan = self.plans.get(label)
        if plan is None or not plan.block_hash:
            return False
        try:
            return self.pool.find(plan.block_hash) == self.block(label)
        except (Refused, ImplementationFault, NotObservable):
            return False

    def _freed_while_held(self) -> KnownMistake | None:
        """Which counting mistake frees a retained block too early, when the block's history
        tells them apart: freed by the first release though three references were held (the
        retains were not counted), or by a later one while one reference was left."""
        # A block found by its hash is still held, whatever the count says: freeing it is not
        # shown (a count moved at each release, say).
        held = [
            (refs, releases)
            for (pool, label), (refs, releases) in self.references.items()
            if pool == self.in_use and refs > 0 and releases > 0 and not self._still_found(label)
        ]
        if any(refs >= 2 and releases == 1 for refs, releases in held):
            return KnownMistake(
                "retain-not-counted",
                "retain takes no reference: one release frees a block retained twice",
                ("POOL-REFS",),
                "more blocks free after one release of a block holding three references",
            )
        if any(refs == 1 and releases >= 2 for refs, releases in held):
            return KnownMistake(
                "release-frees-early",
                "a release frees a block that still holds another reference",
                ("POOL-REFS",),
                "more blocks free after releases that left a block one reference",
            )
        return None

    def _export(self, arg: Mapping[str, Any]) -> None:
        ids = [self.block(label) for label in arg["blocks"]]
        if arg.get("expect"):
            # A version it writes is refused only for the blocks: freed or never written.
            written = arg["version"] in self.testee.info.write_versions
            refused_with(
                self._refusal(arg["expect"]),
                f"export v{arg['version']}",
                lambda: self.pool.export(ids, arg["version"]),
                ["POOL-RELEASE-FREED" if written else "EXPORT-UNWRITTEN"],
            )
            return
        plans = [self.plans[label].as_oracle_block() for label in arg["blocks"]]
        expected = oracle.encode(self.pool.geometry, plans, arg["version"])
        level = self.testee.v2_level if arg["version"] == 2 else "strict"
        dtype = self.pool.dtype

        def held() -> list[oracle.Block]:
            return [
                oracle.Block(b.block_hash, b.n_tokens, in_pool_precision(b.values, dtype))
                for b in plans
            ]

        try:
            exported = self.pool.export(ids, arg["version"])
        except Refused as refusal:
            if len(set(ids)) == len(ids):
                raise
            raise CaseFailure(
                f"export v{arg['version']} of {', '.join(arg['blocks'])} refused with "
                f"{refusal.code}",
                KnownMistake(
                    "export-refuses-repeated-block",
                    "an export whose list names a block more than once is refused",
                    ("EXPORT-REPEATED",),
                    f"refused with {refusal.code}; every block of the list is allocated",
                ),
            ) from None
        sources = [self.sources.get(label) for label in arg["blocks"]]
        compare_envelopes(expected, exported, level, self.nan, held, ids, dtype, sources=sources)

    def _export_bytes(self, arg: Mapping[str, Any]) -> None:
        got = self.pool.export_bytes(arg["n_blocks"], arg["version"])
        if got != arg["expect"]:
            evidence: Evidence = (
                RefusalEvidence(frozenset({"EXPORT-UNWRITTEN"}), frozenset({"0"}), None)
                if arg["expect"] == 0
                else SizeEvidence(arg["n_blocks"], arg["version"], arg["expect"], got)
            )
            raise CaseFailure(
                f"export_bytes({arg['n_blocks']}, v{arg['version']}) = {got}, "
                f"expected {arg['expect']}",
                evidence,
            )

    def _import(self, arg: Mapping[str, Any]) -> None:
        max_blocks = arg.get("max_blocks", self.pool.capacity)
        action = lambda: self.pool.import_envelope(arg["data"], max_blocks)  # noqa: E731
        if arg.get("expect"):
            rule = {"ENOMEM": "IMPORT-ENOMEM", "EINVAL": "IMPORT-EINVAL"}.get(arg["expect"])
            refused_with(self._refusal(arg["expect"]), "import", action, [rule] if rule else [])
            return
        ids = action()
        envelope = oracle.decode(arg["data"], oracle.ReaderProfile(self.pool.geometry))
        self.last_import = (self.in_use, ids, envelope.records)
        for record, block in zip(envelope.records, ids, strict=False):
            self._registered(record.block_hash, block)
        for label, block, record in zip(arg.get("as", []), ids, envelope.records, strict=False):
            self.live.stored(self.in_use, label, block, record.block_hash, written=False)
            self.ids[label] = block
            self.imported.add(label)
            self.sources[label] = (bytes(arg["data"]), record.offset)
            # What the pool holds, and so what a later export encodes, is the decoded value
            # in the pool's own precision.
            values = in_pool_precision(record.decoded.values, self.pool.dtype)
            self.plans[label] = BlockPlan(label, record.block_hash, record.n_tokens, values)
