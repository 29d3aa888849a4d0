"""The Python-module way in (`py:package.module` and `ref`): docs/contract.md, section 2.

The module runs in a worker process by default, as a C library does
(`tlkv_conformance.adapters._worker`), so a module that crashes the interpreter, calls os._exit
or hangs fails one case; `--isolation=inprocess` imports it into the pytest process, for a
debugger. The protocol itself (KvError codes, return types, copies) is
`_pysession.ModuleSession`.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from ..errors import SuiteUsageError
from . import _pysession
from ._session import SessionAdapter, open_channel
from ._spec import ImplSpec

if TYPE_CHECKING:
    from . import AdapterSettings


class PyModuleAdapter(SessionAdapter):
    """A Python module implementing the testee protocol."""

    def __init__(self, spec: ImplSpec, settings: AdapterSettings) -> None:
        try:
            # The worker imports with the suite's own sys.path (rootdir, PYTHONPATH, ...).
            channel = open_channel(
                _pysession.ModuleSession, (spec.target, list(sys.path)), settings, {}
            )
        except SuiteUsageError as exc:
            raise SuiteUsageError(f"--impl {spec.label}: {exc}") from None
        super().__init__(spec, channel, spec.geometry)
