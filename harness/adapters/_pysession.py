"""The Python-module protocol (docs/contract.md, "A Python module") behind the same session
interface as the C library's `_ffi.LibrarySession`: pools by integer id, values and envelopes
as bytes.

It runs in a worker process (isolation "worker", the default), so a module that crashes,
exits or hangs fails one case, and in the pytest process for debugging ("inprocess"). Either
way everything the module returns is copied out before the suite keeps it, and the array the
suite hands to `Pool.write` is checked afterwards: a module must copy what it keeps, and must not
write into the caller's array.
"""

from __future__ import annotations

import importlib
import sys
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

try:  # part of the package, in the suite's process
    from ..errors import CallerArrayChanged, ImplementationFault, Refused, SuiteUsageError
except ImportError:  # in a worker, loaded on its own: the worker loaded errors.py first
    from tlkv_worker_errors import (  # type: ignore
        CallerArrayChanged,
        ImplementationFault,
        Refused,
        SuiteUsageError,
    )

STATUS_CODES = ("EINVAL", "ENOMEM", "EFORMAT", "ESHAPE", "ENOTFOUND")
POOL_DTYPES = ("f16", "f32")
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
# What the suite writes over its own array after Pool.write returns, as a caller reusing its
# buffer would: a module that kept a reference instead of a copy then reads these back. Public
# (tlkv_conformance.adapters.REUSED_BUFFER_VALUE): the diagnosis recognises it.
REUSED_BUFFER_VALUE = np.float32(-1.2345e-5)

T = TypeVar("T")


def _mask(versions: Any, name: str) -> int:
    try:
        return sum(1 << int(v) for v in versions)
    except (TypeError, ValueError) as exc:
        raise SuiteUsageError(f"{name}: {exc}") from None


