"""What a failed check saw, kept as data beside its message, so that the failure can be blamed
on the requirements whose own bytes differ and matched against known mistakes: the cases and
checks build it, below the diagnosis (tlkv_conformance.diagnosis), which reads it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import oracle
from .errors import ImplementationFault, OperationFault, Quarantined, SentChunkCrcWrong

# A find that fails after an import or a write: over gRPC find is HasBlocks, so a HasBlocks
# that never says "held" accounts for it when the run shows one (a KnownMistake's yields_to).
NOT_HELD = frozenset({"hasblocks-never-held"})


@dataclass(frozen=True, eq=False)
class HashEvidence:
    """block_hash(parent, tokens) gave `actual`, not `expected`."""

    parent: int
    tokens: tuple[int, ...]
    expected: int
    actual: int


@dataclass(frozen=True, eq=False)
class EnvelopeEvidence:
    """An export differs from the oracle's envelope. `blocks`: what the writer was given, in
    the pool's precision, values past each fill included (absent where unknown); `block_ids`:
    the ids exported, in the order asked, and `pool_dtype`: the exporting pool's (where known).
    `held_read_back`: each block was read back as it should be just before the export, so what
    the pool holds is known right (no mistake of its store explains the export).
    `released`: blocks written and released before the export (in the pool's precision),
    whose slots the exported blocks may reuse. `sources`: for each block exported, the envelope
    and record offset it was imported from (None for a block written; empty where unknown).
    `given`: the blocks as the writes gave them, in f32, before the pool's precision (empty
    where unknown), so that an f16 store's mistake is fitted on what it was given."""

    expected: bytes
    actual: bytes
    blocks: tuple[oracle.Block, ...] = ()
    block_ids: tuple[int, ...] = ()
    pool_dtype: str = ""
    held_read_back: bool = False
    released: tuple[oracle.Block, ...] = ()
    sources: tuple[tuple[bytes, int] | None, ...] = ()
    given: tuple[oracle.Block, ...] = ()


@dataclass(frozen=True, eq=False)
class SizeEvidence:
    """export_bytes(n_blocks, version) gave `actual`, not `expected`."""

    n_blocks: int
    version: int
    expected: int
    actual: int


@dataclass(frozen=True, eq=False)
class ValuesEvidence:
    """A block read back with other values than it should hold (f32 [L][2][Hkv][B][D]).
    `source`: the envelope and record offset it was imported from; `written`: the values a
    write gave the pool, past the fill included; `released`: the values of the blocks released
    in that pool before (past their fill included), what a reused slot may still hold."""

    expected: np.ndarray
    actual: np.ndarray
    n_tokens: int
    dtype: str
    source: tuple[bytes, int] | None = None
    written: np.ndarray | None = None
    released: tuple[np.ndarray, ...] = ()


@dataclass(frozen=True)
class ReaderPool:
    """The pool a reader case imported into, as the diagnosis' probe makes it again: a new pool
    of `geometry` with as many blocks, all free, as the case's had free (`free`: its capacity
    less the blocks it preloaded), imported into with the case's `max_blocks`."""

    geometry: oracle.Geometry
    free: int
    max_blocks: int


@dataclass(frozen=True, eq=False)
class RefusalEvidence:
    """A call answered `actual` (None: it succeeded; "fault": it crashed or hung) where one of
    `expected` was due (empty: it had to succeed). `rules`: the requirements the input breaks
    (empty: a valid one); `envelope`: the input, when it was an envelope; `pool`: the pool that
    refused it, where the diagnosis may probe the reader again for a CRC mistake (`probe_reader`:
    an import or rejection case's); `fault`: the fault's message, when it faulted (what it was:
    an exception, a crash, a hang...)."""

    rules: frozenset[str]
    expected: frozenset[str]
    actual: str | None
    envelope: bytes = b""
    rules_first: bool = False
    pool: ReaderPool | None = None
    fault: str = ""
    # The refused call was a write of (block_hash, n_tokens) into a pool of that geometry:
    # the diagnosis probes the write's rule (tlkv_conformance.diagnosis._pool_models).
    write: tuple[oracle.Geometry, int, int] | None = None


@dataclass(frozen=True, eq=False)
class PoolChangeEvidence:
    """A refused import or transfer changed the pool: `reqs` is the atomicity requirement."""

    reqs: tuple[str, ...] = ("READ-ATOMIC",)


@dataclass(frozen=True, eq=False)
class CountEvidence:
    """The pool's free count is `actual`, not `expected`; `released`: blocks were released
    before (so the count is about POOL-REFS)."""

    expected: int
    actual: int
    released: bool


