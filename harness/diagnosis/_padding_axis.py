"""A writer zeroing a partial block's padding along another axis of [L][2][Hkv][B][D] than the
token axis B: every index from n_tokens on of that axis zeroed (`bits[..., n_tokens:]`, the head
dimension, for `bits[..., n_tokens:, :]`), the token positions past the fill zeroed as well or
written as the slot held them. Each record's payload is recomputed under each axis choice from
the block's values, and an axis is named only where it gives every differing record exactly."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .. import oracle
from ._causes import Cause
from ._codec_model import named
from ._orders import _AXIS_NAMES as AXES

AXIS_NAMES = {
    "L": "the layer axis L",
    "2": "the K/V axis",
    "Hkv": "the KV-head axis Hkv",
    "D": "the head dimension D",
}
TOKEN_AXIS = AXES.index("B")


def _encoded_everywhere(version: int, values: np.ndarray, want: bytes, n_codes: int) -> np.ndarray:
    """The block's codes at every position, past the fill too (v2: with the due scales)."""
    if version == 1:
        return oracle.f32_to_f16_bits(values).astype("<u2")
    scales = np.frombuffer(want[n_codes:], dtype="<f4").reshape(values.shape[:3])
    with np.errstate(all="ignore"):
        return oracle.f32_to_e4m3_codes(oracle.e4m3_quotients(values, scales))


def _fitting_axes(
    version: int, want: bytes, got: bytes, n_tokens: int, values: np.ndarray
) -> dict[str, set[bool]]:
    """axis -> the ways of the positions past the fill (zeroed: True, left as held: False)
    with which zeroing that axis gives `got` exactly."""
    n_codes = values.size
    full = _encoded_everywhere(version, values, want, n_codes)
    tail = want[n_codes * full.itemsize :]
    fitting: dict[str, set[bool]] = {}
    for axis, name in enumerate(AXES):
        if axis == TOKEN_AXIS or values.shape[axis] <= n_tokens:
            continue  # the due axis, or one the zeroing leaves whole
        for tokens_zeroed in (True, False):
            codes = full.copy()
            index = [slice(None)] * len(AXES)
            index[axis] = slice(n_tokens, None)
            codes[tuple(index)] = 0
            if tokens_zeroed:
                codes[..., n_tokens:, :] = 0
            if codes.tobytes() + tail == got:
                fitting.setdefault(name, set()).add(tokens_zeroed)
    return fitting


def padding_axis_causes(
    version: int,
    expected: bytes,
    actual: bytes,
    records: Sequence[tuple[slice, int]],
    blocks: Sequence[oracle.Block],
) -> list[Cause]:
    """`padding-axis:AXIS` where zeroing the indices from n_tokens on of AXIS (not of B) gives
    every differing record (`records`: each one's payload slice and n_tokens, with its block
    `blocks`) exactly; several axes: none said alone."""
    found: dict[str, set[bool]] | None = None
    count = 0
    for (payload, n_tokens), block in zip(records, blocks, strict=False):
        want, got = expected[payload], actual[payload]
        if want == got:
            continue
        values = np.asarray(block.values, dtype=np.float32)
        if len(values.shape) != len(AXES) or len(got) != len(want):
            return []
        here = _fitting_axes(version, want, got, n_tokens, values)
        if found is not None:
            here = {a: ways & found[a] for a, ways in here.items() if a in found}
        found = {a: ways for a, ways in here.items() if ways}
        count += 1
        if not found:
            return []
    causes = []
    for axis, ways in sorted((found or {}).items()):
        kept = True not in ways
        past = "; the token positions past the fill written as the slot held them" if kept else ""
        causes.append(
            Cause(
                f"padding-axis:{axis}",
                f"a partial block's padding zeroed along {AXIS_NAMES[axis]} (its indices from "
                f"n_tokens on) instead of the token axis B{past}: filled values written as zeros",
                ("V1-LAYOUT" if version == 1 else "V2-LAYOUT",),
                f"each of the {count} differing record(s) is its values so written",
            )
        )
    return named(causes)
