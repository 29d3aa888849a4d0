"""A header constant written in another form (issue 27): the magic's four bytes in another
order, as a writer that puts "TLKV" through an integer path writes them (the u32 0x544C4B56,
"TLKV" read as a big-endian number, written little-endian: "VKLT"). Each order of the four
bytes is recomputed into the export due, resealed, and named only where it gives the
implementation's export exactly, every other byte the spec's; the spec's bytes being distinct,
at most one order fits."""

from __future__ import annotations

import itertools

from .. import oracle
from ._causes import Cause

MAGIC = oracle.HEADER_FIELDS["magic"]
# The orders an engine's integer path writes, by what it is: positions of the spec's bytes.
_NAMED_ORDERS = {
    (3, 2, 1, 0): (
        "reversed",
        "its four bytes reversed: the u32 its bytes read as big-endian, written "
        "little-endian like the other header fields",
    ),
    (2, 3, 0, 1): ("halves-swapped", "its two 16-bit halves swapped"),
    (1, 0, 3, 2): ("pairs-swapped", "the bytes of each 16-bit half swapped"),
}


def magic_order_causes(expected: bytes, actual: bytes) -> list[Cause]:
    """`magic-byte-order:ORDER` where the export is the one due with its magic's four bytes in
    that other order (and the CRC the bytes' own); [] otherwise."""
    start, size = MAGIC.offset, MAGIC.size
    due = expected[start : start + size]
    got = actual[start : start + size]
    if got == due or len(expected) != len(actual):
        return []
    for order in itertools.permutations(range(size)):
        written = bytes(due[i] for i in order)
        if written != got:
            continue
        body = expected[:start] + written + expected[start + size : -oracle.CRC_SIZE]
        if oracle.seal(body) != actual:
            return []
        name, how = _NAMED_ORDERS.get(
            order, ("".join(str(i + 1) for i in order), "its bytes in another order")
        )
        text = written.decode("ascii", "backslashreplace")
        return [
            Cause(
                f"magic-byte-order:{name}",
                f'the magic written as "{text}", not "{due.decode("ascii", "backslashreplace")}" '
                f"({how})",
                ("ENV-HEADER",),
                f"the export is the one due but for its first {size} bytes, {got.hex(' ')}",
            )
        ]
    return []
