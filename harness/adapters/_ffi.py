"""The C ABI of abi/tl_kv.h as ctypes sees it: one table of functions and their checks, and a
`LibrarySession` that owns pools by integer id.

The same session runs in the worker process (isolation "worker") and in the pytest process
(isolation "inprocess"), so both modes call the library identically. This module imports
nothing but the standard library and the package's `errors`: the worker loads both files on
their own, without the package's __init__ and its numpy import, so that a worker (re)starts in
tens of milliseconds.
"""

from __future__ import annotations

import ctypes
import functools
import zlib
from collections.abc import Callable, Mapping
from ctypes import (
    POINTER,
    byref,
    c_float,
    c_int,
    c_size_t,
    c_uint8,
    c_uint16,
    c_uint32,
    c_uint64,
    c_void_p,
)
from dataclasses import dataclass
from typing import Any, NamedTuple

try:  # part of the package, in the suite's process
    from ..errors import ImplementationFault, Refused, SuiteUsageError
except ImportError:  # in a worker, loaded on its own: the worker loaded errors.py first
    from tlkv_worker_errors import ImplementationFault, Refused, SuiteUsageError  # type: ignore

# The contract's numbers (CONTRACT.md, section 1); a status profile may replace any of them.
DEFAULT_STATUSES: Mapping[str, int] = {
    "OK": 0,
    "EINVAL": -1,
    "ENOMEM": -2,
    "EFORMAT": -3,
    "ESHAPE": -4,
    "ENOTFOUND": -5,
}
DTYPES: Mapping[int, str] = {0: "f32", 1: "f16"}  # tl_dtype values a pool may report

# An out-parameter the library must overwrite: it is 0 after any failure and at most
# max_blocks after success, so a value it left alone is visible.
_UNTOUCHED = 0xFFFFFFFF
# blocks_out has exactly max_blocks entries (so AddressSanitizer sees a write past them) up to
# this many; a case may pass a huge max_blocks, and no envelope of n bytes holds more than
# (n - 32) / 12 blocks, so beyond it that bound is enough.
_EXACT_BLOCKS_OUT = 1 << 16

_U32P = POINTER(c_uint32)

ErrCheck = Callable[["Library", Any, Any, tuple[Any, ...]], Any]


def check_status(library: Library, result: int, func: Any, arguments: tuple[Any, ...]) -> int:
    """A status int: OK passes, a known status becomes Refused, anything else is a fault."""
    if result == library.ok:
        return result
    name = library.status_names.get(result)
    if name is None:
        known = ", ".join(f"{name} {number}" for name, number in library.statuses.items())
        raise ImplementationFault(
            f"{func.__name__} returned status {result}, which is none of {known} (a status "
            "profile maps other numbers: docs/ctypes.md)"
        )
    raise Refused(name, func.__name__)


def check_pool(library: Library, result: int | None, func: Any, arguments: tuple[Any, ...]) -> int:
    """tl_kv_pool_create answers bad arguments with NULL, which the contract calls EINVAL."""
    if not result:
        raise Refused("EINVAL", func.__name__, "returned NULL")
    return result


class CFunction(NamedTuple):
    """One entry of the table: the symbol, its C signature, and the check of its result."""

    name: str
    argtypes: tuple[Any, ...]
    restype: Any
    errcheck: ErrCheck | None = None
    optional: bool = False  # a library may leave it out; the cases that need it are skipped


# Every function of abi/tl_kv.h, declared once (the pool pointer is opaque: c_void_p).
FUNCTIONS: tuple[CFunction, ...] = (
    CFunction("tl_kv_block_hash", (c_uint64, _U32P, c_uint32), c_uint64),
    CFunction("tl_kv_read_versions", (), c_uint32),
    CFunction("tl_kv_write_versions", (), c_uint32),
    CFunction("tl_kv_pool_create", (c_uint32,) * 5, c_void_p, check_pool),
    CFunction("tl_kv_pool_destroy", (c_void_p,), None),
    CFunction("tl_kv_pool_dtype", (c_void_p,), c_int),
    CFunction("tl_kv_pool_free_blocks", (c_void_p,), c_uint32),
    CFunction(
        "tl_kv_pool_write",
        (c_void_p, c_uint64, c_uint32, POINTER(c_float), _U32P),
        c_int,
        check_status,
    ),
    CFunction(
        "tl_kv_pool_read",
        (c_void_p, c_uint32, POINTER(c_uint64), _U32P, POINTER(c_float)),
        c_int,
        check_status,
    ),
    CFunction("tl_kv_pool_find", (c_void_p, c_uint64, _U32P), c_int, check_status),
    CFunction("tl_kv_pool_release", (c_void_p, c_uint32), c_int, check_status),
    CFunction("tl_kv_pool_retain", (c_void_p, c_uint32), c_int, check_status, optional=True),
    CFunction("tl_kv_export_bytes", (c_void_p, c_uint32, c_uint16), c_size_t),
    CFunction(
        "tl_kv_export",
        (c_void_p, _U32P, c_uint32, c_uint16, POINTER(c_uint8), c_size_t),
        c_int,
        check_status,
    ),
    CFunction(
        "tl_kv_import",
        (c_void_p, POINTER(c_uint8), c_size_t, _U32P, c_uint32, _U32P),
        c_int,
        check_status,
    ),
)
SYMBOLS = tuple(f.name for f in FUNCTIONS)


