"""The C shared library way in (`ctypes:PATH.so[,status-profile=FILE]`): CONTRACT section 1.

The library runs in a worker process by default (tlkv_conformance.adapters._worker), so a crash or a
hang fails the case it happened in and the run goes on; `--isolation=inprocess` calls it in the
pytest process instead, for a debugger. docs/ctypes.md is the user's guide.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import re
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import SuiteUsageError
from ..yamlsource import YamlSourceError, load_yaml
from . import _ffi
from ._ffi import DEFAULT_STATUSES
from ._session import SessionAdapter, open_channel
from ._spec import ImplSpec

if TYPE_CHECKING:
    from . import AdapterSettings

STATUS_PROFILE_OPTION = "status-profile"


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


class CtypesAdapter(SessionAdapter):
    """A C library implementing abi/tl_kv.h, loaded with ctypes."""

    def __init__(self, spec: ImplSpec, settings: AdapterSettings) -> None:
        try:
            library, statuses, env = self._prepare(spec, settings)
            channel = open_channel(_ffi.LibrarySession, (str(library), statuses), settings, env)
        except SuiteUsageError as exc:
            raise SuiteUsageError(f"--impl {spec.label}: {exc}") from None
        super().__init__(spec, channel, spec.geometry)

    @staticmethod
    def _prepare(
        spec: ImplSpec, settings: AdapterSettings
    ) -> tuple[Path, dict[str, int], dict[str, str]]:
        library = Path(spec.target).expanduser()
        if not library.is_file():
            raise SuiteUsageError(f"no library at {str(library)!r}")
        library = library.resolve()
        statuses = load_status_profile(spec.options.get(STATUS_PROFILE_OPTION))
        runtimes = sanitizer_runtimes(library, settings.sanitizer_runtime)
        if settings.isolation == "inprocess":
            _check_loaded_here(library, runtimes)
        env = sanitizer_environment(runtimes, os.environ) if runtimes else {}
        return library, statuses, env
