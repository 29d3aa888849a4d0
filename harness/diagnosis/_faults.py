"""A fault's cause titled with what was observed: the exception and its type, the signal of a
crash, the status of an exit, a hang, a status outside the contract, each with its operation
(tlkv_conformance.adapters.observed_fault reads it from the fault's message)."""

from __future__ import annotations

from ..adapters import observed_fault
from ._causes import Cause

# The operations that must answer whatever they are asked, each with the requirement of its
# answer: a fault in one is that requirement's whoever called it (over gRPC an import first asks
# HasBlocks which of the envelope's block hashes the server holds: its fault is not the reader's).
_ANSWERS_ANY_INPUT = {"HasBlocks": "XFER-HASBLOCKS"}


def fault_title(detail: str) -> str:
    """What a fault was, as the start of a cause's title ("Pool.import_envelope raises
    ValueError"); "an implementation fault" when its message says nothing more."""
    observed = observed_fault(detail)
    if observed.kind == "fault" and not observed.operation:
        return "an implementation fault"
    return observed.title


def own_fault_cause(detail: str, asked: str = "block hashes") -> Cause | None:
    """The cause of a fault (`detail`, its message) in an operation that must answer whatever
    it is `asked` (HasBlocks: every hash, held or not): that operation's `fault-on:RULE`; None
    for any other operation."""
    rule = _ANSWERS_ANY_INPUT.get(observed_fault(detail).operation)
    if rule is None:
        return None
    return Cause(
        f"fault-on:{rule}",
        f"{fault_title(detail)} when asked about {asked}",
        (rule,),
        detail.splitlines()[0].removeprefix("implementation fault: ") if detail else "",
    )


def valid_input_fault_cause(detail: str) -> Cause:
    """The cause of a fault (`detail`, its message) on a valid envelope: the reader's
    (`fault-on-valid`), or, where the operation that faulted is one the way in called for the
    envelope's hashes, that operation's (`own_fault_cause`)."""
    own = own_fault_cause(detail, "a valid envelope's block hashes")
    if own is not None:
        return own
    title = f"{fault_title(detail)} on a valid envelope"
    return Cause("fault-on-valid", title, ("READ-ACCEPT",))
