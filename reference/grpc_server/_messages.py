"""The tl.kv.v1 messages, built at import time from the contract's table (CONTRACT section 3).

The reference server deliberately does not use the suite's generated stubs: building the
descriptors here from the table means a wrong field number in either the suite's .proto or this
table shows up as the suite and the server failing to understand each other.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

PACKAGE = "tl.kv.v1"
SERVICE = f"{PACKAGE}.KvTransfer"

_T = descriptor_pb2.FieldDescriptorProto
_TYPES = {
    "string": _T.TYPE_STRING,
    "bytes": _T.TYPE_BYTES,
    "bool": _T.TYPE_BOOL,
    "uint32": _T.TYPE_UINT32,
    "uint64": _T.TYPE_UINT64,
    "fixed32": _T.TYPE_FIXED32,
    "fixed64": _T.TYPE_FIXED64,
}

# message -> [(number, type, name, repeated)], as the contract's table lists them.
TABLE: dict[str, list[tuple[int, str, str, bool]]] = {
    "HasBlocksRequest": [(1, "fixed64", "block_hashes", True)],
    "HasBlocksResponse": [(1, "bool", "held", True)],
    "KvChunk": [
        (1, "string", "request_id", False),
        (2, "uint32", "index", False),
        (3, "uint32", "kv_format", False),
        (4, "fixed64", "block_hash", False),
        (5, "bytes", "payload", False),
        (6, "fixed32", "crc32c", False),
    ],
    "PushKvResponse": [
        (1, "uint32", "blocks_stored", False),
        (2, "uint32", "blocks_reused", False),
        (3, "uint64", "payload_bytes", False),
    ],
    "GetInfoRequest": [],
    "PoolInfo": [
        (1, "uint32", "block_tokens", False),
        (2, "uint32", "n_layers", False),
        (3, "uint32", "n_kv_heads", False),
        (4, "uint32", "head_dim", False),
        (5, "uint32", "read_versions", True),
        (6, "uint32", "free_blocks", False),
    ],
    "PullKvRequest": [(1, "fixed64", "block_hashes", True), (2, "uint32", "kv_format", False)],
}


def _build() -> dict[str, Any]:
    file = descriptor_pb2.FileDescriptorProto(
        # A name of its own, in a pool of its own: no clash with the suite's generated stubs
        # when both are imported into one process.
        name="reference/grpc_server/tl_kv_v1.proto",
        package=PACKAGE,
        syntax="proto3",
    )
    for message_name, fields in TABLE.items():
        message = file.message_type.add(name=message_name)
        for number, type_name, field_name, repeated in fields:
            message.field.add(
                name=field_name,
                number=number,
                type=_TYPES[type_name],
                label=_T.LABEL_REPEATED if repeated else _T.LABEL_OPTIONAL,
            )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{PACKAGE}.{name}"))
        for name in TABLE
    }


_CLASSES = _build()
HasBlocksRequest = _CLASSES["HasBlocksRequest"]
HasBlocksResponse = _CLASSES["HasBlocksResponse"]
KvChunk = _CLASSES["KvChunk"]
PushKvResponse = _CLASSES["PushKvResponse"]
GetInfoRequest = _CLASSES["GetInfoRequest"]
PoolInfo = _CLASSES["PoolInfo"]
PullKvRequest = _CLASSES["PullKvRequest"]
