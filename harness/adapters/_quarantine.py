"""How long to wait for an operation of the implementation, and when to stop calling it: one
record for every way in whose calls can hang or keep failing (a worker process running a C
library or a Python module, `_worker_channel.py`; a gRPC server, `_grpc_client.py`).
docs/ctypes.md and docs/grpc.md describe it to users.

An operation (a C function, a Python method, an rpc) that hung twice in a row, or failed three
times in a row in a way that says nothing of the input (a crash, a lost worker, an answer that
does not parse), is quarantined: each later call fails at once, saying so, instead of waiting
out another timeout, and a broken engine's gate ends in about the time of a passing one. After
its first hang an operation waits at most HUNG_TIMEOUT_FACTOR times its slowest answered call
(at least the floor), not the whole call timeout: the hang has already failed the run, so a
shorter wait cannot turn a pass into a failure.

An operation whose inputs have a size (the blocks an export is asked for) and that faults only
from some size on, having answered smaller calls, is named for it ("tl_kv_export hangs for 2 or
more blocks; answered calls for 1 block"), and only its calls of that size or more are
quarantined: the smaller ones go on answering.
"""

from __future__ import annotations

import time

from ..errors import ImplementationFault, OperationFault, Quarantined
from ._observed import observed_fault

HANGS_BEFORE_QUARANTINE = 2
CRASHES_BEFORE_QUARANTINE = 3
HUNG_TIMEOUT_FACTOR = 4.0
HUNG_TIMEOUT_FLOOR = 1.0
FAULTS_FROM_SIZE = "faults-from-size"  # the cause of an operation faulting from a size on


def no_answer(name: str) -> OperationFault:
    """An operation that has never answered a call of this run, and hangs."""
    return OperationFault(
        f"no-answer:{name}",
        f"{name} does not answer",
        # said before it answered a smaller call, if it does: it faults from a size on
        yields_to=frozenset({f"{FAULTS_FROM_SIZE}:{name}"}),
    )


def breaks_channel(name: str) -> OperationFault:
    """An operation that broke the worker's channel (closed descriptors it did not open)."""
    return OperationFault(
        f"breaks-channel:{name}",
        f"{name} breaks the worker's channel to the suite (closes descriptors it did not open)",
    )


def faults_from_size(name: str, what: str, size: int, answered: int, unit: str) -> OperationFault:
    """An operation that faults (`what`: "hangs", "crashes with SIGSEGV") for `size` or more
    `unit`s, and answered calls for up to `answered`."""
    units = f"{answered} {unit}" + ("" if answered == 1 else "s")
    return OperationFault(
        f"{FAULTS_FROM_SIZE}:{name}",
        f"{name} {what} for {size} or more {unit}s; answered calls for "
        + (units if answered <= 1 else f"up to {units}"),
    )


