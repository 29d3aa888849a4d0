"""The decode side of tl.kv.v1 over one pool of a backend module (docs/grpc.md).

Written from the spec and the contract alone: it shares no code with the suite (harness/), so a
mistake in one is caught by the other. The backend is a module with the Python testee protocol
(the pyref module beside it by default); its `Pool.import_envelope` applies the reader rules,
this module applies the transfer's own rules around it.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import crc32c
import grpc

from . import _messages as pb

MAX_PAYLOAD = 4 * 1024 * 1024
# The receive limit admits a 4 MiB payload plus every other KvChunk field (a request id of up
# to ~64 KiB); a larger payload is refused by the handler, with the status gRPC itself would use.
RECEIVE_LIMIT = MAX_PAYLOAD + 64 * 1024
EMPTY_ENVELOPE = 32
_HEADER = struct.Struct("<4sHHIIIII")
_RECORD_HASH = struct.Struct("<Q")

# The backend's refusal codes, as gRPC statuses.
_STATUS_OF_CODE = {
    "EFORMAT": grpc.StatusCode.DATA_LOSS,
    "ESHAPE": grpc.StatusCode.DATA_LOSS,
    "ENOMEM": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "EINVAL": grpc.StatusCode.INVALID_ARGUMENT,
    "ENOTFOUND": grpc.StatusCode.NOT_FOUND,
}
FAULTS = ("wrong-version-status", "huge-pull", "state-dependent")
# What the "huge-pull" fault answers PullKv with: a first chunk of this many payload bytes, far
# past the 4 MiB a chunk may carry, so that a client without a receive limit would take it all.
HUGE_PULL_BYTES = 100 * 1024 * 1024


class Refusal(Exception):
    """A status the server answers with; the message names the chunk and what is wrong."""

    def __init__(self, status: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class _Stream:
    """What one PushKv stream has done so far, so a refusal can undo all of it."""

    stored: list[int] = field(default_factory=list)  # blocks allocated from payloads
    reused: list[int] = field(default_factory=list)  # blocks a reference was taken on
    payload_bytes: int = 0


class KvTransferServer:
    """The four rpcs over one pool. Every pool access holds `_lock`."""

    def __init__(
        self,
        backend: ModuleType,
        geometry: tuple[int, int, int, int],
        capacity: int,
        read_versions: frozenset[int],
        fault: str | None = None,
        dedup: bool = False,
    ) -> None:
        self._backend = backend
        self._pool = backend.Pool(*geometry, capacity)
        # A prefix cache (--dedup): a payload for a hash already held is read in full in a
        # pool of one block of its own, then the held block is shared instead of stored twice.
        self._dedup = dedup
        self._scratch = backend.Pool(*geometry, 1)
        self.geometry = geometry
        self.read_versions = read_versions
        # PullKv writes what the server reads, as far as the backend writes it.
        self.write_versions = read_versions & frozenset(backend.WRITE_VERSIONS)
        self._fault = fault
        self._lock = threading.Lock()
        # References taken by empty payloads. The testee protocol has no "add a reference", and
        # tl.kv.v1 has no release, so the server counts them itself (they pin nothing more).
        self._extra_refs: dict[int, int] = {}
        self._times_sent: dict[bytes, int] = {}  # for the "state-dependent" fault

    # -- the rpcs -------------------------------------------------------------------------------

    def has_blocks(self, request: Any, context: grpc.ServicerContext) -> Any:
        with self._lock:
            held = [self._find(h) is not None for h in request.block_hashes]
        return pb.HasBlocksResponse(held=held)

    def push_kv(self, chunks: Iterable[Any], context: grpc.ServicerContext) -> Any:
        stream = _Stream()
        try:
            for position, chunk in enumerate(chunks):
                with self._lock:
                    self._accept(chunk, position, stream)
        except Refusal as refusal:
            # The stream is all or nothing (docs/grpc.md): undo what earlier chunks did.
            with self._lock:
                self._undo(stream)
            self._abort(context, refusal)
        except BaseException:
            with self._lock:  # a cancelled or broken stream stores nothing either
                self._undo(stream)
            raise
        return pb.PushKvResponse(
            blocks_stored=len(stream.stored),
            blocks_reused=len(stream.reused),
            payload_bytes=stream.payload_bytes,
        )

    def get_info(self, request: Any, context: grpc.ServicerContext) -> Any:
        block_tokens, n_layers, n_kv_heads, head_dim = self.geometry
        with self._lock:
            free = self._pool.free_blocks()
        return pb.PoolInfo(
            block_tokens=block_tokens,
            n_layers=n_layers,
            n_kv_heads=n_kv_heads,
            head_dim=head_dim,
            read_versions=sorted(self.read_versions),
            free_blocks=free,
        )

    def pull_kv(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        try:
            chunks = self._pull(list(request.block_hashes), request.kv_format)
        except Refusal as refusal:
            self._abort(context, refusal)
        if self._fault == "huge-pull" and chunks:  # a deliberately wrong server, for self-tests
            chunks[0].payload = bytes(HUGE_PULL_BYTES)
            chunks[0].crc32c = crc32c.crc32c(chunks[0].payload)
        yield from chunks

    # -- PushKv, one chunk ----------------------------------------------------------------------

    def _accept(self, chunk: Any, position: int, stream: _Stream) -> None:
        where = f"chunk {position}"
        if chunk.index != position:
            raise Refusal(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"{where} has index {chunk.index}: chunks come one per block, in order, from 0",
            )
        if chunk.kv_format not in self.read_versions:
            raise Refusal(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"{where}: kv_format {chunk.kv_format} is not read here (reads {self._versions()})",
            )
        if not chunk.payload:
            self._reuse(chunk, where, stream)
            return
        payload = bytes(chunk.payload)
        self._check_payload(chunk, payload, where)
        if self._fault == "state-dependent":  # a deliberately wrong server, for self-tests
            self._refuse_second_sending(payload, where)
        held = self._find(chunk.block_hash) if self._dedup else None
        if held is not None:
            self._validate(payload, where)
            self._extra_refs[held] = self._extra_refs.get(held, 0) + 1
            stream.reused.append(held)
        else:
            stream.stored.extend(self._import(self._pool, payload, where))
        stream.payload_bytes += len(payload)

    def _refuse_second_sending(self, payload: bytes, where: str) -> None:
        """A server whose answer depends on what it was sent before: a block's values (its
        record past the hash and n_tokens) refused the second time they come, whatever the
        hash, and accepted the first and every later time."""
        values = payload[_HEADER.size + 12 : -4]
        times = self._times_sent[values] = self._times_sent.get(values, 0) + 1
        if times == 2:
            raise Refusal(grpc.StatusCode.DATA_LOSS, f"{where}: these values were sent once before")

    def _import(self, pool: Any, payload: bytes, where: str) -> list[int]:
        try:
            return pool.import_envelope(payload, 1)
        except self._backend.KvError as exc:
            status = _STATUS_OF_CODE.get(getattr(exc, "code", None), grpc.StatusCode.INTERNAL)
            raise Refusal(status, f"{where}: the envelope is refused: {exc}") from None

    def _validate(self, payload: bytes, where: str) -> None:
        """Every reader rule on a payload the server will not store (its hash is held): the
        scratch pool imports it and lets it go, so a bad payload is refused as if it were new."""
        for block in self._import(self._scratch, payload, where):
            self._scratch.release(block)

    def _reuse(self, chunk: Any, where: str, stream: _Stream) -> None:
        block = self._find(chunk.block_hash)
        if block is None:
            # Decision (docs/grpc.md): the prefill side asked for a copy this server does not
            # hold, so the sequence cannot be completed here: NOT_FOUND, and the stream fails.
            raise Refusal(
                grpc.StatusCode.NOT_FOUND,
                f"{where}: empty payload for block_hash {chunk.block_hash:#018x}, "
                "which this server does not hold",
            )
        self._extra_refs[block] = self._extra_refs.get(block, 0) + 1
        stream.reused.append(block)

    def _check_payload(self, chunk: Any, payload: bytes, where: str) -> None:
        """The transfer's rules on a payload; the reader rules are the backend's import."""
        if len(payload) > MAX_PAYLOAD:
            raise Refusal(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"{where}: payload of {len(payload)} bytes, more than {MAX_PAYLOAD} (4 MiB)",
            )
        computed = crc32c.crc32c(payload)
        if chunk.crc32c != computed:
            raise Refusal(
                grpc.StatusCode.DATA_LOSS,
                f"{where}: crc32c field {chunk.crc32c:#010x}, the payload's CRC-32C is "
                f"{computed:#010x}",
            )
        if len(payload) < EMPTY_ENVELOPE:
            raise Refusal(
                grpc.StatusCode.DATA_LOSS,
                f"{where}: payload of {len(payload)} bytes, shorter than an empty envelope",
            )
        _magic, version, _dtype, n_blocks, *_dims = _HEADER.unpack_from(payload)
        if version not in self.read_versions:
            raise Refusal(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"{where}: envelope version {version} is not read here (reads {self._versions()})",
            )
        if version != chunk.kv_format:
            raise Refusal(
                grpc.StatusCode.DATA_LOSS,
                f"{where}: kv_format {chunk.kv_format} but the envelope is version {version}",
            )
        if n_blocks != 1:
            raise Refusal(
                grpc.StatusCode.DATA_LOSS,
                f"{where}: the envelope has n_blocks {n_blocks}; a chunk carries exactly one block",
            )
        if len(payload) >= _HEADER.size + _RECORD_HASH.size:
            (record_hash,) = _RECORD_HASH.unpack_from(payload, _HEADER.size)
            if record_hash != chunk.block_hash:
                raise Refusal(
                    grpc.StatusCode.DATA_LOSS,
                    f"{where}: block_hash {chunk.block_hash:#018x}, the envelope's block is "
                    f"{record_hash:#018x}",
                )
        # Shorter payloads cannot hold a record: the backend's length rule refuses them.

    def _undo(self, stream: _Stream) -> None:
        for block in stream.reused:
            self._extra_refs[block] -= 1
            if not self._extra_refs[block]:
                del self._extra_refs[block]
        for block in reversed(stream.stored):
            self._pool.release(block)
        stream.stored.clear()
        stream.reused.clear()

    # -- PullKv ---------------------------------------------------------------------------------

    def _pull(self, hashes: list[int], kv_format: int) -> list[Any]:
        if kv_format not in self.write_versions:
            raise Refusal(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"kv_format {kv_format} is not written here "
                f"(writes {', '.join(map(str, sorted(self.write_versions))) or 'nothing'})",
            )
        chunks = []
        with self._lock:  # every block is resolved before the first chunk is sent
            for index, block_hash in enumerate(hashes):
                block = self._find(block_hash)
                if block is None:
                    raise Refusal(
                        grpc.StatusCode.NOT_FOUND,
                        f"block_hashes[{index}] {block_hash:#018x} is not held here",
                    )
                payload = bytes(self._pool.export([block], kv_format))
                chunks.append(
                    pb.KvChunk(
                        index=index,
                        kv_format=kv_format,
                        block_hash=block_hash,
                        payload=payload,
                        crc32c=crc32c.crc32c(payload),
                    )
                )
        return chunks

    # -- helpers --------------------------------------------------------------------------------

    def _find(self, block_hash: int) -> int | None:
        if block_hash == 0:  # 0 names no block: it is the partial tail's "no hash"
            return None
        try:
            return self._pool.find(block_hash)
        except self._backend.KvError:
            return None

    def _versions(self) -> str:
        return ", ".join(f"v{v}" for v in sorted(self.read_versions))

    def _abort(self, context: grpc.ServicerContext, refusal: Refusal) -> None:
        status = refusal.status
        if self._fault == "wrong-version-status" and status == grpc.StatusCode.FAILED_PRECONDITION:
            status = grpc.StatusCode.DATA_LOSS  # a deliberately wrong server, for the self-tests
        context.abort(status, str(refusal))


def method_handlers(server: KvTransferServer, extensions: bool) -> dict[str, Any]:
    """The rpcs by name; without extensions GetInfo and PullKv stay unregistered, which gRPC
    answers with UNIMPLEMENTED."""

    def unary(fn: Callable[..., Any], request: Any, response: Any) -> Any:
        return grpc.unary_unary_rpc_method_handler(
            fn,
            request_deserializer=request.FromString,
            response_serializer=response.SerializeToString,
        )

    handlers = {
        "HasBlocks": unary(server.has_blocks, pb.HasBlocksRequest, pb.HasBlocksResponse),
        "PushKv": grpc.stream_unary_rpc_method_handler(
            server.push_kv,
            request_deserializer=pb.KvChunk.FromString,
            response_serializer=pb.PushKvResponse.SerializeToString,
        ),
    }
    if extensions:
        handlers["GetInfo"] = unary(server.get_info, pb.GetInfoRequest, pb.PoolInfo)
        handlers["PullKv"] = grpc.unary_stream_rpc_method_handler(
            server.pull_kv,
            request_deserializer=pb.PullKvRequest.FromString,
            response_serializer=pb.KvChunk.SerializeToString,
        )
    return handlers
