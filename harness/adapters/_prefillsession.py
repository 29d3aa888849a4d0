"""The prefill-client module protocol (docs/contract.md, "A prefill client") behind the
session interface the worker process serves (`_worker.py`), as `_pysession.ModuleSession` is
for a testee module: the module is imported in a worker, so a client that crashes, exits or
hangs fails one case and the run goes on.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping, Sequence
from typing import Any

try:  # part of the package, in the suite's process
    from ..errors import ImplementationFault, SuiteUsageError
except ImportError:  # in a worker, loaded on its own: the worker loaded errors.py first
    from tlkv_worker_errors import ImplementationFault, SuiteUsageError  # type: ignore

REQUIRED_MODULE_NAMES = ("WRITE_VERSIONS", "push")


class PrefillSession:
    """One imported prefill-client module."""

    CALLS: Mapping[str, str] = {"load": "importing the module", "push": "push"}

    def __init__(self, module_name: str, path: Sequence[str] = ()) -> None:
        sys.path[:0] = [p for p in path if p not in sys.path]
        try:
            self.module = importlib.import_module(module_name)
        except Exception as exc:
            raise SuiteUsageError(
                f"cannot import {module_name}: {type(exc).__name__}: {exc}"
            ) from None
        missing = [n for n in REQUIRED_MODULE_NAMES if not hasattr(self.module, n)]
        if missing:
            raise SuiteUsageError(
                f"module {module_name} lacks {', '.join(missing)} (see docs/contract.md, a "
                "prefill client)"
            )

    def load(self) -> tuple[int, int, str]:
        """No read versions, the write versions' bitmask, and the module's file."""
        try:
            writes = sum(1 << int(v) for v in self.module.WRITE_VERSIONS)
        except (TypeError, ValueError) as exc:
            raise SuiteUsageError(f"WRITE_VERSIONS: {exc}") from None
        return 0, writes, str(getattr(self.module, "__file__", "") or "")

    def push(self, job: dict[str, Any]) -> Any:
        """The module's push(job); any exception it raises is a fault of the client."""
        try:
            return self.module.push(dict(job))
        except Exception as exc:
            raise ImplementationFault(
                f"push raised {type(exc).__name__}: {exc}".rstrip(": ")
            ) from None
