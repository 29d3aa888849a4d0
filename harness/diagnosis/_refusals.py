"""Signatures of a valid envelope refused: at exactly one of the import's limits (a `>` written
as `>=`), or by a reader rule over-enforced on a property the format allows (no blocks, a full
block with hash 0, a partial block before the last...). Each is found by probing the reader
again through the adapter's one probe operation (`Adapter.probe_import`) with bounded variants:
the refused envelope itself into pools with one block more of room, and, for a property, a
minimal valid envelope with and without it, valid envelopes of other lengths without it (all
accepted) and, where the property allows, a longer one with it (refused too). A signature names
a cause only when the probes reproduce the case's own status exactly; a fault or a refused pool
names nothing."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from .. import oracle
from ..adapters import Adapter, observed_fault
from ..errors import ImplementationFault, NotObservable, Refused
from ..evidence import RefusalEvidence
from ._causes import VALID_REFUSED, Cause

# The id prefixes of the causes below (the catalogue and docs/diagnosis.md name them).
AT_LIMIT = "refused-at-limit:"
OVER_ENFORCED = "refuses-valid:"
ZERO_HASH_REPLACED = 1  # the hash a block whose FNV-1a is 0 carries (HASH-ZERO)
HIGH_BIT = 1 << 63  # a hash's sign bit, read as a signed 64-bit integer


@dataclass(frozen=True)
class _Limit:
    """One of an import's limits: the pool's free blocks, or the caller's max_blocks."""

    name: str
    rule: str
    what: str  # the limit, in a title

    def pool(self, n: int) -> tuple[int, int]:
        """(capacity, max_blocks) of a pool at exactly this limit for `n` blocks, with one
        block of room more in the other limit."""
        return (n, n + 1) if self.name == "free-blocks" else (n + 1, n)


LIMITS = (
    _Limit("free-blocks", "IMPORT-ENOMEM", "exactly as many blocks as the pool has free"),
    _Limit("max-blocks", "IMPORT-EINVAL", "exactly max_blocks blocks"),
)


@dataclass(frozen=True)
class _Property:
    """A property of a valid envelope that an over-enforced reader rule may refuse: `has` says
    whether an envelope's records (hash, n_tokens, padded: a value past the fill not zero)
    have it, `with_it` the records of a minimal envelope that has it and `without` those of
    one that does not (otherwise alike)."""

    name: str
    title: str
    has: Callable[[Sequence[_RecordSeen], int], bool]
    with_it: Callable[[int, int], list[_RecordSeen]]
    without: Callable[[int, int], list[_RecordSeen]]


# A record as the properties see it: (block_hash, n_tokens, padded).
_RecordSeen = tuple[int, int, bool]


def _partial_before_last(records: Sequence[_RecordSeen], b: int) -> bool:
    return any(n < b for _, n, _ in records[:-1])


