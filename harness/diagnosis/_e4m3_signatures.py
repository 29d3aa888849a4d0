"""Signatures of known mistakes of an e4m3 encoder (an export's v2 payload): each mistaken
scale or quotient, computed again here, and compared with the scales and codes written."""

from __future__ import annotations

from collections.abc import Sequence

import ml_dtypes
import numpy as np

from .. import oracle
from ._causes import Cause
from ._codec_model import (
    E4M3,
    _same_bits,
    _scales_of,
    fitting_encoders,
    named,
    scale_model_causes,
)

F32 = np.float32
E4M3_MAX = oracle.E4M3_MAX


def _toward_zero(q: np.ndarray) -> np.ndarray:
    """e4m3 codes of `q` rounded toward zero (a truncating encoder)."""
    codes = oracle.f32_to_e4m3_codes(q)
    decoded = oracle.e4m3_codes_to_f32(codes)
    over = np.abs(decoded) > np.abs(q)
    magnitude = (codes & 0x7F).astype(np.int16)
    magnitude = np.where(over & (magnitude > 0), magnitude - 1, magnitude)
    return ((codes & 0x80) | magnitude.astype(np.uint8)).astype(np.uint8)


def _nearest_from_f64(q: np.ndarray) -> np.ndarray:
    """e4m3 codes of f64 quotients rounded once, to nearest even (a cast through f32 would
    round twice and hide exactly the ties this is for)."""
    first = oracle.f32_to_e4m3_codes(q.astype(F32))
    sign = first & 0x80
    magnitude = (first & 0x7F).astype(np.int16)
    best, best_distance = first, np.full(q.shape, np.inf)
    for step in (-1, 0, 1):
        candidate_magnitude = np.clip(magnitude + step, 0, oracle.E4M3_MAX_CODE)
        candidate = (sign | candidate_magnitude.astype(np.uint8)).astype(np.uint8)
        distance = np.abs(oracle.e4m3_codes_to_f32(candidate).astype(np.float64) - q)
        closer = (distance < best_distance) | (
            (distance == best_distance) & (candidate_magnitude % 2 == 0)
        )
        best = np.where(closer, candidate, best)
        best_distance = np.where(closer, distance, best_distance)
    return best.astype(np.uint8)


# The quotient computed from amax in f32 by another formula than x / scale (each rounding once
# more, and 0 / 0, NaN, for an all-zero slab): (id, title, the quotients from x and amax).
QUOTIENT_FORMS = (
    (
        "v2-quotient:x-times-448-over-amax",
        "the quotient computed as x * 448 / amax in f32 instead of x / scale (rounded twice, "
        "and an all-zero slab's 0 / 0 written as NaN)",
        lambda x, amax: (x * F32(E4M3_MAX)).astype(F32) / amax,
    ),
    (
        "v2-quotient:x-over-amax-times-448",
        "the quotient computed as x / amax * 448 in f32 instead of x / scale (rounded twice, "
        "and an all-zero slab's 0 / 0 written as NaN)",
        lambda x, amax: (x / amax).astype(F32) * F32(E4M3_MAX),
    ),
)


def _quotient_forms(
    x: np.ndarray, amax: np.ndarray, scales: np.ndarray
) -> dict[str, tuple[str, tuple[str, ...], np.ndarray]]:
    """The codes of each QUOTIENT_FORMS formula, a tiny slab's quotients clamped as due."""
    a = np.asarray(amax, dtype=F32)[..., None, None]
    tiny = (scales < np.finfo(F32).tiny)[..., None, None]
    out = {}
    with np.errstate(all="ignore"):
        for cause_id, title, quotient in QUOTIENT_FORMS:
            q = quotient(np.asarray(x, dtype=F32), a).astype(F32)
            q = np.where(tiny, np.clip(q, -E4M3_MAX, E4M3_MAX), q).astype(F32)
            out[cause_id] = (title, ("V2-E4M3",), oracle.f32_to_e4m3_codes(q))
    return out


