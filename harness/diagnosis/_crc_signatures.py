"""Signatures of mistakes in the CRC-32C trailer (ENV-CRC, READ-CRC): one parametrised CRC, the
Rocksoft model, recomputed here with every plausible parameter and kept where it gives exactly
the implementation's trailer. The parameters: the register's shift (unsigned, or arithmetic: a
signed int32 register) and the polynomial constant
(Castagnoli, IEEE or Koopman, in reflected or normal form), the initial register (0xFFFFFFFF or
0), the final XOR (0xFFFFFFFF, 0, or another constant an engine writes for all ones,
MISTAKEN_XOROUTS), the result's bits reversed or not, the trailer's byte order,
and the bytes covered (the whole body, the header, the records, all but the magic, one byte
short, the body with a zeroed trailer, the body truncated to a multiple of 2, 4, 8 or 16
bytes). The spec's CRC is one point of that space (`RIGHT`)."""

from __future__ import annotations

import functools
import struct
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from itertools import product

from .. import oracle
from ..adapters import Adapter
from ._causes import CRC_ONLY, FORMAT_ERRORS, Cause
from ._crc_engine import MASK, reverse32, run_crc
from ._layout import residue_trailer
from ._signatures import one_of

CASTAGNOLI = 0x82F63B78  # reflected form; its normal form is 0x1EDC6F41

# What a CRC cause also explains elsewhere in the run: every refusal a broken reader CRC gives,
# and an export whose only difference is a trailer too large to be recomputed (see
# MAX_RECOMPUTED).
_CRC_EXPLAINS = FORMAT_ERRORS | {CRC_ONLY}
# Every CRC cause id starts so; a cause that a CRC mistake in the run accounts for (a rule
# refused with the CRC's status) yields to the family (Cause.yields_to).
CRC_FAMILY = "crc-*"

# Larger bodies are not recomputed (some sixty passes of a Python loop each): a writer's
# mistake shows on the run's smaller exports too.
MAX_RECOMPUTED = 1 << 16

_POLYNOMIALS = {
    0x82F63B78: "Castagnoli",
    0x1EDC6F41: "Castagnoli",
    0xEDB88320: "IEEE",
    0x04C11DB7: "IEEE",
    0xEB31D82E: "Koopman",
    0x741B8CD7: "Koopman",
}
_REFLECTED_FORMS = frozenset({0x82F63B78, 0xEDB88320, 0xEB31D82E})
# (shift, polynomial constant): a reflected CRC shifts right, an unreflected one left.
_ENGINES = (
    ("right", CASTAGNOLI),
    ("right", 0xEDB88320),
    ("right", 0x1EDC6F41),
    ("right", 0x04C11DB7),
    ("right", 0xEB31D82E),
    ("right", 0x741B8CD7),
    ("left", 0x1EDC6F41),
    ("left", 0x04C11DB7),
    ("left", 0x741B8CD7),
    ("left", CASTAGNOLI),
    # the register a signed int32 (a Java port whose >>> became >>): each shift right drags
    # the sign bit in
    ("right-signed", CASTAGNOLI),
)
# The bytes covered, as the writer takes them from the body (everything before the trailer),
# each with its cause id and title.
_COVERAGES = {
    "body": ("", ""),
    "header": ("crc-header-only", "the CRC over the header only"),
    "records": ("crc-records-only", "the CRC over the block records only, not the header"),
    "after-magic": ("crc-skips-magic", "the CRC over the body after the magic, not from byte 0"),
    "one-short": ("crc-misses-last-byte", "the CRC stops one byte short of the trailer"),
    "zeroed-trailer": (
        "crc-includes-trailer",
        "the CRC computed over the envelope with its zeroed trailer",
    ),
    # a reader's check only: the CRC over the whole envelope, its trailer included, compared
    # with a constant residue (RESIDUES)
    "residue:0xb798b438": (
        "crc-residue-uncomplemented",
        "the CRC checked the residue way against 0xB798B438, the register before the final "
        "complement, not the CRC-32C residue 0x48674BC7",
    ),
    "residue:0x00000000": (
        "crc-residue-zero",
        "the CRC checked the residue way against 0 (a CRC without its final XOR's residue), "
        "not the CRC-32C residue 0x48674BC7",
    ),
    # two spans' CRCs combined: the final XORs cancel, the trailer is the registers' XOR
    "xor-of-parts": (
        "crc-xor-of-parts",
        "the CRC of the header XOR the CRC of the records, not one CRC over both",
    ),
    # a loop taking W bytes a pass with no remainder loop: the body truncated to a multiple of W
    **{
        f"tail-dropped:{width}": (
            f"crc-tail-dropped:{width}",
            f"CRC-32C over the body's first multiple of {width} bytes: the last len % {width} "
            f"bytes left out (a loop unrolled by {width} with no remainder)",
        )
        for width in (2, 4, 8, 16)
    },
}


