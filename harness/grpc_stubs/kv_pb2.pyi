# Regenerate with `python -m tlkv_conformance.generators.gen_grpc_stubs`.
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class HasBlocksRequest(_message.Message):
    __slots__ = ("block_hashes",)
    BLOCK_HASHES_FIELD_NUMBER: _ClassVar[int]
    block_hashes: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, block_hashes: _Optional[_Iterable[int]] = ...) -> None: ...

class HasBlocksResponse(_message.Message):
    __slots__ = ("held",)
    HELD_FIELD_NUMBER: _ClassVar[int]
    held: _containers.RepeatedScalarFieldContainer[bool]
    def __init__(self, held: _Optional[_Iterable[bool]] = ...) -> None: ...

class KvChunk(_message.Message):
    __slots__ = ("request_id", "index", "kv_format", "block_hash", "payload", "crc32c")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    KV_FORMAT_FIELD_NUMBER: _ClassVar[int]
    BLOCK_HASH_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    CRC32C_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    index: int
    kv_format: int
    block_hash: int
    payload: bytes
    crc32c: int
    def __init__(self, request_id: _Optional[str] = ..., index: _Optional[int] = ..., kv_format: _Optional[int] = ..., block_hash: _Optional[int] = ..., payload: _Optional[bytes] = ..., crc32c: _Optional[int] = ...) -> None: ...

class PushKvResponse(_message.Message):
    __slots__ = ("blocks_stored", "blocks_reused", "payload_bytes")
    BLOCKS_STORED_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_REUSED_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_BYTES_FIELD_NUMBER: _ClassVar[int]
    blocks_stored: int
    blocks_reused: int
    payload_bytes: int
    def __init__(self, blocks_stored: _Optional[int] = ..., blocks_reused: _Optional[int] = ..., payload_bytes: _Optional[int] = ...) -> None: ...

class GetInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PoolInfo(_message.Message):
    __slots__ = ("block_tokens", "n_layers", "n_kv_heads", "head_dim", "read_versions", "free_blocks")
    BLOCK_TOKENS_FIELD_NUMBER: _ClassVar[int]
    N_LAYERS_FIELD_NUMBER: _ClassVar[int]
    N_KV_HEADS_FIELD_NUMBER: _ClassVar[int]
    HEAD_DIM_FIELD_NUMBER: _ClassVar[int]
    READ_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    FREE_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    block_tokens: int
    n_layers: int
    n_kv_heads: int
    head_dim: int
    read_versions: _containers.RepeatedScalarFieldContainer[int]
    free_blocks: int
    def __init__(self, block_tokens: _Optional[int] = ..., n_layers: _Optional[int] = ..., n_kv_heads: _Optional[int] = ..., head_dim: _Optional[int] = ..., read_versions: _Optional[_Iterable[int]] = ..., free_blocks: _Optional[int] = ...) -> None: ...

class PullKvRequest(_message.Message):
    __slots__ = ("block_hashes", "kv_format")
    BLOCK_HASHES_FIELD_NUMBER: _ClassVar[int]
    KV_FORMAT_FIELD_NUMBER: _ClassVar[int]
    block_hashes: _containers.RepeatedScalarFieldContainer[int]
    kv_format: int
    def __init__(self, block_hashes: _Optional[_Iterable[int]] = ..., kv_format: _Optional[int] = ...) -> None: ...
