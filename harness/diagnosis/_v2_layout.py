"""General models of a v2 writer: the right numbers in the wrong place or form.

Each model recomputes, from the oracle's records (due codes and scales) and, where it needs
them, the blocks' values, what a class of mistake writes, with each value of its parameter; a
cause is named only when one parameter gives exactly the bytes written in every record of the
export (every slab), and the title gives it.

- place: the due scales, codes right, written in another order of the [L][2][Hkv] axes
  (column-major among them), or at another byte stride (a byte pointer indexed as a float one:
  the scales overlap);
- form: each due scale, codes right, written as a fixed transform of itself (big-endian bytes,
  its reciprocal, rounded to f16 or bf16, the amax undivided);
- amax: the scale the right formula gives from an amax taken over another representation of the
  stored elements (their bit patterns as integers), the codes encoded right with that scale;
- carry: the e4m3 encoder losing the carry of a mantissa rounded up to the next power of two,
  the scales right.
The decoder's models are in `_v2_decoder`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from .. import oracle
from ._causes import Cause
from ._codec_model import _scales_of, named

F32 = np.float32
SCALE_SIZE = oracle.SCALE_SIZE
_AXES = ("L", "2", "Hkv")
# the byte strides a scale array indexed through the wrong pointer type lands on, within the
# array (a float pointer indexed as bytes: 1; as 16-bit or 24-bit units: 2, 3)
_STRIDES = (1, 2, 3)


@dataclass(frozen=True)
class ScaledRecord:
    """One record of a v2 export as the oracle wrote it and as the implementation did: its
    payload split into codes and scales; `values`: the block's filled values [L][2][Hkv][n][D]
    when known."""

    want: bytes
    got: bytes
    n_codes: int
    lead: tuple[int, int, int]
    values: np.ndarray | None = None

    @property
    def codes_right(self) -> bool:
        return self.want[: self.n_codes] == self.got[: self.n_codes]

    @property
    def due_scales(self) -> np.ndarray:
        return np.frombuffer(self.want[self.n_codes :], dtype="<f4").reshape(self.lead)

    @property
    def got_scale_bytes(self) -> bytes:
        return self.got[self.n_codes :]


# -- place ------------------------------------------------------------------------------------


def _axes_name(order: Sequence[int]) -> str:
    return "".join(f"[{_AXES[a]}]" for a in order)


def _orders(lead: tuple[int, int, int]) -> dict[str, tuple[str, Callable[[np.ndarray], bytes]]]:
    """The scale array written in each other order of its axes; orders that differ only in
    where an axis of size 1 goes write the same bytes, and are left out."""
    out: dict[str, tuple[str, Callable[[np.ndarray], bytes]]] = {}
    right = tuple(a for a in range(3) if lead[a] != 1)
    seen = {right}
    for order in itertools.permutations(range(3)):
        moved = tuple(a for a in order if lead[a] != 1)
        if moved in seen:
            continue
        seen.add(moved)
        name = _axes_name(order)
        column_major = " (column-major)" if order == (2, 1, 0) else ""
        out[f"v2-scale-order:{name}"] = (
            f"the slab scales written in {name} order{column_major}, not [L][2][Hkv]",
            lambda s, order=order: np.ascontiguousarray(s.transpose(order)).astype("<f4").tobytes(),
        )
    return out


def _strided_fits(due: np.ndarray, got: bytes, stride: int) -> bool:
    """Whether `got` holds each due scale's 4 bytes written at byte offset stride * s in turn
    (each later one over the earlier); the bytes no write reached are not judged."""
    written = bytearray(got)
    reached = np.zeros(len(got), dtype=bool)
    for s, scale in enumerate(due.astype("<f4").ravel()):
        at = stride * s
        written[at : at + SCALE_SIZE] = scale.tobytes()
        reached[at : at + SCALE_SIZE] = True
    return bytes(written) == got and bool(reached.any())


def place_causes(records: Sequence[ScaledRecord]) -> list[Cause]:
    """The due scales written elsewhere in the scale array, the codes right."""
    differing = _differing(records)
    if not differing:
        return []
    lead = differing[0].lead
    causes = []
    for cause_id, (title, write) in _orders(lead).items():
        if all(write(r.due_scales) == r.got_scale_bytes for r in differing):
            causes.append(_cause(cause_id, title, "V2-LAYOUT", differing))
    for stride in _STRIDES:
        if all(_strided_fits(r.due_scales, r.got_scale_bytes, stride) for r in differing):
            causes.append(
                _cause(
                    f"v2-scale-stride:{stride}",
                    f"scale s written at byte offset {stride}*s instead of 4*s (the scale array "
                    "indexed through a pointer of the wrong width: the scales overlap)",
                    "V2-LAYOUT",
                    differing,
                )
            )
    return named(causes)


# -- form -------------------------------------------------------------------------------------


def _forms() -> dict[str, tuple[str, str, Callable[[np.ndarray], np.ndarray]]]:
    """cause id -> (title, requirement, the f32 bits written for each due scale)."""
    with np.errstate(all="ignore"):
        return {
            "v2-scale-big-endian": (
                "the slab scales written as big-endian f32 (the codes and other fields "
                "little-endian)",
                "ENV-LE",
                lambda s: s.astype(">f4").view("<f4"),
            ),
            "v2-scale-inverted": (
                "the slab scale written as its inverse 1 / (amax / 448), the quantisation "
                "multiplier, though the codes are divided by the right scale",
                "V2-SCALE",
                lambda s: (F32(1) / s).astype(F32),
            ),
            "v2-scale-stored:f16": (
                "the slab scales stored rounded to f16 (the codes encoded with the f32 scale)",
                "V2-SCALE",
                lambda s: s.astype(np.float16).astype(F32),
            ),
            "v2-scale-stored:bf16": (
                "the slab scales stored rounded to bf16 (the codes encoded with the f32 scale)",
                "V2-SCALE",
                lambda s: s.astype(ml_dtypes.bfloat16).astype(F32),
            ),
            # An int32 writes the same bytes as a uint32 (every scale is 0 or more and far
            # below 2^31 in a real export), so one id names both.
            "v2-scale-stored:uint32-value": (
                "the slab scale written as the integer its value converts to (truncated toward "
                "0: 0 for every scale below 1), not its f32 bit pattern",
                "V2-LAYOUT",
                lambda s: _as_u32_bits(np.trunc(s)),
            ),
            "v2-scale-stored:uint32-rounded": (
                "the slab scale written as its value rounded to the nearest integer, halves "
                "up (roundf, or + 0.5 truncated: 0 for every scale below 0.5), not its f32 bit "
                "pattern",
                "V2-LAYOUT",
                lambda s: _as_u32_bits(np.floor(s + F32(0.5))),
            ),
        }


_INTEGER_FORMS = (":uint32-value", ":uint32-rounded")


def _written_scales(record: ScaledRecord) -> np.ndarray:
    """The record's scale array as written, each as its u32 bits."""
    return np.frombuffer(record.got_scale_bytes, dtype="<u4").reshape(record.lead)


