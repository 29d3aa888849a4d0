"""Signatures of known mistakes of an f16 encoder: each mistake's bit patterns, told apart from
the nearest-even ones due (an export's v1 payload, or values a pool returns)."""

from __future__ import annotations

import numpy as np

from ._causes import Cause
from ._signatures import one_of

F16_INFINITY, F16_MAX = 0x7C00, 0x7BFF


def _integer_cast(want: np.ndarray, got: np.ndarray) -> str | None:
    """How the codes `got` are the f16 values of the codes `want` converted to integers, every
    one of them (numpy's own conversion, as an engine's astype gives it on this machine, or
    the integer part wrapped to 16 bits); None when no conversion gives them."""
    values = np.ascontiguousarray(want, dtype=np.uint16).view(np.float16)
    got = np.asarray(got, dtype=np.int64)
    with np.errstate(all="ignore"):
        conversions = {
            "integer parts (astype uint16)": values.astype(np.uint16).astype(np.int64),
            "integer parts (astype int16)": values.astype(np.int16).view(np.uint16),
            "integer parts, wrapped to 16 bits": np.trunc(
                np.nan_to_num(values.astype(np.float64))
            ).astype(np.int64)
            & 0xFFFF,
        }
    for name, codes in conversions.items():
        codes = np.asarray(codes, dtype=np.int64)
        # values all below 1 in magnitude cast to zeros: no sign of a cast (a payload of zeros)
        if (codes == got).all() and codes.any():
            return name
    return None


def f16_causes(want: np.ndarray, got: np.ndarray, how: str) -> list[Cause]:
    """Known f16 mistakes between the f16 bit patterns `want` and `got` (same shape)."""
    diff = want != got
    if not diff.any():
        return []
    w, g = want[diff], got[diff]
    cast = _integer_cast(want, got)
    if cast is not None:
        return [
            Cause(
                "f16-values-cast-to-integers",
                "the f16 values converted to integers (a numeric cast, numpy's astype) where "
                "their bit patterns were due (a reinterpretation, view)",
                ("V1-F16",),
                f"{int(diff.sum())} codes {how} are the values' {cast}, e.g. f16 "
                f"{float(np.asarray(w[:1]).view(np.float16)[0])!r} as {int(g[0])}",
            )
        ]
    w_exp, w_man = (w >> 10) & 0x1F, w & 0x3FF
    nan_w = (w_exp == 0x1F) & (w_man != 0)
    nan_g = ((g >> 10) & 0x1F == 0x1F) & (g & 0x3FF != 0)
    if (nan_w & nan_g).all():
        # Each NaN explained: the due one with its sign flipped, or one NaN (of either sign)
        # written in every place; NaNs of other payloads are other values read in their place.
        if not ((w ^ g) == 0x8000).all() and len({int(v) & 0x7FFF for v in g}) != 1:
            return []
        if ((w & 0x8000) != (g & 0x8000)).any():
            return [
                Cause(
                    "nan-sign-lost",
                    "a NaN's sign lost",
                    ("NAN-SIGN",),
                    f"NaNs {how} with another sign",
                )
            ]
        return [
            Cause(
                "nan-payload-dropped",
                "a quiet NaN's payload dropped (a default NaN written)",
                ("V1-F16-NAN-PAYLOAD",),
                f"{int(diff.sum())} NaNs {how} with another payload, e.g. {int(w[0]):#06x} "
                f"as {int(g[0]):#06x}",
            )
        ]
    # Each names values that are all of its kind: a zeroed normal value is no sign of it.
    negative_zero, subnormal = w == 0x8000, (w_exp == 0) & (w_man != 0)
    if (g == 0).all() and (negative_zero | subnormal).all():
        if negative_zero.any():
            return [
                Cause(
                    "f16-negative-zero-flushed",
                    "-0.0 stored as +0.0"
                    if negative_zero.all()
                    else "-0.0 and f16 subnormals stored as +0.0",
                    ("V1-F16",),
                    f"-0.0 (80 00) {how} as +0.0 (00 00)",
                )
            ]
        return [
            Cause(
                "f16-subnormals-flushed",
                "f16 subnormals flushed to zero",
                ("V1-F16",),
                f"{int(diff.sum())} subnormal values {how} as +0.0",
            )
        ]
    toward_zero = ((g & 0x8000) == (w & 0x8000)) & (
        (g & 0x7FFF).astype(np.int32) == (w & 0x7FFF) - 1
    )
    if toward_zero.all() and not nan_w.any():
        truncated = Cause(
            "f16-round-toward-zero",
            "f32 values rounded to f16 by truncation, not to nearest even",
            ("V1-F16",),
            f"each of the {int(diff.sum())} differing values is {how} one f16 step toward "
            "zero from the nearest-even one",
        )
        if not ((w & 0x7FFF) == F16_INFINITY).all():
            return [truncated]
        # Only values past the f16 range differ, each written as +-65504 for an infinity:
        # clamping to the largest finite f16 gives exactly these bytes too.
        saturated = Cause(
            "f16-saturated",
            "f32 values past the f16 range saturated to +-65504 instead of rounded to infinity",
            ("V1-F16",),
        )
        return [one_of([truncated, saturated])]
    if ((w_exp == 0) & (w_man != 0)).all() and (g == (w & 0x8000)).all():
        return [
            Cause(
                "f16-subnormals-flushed",
                "f16 subnormals flushed to zero",
                ("V1-F16",),
                f"{int(diff.sum())} subnormal values {how} as zero of their sign",
            )
        ]
    return []
