"""The implementation under test, as a case sees it: the adapter, what it said of itself, and
the run's settings that change what a case expects."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from .adapters import GRPC_STATUS_OF, Adapter, ImplInfo, ImplSpec
from .exprs import BuildTarget
from .oracle import Geometry


@dataclass(frozen=True, eq=False)
class Testee:
    __test__ = False  # not a test class, whatever its name suggests to pytest

    spec: ImplSpec
    adapter: Adapter
    info: ImplInfo
    v2_level: str = "strict"  # or "tolerant": e4m3 codes within one finite step
    # The run's salt (--hash-salt): against an implementation that keeps blocks from earlier
    # runs (a long-lived server), the hash chains of the cases start from it, mixed with each
    # case's file and id, so their hashes are new to it.
    hash_salt: int = 0

    @property
    def label(self) -> str:
        return self.spec.label

    @property
    def identity(self) -> str:
        return self.spec.identity

    def refusal(self, c_code: str, grpc_status: str | None = None) -> str:
        """The refusal this testee's way in reports for a C status (and its gRPC status, when
        a case names one; otherwise the usual mapping)."""
        if self.adapter.status_domain != "grpc":
            return c_code
        return grpc_status or GRPC_STATUS_OF[c_code]

    def can(self, capability: str) -> bool:
        return capability in self.info.capabilities

    def build_target(self, default: BuildTarget) -> BuildTarget:
        """What cases are built for against this implementation: the geometry it serves (else
        the case file's), and for one that keeps blocks across runs (a server) this run's
        salt, so that its blocks are this run's own."""
        return BuildTarget(
            self.geometry or default.geometry,
            self.hash_salt if self.adapter.keeps_blocks else 0,
        )

    @property
    def geometry(self) -> Geometry | None:
        """The one pool geometry the implementation serves, or None when it serves any."""
        return self.adapter.geometry

    def fingerprint(self) -> str:
        """Which build was tested: the files loaded (each one's name, size and sha256: a
        library, a module, a harness command's executable and the files its arguments name),
        or the address."""
        origin = getattr(self.adapter, "origin", None)
        loaded = origin if isinstance(origin, tuple) else (origin,)
        files = [path for path in loaded if isinstance(path, Path) and path.is_file()]
        if not files:
            return self.spec.target
        return "; ".join(
            f"{path.name}, {len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()}"
            for path, data in ((path, path.read_bytes()) for path in files)
        )

    def describe(self) -> str:
        """What the implementation says of itself, and the one geometry it serves if so."""
        return self.info.describe() + (f", geometry {self.geometry}" if self.geometry else "")


@dataclass(frozen=True)
class BundledSide:
    """A side of an interop pair the suite brings itself rather than an --impl: the bundled
    reference prefill client or decode server (conformance/test_interop.py). Its label names
    its row (a client) or column (a server) in the report's producer x consumer matrix."""

    label: str
