"""The harness's own exceptions: what went wrong, and whose fault it was."""

from __future__ import annotations

from dataclasses import dataclass


class SuiteUsageError(Exception):
    """Bad input to the suite itself (an --impl string, a case file, a profile): one line."""


class Refused(Exception):
    """The implementation refused a call with a status (EFORMAT, DATA_LOSS, ...)."""

    def __init__(self, code: str, call: str, detail: str = "") -> None:
        super().__init__(f"{call} refused with {code}" + (f": {detail}" if detail else ""))
        self.code = code
        self.call = call
        self.detail = detail


@dataclass(frozen=True)
class OperationFault:
    """What one operation does wrong whatever the input (it never answers, its answers never
    parse): a probable cause of its own in the report (`id`, `title`), not one of a case's data.
    `yields_to`: the causes that, when the run shows them too, say it better (a hang first
    taken for "does not answer", of an operation later seen answering smaller calls)."""

    id: str
    title: str
    yields_to: frozenset[str] = frozenset()


class ImplementationFault(Exception):
    """The implementation crashed, hung, raised something unexpected or broke the protocol.

    This fails the case it happened in; the run goes on. `operation_fault`: what the fault
    says of the operation itself, when it says something whatever the input.
    """

    def __init__(self, message: str, operation_fault: OperationFault | None = None) -> None:
        super().__init__(message)
        self.operation_fault = operation_fault


class CallerArrayChanged(ImplementationFault):
    """A pool's write changed the array its caller handed it, which stays the caller's to reuse
    (a pool copies what it keeps): a fault that names its own mistake."""


class SentChunkCrcWrong(ImplementationFault):
    """A chunk the server sent (PullKv) whose crc32c field is not the CRC-32C of its payload:
    a fault that carries the chunk (`payload`, `field`), so that the diagnosis can tell how
    the field was computed."""

    def __init__(self, message: str, payload: bytes, field: int) -> None:
        super().__init__(message)
        self.payload = payload
        self.field = field


# The faults a worker process sends back by class name (it loads this file on its own, so its
# classes are not the suite's): the suite raises the one of that name.
WORKER_FAULTS: dict[str, type[ImplementationFault]] = {
    cls.__name__: cls for cls in (ImplementationFault, CallerArrayChanged)
}


class WrongCount(Exception):
    """The implementation answered, in protocol, with a count the contract fixes wrongly (PushKv's
    blocks_stored + blocks_reused for the chunks it took): a failed check of `reqs`, not a fault."""

    def __init__(self, message: str, reqs: tuple[str, ...]) -> None:
        super().__init__(message)
        self.reqs = reqs


class Quarantined(ImplementationFault):
    """A call not made: the implementation faulted in it too often before (docs/ctypes.md)."""


class CorruptedGoldenFile(Exception):
    """A golden file no longer matches its manifest: the suite's data is broken, not the testee."""


class NotObservable(Exception):
    """The selected way in cannot observe what a case checks: the case is skipped, not passed."""