def _as_u32_bits(whole: np.ndarray) -> np.ndarray:
    """Whole numbers written as u32 integers, as the f32 array whose bytes those are (an
    integer form compared like the float ones); beyond a u32's range, no such form."""
    if not (np.isfinite(whole).all() and (whole >= 0).all() and (whole < 2**32).all()):
        return np.full(whole.shape, np.nan, dtype=F32)  # no integer: written bytes never NaN-ish
    return whole.astype(np.uint32).view(F32)


def form_causes(records: Sequence[ScaledRecord]) -> list[Cause]:
    """Each due scale written as one fixed transform of itself, the codes right."""
    differing = _differing(records)
    if not differing:
        return []
    causes = []
    # A slab of zeros' 1.0 written as the integer 1 is the bits of the least f32 subnormal, a
    # floor's clamp too (v2-scale-floor, tried later): only a slab with values tells them apart.
    zeros_alone = all(
        (r.due_scales == 1)[_written_scales(r) != r.due_scales.view(np.uint32)].all()
        for r in differing
    )
    for cause_id, (title, req, transform) in _forms().items():
        if zeros_alone and cause_id.endswith(_INTEGER_FORMS):
            continue
        with np.errstate(all="ignore"):
            fits = all(
                transform(r.due_scales).astype("<f4").tobytes() == r.got_scale_bytes
                for r in differing
            )
        if fits:
            causes.append(_cause(cause_id, title, req, differing))
    # the amax itself, not divided (known only with the blocks' values)
    if all(r.values is not None for r in differing) and all(
        _scales_of(np.abs(r.values).max(axis=(-2, -1)), lambda a: a).astype("<f4").tobytes()
        == r.got_scale_bytes
        for r in differing
    ):
        causes.append(
            _cause(
                "v2-scale-undivided",
                "the slab's amax written as its scale, not amax / 448, though the codes are "
                "divided by the right scale",
                "V2-SCALE",
                differing,
            )
        )
    return named(causes)


