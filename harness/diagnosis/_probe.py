"""Probing a reader that refused an envelope it should have read (a valid one, or one breaking
a rule it answered with another status): the same envelope with its trailer as each probed CRC
model writes it (_crc_signatures.PROBED, a bounded few), imported through the adapter's one
probe operation (`tlkv_conformance.adapters.Adapter.probe_import`). A reader that reads one of
them as it should have has that mistake; the answer is evidence, never a verdict (the test has
failed already)."""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .. import oracle
from ..adapters import Adapter, Chunk, Transfer
from ..errors import ImplementationFault, NotObservable, Refused
from ..evidence import RefusalEvidence
from ._causes import Cause
from ._chunk_crc import CHUNK_PROBED, ChunkCrcModel, chunk_crc_cause
from ._crc_signatures import found_in_reader, reader_crc_cause, resealed_variants
from ._crc_tables import table_found_in_reader, table_resealed

# The registry probe's blocks: two written, then two imported, all full, in four different
# slots (so that a find missing one block id answers a mix), each pair with a hash below 2^63
# and one above (so that a hash read as signed answers a mix too). Any four fixed hashes share
# a slot in some engine's table (these do in the reference's 8-slot table of a 4-block pool),
# where a registry losing one of two colliding hashes answers as one losing every write or
# every import: a claim must hold for a second set too, its low bits unlike the first's and
# each other's (an identity table of up to 16 slots holds each in its own slot), and for one
# block written, then one imported, alone in a new pool, where no two hashes can collide.
_HASH_SETS = (
    ((0x1111, 0x8000_0000_0000_2222), (0x3333, 0x8000_0000_0000_4444)),
    (
        (0x5A3C_96E1_0F2D_4B88, 0xC3E1_5A97_2B4D_8F6D),
        (0x2D4B_87F0_E1C3_A566, 0x96E1_0F2D_4B87_A5CF),
    ),
)
# What find answers for each of them (written ones first) where a refused find is explained by
# the cause: the imports register nothing, the writes register nothing, or (a find refused for
# a hash another pool registered) find works in one pool.
REGISTRY_FITS = {
    "import-not-registered": [True, True, False, False],
    "write-not-registered": [False, False, True, True],
    "registry-shared-between-pools": [True, True, True, True],
}


@dataclass(frozen=True)
class RegistryAnswers:
    """The registry probe's answers: for each hash set, whether find answers each block (two
    written, then two imported, in one new pool); and whether find answers one hashed block
    written alone, and one imported alone, each in a new pool (with one block of hash 0 beside
    it, which registers nothing)."""

    sets: tuple[tuple[bool, ...], ...]
    written_alone: bool
    imported_alone: bool

    def fits(self, cause_id: str) -> bool:
        """Whether every answer is the one `cause_id` (REGISTRY_FITS) gives."""
        due = tuple(REGISTRY_FITS[cause_id])
        alone = (self.written_alone, self.imported_alone)
        return all(found == due for found in self.sets) and alone == (due[0], due[2])

    @property
    def writes_registered(self) -> bool | None:
        """Whether find answers every written block (True), none (False), or some (None: a mix
        tells nothing about writes as such)."""
        written = {*(found[i] for found in self.sets for i in (0, 1)), self.written_alone}
        return written.pop() if len(written) == 1 else None


_probed: weakref.WeakKeyDictionary[Adapter, dict[oracle.Geometry, RegistryAnswers | None]] = (
    weakref.WeakKeyDictionary()
)


def registry_probe_fits(
    implementation: Adapter | None, geometry: oracle.Geometry, cause_id: str
) -> bool:
    """Whether `implementation`'s registry answers, in new pools of `geometry`, as the cause
    `cause_id` (REGISTRY_FITS) says it does (`Adapter.probe_find_after`), for both hash sets
    and for a block alone. False where the probe cannot tell (no way in to probe, a fault, a
    refusal): a find refused for a hash does not show, alone, which of the writes, the imports
    or find itself is wrong (find may miss that one hash or that one block)."""
    if implementation is None or cause_id not in REGISTRY_FITS:
        return False
    answers = registry_answers(implementation, geometry)
    return answers is not None and answers.fits(cause_id)


def registry_answers(implementation: Adapter, geometry: oracle.Geometry) -> RegistryAnswers | None:
    """The registry probe's answers (RegistryAnswers), probed once per implementation and
    geometry; None where it cannot tell."""
    known = _probed.setdefault(implementation, {})
    if geometry not in known:
        known[geometry] = _registry_answers(implementation, geometry)
    return known[geometry]


def found_after(
    implementation: Adapter,
    geometry: oracle.Geometry,
    written: Sequence[int],
    imported: Sequence[int],
) -> list[bool]:
    """Whether find answers each block (the written, then the imported) after full blocks of
    zeros of the hashes `written` are written, then `imported` imported in one envelope, in a
    new pool of `geometry` with room for them (`Adapter.probe_find_after`). Raises as it does."""
    zeros = np.zeros(geometry.values_shape, np.float32)
    full = geometry.block_tokens
    version = min(implementation.info().read_versions, default=1)
    envelope = oracle.encode(geometry, [oracle.Block(h, full, zeros) for h in imported], version)
    return implementation.probe_find_after(
        geometry, [(h, full, zeros) for h in written], envelope, imported
    )


