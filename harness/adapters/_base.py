"""What every adapter offers the suite: one observable behaviour, whatever the way in."""

from __future__ import annotations

import abc
import contextlib
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ImplementationFault, NotObservable, Refused
from ..oracle import Geometry
from ._transfer import PrefillClient, Transfer

STATUS_CODES = ("EINVAL", "ENOMEM", "EFORMAT", "ESHAPE", "ENOTFOUND")
# How a gRPC server reports what a C library reports with each status (docs/grpc.md); the
# reader rules carry their own statuses (tlkv_conformance.oracle.READER_RULES).
GRPC_STATUS_OF = {
    "EINVAL": "INVALID_ARGUMENT",
    "ENOMEM": "RESOURCE_EXHAUSTED",
    "EFORMAT": "DATA_LOSS",
    "ESHAPE": "DATA_LOSS",
    "ENOTFOUND": "NOT_FOUND",
}
POOL_DTYPES = ("f16", "f32")
# The pool operations that only look (PoolHandle.query): none changes the pool.
QUERIES = ("free_blocks", "find", "read", "read_digest")


@dataclass(frozen=True)
class ImplInfo:
    """What an implementation says about itself."""

    read_versions: frozenset[int]
    write_versions: frozenset[int]
    pool_dtype: str
    # What this way in can observe; a case needing more is skipped. See Capability.
    capabilities: frozenset[str] = field(default_factory=lambda: frozenset(Capability.ALL))

    def describe(self) -> str:
        def versions(vs: frozenset[int]) -> str:
            return ",".join(f"v{v}" for v in sorted(vs)) or "none"

        return (
            f"reads {versions(self.read_versions)}, writes {versions(self.write_versions)}, "
            f"pool {self.pool_dtype}"
        )


class Capability:
    """Names of the observations an adapter may or may not offer."""

    HASH = "hash"  # block_hash(parent, tokens)
    POOL = "pool"  # pools of any geometry and capacity, with write/read/find/release/free count
    EXPORT = "export"
    IMPORT = "import"
    # Pools alive at once, each with its own blocks and registry (a server has one pool).
    SEVERAL_POOLS = "several pools at once"
    ALL = (HASH, POOL, EXPORT, IMPORT, SEVERAL_POOLS)
    # Optional, so not in ALL: a second reference to a block (tl_kv_pool_retain, Pool.retain).
    RETAIN = "a second reference to a block (retain)"
    # Not in ALL either: pushing a prompt as the prefill side (a prefill client, alone).
    PREFILL = "the prefill side of tl.kv.v1 (pushing to a decode server)"
    # With PREFILL: it pushes the KV the suite gives it (a job's kv_path), checked byte for byte.
    SUITE_KV = "pushing the KV the suite gives it"


@dataclass(frozen=True, eq=False)
class ReadBack:
    """A block as read back from a pool; values f32 [L][2][Hkv][B][D]."""

    block_hash: int
    n_tokens: int
    values: np.ndarray


def values_digest(values: np.ndarray) -> int:
    """The CRC-32 of values as f32 little-endian bytes (PoolHandle.read_digest)."""
    return zlib.crc32(np.ascontiguousarray(values, dtype="<f4").tobytes())