# `h`: a registered hash, `b`: the geometry's block_tokens (a partial block has b - 1 tokens,
# none when b is 1: the property cannot be shown at that geometry).
PROPERTIES = (
    _Property(
        "zero-blocks",
        "a valid envelope with no blocks (32 bytes) refused: a length or count rule over-enforced",
        lambda records, b: not records,
        lambda h, b: [],
        lambda h, b: [(h, b, False)],
    ),
    _Property(
        "full-block-hash-zero",
        "a valid envelope holding a full block with hash 0 (unregistered) refused: "
        "READ-HASH-FILL enforced both ways",
        lambda records, b: any(h == oracle.NO_HASH and n == b for h, n, _ in records),
        lambda h, b: [(oracle.NO_HASH, b, False)],
        lambda h, b: [(h, b, False)],
    ),
    _Property(
        "partial-block",
        "a valid envelope holding a partial block refused",
        lambda records, b: any(n < b for _, n, _ in records),
        lambda h, b: [(oracle.NO_HASH, b - 1, False)],
        lambda h, b: [(h, b, False)],
    ),
    _Property(
        "partial-before-last",
        "a valid envelope holding a partial block before its last refused: a partial block "
        "may be anywhere (an export lists blocks in any order)",
        _partial_before_last,
        lambda h, b: [(oracle.NO_HASH, b - 1, False), (h, b, False)],
        lambda h, b: [(h, b, False), (oracle.NO_HASH, b - 1, False)],
    ),
    _Property(
        "hash-one",
        "a valid envelope holding a block whose hash is 1 (a hash of 0 replaced) refused",
        lambda records, b: any(h == ZERO_HASH_REPLACED for h, _, _ in records),
        lambda h, b: [(ZERO_HASH_REPLACED, b, False)],
        lambda h, b: [(h, b, False)],
    ),
    _Property(
        "hash-from-2^63",
        "a valid envelope holding a block whose hash is 2^63 or more refused, the same block "
        "with the hash's top bit clear accepted (a hash read as a signed 64-bit integer)",
        lambda records, b: any(h >> 63 for h, _, _ in records),
        lambda h, b: [(h | HIGH_BIT, b, False)],
        lambda h, b: [(h & ~HIGH_BIT, b, False)],
    ),
    _Property(
        "padding-not-zero",
        "a valid envelope holding a partial block whose values past its fill are not zero "
        "refused: the writer's padding rule (V1-PAD, V2-PAD) enforced on reading",
        lambda records, b: any(padded for _, _, padded in records),
        lambda h, b: [(oracle.NO_HASH, b - 1, True)],
        lambda h, b: [(oracle.NO_HASH, b - 1, False)],
    ),
)


def refused_valid_causes(implementation: Adapter, refusal: RefusalEvidence) -> list[Cause]:
    """The causes a valid envelope's refusal (`refusal.envelope`, refused with
    `refusal.actual`) shows when probed: refused at exactly one of the import's limits, else
    refused for a property an over-enforced reader rule does not allow. Empty when neither
    reproduces the case's status."""
    data = refusal.envelope
    code = refusal.actual
    if not data or code in (None, "fault"):
        return []
    try:
        envelope = oracle.decode(data)
    except oracle.Rejected:
        return []  # not valid by the header's own geometry: not this family
    geometry = refusal.pool.geometry if refusal.pool is not None else envelope.geometry
    n = envelope.n_blocks
    roomy = _probe(implementation, geometry, n + 1, data, n + 1)
    if roomy is None:
        return _limit_causes(implementation, refusal, geometry, n)
    if roomy != code:
        return []
    records = [(r.block_hash, r.n_tokens, _padded(r)) for r in envelope.records]
    return _property_causes(implementation, code, geometry, envelope.version, records)


_REFUSED = "refused"  # a probe that could not answer (a fault, a pool refused)


def _probe(
    implementation: Adapter, geometry: oracle.Geometry, capacity: int, data: bytes, room: int
) -> str | None:
    """None when accepted, else the status (`_REFUSED` where the probe itself failed)."""
    try:
        return implementation.probe_import(geometry, capacity, data, room)
    except (ImplementationFault, NotObservable, Refused):
        return _REFUSED


def _limit_causes(
    implementation: Adapter, refusal: RefusalEvidence, geometry: oracle.Geometry, n: int
) -> list[Cause]:
    code = refusal.actual
    causes = []
    for limit in LIMITS:
        if refusal.pool is not None:
            at = refusal.pool.free if limit.name == "free-blocks" else refusal.pool.max_blocks
            if at != n:  # the case's pool was not at this limit
                continue
        capacity, room = limit.pool(n)
        if _probe(implementation, geometry, capacity, refusal.envelope, room) != code:
            continue
        room_more = "free" if limit.name == "free-blocks" else "max_blocks"
        causes.append(
            Cause(
                AT_LIMIT + limit.name,
                f"an import of {limit.what} refused (a > limit written as >=)",
                (limit.rule,),
                f"an import of {n} blocks refused with {code} at {room_more} {n}, accepted "
                f"with {n + 1}",
                frozenset({VALID_REFUSED.format(code=code)}),
            )
        )
    return causes


