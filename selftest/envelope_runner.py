"""The runner of envelopes.json that docs/vectors.md ("Writing a runner") walks through, against
a C library of the contract's ABI: standard library and ctypes only, no tlkv_conformance import,
every expectation from the JSON. It shares the C binding and the value comparison of
selftest/history_runner.py, the runner of histories.json. The self-test runs it against the
bundled C reference (every chosen vector holds) and against planted reader mistakes (the vectors
of the rule they break fail).
"""

from __future__ import annotations

import ctypes
import json
import struct
from pathlib import Path
from typing import Any

from selftest.history_runner import (
    DTYPE_NAMES,
    STATUS_NAMES,
    Library,
    Outcome,
    _Script,
    _u32,
    _u64,
    _versions,
)

HEADER, TRAILER, RECORD_PREFIX = 28, 4, 12
UNTOUCHED = 0xFFFFFFFF  # *n_out before the call, so that a refusal leaving it alone shows


class VectorFailed(Exception):
    """A vector's expectation did not hold."""


def chosen(vector: dict[str, Any], reads: set[int]) -> bool:
    """Whether a library reading `reads` runs the vector (docs/vectors.md, "Choosing vectors")."""
    wanted = set(vector["reader"]["read_versions"])
    if wanted == reads:
        return True
    return reads == {1} and wanted == {1, 2} and vector["same_for_v1_only_reader"]


