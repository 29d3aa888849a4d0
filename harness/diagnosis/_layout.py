"""Fields and payloads read at the wrong place (issue 27): a reader that takes a record's
payload k bytes away from where it starts (after a padded C struct of the record head), and
one that unpacks two of the header's fields in each other's place. Each model recomputes what
such a reader does with every candidate parameter (k; the pair of fields) and names a cause
only where that gives exactly what the implementation did: the values it read back, or, probed
again, its acceptance of the refused envelope written as it reads (the CRC's own spans and
residue are parameters of the CRC's model, `_crc_signatures`)."""

from __future__ import annotations

import struct
from itertools import pairwise

import numpy as np

from .. import oracle
from ..adapters import Adapter
from ..errors import ImplementationFault, NotObservable, Refused
from ..evidence import ReaderPool, RefusalEvidence
from ._causes import VALID_REFUSED, Cause

# The shifts (bytes) a reader may take a record's payload at, from its right start: a record
# head padded to 16 (+4) or to 8-byte alignment otherwise, one field too many or too few.
PAYLOAD_SHIFTS = (4, -4, 8, -8, 2, -2, 1, -1)
# The filled values a shift must change (all, in a smaller block) for it to be named.
MIN_SHOWN = 8


def payload_offset_causes(source: tuple[bytes, int], actual: np.ndarray, fill: int) -> list[Cause]:
    """The shift k with which the record's payload, decoded from k bytes after its start in
    `source` (the envelope, the record's offset), is bit for bit what the block read back at
    every filled position (`actual`, f32), where the right payload is not; [] otherwise."""
    data, offset = source
    geometry = oracle.header_geometry(data)
    version = oracle.HEADER_FIELDS["version"].read(data)
    size = geometry.payload_size(version)
    start = offset + oracle.RECORD_PREFIX_SIZE
    filled = np.zeros(geometry.values_shape, dtype=bool)
    filled[..., :fill, :] = True
    if not filled.any():
        return []
    got = np.asarray(actual, dtype=np.float32)[filled].view(np.uint32)
    right = oracle.decode_payload(geometry, version, data[start : start + size]).values[filled]
    # a shift shows only where it moves other values in: on a payload of one repeated value it
    # reads back the same, and a few values that differ are no sign of it
    shown = min(MIN_SHOWN, got.size)
    for shift in PAYLOAD_SHIFTS:
        if not 0 <= start + shift <= len(data) - size:
            continue
        payload = data[start + shift : start + shift + size]
        read = oracle.decode_payload(geometry, version, payload).values[filled]
        moved = np.count_nonzero(read.view(np.uint32) != right.view(np.uint32))
        if moved >= shown and np.array_equal(read.view(np.uint32), got):
            head = oracle.RECORD_PREFIX_SIZE + shift
            return [
                Cause(
                    f"payload-offset:{shift:+d}",
                    f"each record's payload read {abs(shift)} bytes "
                    f"{'after' if shift > 0 else 'before'} its start (after a {head}-byte "
                    f"record head{', a padded C struct' if head == 16 else ''}, not the packed "
                    f"{oracle.RECORD_PREFIX_SIZE})",
                    ("V1-LAYOUT" if version == 1 else "V2-LAYOUT", "ENV-RECORD"),
                    f"the values read back are, bit for bit, the payload decoded from "
                    f"{shift:+d} bytes of its start",
                )
            ]
    return []


# -- a reader's CRC check done the residue way ------------------------------------------------

_CASTAGNOLI = 0x82F63B78  # reflected
_MASK = 0xFFFFFFFF
# The CRC-32C of any envelope with its right trailer, the trailer included.
RESIDUE = 0x48674BC7


def _zero_init_input_for(register: int) -> int:
    """The 4 bytes (as a little-endian integer) that take the shift-right Castagnoli register
    from 0 to `register`: its 32 single-bit steps run backwards."""
    for _ in range(32):
        if register & 0x80000000:  # the polynomial's top bit: the step shifted a 1 out
            register = (((register ^ _CASTAGNOLI) << 1) | 1) & _MASK
        else:
            register = (register << 1) & _MASK
    return register


def residue_trailer(body: bytes, residue: int) -> bytes:
    """The trailer with which the CRC-32C of `body` and it is `residue`: the right trailer
    changed by the 4 bytes whose zero-init CRC is the two residues' difference (a CRC is
    linear: the CRCs of two messages of one length differ by the zero-init CRC of their
    difference)."""
    change = _zero_init_input_for(residue ^ RESIDUE)
    return (oracle.crc32c(body) ^ change).to_bytes(4, "little")


# -- header fields read in each other's place --------------------------------------------------

# The header's adjacent fields of one size, the pairs a reader may unpack swapped.
_SWAPPABLE = [
    (a, b)
    for a, b in pairwise(oracle.HEADER_FIELDS.values())
    if a.size == b.size and a.name != "magic"
]