@dataclass(frozen=True)
class CrcModel:
    """One point of the parametrised CRC: how a trailer is computed from an envelope's body."""

    shift: str = "right"
    polynomial: int = CASTAGNOLI
    init: int = MASK
    xorout: int = MASK
    reversed_result: bool = False
    byte_order: str = "little"
    coverage: str = "body"

    def deviations(self) -> list[tuple[str, str]]:
        """(cause id, title) of each parameter that differs from the spec's CRC, in the
        order a reader of the title looks for them: the algorithm, then the register, the
        bytes covered, the trailer."""
        out = []
        if (self.shift, self.polynomial) == ("right", 0xEDB88320):
            out.append(
                (
                    "crc-ieee-polynomial",
                    "the IEEE CRC-32 polynomial (zlib.crc32) instead of Castagnoli",
                )
            )
        elif (self.shift, self.polynomial) == ("right-signed", CASTAGNOLI):
            out.append(
                (
                    "crc-register-signed",
                    "the CRC register a signed int32, shifted right arithmetically (the sign "
                    "bit dragged in), not an unsigned 32-bit shift",
                )
            )
        elif (self.shift, self.polynomial) != ("right", CASTAGNOLI):
            form = "reflected" if self.polynomial in _REFLECTED_FORMS else "normal"
            algorithm = (
                "a reflected, shift-right"
                if self.shift == "right"
                else "an unreflected, shift-left"
            )
            out.append(
                (
                    f"crc-polynomial:{self.shift}-{self.polynomial:#010x}",
                    f"the {_POLYNOMIALS[self.polynomial]} polynomial in {form} form "
                    f"({self.polynomial:#010x}) in {algorithm} CRC, not Castagnoli's "
                    f"{CASTAGNOLI:#010x} shifted right",
                )
            )
        if self.init != MASK:  # 0, the only other the model tries
            out.append(
                (
                    "crc-init-zero",
                    "CRC-32C computed with init 0 instead of 0xFFFFFFFF",
                )
            )
        if self.xorout == 0:
            out.append(("crc-no-final-xor", "CRC-32C without the final XOR with 0xFFFFFFFF"))
        elif self.xorout != MASK:
            out.append(
                (
                    f"crc-final-xor:{self.xorout:#010x}",
                    f"CRC-32C's final XOR with {self.xorout:#010x} "
                    f"({MISTAKEN_XOROUTS.get(self.xorout, 'another constant')}), not 0xFFFFFFFF",
                )
            )
        if self.reversed_result:
            out.append(
                ("crc-result-bits-reversed", "the CRC's 32 bits reversed before it is written")
            )
        if self.coverage != "body":
            out.append(_COVERAGES[self.coverage])
        if self.byte_order != "little":
            out.append(("crc-trailer-big-endian", "the CRC trailer written big-endian"))
        return out

    @property
    def cause_id(self) -> str:
        return "&".join(cause_id for cause_id, _ in self.deviations())

    @property
    def title(self) -> str:
        return "; and ".join(title for _, title in self.deviations())

    def trailer(self, register: int) -> bytes:
        value = reverse32(register) if self.reversed_result else register
        xorout = 0 if self.coverage == "xor-of-parts" else self.xorout
        return (value ^ xorout).to_bytes(4, self.byte_order)  # type: ignore[arg-type]


RIGHT = CrcModel()


# A final XOR other than all ones: the constant fitted from the trailer, so only those an engine
# plausibly writes for 0xFFFFFFFF are tried (a free 32-bit constant would fit any trailer).
MISTAKEN_XOROUTS = {
    0x0FFFFFFF: "0xFFFFFFF, a digit dropped",
    0x7FFFFFFF: "INT32_MAX taken for all ones",
    0x0000FFFF: "a 16-bit all-ones mask",
}


