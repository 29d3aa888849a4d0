"""The kinds of case, one module each: what a case declares, what the oracle confirms when it
is built, how it runs against a testee. `KINDS` maps each YAML `kind:` to its class."""

from typing import Any

from ._base import Case, CaseOrigin, FileContext, NotApplicableCase, check_imported, needs
from ._prefill import (
    PULL_CHECKS,
    UNWRITTEN_FORMAT,
    PrefillRun,
    Prompt,
    count_mistake,
    draw_prompt,
    pull_index_asked,
    pull_order_asked,
    pull_unheld_asked,
    shuffled_order,
)
from .export import ExportCase
from .hashing import HashCase, HashSequenceCase
from .importing import ImportCase
from .pool import PoolCase
from .prefill_client import PrefillCase
from .reject import RejectCase
from .roundtrip import RoundtripCase
from .transfer import TransferCase

KINDS: dict[str, Any] = {
    cls.kind: cls
    for cls in (
        HashCase,
        HashSequenceCase,
        ExportCase,
        ImportCase,
        RejectCase,
        RoundtripCase,
        PoolCase,
        TransferCase,
        PrefillCase,
    )
}

__all__ = [
    "KINDS",
    "PULL_CHECKS",
    "UNWRITTEN_FORMAT",
    "Case",
    "CaseOrigin",
    "ExportCase",
    "FileContext",
    "HashCase",
    "HashSequenceCase",
    "ImportCase",
    "NotApplicableCase",
    "PoolCase",
    "PrefillCase",
    "PrefillRun",
    "Prompt",
    "RejectCase",
    "RoundtripCase",
    "TransferCase",
    "check_imported",
    "count_mistake",
    "draw_prompt",
    "needs",
    "pull_index_asked",
    "pull_order_asked",
    "pull_unheld_asked",
    "shuffled_order",
]