def _codes_for(x: np.ndarray, scales: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        q = (x / scales[..., None, None]).astype(F32)
    return oracle.f32_to_e4m3_codes(q)


def scale_causes(
    amax: np.ndarray,
    want: np.ndarray,
    got: np.ndarray,
    x: np.ndarray,
    got_codes: np.ndarray,
    slots: Sequence[np.ndarray] = (),
) -> list[Cause] | None:
    """Causes when some slab's scale differs; None when every scale is right. `slots`: what
    the block's slot may hold, past the fill included ([L][2][Hkv][B][D] each), where known."""
    differ = want.view(np.uint32) != got.view(np.uint32)
    if not differ.any():
        return None
    a, w, s = amax[differ], want[differ], got[differ]
    with np.errstate(all="ignore"):
        variants = {
            "v2-scale-reciprocal": (
                "scale = amax * (1/448) instead of the f32 division amax / 448",
                (a * F32(F32(1) / E4M3_MAX)).astype(F32),
            ),
            "v2-scale-fnuz-max": (
                "scale = amax / 240 (the e4m3 fnuz maximum) instead of amax / 448",
                (a / F32(240)).astype(F32),
            ),
        }
    for cause_id, (title, scale) in variants.items():
        if (scale.view(np.uint32) == s.view(np.uint32)).all() and (a != 0).all():
            return [
                Cause(
                    cause_id,
                    title,
                    ("V2-SCALE",),
                    f"amax {float(a[0])!r}: scale {float(s[0])!r} written, {float(w[0])!r} due",
                )
            ]
    if (a == 0).all() and (s == 0).all():
        return [
            Cause(
                "v2-zero-slab-scale-zero",
                "an all-zero slab given scale 0 instead of 1.0",
                ("V2-SCALE-ZERO",),
                f"{int(differ.sum())} all-zero slabs with scale 0.0",
            )
        ]
    fitted = scale_model_causes(x, got, got_codes)
    if fitted:
        return fitted
    if (_codes_for(x, got) == got_codes).all():
        fitted = scale_one_ulp_causes(want, got)
        if fitted:
            return fitted
    return _whole_slot_causes(x, got, got_codes, slots) or _narrow_scale_causes(x, got, got_codes)


def _scale_fits(x: np.ndarray, scales: np.ndarray, got: np.ndarray, got_codes: np.ndarray) -> bool:
    """Whether `scales` are exactly the scales written and the codes are the filled values `x`
    encoded right with them (so the scale is the only mistake)."""
    if not _same_bits(scales, got):
        return False
    with np.errstate(all="ignore"):
        quotients = oracle.e4m3_quotients(x, np.asarray(got, dtype=F32))
    return bool((oracle.f32_to_e4m3_codes(quotients) == got_codes).all())


def _whole_slot_causes(
    x: np.ndarray, got: np.ndarray, got_codes: np.ndarray, slots: Sequence[np.ndarray]
) -> list[Cause]:
    """amax taken over the whole slot, past n_tokens too: each of `slots` (what the slot may
    hold past the fill: the values written there, a released block's) gives its amax / 448,
    and it is named only when that is every scale written, exactly."""
    fill = x.shape[-2]
    for slot in slots:
        whole = np.abs(np.asarray(slot, dtype=F32)).max(axis=(-2, -1))
        scales = _scales_of(whole, lambda a: a / F32(E4M3_MAX))
        if _scale_fits(x, scales, got, got_codes):
            return [
                Cause(
                    "v2-amax-over-unfilled",
                    "amax taken over the whole slot, the positions past n_tokens too (the "
                    "values written or left there)",
                    ("V2-SCALE",),
                    f"every scale written is the amax of all {slot.shape[-2]} positions / 448, "
                    f"not of the {fill} filled ones (e.g. {float(got.ravel()[0])!r}), and the "
                    "codes are the filled values encoded with it",
                )
            ]
    return []


# The narrower formats a scale may be computed or kept in (the pool's own precision, a
# half-precision type), each rounding to nearest even.
NARROW_FORMATS = {
    "f16": lambda a: a.astype(np.float16).astype(F32),
    "bf16": lambda a: a.astype(ml_dtypes.bfloat16).astype(F32),
}


def _narrow_scale_causes(x: np.ndarray, got: np.ndarray, got_codes: np.ndarray) -> list[Cause]:
    """scale = amax / 448 rounded to a narrower float format (the division kept in f16 or
    bf16), then written, and divided by, as that f32: named for the format that gives every
    scale written exactly."""
    amax = np.abs(x).max(axis=(-2, -1)).astype(F32)
    causes = []
    for name, narrow in NARROW_FORMATS.items():
        with np.errstate(all="ignore"):
            scales = _scales_of(amax, lambda a, narrow=narrow: narrow(a / F32(E4M3_MAX)))
        if _scale_fits(x, scales, got, got_codes):
            causes.append(
                Cause(
                    f"v2-scale-rounded:{name}",
                    f"scale = amax / 448 rounded to {name}, not kept in f32",
                    ("V2-SCALE",),
                    f"every scale written is amax / 448 rounded to {name} (e.g. "
                    f"{float(got.ravel()[0])!r}), and the codes are the values encoded with it",
                )
            )
    return named(causes)


def code_causes(
    x: np.ndarray,
    amax: np.ndarray,
    scales: np.ndarray,
    want: np.ndarray,
    got: np.ndarray,
) -> list[Cause]:
    differ = want != got
    if not differ.any():
        return []
    s = scales[..., None, None]
    with np.errstate(all="ignore"):
        q = (x / s).astype(F32)
        # An all-zero slab (scale 1.0) has nothing to divide: its codes are 0 either way.
        wide = np.where(amax == 0, 1.0, amax.astype(np.float64))[..., None, None]
        exact = x.astype(np.float64) * float(E4M3_MAX) / wide
        # Each that gives exactly these codes is named: at a lone tie, the f64 quotient, the
        # reciprocal and truncation can all round to the same even code.
        variants = {
            "v2-quotient-in-f64": (
                "the quotient computed in f64 (x * 448 / amax) instead of x / scale in f32",
                ("V2-E4M3",),
                _nearest_from_f64(np.asarray(exact)),
            ),
            "v2-quotient-reciprocal": (
                "the quotient x * (1/scale) instead of the f32 division x / scale",
                ("V2-E4M3",),
                oracle.f32_to_e4m3_codes((x * (F32(1) / s).astype(F32)).astype(F32)),
            ),
            "v2-round-toward-zero": (
                "e4m3 codes truncated instead of rounded to nearest even",
                ("V2-E4M3",),
                _toward_zero(q),
            ),
            **_quotient_forms(x, amax, scales),
        }
        # the encoder one parameter away from the right one (its rounding, subnormals, bias)
        for encoder in fitting_encoders(E4M3, q, got):
            cause_id, title = encoder.cause(E4M3, "e4m3 codes")
            variants.setdefault(cause_id, (title, E4M3.reqs, encoder.encode(E4M3, q)))
    at = np.flatnonzero(differ.ravel())[0]
    evidence = (
        f"{int(differ.sum())} codes differ, each as that computation rounds; e.g. x "
        f"{float(x.ravel()[at])!r}: {int(got.ravel()[at]):#04x} written, "
        f"{int(want.ravel()[at]):#04x} due"
    )
    matching = [
        Cause(cause_id, title, reqs, evidence)
        for cause_id, (title, reqs, codes) in variants.items()
        if (codes == got).all() and (codes != want).any()
    ]
    tiny = _tiny_slab_causes(scales, want, got, differ)
    if tiny:
        return tiny
    matching += overflow_threshold_causes(q, want, got)
    if matching:
        return named(matching)
    return e4m3_one_step_causes(want, got)


def _nan_of_due_sign(want: np.ndarray, got: np.ndarray, differ: np.ndarray) -> bool:
    """Every differing code is the NaN of its due code's sign, where a finite code is due."""
    w, g = want[differ], got[differ]
    return bool(((w & 0x7F) != 0x7F).all() and (g == (w | 0x7F)).all())


def _tiny_slab_causes(
    scales: np.ndarray, want: np.ndarray, got: np.ndarray, differ: np.ndarray
) -> list[Cause]:
    """+-448 written as NaN in slabs whose scale is an f32 subnormal, and only there: the
    quotients not clamped (V2-TINY-SLAB), not an overflow test."""
    if not _nan_of_due_sign(want, got, differ) or ((want[differ] & 0x7F) != 0x7E).any():
        return []
    tiny = scales < np.finfo(F32).tiny
    if not tiny.any() or (differ & ~tiny[..., None, None]).any():
        return []
    return [
        Cause(
            "v2-tiny-slab-unclamped",
            "a slab whose amax / 448 is an f32 subnormal encoded without clamping "
            "(its largest element becomes NaN)",
            ("V2-TINY-SLAB",),
            f"{int(differ.sum())} NaN codes in slabs with a subnormal scale",
        )
    ]


# Where an e4m3 encoder's overflow test may start, below the format's own (a quotient that
# rounds past 448, from 464 on): (cause id, title, blamed, whether the threshold fits, given the
# largest quotient written right and the smallest written NaN; every NaN'd quotient one that
# rounds to 448 for the first). At the top, a slab's amax is
# what turns NaN (V2-NOSAT); lower, values in the range are converted wrong (V2-E4M3).
OVERFLOW_THRESHOLDS = (
    (
        "v2-nan-at-the-top",
        "values due e4m3's largest code 0x7E (448) encoded as NaN: the overflow test takes the "
        "top of the range for overflow (checked before rounding, or 448 itself counted as over)",
        ("V2-NOSAT",),
        lambda right, over: over >= 432,
    ),
    (
        "v2-overflow:from-256",
        "e4m3 quotients from 256 (binary exponent 8) written as NaN: the overflow test takes "
        "the top exponent field for past the range, as IEEE formats reserve it (e4m3 uses it "
        "for 256 to 448)",
        E4M3.reqs,
        lambda right, over: right < 256 <= over,
    ),
    (
        "v2-overflow:above-240",
        "e4m3 quotients that round past 240 written as NaN: the encoder's largest value taken "
        "as 240, IEEE-style e4m3's (the top exponent field reserved), not 448",
        E4M3.reqs,
        lambda right, over: right < 248 <= over,
    ),
)


def overflow_threshold_causes(q: np.ndarray, want: np.ndarray, got: np.ndarray) -> list[Cause]:
    """An e4m3 encoder whose overflow test starts below the format's: every quotient from
    some threshold up written as the NaN of its sign, every one below it written right. The
    threshold is read off the evidence (between the largest quotient written right and the
    smallest written NaN); it is named by the known mistakes it fits, and said as observed
    where none does."""
    differ = want != got
    if not differ.any() or not _nan_of_due_sign(want, got, differ):
        return []
    magnitude = np.abs(q.astype(np.float64))
    finite_due = (want & 0x7F) != 0x7F
    over = float(magnitude[differ].min())
    right = magnitude[~differ & finite_due]
    below = float(right.max()) if right.size else 0.0
    if below >= over:
        return []  # some quotient written right lies above one written NaN: no threshold
    evidence = (
        f"{int(differ.sum())} elements written as NaN (7f/ff), every quotient from {over:g} up; "
        + (f"up to {below:g} written right" if right.size else "none below it in the evidence")
    )
    causes = [
        Cause(cause_id, title, reqs, evidence)
        for cause_id, title, reqs, fits in OVERFLOW_THRESHOLDS
        if fits(below, over)
    ]
    return causes or [
        Cause(
            "v2-overflow:below-448",
            f"e4m3 quotients from {over:g} up written as NaN: the encoder's overflow test starts "
            "below the format's 448 (NaN is due only past 464, where 448 is not the nearest)",
            E4M3.reqs,
            evidence,
        )
    ]


# -- one step or one unit off, where no model says how ---------------------------------------


def _direction(steps: np.ndarray) -> str:
    if (steps < 0).all():
        return "toward zero"
    return "away from zero" if (steps > 0).all() else "toward and away from zero"


def e4m3_one_step_causes(want: np.ndarray, got: np.ndarray) -> list[Cause]:
    """Codes each one e4m3 step from the due ones (same sign, magnitude one apart), where no
    rounding rule of the model gives them: what was observed, said as that."""
    differ = want != got
    w, g = want[differ].astype(np.int16), got[differ].astype(np.int16)
    if not w.size or ((w & 0x80) != (g & 0x80)).any():
        return []
    steps = (g & 0x7F) - (w & 0x7F)
    if (np.abs(steps) != 1).any() or ((g & 0x7F) == 0x7F).any():
        return []
    return [
        Cause(
            "v2-codes-one-step",
            f"e4m3 codes one step {_direction(steps)} from the nearest-even ones, for "
            "quotients no rounding rule of the model rounds so (a rounding written by hand)",
            E4M3.reqs,
            f"{int(differ.sum())} of {differ.size} codes differ, each by one step",
        )
    ]


def scale_one_ulp_causes(want: np.ndarray, got: np.ndarray) -> list[Cause]:
    """Scales each one f32 unit in the last place from amax / 448 (another formula than the
    f32 division, rounded otherwise)."""
    differ = want.view(np.uint32) != got.view(np.uint32)
    w, g = want[differ], got[differ]
    if not w.size or not (np.isfinite(g) & (np.sign(g) == np.sign(w))).all():
        return []
    steps = g.view(np.int32).astype(np.int64) - w.view(np.int32).astype(np.int64)
    if (np.abs(steps) != 1).any():
        return []
    way = "above" if (steps > 0).all() else "below" if (steps < 0).all() else "above or below"
    return [
        Cause(
            "v2-scale-one-ulp",
            f"scales one f32 unit in the last place {way} amax / 448 (computed another way "
            "than the f32 division, or rounded otherwise)",
            ("V2-SCALE",),
            f"{int(differ.sum())} of {differ.size} scales differ, each by one unit in the last "
            "place",
        )
    ]
