"""The Python-module way in (`py:package.module` and `ref`): docs/contract.md, section 2."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType
from typing import Any, TypeVar

import numpy as np

from ..errors import ImplementationFault, Refused, SuiteUsageError
from ..oracle import Geometry
from ._base import POOL_DTYPES, STATUS_CODES, Adapter, ImplInfo, PoolHandle, ReadBack

REQUIRED_MODULE_NAMES = ("READ_VERSIONS", "WRITE_VERSIONS", "KvError", "block_hash", "Pool")
REQUIRED_POOL_METHODS = (
    "free_blocks",
    "write",
    "read",
    "find",
    "release",
    "export_bytes",
    "export",
    "import_envelope",
)

T = TypeVar("T")


def _checked_call(module: ModuleType, call: str, func: Callable[..., T], *args: Any) -> T:
    """Run one protocol call, turning the module's KvError into Refused and anything else it
    raises into an ImplementationFault that fails the case."""
    try:
        return func(*args)
    except module.KvError as exc:
        code = getattr(exc, "code", None)
        if code not in STATUS_CODES:
            raise ImplementationFault(
                f"{call} raised KvError with code {code!r}, not one of {', '.join(STATUS_CODES)}"
            ) from exc
        raise Refused(code, call, str(exc)) from None
    except Exception as exc:
        raise ImplementationFault(f"{call} raised {type(exc).__name__}: {exc}") from exc


def _expect(call: str, value: T, kind: type | tuple[type, ...]) -> T:
    if not isinstance(value, kind):
        raise ImplementationFault(f"{call} returned {type(value).__name__}, expected {kind}")
    return value


class PyPool(PoolHandle):
    def __init__(self, module: ModuleType, geometry: Geometry, capacity: int) -> None:
        super().__init__(geometry, capacity)
        self._module = module
        self._pool = _checked_call(
            module,
            "Pool()",
            module.Pool,
            geometry.block_tokens,
            geometry.n_layers,
            geometry.n_kv_heads,
            geometry.head_dim,
            capacity,
        )
        missing = [m for m in REQUIRED_POOL_METHODS if not callable(getattr(self._pool, m, None))]
        if missing:
            raise ImplementationFault(f"its Pool lacks {', '.join(missing)}")

    def _call(self, name: str, *args: Any) -> Any:
        return _checked_call(self._module, f"Pool.{name}", getattr(self._pool, name), *args)

    @property
    def dtype(self) -> str:
        dtype = getattr(self._pool, "dtype", None)
        if dtype not in POOL_DTYPES:
            raise ImplementationFault(f"Pool.dtype is {dtype!r}, expected one of {POOL_DTYPES}")
        return dtype

    def free_blocks(self) -> int:
        return _expect("Pool.free_blocks", self._call("free_blocks"), int)

    def write(self, block_hash: int, n_tokens: int, values: np.ndarray) -> int:
        kv = np.ascontiguousarray(values, dtype=np.float32).copy()
        return _expect("Pool.write", self._call("write", block_hash, n_tokens, kv), int)

    def read(self, block: int) -> ReadBack:
        result = self._call("read", block)
        try:
            block_hash, n_tokens, values = result
            values = np.asarray(values, dtype=np.float32).reshape(self.geometry.values_shape)
        except (TypeError, ValueError) as exc:
            raise ImplementationFault(
                f"Pool.read returned {type(result).__name__}, expected (hash, n_tokens, "
                f"f32 array of shape {self.geometry.values_shape}): {exc}"
            ) from exc
        return ReadBack(int(block_hash), int(n_tokens), values)

    def find(self, block_hash: int) -> int:
        return _expect("Pool.find", self._call("find", block_hash), int)

    def release(self, block: int) -> None:
        self._call("release", block)

    def export_bytes(self, n_blocks: int, version: int) -> int:
        return _expect("Pool.export_bytes", self._call("export_bytes", n_blocks, version), int)

    def export(self, blocks: list[int], version: int) -> bytes:
        data = self._call("export", list(blocks), version)
        return bytes(_expect("Pool.export", data, (bytes, bytearray, memoryview)))

    def import_envelope(self, data: bytes, max_blocks: int) -> list[int]:
        blocks = self._call("import_envelope", bytes(data), max_blocks)
        try:
            return [int(_expect("Pool.import_envelope", b, int)) for b in blocks]
        except TypeError as exc:
            raise ImplementationFault(f"Pool.import_envelope returned {blocks!r}") from exc

    def close(self) -> None:
        close = getattr(self._pool, "close", None)
        if callable(close):
            self._call("close")


class PyModuleAdapter(Adapter):
    """Calls a Python module that implements the testee protocol, in this process."""

    def __init__(self, label: str, module_name: str) -> None:
        super().__init__(label)
        try:
            self._module = importlib.import_module(module_name)
        except Exception as exc:
            raise SuiteUsageError(
                f"--impl {label}: cannot import {module_name}: {type(exc).__name__}: {exc}"
            ) from None
        missing = [n for n in REQUIRED_MODULE_NAMES if not hasattr(self._module, n)]
        if missing:
            raise SuiteUsageError(
                f"--impl {label}: module {module_name} lacks {', '.join(missing)} "
                "(see docs/contract.md, the Python module)"
            )

    def info(self) -> ImplInfo:
        module = self._module
        try:
            reads = frozenset(int(v) for v in module.READ_VERSIONS)
            writes = frozenset(int(v) for v in module.WRITE_VERSIONS)
        except (TypeError, ValueError) as exc:
            raise SuiteUsageError(
                f"--impl {self.label}: READ_VERSIONS/WRITE_VERSIONS: {exc}"
            ) from None
        with self.open_pool(Geometry(1, 1, 1, 1), 1) as probe:
            dtype = probe.dtype
        return ImplInfo(read_versions=reads, write_versions=writes, pool_dtype=dtype)

    def block_hash(self, parent: int, tokens: list[int]) -> int:
        value = _checked_call(self._module, "block_hash", self._module.block_hash, parent, tokens)
        return _expect("block_hash", value, int)

    def open_pool(self, geometry: Geometry, capacity: int) -> PyPool:
        return PyPool(self._module, geometry, capacity)
