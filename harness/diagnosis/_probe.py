"""Probing a reader that refused an envelope it should have read (a valid one, or one breaking
a rule it answered with another status): the same envelope with its trailer as each probed CRC
model writes it (_crc_signatures.PROBED, a bounded few), imported through the adapter's one
probe operation (`tlkv_conformance.adapters.Adapter.probe_import`). A reader that reads one of
them as it should have has that mistake; the answer is evidence, never a verdict (the test has
failed already)."""

from __future__ import annotations

from .. import oracle
from ..adapters import Adapter
from ..errors import ImplementationFault, NotObservable, Refused
from ..evidence import RefusalEvidence
from ._crc_signatures import found_in_reader, resealed_variants


def probe_reader(implementation: Adapter, refusal: RefusalEvidence) -> tuple[str, str] | None:
    """(cause id, title) of the CRC model with which `implementation` reads the refused
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
            return found_in_reader(implementation, model)
    return None
