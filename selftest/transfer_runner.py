"""A minimal runner of histories.json's transfer histories (docs/vectors.md) against a tl.kv.v1
server, written from the doc alone: the standard library, grpcio and the stubs generated from
the proto (any engine generates its own), nothing else of tlkv_conformance. Every expectation
comes from the JSON; this module only calls the server and compares. The self-test runs it
against the bundled reference server (all must hold) and against planted server mistakes. It
asks GetInfo for the server's geometry and versions, so it needs a server offering GetInfo (and
PullKv); a harness for a server without them would skip the steps and histories that need them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from tlkv_conformance.grpc_stubs import kv_pb2, kv_pb2_grpc

DEADLINE_SECONDS = 30


@dataclass(frozen=True)
class Outcome:
    source: str
    level: str
    verdict: str  # passed | failed | skipped
    reason: str = ""


class StepFailed(Exception):
    pass


class Server:
    """One tl.kv.v1 server, and what its GetInfo says it is."""

    def __init__(self, address: str) -> None:
        self.channel = grpc.insecure_channel(address)
        self.stub = kv_pb2_grpc.KvTransferStub(self.channel)
        info = self.stub.GetInfo(kv_pb2.GetInfoRequest(), timeout=DEADLINE_SECONDS)
        self.geometry = {
            "block_tokens": info.block_tokens,
            "n_layers": info.n_layers,
            "n_kv_heads": info.n_kv_heads,
            "head_dim": info.head_dim,
        }
        self.read_versions = set(info.read_versions)
        self.streams = 0

    def new_request_id(self) -> str:
        self.streams += 1
        return f"transfer-runner-{self.streams}"

    def close(self) -> None:
        self.channel.close()


def run_history(server: Server, history: dict[str, Any]) -> Outcome:
    """One transfer history against a server that holds none of its blocks: passed, failed
    (with the step and what differed) or skipped (the history is not for this server)."""
    source, level = history["source"], history["level"]
    if history["geometry"] != server.geometry:
        return Outcome(source, level, "skipped", f"for a server of {history['geometry']}")
    only = history["only_for_read_versions"]
    if only is not None and set(only) != server.read_versions:
        return Outcome(source, level, "skipped", f"for a reader of {only} only")
    version = history["needs_read_version"]
    if version is not None and version not in server.read_versions:
        return Outcome(source, level, "skipped", f"transfers v{version}")
    mark: list[int] = []
    for number, step in enumerate(history["steps"], 1):
        try:
            _STEPS[step["op"]](server, step, mark)
        except StepFailed as failure:
            return Outcome(source, level, "failed", f"step {number} ({step['op']}): {failure}")
        except grpc.RpcError as error:  # an rpc refused that only a push may refuse
            reason = f"step {number} ({step['op']}): {error.code().name} {error.details()}"
            return Outcome(source, level, "failed", reason)
    return Outcome(source, level, "passed")


def _hashes(step: dict[str, Any]) -> list[int]:
    return [int(h, 16) for h in step["hashes"]]


def _has_blocks(server: Server, step: dict[str, Any], _mark: list[int]) -> None:
    request = kv_pb2.HasBlocksRequest(block_hashes=_hashes(step))
    got = list(server.stub.HasBlocks(request, timeout=DEADLINE_SECONDS).held)
    want = step["expect"]["held"]
    wrong = len(got) != len(want) or any(
        w is not None and g != w for g, w in zip(got, want, strict=True)
    )
    if wrong:
        raise StepFailed(f"held {got}, expected {want} (null: either)")


def _push(server: Server, step: dict[str, Any], _mark: list[int]) -> None:
    request_id = server.new_request_id()

    def chunks() -> Iterator[Any]:
        for chunk in step["chunks"]:
            yield kv_pb2.KvChunk(
                request_id=request_id,
                index=chunk["index"],
                kv_format=chunk["kv_format"],
                block_hash=int(chunk["block_hash"], 16),
                payload=bytes.fromhex(chunk["payload_hex"]),
                crc32c=int(chunk["crc32c"], 16),
            )

    expect = step["expect"]
    try:
        response = server.stub.PushKv(chunks(), timeout=DEADLINE_SECONDS)
    except grpc.RpcError as error:
        status = error.code().name
        if status not in expect["status"]:
            raise StepFailed(f"refused with {status}, expected {expect['status']}") from None
        return
    if "OK" not in expect["status"]:
        raise StepFailed(f"accepted, expected a refusal with any of {expect['status']}")
    got = (response.blocks_stored, response.blocks_reused, response.payload_bytes)
    want = (expect["blocks_stored"], expect["blocks_reused"], expect["payload_bytes"])
    if got != want:
        raise StepFailed(f"blocks_stored, blocks_reused, payload_bytes {got}, expected {want}")


def _free_blocks(server: Server, step: dict[str, Any], mark: list[int]) -> None:
    free = server.stub.GetInfo(kv_pb2.GetInfoRequest(), timeout=DEADLINE_SECONDS).free_blocks
    if step.get("mark"):
        mark[:] = [free]
        return
    least, most = step["expect"]["drop"]
    if not least <= mark[0] - free <= most:
        raise StepFailed(f"free_blocks fell by {mark[0] - free}, expected {least}..{most}")


def _pull(server: Server, step: dict[str, Any], _mark: list[int]) -> None:
    request = kv_pb2.PullKvRequest(block_hashes=_hashes(step), kv_format=step["kv_format"])
    expect = step["expect"]
    chunks: list[Any] = []
    try:
        chunks.extend(server.stub.PullKv(request, timeout=DEADLINE_SECONDS))
    except grpc.RpcError as error:
        status = error.code().name
        if chunks:
            raise StepFailed(f"streamed {len(chunks)} chunks, then failed with {status}") from None
        if status not in expect.get("status", ()):
            raise StepFailed(
                f"failed with {status}, expected {expect.get('status', 'OK')}"
            ) from None
        return
    if "status" in expect:
        raise StepFailed(f"streamed {len(chunks)} chunks, expected to fail with {expect['status']}")
    if "block_hashes" in expect:
        got = [f"{c.block_hash:016x}" for c in chunks]
        if got != expect["block_hashes"]:
            raise StepFailed(
                f"blocks streamed in the order {got}, expected {expect['block_hashes']}"
            )
    if "indexes" in expect:
        index_of = {c.block_hash: c.index for c in chunks}
        got_indexes = [index_of.get(asked) for asked in _hashes(step)]
        if got_indexes != expect["indexes"]:
            raise StepFailed(f"chunks numbered {got_indexes}, expected {expect['indexes']}")
    if "payloads_hex" in expect:
        by_hash = {c.block_hash: c.payload.hex() for c in chunks}
        wanted = zip(_hashes(step), expect["payloads_hex"], strict=True)
        for index, (asked, want) in enumerate(wanted):
            if by_hash.get(asked) != want:
                raise StepFailed(f"block {index}'s payload differs from the expected envelope")


_STEPS = {"has_blocks": _has_blocks, "push": _push, "free_blocks": _free_blocks, "pull": _pull}


def run_file(address: str, histories_json: Path) -> list[Outcome]:
    """Every transfer history of a histories.json against one server (each once: a server keeps
    the blocks it stored, so a second pass would find them held)."""
    document = json.loads(histories_json.read_text(encoding="ascii"))
    server = Server(address)
    try:
        return [run_history(server, h) for h in document["vectors"] if h["kind"] == "transfer"]
    finally:
        server.close()
