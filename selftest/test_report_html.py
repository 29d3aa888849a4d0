"""report.html as a person sees it: a failing run's page opened in headless Chromium (Debian's
`chromium` package; skipped, with the reason, where no browser is found), and the page's
data without a browser: its views of the evidence, no external assets (docs/report.md, "The
HTML page")."""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tlkv_conformance.evidence import ValuesEvidence
from tlkv_conformance.failure_view import WINDOW_BYTES, failure_view
from tlkv_conformance.report_html import render_html

from selftest.mutation import load_catalogue, run_mutant

# A writer bug that also breaks imports (elem_to_f16 serves both): one run gives a failure
# with an envelope diff (writer-v1.yaml::special-values) and one with a values diff
# (reader-v2.yaml::accept-every-e4m3-code), in about a second of tests.
MUTANT = "v1-subnormals-flushed"
PATHS = ["cases/writer-v1.yaml", "cases/reader-v2.yaml"]
BROWSERS = ("chromium", "chromium-browser", "google-chrome")
BROWSER_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


@pytest.fixture(scope="session")
def failing_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The report folder of one run of the mutant (every case of PATHS, not stopped at the
    first failure), shared by this module's checks."""
    mutant = {m.id: m for m in load_catalogue()}[MUTANT]
    workdir = tmp_path_factory.mktemp("html-report")
    outcome = run_mutant(
        mutant,
        workdir,
        extra=[f"--conformance-report={workdir / 'report'}"],
        first_failure=False,
        paths=PATHS,
    )
    assert outcome.run.returncode == 1, outcome.run.output[-2000:]
    return workdir


@pytest.fixture(scope="session")
def browser() -> str:
    found = next((path for name in BROWSERS if (path := shutil.which(name))), None)
    if found is None:
        pytest.skip(
            "no Chromium found (looked for chromium, chromium-browser, google-chrome): install "
            "Debian's `chromium` package to check report.html in a browser"
        )
    return found


