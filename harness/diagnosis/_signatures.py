"""Signatures of known mistakes in the CRC-32C trailer (the block hash's: _hash_signatures):
each mistaken computation, done again here, and compared with what the implementation gave."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Sequence

from .. import oracle
from ._causes import FORMAT_ERRORS, Cause

U64 = (1 << 64) - 1
# The id of known mistakes named together: "one-of:" and their ids joined by "+".
ONE_OF = "one-of:"


def one_of(causes: Sequence[Cause]) -> Cause:
    """The known mistakes that give exactly the bytes the implementation gave, each checked on
    this run's evidence, named together when the evidence cannot tell them apart (one alone:
    that one). The evidence is the first's; the report says "one of: A; B", never A alone."""
    if len(causes) == 1:
        return causes[0]
    return Cause(
        ONE_OF + "+".join(c.id for c in causes),
        "one of: " + "; ".join(c.title for c in causes),
        tuple(dict.fromkeys(r for c in causes for r in c.reqs)),
        f"{causes[0].evidence} (each of these mistakes gives exactly these bytes)",
        frozenset().union(*(c.explains for c in causes)),
    )


# -- the CRC-32C trailer ------------------------------------------------------------------------

_CRC_EXPLAINS = FORMAT_ERRORS


def _c(data: bytes) -> int:
    return oracle.crc32c(data)


CrcVariant = Callable[[bytes], bytes]
CRC_MISTAKES: tuple[tuple[str, str, CrcVariant], ...] = (
    (
        "crc-no-final-xor",
        "CRC-32C without the final XOR with 0xFFFFFFFF",
        lambda body: struct.pack("<I", _c(body) ^ 0xFFFFFFFF),
    ),
    (
        "crc-ieee-polynomial",
        "the IEEE CRC-32 polynomial (zlib.crc32) instead of Castagnoli",
        lambda body: struct.pack("<I", zlib.crc32(body)),
    ),
    (
        "crc-records-only",
        "the CRC over the block records only, not the header",
        lambda body: struct.pack("<I", _c(body[oracle.HEADER_SIZE :])),
    ),
    (
        "crc-header-only",
        "the CRC over the header only",
        lambda body: struct.pack("<I", _c(body[: oracle.HEADER_SIZE])),
    ),
    (
        "crc-misses-last-byte",
        "the CRC stops one byte short of the trailer",
        lambda body: struct.pack("<I", _c(body[:-1])),
    ),
    (
        "crc-includes-trailer",
        "the CRC computed over the envelope with its zeroed trailer",
        lambda body: struct.pack("<I", _c(body + bytes(oracle.CRC_SIZE))),
    ),
    (
        "crc-trailer-big-endian",
        "the CRC trailer written big-endian",
        lambda body: struct.pack(">I", _c(body)),
    ),
)


CRC_CAUSES = frozenset(cause_id for cause_id, _, _ in CRC_MISTAKES)


def crc_trailer_causes(body: bytes, trailer: bytes, reqs: tuple[str, ...]) -> list[Cause]:
    """The known CRC mistakes whose trailer for `body` is `trailer` (a writer's)."""
    right = struct.pack("<I", _c(body))
    found = []
    for cause_id, title, variant in CRC_MISTAKES:
        mistaken = variant(body)
        if mistaken == trailer != right:
            found.append(
                Cause(
                    cause_id,
                    title,
                    reqs,
                    f"trailer {trailer.hex(' ')} is that computation's; CRC-32C gives "
                    f"{right.hex(' ')}"
                    + (
                        f" ({int.from_bytes(trailer, 'little'):#010x} = "
                        f"{int.from_bytes(right, 'little'):#010x} XOR 0xffffffff)"
                        if cause_id == "crc-no-final-xor"
                        else ""
                    ),
                    _CRC_EXPLAINS,
                )
            )
    return found


def resealed_variants(envelope: bytes) -> list[tuple[str, str, bytes]]:
    """`envelope` with its trailer as each known CRC mistake writes it (for a reader probe):
    (cause id, title, bytes), those that differ from the envelope."""
    body, trailer = envelope[: -oracle.CRC_SIZE], envelope[-oracle.CRC_SIZE :]
    out = []
    for cause_id, title, variant in CRC_MISTAKES:
        mistaken = variant(body)
        if mistaken != trailer:
            out.append((cause_id, title, body + mistaken))
    return out


def reader_crc_cause(cause_id: str, title: str, code: str) -> Cause:
    return Cause(
        cause_id,
        title,
        ("READ-CRC",),
        f"refused with {code}, but accepted once its trailer was written that way",
        _CRC_EXPLAINS,
    )