def swapped_field_causes(implementation: Adapter, refusal: RefusalEvidence) -> list[Cause]:
    """The pair of adjacent header fields a reader unpacks in each other's place: the refused
    valid envelope, written with those two fields exchanged (and its CRC recomputed), is
    accepted, where the envelope itself is refused; [] when no pair's probe is accepted (or
    the two fields hold the same value, where it cannot show)."""
    data, pool, code = refusal.envelope, refusal.pool, refusal.actual
    # ESHAPE: the geometry's own status, where a reader comparing its fields with the wrong
    # pool fields gives the same answers (geometry-compared-wrongly)
    if pool is None or not data or code in (None, "fault", "ESHAPE"):
        return []
    if len(data) < oracle.HEADER_SIZE or _answer(implementation, pool, data) != code:
        return []  # refused no longer, or otherwise: the probes would not show the case's answer
    for first, second in _SWAPPABLE:
        a, b = first.read(data), second.read(data)
        if a == b:
            continue
        swapped = bytearray(data[: -oracle.CRC_SIZE])
        first.write(swapped, b)
        second.write(swapped, a)
        swapped += struct.pack("<I", oracle.crc32c(bytes(swapped)))
        if _answer(implementation, pool, bytes(swapped)) is None:
            return [
                Cause(
                    f"header-fields-swapped:{first.name}+{second.name}",
                    f"the header's {first.name} and {second.name} read in each other's place "
                    f"(unpacked in the wrong order)",
                    ("READ-ACCEPT",),
                    f"a valid envelope refused with {code}; written with {first.name} {b} and "
                    f"{second.name} {a} instead of {a} and {b}, accepted",
                    frozenset({VALID_REFUSED.format(code=code)}),
                )
            ]
    return []


# -- a reader's record checks stepping by another size -----------------------------------------


def record_stride_causes(implementation: Adapter, refusal: RefusalEvidence) -> list[Cause]:
    """The step S (shorter than a record: the payload size P, the record head forgotten, or a
    part of it) with which a reader's record checks walk the records, so that from the second
    record on they check the bytes S after the first's: a valid envelope of two full blocks
    whose first payload holds 1.0 everywhere is refused with the case's status, and the same
    with a valid record head (hash 0, n_tokens 1) written S bytes after the first record's
    start (inside its payload) is accepted. [] when no step fits (or the refused envelope has
    fewer than two blocks, where no step shows)."""
    data, pool, code = refusal.envelope, refusal.pool, refusal.actual
    if pool is None or code in (None, "fault", "ESHAPE") or len(data) < oracle.HEADER_SIZE:
        return []
    if oracle.HEADER_FIELDS["n_blocks"].read(data) < 2 or pool.free < 2 or pool.max_blocks < 2:
        return []
    version = oracle.HEADER_FIELDS["version"].read(data)
    geometry = pool.geometry
    record = geometry.record_size(version)
    b = geometry.block_tokens
    values = np.ones(geometry.values_shape, np.float32)
    first = oracle.block_hash(oracle.NO_HASH, list(range(1, b + 1)))
    second = oracle.block_hash(first, list(range(b + 1, 2 * b + 1)))
    blocks = [oracle.Block(first, b, values), oracle.Block(second, b, values)]
    plain = oracle.encode(geometry, blocks, version)
    if _answer(implementation, pool, plain) != code:
        return []
    for step in (record - oracle.RECORD_PREFIX_SIZE, record - 4, record - 8):
        crafted = bytearray(plain[: -oracle.CRC_SIZE])
        struct.pack_into("<QI", crafted, oracle.HEADER_SIZE + step, oracle.NO_HASH, 1)
        if _answer(implementation, pool, oracle.seal(bytes(crafted))) is not None:
            continue
        head = step == record - oracle.RECORD_PREFIX_SIZE
        return [
            Cause(
                f"record-stride:{step}",
                f"the reader's record checks step {step} bytes"
                + (" (the payload size, the 12-byte record head forgotten)" if head else "")
                + f", not the record's {record}: from the second record on they check bytes "
                "of the payload before it",
                ("READ-NTOKENS", "READ-HASH-FILL", "READ-ACCEPT"),
                f"two valid full blocks refused with {code}; accepted with a record head "
                f"(hash 0, n_tokens 1) written {step} bytes after the first record's start",
                frozenset({VALID_REFUSED.format(code=code)}),
            )
        ]
    return []


def _answer(implementation: Adapter, pool: ReaderPool, data: bytes) -> str | None:
    """The status a new pool like the case's answers an import of `data` with (None: accepted;
    "refused" where the probe itself failed)."""
    try:
        return implementation.probe_import(pool.geometry, pool.free, data, pool.max_blocks)
    except (ImplementationFault, NotObservable, Refused):
        return "refused"