def record_hashes(data: bytes) -> list[int]:
    """The non-zero hashes of the records the bytes hold whole, when the header is readable."""
    if len(data) < HEADER:
        return []
    version = struct.unpack_from("<H", data, 4)[0]
    b, layers, heads, dim = struct.unpack_from("<4I", data, 12)
    if version not in (1, 2) or 0 in (b, layers, heads, dim):
        return []
    elements = layers * 2 * heads * b * dim
    payload = 2 * elements if version == 1 else elements + 4 * layers * 2 * heads
    record = RECORD_PREFIX + payload
    count = max(0, (len(data) - HEADER - TRAILER) // record)
    hashes = [struct.unpack_from("<Q", data, HEADER + i * record)[0] for i in range(count)]
    return [h for h in hashes if h]


class _Pool:
    def __init__(self, library: Library, vector: dict[str, Any], nan: str) -> None:
        g = vector["reader"]["geometry"]
        self.lib = library
        self.handle = library.tl_kv_pool_create(
            g["block_tokens"], g["n_layers"], g["n_kv_heads"], g["head_dim"],
            vector["pool"]["capacity"],
        )  # fmt: skip
        if not self.handle:
            raise VectorFailed("tl_kv_pool_create returned NULL")
        # The history runner's value comparison, at this pool's precision.
        self.values = _Script(library, g, vector["pool"]["capacity"], nan)
        self.values.dtype = DTYPE_NAMES.get(library.tl_kv_pool_dtype(self.handle), "unknown")

    def write(self, block_hash: int, n_tokens: int) -> int:
        zeros = (ctypes.c_float * self.values.elements)()
        block = _u32()
        code = self.lib.tl_kv_pool_write(
            self.handle, block_hash, n_tokens, zeros, ctypes.byref(block)
        )
        if code != 0:
            raise VectorFailed(f"preloading refused with {STATUS_NAMES.get(code, code)}")
        return block.value

    def read(self, block: int) -> tuple[int, int, bytes]:
        block_hash, n_tokens = _u64(), _u32()
        values = (ctypes.c_float * self.values.elements)()
        code = self.lib.tl_kv_pool_read(
            self.handle, block, ctypes.byref(block_hash), ctypes.byref(n_tokens), values
        )
        if code != 0:
            raise VectorFailed(f"reading block {block}: {STATUS_NAMES.get(code, code)}")
        return block_hash.value, n_tokens.value, bytes(values)

    def find(self, block_hash: int) -> int | str:
        block = _u32()
        code = self.lib.tl_kv_pool_find(self.handle, block_hash, ctypes.byref(block))
        return block.value if code == 0 else STATUS_NAMES.get(code, str(code))

    def observe(self, blocks: list[int], hashes: list[int]) -> tuple[Any, ...]:
        """What a refused import must leave as it was: free count, blocks, find answers."""
        return (
            self.lib.tl_kv_pool_free_blocks(self.handle),
            [self.read(block) for block in blocks],
            [self.find(h) for h in hashes],
        )


def run_vector(library: Library, vector: dict[str, Any]) -> Outcome:
    source, level = vector["source"], vector["level"]
    if not chosen(vector, library.read_versions):
        return Outcome(source, level, "skipped", f"for a reader of {vector['reader']}")
    try:
        pool = _Pool(library, vector, vector.get("nan", "any"))
    except VectorFailed as failure:
        return Outcome(source, level, "failed", str(failure))
    try:
        _check(pool, vector)
    except VectorFailed as failure:
        return Outcome(source, level, "failed", str(failure))
    finally:
        library.tl_kv_pool_destroy(pool.handle)
    return Outcome(source, level, "passed")


def _check(pool: _Pool, vector: dict[str, Any]) -> None:
    preload = [pool.write(int(p["hash"], 16), p["n_tokens"]) for p in vector["pool"]["preload"]]
    data = bytes.fromhex(vector["envelope_hex"])
    watched = sorted({int(p["hash"], 16) for p in vector["pool"]["preload"]} - {0})
    watched = sorted(set(watched) | set(record_hashes(data)))
    before = pool.observe(preload, watched)
    capacity = vector["pool"]["capacity"]
    ids = (_u32 * max(capacity, 1))()
    n_out = _u32(UNTOUCHED)
    code = pool.lib.tl_kv_import(pool.handle, data, len(data), ids, capacity, ctypes.byref(n_out))
    status = STATUS_NAMES.get(code, str(code))
    if vector["result"] == "invalid":
        allowed = vector["c_codes"] + vector["also_allowed"]["c_codes"]
        if status not in allowed:
            raise VectorFailed(f"status {status}, expected any of {allowed}")
        if n_out.value != 0:
            raise VectorFailed(f"*n_out is {n_out.value} after a refusal, not 0")
        if pool.observe(preload, watched) != before:
            raise VectorFailed("the refused import changed the pool")
        return
    if status != "OK":
        raise VectorFailed(f"a valid envelope was refused with {status}")
    blocks = vector["blocks"]
    got = list(ids)[: n_out.value]
    if len(got) != len(blocks) or len(set(got)) != len(got) or set(got) & set(preload):
        raise VectorFailed(f"import returned ids {got} for {len(blocks)} blocks")
    free = pool.lib.tl_kv_pool_free_blocks(pool.handle)
    if free != before[0] - len(blocks):
        raise VectorFailed(f"{free} free blocks after importing {len(blocks)}, {before[0]} before")
    for index, (block, want) in enumerate(zip(got, blocks, strict=True)):
        block_hash, n_tokens, values = pool.read(block)
        if (f"{block_hash:016x}", n_tokens) != (want["hash"], want["n_tokens"]):
            raise VectorFailed(f"block {index}: hash, n_tokens {block_hash:016x}, {n_tokens}")
        expected = bytes.fromhex(want["values_f32le_hex"])
        for element, (w, h) in enumerate(struct.iter_unpack("<2I", _pairs(expected, values))):
            if not pool.values._same_value(w, h):
                raise VectorFailed(
                    f"block {index} value {element} is {h:#010x}, expected {w:#010x}"
                )
        if block_hash and not isinstance(found := pool.find(block_hash), int):
            raise VectorFailed(f"block {index}: find of its hash answered {found}")
        if block_hash and pool.read(found)[0] != block_hash:
            raise VectorFailed(f"block {index}: find of its hash named block {found} of another")


def _pairs(expected: bytes, actual: bytes) -> bytes:
    """Each expected u32 beside the actual one, for one unpacking pass."""
    return b"".join(expected[i : i + 4] + actual[i : i + 4] for i in range(0, len(expected), 4))


def run_file(library_path: Path, envelopes_json: Path) -> list[Outcome]:
    """Every vector of an envelopes.json against one library."""
    library = Library(library_path)
    library.read_versions = _versions(library.tl_kv_read_versions())
    document = json.loads(envelopes_json.read_text(encoding="ascii"))
    return [run_vector(library, vector) for vector in document["vectors"]]
