"""docs/format.md against the requirement list, both ways: every requirement is cited at the
clause its `clause:` names, every id the page cites exists, every `clause:` anchor exists; and
the page's worked examples are the bytes the oracle writes."""

from __future__ import annotations

import re
import struct
from pathlib import Path

import numpy as np
import pytest
from tlkv_conformance import oracle
from tlkv_conformance import requirements as requirements_module
from tlkv_conformance.requirements import (
    FORMAT_DOC,
    Requirement,
    clause_url,
    requirements,
)

from selftest.support import ROOT

DOCS = ROOT / "docs"
ANCHOR = re.compile(r'<a id="([^"]+)"></a>')
HEADING = re.compile(r"^#{1,6} ", re.MULTILINE)
REQ_ID = r"[A-Z][A-Z0-9]*(?:-[A-Z0-9]+)+"
CITATION = re.compile(rf"\[({REQ_ID}(?:,\s*{REQ_ID})*)\]")
NO_REQUIREMENT = "[no requirement]"
FENCE = re.compile(r"^[ \t]*```.*?^[ \t]*```[ \t]*$", re.MULTILINE | re.DOTALL)  # indented too
DUMP_LINE = re.compile(r"^(\d+)\s+((?:[0-9a-f]{2} )*[0-9a-f]{2})(?:\s{2,}.*)?$")


def _without_code(text: str) -> str:
    """The page with fenced code blocks blanked (same length), so anchors, headings and
    citations are looked for in prose only."""
    return FENCE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


