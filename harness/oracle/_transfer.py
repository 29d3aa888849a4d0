"""The tl.kv.v1 transfer's size limits (spec, "Transfer"; docs/grpc.md)."""

# A KvChunk's payload is one envelope of at most 4 MiB; one of exactly 4 MiB is accepted.
MAX_CHUNK_PAYLOAD = 4 * 1024 * 1024
# The largest message a tl.kv.v1 endpoint receives: a 4 MiB payload plus every other KvChunk
# field (a request id of up to ~64 KiB). A payload over the limit is then refused by the
# transfer's own rule, and an answer past it cannot hold up the one receiving it.
CHUNK_RECEIVE_LIMIT = MAX_CHUNK_PAYLOAD + 64 * 1024
