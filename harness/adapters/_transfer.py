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

    def pulled(self, hashes: Sequence[int], kv_format: int, offered: bool = False) -> list[Chunk]:
        """PullKv's chunks in the order the server streamed them (crc32c fields checked); a
        stream failing after some chunks is a fault. `offered`: PullKv is known to be offered
        (UNIMPLEMENTED is then a refusal)."""
        ...


def check_fits(payload: bytes, what: str) -> None:
    """A payload the suite can send: a chunk carries at most 4 MiB. Past that the limit is the
    transport's, not a fault of the server: the case cannot be observed this way."""
    if len(payload) > oracle.MAX_CHUNK_PAYLOAD:
        raise NotObservable(
            f"{what}: a one-block envelope of this geometry is {len(payload)} bytes, more "
            f"than one tl.kv.v1 chunk carries ({oracle.MAX_CHUNK_PAYLOAD})"
        )


# -- the prefill side under test ----------------------------------------------------------------


@dataclass(frozen=True)
class PrefillJob:
    """One push a prefill client under test makes (docs/contract.md, "A prefill client"): to
    the decode server at `target`, the prompt `tokens` as one PushKv stream `request_id`,
    envelopes of version `kv_format`, within `deadline` seconds. `kv_path` is an envelope file
    the suite wrote with the oracle holding every block of the prompt (full blocks with their
    hashes, then the partial tail), in version 1, so every payload can be checked byte for byte;
    None asks for the engine's own KV of the tokens, whose payloads only structure can check."""

    target: str
    request_id: str
    tokens: tuple[int, ...]
    geometry: oracle.Geometry
    kv_format: int
    deadline: float
    kv_path: str | None

    def as_message(self) -> dict[str, object]:
        """The job as the client's `push` receives it: plain values only (JSON's)."""
        g = self.geometry
        return {
            "target": self.target,
            "request_id": self.request_id,
            "tokens": list(self.tokens),
            "block_tokens": g.block_tokens,
            "n_layers": g.n_layers,
            "n_kv_heads": g.n_kv_heads,
            "head_dim": g.head_dim,
            "kv_format": self.kv_format,
            "deadline": self.deadline,
            "kv_path": self.kv_path,
        }


@dataclass(frozen=True)
class PrefillResult:
    """What a prefill client says its push did: `status` "OK" with the server's counts, or the
    gRPC status name the push ended with (the counts then 0)."""

    status: str
    counts: PushCounts

    @classmethod
    def of_message(cls, message: object) -> PrefillResult:
        """The client's answer; ValueError saying what is wrong with one that is not one."""
        if not isinstance(message, dict):
            raise ValueError(f"push returned {type(message).__name__}, not a dict")
        status = message.get("status")
        if not isinstance(status, str) or not status:
            raise ValueError(f"push returned status {status!r}, not a gRPC status name")
        numbers = []
        for key in ("blocks_stored", "blocks_reused", "payload_bytes"):
            value = message.get(key, 0)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"push returned {key} {value!r}, not a count")
            numbers.append(value)
        return cls(status, PushCounts(*numbers))


class PrefillClient(Protocol):
    """A prefill client under test: it pushes one job and says how it went. Its crash, hang or
    wrong answer raises `ImplementationFault`."""

    deadline: float  # seconds a job gives the client: within the wait for its answer

    def push(self, job: PrefillJob) -> PrefillResult: ...
