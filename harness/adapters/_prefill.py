"""The prefill-client way in (`prefill-py:package.module`): docs/contract.md, "A prefill
client". The module runs in a worker process, as a testee module does (`_worker.py`, the same
channel and call ledger), so a client that crashes, exits or hangs fails its case, one that
keeps hanging is quarantined, and the run goes on. The cases run a scripted decode server
(`tlkv_conformance.scripted_server`) and hand the client one job each.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ImplementationFault, NotObservable, SuiteUsageError
from ..oracle import Geometry
from ._base import Adapter, Capability, ImplInfo, PoolHandle
from ._prefillsession import PrefillSession
from ._session import Channel, open_channel
from ._spec import ImplSpec
from ._transfer import PrefillJob, PrefillResult

if TYPE_CHECKING:
    from . import AdapterSettings

NOT_A_POOL = "a prefill client offers no pool nor block hash: only its pushes are observed"


class PrefillAdapter(Adapter):
    """A prefill client: `prefill` pushes jobs; every pool and hash case is skipped."""

    def __init__(self, spec: ImplSpec, settings: AdapterSettings) -> None:
        super().__init__(spec.label)
        self.geometry = spec.geometry
        try:
            channel: Channel = open_channel(
                PrefillSession, (spec.target, list(sys.path)), settings, {}
            )
            _, writes, origin = channel.open()
        except (SuiteUsageError, ImplementationFault) as exc:
            raise SuiteUsageError(f"--impl {spec.label}: loading it: {exc}") from None
        self._channel = channel
        self._writes = frozenset(v for v in range(32) if writes >> v & 1)
        self.origin = Path(origin) if origin else None  # the module file loaded
        self.prefill = self
        # The client's deadline lies within the wait for its answer, so a client that keeps
        # to it is never cut short as hanging.
        self.deadline = max(0.5, settings.call_timeout - 1.0)

    def info(self) -> ImplInfo:
        return ImplInfo(
            read_versions=frozenset(),
            write_versions=self._writes,
            pool_dtype="none",
            capabilities=frozenset({Capability.PREFILL}),
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
        self._channel.close()
