"""What report.html draws of a failure's evidence (its `view`, tlkv_conformance.failure_view):
hex windows of the expected and actual bytes with the differing ones marked, and the error
picture of values read back from a pool (docs/report.md, "The HTML page")."""

from __future__ import annotations

from html import escape
from typing import Any

CELL = 18  # the error picture's cell, in pixels


def hex_windows(window: dict[str, Any]) -> str:
    expected, actual = bytes.fromhex(window["expected"]), bytes.fromhex(window["actual"])
    differing = {
        i
        for i in range(max(len(expected), len(actual)))
        if expected[i : i + 1] != actual[i : i + 1]
    }
    first = window["first"]
    where = f" ({window['field']})" if window.get("field") else ""
    sizes = window.get("lengths", [len(expected), len(actual)])
    lengths = f"; lengths {sizes[0]} and {sizes[1]}" if sizes[0] != sizes[1] else ""
    return (
        f'<div class="hex"><p>{escape(window["label"])}: first difference at byte {first}'
        f"{escape(where)}{escape(lengths)}</p>"
        f"<pre>expected\n{_hex_rows(expected, window['offset'], differing, first)}\n"
        f"actual\n{_hex_rows(actual, window['offset'], differing, first)}</pre></div>"
    )


def _hex_rows(data: bytes, offset: int, differing: set[int], first: int) -> str:
    rows = []
    for row in range(0, len(data), 16):
        cells = []
        for i in range(row, min(row + 16, len(data))):
            text = f"{data[i]:02x}"
            if i in differing:
                first_mark = ' id="first-diff"' if offset + i == first else ""
                text = f'<mark class="diff" title="byte {offset + i}"{first_mark}>{text}</mark>'
            cells.append(text)
        rows.append(f"{offset + row:08x}  {' '.join(cells)}")
    return "\n".join(rows) or "(no bytes)"


def error_picture(grid: dict[str, Any]) -> str:
    """Layers (rows) x heads (columns), K and V side by side, the positions before the fill
    and those past it as separate panels; a cell's colour is how many of its elements differ.
    Below, one cell per token position, a bar at the fill."""
    layers, heads, positions = grid["layers"], grid["heads"], grid["positions"]
    fill, dims = grid["n_tokens"], grid["dims"]
    filled = f"positions 0..{fill - 1}" if fill > 1 else f"position{'s' * (fill != 1)} 0"
    panels = [("in_fill", "no position filled" if fill == 0 else filled, fill * dims)]
    if fill < positions:
        panels.append(
            ("past_fill", f"past the fill: {fill}..{positions - 1}", (positions - fill) * dims)
        )
    peak = max([1, *(n for key, _, _ in panels for layer in grid[key] for kv in layer for n in kv)])
    label_w, top, gap = 56, 34, 12
    kv_w = max(heads * CELL, 40)  # room for the K / V title
    panel_w = max(2 * kv_w + gap, 150)
    shapes: list[str] = []
    for p, (key, title, per_cell) in enumerate(panels):
        x0 = label_w + p * (panel_w + 3 * gap)
        shapes.append(f'<text x="{x0}" y="12" class="t b">{escape(title)}</text>')
        for kv, name in enumerate("KV"):
            xk = x0 + kv * (kv_w + gap)
            shapes.append(f'<text x="{xk}" y="{top - 6}" class="t">{name} heads</text>')
            for layer in range(layers):
                for head in range(heads):
                    n = grid[key][layer][kv][head]
                    shapes.append(
                        f'<rect x="{xk + head * CELL}" y="{top + layer * CELL}" '
                        f'width="{CELL - 1}" height="{CELL - 1}" fill="{_heat(n, peak, key)}">'
                        f"<title>layer {layer}, {name} head {head}, {title}: {n} of "
                        f"{per_cell} elements differ</title></rect>"
                    )
    for layer in range(layers):
        y = top + layer * CELL + CELL - 3
        shapes.append(f'<text x="0" y="{y}" class="t">layer {layer}</text>')
    y_pos = top + layers * CELL + 26
    shapes.append(
        f'<text x="0" y="{y_pos - 7}" class="t b">differing elements per token position'
        f"{' (a bar at the fill)' if fill < positions else ''}</text>"
    )
    by_position = grid["by_position"]
    per_position = max([1, *by_position])
    for pos, n in enumerate(by_position):
        key = "in_fill" if pos < fill else "past_fill"
        shapes.append(
            f'<rect x="{label_w + pos * CELL}" y="{y_pos}" width="{CELL - 1}" '
            f'height="{CELL - 1}" fill="{_heat(n, per_position, key)}">'
            f"<title>position {pos}{' (past the fill)' if pos >= fill else ''}: {n} differ"
            "</title></rect>"
        )
    if fill < positions:
        x = label_w + fill * CELL - 1
        shapes.append(
            f'<line x1="{x}" y1="{y_pos - 3}" x2="{x}" y2="{y_pos + CELL + 2}" class="fill"/>'
        )
    width = max(label_w + len(panels) * (panel_w + 3 * gap), label_w + positions * CELL, 300) + 10
    height = y_pos + CELL + 6
    caption = (
        f"{grid['differing']} of {grid['elements']} elements differ (pool {grid['dtype']}, "
        f"bit for bit); {fill} of {positions} positions filled; darker = more elements differ "
        f"(at most {peak} in a cell); past the fill in purple"
    )
    return (
        '<figure class="picture">'
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(caption)}">'
        + "".join(shapes)
        + f"</svg><figcaption>{escape(caption)}</figcaption></figure>"
    )


def _heat(n: int, peak: int, key: str) -> str:
    if n == 0:
        return "#eef0f2" if key == "in_fill" else "#dde3ea"
    strength = 0.25 + 0.75 * n / peak
    hue = 0 if key == "in_fill" else 280  # past the fill in purple, set apart from red
    return f"hsl({hue}, 75%, {int(92 - 52 * strength)}%)"
