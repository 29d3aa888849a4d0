"""A fault's cause titled with what was observed: the exception and its type, the signal of a
crash, the status of an exit, a hang, a status outside the contract, each with its operation
(tlkv_conformance.adapters.observed_fault reads it from the fault's message)."""

from __future__ import annotations

from ..adapters import observed_fault


def fault_title(detail: str) -> str:
    """What a fault was, as the start of a cause's title ("Pool.import_envelope raises
    ValueError"); "an implementation fault" when its message says nothing more."""
    observed = observed_fault(detail)
    if observed.kind == "fault" and not observed.operation:
        return "an implementation fault"
    return observed.title
