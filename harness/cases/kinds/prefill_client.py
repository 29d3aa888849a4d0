"""The `prefill` case kind, for a prefill client under test (the suite's own prefill side, for
the transfer cases, is `_prefill`): the suite plays the decode side of tl.kv.v1 and the client
pushes one prompt to it (spec, "Transfer"; docs/contract.md, "A prefill client").

A case describes the prompt (full blocks and a partial tail), what the scripted decode server
(`tlkv_conformance.scripted_server`) answers (the blocks it says it holds, the versions it
reads, a fault to inject) and the version the client is asked to write. The suite writes the
prompt's KV as an envelope file with the oracle, hands the client one job, and checks what the
server recorded, in order (`_prefill_checks`): the record is the authority, the client's own
report is checked against it. Each check belongs to one requirement and runs only in the cases
citing it, so a SHOULD decision never fails a MUST case. Only prefill clients (--impl
prefill-py:... or prefill-exec:...) run these cases.
"""

from __future__ import annotations

import tempfile
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ... import oracle
from ...adapters import Capability, PrefillJob
from ...checks import CaseFailure
from ...errors import ImplementationFault
from ...scripted_server import ScriptedDecodeServer, ServerScript
from ...testee import Testee
from ...values import make_values
from .._sources import CaseDataError
from ._base import Case, FileContext
from ._prefill import draw_prompt
from ._prefill_checks import CONTENT, DEADLINE, RecordCheck, mistake
from .transfer import DEFAULT_VALUES

SUITE_KV, ENGINE_KV = "suite", "engine"  # a case's `kv`: where the pushed KV comes from


@dataclass(frozen=True, eq=False, kw_only=True)
class PrefillCase(Case):
    kind = "prefill"
    markers = ("transfer", "prefill")  # the tl.kv.v1 transfer, from its other side

    geometry: oracle.Geometry
    version: int  # the version the job asks the client to write
    full_blocks: int
    tail: int
    held: tuple[int, ...]  # the full blocks (by index) the server says it holds
    reads: frozenset[int]
    has_blocks_status: str | None
    fail_after: int | None
    fail_status: str
    fail_streams: int | None
    stall: str | None
    deadline: float | None  # the job's deadline, when shorter than the way in's
    values: Mapping[str, Any]
    # Where the pushed KV comes from: the suite's envelope file (checked byte for byte), or the
    # engine's own computation (the job's kv_path null: only the payloads' structure checked).
    kv: str

    @classmethod
    def build(cls, raw: Mapping[str, Any], common: dict[str, Any], ctx: FileContext) -> list[Case]:
        geometry = ctx.geometry(raw.get("geometry", "testee"))
        full, tail = raw["full_blocks"], raw.get("tail", 1)
        if not full + tail:
            raise CaseDataError("the prompt has no block: give full_blocks or tail")
        if tail >= geometry.block_tokens:
            raise CaseDataError(
                f"a tail of {tail} tokens is no partial block with B = {geometry.block_tokens}"
            )
        held_raw = raw.get("held", "none")
        named = {"none": (), "all": tuple(range(full))}
        held = named.get(held_raw, ()) if isinstance(held_raw, str) else tuple(held_raw)
        if any(not 0 <= i < full for i in held):
            raise CaseDataError(f"held {held_raw!r}: none, all, or indexes of the full blocks")
        values = raw.get("values", DEFAULT_VALUES)
        # Its positions at this geometry (`B//2`, `D-4`): one that is not in the block makes
        # the case not applicable here, skipped with the reason, rather than an error at run.
        make_values(values, geometry)
        fail = raw.get("fail_stream", {})
        kv = raw.get("kv", SUITE_KV)
        if kv == ENGINE_KV and CONTENT in common["reqs"]:
            raise CaseDataError(
                f"kv: {ENGINE_KV} cannot check {CONTENT}: the suite does not know the engine's KV"
            )
        return [
            cls(
                **common,
                geometry=geometry,
                version=raw.get("version", 1),
                full_blocks=full,
                tail=tail,
                held=tuple(held),
                reads=frozenset(raw.get("reads", oracle.KNOWN_VERSIONS)),
                has_blocks_status=raw.get("has_blocks_status"),
                fail_after=fail.get("after_chunk"),
                fail_status=fail.get("status", "DATA_LOSS"),
                fail_streams=fail.get("streams"),
                stall=raw.get("stall"),
                deadline=raw.get("deadline"),
                values=values,
                kv=kv,
            )
        ]

    def item_markers(self) -> tuple[str, ...]:
        return (*self.markers, f"v{self.version}")

    def skip_reason(self, testee: Testee) -> str | None:
        if not testee.can(Capability.PREFILL):
            return (
                f"prefill cases test a prefill client of tl.kv.v1; {testee.label} is not one "
                "(--impl prefill-py:package.module or prefill-exec:COMMAND)"
            )
        if self.kv == SUITE_KV and not testee.can(Capability.SUITE_KV):
            return (
                f"{testee.label} pushes its engine's own KV only (kv_from_suite false), and "
                "every prefill case gives the client its KV, to check payloads byte for byte"
            )
        if self.version not in testee.info.write_versions:
            return f"{testee.label} does not write v{self.version}"
        size = self.geometry.envelope_size(1, self.version)
        if size > oracle.MAX_CHUNK_PAYLOAD:
            return f"a one-block v{self.version} envelope of {self.geometry} is {size} bytes"
        return None

    def run(self, testee: Testee) -> None:
        client = testee.adapter.prefill
        assert client is not None  # skip_reason skips the testees without one
        salt = zlib.crc32(self.id.encode()) + 1  # the same prompt every run: a fresh server
        prompt = draw_prompt(
            self.geometry, self.version, self.full_blocks, self.tail, self.values, salt
        )
        script = ServerScript(
            geometry=self.geometry,
            read_versions=self.reads,
            held=frozenset(prompt.hashes[i] for i in self.held),
            has_blocks_status=self.has_blocks_status,
            fail_after=self.fail_after,
            fail_status=self.fail_status,
            fail_streams=self.fail_streams,
            stall=self.stall,
        )
        deadline = min(client.deadline, self.deadline or client.deadline)
        with tempfile.TemporaryDirectory(prefix="tlkv-prefill-") as folder:
            kv_path: Path | None = None
            if self.kv == SUITE_KV:
                kv_path = Path(folder) / "prompt.tlkv"
                kv_path.write_bytes(oracle.encode(self.geometry, prompt.blocks, 1))
            with ScriptedDecodeServer(script) as server:
                job = PrefillJob(
                    target=server.address,
                    request_id=f"tlkv-prefill-{self.id}",
                    tokens=tuple(prompt.tokens),
                    geometry=self.geometry,
                    kv_format=self.version,
                    deadline=deadline,
                    kv_path=None if kv_path is None else str(kv_path),
                )
                started = time.monotonic()
                try:
                    result = client.push(job)
                except ImplementationFault as fault:
                    if DEADLINE in self.reqs and str(fault).startswith("timed out"):
                        raise CaseFailure(
                            f"the server stalled in {self.stall} and the client did not give "
                            f"up within its deadline of {deadline:g} s: {fault}",
                            mistake(
                                "prefill-ignores-deadline",
                                "the client waits on a stalled server past its deadline",
                                DEADLINE,
                            ),
                        ) from None
                    raise
                took = time.monotonic() - started
        check = RecordCheck(self, prompt, script, job, server.record)
        check.took = took
        check.check(result)
