"""The conformance report's files: PATH.md, PATH.json and PATH.html, each rendered from the
model (report.Conformance) and written atomically (docs/report.md)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from .report import Conformance, report_paths
from .report_html import render_html
from .report_json import report_json
from .report_text import markdown


def write_reports(model: Conformance, base: Path) -> list[Path]:
    """Write BASE.md, BASE.json and BASE.html (creating folders), each atomically (a reader
    sees the old report or the new one, never half of one), and return their paths."""
    base.parent.mkdir(parents=True, exist_ok=True)
    md, js = report_paths(base)
    data = report_json(model)
    for path, text in (
        (js, json.dumps(data, indent=2) + "\n"),
        (md, markdown(model)),
        (md.with_suffix(".html"), render_html(data)),
    ):
        partial = path.with_name(f".{path.name}.{model.run.run_id or os.getpid()}.partial")
        partial.write_text(text, encoding="utf-8")
        os.replace(partial, path)
    return [md, js, md.with_suffix(".html")]
