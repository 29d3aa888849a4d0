"""The gRPC way in (`grpc:HOST:PORT[,geometry=BxLxHkvxD][,shared]`): the suite plays the
prefill side of tl.kv.v1 against a decode server (CONTRACT section 3, docs/grpc.md). The
transfer itself is `_grpc_client.TransferClient`, which transfer cases use as it is; this
module is the pool mapped onto it, for every other case.

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

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .. import oracle
from ..errors import ImplementationFault, NotObservable, Refused, WrongCount
from ._base import Adapter, Capability, ImplInfo, PoolHandle, ReadBack
from ._grpc_client import NO_INFO, TransferClient
from ._spec import ImplSpec
from ._transfer import Chunk, check_fits

if TYPE_CHECKING:
    from . import AdapterSettings

SHARED = (
    "the server is shared (xdist workers, or ,shared on --impl): its free-block count moves "
    "with other clients, so this run's own use of it cannot be observed"
)


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
    field = oracle.RECORD_FIELDS["block_hash"]
    if len(data) >= oracle.HEADER_SIZE + field.offset + field.size:
        return field.read(data, oracle.HEADER_SIZE)
    return 0


class GrpcAdapter(Adapter):
    """A tl.kv.v1 decode server, reached as its prefill side: its transfer, and its one pool
    seen through the transfer."""

    status_domain = "grpc"
    keeps_blocks = True

    def __init__(self, spec: ImplSpec, settings: AdapterSettings) -> None:
        super().__init__(spec.label)
        self.transfer: TransferClient = TransferClient(spec, settings)
        self.geometry = self.transfer.geometry
        self._blocks: list[_Known] = []
        self._pushed: dict[int, set[tuple[int, bytes]]] = {}  # hash -> contents pushed
        self._held_before: set[int] = set()  # hashes the server held before this run pushed them
        self._preloaded: dict[tuple[int, bytes], int] = {}  # (hash, record) -> the block's id

    # -- the adapter protocol -------------------------------------------------------------------

    def info(self) -> ImplInfo:
        # What this way in can observe: never the hash function; pools (reads of content, free
        # counts) only with both extensions; exports only with PullKv.
        transfer = self.transfer
        capabilities = {Capability.IMPORT}
        if transfer.has_info and transfer.has_pull:
            capabilities.add(Capability.POOL)
        if transfer.has_pull:
            capabilities.add(Capability.EXPORT)
        return ImplInfo(
            read_versions=transfer.read_versions,
            # tl.kv.v1 announces what a server reads; PullKv is assumed to write the same.
            write_versions=transfer.read_versions if transfer.has_pull else frozenset(),
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
        self.transfer.check_in_service("GetInfo")
        if geometry != self.geometry:
            raise NotObservable(self.other_geometry(geometry))
        return GrpcPool(self, geometry, capacity)

    def close(self) -> None:
        self.transfer.close()

    def __enter__(self) -> GrpcAdapter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- bookkeeping shared by every pool handle (the server's pool outlives them) ---------------

    def _store(self, blocks: Sequence[tuple[int, bytes, int]]) -> tuple[list[int], int]:
        """Push one-block envelopes (hash, payload, version) as one stream; their new ids, and
        how many of them the server shared with a block it held (docs/decisions.md: a payload
        for a held hash may be stored or shared, so blocks_stored + blocks_reused is what a
        stream of payloads fixes)."""
        new = [h for h, _, _ in blocks if h and h not in self._pushed]
        if new:
            self._held_before.update(
                h for h, held in zip(new, self.transfer.has_blocks(new), strict=True) if held
            )
        request_id = self.transfer.new_request_id()
        chunks = [
            Chunk.of_payload(index, version, block_hash, payload, request_id)
            for index, (block_hash, payload, version) in enumerate(blocks)
        ]
        counts = self.transfer.push(chunks)
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
            (chunk,) = self.transfer.pull([known.block_hash], version)
            if chunk.payload[oracle.HEADER_SIZE : -oracle.CRC_SIZE] != record:
                raise NotObservable(
                    f"{what}: the server held a block of hash {known.block_hash:#x} with other "
                    "contents before this run pushed it, and tl.kv.v1 reaches a block only by "
                    "its hash"
                )
        return known.block_hash


class GrpcPool(PoolHandle):
    """The server's one pool, seen as a pool of the capacity the case asked for."""

    def __init__(self, adapter: GrpcAdapter, geometry: oracle.Geometry, capacity: int) -> None:
        super().__init__(geometry, capacity)
        self._adapter = adapter
        self._transfer = adapter.transfer
        self._free_at_open: int | None = None
        if self._transfer.has_info and not self._transfer.shared:
            # The case's pool is a view of the server's: it needs room only for what it stores
            # (checked as it stores it), not for the capacity it declares.
            self._free_at_open = self._transfer.server_info().free_blocks
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
        if self._transfer.shared:
            raise NotObservable(SHARED)
        if self._free_at_open is None:
            raise NotObservable(NO_INFO)
        return self._free_in_view(self._transfer.server_info().free_blocks)

    def _free_in_view(self, server_free: int) -> int:
        """The case's pool's free blocks, when the server has `server_free`."""
        assert self._free_at_open is not None
        return self.capacity - (self._free_at_open - server_free) - self._unsent

    def _room_for(self, n_blocks: int, what: str) -> None:
        if self._transfer.shared:
            # Other clients use the server: only this pool's own count can say it is full.
            if self.capacity - self._stored - self._unsent < n_blocks:
                raise NotObservable(
                    f"{what}: the case's pool of {self.capacity} blocks would be full, but over "
                    "a shared server running out of blocks cannot be observed"
                )
            return
        if self._free_at_open is None:
            return  # a refusal for want of room then fails the case with its own status
        server_free = self._transfer.server_info().free_blocks
        if server_free < n_blocks:
            raise NotObservable(
                f"{what}: the server has {server_free} free blocks, this stores {n_blocks}: "
                "start it with more room (docs/grpc.md says how much a run needs)"
            )
        free = self._free_in_view(server_free)  # one GetInfo answers both questions
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
        check_fits(payload, f"write(hash {block_hash:#x})")
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
        if reused is not None and self._transfer.has_blocks([block_hash]) == [True]:
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
        (chunk,) = self._transfer.pull([block_hash], 1)
        envelope = self._decode_pulled(chunk.payload, 1, f"read({block})")
        (record,) = envelope.records
        return ReadBack(record.block_hash, record.n_tokens, record.decoded.values)

    def find(self, block_hash: int) -> int:
        (held,) = self._transfer.has_blocks([block_hash])
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
        (chunk,) = self._transfer.pull([block_hash], version)
        return chunk.payload

    def import_envelope(self, data: bytes, max_blocks: int) -> list[int]:
        data = bytes(data)
        profile = oracle.ReaderProfile(self.geometry, self._transfer.read_versions)
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
            check_fits(payload, "import")
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
        check_fits(data, f"an envelope breaking {', '.join(sorted(rejected.rule_ids))}")
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
            self._transfer.new_request_id(),
        )
        try:
            counts = self._transfer.push([chunk])
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
