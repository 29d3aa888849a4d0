"""A minimal runner of histories.json (docs/vectors.md) against a C library of the contract's
ABI, written from the doc alone: standard library and ctypes only, no tlkv_conformance import.
Every expectation comes from the JSON; this module only calls the library and compares, the way
an engine team's own harness in another language would. The self-test runs it against the
bundled C reference (all must hold) and against planted pool mistakes (some must fail).
"""

from __future__ import annotations

import ctypes
import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from selftest import vector_reader as vr

# The contract's status numbers (CONTRACT.md, abi/tl_kv.h).
STATUS_NAMES = {0: "OK", -1: "EINVAL", -2: "ENOMEM", -3: "EFORMAT", -4: "ESHAPE", -5: "ENOTFOUND"}
DTYPE_NAMES = {0: "f32", 1: "f16"}
QUIET_BIT = 0x00400000

_u32, _u64, _size = ctypes.c_uint32, ctypes.c_uint64, ctypes.c_size_t
_pool = ctypes.c_void_p
_SIGNATURES: dict[str, tuple[Any, list[Any]]] = {
    "tl_kv_read_versions": (_u32, []),
    "tl_kv_write_versions": (_u32, []),
    "tl_kv_pool_create": (_pool, [_u32, _u32, _u32, _u32, _u32]),
    "tl_kv_pool_destroy": (None, [_pool]),
    "tl_kv_pool_dtype": (ctypes.c_int, [_pool]),
    "tl_kv_pool_free_blocks": (_u32, [_pool]),
    "tl_kv_pool_write": (
        ctypes.c_int,
        [_pool, _u64, _u32, ctypes.POINTER(ctypes.c_float), ctypes.POINTER(_u32)],
    ),
    "tl_kv_pool_read": (
        ctypes.c_int,
        [_pool, _u32, ctypes.POINTER(_u64), ctypes.POINTER(_u32), ctypes.POINTER(ctypes.c_float)],
    ),
    "tl_kv_pool_find": (ctypes.c_int, [_pool, _u64, ctypes.POINTER(_u32)]),
    "tl_kv_pool_release": (ctypes.c_int, [_pool, _u32]),
    "tl_kv_pool_retain": (ctypes.c_int, [_pool, _u32]),  # optional
    "tl_kv_export_bytes": (_size, [_pool, _u32, ctypes.c_uint16]),
    "tl_kv_export": (
        ctypes.c_int,
        [_pool, ctypes.POINTER(_u32), _u32, ctypes.c_uint16, ctypes.c_char_p, _size],
    ),
    "tl_kv_import": (
        ctypes.c_int,
        [_pool, ctypes.c_char_p, _size, ctypes.POINTER(_u32), _u32, ctypes.POINTER(_u32)],
    ),
}


class Library:
    """The C ABI of one shared library."""

    def __init__(self, path: Path) -> None:
        self.dll = ctypes.CDLL(str(path))
        self.offers_retain = hasattr(self.dll, "tl_kv_pool_retain")
        for name, (restype, argtypes) in _SIGNATURES.items():
            if name == "tl_kv_pool_retain" and not self.offers_retain:
                continue
            function = getattr(self.dll, name)
            function.restype, function.argtypes = restype, argtypes
        self.write_versions = _versions(self.dll.tl_kv_write_versions())

    def __getattr__(self, name: str) -> Any:
        return getattr(self.dll, name)


def _versions(mask: int) -> set[int]:
    return {v for v in range(1, 16) if mask & (1 << v)}


@dataclass(frozen=True)
class Outcome:
    source: str
    level: str
    verdict: str  # passed | failed | skipped
    reason: str = ""


class StepFailed(Exception):
    pass