def _differing(records: Sequence[ScaledRecord]) -> list[ScaledRecord]:
    """The records whose scales differ, when every record's codes are right (else none: the
    models here are of the scales alone)."""
    if not all(r.codes_right for r in records):
        return []
    return [r for r in records if r.want != r.got]


def _cause(cause_id: str, title: str, req: str, differing: Sequence[ScaledRecord]) -> Cause:
    first = differing[0]
    due = first.due_scales.ravel()
    got = first.got_scale_bytes
    return Cause(
        cause_id,
        title,
        (req,),
        f"every scale of the {len(differing)} differing record(s) so written, the codes right "
        f"(e.g. due {float(due[0])!r}, written bytes {got[:SCALE_SIZE].hex(' ')})",
    )


# -- amax over another representation --------------------------------------------------------


def _bit_patterns(values: np.ndarray) -> dict[str, tuple[str, np.ndarray]]:
    """The elements as the integer value of their bit pattern, in each narrow storage type,
    read unsigned or signed (amax then takes the magnitude of that integer)."""
    out = {}
    for name, dtype in (("f16", np.float16), ("bf16", ml_dtypes.bfloat16)):
        for signed, word in (("", np.uint16), ("signed-", np.int16)):
            out[f"{name}-{signed}bits"] = (
                f"amax taken over the {name} elements' bit patterns read as {signed or 'un'}"
                "signed 16-bit integers, not their values (the raw storage word cast to float)",
                values.astype(dtype).view(word).astype(F32),
            )
    return out


def _named_in_every(
    differing: Sequence[ScaledRecord],
    fits: Callable[[ScaledRecord], dict[str, str] | None],
    prefix: str,
    req: str,
) -> list[Cause]:
    """`prefix:NAME` for each variant NAME that `fits` (variant -> title; None: the model does
    not apply) finds in every differing record."""
    names: set[str] | None = None
    titles: dict[str, str] = {}
    for record in differing:
        here = fits(record)
        if here is None:
            return []
        titles.update(here)
        names = set(here) if names is None else names & set(here)
    return named(
        [_cause(f"{prefix}:{name}", titles[name], req, differing) for name in sorted(names or ())]
    )


def amax_causes(records: Sequence[ScaledRecord]) -> list[Cause]:
    """The scale amax / 448 from the amax of another representation of the elements, the codes
    the values encoded right with that scale, in every differing record."""
    differing = [r for r in records if r.want != r.got]
    if not differing or any(r.values is None for r in differing):
        return []

    def fits(record: ScaledRecord) -> dict[str, str]:
        x = np.asarray(record.values, dtype=F32)
        fitting = {}
        for name, (title, seen) in _bit_patterns(x).items():
            amax = np.abs(seen).max(axis=(-2, -1))
            scales = _scales_of(amax, lambda a: a / F32(oracle.E4M3_MAX))
            if _encoded_with(record, x, scales):
                fitting[name] = title
        return fitting

    return _named_in_every(differing, fits, "v2-amax-of", "V2-SCALE")


