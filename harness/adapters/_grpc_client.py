"""The tl.kv.v1 transfer client: the suite plays the prefill side of a decode server over gRPC
(CONTRACT section 3, docs/grpc.md).

`TransferClient` is the `Transfer` (`_transfer.py`) the transfer cases use, and what the
pool-over-gRPC adapter (`_grpc.py`) maps a pool onto. It describes the server when it connects
(GetInfo, or the geometry given and a probe of the versions read; whether PullKv is offered),
and makes each rpc under the call ledger (`_quarantine.py`): a deadline shortened after a hang,
an rpc not called again after a second, a server whose connection broke not called at all.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import grpc
import numpy as np

from .. import oracle
from ..errors import (
    ImplementationFault,
    NotObservable,
    OperationFault,
    Quarantined,
    Refused,
    SentChunkCrcWrong,
    SuiteUsageError,
)
from ..exprs import DEFAULT_GEOMETRY
from ..grpc_stubs import kv_pb2, kv_pb2_grpc
from ._quarantine import CallLedger
from ._spec import SHARED_OPTION, ImplSpec
from ._transfer import Chunk, PushCounts, ServerInfo

if TYPE_CHECKING:
    from . import AdapterSettings

T = TypeVar("T")

# A call failing with one of these is the server's fault or absence, never a refusal of the
# data sent: the case fails with it rather than comparing it with an expected status.
_FAULT_STATUSES = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.UNIMPLEMENTED,
    }
)
# How grpcio words a message past the client's receive limit, and an answer it cannot parse.
_TOO_LARGE = "Received message larger than max"
_UNPARSED = "Exception deserializing response"
NO_INFO = "the server does not offer GetInfo (UNIMPLEMENTED), so its free blocks cannot be observed"
NO_PULL = (
    "the server does not offer PullKv (UNIMPLEMENTED), so the content of its blocks cannot be "
    "observed"
)


class _Unreachable(ImplementationFault):
    """No connection to the server could be made at all."""


class TransferClient:
    """A tl.kv.v1 decode server, reached as its prefill side (a `Transfer`)."""

    def __init__(self, spec: ImplSpec, settings: AdapterSettings) -> None:
        self.label = spec.label
        self.target = spec.target
        # Each rpc is an operation as a C function is: its deadline shortened after a hang, and
        # not called again after a second (docs/grpc.md, "A server that stalls or misbehaves").
        # Streams and pulls have a size: one that fails only from some size on is named so.
        self._ledger = CallLedger(
            float(settings.call_timeout), sized={"PushKv": "chunk", "PullKv": "block"}
        )
        self.shared = SHARED_OPTION in spec.options or settings.concurrent_runs > 1
        self._channel = grpc.insecure_channel(
            spec.target,
            # A pulled 4 MiB envelope plus its chunk's fields, and no more: a server answering
            # with more fails that call (RESOURCE_EXHAUSTED), it cannot hold up the run.
            options=[("grpc.max_receive_message_length", oracle.CHUNK_RECEIVE_LIMIT)],
        )
        # Set once a connection to the server was made: only a server never reached is the
        # user's mistake (an address nothing listens on); one reached that then fails is not.
        self._connected = threading.Event()
        self._channel.subscribe(self._watch_connectivity)
        self._stub = kv_pb2_grpc.KvTransferStub(self._channel)
        # Why no rpc is made any more (the server broke while being described, or its
        # connection broke and did not come back), and what that shows of it.
        self._out_of_service: tuple[str, OperationFault] | None = None
        self._requests = itertools.count(1)
        # What the description finds; these stand if it fails half-way. A geometry never said
        # stands for the corpus's default: the cases are built at it, and each fails at its
        # first rpc all the same.
        self.geometry: oracle.Geometry = spec.geometry or DEFAULT_GEOMETRY
        self.read_versions = frozenset({1})
        self.has_info = self.has_pull = False
        try:
            self._connect(spec)
        except BaseException:
            self.close()
            raise

    def _watch_connectivity(self, state: grpc.ChannelConnectivity) -> None:
        if state == grpc.ChannelConnectivity.READY:
            self._connected.set()

    # -- startup --------------------------------------------------------------------------------

    def _usage(self, problem: str) -> SuiteUsageError:
        return SuiteUsageError(f"--impl {self.label}: {problem}")

    def _connect(self, spec: ImplSpec) -> None:
        """Describe the server. Never reached: a usage error (one line, exit 4). Reached, then
        stalled, refused wrongly or answered with garbage: the server's fault, which every case
        that calls it fails with (exit 1, with a report saying which call and how)."""
        try:
            self._describe(spec)
        except _Unreachable as exc:
            raise self._usage(f"cannot reach the server ({exc})") from None
        except (ImplementationFault, Refused) as exc:
            operation_fault = getattr(exc, "operation_fault", None) or OperationFault(
                "describing-fails", f"the server fails while being described: {exc}"
            )
            self._out_of_service = (
                f"describing the server failed ({exc}), so it is not called in this run",
                operation_fault,
            )
            # Every case gets as far as its first rpc, which fails with that reason, rather
            # than being skipped for what the failed description could not say.
            self.has_info = self.has_pull = True

    def _describe(self, spec: ImplSpec) -> None:
        request = kv_pb2.HasBlocksRequest()
        try:
            self._call(
                "HasBlocks",
                lambda timeout: self._stub.HasBlocks(request, timeout=timeout),
                optional="HasBlocks",
            )
        except NotObservable:
            raise self._usage(
                "HasBlocks failed with UNIMPLEMENTED: is this a tl.kv.v1 KvTransfer server?"
            ) from None
        given = spec.geometry
        info = self._get_info_or_none()
        self.has_info = info is not None
        if info is not None:
            if given is not None and given != info.geometry:
                raise self._usage(
                    f"geometry={given} but the server's GetInfo says its pool is {info.geometry}"
                )
            self.geometry = info.geometry
            self.read_versions = info.read_versions
            if 1 not in self.read_versions:
                raise self._usage(
                    f"GetInfo says the server reads versions {sorted(self.read_versions)}; "
                    "every reader reads v1"
                )
        elif given is None:
            raise self._usage(
                "the server does not offer GetInfo (UNIMPLEMENTED), so give its pool geometry: "
                f"grpc:{spec.target},geometry=BxLxHxD"
            )
        else:
            self.read_versions = self._probe_read_versions()
        self.has_pull = self._offers_pull()

    def _get_info_or_none(self) -> ServerInfo | None:
        try:
            return self.server_info()
        except NotObservable:
            return None

    def _offers_pull(self) -> bool:
        request = kv_pb2.PullKvRequest(kv_format=1)  # no blocks: answers nothing, changes nothing
        try:
            self._call(
                "PullKv",
                lambda timeout: list(self._stub.PullKv(request, timeout=timeout)),
                optional=NO_PULL,
            )
        except NotObservable:
            return False
        return True

    def _probe_read_versions(self) -> frozenset[int]:
        """Without GetInfo, push one partial (unregistered) block in v1, which checks the
        geometry given, then one in v2: FAILED_PRECONDITION means a v1-only reader. Each probe
        the server accepts occupies one block of its pool for good (docs/grpc.md)."""
        reads = {1}
        for version in (1, 2):
            block = oracle.Block(0, 1, np.zeros(self.geometry.values_shape, dtype=np.float32))
            payload = oracle.encode(self.geometry, [block], version)
            try:
                self.push([Chunk.of_payload(0, version, 0, payload, self._request_id())])
            except Refused as refusal:
                if version == 2 and refusal.code == "FAILED_PRECONDITION":
                    continue
                raise self._usage(
                    f"the server refused a v{version} block of the geometry given "
                    f"({self.geometry}) with {refusal.code}: is geometry= "
                    f"right? ({refusal.detail})"
                ) from None
            reads.add(version)
        return frozenset(reads)

    def close(self) -> None:
        self._channel.unsubscribe(self._watch_connectivity)
        self._channel.close()

    def __enter__(self) -> TransferClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- the transfer ---------------------------------------------------------------------------

    def has_blocks(self, hashes: Sequence[int]) -> list[bool]:
        request = kv_pb2.HasBlocksRequest(block_hashes=list(hashes))
        response = self._call(
            "HasBlocks", lambda timeout: self._stub.HasBlocks(request, timeout=timeout)
        )
        held = list(response.held)
        if len(held) != len(hashes):
            raise ImplementationFault(
                f"HasBlocks answered {len(held)} flags for {len(hashes)} hashes"
            )
        return held

    def push(self, chunks: Sequence[Chunk]) -> PushCounts:
        """One PushKv stream of `chunks`; Refused(status name) if the server refuses it."""
        messages = [chunk_message(c) for c in chunks]
        response = self._call(
            "PushKv",
            lambda timeout: self._stub.PushKv(iter(messages), timeout=timeout),
            size=len(messages),
        )
        return PushCounts(response.blocks_stored, response.blocks_reused, response.payload_bytes)

    def server_info(self) -> ServerInfo:
        """GetInfo; NotObservable when the server does not offer it."""
        response = self._call(
            "GetInfo",
            lambda timeout: self._stub.GetInfo(kv_pb2.GetInfoRequest(), timeout=timeout),
            optional=NO_INFO,
        )
        try:
            geometry = oracle.Geometry(
                response.block_tokens, response.n_layers, response.n_kv_heads, response.head_dim
            )
        except ValueError as exc:
            raise ImplementationFault(f"GetInfo describes no usable pool: {exc}") from None
        return ServerInfo(geometry, frozenset(response.read_versions), response.free_blocks)

    def pull(self, hashes: Sequence[int], kv_format: int) -> list[Chunk]:
        """PullKv, its chunks in the order asked (the order the server sent them is
        pulled_order's to check: a SHOULD); NotObservable when the server does not offer it.
        Checks each chunk's crc32c field and hash, so a caller sees only the payloads."""
        chunks = self.pulled(hashes, kv_format)
        if sorted(c.block_hash for c in chunks) != sorted(hashes):
            raise ImplementationFault(
                "PullKv streamed blocks "
                + ", ".join(f"{c.block_hash:#018x}" for c in chunks)
                + " for "
                + ", ".join(f"{h:#018x}" for h in hashes)
            )
        by_hash = {c.block_hash: c for c in chunks}
        return [by_hash[h] for h in hashes]

    def pulled(self, hashes: Sequence[int], kv_format: int, offered: bool = False) -> list[Chunk]:
        """PullKv's chunks as the server streamed them (crc32c fields checked). A stream that
        fails after some chunks is a fault (a refusal comes before any chunk). `offered`: the
        server is known to offer PullKv, so UNIMPLEMENTED is its refusal, not a sign that it
        does not."""
        size = (
            self.geometry.envelope_size(1, kv_format) if kv_format in oracle.KNOWN_VERSIONS else 0
        )
        if size > oracle.MAX_CHUNK_PAYLOAD:
            raise NotObservable(
                f"PullKv in v{kv_format}: a one-block envelope of the server's geometry is "
                f"{size} bytes, more than one chunk carries ({oracle.MAX_CHUNK_PAYLOAD})"
            )
        request = kv_pb2.PullKvRequest(block_hashes=list(hashes), kv_format=kv_format)
        messages: list[Any] = []

        def stream(timeout: float) -> list[Any]:
            messages.clear()  # a retried call starts again
            messages.extend(self._stub.PullKv(request, timeout=timeout))
            return messages

        try:
            self._call("PullKv", stream, optional=None if offered else NO_PULL, size=len(hashes))
        except Refused as refusal:
            if messages:
                raise ImplementationFault(
                    f"PullKv streamed {len(messages)} chunks, then failed with {refusal.code}: "
                    f"{refusal.detail}"
                ) from None
            raise
        if len(messages) != len(hashes):
            raise ImplementationFault(
                f"PullKv of {len(hashes)} blocks streamed {len(messages)} chunks"
            )
        chunks = []
        for index, message in enumerate(messages):
            payload = bytes(message.payload)
            crc = oracle.crc32c(payload)
            if message.crc32c != crc:
                raise SentChunkCrcWrong(
                    f"PullKv chunk {index}: crc32c field {message.crc32c:#010x}, the payload's "
                    f"{crc:#010x}",
                    payload,
                    message.crc32c,
                )
            chunks.append(
                Chunk(
                    message.index,
                    message.kv_format,
                    message.block_hash,
                    payload,
                    message.crc32c,
                    message.request_id,
                )
            )
        return chunks

    def new_request_id(self) -> str:
        return self._request_id()

    # -- helpers --------------------------------------------------------------------------------

    def _request_id(self) -> str:
        return f"tlkv-conformance-{next(self._requests)}"

    def _call(
        self,
        rpc: str,
        action: Callable[[float], T],
        optional: str | None = None,
        size: int | None = None,
    ) -> T:
        """`action(deadline)`, one rpc (of `size` chunks or blocks), under the deadline the
        ledger gives it. A refusal is Refused; UNIMPLEMENTED of an `optional` extension
        NotObservable (with that reason); a hang, a broken connection, an answer too large or
        that does not parse, or a status no request earns an ImplementationFault. A broken
        connection is retried once."""
        self.check_in_service(rpc)
        timeout = self._ledger.timeout(rpc, size)  # Quarantined if rpc is not called any more
        start = time.monotonic()
        try:
            result = action(timeout)
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.UNAVAILABLE or not self._reconnected(timeout):
                raise self._failure(rpc, exc, timeout, start, optional, size) from None
            # The connection broke and came back (a restarted server): once more, and no more.
            start = time.monotonic()
            try:
                result = action(timeout)
            except grpc.RpcError as again:
                raise self._failure(rpc, again, timeout, start, optional, size) from None
        self._ledger.answered(rpc, start, size=size)
        return result

    def _reconnected(self, timeout: float) -> bool:
        """After UNAVAILABLE: whether a connection to the server can be made within `timeout`."""
        if not self._connected.is_set():
            return False  # never reached: nothing to come back
        try:
            grpc.channel_ready_future(self._channel).result(timeout=timeout)
        except grpc.FutureTimeoutError:
            return False
        return True

    def _failure(
        self,
        rpc: str,
        exc: grpc.RpcError,
        timeout: float,
        start: float,
        optional: str | None,
        size: int | None,
    ) -> Exception:
        """What a failed rpc means, recorded in the ledger where it counts."""
        code, details = exc.code(), _details(exc)
        failed = f"{rpc} on {self.target} failed with {code.name}: {details}"
        unanswered = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
        # A READY seen just before the failure may still be on its way to the callback.
        if code in unanswered and not self._connected.wait(0.2):
            return _Unreachable(f"{code.name}: {details}")
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return self._ledger.timed_out(rpc, timeout, f" on {self.target}", size)
        if code == grpc.StatusCode.UNAVAILABLE:
            operation_fault = OperationFault(
                "connection-lost", "the server's connection breaks and does not come back"
            )
            self._out_of_service = (
                f"the connection to the server broke ({failed}) and did not come back within "
                f"{timeout:g} s, so the server is not called again in this run",
                operation_fault,
            )
            return ImplementationFault(failed, operation_fault)
        # The client's own receive limit (PushKv's answer is a few bytes: there, a server's
        # RESOURCE_EXHAUSTED is its refusal of a chunk too large, with gRPC's own words).
        if code == grpc.StatusCode.RESOURCE_EXHAUSTED and rpc != "PushKv" and _TOO_LARGE in details:
            title = (
                f"{rpc} answers with a message over the receive limit "
                f"({oracle.CHUNK_RECEIVE_LIMIT} bytes)"
            )
            operation_fault = OperationFault(f"oversized-answer:{rpc}", title)
            return self._ledger.faulted(
                rpc, ImplementationFault(failed, operation_fault), size=size
            )
        if code == grpc.StatusCode.INTERNAL and _UNPARSED in details:
            title = f"{rpc} answers with a message that does not parse"
            operation_fault = OperationFault(f"malformed-answer:{rpc}", title)
            return self._ledger.faulted(
                rpc, ImplementationFault(failed, operation_fault), size=size
            )
        if optional is not None and code == grpc.StatusCode.UNIMPLEMENTED:
            self._ledger.answered(rpc, start, settled=False, size=size)
            return NotObservable(optional)
        if code in _FAULT_STATUSES:
            return ImplementationFault(failed)
        self._ledger.answered(rpc, start, settled=False, size=size)
        return Refused(code.name, rpc, details)

    def check_in_service(self, rpc: str) -> None:
        """Quarantined if no rpc is made any more (the server broke while being described,
        or its connection broke and did not come back)."""
        if self._out_of_service is not None:
            raise self._not_called(rpc)

    def _not_called(self, rpc: str) -> Quarantined:
        assert self._out_of_service is not None
        why, operation_fault = self._out_of_service
        return Quarantined(f"not called in {rpc}: {why}", operation_fault)


def _details(exc: grpc.RpcError) -> str:
    """The status message's first line (a status from grpcio's own transport can be long)."""
    details = exc.details() if callable(getattr(exc, "details", None)) else None
    text = str(details or exc).strip()
    return text.splitlines()[0] if text else "no details"


def chunk_message(chunk: Chunk) -> kv_pb2.KvChunk:
    """The KvChunk message that carries `chunk`."""
    return kv_pb2.KvChunk(
        request_id=chunk.request_id,
        index=chunk.index,
        kv_format=chunk.kv_format,
        block_hash=chunk.block_hash,
        payload=chunk.payload,
        crc32c=chunk.crc32c,
    )