def run_history(library: Library, history: dict[str, Any]) -> Outcome:
    """One history on a fresh pool: passed, failed (with the step and what differed) or
    skipped (the history does not apply to this library's writer)."""
    source, level = history["source"], history["level"]
    only = history["only_for_write_versions"]
    if only is not None and set(only) != library.write_versions:
        return Outcome(source, level, "skipped", f"for a writer of {only} only")
    for step in history["steps"]:
        if step["op"] == "retain" and not library.offers_retain:
            return Outcome(source, level, "skipped", "takes a second reference (retain)")
        wanted = step["op"] == "export" and step["expect"]["status"] == ["OK"]
        if wanted and step["version"] not in library.write_versions:
            return Outcome(source, level, "skipped", f"exports v{step['version']}")
    script = _Script(library, history["geometry"], history["capacity"], history["nan"])
    try:
        script.use({"pool": FIRST_POOL})
        for number, step in enumerate(history["steps"], 1):
            try:
                handler = getattr(script, "import_" if step["op"] == "import" else step["op"])
                handler(step)
            except StepFailed as failure:
                return Outcome(source, level, "failed", f"step {number} ({step['op']}): {failure}")
    except StepFailed as failure:
        return Outcome(source, level, "failed", f"opening the first pool: {failure}")
    finally:
        script.close()
    return Outcome(source, level, "passed")


# The pool a history's steps act on until a `use` step names another (docs/vectors.md).
FIRST_POOL = "first"


