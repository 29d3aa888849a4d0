"""The reference prefill client of tl.kv.v1: a module with the prefill-client protocol
(docs/contract.md, "A prefill client"), run by
`--impl=prefill-py:tlkv_conformance.references.prefill_client`.

It pushes one prompt as the spec's "Transfer" says: HasBlocks for the full-block hashes first,
then one PushKv stream with a chunk per block in order, an empty payload for each block the
decode side holds, a one-block envelope for every other block and the partial tail. Its codec
is the Python reference's (pyref beside it); its messages the reference server's, built from
the contract's table. Like the reference server it never imports the suite. Where the spec is
silent it does what docs/decisions.md decides ("The prefill side").
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import crc32c
import grpc
import numpy as np

from . import pyref
from .grpc_server import RECEIVE_LIMIT
from .grpc_server import messages as pb

WRITE_VERSIONS = frozenset({1, 2})
_SERVICE = "/tl.kv.v1.KvTransfer/"


class _Stub:
    """The three rpcs a prefill client makes."""

    def __init__(self, channel: grpc.Channel) -> None:
        def unary(name: str, response: Any) -> Any:
            return channel.unary_unary(
                _SERVICE + name,
                request_serializer=lambda m: m.SerializeToString(),
                response_deserializer=response.FromString,
            )

        self.has_blocks = unary("HasBlocks", pb.HasBlocksResponse)
        self.get_info = unary("GetInfo", pb.PoolInfo)
        self.push_kv = channel.stream_unary(
            _SERVICE + "PushKv",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=pb.PushKvResponse.FromString,
        )


def _block_hashes(tokens: Sequence[int], block_tokens: int) -> list[int]:
    """Each block's hash, chained from 0; the partial tail's is 0."""
    hashes, parent = [], 0
    for start in range(0, len(tokens), block_tokens):
        block = tokens[start : start + block_tokens]
        if len(block) < block_tokens:
            hashes.append(0)
            break
        parent = pyref.block_hash(parent, block)
        hashes.append(parent)
    return hashes


def _chunks(
    request_id: str,
    kv_format: int,
    hashes: Sequence[int],
    held: Sequence[bool],
    pool: pyref.Pool,
    blocks: Sequence[int],
) -> Iterator[Any]:
    for index, block_hash in enumerate(hashes):
        reuse = block_hash != 0 and held[index]
        payload = b"" if reuse else pool.export([blocks[index]], kv_format)
        yield pb.KvChunk(
            request_id=request_id,
            index=index,
            kv_format=kv_format,
            block_hash=block_hash,
            payload=payload,
            crc32c=crc32c.crc32c(payload) if payload else 0,
        )


def _failed(error: grpc.RpcError) -> dict[str, Any]:
    return {"status": error.code().name, "blocks_stored": 0, "blocks_reused": 0, "payload_bytes": 0}


def push(job: Mapping[str, Any]) -> dict[str, Any]:
    """Push the job's prompt; the server's counts, or the status the push ended with."""
    ends = time.monotonic() + float(job["deadline"])
    dims = (job["block_tokens"], job["n_layers"], job["n_kv_heads"], job["head_dim"])
    hashes = _block_hashes(job["tokens"], job["block_tokens"])
    n_blocks = -(-len(job["tokens"]) // job["block_tokens"])  # the tail's too
    pool = pyref.Pool(*dims, capacity=max(1, n_blocks))
    if job["kv_path"] is None:
        blocks = _own_kv(pool, hashes, len(job["tokens"]))
    else:
        blocks = pool.import_envelope(Path(job["kv_path"]).read_bytes())
    full = [h for h in hashes if h]
    options = [("grpc.max_receive_message_length", RECEIVE_LIMIT)]
    with grpc.insecure_channel(job["target"], options=options) as channel:
        stub = _Stub(channel)
        held = [False] * len(hashes)
        if full:
            try:
                answer = stub.has_blocks(
                    pb.HasBlocksRequest(block_hashes=full), timeout=ends - time.monotonic()
                )
                held = list(answer.held) + [False] * (len(hashes) - len(answer.held))
            except grpc.RpcError:
                pass  # nothing is confirmed held: every block goes with its payload
        kv_format = int(job["kv_format"])
        tried: set[int] = set()
        while True:
            tried.add(kv_format)
            chunks = _chunks(job["request_id"], kv_format, hashes, held, pool, blocks)
            try:
                response = stub.push_kv(chunks, timeout=ends - time.monotonic())
            except grpc.RpcError as error:
                if error.code() != grpc.StatusCode.FAILED_PRECONDITION:
                    return _failed(error)
                # The server does not read this version: a new stream in one it reads.
                other = _other_version(stub, tried, ends)
                if other is None:
                    return _failed(error)
                kv_format = other
                continue
            return {
                "status": "OK",
                "blocks_stored": response.blocks_stored,
                "blocks_reused": response.blocks_reused,
                "payload_bytes": response.payload_bytes,
            }


def _own_kv(pool: pyref.Pool, hashes: Sequence[int], n_tokens: int) -> list[int]:
    """The engine's own KV of the prompt, asked for by a job without kv_path. The reference has
    no model: its blocks hold zeros (a real engine's are its prefill's keys and values)."""
    blocks = []
    for index, block_hash in enumerate(hashes):
        fill = min(pool.block_tokens, n_tokens - index * pool.block_tokens)
        blocks.append(pool.write(block_hash, fill, np.zeros(pool.shape, dtype=np.float32)))
    return blocks


def _other_version(stub: _Stub, tried: set[int], ends: float) -> int | None:
    """The newest version the server reads (GetInfo) that we write and have not tried."""
    try:
        info = stub.get_info(pb.GetInfoRequest(), timeout=ends - time.monotonic())
    except grpc.RpcError:
        return None
    usable = (set(info.read_versions) & WRITE_VERSIONS) - tried
    return max(usable) if usable else None