class Library:
    """A loaded library with every function of the table bound as an attribute."""

    def __init__(self, path: str, statuses: Mapping[str, int]) -> None:
        try:
            cdll = ctypes.CDLL(path)
        except OSError as exc:
            # dlerror's text already names the file; keep it to one line.
            raise SuiteUsageError(f"cannot load {path}: {' '.join(str(exc).split())}") from None
        missing = [f.name for f in FUNCTIONS if not f.optional and not hasattr(cdll, f.name)]
        if missing:
            raise SuiteUsageError(
                f"{path} does not export {', '.join(missing)} (the symbols of abi/tl_kv.h)"
            )
        self.statuses = dict(statuses)
        self.ok = statuses["OK"]
        self.status_names = {number: name for name, number in statuses.items() if name != "OK"}
        self.offered = frozenset(f.name for f in FUNCTIONS if hasattr(cdll, f.name))
        for entry in FUNCTIONS:
            if entry.name not in self.offered:
                continue
            func = getattr(cdll, entry.name)
            func.argtypes = entry.argtypes
            func.restype = entry.restype
            if entry.errcheck is not None:
                func.errcheck = functools.partial(entry.errcheck, self)
            setattr(self, entry.name, func)
        self._cdll = cdll  # keeps the library mapped as long as the functions are used


@dataclass
class _Pool:
    pointer: int
    n_elements: int  # floats in one block's values, L * 2 * Hkv * B * D


