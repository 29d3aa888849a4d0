"""The gRPC way in (`grpc:HOST:PORT[,geometry=BxLxHkvxD][,shared]`): the suite plays the
prefill side of tl.kv.v1 against a decode server (CONTRACT section 3, docs/grpc.md).

The server has one pool, which outlives every case, and tl.kv.v1 reaches a block only by its
hash and has no release. So the pool operations map onto the transfer as far as it allows, and
whatever it cannot show raises NotObservable (the case is skipped, never passed):

- `write` pushes a one-block v1 envelope; `import_envelope` pushes a valid envelope as one
  stream of one-block chunks, and anything else as it is, in one chunk.
- `read` and `export` pull a block back by its hash (PullKv); `find` asks HasBlocks.
- `free_blocks` comes from GetInfo, counted from what the server had free when the case opened
  its pool, so a case sees a pool of the capacity it asked for.
- `release` and `block_hash` cannot be observed.
"""

from __future__ import annotations

import itertools
import struct
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
import numpy as np

from .. import oracle
from ..errors import (
    ImplementationFault,
    NotObservable,
    OperationFault,
    Quarantined,
    Refused,
    SuiteUsageError,
    WrongCount,
)
from ..exprs import DEFAULT_GEOMETRY
from ..grpc_stubs import kv_pb2, kv_pb2_grpc
from ._base import Adapter, Capability, ImplInfo, PoolHandle, ReadBack
from ._quarantine import CallLedger
from ._spec import SHARED_OPTION, ImplSpec

T = TypeVar("T")

MAX_PAYLOAD = 4 * 1024 * 1024
RECEIVE_LIMIT = MAX_PAYLOAD + 64 * 1024
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
_RECORD_HASH = struct.Struct("<Q")
NO_INFO = "the server does not offer GetInfo (UNIMPLEMENTED), so its free blocks cannot be observed"
SHARED = (
    "the server is shared (xdist workers, or ,shared on --impl): its free-block count moves "
    "with other clients, so this run's own use of it cannot be observed"
)
NO_PULL = (
    "the server does not offer PullKv (UNIMPLEMENTED), so the content of its blocks cannot be "
    "observed"
)


@dataclass(frozen=True)
class Chunk:
    """One KvChunk as the suite sends or receives it."""

    index: int
    kv_format: int
    block_hash: int
    payload: bytes
    crc32c: int
    request_id: str = ""

    @classmethod
    def of_payload(
        cls, index: int, kv_format: int, block_hash: int, payload: bytes, request_id: str = ""
    ) -> Chunk:
        """A chunk with the right crc32c field (an empty payload's is 0)."""
        crc = oracle.crc32c(payload) if payload else 0
        return cls(index, kv_format, block_hash, payload, crc, request_id)


@dataclass(frozen=True)
class PushCounts:
    """A PushKvResponse."""

    blocks_stored: int
    blocks_reused: int
    payload_bytes: int


@dataclass(frozen=True)
class ServerInfo:
    """A PoolInfo (GetInfo)."""

    geometry: oracle.Geometry
    read_versions: frozenset[int]
    free_blocks: int


@dataclass
class _Known:
    """A block id the adapter handed out, and the hash that reaches it over tl.kv.v1."""

    block_hash: int
    # (version, record bytes) this adapter pushed; None for a block it did not write itself
    # (found registered by a refused import, or stored from data the server should have refused)
    content: tuple[int, bytes] | None


def _header_field(data: bytes, name: str) -> int | None:
    """A header field, read only from the bytes before the trailer (in a short payload, the
    bytes where a field would be are the CRC), as the oracle reads it."""
    field = oracle.HEADER_FIELDS[name]
    body = len(data) - oracle.CRC_SIZE
    return field.read(data) if body >= field.offset + field.size else None


def _first_record_hash(data: bytes) -> int:
    if len(data) >= oracle.HEADER_SIZE + _RECORD_HASH.size:
        return _RECORD_HASH.unpack_from(data, oracle.HEADER_SIZE)[0]
    return 0


class _Unreachable(ImplementationFault):
    """No connection to the server could be made at all."""


