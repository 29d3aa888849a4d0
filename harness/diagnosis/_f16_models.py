"""General models of an f16 conversion wrong on one class of values: an f32 -> f16 encoder whose
overflow to infinity starts at another threshold than IEEE 754's (65520 with ties to even), and
an f16 -> f32 decoder wrong on one class of codes (the subnormals, the exponent bias, the top
exponent field). Each recomputes every value of the evidence and is named only where it gives
all of them exactly."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .. import oracle
from ._causes import Cause

F32 = np.float32
F16_MAX = 65504.0  # the largest finite f16
F16_OVERFLOW = 65520.0  # IEEE 754's: from here on, to nearest even, an f16 is infinite
F16_MAX_CODE, F16_INFINITY, F16_SIGN = 0x7BFF, 0x7C00, 0x8000

# -- the encoder's top of the range ------------------------------------------------------------


@dataclass(frozen=True)
class OverflowRule:
    """An f32 -> f16 encoder right but at the top of the range: finite magnitudes above
    `threshold` (or from it on, `inclusive`) sent to infinity before rounding, and the rest
    rounded to nearest even, a rounding that carries past 65504 written as 65504 where
    `carry_saturates` (as infinity where not, as due). The encoder interface of
    `_codec_model.Encoder` (`encode`, `cause`), so that it is fitted as the codec's variants
    are."""

    threshold: float
    inclusive: bool
    carry_saturates: bool = False

    def encode(self, fmt: object, x: np.ndarray) -> np.ndarray:
        """The f16 codes (sign included) this encoder writes for the f32 values `x`."""
        x = np.asarray(x, dtype=F32)
        right = oracle.f32_to_f16_bits(x).astype(np.int64)
        finite = np.isfinite(x)
        a = np.abs(np.where(finite, x, F32(0))).astype(np.float64)
        sign = np.where(np.signbit(x), F16_SIGN, 0)
        code = right
        if self.carry_saturates:
            carried = finite & ((right & 0x7FFF) == F16_INFINITY)
            code = np.where(carried, sign | F16_MAX_CODE, code)
        over = (a >= self.threshold) if self.inclusive else (a > self.threshold)
        return np.where(finite & over, sign | F16_INFINITY, code)

    @property
    def name(self) -> str:
        return f"{'from' if self.inclusive else 'above'}-{self.threshold:g}"

    def cause(self, fmt: object, how: str) -> tuple[str, str]:
        """(id, title): the threshold found, and what it does to the values it moves."""
        test = ">=" if self.inclusive else ">"
        limit = f"{'from' if self.inclusive else 'above'} {self.threshold:g}"
        if self.threshold < F16_OVERFLOW:
            effect = "values that round to 65504 written as infinities"
        else:
            end = "excluded" if self.inclusive else "included"
            effect = f"the values from 65520 up to {self.threshold:g} ({end}) written as 65504"
        carry = (
            ", below it a rounding carried past 65504 written as 65504"
            if self.carry_saturates
            else ""
        )
        return f"f16-overflow:{self.name}", (
            f"f32 magnitudes {limit} sent to an f16 infinity before rounding (|x| {test} "
            f"{self.threshold:g}){carry}, not from 65520 on as rounding to nearest even "
            f"gives: {effect}"
        )


# The thresholds an engine writes: the largest f16 (65504), the midpoint over it (65520) and
# 2^16, each with > or >=; those that change nothing (>= 65520, or 65536 with the carry to
# infinity) are IEEE's own.
OVERFLOW_RULES = (
    OverflowRule(F16_MAX, inclusive=False),
    OverflowRule(F16_MAX, inclusive=True),
    OverflowRule(F16_OVERFLOW, inclusive=False, carry_saturates=True),
    OverflowRule(65536.0, inclusive=True, carry_saturates=True),
    OverflowRule(65536.0, inclusive=False, carry_saturates=True),
)


# -- the decoder's table -----------------------------------------------------------------------


def _decode_variants(codes: np.ndarray) -> dict[str, tuple[str, np.ndarray]]:
    """The f32 values of the f16 `codes` as decoders wrong on one class of codes give them."""
    codes = np.asarray(codes, dtype=np.uint16)
    right = oracle.f16_bits_to_f32(codes)
    exponent = (codes.astype(np.int64) >> 10) & 0x1F
    mantissa = (codes & 0x3FF).astype(np.float64)
    sign = np.where(codes & F16_SIGN, -1.0, 1.0)
    subnormal = (exponent == 0) & (mantissa != 0)
    normal = (exponent >= 1) & (exponent <= 30)

    def signed(magnitude: np.ndarray) -> np.ndarray:
        return (sign * magnitude).astype(F32)

    return {
        "subnormal-as-normal": (
            "f16 subnormal codes decoded through the normal path (exponent field 0 tested for "
            "the zeros only): read back as 2^-15 x (1 + m/1024), not m x 2^-24",
            np.where(subnormal, signed(np.ldexp(1 + mantissa / 1024, -15)), right),
        ),
        "subnormals-flushed": (
            "f16 subnormal codes decoded as zero of their sign (denormals read as zero)",
            np.where(subnormal, signed(np.zeros_like(mantissa)), right),
        ),
        "subnormals-halved": (
            "f16 subnormal codes decoded at half their value (m x 2^-25: the exponent one too "
            "small)",
            np.where(subnormal, signed(np.ldexp(mantissa, -25)), right),
        ),
        "subnormals-doubled": (
            "f16 subnormal codes decoded at twice their value (m x 2^-23: the exponent one too "
            "large)",
            np.where(subnormal, signed(np.ldexp(mantissa, -23)), right),
        ),
        "subnormal-unsigned": (
            "f16 subnormal codes decoded without their sign (negative subnormals read back "
            "positive)",
            np.where(subnormal, np.abs(right), right),
        ),
        "bias-14": (
            "f16 normal codes decoded with exponent bias 14, not 15 (at twice their value)",
            np.where(normal, (right * F32(2)).astype(F32), right),
        ),
        "bias-16": (
            "f16 normal codes decoded with exponent bias 16, not 15 (at half their value)",
            np.where(normal, (right * F32(0.5)).astype(F32), right),
        ),
        "top-exponent-finite": (
            "f16 codes of exponent field 11111 (infinities and NaNs) decoded as normal numbers "
            "(2^16 x (1 + m/1024))",
            np.where(exponent == 0x1F, signed(np.ldexp(1 + mantissa / 1024, 16)), right),
        ),
    }


def f16_decode_causes(
    codes: np.ndarray, matches: Callable[[np.ndarray], bool], differs: np.ndarray
) -> list[Cause]:
    """An f16 -> f32 decoder wrong on one class of codes: every value read back (`matches`
    compares a candidate's f32 values with them, at the positions judged) is its code's value
    in one variant table, where the right table's are not; `differs`: the codes whose values
    read back differ (a variant must change at least one of them). Several fitting: none is
    said alone."""
    codes = np.asarray(codes, dtype=np.uint16)
    right = oracle.f16_bits_to_f32(codes)
    causes = []
    with np.errstate(all="ignore"):
        variants = _decode_variants(codes)
    for name, (title, table) in variants.items():
        changed = table.view(np.uint32) != right.view(np.uint32)
        if (changed & differs).any() and matches(table):
            causes.append(
                Cause(
                    f"f16-decode-table:{name}",
                    title,
                    ("V1-F16",),
                    f"every value read back is its f16 code's value in that table "
                    f"({int((changed & differs).sum())} codes of that class read back so)",
                )
            )
    return causes
