"""Pools and adapters over a session (`_ffi.LibrarySession` for a C library,
`_pysession.ModuleSession` for a Python module), reached through a channel: a worker process
(the default) or this process.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ..errors import ImplementationFault, NotObservable, Refused, SuiteUsageError
from ..oracle import Geometry
from ._base import QUERIES, Adapter, Capability, ImplInfo, PoolHandle, ReadBack
from ._spec import ImplSpec
from ._worker_channel import WorkerChannel

ISOLATIONS = ("worker", "inprocess")
# The probe pool an unrestricted implementation describes itself with.
PROBE_GEOMETRY = Geometry(1, 1, 1, 1)
# What a description says of the pool precision when the probe pool faulted.
UNKNOWN_DTYPE = "unknown"


class Channel(Protocol):
    """How the adapter reaches a session: in a worker process, or in this one."""

    generation: int  # bumped each time a worker (and every pool in it) is lost
    loss: str  # how the last one was lost

    def open(self) -> tuple[int, int, str]: ...

    def call(self, op: str, *args: Any) -> Any: ...

    def batch(self, calls: Sequence[tuple[str, Sequence[Any]]]) -> list[Any]: ...

    def close(self) -> None: ...


class InProcessChannel:
    """Calls the session in the pytest process: no isolation, no timeout; for debuggers. Not a
    gate: an implementation that exits the process ends the run (docs/report.md)."""

    generation = 0
    loss = ""

    def __init__(self, session_class: Any, load_args: tuple[Any, ...]) -> None:
        self._session_class = session_class
        self._load_args = load_args
        self._session: Any = None

    def open(self) -> tuple[int, int, str]:
        self._session = self._session_class(*self._load_args)
        return self._session.load()

    def call(self, op: str, *args: Any) -> Any:
        return getattr(self._session, op)(*args)

    def batch(self, calls: Sequence[tuple[str, Sequence[Any]]]) -> list[Any]:
        answers: list[Any] = []
        for op, args in calls:
            try:
                answers.append(self.call(op, *args))
            except Refused as refused:
                answers.append(refused)
            except ImplementationFault as fault:
                answers.append(fault)
                break
        return answers

    def close(self) -> None:
        self._session = None


def open_channel(
    session_class: type, load_args: tuple[Any, ...], settings: Any, env: dict[str, str]
) -> Channel:
    """A channel to a `session_class` (isolated unless settings say inprocess)."""
    if settings.isolation not in ISOLATIONS:
        raise SuiteUsageError(
            f"isolation {settings.isolation!r}: expected {' or '.join(ISOLATIONS)}"
        )
    if settings.isolation == "inprocess":
        return InProcessChannel(session_class, load_args)
    return WorkerChannel(
        session_class,
        load_args,
        settings.call_timeout,
        env,
        settings.worker_memory if not env.get("LD_PRELOAD") else 0,
    )


class SessionPool(PoolHandle):
    """A pool living wherever the channel's session does, named by its integer id there."""

    def __init__(self, channel: Channel, geometry: Geometry, capacity: int) -> None:
        super().__init__(geometry, capacity)
        self._channel = channel
        self._id: int = channel.call(
            "pool_create",
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
            self._dtype = self._call("pool_dtype")
        return self._dtype

    def free_blocks(self) -> int:
        return self._call("free_blocks")

    def write(self, block_hash: int, n_tokens: int, values: np.ndarray) -> int:
        kv = np.ascontiguousarray(values, dtype="<f4")
        if kv.size != self.geometry.n_elements:  # the library reads exactly this many floats
            raise ValueError(f"values of shape {kv.shape}, expected {self.geometry.values_shape}")
        return self._call("write", block_hash, n_tokens, kv.tobytes())

    def read(self, block: int) -> ReadBack:
        return self._read_back(self._call("read", block))

    def _read_back(self, answer: tuple[int, int, bytes]) -> ReadBack:
        block_hash, n_tokens, raw = answer
        # A read-only view of the bytes received: nothing else holds them.
        values = np.frombuffer(raw, dtype=np.dtype("<f4")).reshape(self.geometry.values_shape)
        return ReadBack(block_hash, n_tokens, values)

    def read_digest(self, block: int) -> tuple[int, int, int]:
        return tuple(self._call("read_digest", block))  # type: ignore[return-value]

    def query(self, calls: Sequence[tuple[str, tuple[Any, ...]]]) -> list[Any]:
        """One round trip to the session for all of `calls` (PoolHandle.query)."""
        if self._channel.generation != self._generation:
            return [ImplementationFault(f"pool lost when the worker {self._channel.loss}")]
        for op, _ in calls:
            if op not in QUERIES:
                raise ValueError(f"{op} is not a query: {', '.join(QUERIES)}")
        answers = self._channel.batch([(op, (self._id, *args)) for op, args in calls])
        shaped = {"read": self._read_back, "read_digest": tuple}
        return [
            shaped[op](answer) if op in shaped and not isinstance(answer, Exception) else answer
            for (op, _), answer in zip(calls, answers, strict=False)
        ]

    def find(self, block_hash: int) -> int:
        return self._call("find", block_hash)

    def release(self, block: int) -> None:
        self._call("release", block)

    def retain(self, block: int) -> None:
        self._call("retain", block)

    def export_bytes(self, n_blocks: int, version: int) -> int:
        return self._call("export_bytes", n_blocks, version)

    def export(self, blocks: list[int], version: int) -> bytes:
        # Two calls, so a crash is attributed to the right function; `out` gets exactly the
        # size the implementation asked for.
        size = self.export_bytes(len(blocks), version)
        return self._call("export", list(blocks), version, size)

    def import_envelope(self, data: bytes, max_blocks: int) -> list[int]:
        return self._call("import_envelope", bytes(data), max_blocks)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        # A pool lost with its worker has nothing left to destroy, and saying so again here
        # would hide the crash that lost it.
        if self._channel.generation == self._generation:
            self._channel.call("pool_destroy", self._id)

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc is None:
            self.close()
            return
        with contextlib.suppress(ImplementationFault, Refused):  # the error on its way out
            self.close()  # says more than one in cleaning up after it


def _versions(mask: int) -> frozenset[int]:
    return frozenset(v for v in range(32) if mask >> v & 1)


class SessionAdapter(Adapter):
    """An implementation reached through a session; subclasses say how to connect."""

    def __init__(self, spec: ImplSpec, channel: Channel, geometry: Geometry | None) -> None:
        super().__init__(spec.label)
        self.geometry = geometry
        self._channel: Channel | None = channel
        try:
            reads, writes, origin = channel.open()
        except ImplementationFault as exc:
            channel.close()
            raise SuiteUsageError(f"--impl {spec.label}: loading it: {exc}") from None
        except SuiteUsageError as exc:
            channel.close()
            raise SuiteUsageError(f"--impl {spec.label}: {exc}") from None
        except BaseException:
            channel.close()
            raise
        self._reads, self._writes = _versions(reads), _versions(writes)
        self.origin = Path(origin) if origin else None  # the library or module file loaded

    def info(self) -> ImplInfo:
        try:
            with self.open_pool(self.geometry or PROBE_GEOMETRY, 1) as probe:
                dtype = probe.dtype
        except ImplementationFault:
            # Loaded, then faulted in its first pool (a crash, a hang): the implementation's
            # fault, not the user's. The cases that need pools fail with it (the ledger
            # quarantines an operation that keeps faulting), and the others go on.
            dtype = UNKNOWN_DTYPE
        assert self._channel is not None
        try:
            retains = bool(self._channel.call("offers_retain"))
        except ImplementationFault:
            retains = False  # a worker broken by the probe above: its cases fail on their own
        optional = {Capability.RETAIN} if retains else set()
        return ImplInfo(
            read_versions=self._reads,
            write_versions=self._writes,
            pool_dtype=dtype,
            capabilities=frozenset(Capability.ALL) | optional,
        )

    def block_hash(self, parent: int, tokens: list[int]) -> int:
        assert self._channel is not None
        return self._channel.call("block_hash", parent, list(tokens))

    def open_pool(self, geometry: Geometry, capacity: int) -> SessionPool:
        assert self._channel is not None
        if self.geometry is not None and geometry != self.geometry:
            raise NotObservable(self.other_geometry(geometry))
        return SessionPool(self._channel, geometry, capacity)

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None
