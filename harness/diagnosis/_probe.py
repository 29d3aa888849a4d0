"""Probing a reader that refused a valid envelope: the same envelope with its trailer as each
known CRC mistake writes it. A reader that accepts one of them has that mistake; the answer
is evidence, never a verdict (the test has failed already)."""

from __future__ import annotations

import contextlib
from typing import Any

from ..errors import ImplementationFault, NotObservable, Refused
from ._signatures import resealed_variants


def probe_reader(
    pool: Any, envelope: bytes, max_blocks: int, wanted: frozenset[str] = frozenset()
) -> tuple[str, str] | None:
    """(cause id, title) of the CRC mistake with which `pool` reads `envelope` as it should
    have: accepts it (`wanted` empty) or refuses it with one of `wanted`. Blocks a probe
    allocates are released again."""
    for cause_id, title, variant in resealed_variants(envelope):
        try:
            ids = pool.import_envelope(variant, max_blocks)
        except Refused as refusal:
            if refusal.code in wanted:
                return cause_id, title
            continue
        except (ImplementationFault, NotObservable):
            continue
        if wanted:
            for block in ids:
                with contextlib.suppress(Refused, ImplementationFault, NotObservable):
                    pool.release(block)
            continue
        for block in ids:
            with contextlib.suppress(Refused, ImplementationFault, NotObservable):
                pool.release(block)
        return cause_id, title
    return None
