"""Integers of the wrong width or signedness (issue 27): an envelope's integer field written in
fewer bytes than its own (the value cut to them, then zero- or sign-extended), and a block hash
that raises on a token id outside the range of the integer type the engine packs ids as. Each
model is recomputed with every candidate width and signedness and kept only where it gives
exactly what the implementation gave (the block hash's own widths and extensions are a
parameter of its model, `_hash_models.TokenCode`; the CRC register's signedness, of the CRC's,
`_crc_signatures`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .. import oracle
from ..adapters import Adapter
from ..errors import ImplementationFault, NotObservable, Refused
from ._causes import Cause
from ._faults import fault_title
from ._signatures import one_of


@dataclass(frozen=True)
class IntegerWidth:
    """A field of `size` bytes written as a `bits`-bit integer, `signed` or not, extended to
    the field's size (zero bytes, or the sign bit repeated), little-endian."""

    bits: int
    signed: bool

    @property
    def kind(self) -> str:
        return f"{'int' if self.signed else 'uint'}{self.bits}"

    def encode(self, value: int, size: int) -> bytes:
        value &= (1 << self.bits) - 1
        if self.signed and value >> (self.bits - 1):
            value -= 1 << self.bits
        return (value & ((1 << (8 * size)) - 1)).to_bytes(size, "little")

    def title(self, field: str, size: int) -> str:
        if self.signed:
            return (
                f"{field} written as a signed {self.bits}-bit integer, sign-extended to "
                f"{8 * size} bits"
            )
        return (
            f"{field} written in {self.bits} bits then {size - self.bits // 8} zero bytes "
            f"(its high {8 * size - self.bits} bits lost)"
        )


# Every narrower width an engine's variable may hold a field in, unsigned first.
WIDTHS = tuple(IntegerWidth(bits, signed) for signed in (False, True) for bits in (32, 16, 8))

# Each integer field of the envelope (its offset in the header or in a block record), with
# the requirement its bytes belong to.
_RECORD_REQS = {"block_hash": "ENV-RECORD-HASH", "n_tokens": "ENV-RECORD"}


def field_width_causes(
    expected: bytes,
    actual: bytes,
    record_offsets: Sequence[int],
    header_reqs: dict[str, str],
    differing: Sequence[int],
) -> list[Cause]:
    """The field written in a narrower integer whose bytes are exactly the implementation's in
    every instance of that field (every record's block_hash, say), where the differing bytes of
    the body lie in such fields alone; [] when any differing byte is left unexplained."""
    fields = [
        (name, header_reqs.get(name, "ENV-HEADER"), f.size, [f.offset])
        for name, f in oracle.HEADER_FIELDS.items()
        if name != "magic"
    ] + [
        (f"a record's {name}", _RECORD_REQS[name], f.size, [o + f.offset for o in record_offsets])
        for name, f in oracle.RECORD_FIELDS.items()
    ]
    body_end = len(expected) - oracle.CRC_SIZE
    unexplained = {int(i) for i in differing if i < body_end}
    causes = []
    for name, req, size, offsets in fields:
        want = [expected[o : o + size] for o in offsets]
        got = [actual[o : o + size] for o in offsets]
        if want == got:
            continue
        value, as_written = next((w, g) for w, g in zip(want, got, strict=True) if w != g)
        fitting = [
            Cause(
                f"field-width:{name.split()[-1]}={width.kind}",
                width.title(name, size),
                (req,),
                f"{int.from_bytes(value, 'little'):#x} written as {as_written.hex(' ')}; "
                f"all {len(offsets)} of the field's instances so",
            )
            for width in WIDTHS
            if width.bits < 8 * size
            and [width.encode(int.from_bytes(w, "little"), size) for w in want] == got
        ]
        if fitting:  # several when the values cannot tell them apart (no sign bit set)
            unexplained -= {o + i for o in offsets for i in range(size)}
            causes.append(one_of(fitting))
    return causes if causes and not unexplained else []


# -- a block hash that raises on an input out of its integer type's range --------------------

# The integer types an engine may pack token ids, and the parent hash, as, the narrowest first
# (a probe past the type's range may crash the implementation: from the narrowest, one crash
# at most finds the type): (title, first value out of range).
_TOKEN_TYPES = (
    ("signed 16-bit (int16)", 1 << 15),
    ("unsigned 16-bit (uint16)", 1 << 16),
    ("signed 32-bit (int32)", 1 << 31),
)
_PARENT_TYPES = (
    ("signed 32-bit (int32)", 1 << 31),
    ("unsigned 32-bit (uint32)", 1 << 32),
    ("signed 64-bit (int64)", 1 << 63),
)
_PROBE_TOKEN = 1  # the token of a parent's probe block: in every type's range


def hash_fault_causes(
    implementation: Adapter | None, parent: int, tokens: Sequence[int], fault: str
) -> list[Cause]:
    """fault-on:HASH-INPUT when the hash faulted on a block holding a token id, or under a
    parent, out of the range of an integer type, and the implementation, probed, hashes a block
    of the largest value of that type without a fault and faults on the next one (the input
    packed as that type); [] when no type's boundary is where it faults."""
    if implementation is None:
        return []
    for title, limit in _TOKEN_TYPES if tokens else ():
        if max(tokens) < limit:
            continue
        if _faults(implementation, parent, [limit - 1]) is False and _faults(
            implementation, parent, [limit]
        ):
            return [
                Cause(
                    "fault-on:HASH-INPUT",
                    f"{fault_title(fault)} on a token id of {limit:#x} or more (token ids "
                    f"packed as {title})",
                    ("HASH-INPUT",),
                    f"a block of the one token {limit - 1:#x} hashed, of {limit:#x} faults",
                )
            ]
    for title, limit in _PARENT_TYPES:
        if parent < limit:
            continue
        if _faults(implementation, limit - 1, [_PROBE_TOKEN]) is False and _faults(
            implementation, limit, [_PROBE_TOKEN]
        ):
            return [
                Cause(
                    "fault-on:HASH-INPUT",
                    f"{fault_title(fault)} under a parent hash of {limit:#x} or more (the "
                    f"parent packed as {title})",
                    ("HASH-INPUT",),
                    f"a block under the parent {limit - 1:#x} hashed, under {limit:#x} faults",
                )
            ]
    return []


def _faults(implementation: Adapter, parent: int, tokens: Sequence[int]) -> bool | None:
    """Whether hashing the block `tokens` under `parent` faults (None: no answer either way)."""
    try:
        implementation.block_hash(parent, list(tokens))
    except ImplementationFault:
        return True
    except (NotObservable, Refused):
        return None
    return False