class GrpcAdapter(Adapter):
    """A tl.kv.v1 decode server, reached as its prefill side."""

    status_domain = "grpc"
    keeps_blocks = True

    def __init__(self, spec: ImplSpec, settings: Any) -> None:
        super().__init__(spec.label)
        self.target = spec.target
        # Each rpc is an operation as a C function is: its deadline shortened after a hang, and
        # not called again after a second (docs/grpc.md, "A server that misbehaves").
        self._ledger = CallLedger(float(settings.call_timeout))
        self.shared = SHARED_OPTION in spec.options or settings.concurrent_runs > 1
        self._channel = grpc.insecure_channel(
            spec.target,
            # A pulled 4 MiB envelope plus its chunk's fields, and no more: a server answering
            # with more fails that call (RESOURCE_EXHAUSTED), it cannot hold up the run.
            options=[("grpc.max_receive_message_length", RECEIVE_LIMIT)],
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
        self._blocks: list[_Known] = []
        self._pushed: dict[int, set[tuple[int, bytes]]] = {}  # hash -> contents pushed
        self._held_before: set[int] = set()  # hashes the server held before this run pushed them
        self._preloaded: dict[tuple[int, bytes], int] = {}  # (hash, record) -> the block's id
        # What the description finds; these stand if it fails half-way.
        self.geometry = spec.geometry
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
            if self.geometry is None:
                # Never said: the cases are built at the corpus's default geometry, and each
                # fails at its first rpc all the same.
                self.geometry = DEFAULT_GEOMETRY

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
        assert self.geometry is not None
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

    # -- the adapter protocol -------------------------------------------------------------------

    def info(self) -> ImplInfo:
        # What this way in can observe: never the hash function; pools (reads of content, free
        # counts) only with both extensions; exports only with PullKv.
        capabilities = {Capability.IMPORT}
        if self.has_info and self.has_pull:
            capabilities.add(Capability.POOL)
        if self.has_pull:
            capabilities.add(Capability.EXPORT)
        return ImplInfo(
            read_versions=self.read_versions,
            # tl.kv.v1 announces what a server reads; PullKv is assumed to write the same.
            write_versions=self.read_versions if self.has_pull else frozenset(),
            # The pool's own precision is not announced; every read goes through a v1
            # envelope, so the suite sees f16 values whatever the server stores.
            pool_dtype="f16",
            capabilities=frozenset(capabilities),
        )

    def block_hash(self, parent: int, tokens: list[int]) -> int:
        raise NotObservable(
            "block_hash cannot be observed over tl.kv.v1: chunks carry the hashes the prefill "
            "side computed"
        )

    def open_pool(self, geometry: oracle.Geometry, capacity: int) -> GrpcPool:
        if self._out_of_service is not None:
            raise self._not_called("GetInfo")
        if geometry != self.geometry:
            raise NotObservable(self.other_geometry(geometry))
        return GrpcPool(self, geometry, capacity)

    def close(self) -> None:
        self._channel.unsubscribe(self._watch_connectivity)
        self._channel.close()

    def __enter__(self) -> GrpcAdapter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- the transfer, for transfer cases -------------------------------------------------------

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
        messages = [
            kv_pb2.KvChunk(
                request_id=c.request_id,
                index=c.index,
                kv_format=c.kv_format,
                block_hash=c.block_hash,
                payload=c.payload,
                crc32c=c.crc32c,
            )
            for c in chunks
        ]
        response = self._call(
            "PushKv", lambda timeout: self._stub.PushKv(iter(messages), timeout=timeout)
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

    def pulled(self, hashes: Sequence[int], kv_format: int) -> list[Chunk]:
        """PullKv's chunks as the server streamed them (crc32c fields checked)."""
        size = (
            self.geometry.envelope_size(1, kv_format) if kv_format in oracle.KNOWN_VERSIONS else 0
        )
        if size > MAX_PAYLOAD:
            raise NotObservable(
                f"PullKv in v{kv_format}: a one-block envelope of the server's geometry is "
                f"{size} bytes, more than one chunk carries ({MAX_PAYLOAD})"
            )
        request = kv_pb2.PullKvRequest(block_hashes=list(hashes), kv_format=kv_format)
        messages = self._call(
            "PullKv",
            lambda timeout: list(self._stub.PullKv(request, timeout=timeout)),
            optional=NO_PULL,
        )
        if len(messages) != len(hashes):
            raise ImplementationFault(
                f"PullKv of {len(hashes)} blocks streamed {len(messages)} chunks"
            )
        chunks = []
        for index, message in enumerate(messages):
            payload = bytes(message.payload)
            crc = oracle.crc32c(payload)
            if message.crc32c != crc:
                raise ImplementationFault(
                    f"PullKv chunk {index}: crc32c field {message.crc32c:#010x}, the payload's "
                    f"{crc:#010x}"
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

    def _call(self, rpc: str, action: Callable[[float], T], optional: str | None = None) -> T:
        """`action(deadline)`, one rpc, under the deadline the ledger gives it. A refusal is
        Refused; UNIMPLEMENTED of an `optional` extension NotObservable (with that reason); a
        hang, a broken connection, an answer too large or that does not parse, or a status no
        request earns an ImplementationFault. A broken connection is retried once."""
        if self._out_of_service is not None:
            raise self._not_called(rpc)
        timeout = self._ledger.timeout(rpc)  # Quarantined if rpc is not called any more
        start = time.monotonic()
        try:
            result = action(timeout)
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.UNAVAILABLE or not self._reconnected(timeout):
                raise self._failure(rpc, exc, timeout, start, optional) from None
            # The connection broke and came back (a restarted server): once more, and no more.
            start = time.monotonic()
            try:
                result = action(timeout)
            except grpc.RpcError as again:
                raise self._failure(rpc, again, timeout, start, optional) from None
        self._ledger.answered(rpc, start)
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
        self, rpc: str, exc: grpc.RpcError, timeout: float, start: float, optional: str | None
    ) -> Exception:
        """What a failed rpc means, recorded in the ledger where it counts."""
        code, details = exc.code(), _details(exc)
        failed = f"{rpc} on {self.target} failed with {code.name}: {details}"
        unanswered = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
        # A READY seen just before the failure may still be on its way to the callback.
        if code in unanswered and not self._connected.wait(0.2):
            return _Unreachable(f"{code.name}: {details}")
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return self._ledger.timed_out(rpc, timeout, f" on {self.target}")
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
            title = f"{rpc} answers with a message over the receive limit ({RECEIVE_LIMIT} bytes)"
            operation_fault = OperationFault(f"oversized-answer:{rpc}", title)
            return self._ledger.faulted(rpc, ImplementationFault(failed, operation_fault))
        if code == grpc.StatusCode.INTERNAL and _UNPARSED in details:
            title = f"{rpc} answers with a message that does not parse"
            operation_fault = OperationFault(f"malformed-answer:{rpc}", title)
            return self._ledger.faulted(rpc, ImplementationFault(failed, operation_fault))
        if optional is not None and code == grpc.StatusCode.UNIMPLEMENTED:
            self._ledger.answered(rpc, start, settled=False)
            return NotObservable(optional)
        if code in _FAULT_STATUSES:
            return ImplementationFault(failed)
        self._ledger.answered(rpc, start, settled=False)
        return Refused(code.name, rpc, details)

    def _not_called(self, rpc: str) -> Quarantined:
        assert self._out_of_service is not None
        why, operation_fault = self._out_of_service
        return Quarantined(f"not called in {rpc}: {why}", operation_fault)

    # -- bookkeeping shared by every pool handle (the server's pool outlives them) ---------------

    def _store(self, blocks: Sequence[tuple[int, bytes, int]]) -> tuple[list[int], int]:
        """Push one-block envelopes (hash, payload, version) as one stream; their new ids, and
        how many of them the server shared with a block it held (docs/decisions.md: a payload
        for a held hash may be stored or shared, so blocks_stored + blocks_reused is what a
        stream of payloads fixes)."""
        new = [h for h, _, _ in blocks if h and h not in self._pushed]
        if new:
            self._held_before.update(
                h for h, held in zip(new, self.has_blocks(new), strict=True) if held
            )
        request_id = self._request_id()
        chunks = [
            Chunk.of_payload(index, version, block_hash, payload, request_id)
            for index, (block_hash, payload, version) in enumerate(blocks)
        ]
        counts = self.push(chunks)
        if counts.blocks_stored + counts.blocks_reused != len(blocks):
            raise WrongCount(
                f"PushKv of {len(blocks)} payloads answered blocks_stored {counts.blocks_stored}, "
                f"blocks_reused {counts.blocks_reused}: their sum is the stream's chunks",
                ("XFER-COUNTS",),
            )
        ids = []
        for block_hash, payload, version in blocks:
            content = (version, payload[oracle.HEADER_SIZE : -oracle.CRC_SIZE])
            if block_hash:
                self._pushed.setdefault(block_hash, set()).add(content)
            ids.append(self._new_id(_Known(block_hash, content)))
        return ids, counts.blocks_reused

    def _new_id(self, known: _Known) -> int:
        self._blocks.append(known)
        return len(self._blocks) - 1

    def _known(self, block: int) -> _Known:
        if not 0 <= block < len(self._blocks):
            raise NotObservable(f"block id {block} was never handed out by this adapter")
        return self._blocks[block]

    def _reachable_hash(self, block: int, what: str) -> int:
        """The hash that reaches `block` over tl.kv.v1, if it reaches that block alone."""
        known = self._known(block)
        if known.block_hash == 0:
            raise NotObservable(
                f"{what}: block {block} has no hash (a partial or unregistered block), and "
                "tl.kv.v1 reaches blocks only by hash"
            )
        if known.content is not None and len(self._pushed[known.block_hash]) > 1:
            raise NotObservable(
                f"{what}: this run pushed blocks of hash {known.block_hash:#x} with different "
                "contents, and tl.kv.v1 reaches a block only by its hash"
            )
        if known.content is not None and known.block_hash in self._held_before:
            # Held before this run pushed it (an earlier run's golden vector, say): the block
            # the hash reaches is this one only if the server sends back what was pushed.
            version, record = known.content
            (chunk,) = self.pull([known.block_hash], version)
            if chunk.payload[oracle.HEADER_SIZE : -oracle.CRC_SIZE] != record:
                raise NotObservable(
                    f"{what}: the server held a block of hash {known.block_hash:#x} with other "
                    "contents before this run pushed it, and tl.kv.v1 reaches a block only by "
                    "its hash"
                )
        return known.block_hash

    def fits(self, payload: bytes, what: str) -> None:
        """A payload the suite can send: a chunk carries at most 4 MiB. Past that the limit is
        the transport's, not a fault of the server: the case cannot be observed this way."""
        if len(payload) > MAX_PAYLOAD:
            raise NotObservable(
                f"{what}: a one-block envelope of this geometry is {len(payload)} bytes, more "
                f"than one tl.kv.v1 chunk carries ({MAX_PAYLOAD})"
            )


def _details(exc: grpc.RpcError) -> str:
    """The status message's first line (a status from grpcio's own transport can be long)."""
    details = exc.details() if callable(getattr(exc, "details", None)) else None
    text = str(details or exc).strip()
    return text.splitlines()[0] if text else "no details"


class GrpcPool(PoolHandle):
    """The server's one pool, seen as a pool of the capacity the case asked for."""

    def __init__(self, adapter: GrpcAdapter, geometry: oracle.Geometry, capacity: int) -> None:
        super().__init__(geometry, capacity)
        self._adapter = adapter
        self._free_at_open: int | None = None
        if adapter.has_info and not adapter.shared:
            # The case's pool is a view of the server's: it needs room only for what it stores
            # (checked as it stores it), not for the capacity it declares.
            self._free_at_open = adapter.server_info().free_blocks
        self._written: dict[int, int] = {}  # hash -> the first id this pool wrote with it
        # Blocks the server's free count does not show: preloaded blocks it was not sent
        # (reused or unreachable), and payloads it shared with a block it held (a prefix
        # cache). In the case's view of the pool each occupies a block all the same.
        self._unsent = 0
        self._stored = 0  # blocks this pool stored on the server (its view of a shared pool)
        self._seen_unheld: set[int] = set()  # hashes HasBlocks said were not held, in this pool
        self._registered_since: dict[int, int] = {}  # of those, held later without a write

    @property
    def dtype(self) -> str:
        return "f16"

    def free_blocks(self) -> int:
        if self._adapter.shared:
            raise NotObservable(SHARED)
        if self._free_at_open is None:
            raise NotObservable(NO_INFO)
        used = self._free_at_open - self._adapter.server_info().free_blocks
        return self.capacity - used - self._unsent

    def _room_for(self, n_blocks: int, what: str) -> None:
        if self._adapter.shared:
            # Other clients use the server: only this pool's own count can say it is full.
            if self.capacity - self._stored - self._unsent < n_blocks:
                raise NotObservable(
                    f"{what}: the case's pool of {self.capacity} blocks would be full, but over "
                    "a shared server running out of blocks cannot be observed"
                )
            return
        if self._free_at_open is None:
            return  # a refusal for want of room then fails the case with its own status
        server_free = self._adapter.server_info().free_blocks
        if server_free < n_blocks:
            raise NotObservable(
                f"{what}: the server has {server_free} free blocks, this stores {n_blocks}: "
                "start it with more room (docs/grpc.md says how much a run needs)"
            )
        free = self.free_blocks()
        if free < n_blocks:
            raise NotObservable(
                f"{what}: the case's pool of {self.capacity} blocks has {free} free, but the "
                "server's pool is larger, so running out of blocks cannot be observed"
            )

    def write(self, block_hash: int, n_tokens: int, values: np.ndarray) -> int:
        b = self.geometry.block_tokens
        if not 1 <= n_tokens <= b or (block_hash and n_tokens != b):
            raise NotObservable(
                f"write(hash {block_hash:#x}, n_tokens {n_tokens}) with B = {b}: a pool write's "
                "argument check has no tl.kv.v1 counterpart (pushing such a block is a "
                "reader-rule case)"
            )
        self._room_for(1, "write")
        block = oracle.Block(block_hash, n_tokens, np.asarray(values, dtype=np.float32))
        payload = oracle.encode(self.geometry, [block], 1)
        self._adapter.fits(payload, f"write(hash {block_hash:#x})")
        ids = self._remember(self._stored_here([(block_hash, payload, 1)]))
        return ids[0]

    def write_preload(self, block_hash: int, n_tokens: int, values: np.ndarray) -> int:
        """A block a case starts from, written as a prefill engine would not write it twice:
        one this run already pushed, and the server still holds, is reused; an unregistered
        one (which tl.kv.v1 cannot reach, so no case can look at it) is not sent. A long run
        against one server then stores a few blocks for all its rejection cases, not two each."""
        if block_hash == 0:
            self._unsent += 1
            return self._adapter._new_id(_Known(0, None))
        block = oracle.Block(block_hash, n_tokens, np.asarray(values, dtype=np.float32))
        payload = oracle.encode(self.geometry, [block], 1)
        record = payload[oracle.HEADER_SIZE : -oracle.CRC_SIZE]
        reused = self._adapter._preloaded.get((block_hash, record))
        if reused is not None and self._adapter.has_blocks([block_hash]) == [True]:
            self._unsent += 1
            return self._remember([reused])[0]
        block_id = self.write(block_hash, n_tokens, values)
        self._adapter._preloaded[block_hash, record] = block_id
        return block_id

    def _remember(self, ids: list[int]) -> list[int]:
        for block in ids:
            block_hash = self._adapter._known(block).block_hash
            if block_hash:
                self._written.setdefault(block_hash, block)
        return ids

    def read(self, block: int) -> ReadBack:
        block_hash = self._adapter._reachable_hash(block, f"read({block})")
        (chunk,) = self._adapter.pull([block_hash], 1)
        envelope = self._decode_pulled(chunk.payload, 1, f"read({block})")
        (record,) = envelope.records
        return ReadBack(record.block_hash, record.n_tokens, record.decoded.values)

    def find(self, block_hash: int) -> int:
        (held,) = self._adapter.has_blocks([block_hash])
        if not held:
            self._seen_unheld.add(block_hash)
            raise Refused("NOT_FOUND", f"find({block_hash:#x})", "HasBlocks says it is not held")
        if block_hash in self._written:
            # The block this pool wrote, if the hash reaches it alone.
            block = self._written[block_hash]
            self._adapter._reachable_hash(block, f"find({block_hash:#x})")
            return block
        if block_hash in self._seen_unheld:
            # Not held earlier in this case, held now, yet no write or import of this pool
            # returned it: something this case did registered it (a refused import, say).
            if block_hash not in self._registered_since:
                self._registered_since[block_hash] = self._adapter._new_id(_Known(block_hash, None))
            return self._registered_since[block_hash]
        # Held, but not through this pool: an earlier case (or run) left it on the server. A
        # fresh pool would not find it, and whether this one would cannot be observed.
        raise NotObservable(
            f"find({block_hash:#x}): the server holds it from outside this case's pool (an "
            "earlier case or run), so what this pool would answer cannot be observed"
        )

    def release(self, block: int) -> None:
        raise NotObservable(
            "tl.kv.v1 has no way to release a block, so releases and what follows them cannot "
            "be observed"
        )

    def export_bytes(self, n_blocks: int, version: int) -> int:
        # tl.kv.v1 has no size query: this is the spec's formula; an export that follows checks
        # the real size of what the server sends.
        if version not in self._adapter.info().write_versions:
            return 0
        return self.geometry.envelope_size(n_blocks, version)

    def export(self, blocks: list[int], version: int) -> bytes:
        if len(blocks) != 1:
            raise NotObservable(
                f"an export of {len(blocks)} blocks in one envelope cannot be observed: "
                "PullKv streams one-block envelopes"
            )
        if version not in self._adapter.info().write_versions:
            raise NotObservable(
                f"v{version} is not a version the server reads, and how it refuses an export "
                "in it has no C counterpart over tl.kv.v1"
            )
        block_hash = self._adapter._reachable_hash(blocks[0], f"export v{version}")
        (chunk,) = self._adapter.pull([block_hash], version)
        return chunk.payload

    def import_envelope(self, data: bytes, max_blocks: int) -> list[int]:
        data = bytes(data)
        adapter = self._adapter
        profile = oracle.ReaderProfile(self.geometry, adapter.read_versions)
        violations = oracle.find_violations(data, profile)
        if violations:
            return self._push_as_is(data, oracle.Rejected(violations))
        envelope = oracle.decode(data, profile)
        n = envelope.n_blocks
        if n == 0:
            raise NotObservable(
                "an envelope of 0 blocks has no tl.kv.v1 counterpart (each chunk carries one)"
            )
        if n > max_blocks:
            raise NotObservable(
                f"{n} blocks, max_blocks {max_blocks}: PushKv has no max_blocks, so that "
                "refusal cannot be observed"
            )
        self._room_for(n, "import")
        # A valid envelope travels as the transfer moves it: one chunk per block, in order, in
        # one stream; each chunk's payload is that block's record in a one-block envelope.
        header = oracle.encode_header(self.geometry, envelope.version, 1)
        record_size = self.geometry.record_size(envelope.version)
        singles = []
        for record in envelope.records:
            body = header + data[record.offset : record.offset + record_size]
            payload = oracle.seal(body)
            adapter.fits(payload, "import")
            singles.append((record.block_hash, payload, envelope.version))
        return self._remember(self._stored_here(singles))

    def _stored_here(self, blocks: Sequence[tuple[int, bytes, int]]) -> list[int]:
        """Push blocks for this pool; a payload the server shared with a held block occupies
        a block of the case's pool all the same (a fresh pool would have allocated one)."""
        ids, shared = self._adapter._store(blocks)
        self._stored += len(ids) - shared
        self._unsent += shared
        return ids

    def _push_as_is(self, data: bytes, rejected: oracle.Rejected) -> list[int]:
        """Replay an envelope the oracle rejects as one chunk, exactly as the case made it."""
        if not data:
            raise NotObservable(
                "a 0-byte envelope cannot be sent over tl.kv.v1: an empty payload means "
                "'use your cached copy of block_hash'"
            )
        # Over 4 MiB the chunk limit answers first (XFER-CHUNK-SIZE), whatever rule it breaks.
        self._adapter.fits(data, f"an envelope breaking {', '.join(sorted(rejected.rule_ids))}")
        n_blocks = _header_field(data, "n_blocks")
        rules = ", ".join(sorted(rejected.rule_ids))
        several = n_blocks is not None and n_blocks != 1
        if several and "FAILED_PRECONDITION" in rejected.grpc_statuses:
            raise NotObservable(
                f"the envelope has n_blocks {n_blocks}, which PushKv refuses with DATA_LOSS "
                f"(XFER-CHUNK-ONE) whatever else is wrong, so the FAILED_PRECONDITION of {rules} "
                "cannot be observed apart from it"
            )
        version = _header_field(data, "version")
        chunk = Chunk.of_payload(
            0,
            1 if version is None else version,  # a payload too short to say: the format all read
            _first_record_hash(data),
            data,
            self._adapter.new_request_id(),
        )
        try:
            counts = self._adapter.push([chunk])
        except Refused as refusal:
            if several:
                raise Refused(
                    refusal.code,
                    refusal.call,
                    f"{refusal.detail} [the payload has n_blocks {n_blocks}: DATA_LOSS is due "
                    f"for XFER-CHUNK-ONE as well as for {rules}]",
                ) from None
            raise
        # Accepted: hand out ids for what the server says it stored, so the case reports it.
        return [self._adapter._new_id(_Known(0, None)) for _ in range(counts.blocks_stored or 1)]

    def _decode_pulled(self, payload: bytes, version: int, what: str) -> oracle.Envelope:
        profile = oracle.ReaderProfile(self.geometry, frozenset({version}))
        try:
            envelope = oracle.decode(payload, profile)
        except oracle.Rejected as exc:
            raise ImplementationFault(
                f"{what}: PullKv sent an unreadable envelope: {exc}"
            ) from None
        if envelope.n_blocks != 1:
            raise ImplementationFault(
                f"{what}: PullKv sent an envelope of {envelope.n_blocks} blocks, not 1"
            )
        return envelope
