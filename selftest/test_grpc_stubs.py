"""The committed tl.kv.v1 stubs are what generators/gen_grpc_stubs.py makes from the .proto."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from generators import gen_grpc_stubs


def _generated_with(path: Path) -> str | None:
    match = re.search(r"^GRPC_GENERATED_VERSION = '([^']+)'", path.read_text(), re.MULTILINE)
    return match.group(1) if match else None


def test_committed_stubs_are_current(tmp_path: Path) -> None:
    try:
        installed = gen_grpc_stubs.grpc_tools_version()
    except gen_grpc_stubs.GenerationError as exc:
        pytest.skip(f"cannot regenerate the stubs: {exc}")
    committed = _generated_with(gen_grpc_stubs.STUBS_DIR / "kv_pb2_grpc.py")
    if committed != installed:
        # Another grpcio-tools writes other version stamps: comparing would only show those.
        pytest.skip(
            f"the stubs were generated with grpcio-tools {committed}, {installed} is installed"
        )
    gen_grpc_stubs.generate(tmp_path)
    for name in gen_grpc_stubs.GENERATED:
        fresh = (tmp_path / name).read_text()
        current = (gen_grpc_stubs.STUBS_DIR / name).read_text()
        assert fresh == current, (
            f"harness/grpc_stubs/{name} is stale: run "
            "python -m tlkv_conformance.generators.gen_grpc_stubs"
        )


def test_stubs_import_without_grpc_tools_on_the_path() -> None:
    # The package must not need harness/grpc_stubs on sys.path (the generated import is relative).
    from tlkv_conformance.grpc_stubs import kv_pb2, kv_pb2_grpc

    assert kv_pb2.DESCRIPTOR.package == "tl.kv.v1"
    assert hasattr(kv_pb2_grpc, "KvTransferStub")


def test_fields_match_the_contract() -> None:
    # CONTRACT section 3: number, type and label of every field are part of the wire contract.
    from google.protobuf.descriptor import FieldDescriptor as F
    from tlkv_conformance.grpc_stubs import kv_pb2

    one, many = False, True  # repeated?
    expected = {
        "HasBlocksRequest": {"block_hashes": (1, F.TYPE_FIXED64, many)},
        "HasBlocksResponse": {"held": (1, F.TYPE_BOOL, many)},
        "KvChunk": {
            "request_id": (1, F.TYPE_STRING, one),
            "index": (2, F.TYPE_UINT32, one),
            "kv_format": (3, F.TYPE_UINT32, one),
            "block_hash": (4, F.TYPE_FIXED64, one),
            "payload": (5, F.TYPE_BYTES, one),
            "crc32c": (6, F.TYPE_FIXED32, one),
        },
        "PushKvResponse": {
            "blocks_stored": (1, F.TYPE_UINT32, one),
            "blocks_reused": (2, F.TYPE_UINT32, one),
            "payload_bytes": (3, F.TYPE_UINT64, one),
        },
        "GetInfoRequest": {},
        "PoolInfo": {
            "block_tokens": (1, F.TYPE_UINT32, one),
            "n_layers": (2, F.TYPE_UINT32, one),
            "n_kv_heads": (3, F.TYPE_UINT32, one),
            "head_dim": (4, F.TYPE_UINT32, one),
            "read_versions": (5, F.TYPE_UINT32, many),
            "free_blocks": (6, F.TYPE_UINT32, one),
        },
        "PullKvRequest": {
            "block_hashes": (1, F.TYPE_FIXED64, many),
            "kv_format": (2, F.TYPE_UINT32, one),
        },
    }
    assert kv_pb2.DESCRIPTOR.package == "tl.kv.v1"
    assert set(kv_pb2.DESCRIPTOR.message_types_by_name) == set(expected)
    for name, fields in expected.items():
        descriptor = kv_pb2.DESCRIPTOR.message_types_by_name[name]
        got = {f.name: (f.number, f.type, f.is_repeated) for f in descriptor.fields}
        assert got == fields, name
    service = kv_pb2.DESCRIPTOR.services_by_name["KvTransfer"]
    methods = {
        m.name: (m.input_type.name, m.output_type.name, m.client_streaming, m.server_streaming)
        for m in service.methods
    }
    assert methods == {
        "HasBlocks": ("HasBlocksRequest", "HasBlocksResponse", False, False),
        "PushKv": ("KvChunk", "PushKvResponse", True, False),
        "GetInfo": ("GetInfoRequest", "PoolInfo", False, False),
        "PullKv": ("PullKvRequest", "KvChunk", False, True),
    }