def _property_causes(
    implementation: Adapter,
    code: str,
    geometry: oracle.Geometry,
    version: int,
    records: Sequence[_RecordSeen],
) -> list[Cause]:
    b = geometry.block_tokens
    registered, other = _chained_hashes(b, 2)
    controls = _control_answers(implementation, geometry, version)
    causes = []
    for prop in PROPERTIES:
        if not prop.has(records, b) or (b == 1 and prop.name in _NEEDS_PARTIAL):
            continue
        without = _minimal(geometry, version, prop.without(registered, b))
        if _probe(implementation, geometry, 3, without, 3) is not None:
            continue  # the reader refuses the minimal envelope too: not this property
        with_it = _minimal(geometry, version, prop.with_it(registered, b))
        if _probe(implementation, geometry, 3, with_it, 3) != code:
            continue
        # the claim, tested: valid envelopes without it, of other lengths, all accepted, and
        # (where it allows another length) a second one with it refused too
        sizes = [len(data) for control, data, answer in controls if not prop.has(control, b)]
        if any(answer is not None for control, _, answer in controls if not prop.has(control, b)):
            continue  # refused without the property: the property does not explain it
        if prop.name != "zero-blocks":
            longer = _minimal(geometry, version, [(other, b, False), *prop.with_it(registered, b)])
            if _probe(implementation, geometry, 3, longer, 3) != code:
                continue
        causes.append(
            Cause(
                OVER_ENFORCED + prop.name,
                prop.title,
                ("READ-ACCEPT",),
                f"refused with {code}; a minimal envelope with it is refused with {code}, "
                f"the same without it is accepted, and so are valid envelopes of {sizes} bytes "
                "without it",
                frozenset({VALID_REFUSED.format(code=code)}),
            )
        )
    return causes


def _chained_hashes(b: int, n: int) -> list[int]:
    """The registered hashes of `n` chained full blocks of `b` tokens (1, 2, ...)."""
    hashes, parent = [], oracle.NO_HASH
    for index in range(n):
        parent = oracle.block_hash(parent, list(range(index * b + 1, (index + 1) * b + 1)))
        hashes.append(parent)
    return hashes


# What each implementation answered (None: accepted) to the control envelopes of a geometry and
# version: probed once, whatever property is tested.
_controls: weakref.WeakKeyDictionary[
    Adapter, dict[tuple[oracle.Geometry, int], list[tuple[list[_RecordSeen], bytes, str | None]]]
] = weakref.WeakKeyDictionary()


def _control_answers(
    implementation: Adapter, geometry: oracle.Geometry, version: int
) -> list[tuple[list[_RecordSeen], bytes, str | None]]:
    """(records, envelope, answer) of valid envelopes of 1, 2 and 3 full blocks (lengths that
    differ modulo 8 and 16 unless a record's size is a multiple of 16) and of a full block and a
    partial one: each has none of the properties but the partial block's."""
    known = _controls.setdefault(implementation, {})
    if (geometry, version) not in known:
        b = geometry.block_tokens
        full = [(h, b, False) for h in _chained_hashes(b, 3)]
        shapes = [full[:1], full[:2], full]
        if b > 1:
            shapes.append([full[0], (oracle.NO_HASH, b - 1, False)])
        answers = []
        for records in shapes:
            data = _minimal(geometry, version, records)
            answers.append((records, data, _probe(implementation, geometry, 3, data, 3)))
        known[(geometry, version)] = answers
    return known[(geometry, version)]


def _minimal(geometry: oracle.Geometry, version: int, records: list[_RecordSeen]) -> bytes:
    """A valid envelope of `records` (hash, n_tokens, padded), its filled positions 1.0, and
    those past the fill 0, or 1.0 where `padded` (bytes a writer must not write, a reader
    must read: the record's payload rewritten after the oracle's zero padding)."""
    blocks = []
    for block_hash, n_tokens, _ in records:
        values = np.zeros(geometry.values_shape, dtype=np.float32)
        values[:, :, :, :n_tokens, :] = 1.0
        blocks.append(oracle.Block(block_hash, n_tokens, values))
    data = bytearray(oracle.encode(geometry, blocks, version)[: -oracle.CRC_SIZE])
    size = geometry.record_size(version)
    for index, (_, _, padded) in enumerate(records):
        if padded:  # every position 1.0: the same scales, the same filled codes
            start = oracle.HEADER_SIZE + index * size + oracle.RECORD_PREFIX_SIZE
            ones = np.ones(geometry.values_shape, np.float32)
            everywhere = oracle.encode_payload(geometry, version, geometry.block_tokens, ones)
            data[start : start + len(everywhere)] = everywhere
    return oracle.seal(bytes(data))


