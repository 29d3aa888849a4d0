"""How long to wait for an operation of the implementation, and when to stop calling it: one
record for every way in whose calls can hang or keep failing (a worker process running a C
library or a Python module, `_worker.py`; a gRPC server, `_grpc_client.py`). docs/ctypes.md and
docs/grpc.md describe it to users.

An operation (a C function, a Python method, an rpc) that hung twice in a row, or failed three
times in a row in a way that says nothing of the input (a crash, a lost worker, an answer that
does not parse), is quarantined: each later call fails at once, saying so, instead of waiting
out another timeout, and a broken engine's gate ends in about the time of a passing one. After
its first hang an operation waits at most HUNG_TIMEOUT_FACTOR times its slowest answered call
(at least the floor), not the whole call timeout: the hang has already failed the run, so a
shorter wait cannot turn a pass into a failure.
"""

from __future__ import annotations

import time

from ..errors import ImplementationFault, OperationFault, Quarantined

HANGS_BEFORE_QUARANTINE = 2
CRASHES_BEFORE_QUARANTINE = 3
HUNG_TIMEOUT_FACTOR = 4.0
HUNG_TIMEOUT_FLOOR = 1.0


def no_answer(name: str) -> OperationFault:
    """An operation that has never answered a call of this run, and hangs."""
    return OperationFault(f"no-answer:{name}", f"{name} does not answer")


class CallLedger:
    """Per operation: its last consecutive faults, its slowest answered call, whether it has
    answered at all; from these, each call's wait and the operations not to call again.

    `names` gives an operation's name in messages (the C function for a session method)."""

    def __init__(self, call_timeout: float, names: dict[str, str] | None = None) -> None:
        self.call_timeout = call_timeout
        self._names = dict(names or {})
        self._faults: dict[str, list[str]] = {}  # op -> how its last consecutive calls ended
        self._quarantined: dict[str, Quarantined] = {}  # op -> what its calls raise now
        self._hung: set[str] = set()  # ops that hung once: waited for less from then on
        self._slowest: dict[str, float] = {}  # op -> seconds of its slowest answered call

    def name(self, op: str) -> str:
        return self._names.get(op, op)

    def where(self, op: str) -> str:
        return f"in {self.name(op)}"

    def timeout(self, op: str) -> float:
        """The wait for the next call of `op`; raises Quarantined if it is not to be called."""
        if op in self._quarantined:
            raise self._quarantined[op]
        if op not in self._hung:
            return self.call_timeout
        slowest = HUNG_TIMEOUT_FACTOR * self._slowest.get(op, 0.0)
        return min(self.call_timeout, round(max(HUNG_TIMEOUT_FLOOR, slowest), 2))

    def answered(self, op: str, started: float, settled: bool = True) -> None:
        """`op` answered (a refusal answers too). `settled`: a success, which ends its run of
        faults (a refusal neither counts nor restarts the count)."""
        took = time.monotonic() - started
        self._slowest[op] = max(took, self._slowest.get(op, 0.0))
        if settled:
            self._faults.pop(op, None)

    def timed_out(self, op: str, timeout: float, detail: str = "") -> ImplementationFault:
        """The fault of a call of `op` that did not answer within `timeout` (recorded)."""
        message = f"timed out after {timeout:g} s {self.where(op)}{detail}"
        if timeout < self.call_timeout:
            message += (
                f" (the wait after an earlier hang: {HUNG_TIMEOUT_FACTOR:g} times its slowest "
                f"answered call, at least {HUNG_TIMEOUT_FLOOR:g} s)"
            )
        return self.faulted(op, ImplementationFault(message), hung=True)

    def faulted(
        self, op: str, fault: ImplementationFault, hung: bool = False
    ) -> ImplementationFault:
        """Record a fault of `op` that counts towards its quarantine (a hang, a crash, a lost
        worker, an answer that does not parse); returns it, saying what it shows of the
        operation when that does not depend on the input."""
        history = self._faults.setdefault(op, [])
        history.append(str(fault).splitlines()[0])
        if hung:
            self._hung.add(op)
        never_answered = op not in self._slowest
        operation_fault = fault.operation_fault
        if operation_fault is None and hung and never_answered:
            operation_fault = no_answer(self.name(op))
        timeouts = sum(1 for h in history if h.startswith("timed out"))
        if timeouts >= HANGS_BEFORE_QUARANTINE or len(history) >= CRASHES_BEFORE_QUARANTINE:
            if operation_fault is None and never_answered:
                operation_fault = OperationFault(
                    f"fails:{self.name(op)}", f"{self.name(op)} fails on every call"
                )
            failed = (
                "its last call" if len(history) == 1 else f"each of its last {len(history)} calls"
            )
            self.quarantine(
                op,
                f"it failed on {failed} ({'; '.join(history)}), so it is not called again in "
                "this run",
                operation_fault,
            )
        return ImplementationFault(str(fault), operation_fault)

    def quarantine(self, op: str, why: str, operation_fault: OperationFault | None) -> None:
        """Call `op` no more in this run: each later call raises at once, saying `why`."""
        self._quarantined[op] = Quarantined(f"not called {self.where(op)}: {why}", operation_fault)
