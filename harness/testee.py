"""The implementation under test, as a case sees it: the adapter, what it said of itself, and
the run's settings that change what a case expects."""

from __future__ import annotations

from dataclasses import dataclass

from .adapters import GRPC_STATUS_OF, Adapter, ImplInfo, ImplSpec


@dataclass(frozen=True, eq=False)
class Testee:
    __test__ = False  # not a test class, whatever its name suggests to pytest

    spec: ImplSpec
    adapter: Adapter
    info: ImplInfo
    v2_level: str = "strict"  # or "tolerant": e4m3 elements within one code

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