def _registry_answers(implementation: Adapter, geometry: oracle.Geometry) -> RegistryAnswers | None:
    try:
        sets = tuple(
            tuple(found_after(implementation, geometry, written, imported))
            for written, imported in _HASH_SETS
        )
        # each hashed block alone with one of hash 0 (a full block registers nothing without
        # a hash): the import is then never empty
        (written, _), (imported, _) = _HASH_SETS[0]
        written_alone = found_after(implementation, geometry, [written], [0])[0]
        imported_alone = found_after(implementation, geometry, [0], [imported])[1]
    except (ImplementationFault, NotObservable, Refused):
        return None
    return RegistryAnswers(sets, written_alone, imported_alone)


# What each implementation's pool read back for the values the store probe wrote, by geometry
# and block (None: the probe could not tell).
_stored: weakref.WeakKeyDictionary[
    Adapter, dict[tuple[oracle.Geometry, int, int, bytes], np.ndarray | None]
] = weakref.WeakKeyDictionary()


def stored_as(
    implementation: Adapter | None,
    geometry: oracle.Geometry,
    block_hash: int,
    n_tokens: int,
    values: np.ndarray,
) -> np.ndarray | None:
    """What `implementation`'s pool reads back for f32 `values` written into a new pool of
    `geometry` (`Adapter.probe_write_read`): how its store holds values given directly, with no
    envelope decoded on the way. None where it cannot tell (no way in to probe, a fault, a
    refusal)."""
    if implementation is None:
        return None
    values = np.ascontiguousarray(values, dtype=np.float32)
    key = (geometry, block_hash, n_tokens, values.tobytes())
    known = _stored.setdefault(implementation, {})
    if key not in known:
        try:
            known[key] = implementation.probe_write_read(geometry, block_hash, n_tokens, values)
        except (ImplementationFault, NotObservable, Refused):
            known[key] = None
    return known[key]


def probe_reader(implementation: Adapter, refusal: RefusalEvidence) -> Cause | None:
    """The CRC mistake (READ-CRC) with which `implementation` reads the refused
    envelope as it should have: accepts it (no status expected) or refuses it with one of the
    expected statuses. None when the refusal names no pool to probe, or where the CRC rule's
    own status is expected (over gRPC, DATA_LOSS answers a bad CRC and a bad geometry alike)."""
    if refusal.pool is None or refusal.actual in (None, "fault") or not refusal.envelope:
        return None
    crc = oracle.READER_RULES["READ-CRC"]
    crc_code = crc.grpc_status if implementation.status_domain == "grpc" else crc.c_code
    if crc_code in refusal.expected:
        return None
    pool = refusal.pool

    def read_as_due(envelope: bytes) -> bool | None:
        """Whether a new pool reads `envelope` as the refused one was due (None: no answer)."""
        try:
            answer = implementation.probe_import(
                pool.geometry, pool.free, envelope, pool.max_blocks
            )
        except (ImplementationFault, NotObservable, Refused):
            return None
        return answer in refusal.expected if refusal.expected else answer is None

    # The control: the envelope itself, in the probe's new pool, must be misread again; else
    # what refused it was not its trailer (the case's pool, a state the probe does not make),
    # and a resealed variant read as due would name a CRC mistake nothing showed.
    if read_as_due(refusal.envelope) is not False:
        return None
    for model, variant in resealed_variants(refusal.envelope, implementation):
        if read_as_due(variant):
            return reader_crc_cause(*found_in_reader(implementation, model), refusal.actual or "")
    for models, variant in table_resealed(refusal.envelope, implementation):
        if read_as_due(variant):
            return table_found_in_reader(implementation, models, refusal.actual or "")
    return None


# What each decode server's chunk check was found to compute (None: the spec's CRC, or none of
# the probed models): its chunks are probed once a run, whatever the failure.
_chunk_checks: weakref.WeakKeyDictionary[Adapter, ChunkCrcModel | None] = (
    weakref.WeakKeyDictionary()
)


def probe_chunk_crc(implementation: Adapter, refusal: RefusalEvidence) -> Cause | None:
    """The CRC mistake of a tl.kv.v1 decode server that refuses valid chunks with DATA_LOSS
    (the crc32c field's status): one PushKv of a valid one-block envelope (a partial block of
    zeros, no hash to register) with its field right, which it must refuse for there to be a
    mistake, then one per probed model of the field. None where no transfer answers DATA_LOSS
    where it was not due."""
    transfer = implementation.transfer
    if transfer is None or refusal.actual != "DATA_LOSS" or "DATA_LOSS" in refusal.expected:
        return None
    if implementation not in _chunk_checks:
        _chunk_checks[implementation] = _chunk_check(transfer)
    found = _chunk_checks[implementation]
    return chunk_crc_cause(found, refusal.actual) if found is not None else None


def _chunk_check(transfer: Transfer) -> ChunkCrcModel | None:
    geometry = transfer.geometry
    if geometry.block_tokens < 2:
        return None  # no partial block: every full one registers a hash on the server
    version = min(transfer.read_versions, default=1)  # one it reads, else FAILED_PRECONDITION
    block = oracle.Block(0, 1, np.zeros(geometry.values_shape, np.float32))
    payload = oracle.encode(geometry, [block], version)

    def answer(crc32c: int) -> str | None:
        chunk = Chunk(0, version, 0, payload, crc32c, transfer.new_request_id())
        try:
            transfer.push([chunk])
        except Refused as refused:
            return refused.code
        return None

    try:
        if answer(oracle.crc32c(payload)) != "DATA_LOSS":
            return None
        for model in CHUNK_PROBED:
            if answer(model.field(payload)) is None:
                return model
    except (ImplementationFault, NotObservable):
        return None
    return None