class CallLedger:
    """Per operation: its last consecutive faults, its slowest answered call, whether it has
    answered at all; from these, each call's wait and the operations not to call again.

    `names` gives an operation's name in messages (the C function for a session method);
    `sized` the unit of the operations whose callers give each call's size (an export's
    "block")."""

    def __init__(
        self,
        call_timeout: float,
        names: dict[str, str] | None = None,
        sized: dict[str, str] | None = None,
    ) -> None:
        self.call_timeout = call_timeout
        self._names = dict(names or {})
        self._units = dict(sized or {})
        self._sizes_answered: dict[str, set[int]] = {}  # op -> the sizes of its answered calls
        # op -> how its calls of a size it never answered ended (not reset by smaller answers)
        self._sized_faults: dict[str, list[tuple[int, str]]] = {}
        self._quarantined_from: dict[str, tuple[int, Quarantined]] = {}  # op -> (size, raised)
        self._faults: dict[str, list[str]] = {}  # op -> how its last consecutive calls ended
        self._quarantined: dict[str, Quarantined] = {}  # op -> what its calls raise now
        self._hung: set[str] = set()  # ops that hung once: waited for less from then on
        self._slowest: dict[str, float] = {}  # op -> seconds of its slowest answered call

    def name(self, op: str) -> str:
        return self._names.get(op, op)

    def where(self, op: str) -> str:
        return f"in {self.name(op)}"

    def timeout(self, op: str, size: int | None = None) -> float:
        """The wait for the next call of `op` (of `size`, for a sized operation); raises
        Quarantined if it is not to be called."""
        if op in self._quarantined:
            raise self._quarantined[op]
        if size is not None and op in self._quarantined_from:
            threshold, quarantined = self._quarantined_from[op]
            if size >= threshold:
                raise quarantined
        if op not in self._hung:
            return self.call_timeout
        slowest = HUNG_TIMEOUT_FACTOR * self._slowest.get(op, 0.0)
        return min(self.call_timeout, round(max(HUNG_TIMEOUT_FLOOR, slowest), 2))

    def answered(
        self, op: str, started: float, settled: bool = True, size: int | None = None
    ) -> None:
        """`op` answered (a refusal answers too). `settled`: a success, which ends its run of
        faults (a refusal neither counts nor restarts the count)."""
        took = time.monotonic() - started
        self._slowest[op] = max(took, self._slowest.get(op, 0.0))
        if size is not None and op in self._units:
            first = op not in self._sizes_answered
            self._sizes_answered.setdefault(op, set()).add(size)
            faults = self._sized_faults.get(op)
            if first and faults and op in self._quarantined_from:
                # Quarantined as not answering: it answers smaller calls, so it faults from a size.
                named = self._size_fault(op, faults, hung=False)
                if named is not None:
                    self._quarantine_from(op, faults, named)
        if settled:
            self._faults.pop(op, None)

    def timed_out(
        self, op: str, timeout: float, detail: str = "", size: int | None = None
    ) -> ImplementationFault:
        """The fault of a call of `op` that did not answer within `timeout` (recorded)."""
        message = f"timed out after {timeout:g} s {self.where(op)}{detail}"
        if timeout < self.call_timeout:
            message += (
                f" (the wait after an earlier hang: {HUNG_TIMEOUT_FACTOR:g} times its slowest "
                f"answered call, at least {HUNG_TIMEOUT_FLOOR:g} s)"
            )
        return self.faulted(op, ImplementationFault(message), hung=True, size=size)

    def faulted(
        self, op: str, fault: ImplementationFault, hung: bool = False, size: int | None = None
    ) -> ImplementationFault:
        """Record a fault of `op` that counts towards its quarantine (a hang, a crash, a lost
        worker, an answer that does not parse); returns it, saying what it shows of the
        operation when that does not depend on the input."""
        if hung:
            self._hung.add(op)
        if fault.operation_fault is None and observed_fault(str(fault)).kind == "channel":
            fault = ImplementationFault(str(fault), breaks_channel(self.name(op)))
        sized = self._sized_fault(op, fault, hung, size)
        if sized is not None:
            return sized
        history = self._faults.setdefault(op, [])
        history.append(str(fault).splitlines()[0])
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

    def _sized_fault(
        self, op: str, fault: ImplementationFault, hung: bool, size: int | None
    ) -> ImplementationFault | None:
        """A fault of a sized operation at a size above every size it answered (or before it
        answered any): after two hangs or three faults of such sizes, the calls of the smallest
        of them or more are quarantined, and the smaller ones go on; once it answered a smaller
        call, it is named for the sizes it faults from. None for a fault at a size it answered
        (the input's: counted as usual)."""
        if size is None or op not in self._units:
            return None
        top = max(self._sizes_answered.get(op, ()), default=-1)
        if size <= top:
            return None
        faults = [f for f in self._sized_faults.get(op, []) if f[0] > top]
        faults.append((size, str(fault).splitlines()[0]))
        self._sized_faults[op] = faults
        operation_fault = fault.operation_fault or self._size_fault(op, faults, hung)
        timeouts = sum(1 for _, line in faults if line.startswith("timed out"))
        if timeouts >= HANGS_BEFORE_QUARANTINE or len(faults) >= CRASHES_BEFORE_QUARANTINE:
            if operation_fault is None:  # it never answered, and fails (not hangs) every call
                name = self.name(op)
                operation_fault = OperationFault(
                    f"fails:{name}",
                    f"{name} fails on every call",
                    yields_to=frozenset({f"{FAULTS_FROM_SIZE}:{name}"}),
                )
            self._quarantine_from(op, faults, operation_fault)
        return ImplementationFault(str(fault), operation_fault)

    def _size_fault(
        self, op: str, faults: list[tuple[int, str]], hung: bool
    ) -> OperationFault | None:
        """What faults at sizes above every answered one say of `op`: from which size on it
        faults, once it answered a smaller call; before, that it does not answer (a hang)."""
        answered = self._sizes_answered.get(op)
        name = self.name(op)
        if answered:
            what = observed_fault(faults[0][1]).what
            threshold = min(size for size, _ in faults)
            return faults_from_size(name, what, threshold, max(answered), self._units[op])
        return no_answer(name) if hung else None

    def _quarantine_from(
        self, op: str, faults: list[tuple[int, str]], operation_fault: OperationFault
    ) -> None:
        """Call `op` no more for the smallest size of `faults` or more (their lines say why)."""
        threshold, unit = min(size for size, _ in faults), self._units[op]
        why = (
            f"it failed on {len(faults)} calls for {threshold} or more {unit}s "
            f"({'; '.join(line for _, line in faults)}), so it is not called again for "
            f"{threshold} or more {unit}s in this run"
        )
        quarantined = Quarantined(f"not called {self.where(op)}: {why}", operation_fault)
        self._quarantined_from[op] = (threshold, quarantined)
