"""Probing a reader that refused an envelope it should have read (a valid one, or one breaking
a rule it answered with another status): the same envelope with its trailer as each probed CRC
model writes it (_crc_signatures.PROBED, a bounded few), imported through the adapter's one
probe operation (`tlkv_conformance.adapters.Adapter.probe_import`). A reader that reads one of
them as it should have has that mistake; the answer is evidence, never a verdict (the test has
failed already)."""

from __future__ import annotations

import weakref

import numpy as np

from .. import oracle
from ..adapters import Adapter, Chunk, Transfer
from ..errors import ImplementationFault, NotObservable, Refused
from ..evidence import RefusalEvidence
from ._causes import Cause
from ._crc_signatures import (
    CHUNK_PROBED,
    ChunkCrcModel,
    chunk_crc_cause,
    found_in_reader,
    reader_crc_cause,
    resealed_variants,
)


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
    for model, variant in resealed_variants(refusal.envelope, implementation):
        try:
            answer = implementation.probe_import(pool.geometry, pool.free, variant, pool.max_blocks)
        except (ImplementationFault, NotObservable, Refused):
            continue
        read_as_due = answer in refusal.expected if refusal.expected else answer is None
        if read_as_due:
            return reader_crc_cause(*found_in_reader(implementation, model), refusal.actual or "")
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