def _coverage_runs(body: bytes) -> Iterator[tuple[str, int, int]]:
    """(coverage, where its bytes start, where they end) for each coverage the body has room
    for; past the body's end lie the zeroed trailer's bytes."""
    yield "body", 0, len(body)
    yield "one-short", 0, len(body) - 1
    yield "zeroed-trailer", 0, len(body) + oracle.CRC_SIZE
    if len(body) >= oracle.HEADER_SIZE:
        yield "header", 0, oracle.HEADER_SIZE
        yield "records", oracle.HEADER_SIZE, len(body)
    yield "after-magic", 4, len(body)
    for width in (2, 4, 8, 16):  # none where the body is a multiple of W: the body's own CRC
        if len(body) % width:
            yield f"tail-dropped:{width}", 0, len(body) - len(body) % width


@functools.lru_cache(maxsize=64)
def _registers(body: bytes) -> dict[tuple[str, int, int, str], int]:
    """The register for every (shift, polynomial, init, coverage) over `body`: the runs from
    one start share their prefix (the header, one byte short, the body, its zeroed trailer)."""
    registers = {}
    ends: dict[int, list[tuple[str, int]]] = {}
    for coverage, start, end in _coverage_runs(body):
        ends.setdefault(start, []).append((coverage, end))
    extended = body + bytes(oracle.CRC_SIZE)
    for (shift, polynomial), init in product(_ENGINES, (MASK, 0)):
        for start, stops in ends.items():
            register, at = init, start
            for coverage, end in sorted(stops, key=lambda stop: stop[1]):
                register = run_crc(shift, polynomial, register, extended[at:end])
                at = end
                registers[(shift, polynomial, init, coverage)] = register
        parts = [registers.get((shift, polynomial, init, c)) for c in ("header", "records")]
        if None not in parts:
            registers[(shift, polynomial, init, "xor-of-parts")] = parts[0] ^ parts[1]  # type: ignore[operator]
    return registers


def _register(body: bytes, model: CrcModel) -> int | None:
    """The register of `model` over `body` alone (None: the body has no room for its
    coverage)."""
    if model.coverage == "xor-of-parts":
        parts = [_register(body, replace(model, coverage=c)) for c in ("header", "records")]
        return None if None in parts else parts[0] ^ parts[1]  # type: ignore[operator]
    for coverage, start, end in _coverage_runs(body):
        if coverage == model.coverage:
            covered = (body + bytes(oracle.CRC_SIZE))[start:end]
            return run_crc(model.shift, model.polynomial, model.init, covered)
    return None


def models_giving(body: bytes, trailer: bytes) -> list[CrcModel]:
    """Every model but the spec's whose trailer for `body` is `trailer`, the fewest
    deviations first ([] for a body too large to recompute)."""
    if len(body) > MAX_RECOMPUTED:
        return []
    found = []
    for (shift, polynomial, init, coverage), register in _registers(body).items():
        for xorout, reversed_result, byte_order in product(
            (MASK, 0), (False, True), ("little", "big")
        ):
            if coverage == "xor-of-parts" and xorout == 0:
                continue  # the XOR cancels the final XORs: the same trailer as with them
            model = CrcModel(shift, polynomial, init, xorout, reversed_result, byte_order, coverage)
            if model != RIGHT and model.trailer(register) == trailer:
                found.append(model)
    right = _registers(body)[(RIGHT.shift, RIGHT.polynomial, RIGHT.init, RIGHT.coverage)]
    xorout = right ^ int.from_bytes(trailer, "little")
    if xorout in MISTAKEN_XOROUTS:
        found.append(replace(RIGHT, xorout=xorout))
    return sorted(found, key=lambda m: (len(m.deviations()), m.cause_id))


# The models earlier exports' trailers were found to fit, tried first (in insertion order).
_found_in_writers: dict[CrcModel, None] = {}


def _known_model_giving(body: bytes, trailer: bytes) -> list[CrcModel]:
    for model in _found_in_writers:
        register = _register(body, model)
        if register is not None and model.trailer(register) == trailer:
            return [model]
    return []


def crc_trailer_causes(body: bytes, trailer: bytes, reqs: tuple[str, ...]) -> list[Cause]:
    """The CRC mistake whose trailer for `body` is `trailer` (a writer's): one cause, or one
    of several giving exactly that trailer; [] when none does."""
    right = struct.pack("<I", oracle.crc32c(body))
    if trailer == right:
        return []
    # A model found in an earlier export of the run, recomputed alone, before the whole space:
    # a run whose writer is wrong fails many exports the same way.
    models = _known_model_giving(body, trailer) or models_giving(body, trailer)
    _found_in_writers.update(dict.fromkeys(models))
    causes = []
    for model in models:
        evidence = (
            f"trailer {trailer.hex(' ')} is that computation's; CRC-32C gives {right.hex(' ')}"
        )
        if model == replace(RIGHT, xorout=0):
            evidence += (
                f" ({int.from_bytes(trailer, 'little'):#010x} = "
                f"{int.from_bytes(right, 'little'):#010x} XOR 0xffffffff)"
            )
        causes.append(Cause(model.cause_id, model.title, reqs, evidence, _CRC_EXPLAINS))
    return [one_of(causes)] if causes else []