class Page:
    """One page of docs/: its explicit anchors and the text each one introduces."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.text = (DOCS / name).read_text(encoding="utf-8")
        prose = _without_code(self.text)
        found = list(ANCHOR.finditer(prose))
        self.anchor_list = [m.group(1) for m in found]
        # A clause runs from its anchor to the next anchor or heading.
        ends = sorted([m.start() for m in found] + [m.start() for m in HEADING.finditer(prose)])
        self.spans: dict[str, str] = {}
        for match in found:
            end = next((e for e in ends if e > match.start()), len(prose))
            self.spans.setdefault(match.group(1), prose[match.end() : end])
        self.prose = prose

    def cited(self, anchor: str) -> set[str]:
        """The ids cited at a clause: in brackets on format.md, mentioned anywhere elsewhere."""
        span = self.spans[anchor]
        if self.name == FORMAT_DOC:
            return {i for m in CITATION.finditer(span) for i in re.split(r",\s*", m.group(1))}
        return set(re.findall(rf"(?<![A-Z0-9-])({REQ_ID})(?![A-Z0-9-])", span))


_PAGES: dict[str, Page] = {}


def page(name: str) -> Page:
    if name not in _PAGES:
        _PAGES[name] = Page(name)
    return _PAGES[name]


def format_page() -> Page:
    return page(FORMAT_DOC)


def test_every_clause_anchor_exists_on_its_page() -> None:
    missing = []
    for req in requirements().values():
        if not (DOCS / req.clause_page).is_file():
            missing.append(f"{req.id}: no page docs/{req.clause_page}")
        elif req.clause_anchor not in page(req.clause_page).spans:
            missing.append(f'{req.id}: no <a id="{req.clause_anchor}"> in {clause_url(req)}')
    assert not missing, "\n".join(missing)


def test_every_requirement_is_cited_at_its_clause() -> None:
    uncited = [
        f"{req.id} is not cited at {clause_url(req)}"
        for req in requirements().values()
        if req.clause_anchor in page(req.clause_page).spans
        and req.id not in page(req.clause_page).cited(req.clause_anchor)
    ]
    assert not uncited, "\n".join(uncited)


def test_every_id_the_format_cites_exists() -> None:
    cited = {
        i for m in CITATION.finditer(format_page().prose) for i in re.split(r",\s*", m.group(1))
    }
    unknown = sorted(cited - set(requirements()))
    assert not unknown, f"docs/format.md cites unknown requirement ids: {', '.join(unknown)}"


def test_anchors_are_unique() -> None:
    anchors = format_page().anchor_list
    doubled = sorted({a for a in anchors if anchors.count(a) > 1})
    assert not doubled, f"anchors used twice in docs/format.md: {', '.join(doubled)}"


def test_every_clause_cites_requirements_or_says_it_has_none() -> None:
    silent = [
        anchor
        for anchor, span in format_page().spans.items()
        if not CITATION.search(span) and NO_REQUIREMENT not in span
    ]
    assert not silent, f"clauses of docs/format.md without ids or [no requirement]: {silent}"


def test_clauses_without_requirement_are_listed() -> None:
    doc = format_page()
    unchecked = {a for a, span in doc.spans.items() if NO_REQUIREMENT in span}
    section = doc.prose.split("## Clauses no case checks", 1)[1]
    listed = set(re.findall(r"\]\(#([a-z0-9-]+)\)", section))
    assert listed == unchecked


def test_the_page_stands_alone() -> None:
    text = format_page().text
    for outside in ("../shared", "shared/spec", "CONTRACT.md", "kv-blocks-hashing"):
        assert outside not in text, f"docs/format.md points outside the project: {outside}"


# -- the loader --------------------------------------------------------------------------------


def test_clause_url() -> None:
    req = Requirement("X-Y", "MUST", "spec", "s", "t", "hash-zero-is-one")
    assert clause_url(req) == "docs/format.md#hash-zero-is-one"
    other = Requirement("X-Y", "SHOULD", "decision", "s", "t", "decisions.md#v2-pad")
    assert clause_url(other, base="https://example.org/docs/") == (
        "https://example.org/docs/decisions.md#v2-pad"
    )


@pytest.mark.parametrize(
    ("clause_line", "message"),
    [
        ("", "missing clause"),
        ("  clause: Not An Anchor\n", "neither an anchor"),
        ("  clause: hash-zero\n  page: x\n", "unknown page"),
    ],
)
def test_the_loader_wants_a_clause(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clause_line: str, message: str
) -> None:
    path = tmp_path / "requirements.yaml"
    path.write_text(
        "- id: HASH-ZERO\n  level: MUST\n  source: spec\n  section: Block hash\n"
        f"{clause_line}  text: a computed 0 becomes 1\n",
        encoding="utf-8",
    )
    monkeypatch.setattr(requirements_module, "REQUIREMENTS_FILE", path)
    with pytest.raises(ValueError, match=message):
        requirements_module.requirements.__wrapped__()


# -- the worked examples -----------------------------------------------------------------------


def _dumps() -> list[bytes]:
    """The byte column of every offset/bytes dump on the page, checked for contiguity."""
    dumps = []
    for block in FENCE.findall(format_page().text):
        lines = [line.strip() for line in block.splitlines()[1:-1]]
        if not lines or not lines[0].startswith("offset"):
            continue
        data = b""
        for line in lines[1:]:
            match = DUMP_LINE.match(line)
            assert match, f"unreadable dump line: {line!r}"
            assert int(match.group(1)) == len(data), f"offset out of step: {line!r}"
            data += bytes.fromhex(match.group(2))
        dumps.append(data)
    return dumps


def test_the_hash_example_is_the_oracles() -> None:
    span = format_page().spans["example-hash"]
    parent, shown = 0, []
    for tokens in ([1, 2], [3, 4]):
        data = struct.pack("<Q2I", parent, *tokens)
        assert data.hex(" ") in span
        parent = oracle.block_hash(parent, tokens)
        shown.append(f"0x{parent:016X}")
    assert re.findall(r"0x[0-9A-F]{16}", span) == shown


def test_the_envelope_examples_are_the_oracles() -> None:
    geometry = oracle.Geometry(block_tokens=2, n_layers=1, n_kv_heads=1, head_dim=2)
    values = np.zeros(geometry.values_shape, dtype=np.float32)
    values[0, 0, 0] = [[1, 2], [3, 4]]
    values[0, 1, 0] = [[0.5, -1], [0, 0.25]]
    block = oracle.Block(oracle.block_hash(0, [1, 2]), 2, values)
    expected = [oracle.encode(geometry, [block], version) for version in (1, 2)]
    assert _dumps() == expected
