"""A scripted decode server of tl.kv.v1, run by the suite on a free loopback port for one case
of the prefill side (docs/grpc.md, "Testing a prefill client"): it answers as the case's script
says and records every rpc and chunk in the order they came. The record is the authority the
prefill cases check a client against, never the client's own report.

The script: which of the asked hashes it holds, the versions it reads (GetInfo; a chunk of
another kv_format fails the stream with FAILED_PRECONDITION, as the spec says), its geometry,
and the faults to inject (a status on HasBlocks; a status after chunk k of every stream or of
the first ones; an rpc that never answers while the case lasts). It checks
nothing itself, so a client's mistake reaches the record instead of a refusal hiding it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

from . import oracle
from .adapters import Chunk, PushCounts, ServerInfo


@dataclass(frozen=True)
class ServerScript:
    """How the scripted server answers in one case."""

    geometry: oracle.Geometry
    read_versions: frozenset[int]
    held: frozenset[int] = frozenset()  # the hashes HasBlocks says it holds
    has_blocks_status: str | None = None  # HasBlocks fails with this gRPC status
    # A PushKv stream fails with `fail_status` on receiving its chunk `fail_after` (from 0):
    # every stream, or the first `fail_streams` (a transient fault, a connection lost once).
    fail_after: int | None = None
    fail_status: str = "DATA_LOSS"
    fail_streams: int | None = None
    # "HasBlocks" or "PushKv": that rpc does not answer until the case ends (a PushKv receives
    # its chunks, then sends no response).
    stall: str | None = None


@dataclass(frozen=True)
class GetInfoCall:
    """A GetInfo the server answered."""


@dataclass(frozen=True)
class HasBlocksCall:
    hashes: tuple[int, ...]
    status: str  # "OK", the status injected, or "STALLED" (never answered)


@dataclass(frozen=True)
class ChunkReceived:
    stream: int  # which PushKv stream of the case, from 0
    chunk: Chunk


@dataclass(frozen=True)
class StreamEnded:
    stream: int
    status: str  # "OK", the status the server ended it with, or "CANCELLED" by the client
    counts: PushCounts | None  # the response, for an accepted stream


@dataclass(frozen=True)
class Stalled:
    """The server stopped answering `rpc` here, as scripted."""

    rpc: str


RecordedCall = GetInfoCall | HasBlocksCall | ChunkReceived | StreamEnded | Stalled


@dataclass
class ServerRecord:
    """Every rpc and chunk the server received, in order."""

    calls: list[RecordedCall] = field(default_factory=list)

    def has_blocks(self) -> list[HasBlocksCall]:
        return [c for c in self.calls if isinstance(c, HasBlocksCall)]

    def chunks(self, stream: int | None = None) -> list[Chunk]:
        return [
            c.chunk
            for c in self.calls
            if isinstance(c, ChunkReceived) and stream in (None, c.stream)
        ]

    def streams(self) -> list[StreamEnded]:
        return [c for c in self.calls if isinstance(c, StreamEnded)]

    def first_chunk_at(self) -> int | None:
        """The position in the record of the first chunk, or None."""
        return next((i for i, c in enumerate(self.calls) if isinstance(c, ChunkReceived)), None)


class ScriptedDecodeServer:
    """A tl.kv.v1 decode server on 127.0.0.1 answering as `script` says; a context manager."""

    def __init__(self, script: ServerScript) -> None:
        self.script = script
        self.record = ServerRecord()
        self._lock = threading.Lock()
        self._streams = 0
        self._server: Any = None
        self.address = ""
        # Set when the case ends: a stalled rpc stops waiting, and nothing more is recorded.
        self.released = threading.Event()

    def __enter__(self) -> ScriptedDecodeServer:
        # grpcio only when a prefill case runs, as the adapters import it only when used.
        import grpc

        from .grpc_stubs import kv_pb2_grpc

        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=4),
            options=[("grpc.max_receive_message_length", oracle.CHUNK_RECEIVE_LIMIT)],
        )
        kv_pb2_grpc.add_KvTransferServicer_to_server(_Servicer(self, grpc), server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        self._server, self.address = server, f"127.0.0.1:{port}"
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.released.set()
        if self._server is not None:
            self._server.stop(grace=None).wait()
            self._server = None

    def _add(self, call: RecordedCall) -> None:
        with self._lock:
            if not self.released.is_set():
                self.record.calls.append(call)

    def stall(self, rpc: str, context: Any) -> None:
        """Answer nothing until the case ends, when the script stalls `rpc`."""
        if self.script.stall == rpc:
            self._add(Stalled(rpc))
            self.released.wait()

    def _new_stream(self) -> int:
        with self._lock:
            self._streams += 1
            return self._streams - 1

    def info(self) -> ServerInfo:
        return ServerInfo(self.script.geometry, self.script.read_versions, free_blocks=1 << 20)


class _Servicer:
    """The rpc handlers (kv_pb2_grpc's servicer interface), recording before answering."""

    def __init__(self, server: ScriptedDecodeServer, grpc: Any) -> None:
        self._server = server
        self._grpc = grpc

    def _abort(self, context: Any, status: str, message: str) -> None:
        context.abort(getattr(self._grpc.StatusCode, status), message)

    def HasBlocks(self, request: Any, context: Any) -> Any:
        from .grpc_stubs import kv_pb2

        script = self._server.script
        hashes = tuple(request.block_hashes)
        stalled = "STALLED" if script.stall == "HasBlocks" else "OK"
        self._server._add(HasBlocksCall(hashes, script.has_blocks_status or stalled))
        self._server.stall("HasBlocks", context)
        if script.has_blocks_status:
            self._abort(context, script.has_blocks_status, "injected by the case")
        return kv_pb2.HasBlocksResponse(held=[h in script.held for h in hashes])

    def GetInfo(self, request: Any, context: Any) -> Any:
        from .grpc_stubs import kv_pb2

        self._server._add(GetInfoCall())
        info = self._server.info()
        g = info.geometry
        return kv_pb2.PoolInfo(
            block_tokens=g.block_tokens,
            n_layers=g.n_layers,
            n_kv_heads=g.n_kv_heads,
            head_dim=g.head_dim,
            read_versions=sorted(info.read_versions),
            free_blocks=info.free_blocks,
        )

    def PushKv(self, request_iterator: Iterator[Any], context: Any) -> Any:
        from .grpc_stubs import kv_pb2

        script = self._server.script
        stream = self._server._new_stream()
        stored = reused = payload_bytes = 0
        received = 0
        try:
            for message in request_iterator:
                chunk = Chunk(
                    message.index,
                    message.kv_format,
                    message.block_hash,
                    bytes(message.payload),
                    message.crc32c,
                    message.request_id,
                )
                self._server._add(ChunkReceived(stream, chunk))
                faulty = script.fail_streams is None or stream < script.fail_streams
                if received == script.fail_after and faulty:
                    self._end(stream, script.fail_status, context, "injected by the case")
                received += 1
                if chunk.kv_format not in script.read_versions:
                    self._end(
                        stream,
                        "FAILED_PRECONDITION",
                        context,
                        f"kv_format {chunk.kv_format} is not read here",
                    )
                if chunk.payload:
                    stored += 1
                    payload_bytes += len(chunk.payload)
                else:
                    reused += 1
        except self._grpc.RpcError:  # the client cancelled or broke the stream
            self._server._add(StreamEnded(stream, "CANCELLED", None))
            raise
        self._server.stall("PushKv", context)
        counts = PushCounts(stored, reused, payload_bytes)
        self._server._add(StreamEnded(stream, "OK", counts))
        return kv_pb2.PushKvResponse(
            blocks_stored=stored, blocks_reused=reused, payload_bytes=payload_bytes
        )

    def _end(self, stream: int, status: str, context: Any, message: str) -> None:
        self._server._add(StreamEnded(stream, status, None))
        self._abort(context, status, message)

    def PullKv(self, request: Any, context: Any) -> Any:
        self._abort(context, "UNIMPLEMENTED", "a scripted server offers no PullKv")