class ModuleSession:
    """One imported module and the pools created through it, each named by an integer id."""

    CALLS: Mapping[str, str] = {
        "load": "importing the module",
        "block_hash": "block_hash",
        "pool_create": "Pool()",
        "pool_destroy": "Pool.close",
        "pool_dtype": "Pool.dtype",
        "free_blocks": "Pool.free_blocks",
        "write": "Pool.write",
        "read": "Pool.read",
        "read_digest": "Pool.read",
        "find": "Pool.find",
        "release": "Pool.release",
        "retain": "Pool.retain",
        "offers_retain": "importing the module",
        "export_bytes": "Pool.export_bytes",
        "export": "Pool.export",
        "import_envelope": "Pool.import_envelope",
    }

    def __init__(self, module_name: str, path: Sequence[str] = ()) -> None:
        # The suite's own sys.path (pytest's rootdir, the user's PYTHONPATH), so the worker
        # imports what the suite's process would.
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
                f"module {module_name} lacks {', '.join(missing)} (see docs/contract.md, the "
                "Python module)"
            )
        self._pools: dict[int, tuple[Any, tuple[int, ...]]] = {}
        self._next_id = 1

    def load(self) -> tuple[int, int, str]:
        """The read and write version bitmasks, and the module's file."""
        module = self.module
        reads = _mask(module.READ_VERSIONS, "READ_VERSIONS")
        writes = _mask(module.WRITE_VERSIONS, "WRITE_VERSIONS")
        return reads, writes, str(getattr(module, "__file__", "") or "")

    def _call(self, call: str, func: Callable[..., T], *args: Any) -> T:
        """One protocol call: the module's KvError becomes Refused, anything else it raises an
        ImplementationFault that fails the case."""
        try:
            return func(*args)
        except self.module.KvError as exc:
            code = getattr(exc, "code", None)
            if code not in STATUS_CODES:
                raise ImplementationFault(
                    f"{call} raised KvError with code {code!r}, not one of "
                    f"{', '.join(STATUS_CODES)}"
                ) from None
            raise Refused(code, call, str(exc)) from None
        except Exception as exc:
            raise ImplementationFault(f"{call} raised {type(exc).__name__}: {exc}") from None

    def _pool(self, pool_id: int) -> tuple[Any, tuple[int, ...]]:
        try:
            return self._pools[pool_id]
        except KeyError:
            raise RuntimeError(f"no pool {pool_id} in this session") from None

    def _method(self, pool_id: int, name: str, *args: Any) -> Any:
        pool, _ = self._pool(pool_id)
        return self._call(f"Pool.{name}", getattr(pool, name), *args)

    def block_hash(self, parent: int, tokens: list[int]) -> int:
        value = self._call("block_hash", self.module.block_hash, parent, list(tokens))
        return _expect("block_hash", value, int)

    def pool_create(self, geometry: tuple[int, int, int, int], capacity: int) -> int:
        pool = self._call("Pool()", self.module.Pool, *geometry, capacity)
        missing = [m for m in REQUIRED_POOL_METHODS if not callable(getattr(pool, m, None))]
        if missing:
            raise ImplementationFault(f"its Pool lacks {', '.join(missing)}")
        block_tokens, n_layers, n_kv_heads, head_dim = geometry
        shape = (n_layers, 2, n_kv_heads, block_tokens, head_dim)
        pool_id = self._next_id
        self._next_id += 1
        self._pools[pool_id] = (pool, shape)
        return pool_id

    def pool_destroy(self, pool_id: int) -> None:
        pool, _ = self._pools.pop(pool_id)
        close = getattr(pool, "close", None)
        if callable(close):
            self._call("Pool.close", close)

    def pool_dtype(self, pool_id: int) -> str:
        pool, _ = self._pool(pool_id)
        dtype = getattr(pool, "dtype", None)
        if dtype not in POOL_DTYPES:
            raise ImplementationFault(f"Pool.dtype is {dtype!r}, expected one of {POOL_DTYPES}")
        return str(dtype)

    def free_blocks(self, pool_id: int) -> int:
        return _expect("Pool.free_blocks", self._method(pool_id, "free_blocks"), int)

    def write(self, pool_id: int, block_hash: int, n_tokens: int, kv: bytes) -> int:
        _, shape = self._pool(pool_id)
        values = np.frombuffer(kv, dtype="<f4").reshape(shape).copy()
        given = values.copy()
        block = _expect(
            "Pool.write", self._method(pool_id, "write", block_hash, n_tokens, values), int
        )
        if not np.array_equal(values.view(np.uint32), given.view(np.uint32)):
            raise CallerArrayChanged(
                "Pool.write changed the caller's kv array (the array belongs to the caller; a "
                "pool copies what it keeps)"
            )
        # The caller reuses its buffer: a pool holding a reference sees it.
        values.fill(REUSED_BUFFER_VALUE)
        return block

    def read(self, pool_id: int, block: int) -> tuple[int, int, bytes]:
        _, shape = self._pool(pool_id)
        result = self._method(pool_id, "read", block)
        try:
            block_hash, n_tokens, values = result
            # A copy, whatever the module handed out (a view of its own storage, say).
            array = np.array(values, dtype=np.float32, copy=True).reshape(shape)
        except (TypeError, ValueError) as exc:
            raise ImplementationFault(
                f"Pool.read returned {type(result).__name__}, expected (hash, n_tokens, f32 "
                f"array of shape {shape}): {exc}"
            ) from None
        return int(block_hash), int(n_tokens), array.astype("<f4").tobytes()

    def read_digest(self, pool_id: int, block: int) -> tuple[int, int, int]:
        """A read that sends back only a CRC-32 of the values (as _ffi.LibrarySession does)."""
        block_hash, n_tokens, values = self.read(pool_id, block)
        return block_hash, n_tokens, zlib.crc32(values)

    def find(self, pool_id: int, block_hash: int) -> int:
        return _expect("Pool.find", self._method(pool_id, "find", block_hash), int)

    def release(self, pool_id: int, block: int) -> None:
        self._method(pool_id, "release", block)

    def offers_retain(self) -> bool:
        """Pool.retain is optional (docs/contract.md)."""
        return callable(getattr(self.module.Pool, "retain", None))

    def retain(self, pool_id: int, block: int) -> None:
        self._method(pool_id, "retain", block)

    def export_bytes(self, pool_id: int, n_blocks: int, version: int) -> int:
        size = self._method(pool_id, "export_bytes", n_blocks, version)
        return _expect("Pool.export_bytes", size, int)

    def export(self, pool_id: int, blocks: list[int], version: int, size: int) -> bytes:
        data = self._method(pool_id, "export", list(blocks), version)
        return bytes(_expect("Pool.export", data, (bytes, bytearray, memoryview)))

    def import_envelope(self, pool_id: int, data: bytes, max_blocks: int) -> list[int]:
        blocks = self._method(pool_id, "import_envelope", bytes(data), max_blocks)
        try:
            return [int(_expect("Pool.import_envelope", b, int)) for b in blocks]
        except TypeError:
            raise ImplementationFault(f"Pool.import_envelope returned {blocks!r}") from None


def _expect(call: str, value: T, kind: type | tuple[type, ...]) -> T:
    # bool is an int to Python; numpy integers are not: both are common slips, and only the
    # second is harmless.
    if isinstance(value, np.integer) and kind is int:
        return int(value)  # type: ignore[return-value]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ImplementationFault(f"{call} returned {type(value).__name__}, expected {kind}")
    return value
