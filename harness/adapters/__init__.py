"""Adapters: the ways the suite reaches an implementation (docs/contract.md), and the
tl.kv.v1 transfer a gRPC one offers the transfer cases (`Transfer`, `Chunk`, docs/grpc.md)."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import SuiteUsageError
from ._base import (
    GRPC_STATUS_OF,
    STATUS_CODES,
    Adapter,
    Capability,
    ImplInfo,
    PoolHandle,
    ReadBack,
    values_digest,
)
from ._observed import ObservedFault, observed_fault
from ._pysession import REUSED_BUFFER_VALUE
from ._spec import ACCEPTED_FORMS, ImplSpec, parse_impl
from ._transfer import (
    Chunk,
    PrefillClient,
    PrefillJob,
    PrefillResult,
    PushCounts,
    ServerInfo,
    Transfer,
)


@dataclass(frozen=True)
class AdapterSettings:
    """Run-wide settings the adapters honour."""

    call_timeout: float = 10.0
    isolation: str = "worker"  # or "inprocess"
    # The worker's address-space limit in bytes (0: none); never applied under a sanitizer.
    worker_memory: int = 8 << 30
    # Processes of this run talking to the implementation at once (pytest-xdist workers): a
    # gRPC server's free-block count is then not one worker's to observe.
    concurrent_runs: int = 1
    # Sanitizer runtimes to preload into a ctypes worker: "auto" (those the library names),
    # "none", or paths separated by os.pathsep.
    sanitizer_runtime: str = "auto"


def open_adapter(spec: ImplSpec, settings: AdapterSettings) -> Adapter:
    """Connect to the implementation `spec` names; SuiteUsageError (one line) if it cannot."""
    # Each adapter imports what it needs (ctypes, grpcio) only when used.
    if spec.kind == "py":
        from ._pymodule import PyModuleAdapter

        return PyModuleAdapter(spec, settings)
    if spec.kind == "ctypes":
        from ._ctypes_adapter import CtypesAdapter

        return CtypesAdapter(spec, settings)
    if spec.kind == "grpc":
        from ._grpc import GrpcAdapter

        return GrpcAdapter(spec, settings)
    if spec.kind in ("prefill-py", "prefill-exec"):
        from ._prefill import PrefillAdapter

        return PrefillAdapter(spec, settings)
    raise SuiteUsageError(f"--impl {spec.label}: no adapter for {spec.kind!r}")


__all__ = [
    "ACCEPTED_FORMS",
    "GRPC_STATUS_OF",
    "REUSED_BUFFER_VALUE",
    "STATUS_CODES",
    "Adapter",
    "AdapterSettings",
    "Capability",
    "Chunk",
    "ImplInfo",
    "ImplSpec",
    "ObservedFault",
    "PoolHandle",
    "PrefillClient",
    "PrefillJob",
    "PrefillResult",
    "PushCounts",
    "ReadBack",
    "ServerInfo",
    "Transfer",
    "observed_fault",
    "open_adapter",
    "parse_impl",
    "values_digest",
]