class PoolHandle(abc.ABC):
    """One pool of the implementation under test. Refusals raise `Refused`."""

    def __init__(self, geometry: Geometry, capacity: int) -> None:
        self.geometry = geometry
        self.capacity = capacity

    @property
    @abc.abstractmethod
    def dtype(self) -> str: ...

    @abc.abstractmethod
    def free_blocks(self) -> int: ...

    @abc.abstractmethod
    def write(self, block_hash: int, n_tokens: int, values: np.ndarray) -> int: ...

    @abc.abstractmethod
    def read(self, block: int) -> ReadBack: ...

    @abc.abstractmethod
    def find(self, block_hash: int) -> int: ...

    @abc.abstractmethod
    def release(self, block: int) -> None: ...

    def retain(self, block: int) -> None:
        """One more reference to the block (optional: offered with Capability.RETAIN)."""
        raise NotObservable("this way in cannot take a second reference to a block")

    @abc.abstractmethod
    def export_bytes(self, n_blocks: int, version: int) -> int: ...

    @abc.abstractmethod
    def export(self, blocks: list[int], version: int) -> bytes: ...

    @abc.abstractmethod
    def import_envelope(self, data: bytes, max_blocks: int) -> list[int]: ...

    def query(self, calls: Sequence[tuple[str, tuple[Any, ...]]]) -> list[Any]:
        """Queries (QUERIES: operations that only look) made in order, as one request where
        the way in allows (one round trip to a worker): for each, what it answered, or the
        Refused or NotObservable it raised. The list ends at the first other exception (a
        fault), which is its last item: the queries after it are not made. A way in making
        them as one request makes those after a refusal too, so a caller stopping at a
        refusal leaves their answers unread."""
        answers: list[Any] = []
        for op, args in calls:
            if op not in QUERIES:
                raise ValueError(f"{op} is not a query: {', '.join(QUERIES)}")
            try:
                answers.append(getattr(self, op)(*args))
            except (Refused, NotObservable) as answer:
                answers.append(answer)
            except ImplementationFault as fault:
                answers.append(fault)
                break
        return answers

    def read_digest(self, block: int) -> tuple[int, int, int]:
        """hash, n_tokens and a CRC-32 of the values' f32 little-endian bytes: what shows that
        a block did not change (a way in may compute it where the block lives)."""
        read = self.read(block)
        return read.block_hash, read.n_tokens, values_digest(read.values)

    def write_preload(self, block_hash: int, n_tokens: int, values: np.ndarray) -> int:
        """A block a case starts from (a rejection's pool): written like any other, except
        where the way in keeps blocks across cases (a server: see GrpcPool)."""
        return self.write(block_hash, n_tokens, values)

    def close(self) -> None:  # noqa: B027 - most pools need nothing
        """Give the pool back; the default does nothing."""

    def __enter__(self) -> PoolHandle:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class Adapter(abc.ABC):
    """One implementation reached one way. Created once per run; `close` ends it."""

    # Which vocabulary `Refused.code` uses: the C status names, or gRPC status names.
    status_domain = "c"
    # Whether blocks outlive a pool (a server's one pool outlives every case and run).
    keeps_blocks = False
    # The tl.kv.v1 decode server this way in reaches as its prefill side, which the transfer
    # cases use; None for a way in without one (they are skipped).
    transfer: Transfer | None = None
    # A prefill client under test (the other side of tl.kv.v1), which the prefill cases hand
    # jobs; None for every other way in (they are skipped).
    prefill: PrefillClient | None = None

    def __init__(self, label: str) -> None:
        self.label = label
        # The one pool geometry the implementation serves, or None when it serves any.
        self.geometry: Geometry | None = None

    def other_geometry(self, wanted: Geometry) -> str:
        """Why a pool of `wanted` cannot be opened on an implementation of one geometry."""
        return f"{self.label} serves pools of {self.geometry} only; this needs {wanted}"

    @abc.abstractmethod
    def info(self) -> ImplInfo: ...

    @abc.abstractmethod
    def block_hash(self, parent: int, tokens: list[int]) -> int: ...

    @abc.abstractmethod
    def open_pool(self, geometry: Geometry, capacity: int) -> PoolHandle: ...

    def probe_import(
        self, geometry: Geometry, capacity: int, data: bytes, max_blocks: int
    ) -> str | None:
        """The diagnosis' one call into the implementation, made after a test has failed
        (docs/diagnosis.md, "How a reader's mistake is found"): how a new pool of `geometry`
        and `capacity` answers an import of `data` with `max_blocks`. None when it accepts it,
        else the refusal's status; the blocks it imports are released and the pool closed
        again. Raises ImplementationFault, NotObservable and Refused (a pool refused) as any
        call does."""
        with self.open_pool(geometry, capacity) as pool:
            try:
                blocks = pool.import_envelope(data, max_blocks)
            except Refused as refusal:
                return refusal.code
            for block in blocks:
                with contextlib.suppress(Refused, ImplementationFault, NotObservable):
                    pool.release(block)
        return None

    def probe_find_after(
        self,
        geometry: Geometry,
        written: Sequence[tuple[int, int, np.ndarray]],
        data: bytes,
        hashes: Sequence[int],
    ) -> list[bool]:
        """The diagnosis' registry probe, made after a test has failed like `probe_import`
        (docs/diagnosis.md, "An imported hash that find refuses"): a new pool of `geometry`,
        with room for `written` and `data`'s blocks, has each of `written` (hash, n_tokens,
        values) written in turn, then `data` imported (the blocks of `hashes`); for each block
        written, then each imported, whether find of its hash answers that block. The blocks
        are released and the pool closed again. Raises ImplementationFault, NotObservable and
        Refused as any call does."""
        room = len(written) + len(hashes)
        with self.open_pool(geometry, room) as pool:
            blocks = [pool.write(*block) for block in written]
            blocks += pool.import_envelope(data, room)
            found = []
            all_hashes = [block_hash for block_hash, _, _ in written] + list(hashes)
            for block_hash, block in zip(all_hashes, blocks, strict=False):
                try:
                    found.append(pool.find(block_hash) == block)
                except Refused:
                    found.append(False)
            for block in blocks:
                with contextlib.suppress(Refused, ImplementationFault, NotObservable):
                    pool.release(block)
        return found

    def probe_write_read(
        self, geometry: Geometry, block_hash: int, n_tokens: int, values: np.ndarray
    ) -> np.ndarray:
        """The diagnosis' store probe, made after a test has failed like `probe_import`
        (docs/diagnosis.md, "A v2 decode seen through an f16 pool"): a new pool of `geometry`
        with one block has (`block_hash`, `n_tokens`, `values`) written, and the values it
        reads back (f32) are returned. The block is released and the pool closed again.
        Raises ImplementationFault, NotObservable and Refused as any call does."""
        with self.open_pool(geometry, 1) as pool:
            block = pool.write(block_hash, n_tokens, values)
            try:
                return np.asarray(pool.read(block).values, dtype=np.float32)
            finally:
                with contextlib.suppress(Refused, ImplementationFault, NotObservable):
                    pool.release(block)

    def close(self) -> None:  # noqa: B027 - most adapters hold nothing
        """Release whatever the adapter holds (a worker, a channel)."""
