"""What the HTML report shows of one failure beyond its message, kept compact in the report's
data (JSON `tests[].view`, docs/report.md): the case's YAML and where it is written, a window
of at most 64 bytes of the expected and the actual bytes around the first difference, and for
values read back from a pool a count of differing elements per (layer, K/V, head), the token
positions past the fill counted apart. Whole blocks never enter the report.
"""

from __future__ import annotations

import textwrap
from typing import Any

import numpy as np

from .diff import Layout, _as_pool_bytes, first_difference
from .evidence import EnvelopeEvidence, Evidence, ValuesEvidence

WINDOW_BYTES = 64  # the most bytes of each side a window keeps
WINDOW_BEFORE = 16  # of them, before the first difference (rounded down to a 16-byte row)
MAX_YAML_LINES = 40


def failure_view(evidence: Evidence | None, location: str, yaml_text: str = "") -> dict[str, Any]:
    """The view of a failed test: `location` (file:line of its case or test), its YAML (a YAML
    case), and what its evidence shows as bytes and as an error grid. Never raises: a view that
    cannot be made says why, and the failure is reported as it is."""
    view: dict[str, Any] = {"location": location}
    if yaml_text:
        lines = textwrap.dedent(yaml_text.strip("\n")).splitlines()
        if len(lines) > MAX_YAML_LINES:
            lines = [*lines[:MAX_YAML_LINES], f"# ... ({len(lines) - MAX_YAML_LINES} more lines)"]
        view["yaml"] = "\n".join(lines)
    try:
        if isinstance(evidence, EnvelopeEvidence):
            window = byte_window("envelope", evidence.expected, evidence.actual, named=True)
            view["windows"] = [window] if window else []
        elif isinstance(evidence, ValuesEvidence):
            view.update(_values_view(evidence))
    except Exception as exc:  # the view must never hide the failure it belongs to
        view["note"] = f"no picture of the evidence: {exc!r}"
    return view


def byte_window(
    label: str, expected: bytes, actual: bytes, named: bool = False
) -> dict[str, Any] | None:
    """Both sides' bytes from a 16-byte row at or before the first difference, at most
    WINDOW_BYTES each; `named`: the bytes are an envelope, whose layout names the field."""
    first = first_difference(expected, actual)
    if first is None:
        return None
    start = max(0, first - WINDOW_BEFORE) // 16 * 16
    end = start + WINDOW_BYTES
    window: dict[str, Any] = {
        "label": label,
        "offset": start,
        "first": first,
        "lengths": [len(expected), len(actual)],
        "expected": expected[start:end].hex(),
        "actual": actual[start:end].hex(),
    }
    if named:
        try:
            span = Layout(expected).span_at(first)
            window["field"] = f"{span.name} ({span.where})"
        except ValueError:
            pass  # a header that cannot be read has no layout to name the byte by
    return window


def _values_view(evidence: ValuesEvidence) -> dict[str, Any]:
    expected = np.ascontiguousarray(evidence.expected, dtype=np.float32)
    actual = np.ascontiguousarray(evidence.actual, dtype=np.float32)
    if expected.shape != actual.shape or expected.ndim != 5:
        return {"note": f"values of shape {actual.shape}, expected {expected.shape}"}
    layers, _, heads, positions, dims = expected.shape
    # Bit for bit, as the pool holds them: a NaN whose payload changed is a differing element.
    differs = expected.view(np.uint32) != actual.view(np.uint32)
    fill = min(max(evidence.n_tokens, 0), positions)
    width = 2 if evidence.dtype == "f16" else 4
    window = byte_window(
        f"values read back, as {evidence.dtype} [L][2][Hkv][B][D]",
        _as_pool_bytes(expected, width),
        _as_pool_bytes(actual, width),
    )
    grid = {
        "layers": layers,
        "heads": heads,
        "positions": positions,
        "dims": dims,
        "n_tokens": fill,
        "dtype": evidence.dtype,
        # [layer][K=0, V=1][head]: differing elements among the positions before the fill,
        # and among those past it
        "in_fill": differs[:, :, :, :fill, :].sum(axis=(3, 4)).tolist(),
        "past_fill": differs[:, :, :, fill:, :].sum(axis=(3, 4)).tolist(),
        "by_position": differs.sum(axis=(0, 1, 2, 4)).tolist(),
        "differing": int(differs.sum()),
        "elements": int(differs.size),
    }
    return {"windows": [window] if window else [], "grid": grid}
