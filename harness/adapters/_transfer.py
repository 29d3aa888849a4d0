"""The tl.kv.v1 transfer as the suite plays it, whatever carries it (docs/grpc.md): a chunk, a
push's answer, a server's description, and `Transfer`, the operations a transfer case uses.

Nothing here imports grpcio: a case kind, a report or a scripted peer can use these types
without it. `_grpc_client.TransferClient` is the `Transfer` of a decode server reached over
gRPC; `Adapter.transfer` hands it to the cases (None for a way in without tl.kv.v1). The size
limits are the oracle's (`oracle.MAX_CHUNK_PAYLOAD`, `oracle.CHUNK_RECEIVE_LIMIT`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from .. import oracle
from ..errors import NotObservable


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
    """A PushKvResponse: what the decode side says one PushKv stream did."""

    blocks_stored: int
    blocks_reused: int
    payload_bytes: int


@dataclass(frozen=True)
class ServerInfo:
    """A PoolInfo (GetInfo)."""

    geometry: oracle.Geometry
    read_versions: frozenset[int]
    free_blocks: int


class Transfer(Protocol):
    """A decode server's side of tl.kv.v1, with the suite as its prefill side.

    A refusal raises `Refused` (its gRPC status name); the server's fault (a hang, a broken
    connection, an answer that does not parse) `ImplementationFault`; an optional rpc the
    server does not offer `NotObservable`."""

    geometry: oracle.Geometry  # the server's one pool
    read_versions: frozenset[int]
    has_info: bool  # GetInfo is offered
    has_pull: bool  # PullKv is offered
    # Other clients use the server too: its free-block count is not this run's to observe.
    shared: bool

    def new_request_id(self) -> str:
        """A request id no other stream of this run uses."""
        ...

    def has_blocks(self, hashes: Sequence[int]) -> list[bool]:
        """HasBlocks: whether each hash is held, in the order asked."""
        ...

    def push(self, chunks: Sequence[Chunk]) -> PushCounts:
        """One PushKv stream of `chunks`, sent as they are."""
        ...

    def server_info(self) -> ServerInfo:
        """GetInfo."""
        ...

    def pull(self, hashes: Sequence[int], kv_format: int) -> list[Chunk]:
        """PullKv, its chunks in the order asked (each chunk's crc32c field and hash checked)."""
        ...

    def pulled(self, hashes: Sequence[int], kv_format: int) -> list[Chunk]:
        """PullKv's chunks in the order the server streamed them (crc32c fields checked)."""
        ...


def check_fits(payload: bytes, what: str) -> None:
    """A payload the suite can send: a chunk carries at most 4 MiB. Past that the limit is the
    transport's, not a fault of the server: the case cannot be observed this way."""
    if len(payload) > oracle.MAX_CHUNK_PAYLOAD:
        raise NotObservable(
            f"{what}: a one-block envelope of this geometry is {len(payload)} bytes, more "
            f"than one tl.kv.v1 chunk carries ({oracle.MAX_CHUNK_PAYLOAD})"
        )
