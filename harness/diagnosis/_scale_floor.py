"""A v2 writer's scale clamped below at a floor, the usual quantiser guard against a division by
zero: scale = max(amax, FLOOR) / 448, or max(amax / 448, FLOOR), with or without the slab of
zeros' scale 1.0 kept. Only the slabs whose amax (or amax / 448) lies under the floor differ;
every scale and code is recomputed with each floor an engine types (a power of ten or of two),
and the one floor that gives every differing record exactly is named."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from .. import oracle
from ._causes import Cause
from ._codec_model import named
from ._v2_layout import ScaledRecord, _encoded_with

F32 = np.float32
E4M3_MAX = F32(oracle.E4M3_MAX)

# The floors an engine types: 1e-1 to 1e-45 and 2^-1 to 2^-149 (FLT_EPSILON, FLT_MIN and the
# f16 ones among them), as f32 constants.
FLOORS: tuple[tuple[str, F32], ...] = tuple(
    [(f"1e-{k}", F32(10.0**-k)) for k in range(1, 46)]
    + [(f"2^-{k}", F32(2.0**-k)) for k in range(1, 150)]
)

# form -> (how the title says it, scale from amax and the floor)
FORMS: dict[str, tuple[str, Callable[[np.ndarray, F32], np.ndarray]]] = {
    "amax": (
        "amax clamped below at {floor} before the division by 448 (max(amax, {floor}) / 448)",
        lambda amax, floor: (np.maximum(amax, floor) / E4M3_MAX).astype(F32),
    ),
    "scale": (
        "the scale clamped below at {floor} (max(amax / 448, {floor}))",
        lambda amax, floor: np.maximum(amax / E4M3_MAX, floor).astype(F32),
    ),
}


def _fits(record: ScaledRecord) -> dict[str, tuple[str, bool]]:
    """The floors (`form-floor` -> (title, whether a slab of zeros got the floor's scale)) that
    give the record's scales and codes exactly."""
    if record.values is None:
        return {}
    x = np.asarray(record.values, dtype=F32)
    amax = np.abs(x).max(axis=(-2, -1)).astype(F32)
    right = np.where(amax == 0, F32(1), amax / E4M3_MAX).astype(F32)
    got = np.frombuffer(record.got_scale_bytes, dtype="<f4").reshape(record.lead)
    moved = got.view(np.uint32) != right.view(np.uint32)
    if not moved.any():
        return {}
    fitting = {}
    for form, (title, scale_of) in FORMS.items():
        for label, floor in FLOORS:
            with np.errstate(all="ignore"):
                clamped = scale_of(amax, floor)
            for zero_kept in (False, True):
                scales = np.where(amax == 0, F32(1), clamped) if zero_kept else clamped
                if (scales.view(np.uint32) == right.view(np.uint32)).all():
                    continue
                if _encoded_with(record, x, scales.astype(F32)):
                    zeros = bool(((amax == 0) & moved).any())
                    fitting[f"{form}-{label}"] = (title.format(floor=label), zeros)
    return fitting


def scale_floor_causes(records: Sequence[ScaledRecord]) -> list[Cause]:
    """`v2-scale-floor:FORM-FLOOR` where one floor gives every differing record's scales and
    codes exactly (several: none said alone)."""
    differing = [r for r in records if r.want != r.got]
    if not differing:
        return []
    found: dict[str, tuple[str, bool]] | None = None
    for record in differing:
        here = _fits(record)
        found = here if found is None else {k: v for k, v in found.items() if k in here}
        if not found:
            return []
    assert found is not None
    causes = []
    for name, (title, zeros) in sorted(found.items()):
        effect = (
            "a slab of zeros written with that scale, not 1.0"
            if zeros
            else "a slab of amax under it written with that scale, not amax / 448"
        )
        causes.append(
            Cause(
                f"v2-scale-floor:{name}",
                f"{title}: {effect}",
                ("V2-SCALE-ZERO" if zeros else "V2-SCALE",),
                f"every scale of the {len(differing)} differing record(s) is that clamp's, the "
                "codes the values encoded with it; the other scales are amax / 448",
            )
        )
    return named(causes)
