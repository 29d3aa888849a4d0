"""The crc32c field of a tl.kv.v1 chunk (XFER-CHUNK-CRC, PREFILL-CHUNK-CRC): the CRC models of
_crc_signatures over a range of the chunk's payload, as a decode server checks the field (by
probe) and as a sender (a prefill client, a server's PullKv) computes it."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product

from .. import oracle
from ._causes import Cause
from ._crc_engine import MASK, run_crc
from ._crc_signatures import _CRC_EXPLAINS, _ENGINES, MAX_RECOMPUTED, PROBED, RIGHT, CrcModel
from ._signatures import one_of

# -- a tl.kv.v1 chunk's crc32c field, checked by a decode server --------------------------------

# The bytes of a chunk's payload (a one-block envelope) a server may take its CRC over, each with
# its title; the whole payload is the spec's.
_CHUNK_RANGES = {
    "payload": (slice(None), "the whole payload"),
    "envelope-body": (
        slice(None, -oracle.CRC_SIZE),
        "the envelope without its trailer (the envelope's own CRC)",
    ),
    "records": (slice(oracle.HEADER_SIZE, -oracle.CRC_SIZE), "the envelope's block record"),
}


@dataclass(frozen=True)
class ChunkCrcModel:
    """How a decode server computes the crc32c a chunk's field must hold: a CRC model over a
    range of the payload."""

    covered: str = "payload"
    crc: CrcModel = RIGHT

    def field(self, payload: bytes) -> int:
        covered = payload[_CHUNK_RANGES[self.covered][0]]
        register = run_crc(self.crc.shift, self.crc.polynomial, self.crc.init, covered)
        return int.from_bytes(self.crc.trailer(register), "little")

    @property
    def cause_id(self) -> str:
        if self.crc == RIGHT:
            return f"crc-chunk-over-{self.covered}"
        return "crc-chunk:" + self.crc.cause_id

    @property
    def title(self) -> str:
        return f"the tl.kv.v1 chunk's crc32c field checked against {self._computed()}"

    @property
    def client_title(self) -> str:
        return f"the chunk's crc32c field computed as {self._computed()}"

    def _computed(self) -> str:
        what = "the CRC-32C" if self.crc == RIGHT else f"a CRC with {self.crc.title}"
        return f"{what} of {_CHUNK_RANGES[self.covered][1]}, not the CRC-32C of the whole payload"


# One probe each, the likeliest first: another range with the spec's CRC, then the whole
# payload with each single parameter off (the trailer's byte order is the field's bytes
# swapped).
CHUNK_PROBED: tuple[ChunkCrcModel, ...] = (
    ChunkCrcModel("envelope-body"),
    ChunkCrcModel("records"),
    *(ChunkCrcModel("payload", m) for m in PROBED if m.coverage == "body"),
)


def chunk_crc_cause(model: ChunkCrcModel, code: str) -> Cause:
    return Cause(
        model.cause_id,
        model.title,
        ("XFER-CHUNK-CRC",),
        f"a chunk of a valid one-block envelope refused with {code} when its crc32c field is "
        "the CRC-32C of its payload, accepted with that computation's",
        _CRC_EXPLAINS,
    )


def client_chunk_crc_cause(
    payload: bytes, field: int, reqs: tuple[str, ...], sender: str = "prefill"
) -> Cause | None:
    """How the side that sent a chunk (a prefill client: `prefill`; a decode server's PullKv:
    `pull`) computed its crc32c `field` for `payload`: the chunk model (any range, any point of
    the CRC model) giving exactly that field, or one of several; None when none does (or the
    payload is too large to recompute)."""
    if not oracle.HEADER_SIZE + oracle.CRC_SIZE <= len(payload) <= MAX_RECOMPUTED:
        return None
    causes = []
    for covered, (span, _) in _CHUNK_RANGES.items():
        for (shift, polynomial), init in product(_ENGINES, (MASK, 0)):
            register = run_crc(shift, polynomial, init, payload[span])
            for xorout, reversed_result, byte_order in product(
                (MASK, 0), (False, True), ("little", "big")
            ):
                crc = CrcModel(shift, polynomial, init, xorout, reversed_result, byte_order)
                model = ChunkCrcModel(covered, crc)
                computed = int.from_bytes(crc.trailer(register), "little")
                if model != ChunkCrcModel() and computed == field:
                    causes.append(_client_cause(model, field, reqs, sender))
    causes.sort(key=lambda c: (c.id.count("&"), c.id))
    return one_of(causes) if causes else None


def _client_cause(model: ChunkCrcModel, field: int, reqs: tuple[str, ...], sender: str) -> Cause:
    own = model == ChunkCrcModel("envelope-body")  # what the envelope's trailer holds
    return Cause(
        f"{sender}-envelope-crc-in-chunk" if own else f"{sender}-{model.cause_id}",
        model.client_title,
        reqs,
        f"crc32c {field:#010x} is that computation's",
    )
