"""The implementation under test, as a case sees it: the adapter, what it said of itself, and
the run's settings that change what a case expects."""

from __future__ import annotations

from dataclasses import dataclass

from .adapters import Adapter, ImplInfo, ImplSpec


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

    def refusal(self, c_code: str, grpc_status: str) -> str:
        """The refusal code this testee's way in reports for a C code / gRPC status pair."""
        return grpc_status if self.adapter.status_domain == "grpc" else c_code

    def can(self, capability: str) -> bool:
        return capability in self.info.capabilities