class LibrarySession:
    """The library and the pools created through it, each named by an integer id.

    Each method calls one C function, named in CALLS, so a crash inside a method is a crash
    inside that function. Buffers handed to the library have exactly the size the contract
    gives them: under AddressSanitizer, a read or write past them is reported.
    """

    # The adapter's operation -> the C function it calls (for messages naming the culprit).
    CALLS: Mapping[str, str] = {
        "load": "loading the library",
        "block_hash": "tl_kv_block_hash",
        "pool_create": "tl_kv_pool_create",
        "pool_destroy": "tl_kv_pool_destroy",
        "pool_dtype": "tl_kv_pool_dtype",
        "free_blocks": "tl_kv_pool_free_blocks",
        "write": "tl_kv_pool_write",
        "read": "tl_kv_pool_read",
        "read_digest": "tl_kv_pool_read",
        "find": "tl_kv_pool_find",
        "release": "tl_kv_pool_release",
        "retain": "tl_kv_pool_retain",
        "offers_retain": "loading the library",
        "export_bytes": "tl_kv_export_bytes",
        "export": "tl_kv_export",
        "import_envelope": "tl_kv_import",
    }

    def __init__(self, path: str, statuses: Mapping[str, int]) -> None:
        self.lib = Library(path, statuses)
        self.path = path
        self._pools: dict[int, _Pool] = {}
        self._next_id = 1

    def _pool(self, pool_id: int) -> _Pool:
        try:
            return self._pools[pool_id]
        except KeyError:
            raise RuntimeError(f"no pool {pool_id} in this session") from None

    def load(self) -> tuple[int, int, str]:
        """What loading reports: the read and write version bitmasks, and the file loaded."""
        return self.lib.tl_kv_read_versions(), self.lib.tl_kv_write_versions(), self.path

    def block_hash(self, parent: int, tokens: list[int]) -> int:
        toks = (c_uint32 * len(tokens))(*tokens)
        return self.lib.tl_kv_block_hash(parent, toks, len(tokens))

    def pool_create(self, geometry: tuple[int, int, int, int], capacity: int) -> int:
        pointer = self.lib.tl_kv_pool_create(*geometry, capacity)
        block_tokens, n_layers, n_kv_heads, head_dim = geometry
        pool_id = self._next_id
        self._next_id += 1
        self._pools[pool_id] = _Pool(pointer, n_layers * 2 * n_kv_heads * block_tokens * head_dim)
        return pool_id

    def pool_destroy(self, pool_id: int) -> None:
        self.lib.tl_kv_pool_destroy(self._pools.pop(pool_id).pointer)

    def pool_dtype(self, pool_id: int) -> str:
        code = self.lib.tl_kv_pool_dtype(self._pool(pool_id).pointer)
        if code not in DTYPES:
            raise ImplementationFault(
                f"tl_kv_pool_dtype returned {code}, expected TL_F16 (1) or TL_F32 (0)"
            )
        return DTYPES[code]

    def free_blocks(self, pool_id: int) -> int:
        return self.lib.tl_kv_pool_free_blocks(self._pool(pool_id).pointer)

    def write(self, pool_id: int, block_hash: int, n_tokens: int, kv: bytes) -> int:
        pool = self._pool(pool_id)
        if len(kv) != 4 * pool.n_elements:
            raise ValueError(f"values of {len(kv)} bytes for blocks of {pool.n_elements} floats")
        values = (c_float * pool.n_elements).from_buffer_copy(kv)
        block = c_uint32()
        self.lib.tl_kv_pool_write(pool.pointer, block_hash, n_tokens, values, byref(block))
        return block.value

    def read(self, pool_id: int, block: int) -> tuple[int, int, bytes]:
        pool = self._pool(pool_id)
        values = (c_float * pool.n_elements)()
        block_hash, n_tokens = c_uint64(), c_uint32()
        self.lib.tl_kv_pool_read(pool.pointer, block, byref(block_hash), byref(n_tokens), values)
        return block_hash.value, n_tokens.value, bytes(values)

    def read_digest(self, pool_id: int, block: int) -> tuple[int, int, int]:
        """A read that sends back only a CRC-32 of the values (their f32 little-endian
        bytes): enough to see that a block did not change, at a fraction of the traffic."""
        block_hash, n_tokens, values = self.read(pool_id, block)
        return block_hash, n_tokens, zlib.crc32(values)

    def find(self, pool_id: int, block_hash: int) -> int:
        block = c_uint32()
        self.lib.tl_kv_pool_find(self._pool(pool_id).pointer, block_hash, byref(block))
        return block.value

    def release(self, pool_id: int, block: int) -> None:
        self.lib.tl_kv_pool_release(self._pool(pool_id).pointer, block)

    def offers_retain(self) -> bool:
        return "tl_kv_pool_retain" in self.lib.offered

    def retain(self, pool_id: int, block: int) -> None:
        self.lib.tl_kv_pool_retain(self._pool(pool_id).pointer, block)

    def export_bytes(self, pool_id: int, n_blocks: int, version: int) -> int:
        return self.lib.tl_kv_export_bytes(self._pool(pool_id).pointer, n_blocks, version)

    def export(self, pool_id: int, blocks: list[int], version: int, size: int) -> bytes:
        ids = (c_uint32 * len(blocks))(*blocks)
        try:
            # One byte at least, so `out` is a real pointer when the size is 0 ("not written").
            out = (c_uint8 * max(size, 1))()
        except (MemoryError, OverflowError):
            raise ImplementationFault(
                f"tl_kv_export_bytes gave {size} bytes for {len(blocks)} blocks, more than can be "
                "allocated"
            ) from None
        self.lib.tl_kv_export(self._pool(pool_id).pointer, ids, len(blocks), version, out, size)
        return bytes(out)[:size]

    def import_envelope(self, pool_id: int, data: bytes, max_blocks: int) -> list[int]:
        env = (c_uint8 * len(data)).from_buffer_copy(data)
        room = max_blocks
        if room > _EXACT_BLOCKS_OUT:
            room = min(room, max(_EXACT_BLOCKS_OUT, (len(data) - 32) // 12))
        blocks_out = (c_uint32 * room)()
        n_out = c_uint32(_UNTOUCHED)
        try:
            pointer = self._pool(pool_id).pointer
            self.lib.tl_kv_import(pointer, env, len(data), blocks_out, max_blocks, byref(n_out))
        except Refused as refusal:
            if n_out.value != 0:
                raise ImplementationFault(
                    f"tl_kv_import refused with {refusal.code} but left *n_out = "
                    f"{n_out.value} (it must be 0 after any failure)"
                ) from None
            raise
        if n_out.value > max_blocks:
            raise ImplementationFault(
                f"tl_kv_import succeeded with *n_out = {n_out.value}, more than max_blocks "
                f"{max_blocks}"
            )
        return blocks_out[: n_out.value]