# -- a reader, probed with its envelope resealed -----------------------------------------------

# The models a refused envelope is resealed with, one probe each, the likeliest first: every
# single parameter off, and both of the register's inversions missing.
PROBED: tuple[CrcModel, ...] = (
    replace(RIGHT, xorout=0),
    replace(RIGHT, polynomial=0xEDB88320),
    replace(RIGHT, init=0),
    replace(RIGHT, init=0, xorout=0),
    replace(RIGHT, byte_order="big"),
    replace(RIGHT, shift="right-signed"),
    replace(RIGHT, polynomial=0x1EDC6F41),
    replace(RIGHT, shift="left", polynomial=0x1EDC6F41),
    *(replace(RIGHT, coverage=c) for c in _COVERAGES if c != "body"),
    replace(RIGHT, reversed_result=True),
    *(
        replace(RIGHT, shift=shift, polynomial=polynomial)
        for shift, polynomial in _ENGINES[3:]
        if (shift, polynomial) not in (("left", 0x1EDC6F41), ("right-signed", CASTAGNOLI))
    ),
)

# The model each implementation's reader was last found with: tried first on its next refusal.
_last_found: weakref.WeakKeyDictionary[Adapter, CrcModel] = weakref.WeakKeyDictionary()


def resealed_variants(
    envelope: bytes, implementation: Adapter | None = None
) -> list[tuple[CrcModel, bytes]]:
    """`envelope` with its trailer as each probed model writes it, those that differ from the
    envelope: (model, bytes), the model last found for `implementation` first."""
    body, trailer = envelope[: -oracle.CRC_SIZE], envelope[-oracle.CRC_SIZE :]
    last = _last_found.get(implementation) if implementation is not None else None
    # The reader's model last found first, then the run's writers' (an engine's reader and
    # writer call one CRC function), then every single mistake.
    first = ([last] if last is not None else []) + list(_found_in_writers)
    models: Sequence[CrcModel] = list(dict.fromkeys([*first, *PROBED]))
    registers = _registers(body) if len(body) <= MAX_RECOMPUTED else {}
    out, first_writing = [], {}
    _coincident.clear()
    for model in models:
        register = registers.get((model.shift, model.polynomial, model.init, model.coverage))
        if model.coverage.startswith("residue:"):
            mistaken = residue_trailer(body, int(model.coverage.split(":")[1], 16))
        elif register is None:
            continue
        else:
            mistaken = model.trailer(register)
        if mistaken == trailer:
            continue
        if mistaken in first_writing:  # the same bytes: one probe, the mistakes named together
            twin = first_writing[mistaken]
            _coincident[twin] = (*_coincident.get(twin, (twin,)), model)
        else:
            first_writing[mistaken] = model
            out.append((model, body + mistaken))
    return out


# The models that wrote the last resealed envelope's trailer exactly as another probed before
# them did (a loop by 2 dropping the last byte of an odd body, by 8 or 16 the same 4 bytes):
# the probe cannot tell them apart.
_coincident: dict[CrcModel, tuple[CrcModel, ...]] = {}


def found_in_reader(implementation: Adapter, model: CrcModel) -> tuple[str, str]:
    """Remember `model` for `implementation`'s next refusals; its (cause id, title), "one of"
    the models that wrote the same trailer."""
    _last_found[implementation] = model
    # in PROBED's order, whatever order they were tried in: the same mistakes, the same id
    order = {m: i for i, m in enumerate(PROBED)}
    models = sorted(_coincident.get(model, (model,)), key=lambda m: order.get(m, -1))
    named = one_of([Cause(m.cause_id, m.title, ("READ-CRC",), "") for m in models])
    return named.id, named.title


def reader_crc_cause(cause_id: str, title: str, code: str) -> Cause:
    return Cause(
        cause_id,
        title,
        ("READ-CRC",),
        f"refused with {code}, but accepted once its trailer was written that way",
        _CRC_EXPLAINS,
    )
