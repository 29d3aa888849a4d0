"""The table-driven CRC engine the CRC models run (_crc_signatures): a 32-bit register shifted
right (reflected), right with its sign bit dragged in (a signed int32), or left."""

from __future__ import annotations

import functools

MASK = 0xFFFFFFFF


def reverse32(value: int) -> int:
    return int(f"{value:032b}"[::-1], 2)


@functools.cache
def _table(shift: str, polynomial: int) -> tuple[int, ...]:
    table = []
    for byte in range(256):
        if shift.startswith("right"):
            c = byte
            for _ in range(8):
                c = (c >> 1) ^ (polynomial if c & 1 else 0)
        else:
            c = byte << 24
            for _ in range(8):
                c = ((c << 1) & MASK) ^ (polynomial if c & 0x80000000 else 0)
        table.append(c)
    return tuple(table)


def run_crc(shift: str, polynomial: int, register: int, data: bytes) -> int:
    """The register after `data` (no final XOR, no reflection of the result)."""
    table = _table(shift, polynomial)
    if shift == "right":
        for byte in data:
            register = table[(register ^ byte) & 0xFF] ^ (register >> 8)
    elif shift == "right-signed":
        for byte in data:
            extended = 0xFF000000 if register & 0x80000000 else 0
            register = table[(register ^ byte) & 0xFF] ^ extended ^ (register >> 8)
    else:
        for byte in data:
            register = table[((register >> 24) ^ byte) & 0xFF] ^ ((register << 8) & MASK)
    return register