def run_browser(browser: str, page: Path, *args: str) -> str:
    """Open `page` in a fresh headless profile; its stdout (the DOM with --dump-dom)."""
    with tempfile.TemporaryDirectory() as profile:
        done = subprocess.run(
            [browser, *BROWSER_FLAGS, f"--user-data-dir={profile}", *args, page.as_uri()],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.fixture(scope="session")
def rendered(browser: str, failing_run: Path) -> str:  # no browser: skipped before the run
    """The failing run's page as Chromium rendered it, after its script ran."""
    return run_browser(browser, failing_run / "report.html", "--dump-dom")


def test_the_verdict_is_the_first_thing_shown(rendered: str) -> None:
    header = rendered[rendered.index('<header id="verdict">') : rendered.index("</header>")]
    assert '<span class="gate gate-fail">FAIL</span>' in header
    assert "exit status 1" in header


def test_start_here_names_the_planted_bug_first(rendered: str) -> None:
    mutant = {m.id: m for m in load_catalogue()}[MUTANT]
    start = rendered[rendered.index('<section id="start-here">') :]
    first = start[start.index("<li>") : start.index("</li>")]
    assert any(f'<span class="cause-id">{cause}</span>' in first for cause in mutant.cause)
    assert "V1-F16" in first  # the requirement the catalogue says it breaks


def test_the_differing_byte_is_marked(rendered: str) -> None:
    # special-values writes f16 bits 0x8000, 0x0001, ... from element 0 of block 0, whose
    # payload starts at byte 40 (a 28-byte header, then a record's hash and n_tokens): the
    # subnormal 0x0001 is bytes 42..43, "01 00" little-endian, which the bug writes as 00 00.
    failure = _article(rendered, "cases/writer-v1.yaml::special-values")
    assert "first difference at byte 42" in failure
    expected, actual = failure.split("actual\n", 1)
    assert '<mark class="diff" title="byte 42" id="first-diff">01</mark>' in expected
    assert '<mark class="diff" title="byte 42" id="first-diff">00</mark>' in actual
    assert "f16-subnormals-flushed" in failure  # its probable cause
    assert "- id: special-values" in failure  # its YAML


def test_a_values_failure_has_its_picture(rendered: str) -> None:
    failure = _article(rendered, "cases/reader-v2.yaml::accept-every-e4m3-code")
    svg = failure[failure.index("<svg") : failure.index("</svg>")]
    # The failure message names the first differing element: K of layer 0, head 0.
    assert "K[layer 0][head 0]" in failure
    cell = re.search(r"<title>layer 0, K head 0, positions [^:]*: (\d+) of (\d+) elements", svg)
    assert cell is not None
    assert int(cell[1]) > 0
    assert svg.count("<rect") > 4
    assert "differing elements per token position" in svg


def test_passing_tests_are_folded_and_the_script_ran(rendered: str) -> None:
    assert re.search(r'<details class="tests" data-group="passed"><summary>\d+ passed', rendered)
    assert re.search(r'<body data-gate="fail" data-load-ms="[\d.]+"', rendered)
    assert re.search(r'<span id="filter-count">\d+ tests shown</span>', rendered)


def test_the_screenshot_is_taken(browser: str, failing_run: Path, tmp_path: Path) -> None:
    shot = tmp_path / "report.png"
    run_browser(
        browser, failing_run / "report.html", f"--screenshot={shot}", "--window-size=1280,2000"
    )
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_2000_test_page_shows_every_failure(
    browser: str, failing_run: Path, tmp_path: Path
) -> None:
    """A large run's page is whole: its script ran to the end and every failure of 2,000 tests
    is on it. How fast it is ready is measured by benchmarks/bench_report_html.py, not here."""
    report = scaled_report(failing_run, 2000)
    page = tmp_path / "big.html"
    page.write_text(render_html(report), encoding="utf-8")
    dom = run_browser(browser, page, "--dump-dom")
    assert re.search(r'data-load-ms="([\d.]+)"', dom), "the page's script did not run"
    failed = sum(test["outcome"] == "failed" for test in report["tests"])
    assert failed > 40
    assert dom.count('<article class="failure"') == failed


def test_the_page_needs_nothing_from_outside(failing_run: Path) -> None:
    page = (failing_run / "report.html").read_text(encoding="utf-8")
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//|file:)""", page)
    assert not re.search(r"<link\b|@import|url\(", page)
    # The one http(s) URL is the SVG namespace, which is a name, not a fetch.
    assert set(re.findall(r"https?://[^\s\"'<>]+", page)) == {"http://www.w3.org/2000/svg"}


def test_the_report_data_carries_the_views(failing_run: Path) -> None:
    report = json.loads((failing_run / "report.json").read_text(encoding="utf-8"))
    views = {t["id"]: t["view"] for t in report["tests"] if t["outcome"] == "failed"}
    envelope = views["cases/writer-v1.yaml::special-values"]
    assert envelope["location"].startswith("cases/writer-v1.yaml:")
    (window,) = envelope["windows"]
    assert window["first"] == 42
    assert window["offset"] <= 42
    assert len(bytes.fromhex(window["expected"])) <= WINDOW_BYTES
    assert window["field"].startswith("block 0 K[layer 0][head 0][pos 0][dim 1]")
    values = views["cases/reader-v2.yaml::accept-every-e4m3-code"]
    assert values["grid"]["differing"] == sum(values["grid"]["by_position"]) > 0
    assert all(t["view"] is None for t in report["tests"] if t["outcome"] == "passed")


def test_the_grid_sets_the_positions_past_the_fill_apart() -> None:
    # [L=2][K/V][H=3][B=4][D=2], two tokens written: one element differs at layer 1, V,
    # head 2, position 0 and two at layer 0, K, head 1, position 3 (past the fill).
    expected = np.zeros((2, 2, 3, 4, 2), dtype=np.float32)
    actual = expected.copy()
    actual[1, 1, 2, 0, 1] = 1.0
    actual[0, 0, 1, 3, :] = -2.0
    view = failure_view(ValuesEvidence(expected, actual, n_tokens=2, dtype="f32"), "x.yaml:1")
    grid = view["grid"]
    assert (grid["layers"], grid["heads"], grid["positions"], grid["n_tokens"]) == (2, 3, 4, 2)
    in_fill, past = np.zeros((2, 2, 3), dtype=int), np.zeros((2, 2, 3), dtype=int)
    in_fill[1, 1, 2], past[0, 0, 1] = 1, 2
    assert grid["in_fill"] == in_fill.tolist()
    assert grid["past_fill"] == past.tolist()
    assert grid["by_position"] == [1, 0, 0, 2]
    page = render_html(_one_failure_report(view))
    assert "past the fill: 2..3" in page
    assert "<title>layer 0, K head 1, past the fill: 2..3: 2 of 4 elements differ</title>" in page


def _article(dom: str, test_id: str) -> str:
    anchor = "t-" + re.sub(r"[^\w-]", "_", test_id)
    start = dom.index(f'<article class="failure" id="{anchor}"')
    return dom[start : dom.index("</article>", start)]


def scaled_report(run: Path, total: int) -> dict[str, Any]:
    """The failing run's report with its tests repeated up to `total`, failures and their
    views included, as a large run's page would hold them."""
    report = json.loads((run / "report.json").read_text(encoding="utf-8"))
    tests = report["tests"]
    scaled = []
    for n in range(total):
        test = copy.deepcopy(tests[n % len(tests)])
        test["nodeid"] = test["id"] = f"{test['id']}#{n}"
        scaled.append(test)
    report["tests"] = scaled
    return report


def _one_failure_report(view: dict[str, Any]) -> dict[str, Any]:
    test = {
        "nodeid": "x.yaml::one",
        "id": "x.yaml::one",
        "impl": "ref",
        "requirements": ["POOL-WRITE-READ"],
        "blamed": ["POOL-WRITE-READ"],
        "diagnosis": [],
        "consequence_of": None,
        "level": "MUST",
        "outcome": "failed",
        "gating": True,
        "message": "values differ",
        "view": view,
    }
    return {
        "gate": "fail",
        "exit_status": 1,
        "strict": False,
        "summary": {"tests": {"failed": 1}, "failures": 1, "warnings": 0},
        "start_here": [],
        "implementations": [],
        "requirements": [],
        "matrix": None,
        "tests": [test],
    }


def test_a_page_that_cannot_be_rendered_says_so() -> None:
    page = render_html({"gate": "fail"})  # no summary, no tests: not a report.json
    assert "This page could not be rendered (KeyError(" in page
    assert "the report is in the Markdown and JSON files beside it" in page


def test_the_pair_matrix_puts_a_failure_in_its_row_and_column() -> None:
    report = _one_failure_report({"location": "conformance/test_matrix.py:1"})
    cells = [
        {"producer": p, "consumer": c, "verdict": "passed", "gating": False}
        for p in ("a", "b")
        for c in ("a", "b")
    ]
    cells[1] = {"producer": "a", "consumer": "b", "verdict": "failed", "gating": True}
    report["matrix"] = {"implementations": ["a", "b"], "cells": cells}
    page = render_html(report)
    matrix = page[
        page.index('<section id="pairs">') : page.index("</section>", page.index("pairs"))
    ]
    rows = re.findall(r"<tr><th><code>(\w)</code></th>(.*?)</tr>", matrix)
    shown = {p: re.findall(r'class="v v-(\w+)"', cells) for p, cells in rows}
    assert shown == {"a": ["pass", "FAIL"], "b": ["pass", "pass"]}
