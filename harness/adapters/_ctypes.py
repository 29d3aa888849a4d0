"""The C shared library way in (`ctypes:PATH.so[,status-profile=FILE]`): CONTRACT section 1.

The library runs in a worker process by default (harness/adapters/_worker.py), so a crash or a
hang fails the case it happened in and the run goes on; `--isolation=inprocess` calls it in the
pytest process instead, for a debugger. docs/ctypes.md is the user's guide.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import re
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ..errors import ImplementationFault, Refused, SuiteUsageError
from ..oracle import Geometry
from ..yamlsource import YamlSourceError, load_yaml
from ._base import Adapter, ImplInfo, PoolHandle, ReadBack
from ._ffi import DEFAULT_STATUSES, DTYPES, Session
from ._spec import ImplSpec
from ._worker import WorkerChannel

if TYPE_CHECKING:
    from . import AdapterSettings

STATUS_PROFILE_OPTION = "status-profile"
ISOLATIONS = ("worker", "inprocess")


class Channel(Protocol):
    """How the adapter reaches a `_ffi.Session`: in a worker process, or in this one."""

    generation: int  # bumped each time a worker (and every pool in it) is lost
    loss: str  # how the last one was lost

    def open(self) -> tuple[int, int]: ...

    def call(self, op: str, *args: Any) -> Any: ...

    def close(self) -> None: ...


class InProcessChannel:
    """Calls the library in the pytest process: no isolation, no timeout; for gdb."""

    generation = 0
    loss = ""

    def __init__(self, library: str, statuses: Mapping[str, int]) -> None:
        self._library = library
        self._statuses = dict(statuses)
        self._session: Session | None = None

    def open(self) -> tuple[int, int]:
        self._session = Session(self._library, self._statuses)
        return self._session.load()

    def call(self, op: str, *args: Any) -> Any:
        return getattr(self._session, op)(*args)

    def close(self) -> None:
        self._session = None  # ctypes never unloads a library; there is nothing more to do


# -- status profiles --------------------------------------------------------------------------


def load_status_profile(path_text: str | None) -> dict[str, int]:
    """The status numbers: the contract's, with those a YAML profile names replaced."""
    statuses = dict(DEFAULT_STATUSES)
    if not path_text:
        return statuses
    path = Path(path_text).expanduser()
    try:
        raw = load_yaml(path)
    except YamlSourceError as exc:
        raise SuiteUsageError(f"status profile {exc}") from None
    names = ", ".join(statuses)
    if not isinstance(raw, dict):
        raise SuiteUsageError(
            f"status profile {str(path)!r}: expected a mapping of status names ({names}) to "
            "numbers, e.g. {EFORMAT: -22}"
        )
    for key, value in raw.items():
        name = str(key).removeprefix("TL_")
        if name not in statuses:
            raise SuiteUsageError(
                f"status profile {str(path)!r}: unknown status {key!r} (known: {names})"
            )
        if isinstance(value, bool) or not isinstance(value, int) or not -(2**31) <= value < 2**31:
            raise SuiteUsageError(
                f"status profile {str(path)!r}: {key} is {value!r}, expected a C int"
            )
        statuses[name] = value
    by_number: dict[int, str] = {}
    for name, number in statuses.items():
        if number in by_number:
            raise SuiteUsageError(
                f"status profile {str(path)!r}: {by_number[number]} and {name} are both {number}"
            )
        by_number[number] = name
    return statuses


# -- sanitizer runtimes -----------------------------------------------------------------------

# Runtimes a library built with -fsanitize names in DT_NEEDED (gcc; clang with -shared-libsan).
_RUNTIME = re.compile(r"^lib(?:clang_rt\.)?(asan|hwasan|tsan|msan|ubsan|lsan)")
# These intercept malloc and must be the first library loaded: LD_PRELOAD, or nothing works.
_PRELOAD_FIRST = ("asan", "hwasan", "tsan", "msan")
_INSTRUMENTED = ("__asan_", "__hwasan_", "__tsan_", "__msan_", "__ubsan_")