# The properties a block_tokens of 1 cannot show (no partial block).
_NEEDS_PARTIAL = frozenset({"partial-block", "partial-before-last", "padding-not-zero"})


def _padded(record: oracle.Record) -> bool:
    """Whether a record's payload holds a value past its fill that is not zero."""
    past = record.decoded.values[..., record.n_tokens :, :]
    codes = record.decoded.codes
    if codes is not None:
        return bool(codes[..., record.n_tokens :, :].any())
    return bool(past.view(np.uint32).any())


def envelope_properties(data: bytes) -> frozenset[str]:
    """The over-enforced causes (ids) an envelope's properties could meet, read from its
    header and records by the header's own geometry, whatever rule it breaks: a rejection case
    refused with another status than its rule's may have been stopped by one of them."""
    try:
        geometry = oracle.header_geometry(data)
        version = oracle.HEADER_FIELDS["version"].read(data)
        n = oracle.HEADER_FIELDS["n_blocks"].read(data)
        size = geometry.record_size(version)
    except ValueError:
        return frozenset()
    if len(data) < oracle.HEADER_SIZE + n * size + oracle.CRC_SIZE:
        return frozenset()  # its records cannot be read as its header declares them
    records = [
        (
            oracle.RECORD_FIELDS["block_hash"].read(data, oracle.HEADER_SIZE + i * size),
            oracle.RECORD_FIELDS["n_tokens"].read(data, oracle.HEADER_SIZE + i * size),
            False,  # the payload not read here: a rejection case breaks its rule, not padding
        )
        for i in range(n)
    ]
    b = geometry.block_tokens
    return frozenset(OVER_ENFORCED + p.name for p in PROPERTIES if p.has(records, b))


def limit_answered(refusal: RefusalEvidence) -> str | None:
    """Which of the import's limits answered an envelope that breaks a reader rule, when its
    status is that limit's and the header's n_blocks is over it in the case's pool: the limit
    was checked before the rule (READ-RULES-FIRST). None when it does not fit."""
    pool = refusal.pool
    breaks_a_reader_rule = any(rule in oracle.READER_RULES for rule in refusal.rules)
    if pool is None or not breaks_a_reader_rule or len(refusal.envelope) < oracle.HEADER_SIZE:
        return None
    declared = oracle.HEADER_FIELDS["n_blocks"].read(refusal.envelope)
    if refusal.actual == "EINVAL" and declared > pool.max_blocks:
        return f"IMPORT-EINVAL's (the header's {declared} blocks, max_blocks {pool.max_blocks})"
    if refusal.actual in ("ENOMEM", "RESOURCE_EXHAUSTED") and declared > pool.free:
        return f"IMPORT-ENOMEM's (the header's {declared} blocks, {pool.free} free)"
    return None


# A refusal that leaves *n_out non-zero is a status breach of the import (all or nothing: 0
# after any failure), one mistake whatever rule the input breaks, not a fault on that input.
N_OUT_AFTER_REFUSAL = "n-out-after-refusal"


def fault_cause_id(fault: str, rule: str) -> str:
    """The cause id of a fault on input breaking `rule`: `N_OUT_AFTER_REFUSAL` for a refusal
    that left *n_out non-zero, else fault-on:RULE (a raise, crash, exit or hang on it)."""
    observed = observed_fault(fault)
    if observed.kind == "status" and "*n_out" in observed.what and "refuses" in observed.what:
        return N_OUT_AFTER_REFUSAL
    return f"fault-on:{rule}"
