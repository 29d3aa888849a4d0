"""Families of numeric mistakes as parametrised codecs, fitted exactly to the evidence.

A minifloat encoder (f16 or e4m3) is the right one but for one parameter: its rounding, its
subnormals (flushed, shifted a bit too far or too short, quantised below the least normal
exponent), the exponent bias of the codes it writes, what it writes past the range. A v2
writer's scale is the right one but for how amax is taken (signed, over K and V together, over
the whole block) or what divides it. A v2 decoder is the right one but for its exponent bias or
dividing by the scale. Each variant is computed again here and named only where it gives
exactly the codes, scales or values the implementation gave, on every element of the evidence,
the unchanged ones included; several that do are named together ("one of"). A cause is named
in the format of its evidence only: an f16 store's mistake is never an e4m3 one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from .. import oracle
from ._causes import Cause
from ._f16_models import OVERFLOW_RULES, OverflowRule
from ._signatures import ONE_OF, one_of

F32 = np.float32
MAX_DIVISOR = 65536  # a scale's divisor read off the evidence is tried up to this
MAX_ALTERNATIVES = 4  # more variants fitting the same bytes say nothing an engine team can use


@dataclass(frozen=True)
class Minifloat:
    """A binary floating-point format of one sign bit, exponent and mantissa fields."""

    name: str
    man_bits: int
    bias: int
    max_code: int  # the largest finite magnitude's code
    overflow_code: int  # what the right encoder writes past the range (f16 infinity, e4m3 NaN)
    sign_bit: int
    prefix: str  # of the cause ids of its encoder's mistakes
    reqs: tuple[str, ...]

    def right_codes(self, x: np.ndarray) -> np.ndarray:
        if self.name == "f16":
            return oracle.f32_to_f16_bits(x).astype(np.int64)
        return oracle.f32_to_e4m3_codes(x).astype(np.int64)


F16 = Minifloat("f16", 10, 15, 0x7BFF, 0x7C00, 0x8000, "f16", ("V1-F16",))
E4M3 = Minifloat("e4m3", 3, 7, 0x7E, 0x7F, 0x80, "v2", ("V2-E4M3",))

NEAREST_EVEN = "nearest-even"
# How a magnitude t between two integers is rounded (`negative`: the value's sign).
ROUNDINGS: dict[str, tuple[str, Callable[[np.ndarray, np.ndarray], np.ndarray]]] = {
    NEAREST_EVEN: ("to nearest, ties to even", lambda t, n: np.rint(t)),
    "ties-away": ("to nearest with ties away from zero", lambda t, n: np.floor(t + 0.5)),
    "ties-toward-zero": ("to nearest with ties toward zero", lambda t, n: np.ceil(t - 0.5)),
    "ties-up": (
        "to nearest with ties toward +infinity",
        lambda t, n: np.where(n, np.ceil(t - 0.5), np.floor(t + 0.5)),
    ),
    "toward-zero": ("toward zero (truncated)", lambda t, n: np.floor(t)),
    "away-from-zero": ("away from zero", lambda t, n: np.ceil(t)),
    "toward-minus-infinity": (
        "toward -infinity (floor)",
        lambda t, n: np.where(n, np.ceil(t), np.floor(t)),
    ),
    "toward-plus-infinity": (
        "toward +infinity (ceiling)",
        lambda t, n: np.where(n, np.floor(t), np.ceil(t)),
    ),
}

RIGHT = "right"
# The subnormal codes as a function of t, the magnitude in units of the least subnormal, and
# the rounding.
SUBNORMALS: dict[str, tuple[str, Callable[[np.ndarray, Callable], np.ndarray]]] = {
    RIGHT: ("", lambda t, r: r(t)),
    "flushed": ("flushed to zero", lambda t, r: np.zeros_like(t)),
    "halved": ("written at half their value (shifted one bit too far)", lambda t, r: r(t / 2)),
    "doubled": ("written at twice their value (shifted one bit short)", lambda t, r: r(t * 2)),
    "min-exponent-one-low": (
        "quantised one exponent below the least normal one and then truncated to the "
        "subnormal step (the least normal exponent taken one too low)",
        lambda t, r: np.floor(r(t * 2) / 2),
    ),
}
OVERFLOWS = (RIGHT, "saturated")
# A mantissa rounded up to the next power of two losing its carry into the exponent field: the
# code assembled with | (where the field below is odd, it already has the bit), or always.
CARRIES = {
    "or": "assembled with | instead of + from the exponent field and the rounded mantissa: a "
    "mantissa rounding up to the next power of two loses its carry where the exponent field is "
    "odd (the value written at half)",
    "dropped": "a mantissa rounding up to the next power of two does not carry into the "
    "exponent (the value written at half)",
}


@dataclass(frozen=True)
class Encoder:
    """An f32 -> minifloat encoder: the right one (all defaults) or one mistaken parameter."""

    rounding: str = NEAREST_EVEN
    subnormals: str = RIGHT
    bias_offset: int = 0
    overflow: str = RIGHT
    # "unsigned": the sign taken from x < 0 rather than from the sign bit, so -0.0 is +0
    # CARRIES' key: the rounding's carry into the exponent lost
    carry: str = RIGHT
    zero_sign: str = RIGHT

    def encode(self, fmt: Minifloat, x: np.ndarray) -> np.ndarray:
        """The codes (sign included) this encoder writes for the f32 values `x`."""
        x = np.asarray(x, dtype=F32)
        a = np.abs(x).astype(np.float64)
        negative = np.signbit(x)
        finite = np.isfinite(x)
        a = np.where(finite, a, 0.0)
        m, emin = fmt.man_bits, 1 - fmt.bias
        rule = ROUNDINGS[self.rounding][1]

        def rounded(t: np.ndarray) -> np.ndarray:
            return rule(t, negative)

        _, exp2 = np.frexp(a)
        e = exp2.astype(np.int64) - 1
        normal = a >= 2.0**emin
        mantissa = rounded(np.ldexp(a, (m - e).astype(np.int32))).astype(np.int64)
        code_normal = ((e + fmt.bias + self.bias_offset) << m) + mantissa - (1 << m)
        t = np.ldexp(a, m - emin)
        code_sub = SUBNORMALS[self.subnormals][1](t, rounded).astype(np.int64)
        if self.carry != RIGHT:
            # carried: a mantissa that rounded up to the next power of two, from a normal below
            carried = normal & (mantissa == 1 << (m + 1)) & (code_normal >> m >= 2)
            if self.carry == "or":
                carried &= (code_normal >> m) % 2 == 0
            code_normal = np.where(carried, code_normal - (1 << m), code_normal)
        code = np.where(normal, code_normal, code_sub)
        # Past the range: a rounding toward zero's magnitude stops at the largest finite code
        # (IEEE 754's directed roundings), as a saturating encoder's does.
        inward = {"toward-zero": True, "toward-minus-infinity": ~negative}.get(
            self.rounding, negative if self.rounding == "toward-plus-infinity" else False
        )
        saturate = (self.overflow == "saturated") | np.asarray(inward)
        past = np.where(saturate, fmt.max_code, fmt.overflow_code)
        code = np.where(code > fmt.max_code, past, code)
        signed = negative if self.zero_sign == RIGHT else x < 0
        code = code | np.where(signed, fmt.sign_bit, 0)
        # NaNs and infinities are no rounding's: the right codes for them
        return np.where(finite, code, fmt.right_codes(x))

    def cause(self, fmt: Minifloat, how: str) -> tuple[str, str]:
        """(id, title) of this encoder's one mistake, in the ids the catalogue already uses where
        one names it."""
        p = fmt.prefix
        if self.rounding != NEAREST_EVEN:
            if self.rounding == "toward-zero":
                return f"{p}-round-toward-zero", (
                    f"{fmt.name} codes truncated instead of rounded to nearest even"
                    if fmt is E4M3
                    else "f32 values rounded to f16 by truncation, not to nearest even"
                )
            return f"{p}-rounding:{self.rounding}", (
                f"{how} rounded {ROUNDINGS[self.rounding][0]} instead of to nearest even"
            )
        if self.subnormals != RIGHT:
            if self.subnormals == "flushed":
                return f"{p}-subnormals-flushed", f"{fmt.name} subnormals flushed to zero"
            return f"{p}-subnormals:{self.subnormals}", (
                f"{fmt.name} subnormals {SUBNORMALS[self.subnormals][0]}"
            )
        if self.carry != RIGHT:
            return (
                f"{fmt.prefix}-encode-carry:{self.carry}",
                f"the {fmt.name} code {CARRIES[self.carry]}",
            )
        if self.zero_sign != RIGHT:
            return f"{p}-negative-zero-unsigned", (
                f"-0.0 written as the {fmt.name} code of +0.0 (the sign taken from x < 0, "
                "not from the sign bit)"
            )
        if self.bias_offset:
            bias = fmt.bias + self.bias_offset
            return f"{p}-exponent-bias:{bias}", (
                f"{fmt.name} codes written with exponent bias {bias}, not {fmt.bias} (normal "
                f"values at {'half' if self.bias_offset < 0 else 'twice'} their value)"
            )
        return f"{p}-saturated", (
            f"values past the {fmt.name} range saturated to the largest finite code"
        )


def single_mistakes(fmt: Minifloat) -> list[Encoder | OverflowRule]:
    """Every encoder one parameter away from the right one. An exponent bias off by one is an
    e4m3 encoder's only: written by hand, where f16 comes from a library or the hardware (and
    values at twice or half their value in an f16 export are a decoder's as well); so is a sign
    taken from x < 0 (an f16 store losing -0.0 has its own signatures). An f16 encoder's
    overflow may start at another threshold (`_f16_models.OVERFLOW_RULES`)."""
    found = [Encoder(rounding=r) for r in ROUNDINGS if r != NEAREST_EVEN]
    found += [Encoder(subnormals=s) for s in SUBNORMALS if s != RIGHT]
    if fmt is E4M3:
        found += [Encoder(bias_offset=-1), Encoder(bias_offset=1), Encoder(zero_sign="unsigned")]
    else:  # e4m3's carry is fitted on whole records with their scales (_v2_layout)
        found += [Encoder(carry=c) for c in CARRIES]
    return [*found, Encoder(overflow="saturated"), *(OVERFLOW_RULES if fmt is F16 else ())]


def fitting_encoders(
    fmt: Minifloat, x: np.ndarray, got: np.ndarray
) -> list[Encoder | OverflowRule]:
    """The one-mistake encoders whose codes for `x` are exactly `got` (and not the right
    ones: a variant that writes the right codes on this evidence shows nothing)."""
    got = np.asarray(got).astype(np.int64)
    with np.errstate(all="ignore"):
        if (fmt.right_codes(x) == got).all():
            return []
        return [enc for enc in single_mistakes(fmt) if (enc.encode(fmt, x) == got).all()]


def named(causes: Sequence[Cause]) -> list[Cause]:
    """The causes to report for variants fitting the same evidence (each id once, "one of"
    groups among them made again): one alone; several as "one of" followed by each (so that a
    run whose other failures show one settles on it); none when too many fit to say anything."""
    distinct: dict[str, Cause] = {}
    for cause in causes:
        if not cause.id.startswith(ONE_OF):
            distinct.setdefault(cause.id, cause)
    causes = list(distinct.values())
    if len(causes) > MAX_ALTERNATIVES:
        return []
    return [one_of(causes), *causes] if len(causes) > 1 else list(causes)


def encoder_causes(
    fmt: Minifloat, x: np.ndarray, got: np.ndarray, how: str, evidence: str
) -> list[Cause]:
    """Causes for the codes `got` written for the f32 values `x`, each encoder fitting them."""
    causes = []
    for enc in fitting_encoders(fmt, x, got):
        cause_id, title = enc.cause(fmt, how)
        causes.append(Cause(cause_id, title, fmt.reqs, evidence))
    return named(causes)


def f16_store_causes(values: np.ndarray, actual: np.ndarray, how: str) -> list[Cause]:
    """An f16 pool's store fitted: the f32 values it was given (`values`) against what it
    reads back (`actual`, f32 widened from its f16)."""
    values = np.asarray(values, dtype=F32).ravel()
    with np.errstate(all="ignore"):
        got = oracle.f32_to_f16_bits(np.asarray(actual, dtype=F32).ravel())
        differ = int((oracle.f32_to_f16_bits(values) != got).sum())
    return encoder_causes(
        F16, values, got, "f32 values stored as f16", f"{differ} values {how} as that store gives"
    )


def held_f16_causes(
    found: list[Cause],
    geometry: oracle.Geometry,
    version: int,
    actual: bytes,
    blocks: Sequence[oracle.Block],
) -> list[Cause]:
    """`found` (the causes an export's own signatures gave), with an f16 store's one mistake (a
    pool's, or a v1 export's converter) where the blocks' values so stored, encoded by the
    oracle, give exactly the envelope exported: an e4m3 encoder's mistake and the store's may
    both fit a v2 export, one of them."""
    causes = list(found)
    if version == 2 and not all(
        _same_bits(oracle.round_to_f16(b.values), b.values) for b in blocks
    ):
        return causes  # an f32 pool's blocks: no f16 store wrote them, and v2 has no f16
    for encoder in single_mistakes(F16):
        with np.errstate(all="ignore"):
            stored = [
                oracle.f16_bits_to_f32(encoder.encode(F16, b.values).astype(np.uint16)).reshape(
                    np.shape(b.values)
                )
                for b in blocks
            ]
        if all(_same_bits(s, b.values) for s, b in zip(stored, blocks, strict=True)):
            continue
        changed = [
            oracle.Block(b.block_hash, b.n_tokens, s) for s, b in zip(stored, blocks, strict=True)
        ]
        try:
            mistaken = oracle.encode(geometry, changed, version)
        except ValueError:
            continue
        if mistaken == actual:
            cause_id, title = encoder.cause(F16, "f32 values stored as f16")
            causes.append(
                Cause(
                    cause_id,
                    title,
                    F16.reqs,
                    f"the v{version} export is exactly the blocks' values so stored, encoded",
                )
            )
    return named(causes)


# -- the v2 writer's scales ----------------------------------------------------------------


def _amax_variants(x: np.ndarray) -> dict[str, tuple[str, np.ndarray]]:
    """amax per slab [L][2][Hkv], taken the mistaken ways, from a block's filled values."""
    magnitude = np.abs(x).max(axis=(-2, -1))
    return {
        "signed-max": (
            "amax taken as the largest signed value, not the largest magnitude",
            x.max(axis=(-2, -1)),
        ),
        "k-and-v-together": (
            "one amax per layer and head over K and V together (K and V share a scale)",
            np.broadcast_to(magnitude.max(axis=1, keepdims=True), magnitude.shape),
        ),
        "whole-block": (
            "one amax over the whole block (every slab shares a scale)",
            np.broadcast_to(magnitude.max(), magnitude.shape),
        ),
    }


def _scales_of(amax: np.ndarray, of: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """Scales from amax the way the reference guards them: 1.0 for 0, and for an underflow."""
    amax = np.asarray(amax, dtype=F32)
    with np.errstate(all="ignore"):
        scales = np.where(amax == 0, F32(1), of(np.where(amax == 0, F32(1), amax))).astype(F32)
    return np.where(scales == 0, F32(1), scales).astype(F32)


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = np.asarray(a, dtype=F32), np.asarray(b, dtype=F32)
    return bool((a.view(np.uint32) == b.view(np.uint32)).all())


def _divisors(amax: np.ndarray, got: np.ndarray) -> list[float]:
    """The constants d for which got = amax / d may hold, read off the evidence: only where a
    second slab of non-zero amax can confirm the constant read off the first (every other
    slab all zero, scale 1.0 whatever d, any one scale fits some d)."""
    useful = (amax != 0) & (got != 0) & np.isfinite(got)
    if np.count_nonzero(useful) < 2:
        return []
    # an engine's constant: a whole number in the range of the minifloats' maxima
    divisor = round(float(np.float64(amax[useful][0]) / np.float64(got[useful][0])))
    return [float(divisor)] if 1 <= divisor <= MAX_DIVISOR and divisor != 448 else []


def scale_model_causes(x: np.ndarray, got_scales: np.ndarray, got_codes: np.ndarray) -> list[Cause]:
    """A v2 writer's scales fitted, from a block's filled values `x`: each amax taken another
    way, or amax divided by another constant or the other way round, that gives exactly the
    scales written; and the codes must be the values encoded right with them (so the scale is
    the only mistake)."""
    x = np.asarray(x, dtype=F32)
    with np.errstate(all="ignore"):
        quotients = oracle.e4m3_quotients(x, np.asarray(got_scales, dtype=F32))
    if (oracle.f32_to_e4m3_codes(quotients) != got_codes).any():
        return []
    amax = np.abs(x).max(axis=(-2, -1)).astype(F32)
    right = _scales_of(amax, lambda a: a / F32(448))
    causes = []
    for variant, (title, mistaken) in _amax_variants(x).items():
        scales = _scales_of(mistaken, lambda a: a / F32(448))
        if not _same_bits(scales, right) and _same_bits(scales, got_scales):
            causes.append(
                Cause(
                    f"v2-amax:{variant}",
                    title,
                    ("V2-SCALE",),
                    f"every scale written is that amax / 448, and the codes are the values "
                    f"encoded with it (e.g. {float(got_scales.ravel()[0])!r})",
                )
            )
    constant = {
        f"v2-scale-divisor:{d:g}": (
            f"scale = amax / {d:g} instead of amax / 448",
            lambda a, d=d: a / F32(d),
        )
        for d in _divisors(amax, np.asarray(got_scales, dtype=F32))
    }
    constant["v2-scale-inverted"] = (
        "scale = 448 / amax instead of amax / 448",
        lambda a: F32(448) / a,
    )
    for cause_id, (title, of) in constant.items():
        if _same_bits(_scales_of(amax, of), got_scales):
            causes.append(
                Cause(
                    cause_id,
                    title,
                    ("V2-SCALE",),
                    f"every scale written is that quotient, e.g. amax {float(amax.ravel()[0])!r}: "
                    f"{float(got_scales.ravel()[0])!r}",
                )
            )
    return named(causes)


# -- the v2 reader's decoder ---------------------------------------------------------------


def _decoded_with_bias(codes: np.ndarray, bias: int) -> np.ndarray:
    """e4m3 codes decoded with exponent bias `bias` for the normal codes (subnormals and NaN
    as they are)."""
    right = oracle.e4m3_codes_to_f32(codes)
    exponent = (codes.astype(np.int64) >> 3) & 0xF
    return np.where(exponent == 0, right, np.ldexp(right, 7 - bias)).astype(F32)


def decode_causes(
    codes: np.ndarray,
    scales: np.ndarray,
    matches: Callable[[np.ndarray], bool],
) -> list[Cause]:
    """A v2 decoder fitted: the values read back (`matches` compares a candidate's f32 values,
    stored in the pool's precision, with them) as a decoder with another exponent bias, or
    dividing by the scale, or taking the other of K and V's scale, gives them."""
    as_f32 = oracle.e4m3_codes_to_f32(codes)
    s = scales[..., None, None]
    with np.errstate(all="ignore"):
        variants = {
            "e4m3-decode-bias:6": (
                "e4m3 codes decoded with exponent bias 6, not 7 (normal values at twice their "
                "value)",
                (_decoded_with_bias(codes, 6) * s).astype(F32),
            ),
            "e4m3-decode-bias:8": (
                "e4m3 codes decoded with exponent bias 8, not 7 (normal values at half their "
                "value)",
                (_decoded_with_bias(codes, 8) * s).astype(F32),
            ),
            "v2-decode-divides": (
                "the decoded e4m3 value divided by the slab's scale instead of multiplied",
                (as_f32 / s).astype(F32),
            ),
            "v2-decode-other-scale": (
                "each slab decoded with the scale of the other of K and V (same layer and head)",
                (as_f32 * scales[:, ::-1][..., None, None]).astype(F32),
            ),
        }
    causes = [
        Cause(cause_id, title, ("V2-DECODE",), "every value read back is that decoder's")
        for cause_id, (title, values) in variants.items()
        if matches(values)
    ]
    return named(causes)


# -- one step off, no rule found -----------------------------------------------------------