class _Script:
    def __init__(self, library: Library, geometry: dict[str, int], capacity: int, nan: str) -> None:
        self.lib = library
        self.geometry = geometry
        self.capacity = capacity
        self.pools: dict[str, int] = {}  # the open pools by name
        self.pool = 0  # the one in use
        self.nan = nan
        self.elements = (
            geometry["n_layers"]
            * 2
            * geometry["n_kv_heads"]
            * geometry["block_tokens"]
            * geometry["head_dim"]
        )
        self.dtype = "unknown"  # the pool's precision, known once one is open
        self.ids: dict[str, int] = {}

    def use(self, step: dict[str, Any]) -> None:
        name = step["pool"]
        if name not in self.pools:
            g = self.geometry
            pool = self.lib.tl_kv_pool_create(
                g["block_tokens"], g["n_layers"], g["n_kv_heads"], g["head_dim"], self.capacity
            )
            if not pool:
                raise StepFailed(f"tl_kv_pool_create returned NULL for pool {name!r}")
            self.pools[name] = pool
            self.dtype = DTYPE_NAMES.get(self.lib.tl_kv_pool_dtype(pool), "unknown")
        self.pool = self.pools[name]

    def destroy(self, step: dict[str, Any]) -> None:
        self.lib.tl_kv_pool_destroy(self.pools.pop(step["pool"]))

    def close(self) -> None:
        for pool in self.pools.values():
            self.lib.tl_kv_pool_destroy(pool)
        self.pools.clear()

    def _status(self, step: dict[str, Any], code: int) -> bool:
        """Whether the call succeeded; a status the step does not allow fails it."""
        got = STATUS_NAMES.get(code, str(code))
        allowed = step["expect"]["status"]
        if got not in allowed:
            raise StepFailed(f"status {got}, expected any of {allowed}")
        return got == "OK"

    def write(self, step: dict[str, Any]) -> None:
        values = (ctypes.c_float * self.elements).from_buffer_copy(
            bytes.fromhex(step["values_f32le_hex"])
        )
        block = _u32()
        code = self.lib.tl_kv_pool_write(
            self.pool, int(step["hash"], 16), step["n_tokens"], values, ctypes.byref(block)
        )
        if self._status(step, code) and "as" in step:
            self.ids[step["as"]] = block.value

    def read(self, step: dict[str, Any]) -> None:
        block_hash, n_tokens = _u64(), _u32()
        values = (ctypes.c_float * self.elements)()
        code = self.lib.tl_kv_pool_read(
            self.pool, self.ids[step["block"]], ctypes.byref(block_hash), ctypes.byref(n_tokens),
            values,
        )  # fmt: skip
        if not self._status(step, code):
            return
        expect = step["expect"]
        got = (f"{block_hash.value:016x}", n_tokens.value)
        if got != (expect["hash"], expect["n_tokens"]):
            raise StepFailed(
                f"hash, n_tokens {got}, expected {expect['hash']}, {expect['n_tokens']}"
            )
        want = struct.unpack(f"<{self.elements}I", bytes.fromhex(expect["values_f32le_hex"]))
        have = struct.unpack(f"<{self.elements}I", bytes(values))
        for index, (w, h) in enumerate(zip(want, have, strict=True)):
            if not self._same_value(w, h):
                raise StepFailed(f"value {index} is {h:#010x}, expected {w:#010x} ({self.dtype})")

    def _same_value(self, want: int, got: int) -> bool:
        if _is_nan(want):
            return _is_nan(got) and _nan_matches(self.nan, want, got)
        if self.dtype == "f16":  # the pool holds f16: compare the value rounded to it
            rounded = vr.f16_round(struct.unpack("<f", struct.pack("<I", want))[0])
            want = vr.f32_bits(rounded)
        return want == got

    def find(self, step: dict[str, Any]) -> None:
        block = _u32()
        code = self.lib.tl_kv_pool_find(self.pool, int(step["hash"], 16), ctypes.byref(block))
        if self._status(step, code) and block.value != self.ids[step["expect"]["block"]]:
            label = step["expect"]["block"]
            raise StepFailed(f"found block id {block.value}, expected {label}'s")

    def release(self, step: dict[str, Any]) -> None:
        self._status(step, self.lib.tl_kv_pool_release(self.pool, self.ids[step["block"]]))

    def retain(self, step: dict[str, Any]) -> None:
        self._status(step, self.lib.tl_kv_pool_retain(self.pool, self.ids[step["block"]]))

    def free_blocks(self, step: dict[str, Any]) -> None:
        got = self.lib.tl_kv_pool_free_blocks(self.pool)
        if got != step["expect"]["count"]:
            raise StepFailed(f"{got} free blocks, expected {step['expect']['count']}")

    def export_bytes(self, step: dict[str, Any]) -> None:
        got = self.lib.tl_kv_export_bytes(self.pool, step["n_blocks"], step["version"])
        if got != step["expect"]["bytes"]:
            raise StepFailed(f"{got} bytes, expected {step['expect']['bytes']}")

    def export(self, step: dict[str, Any]) -> None:
        # Byte for byte (the strict v2 level, NaNs exact): the bundled reference writes so. A
        # harness for an engine with other NaN bits or a tolerant v2 writer compares as
        # docs/vectors.md says for exports.json.
        labels = step["blocks"]
        ids = (_u32 * len(labels))(*(self.ids[label] for label in labels))
        expected = step["expect"].get("envelope_hex", {}).get(self.dtype, "")
        # Room for the expected envelope even where export_bytes is 0 (a refused version).
        size = max(len(expected) // 2, self.lib.tl_kv_export_bytes(self.pool, len(labels), 1))
        out = ctypes.create_string_buffer(size)
        code = self.lib.tl_kv_export(self.pool, ids, len(labels), step["version"], out, size)
        if not self._status(step, code):
            return
        got = out.raw[: self.lib.tl_kv_export_bytes(self.pool, len(labels), step["version"])]
        if got.hex() != expected:
            offset = next(
                (i for i, (a, b) in enumerate(zip(got.hex(), expected, strict=False)) if a != b),
                min(len(got.hex()), len(expected)),
            )
            raise StepFailed(f"envelope differs from byte {offset // 2} on ({len(got)} bytes)")

    def import_(self, step: dict[str, Any]) -> None:
        data = bytes.fromhex(step["envelope_hex"])
        ids = (_u32 * max(step["max_blocks"], 1))()
        n_out = _u32()
        code = self.lib.tl_kv_import(
            self.pool, data, len(data), ids, step["max_blocks"], ctypes.byref(n_out)
        )
        if not self._status(step, code):
            return
        if n_out.value != step["expect"]["n_blocks"]:
            raise StepFailed(
                f"{n_out.value} blocks imported, expected {step['expect']['n_blocks']}"
            )
        for label, block in zip(step["as"], ids, strict=False):
            self.ids[label] = block


def _is_nan(bits: int) -> bool:
    return (bits & 0x7F800000) == 0x7F800000 and bool(bits & 0x007FFFFF)


def _nan_matches(policy: str, want: int, got: int) -> bool:
    """How two NaNs compare (docs/vectors.md): any, sign, quieted, exact."""
    if policy == "any":
        return True
    if policy == "sign":
        return want >> 31 == got >> 31
    if policy == "quieted":
        return got in (want, want | QUIET_BIT)
    return want == got


def run_file(library_path: Path, histories_json: Path) -> list[Outcome]:
    """Every pool history of a histories.json against one library."""
    library = Library(library_path)
    document = json.loads(histories_json.read_text(encoding="ascii"))
    return [run_history(library, h) for h in document["vectors"] if h["kind"] == "pool"]