def _elf_dynamic(path: Path) -> tuple[list[str], list[str]]:
    """The DT_NEEDED names and the undefined dynamic symbols of an ELF file; ([], []) for a
    file that is not ELF (loading it will then say what is wrong)."""
    try:
        with path.open("rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as m:
            return _parse_elf(m)
    except (OSError, ValueError, struct.error):
        return [], []


def _parse_elf(m: mmap.mmap) -> tuple[list[str], list[str]]:
    if m[:4] != b"\x7fELF":
        return [], []
    is64, order = m[4] == 2, "<" if m[5] == 1 else ">"
    shoff, shentsize, shnum = (
        struct.unpack_from(order + "Q10xHH", m, 0x28)
        if is64
        else struct.unpack_from(order + "I10xHH", m, 0x20)
    )
    section = struct.Struct(order + ("IIQQQQIIQQ" if is64 else "IIIIIIIIII"))
    sections = [section.unpack_from(m, shoff + i * shentsize) for i in range(shnum)]

    def string(table: int, offset: int) -> str:
        start = sections[table][4] + offset
        return m[start : m.find(b"\0", start)].decode("utf-8", "replace")

    needed, undefined = [], []
    for _name, kind, _flags, _addr, offset, size, link, _info, _align, _entsize in sections:
        if kind == 6:  # SHT_DYNAMIC: (d_tag, d_val) pairs; DT_NEEDED is 1
            entry = struct.Struct(order + ("qQ" if is64 else "iI"))
            for i in range(size // entry.size):
                tag, value = entry.unpack_from(m, offset + i * entry.size)
                if tag == 1:
                    needed.append(string(link, value))
        elif kind == 11:  # SHT_DYNSYM: name offset, and section index 0 for undefined
            symbol = struct.Struct(order + ("I2xH16x" if is64 else "I10xH"))
            for i in range(size // symbol.size):
                name, shndx = symbol.unpack_from(m, offset + i * symbol.size)
                if name and shndx == 0:
                    undefined.append(string(link, name))
    return needed, undefined


def sanitizer_runtimes(library: Path, setting: str = "auto") -> list[str]:
    """The sanitizer runtimes to preload into the worker: per `setting`, none, the given
    paths (os.pathsep-separated), or (auto) those the library names in DT_NEEDED."""
    if setting == "none":
        return []
    if setting != "auto":
        return [p for p in setting.split(os.pathsep) if p]
    needed, undefined = _elf_dynamic(library)
    runtimes = [n for n in needed if _RUNTIME.match(n)]
    if not runtimes and any(s.startswith(_INSTRUMENTED) for s in undefined):
        raise SuiteUsageError(
            f"{str(library)!r} is built with a sanitizer but names no runtime (clang links none "
            "into a shared library): give it with --sanitizer-runtime=PATH, e.g. "
            "$(clang -print-file-name=libclang_rt.asan-x86_64.so)"
        )
    # The malloc-intercepting runtime first, as the loader demands.
    return sorted(runtimes, key=lambda name: _runtime_kind(name) not in _PRELOAD_FIRST)


def _runtime_kind(path: str) -> str | None:
    match = _RUNTIME.match(Path(path).name)
    return match.group(1) if match else None


def _options(defaults: str, user: str | None, forced: str) -> str:
    # Sanitizers read options left to right, a later one winning: the user's override our
    # defaults, and ours that the adapter relies on (an error aborts, the report goes to the
    # worker's stderr where the adapter reads it) override the user's.
    return ":".join(part for part in (defaults, user or "", forced) if part)


def sanitizer_environment(runtimes: list[str], environ: Mapping[str, str]) -> dict[str, str]:
    """What the worker of an instrumented library needs in its environment."""
    preload = [*runtimes, *environ.get("LD_PRELOAD", "").replace(":", " ").split()]
    return {
        "LD_PRELOAD": ":".join(preload),
        "ASAN_OPTIONS": _options(
            "detect_leaks=0:allocator_may_return_null=1",
            environ.get("ASAN_OPTIONS"),
            "abort_on_error=1:halt_on_error=1:log_path=stderr",
        ),
        "UBSAN_OPTIONS": _options(
            "print_stacktrace=1",
            environ.get("UBSAN_OPTIONS"),
            "abort_on_error=1:halt_on_error=1:log_path=stderr",
        ),
        # Python's own allocator would hide the buffers passed to the library (the envelope,
        # the values) inside its arenas; through malloc, a read past them is reported.
        "PYTHONMALLOC": "malloc",
    }


def _check_loaded_here(library: Path, runtimes: list[str]) -> None:
    """In-process, a runtime that must come first has to be in this process already."""
    here = ctypes.CDLL(None)
    for runtime in runtimes:
        kind = _runtime_kind(runtime)
        if kind in _PRELOAD_FIRST and not hasattr(here, f"__{kind}_init"):
            raise SuiteUsageError(
                f"{str(library)!r} needs the sanitizer runtime {runtime} loaded first: use "
                f"--isolation=worker, or run LD_PRELOAD={runtime} "
                "ASAN_OPTIONS=detect_leaks=0 pytest ..."
            )


# -- the adapter ------------------------------------------------------------------------------


class CtypesPool(PoolHandle):
    """A pool living wherever the channel's Session does, named by its integer id there."""

    def __init__(self, channel: Channel, geometry: Geometry, capacity: int) -> None:
        super().__init__(geometry, capacity)
        self._channel = channel
        self._id: int = channel.call(
            "tl_kv_pool_create",
            (geometry.block_tokens, geometry.n_layers, geometry.n_kv_heads, geometry.head_dim),
            capacity,
        )
        self._generation = channel.generation
        self._dtype: str | None = None
        self._closed = False

    def _call(self, op: str, *args: Any) -> Any:
        if self._channel.generation != self._generation:
            raise ImplementationFault(f"pool lost when the worker {self._channel.loss}")
        return self._channel.call(op, self._id, *args)

    @property
    def dtype(self) -> str:
        if self._dtype is None:
            code = self._call("tl_kv_pool_dtype")
            if code not in DTYPES:
                raise ImplementationFault(
                    f"tl_kv_pool_dtype returned {code}, expected TL_F16 (1) or TL_F32 (0)"
                )
            self._dtype = DTYPES[code]
        return self._dtype

    def free_blocks(self) -> int:
        return self._call("tl_kv_pool_free_blocks")

    def write(self, block_hash: int, n_tokens: int, values: np.ndarray) -> int:
        kv = np.ascontiguousarray(values, dtype=np.float32)
        if kv.size != self.geometry.n_elements:  # the library reads exactly this many floats
            raise ValueError(f"values of shape {kv.shape}, expected {self.geometry.values_shape}")
        return self._call("tl_kv_pool_write", block_hash, n_tokens, kv.tobytes())

    def read(self, block: int) -> ReadBack:
        block_hash, n_tokens, raw = self._call("tl_kv_pool_read", block)
        values = np.frombuffer(raw, dtype=np.float32).reshape(self.geometry.values_shape)
        return ReadBack(block_hash, n_tokens, values.copy())

    def find(self, block_hash: int) -> int:
        return self._call("tl_kv_pool_find", block_hash)

    def release(self, block: int) -> None:
        self._call("tl_kv_pool_release", block)

    def export_bytes(self, n_blocks: int, version: int) -> int:
        return self._call("tl_kv_export_bytes", n_blocks, version)

    def export(self, blocks: list[int], version: int) -> bytes:
        # Two calls, so a crash is attributed to the right function; `out` gets exactly the
        # size the library asked for.
        size = self.export_bytes(len(blocks), version)
        return self._call("tl_kv_export", list(blocks), version, size)

    def import_envelope(self, data: bytes, max_blocks: int) -> list[int]:
        return self._call("tl_kv_import", bytes(data), max_blocks)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        # A pool lost with its worker has nothing left to destroy, and saying so again here
        # would hide the crash that lost it.
        if self._channel.generation == self._generation:
            self._channel.call("tl_kv_pool_destroy", self._id)

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc is None:
            self.close()
            return
        with contextlib.suppress(ImplementationFault, Refused):  # the error on its way out
            self.close()  # says more than one in cleaning up after it


class CtypesAdapter(Adapter):
    """A C library implementing abi/tl_kv.h, loaded with ctypes."""

    def __init__(self, spec: ImplSpec, settings: AdapterSettings) -> None:
        super().__init__(spec.label)
        self._channel: Channel | None = None
        try:
            self._channel, masks = self._connect(spec, settings)
        except SuiteUsageError as exc:
            raise SuiteUsageError(f"--impl {spec.label}: {exc}") from None
        self._reads, self._writes = (
            frozenset(v for v in range(32) if mask >> v & 1) for mask in masks
        )

    @staticmethod
    def _connect(spec: ImplSpec, settings: AdapterSettings) -> tuple[Channel, tuple[int, int]]:
        library = Path(spec.target).expanduser()
        if not library.is_file():
            raise SuiteUsageError(f"no library at {str(library)!r}")
        library = library.resolve()
        statuses = load_status_profile(spec.options.get(STATUS_PROFILE_OPTION))
        if settings.isolation not in ISOLATIONS:
            raise SuiteUsageError(
                f"isolation {settings.isolation!r}: expected {' or '.join(ISOLATIONS)}"
            )
        runtimes = sanitizer_runtimes(library, settings.sanitizer_runtime)
        channel: Channel
        if settings.isolation == "inprocess":
            _check_loaded_here(library, runtimes)
            channel = InProcessChannel(str(library), statuses)
        else:
            env = sanitizer_environment(runtimes, os.environ) if runtimes else {}
            channel = WorkerChannel(str(library), statuses, settings.call_timeout, env)
        try:
            return channel, channel.open()
        except ImplementationFault as exc:
            channel.close()
            raise SuiteUsageError(f"loading {str(library)!r}: {exc}") from None
        except BaseException:
            channel.close()
            raise

    def info(self) -> ImplInfo:
        with self.open_pool(Geometry(1, 1, 1, 1), 1) as probe:
            dtype = probe.dtype
        return ImplInfo(read_versions=self._reads, write_versions=self._writes, pool_dtype=dtype)

    def block_hash(self, parent: int, tokens: list[int]) -> int:
        assert self._channel is not None
        return self._channel.call("tl_kv_block_hash", parent, list(tokens))

    def open_pool(self, geometry: Geometry, capacity: int) -> CtypesPool:
        assert self._channel is not None
        return CtypesPool(self._channel, geometry, capacity)

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None
