"""CRC-32C (Castagnoli) through the crc32c package."""

from __future__ import annotations

import crc32c as _crc32c


def crc32c(data: bytes) -> int:
    """CRC-32C of `data`: reflected polynomial 0x82F63B78, init and final XOR 0xFFFFFFFF."""
    return _crc32c.crc32c(data)
