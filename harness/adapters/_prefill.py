"""The prefill-client ways in: docs/contract.md, "A prefill client". `prefill-py:package.module`
runs the module in a worker process, as a testee module does (`_worker.py`, the same channel
and call ledger); `prefill-exec:COMMAND` runs the worker with a harness session
(`_prefillharness.py`), which starts the command as its child and speaks JSON lines to it. Either
way a client that crashes, exits or hangs fails its case, one that keeps hanging is quarantined,
and the run goes on. The cases run a scripted decode server (`tlkv_conformance.scripted_server`)
and hand the client one job each.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ImplementationFault, NotObservable, SuiteUsageError
from ..oracle import KNOWN_VERSIONS, Geometry
from ._base import Adapter, Capability, ImplInfo, PoolHandle
from ._prefillharness import HarnessSession, resolve_command
from ._prefillsession import PrefillSession
from ._session import Channel, open_channel
from ._spec import ImplSpec, harness_command
from ._transfer import PrefillJob, PrefillResult

if TYPE_CHECKING:
    from . import AdapterSettings

NOT_A_POOL = "a prefill client offers no pool nor block hash: only its pushes are observed"


class PrefillAdapter(Adapter):
    """A prefill client: `prefill` pushes jobs; every pool and hash case is skipped."""

    def __init__(self, spec: ImplSpec, settings: AdapterSettings) -> None:
        super().__init__(spec.label)
        self.geometry = spec.geometry
        if spec.kind == "prefill-exec":
            command = harness_command(spec.text, spec.target)
            try:
                resolve_command(command)  # not found: the user's mistake, before any worker
            except SuiteUsageError as exc:
                raise SuiteUsageError(f"--impl {spec.label}: {exc}") from None
            session: type = HarnessSession
            load_args: tuple[object, ...] = (command,)
            named = tuple(Path(arg) for arg in command[1:] if Path(arg).is_file())
        else:
            session, load_args = PrefillSession, (spec.target, list(sys.path))
            named = ()
        try:
            channel: Channel = open_channel(session, load_args, settings, {})
            _, writes, origin = channel.open()
        except (SuiteUsageError, ImplementationFault) as exc:
            raise SuiteUsageError(f"--impl {spec.label}: loading it: {exc}") from None
        self._channel = channel
        self._writes = frozenset(v for v in range(32) if writes >> v & 1)
        # The module file; for a harness, the executable and each argument naming a file (its
        # script, say): a changed script is another build in the report.
        self.origin = (*((Path(origin),) if origin else ()), *named)
        self._suite_kv = True
        self._harness = session is HarnessSession
        if self._harness:
            try:
                self._greet(spec)
            except SuiteUsageError:
                self.close()
                raise
        self.prefill = self
        # The client's deadline lies within the wait for its answer, so a client that keeps
        # to it is never cut short as hanging.
        self.deadline = max(0.5, settings.call_timeout - 1.0)

    def _greet(self, spec: ImplSpec) -> None:
        """The harness's `start`: the versions it writes, its geometry, whether it pushes the
        suite's KV. A harness that faults in it is still tested: every version is tried, and
        each job starts it again and fails with the reason."""
        try:
            greeting = self._channel.call("start")
        except ImplementationFault:  # each case starts it again, and fails saying why
            self._writes = KNOWN_VERSIONS
            return
        self._writes = frozenset(greeting["write_versions"])
        self._suite_kv = greeting["kv_from_suite"]
        if greeting["geometry"] is not None:
            served = Geometry(*greeting["geometry"])
            if self.geometry is not None and self.geometry != served:
                raise SuiteUsageError(
                    f"--impl {spec.label}: geometry={self.geometry} given, but the harness "
                    f"serves {served}"
                )
            self.geometry = served

    def info(self) -> ImplInfo:
        return ImplInfo(
            read_versions=frozenset(),
            write_versions=self._writes,
            pool_dtype="none",
            capabilities=frozenset(
                {Capability.PREFILL} | ({Capability.SUITE_KV} if self._suite_kv else set())
            ),
        )

    def push(self, job: PrefillJob) -> PrefillResult:
        answer = self._channel.call("push", job.as_message())
        try:
            return PrefillResult.of_message(answer)
        except ValueError as exc:
            raise ImplementationFault(str(exc)) from None

    def block_hash(self, parent: int, tokens: list[int]) -> int:
        raise NotObservable(NOT_A_POOL)

    def open_pool(self, geometry: Geometry, capacity: int) -> PoolHandle:
        raise NotObservable(NOT_A_POOL)

    def close(self) -> None:
        if self._harness:
            with contextlib.suppress(ImplementationFault):
                self._channel.call("stop")
        self._channel.close()
