"""A misbehaving tl.kv.v1 server: the reference server (same options, same first line
`listening on HOST:PORT`) with one fault of `--fault`, for selftest/test_hostile.py.

- `stall-METHOD` (HasBlocks, PushKv, GetInfo, PullKv): every call of METHOD is taken (PushKv
  reads its whole stream) and never answered;
- `stall-long-PushKv`: a PushKv stream of 2 or more chunks is read and never answered, one of
  a single chunk is answered as the reference does;
- `die-mid-push`: the second PushKv stream ends the server after its first chunk, so the
  connection breaks mid-push and nothing listens any more;
- `huge-empty-pull`: a PullKv of no blocks (the suite's capability probe) answers with a
  64 MiB chunk;
- `malformed-push-answer`: PushKv stores the stream and answers with bytes that do not parse.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any

import grpc
from tlkv_conformance.references.grpc_server import __main__ as reference
from tlkv_conformance.references.grpc_server import _messages as pb

METHODS = ("HasBlocks", "PushKv", "GetInfo", "PullKv")
FAULTS = (
    *(f"stall-{m}" for m in METHODS),
    "stall-long-PushKv",
    "die-mid-push",
    "huge-empty-pull",
    "malformed-push-answer",
)
HUGE_EMPTY_PULL_BYTES = 64 * 1024 * 1024
# A varint cut off after its first byte: no protobuf parser reads it.
MALFORMED = b"\x08\xff"


def _stall(context: grpc.ServicerContext) -> None:
    """Hold the call until the client gives up on it."""
    while context.is_active():
        time.sleep(0.05)


class HostileServer(reference.KvTransferServer):
    _pushes = 0

    def has_blocks(self, request: Any, context: grpc.ServicerContext) -> Any:
        if self._fault == "stall-HasBlocks":
            _stall(context)
        return super().has_blocks(request, context)

    def push_kv(self, chunks: Iterable[Any], context: grpc.ServicerContext) -> Any:
        if self._fault == "stall-PushKv":
            for _ in chunks:
                pass
            _stall(context)
        if self._fault == "stall-long-PushKv":
            taken = list(chunks)
            if len(taken) >= 2:
                _stall(context)
            chunks = taken
        if self._fault == "die-mid-push":
            self._pushes += 1
            if self._pushes == 2:
                next(iter(chunks))
                os._exit(3)
        return super().push_kv(chunks, context)

    def get_info(self, request: Any, context: grpc.ServicerContext) -> Any:
        if self._fault == "stall-GetInfo":
            _stall(context)
        return super().get_info(request, context)

    def pull_kv(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        if self._fault == "stall-PullKv":
            _stall(context)
            return
        if self._fault == "huge-empty-pull" and not request.block_hashes:
            payload = bytes(HUGE_EMPTY_PULL_BYTES)
            yield pb.KvChunk(kv_format=request.kv_format, payload=payload)
            return
        yield from super().pull_kv(request, context)


def _method_handlers(server: HostileServer, extensions: bool) -> dict[str, Any]:
    handlers = reference_method_handlers(server, extensions)
    if server._fault == "malformed-push-answer":
        handlers["PushKv"] = grpc.stream_unary_rpc_method_handler(
            server.push_kv,
            request_deserializer=pb.KvChunk.FromString,
            response_serializer=lambda response: MALFORMED,
        )
    return handlers


reference_method_handlers = reference.method_handlers

if __name__ == "__main__":
    reference.FAULTS = FAULTS
    reference.KvTransferServer = HostileServer
    reference.method_handlers = _method_handlers
    sys.exit(reference.main())
