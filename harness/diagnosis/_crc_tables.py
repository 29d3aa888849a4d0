"""Signatures of a CRC-32C whose lookup table is built wrongly: the register, its inversions,
the bytes covered and the trailer are the spec's (the parametrised CRC of _crc_signatures), but
the 256 entries the update looks up are not CRC-32C's. One parameter of the table's making,
each value tried: the entries reduced through K shift rounds, K from 1 to 16, not 8 (a loop
bound off: `for (k = 1; k < 8; k++)`); the table generated unreflected (shift left, Castagnoli's
normal form 0x1EDC6F41, each entry the high byte's) and looked up by the reflected update; or
the right table indexed by the register's high byte instead of its low one. A writer's trailer
is recomputed with each (a fallback: only where no point of the parametrised CRC gives it), and
a reader is probed with its envelope resealed by each (after the parametrised CRC's probes).
Where a writer's and a reader's table are built alike, both show it."""

from __future__ import annotations

import functools
import struct
import weakref
from collections.abc import Sequence
from dataclasses import dataclass

from .. import oracle
from ..adapters import Adapter
from ._causes import CRC_ONLY, FORMAT_ERRORS, Cause
from ._crc_engine import MASK
from ._crc_signatures import CASTAGNOLI, MAX_RECOMPUTED
from ._signatures import one_of

TABLE = "crc-table-"  # the id prefix of the causes below
CASTAGNOLI_NORMAL = 0x1EDC6F41
ROUNDS = 8  # the spec's table: each entry reduced through 8 shifts, one per bit of its byte


@dataclass(frozen=True)
class TableModel:
    """How the CRC-32C table is built and looked up: `rounds` shifts per entry, generated
    `unreflected` (shift left, normal form) or not, looked up by the register's low byte
    (`index` "low", the spec's) or its high one."""

    rounds: int = ROUNDS
    unreflected: bool = False
    index: str = "low"

    @property
    def cause_id(self) -> str:
        if self.rounds != ROUNDS:
            return f"{TABLE}rounds:{self.rounds}"
        return TABLE + ("unreflected" if self.unreflected else "indexed-by-high-byte")

    @property
    def title(self) -> str:
        if self.rounds != ROUNDS:
            return (
                f"the CRC-32C table built with {self.rounds} shift rounds per entry, not 8 "
                "(the table generator's bit loop bound off)"
            )
        if self.unreflected:
            return (
                "the CRC-32C table generated unreflected (shift left, 0x1edc6f41) but looked up "
                "by the reflected, shift-right update"
            )
        return (
            "the CRC-32C table looked up by the register's high byte ((crc >> 24) ^ byte), not "
            "its low byte"
        )

    def crc(self, data: bytes) -> int:
        """The CRC-32C of `data` computed with this table (init and final XOR the spec's)."""
        table, register = _table(self.rounds, self.unreflected), MASK
        if self.index == "low":
            for byte in data:
                register = table[(register ^ byte) & 0xFF] ^ (register >> 8)
        else:
            for byte in data:
                register = table[((register >> 24) ^ byte) & 0xFF] ^ (register >> 8)
        return register ^ MASK


@functools.cache
def _table(rounds: int, unreflected: bool) -> tuple[int, ...]:
    table = []
    for byte in range(256):
        if unreflected:
            c = byte << 24
            for _ in range(rounds):
                c = ((c << 1) & MASK) ^ (CASTAGNOLI_NORMAL if c & 0x80000000 else 0)
        else:
            c = byte
            for _ in range(rounds):
                c = (c >> 1) ^ (CASTAGNOLI if c & 1 else 0)
        table.append(c)
    return tuple(table)


MODELS: tuple[TableModel, ...] = (
    *(TableModel(rounds) for rounds in range(1, 17) if rounds != ROUNDS),
    TableModel(unreflected=True),
    TableModel(index="high"),
)

# What a table cause also explains in the run: every refusal its reader gives, and an export
# whose only difference is its trailer.
_EXPLAINS = FORMAT_ERRORS | {CRC_ONLY}


def _trailer(model: TableModel, body: bytes) -> bytes:
    return struct.pack("<I", model.crc(body))


def table_trailer_causes(body: bytes, trailer: bytes, reqs: tuple[str, ...]) -> list[Cause]:
    """The table mistake whose trailer for `body` is `trailer` (a writer's): one cause, or one
    of several giving exactly that trailer; [] when none does (or the body is too large)."""
    right = struct.pack("<I", oracle.crc32c(body))
    if trailer == right or len(body) > MAX_RECOMPUTED:
        return []
    causes = [
        Cause(
            model.cause_id,
            model.title,
            reqs,
            f"trailer {trailer.hex(' ')} is that computation's; CRC-32C gives {right.hex(' ')}",
            _EXPLAINS,
        )
        for model in MODELS
        if _trailer(model, body) == trailer
    ]
    return [one_of(causes)] if causes else []


# The table each implementation's reader was last found with: tried first on its next refusal.
_last_found: weakref.WeakKeyDictionary[Adapter, TableModel] = weakref.WeakKeyDictionary()


def table_resealed(
    envelope: bytes, implementation: Adapter
) -> list[tuple[Sequence[TableModel], bytes]]:
    """`envelope` with its trailer as each table model writes it: (the models writing those
    bytes, the envelope), the model last found for `implementation` first."""
    body = envelope[: -oracle.CRC_SIZE]
    if len(body) > MAX_RECOMPUTED:
        return []
    last = _last_found.get(implementation)
    ordered = MODELS if last is None else (last, *(m for m in MODELS if m != last))
    writing: dict[bytes, list[TableModel]] = {}
    for model in ordered:
        writing.setdefault(_trailer(model, body), []).append(model)
    trailer = envelope[-oracle.CRC_SIZE :]
    return [(models, body + t) for t, models in writing.items() if t != trailer]


def table_found_in_reader(
    implementation: Adapter, models: Sequence[TableModel], code: str
) -> Cause:
    """The reader cause of `models` (one of them where they wrote the same trailer), `models[0]`
    remembered for `implementation`'s next refusals."""
    _last_found[implementation] = models[0]
    named = one_of([Cause(m.cause_id, m.title, ("READ-CRC",)) for m in models])
    return Cause(
        named.id,
        named.title,
        ("READ-CRC",),
        f"refused with {code}, but accepted once its trailer was written that way",
        _EXPLAINS,
    )