@dataclass(frozen=True, eq=False)
class StaleHashEvidence:
    """find() still finds `block_hash` after its block's last reference was released."""

    block_hash: int


@dataclass(frozen=True)
class PoolStep:
    """One pool operation a case made and what it answered. `op`: write, retain, release,
    find, free or read (any other: a step no pool model replays); `block`: the label of the
    block it made or acted on; `block_hash`: a write's or a find's hash; `answer`: "ok", a
    refusal's status, the label of the block a find answered, or a free count."""

    op: str
    block: str = ""
    block_hash: int = 0
    answer: str | int = "ok"


@dataclass(frozen=True, eq=False)
class PoolHistoryEvidence:
    """A pool case's steps up to and including the one that failed, each with its answer, in
    a pool of `geometry` and `capacity` (the diagnosis replays them on models of the pool's
    bookkeeping). `fault`: the fault's message, where the last step faulted (its answer
    "fault")."""

    geometry: oracle.Geometry
    capacity: int
    steps: tuple[PoolStep, ...]
    fault: str = ""


@dataclass(frozen=True, eq=False)
class KnownMistake:
    """A check whose failure names the mistake by itself (an imported hash not registered)."""

    cause: str
    title: str
    reqs: tuple[str, ...]
    detail: str = ""
    yields_to: frozenset[str] = frozenset()
    # A chunk's payload and the crc32c field a prefill client gave it, where the field is
    # wrong: the diagnosis recomputes how it was computed.
    chunk_crc: tuple[bytes, int] | None = None
    # Where find refused a hash (an import's or a write's not registered, a registry shared
    # between pools): the pool's geometry, so that the diagnosis names the cause only where
    # its registry probe in a new pool of it answers as the cause says (find may miss that one
    # hash or that one block for another reason).
    registry_probe: oracle.Geometry | None = None
    # Where find refused an imported hash: the envelope imported and that hash, so that the
    # diagnosis imports it again in other orders (which of two hashes find misses).
    imported: tuple[bytes, int] | None = None
    # Where find refused a written hash: the hashes the case's pool registered, in that order,
    # and that hash, so that the diagnosis writes it again with each of them in either order.
    registered: tuple[tuple[int, ...], int] | None = None


@dataclass(frozen=True, eq=False)
class OrderEvidence:
    """A result holding exactly the items due, in another order: `order[i]` is the position,
    in the order due, of the item found at position i. `subject`: what was ordered ("import":
    the block ids an import returned); `keys`: what each item is known by, in the order due
    (("block id", ids), ("hash", hashes)), to name a sorted order."""

    subject: str
    order: tuple[int, ...]
    reqs: tuple[str, ...]
    keys: tuple[tuple[str, tuple[int, ...]], ...] = ()


@dataclass(frozen=True, eq=False)
class FaultEvidence:
    """The implementation crashed, hung or was quarantined after doing so (`detail`).
    `quarantined`: the call was not made, so the failure does not depend on the case's data.
    `operation_fault`: what the fault shows of the operation whatever the input (it never
    answers), a probable cause of its own. `hash_input`: the (parent, tokens) of a block hash
    that faulted; `sent_chunk_crc`: a PullKv chunk's payload and its wrong crc32c field."""

    detail: str
    quarantined: bool = False
    operation_fault: OperationFault | None = None
    hash_input: tuple[int, tuple[int, ...]] | None = None
    # a chunk the server sent with a wrong crc32c field: (payload, field)
    sent_chunk_crc: tuple[bytes, int] | None = None

    @classmethod
    def of(
        cls, fault: ImplementationFault, hash_input: tuple[int, tuple[int, ...]] | None = None
    ) -> FaultEvidence:
        quarantined = isinstance(fault, Quarantined)
        sent = (fault.payload, fault.field) if isinstance(fault, SentChunkCrcWrong) else None
        return cls(str(fault), quarantined, fault.operation_fault, hash_input, sent)

    @classmethod
    def of_operation(cls, fault: ImplementationFault) -> FaultEvidence | None:
        """The evidence of a fault that does not depend on the input (a call not made, an
        operation that never answers); None for one that may (a crash on this input)."""
        if isinstance(fault, Quarantined) or fault.operation_fault is not None:
            return cls.of(fault)
        return None


Evidence = (
    HashEvidence
    | EnvelopeEvidence
    | SizeEvidence
    | ValuesEvidence
    | RefusalEvidence
    | PoolChangeEvidence
    | CountEvidence
    | StaleHashEvidence
    | KnownMistake
    | FaultEvidence
    | OrderEvidence
    | PoolHistoryEvidence
)