def _encoded_with(record: ScaledRecord, x: np.ndarray, scales: np.ndarray) -> bool:
    """Whether the record's scales are `scales` and its filled codes are `x` encoded right with
    them."""
    if scales.astype("<f4").tobytes() != record.got_scale_bytes:
        return False
    with np.errstate(all="ignore"):
        codes = oracle.f32_to_e4m3_codes(oracle.e4m3_quotients(x, scales))
    fill = x.shape[-2]
    got = np.frombuffer(record.got[: record.n_codes], dtype=np.uint8).reshape(
        *record.lead, -1, x.shape[-1]
    )
    return bool((got[..., :fill, :] == codes).all())


def v2_scale_causes(records: Sequence[ScaledRecord]) -> list[Cause]:
    """The first of the models here that reproduces every differing record exactly."""
    return place_causes(records) or form_causes(records) or amax_causes(records)


# -- the e4m3 encoder's carry ----------------------------------------------------------------


def _carry_variants(codes: np.ndarray, q: np.ndarray) -> dict[str, tuple[str, np.ndarray]]:
    """The right codes of quotients `q` as an encoder that mishandles the carry of a mantissa
    rounded up to the next power of two (a normal code whose mantissa bits come out 0 though
    |q| lies below its value) writes them."""
    exponent = (codes.astype(np.int64) >> 3) & 0xF
    with np.errstate(all="ignore"):
        carried = (
            ((codes & 0x07) == 0)
            & (exponent >= 2)
            & (np.abs(q) < np.abs(oracle.e4m3_codes_to_f32(codes)))
        )
    lower = (codes.astype(np.int64) - 8).astype(np.uint8)
    return {
        "or": (
            "the normal e4m3 code assembled with | instead of + from the exponent field and the "
            "rounded mantissa: a mantissa rounding up to the next power of two loses its carry "
            "where the exponent field is odd (the code at half its value)",
            np.where(carried & (exponent % 2 == 0), lower, codes),
        ),
        "dropped": (
            "a mantissa rounding up to the next power of two does not carry into the exponent "
            "(the code at half its value)",
            np.where(carried, lower, codes),
        ),
    }


def carry_causes(records: Sequence[ScaledRecord]) -> list[Cause]:
    """The codes as an encoder losing the mantissa's carry writes them, the scales right, in
    every differing record (one variant for all)."""
    differing = [r for r in records if r.want != r.got]
    if not differing or any(r.values is None for r in differing):
        return []

    def fits(record: ScaledRecord) -> dict[str, str] | None:
        if record.want[record.n_codes :] != record.got_scale_bytes:
            return None
        x = np.asarray(record.values, dtype=F32)
        fill = x.shape[-2]
        shape = (*record.lead, -1, x.shape[-1])
        got = np.frombuffer(record.got[: record.n_codes], dtype=np.uint8).reshape(shape)
        with np.errstate(all="ignore"):
            q = oracle.e4m3_quotients(x, record.due_scales)
        right = oracle.f32_to_e4m3_codes(q)
        return {
            name: title
            for name, (title, codes) in _carry_variants(right, q).items()
            if (codes == got[..., :fill, :]).all() and (codes != right).any()
        }

    return _named_in_every(differing, fits, "e4m3-encode-carry", "V2-E4M3")


def v2_writer_causes(records: Sequence[ScaledRecord]) -> list[Cause]:
    """The first of the writer's models here that reproduces every differing record exactly."""
    return v2_scale_causes(records) or carry_causes(records)
