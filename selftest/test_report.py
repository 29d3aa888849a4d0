"""The CI gate as a user meets it: the conformance report, SHOULD-level warnings and --strict,
JUnit properties, field-aware diffs, and the cross-implementation matrix (docs/report.md)."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from tlkv_conformance import report as tlkv_report
from tlkv_conformance.adapters import parse_impl
from tlkv_conformance.diagnosis import Cause
from tlkv_conformance.exit_status import EXIT_NOT_SHOWN
from tlkv_conformance.gate import outcome_of
from tlkv_conformance.outcome import TestIdentity, TestOutcome
from tlkv_conformance.report import (
    NOTHING_SHOWN,
    Conformance,
    Impl,
    ResultLog,
    RunInfo,
    report_paths,
)
from tlkv_conformance.report_text import closing_lines, markdown, terminal_lines
from tlkv_conformance.requirements import requirements

from selftest.support import ROOT, SuiteRun, patched_copy, run_conformance

PYREF = ROOT / "reference" / "pyref.py"
SPEC_EXPORT = "cases/writer-v1.yaml::spec-example"
SPEC_IMPORT = "cases/reader-v1.yaml::accept-spec-example"
NAN_CASE = "cases/writer-v1.yaml::nan-payloads-kept"

# A writer that flips the low bit of the second f16 element of every exported block.
WRONG_F16 = (
    "bits = self._values[block].view(np.uint16).copy()",
    "bits = self._values[block].view(np.uint16).copy()\n            bits.flat[1] ^= 1",
)
# A v1 reader that loses the sixth element of every imported block.
LOST_ELEMENT = (
    'return np.frombuffer(payload, dtype="<f2").reshape(self.shape).astype(np.float32)',
    'values = np.frombuffer(payload, dtype="<f2").reshape(self.shape).astype(np.float32)\n'
    "            values = values.copy()\n"
    "            values.flat[5] = 0\n"
    "            return values",
)
# Quiet NaNs written as the default NaN of their sign (payload dropped), as an engine in a
# default-NaN mode does: only SHOULD-level cases (NaN bits: V1-F16-NAN-PAYLOAD) may notice.
DEFAULT_NAN = (
    "        kv = np.asarray(kv, dtype=np.float32)\n",
    "        kv = np.asarray(kv, dtype=np.float32).copy()\n"
    "        bits = kv.view(np.uint32)\n"
    "        quiet = np.isnan(kv) & (bits & np.uint32(0x00400000) != 0)\n"
    "        bits[quiet] = (bits[quiet] & np.uint32(0x80000000)) | np.uint32(0x7FC00000)\n",
)
# A reader (either version) that negates every value it imports.
NEGATED_IMPORT = (
    "return [self._allocate(h, n, self._decode(p, version)) for h, n, p in records]",
    "return [self._allocate(h, n, -self._decode(p, version)) for h, n, p in records]",
)


def _plant(tmp_path: Path, name: str, *patches: tuple[str, str]) -> str:
    patched_copy(PYREF, list(patches), tmp_path / f"{name}.py")
    return f"--impl=py:{name}"


def _run(
    tmp_path: Path, *args: str, pythonpath: Path | None = None
) -> tuple[SuiteRun, dict[str, Any], Path]:
    """Run the suite with a conformance report and a JUnit file of this test's own; return
    the run, the JSON report and the JUnit path."""
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    base, junit = out / "report", out / "junit.xml"
    run = run_conformance(
        [*args, f"--conformance-report={base}", f"--junitxml={junit}"],
        tmp_path,
        timeout=120,
        pythonpath=pythonpath,
    )
    _, json_path = report_paths(base)
    assert json_path.exists(), run.output
    return run, json.loads(json_path.read_text(encoding="utf-8")), junit


def _junit(path: Path) -> dict[str, list[tuple[str, str]]]:
    """Each test case's name (as in the test id's last part) -> its properties."""
    return {
        case.get("name", ""): [
            (p.get("name", ""), p.get("value", "")) for p in case.iter("property")
        ]
        for case in ET.parse(path).getroot().iter("testcase")
    }


def _failed(path: Path) -> list[str]:
    return [
        case.get("name", "")
        for case in ET.parse(path).getroot().iter("testcase")
        if case.find("failure") is not None
    ]


def _cell(report: dict[str, Any], requirement: str, label: str) -> dict[str, Any]:
    (row,) = [r for r in report["requirements"] if r["id"] == requirement]
    return row["results"][label]


# -- a MUST failure: the report names the requirement and the exact field ----------------------


def test_planted_bugs_are_named_by_requirement_and_field(tmp_path: Path) -> None:
    impl = _plant(tmp_path, "planted_two_bugs", WRONG_F16, LOST_ELEMENT)
    run, report, _ = _run(tmp_path, impl, SPEC_EXPORT, SPEC_IMPORT, pythonpath=tmp_path)
    assert run.returncode == 1, run.output
    label = "py:planted_two_bugs"
    export_diff = (
        "block 0 K[layer 0][head 0][pos 0][dim 1] (bytes 42..43): expected 2.0 (00 40), "
        "got 2.001953125 (01 40)"
    )
    import_diff = (
        "block 0 V[layer 0][head 0][pos 0][dim 1]: expected -1.0 (00 bc), got 0.0 (00 00); "
        "imported from bytes 50..51: -1.0 (00 bc)"
    )
    # the terminal summary: the failing MUST requirements, and each failed test with its diff
    summary = run.output[run.output.index("TLKV conformance") :]
    assert f"{label}: FAIL" in summary
    assert any(line.split()[:3] == ["V1-F16", "MUST", "FAIL"] for line in summary.splitlines()), (
        summary
    )
    assert f"FAIL {SPEC_EXPORT} ({label}; MUST: " in summary
    assert export_diff in summary
    assert import_diff in summary
    # the JSON report
    cell = _cell(report, "V1-F16", label)
    assert (cell["verdict"], cell["gating"]) == ("failed", True)
    assert export_diff in cell["failures"][0]["message"]
    assert "around offset 42" in cell["failures"][0]["message"]  # the hex window
    # The import's values differ at a filled position of a v1 record: blamed on the f16
    # decoding, not on READ-ACCEPT, which the case also cites (affected, not failed).
    reader = _cell(report, "READ-ACCEPT", label)
    assert reader["verdict"] == "affected"
    assert [f["blamed"] for f in reader["affected_by"]] == [["V1-F16"]]
    (imported,) = [f for f in cell["failures"] if import_diff in f["message"]]
    assert "the envelope it was imported from, around byte 50" in imported["message"]
    assert _cell(report, "HASH-FNV", label)["verdict"] == "not run"
    # the Markdown report
    markdown = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    assert "Gate: **FAIL** (exit status 1)" in markdown
    assert "| V1-F16 | MUST | FAIL |" in markdown
    assert export_diff in markdown
    assert import_diff in markdown


# -- SHOULD-level failures: warnings, unless --strict ---------------------------------------------


@pytest.fixture(scope="session")
def should_only(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A module with a bug only SHOULD-level cases catch, and its --impl."""
    folder = tmp_path_factory.mktemp("should")
    return folder, _plant(folder, "planted_default_nan", DEFAULT_NAN)


def test_should_only_failure_exits_0_and_says_so(should_only, tmp_path: Path) -> None:
    folder, impl = should_only
    label = impl.removeprefix("--impl=")
    run, report, junit = _run(tmp_path, impl, "cases/writer-v1.yaml", pythonpath=folder)
    assert run.returncode == 0, run.output
    assert not _failed(junit)  # a warning is no failure: it never stops -x nor fails a CI job
    assert "SHOULD-level warnings" in run.output  # shown in full, in a section of its own
    assert NAN_CASE in run.output[run.output.index("SHOULD-level warnings") :]
    # in its failure
    assert "SHOULD-level failure (NAN-SIGN, V1-F16-NAN-PAYLOAD): a warning" in run.output
    assert "not a failed gate; exit status 0 (--strict makes" in run.output
    assert f"{label}: PASS (" in run.output
    # the report
    assert (report["gate"], report["exit_status"], report["strict"]) == ("pass", 0, False)
    assert report["complete"] is True
    assert report["summary"]["failures"] == 0
    flagged = [
        c for c, props in _junit(junit).items() if any(n == "should_failure" for n, _ in props)
    ]
    assert report["summary"]["warnings"] == len(flagged) >= 1
    cell = _cell(report, "V1-F16-NAN-PAYLOAD", label)
    assert (cell["verdict"], cell["gating"]) == ("failed", False)
    assert "expected nan (55 7e), got nan (00 7e)" in cell["failures"][0]["message"]
    # JUnit: the failure, its requirement and level, and what it means for the run
    properties = _junit(junit)["nan-payloads-kept"]
    assert ("requirement", "V1-F16-NAN-PAYLOAD") in properties
    assert ("level", "SHOULD") in properties
    assert ("impl", label) in properties
    assert any(name == "should_failure" and "a warning" in value for name, value in properties)


@pytest.mark.parametrize("strict", ["--strict", "-o tlkv_strict=true"])
def test_should_failure_fails_the_run_with_strict(should_only, tmp_path: Path, strict) -> None:
    folder, impl = should_only
    run, report, _ = _run(tmp_path, impl, *strict.split(), NAN_CASE, pythonpath=folder)
    assert run.returncode == 1, run.output
    assert (report["gate"], report["strict"]) == ("fail", True)
    assert _cell(report, "V1-F16-NAN-PAYLOAD", impl.removeprefix("--impl="))["gating"]
    assert "it fails the run because of --strict" in run.output
    assert "not a failed gate" not in run.output


def test_should_only_failure_exits_0_under_xdist(should_only, tmp_path: Path) -> None:
    folder, impl = should_only
    run, report, junit = _run(tmp_path, "-n", "2", impl, "cases/writer-v1.yaml", pythonpath=folder)
    assert run.returncode == 0, run.output
    summary = report["summary"]
    assert (summary["failures"], summary["collection_errors"]) == (0, 0)
    assert summary["warnings"] == summary["tests"]["failed"] >= 1
    assert ("level", "SHOULD") in _junit(junit)["nan-payloads-kept"]


def test_a_should_warning_does_not_stop_x(should_only, tmp_path: Path) -> None:
    """-x stops at the first MUST failure, never at a SHOULD warning: a later MUST failure is
    still seen, and a run with only warnings completes and passes."""
    folder, impl = should_only
    run, report, _ = _run(tmp_path, "-x", impl, "cases/writer-v1.yaml", pythonpath=folder)
    assert run.returncode == 0, run.output
    assert report["complete"] is True
    assert report["summary"]["warnings"] >= 1
    assert "stopping after 1 failures" not in run.output


def test_strict_known_failure_that_passes_still_fails_a_should_case(tmp_path: Path) -> None:
    known = tmp_path / "known.yaml"
    known.write_text(f"- case: {NAN_CASE}\n  reason: default-NaN mode on ARM (ticket 7)\n")
    run, report, _ = _run(tmp_path, f"--known-failures={known}", NAN_CASE)
    assert run.returncode == 1, run.output
    assert "XPASS(strict)" in run.output
    # The case passed (its requirement with it); the list is what fails the run, by name.
    (test,) = report["tests"]
    assert (test["outcome"], test["gating"]) == ("xpassed", False)
    assert (report["gate"], report["exit_status"]) == ("fail", 1)
    (stale,) = report["collection_errors"]
    assert f"stale known failure {known}:1: {NAN_CASE}" in stale


# -- the JSON report's structure --------------------------------------------------------------


def test_json_report_structure(should_only, tmp_path: Path) -> None:
    folder, impl = should_only
    label = impl.removeprefix("--impl=")
    _, report, _ = _run(tmp_path, impl, "--impl=ref", NAN_CASE, pythonpath=folder)
    assert report["format"] == "tlkv-conformance-report"
    assert report["format_version"] == 3
    assert set(report) == {
        "format",
        "format_version",
        "run_id",
        "complete",
        "incomplete_reason",
        "started",
        "finished",
        "suite_version",
        "settings",
        "gate",
        "exit_status",
        "strict",
        "not_shown",
        "summary",
        "collection_errors",
        "start_here",
        "implementations",
        "requirements",
        "matrix",
        "same_implementation",
        "tests",
    }
    assert [i["label"] for i in report["implementations"]] == [label, "ref"]
    assert report["implementations"][1]["identity"] == "py:tlkv_conformance.references.pyref"
    assert "pool f16" in report["implementations"][1]["description"]
    # every requirement, in the file's order, with a verdict for every implementation
    assert [r["id"] for r in report["requirements"]] == list(requirements())
    verdicts = {"failed", "affected", "passed", "xfail", "skipped", "not run"}
    for row in report["requirements"]:
        assert row["level"] in ("MUST", "SHOULD")
        assert row["text"]
        assert set(row["results"]) == {label, "ref"}
        assert all(cell["verdict"] in verdicts for cell in row["results"].values())
    assert _cell(report, "V1-F16-NAN-PAYLOAD", "ref")["verdict"] == "passed"
    assert _cell(report, "V1-F16-NAN-PAYLOAD", label)["tests"] == {"failed": 1}
    # the matrix is there (its tests were not selected), and every test with its roles
    assert report["matrix"]["implementations"] == [label, "ref"]
    assert {c["verdict"] for c in report["matrix"]["cells"]} == {"not run"}
    assert {(t["impl"], t["outcome"]) for t in report["tests"]} == {
        (label, "failed"),
        ("ref", "passed"),
    }
    assert all(
        t["requirements"] == ["NAN-SIGN", "V1-F16-NAN-PAYLOAD"] and t["level"] == "SHOULD"
        for t in report["tests"]
    )
    # the diagnosis: the planted default NaN, named first, with the test it explains
    (failed,) = [t for t in report["tests"] if t["outcome"] == "failed"]
    assert failed["blamed"] == ["V1-F16-NAN-PAYLOAD"]
    assert [c["id"] for c in failed["diagnosis"]] == ["nan-payload-dropped"]
    (first,) = report["start_here"]
    assert (first["id"], first["shown_by"]) == ("nan-payload-dropped", [failed["nodeid"]])


# -- JUnit properties and the matrix, through two ways in -------------------------------------


def test_junit_properties_and_the_two_by_two_matrix(
    reference_library: Callable[..., Path], tmp_path: Path
) -> None:
    ctypes_impl = f"ctypes:{reference_library('default')}"
    run, report, junit = _run(
        tmp_path,
        "--impl=ref",
        f"--impl={ctypes_impl}",
        "cases/hash.yaml::spec-example-block-0",
        "conformance/test_parity.py::test_import",
        "conformance/test_fuzz.py::test_block_hash_equals_oracle",
        "conformance/test_matrix.py",
    )
    assert run.returncode == 0, run.output
    cases = _junit(junit)
    # a YAML case
    assert cases["spec-example-block-0[ref]"] == [
        ("impl", "ref"),
        ("tlkv_id", "cases/hash.yaml::spec-example-block-0[ref]"),
        ("requirement", "HASH-FNV"),
        ("requirement", "HASH-INPUT"),
        ("requirement", "HASH-CHAIN"),
        ("level", "MUST"),
    ]
    # a parametrized Python test, and a hypothesis one
    parity = cases[f"test_import[kv.wire.v1/spec-example-{ctypes_impl}]"]
    assert {("impl", ctypes_impl), ("requirement", "READ-ACCEPT")} <= set(parity)
    fuzz = cases[f"test_block_hash_equals_oracle[{ctypes_impl}]"]
    assert {("requirement", "HASH-ZERO"), ("level", "MUST")} <= set(fuzz)
    # a matrix test names both sides
    matrix = set(cases[f"test_matrix[full-v1-ref->{ctypes_impl}]"])
    assert {("producer", "ref"), ("consumer", ctypes_impl), ("requirement", "V1-F16")} <= matrix
    # the 2x2 matrix, every pair passing, in the terminal and the report
    summary = run.output[run.output.index("cross-implementation matrix") :].splitlines()
    assert summary[1].split() == ["[1]", "[2]"]
    assert summary[2].split() == ["[1]", "pass", "pass"]
    assert summary[3].split() == ["[2]", "pass", "pass"]
    cells = {(c["producer"], c["consumer"]): c["verdict"] for c in report["matrix"]["cells"]}
    assert cells == {(p, c): "passed" for p in ("ref", ctypes_impl) for c in ("ref", ctypes_impl)}


def test_planted_consumer_bug_fails_exactly_its_column(tmp_path: Path) -> None:
    impl = _plant(tmp_path, "planted_negating_reader", NEGATED_IMPORT)
    label = impl.removeprefix("--impl=")
    run, report, _ = _run(
        tmp_path, "--impl=ref", impl, "conformance/test_matrix.py", pythonpath=tmp_path
    )
    assert run.returncode == 1, run.output
    cells = {(c["producer"], c["consumer"]): c for c in report["matrix"]["cells"]}
    for (producer, consumer), cell in cells.items():
        assert cell["verdict"] == ("failed" if consumer == label else "passed"), (producer, cell)
    failure = cells["ref", label]["failures"][0]["message"]
    assert failure.startswith(f"consumer {label}, the v1 envelope ref exported: imported block 0")
    # labels of more than 16 characters are numbered in the terminal's tables
    assert f"[2] = {label}" in run.output
    lines = run.output[run.output.index("cross-implementation matrix") :].splitlines()
    assert lines[1].split() == ["[1]", "[2]"]
    assert lines[2].split() == ["[1]", "pass", "FAIL"]
    assert lines[3].split() == ["[2]", "pass", "FAIL"]


def test_one_implementation_disagreeing_with_itself_is_called_out(tmp_path: Path) -> None:
    impl = _plant(tmp_path, "planted_same", WRONG_F16)
    run, report, _ = _run(
        tmp_path, "--impl=ref,name=engine", f"{impl},name=engine", SPEC_EXPORT, pythonpath=tmp_path
    )
    assert run.returncode == 1
    (group,) = report["same_implementation"]
    assert group["identity"] == "engine"
    assert group["disagreements"] == [
        {
            "test": "cases/writer-v1.yaml::spec-example[*]",
            "outcomes": {"ref,name=engine": "passed", "py:planted_same,name=engine": "failed"},
        }
    ]
    assert (
        "same implementation 'engine': ref,name=engine, py:planted_same,name=engine DISAGREE"
        in (run.output)
    )


# -- the report's logic, without a run ----------------------------------------------------------


def _phase(
    nodeid: str,
    when: str,
    outcome: str,
    impl: str,
    *reqs: str,
    level: str,
    **flags: Any,
) -> TestOutcome:
    test = TestIdentity(nodeid, nodeid, (("impl", impl),), reqs, level)
    return TestOutcome(test, when, outcome, detail=f"{nodeid} {outcome}", **flags)


def test_verdicts_aggregate_and_should_cases_do_not_fail_must_requirements() -> None:
    log = ResultLog(strict=False)
    for phase in (
        _phase("a[x]", "call", "passed", "x", "READ-LENGTH", level="MUST"),
        _phase("b[x]", "call", "failed", "x", "READ-RULES-FIRST", "READ-LENGTH", level="SHOULD"),
        _phase("c[x]", "setup", "skipped", "x", "V2-PAD", level="SHOULD"),
        _phase("d[x]", "call", "passed", "x", "HASH-FNV", level="MUST"),
        _phase("d[x]", "teardown", "failed", "x", "HASH-FNV", level="MUST"),
    ):
        log.add(phase)
    assert log.warnings == 1
    conformance = Conformance.build([Impl("x", "x", "")], log, exit_status=1)
    cells = conformance.requirement_cells
    assert cells["READ-LENGTH"]["x"].verdict == "passed"  # b's failure is the decision's
    assert (cells["READ-RULES-FIRST"]["x"].verdict, cells["READ-RULES-FIRST"]["x"].shown) == (
        "failed",
        "warn",
    )
    assert cells["V2-PAD"]["x"].verdict == "skipped"
    assert (cells["HASH-FNV"]["x"].verdict, cells["HASH-FNV"]["x"].shown) == ("failed", "FAIL")
    assert cells["HASH-ZERO"]["x"].verdict == "not run"
    assert [r.id for r, _ in conformance.failing] == [
        "HASH-FNV",
        "READ-RULES-FIRST",
    ]


@pytest.mark.parametrize("strict", [False, True], ids=["warning", "strict"])
def test_a_should_failure_blamed_on_must_requirements_is_its_should_requirements(
    strict: bool,
) -> None:
    """A SHOULD-level case whose differences lie in fields of MUST requirements (tiny-slabs
    blamed on V2-SCALE and V2-E4M3, as seen on an engine with the tiny-slab warning) fails its
    own SHOULD requirement, a warning unless --strict: no MUST requirement shows as failed or
    warned, in the tables or the counts; its blame is still said with the test."""
    log = ResultLog(strict=strict)
    for phase in (
        _phase("e4m3[x]", "call", "passed", "x", "V2-SCALE", "V2-E4M3", level="MUST"),
        _phase(
            "tiny-slabs[x]",
            "call",
            "failed",
            "x",
            "V2-TINY-SLAB",
            level="SHOULD",
            strict=strict,
            blamed=("V2-SCALE", "V2-E4M3"),
        ),
    ):
        log.add(phase)
    conformance = Conformance.build([Impl("x", "x", "")], log, exit_status=int(strict))
    shown = "FAIL" if strict else "warn"
    assert [(r.id, r.level, row["x"].shown) for r, row in conformance.failing] == [
        ("V2-TINY-SLAB", "SHOULD", shown)
    ]
    cells = conformance.requirement_cells
    assert (cells["V2-SCALE"]["x"].verdict, cells["V2-E4M3"]["x"].verdict) == ("passed", "passed")
    counts = conformance.summaries[0].requirements
    assert counts.get("SHOULD failed" if strict else "SHOULD warning") == 1
    assert "MUST failed" not in counts
    terminal = "\n".join(terminal_lines(conformance))
    assert f"V2-TINY-SLAB  SHOULD  {shown}" in terminal
    assert "blamed on V2-SCALE, V2-E4M3" in terminal  # where the bytes differ
    assert f"V2-SCALE      MUST    {shown}" not in terminal
    assert "| V2-SCALE | MUST | pass |" in markdown(conformance)


def test_a_should_failure_a_must_mistake_explains_only_affects_its_should_requirements() -> None:
    """A SHOULD-level case failing because of a known MUST-level mistake (the NaN-bits import
    refused by an engine whose CRC is the IEEE one, as a strict gate of crc-ieee-polynomial
    showed) does not fail its SHOULD requirements: they are affected; the mistake's MUST
    requirement fails where MUST-level cases show it."""
    crc = Cause("crc-ieee-polynomial", "the IEEE CRC-32 polynomial", ("READ-CRC",))
    log = ResultLog(strict=True)
    for phase in (
        _phase(
            "accept[x]",
            "call",
            "failed",
            "x",
            "READ-CRC",
            level="MUST",
            strict=True,
            blamed=("READ-CRC",),
            causes=(crc,),
        ),
        _phase(
            "nan-bits[x]",
            "call",
            "failed",
            "x",
            "NAN-SIGN",
            "V1-F16-NAN-PAYLOAD",
            level="SHOULD",
            strict=True,
            blamed=("READ-CRC",),
            causes=(crc,),
        ),
    ):
        log.add(phase)
    conformance = Conformance.build([Impl("x", "x", "")], log, exit_status=1)
    cells = conformance.requirement_cells
    assert [r.id for r, _ in conformance.failing] == ["READ-CRC"]
    assert cells["NAN-SIGN"]["x"].verdict == "affected"
    assert cells["V1-F16-NAN-PAYLOAD"]["x"].verdict == "affected"
    assert "SHOULD failed" not in conformance.summaries[0].requirements


@pytest.mark.parametrize(
    ("when", "level", "strict", "wasxfail", "should_failure", "warning", "reported"),
    [
        ("call", "SHOULD", False, False, True, True, "passed"),
        ("call", "SHOULD", True, False, True, False, "failed"),
        ("call", "MUST", False, False, False, False, "failed"),
        ("setup", "SHOULD", False, False, False, False, "failed"),  # the run's problem: an error
        ("call", "SHOULD", False, True, False, False, "skipped"),  # a covered known failure
    ],
    ids=["should", "should-strict", "must", "should-setup", "should-known"],
)
def test_the_should_level_decides_whether_a_failure_gates(
    when: str,
    level: str,
    strict: bool,
    wasxfail: bool,
    should_failure: bool,
    warning: bool,
    reported: str,
) -> None:
    """A failed phase as pytest counts it, and whether it is a warning: only a SHOULD-level
    case's own check failing, not expected, without --strict, is a warning (counted passed)."""
    failed = _phase(
        "t[x]", when, "failed", "x", "V2-PAD", level=level, strict=strict, wasxfail=wasxfail
    )
    assert (failed.should_failure, failed.warning, failed.reported) == (
        should_failure,
        warning,
        reported,
    )


def test_an_outcome_crosses_from_an_xdist_worker_unchanged() -> None:
    """What a worker judged reaches the controller as it was: the JSON pytest-xdist carries
    gives back an equal outcome, its causes, blame, view and known-failure decisions typed."""
    cause = Cause("nan-sign-lost", "NaNs read back with another sign", ("NAN-SIGN",), "26 NaNs")
    test = TestIdentity("t.py::t[x]", "t.py::t[*]", (("impl", "x"),), ("NAN-SIGN",), "SHOULD")
    outcome = TestOutcome(
        test,
        "call",
        "failed",
        strict=True,
        detail="step 2 (read): 26 of 30 values differ",
        blamed=("NAN-SIGN",),
        causes=(replace(cause, explains=frozenset({"crc-only"})),),
        view={"location": "t.py:3", "windows": []},
        known=(("known.yaml:2", "covered", "t.py::t[*]"),),
    )
    carried = TestOutcome.from_json(json.loads(json.dumps(outcome.as_json())))
    assert carried == outcome
    assert isinstance(carried.causes[0], Cause)


def test_a_report_the_plugin_did_not_judge_fails_the_run() -> None:
    """A crashed xdist worker's report (made by pytest-xdist, never judged by the plugin) is
    an error that fails the run, under the test's own id."""
    crashed = pytest.TestReport(
        "t.py::t",
        ("t.py", None, "t.py"),
        {},
        "failed",
        "worker 'gw0' crashed",
        "???",  # type: ignore[arg-type]
    )
    log = ResultLog(strict=False)
    log.add(outcome_of(crashed))
    (result,) = log.results()
    assert (result.outcome, result.gating, result.key) == ("error", True, "t.py::t")


# -- what a run must show ---------------------------------------------------------------------


def _judged(*phases: TestOutcome, reqs: tuple[str, ...] = ()) -> Conformance:
    """A run of `phases` against implementation x that was otherwise clean (exit status 0)."""
    log = ResultLog(strict=False)
    for phase in phases:
        log.add(phase)
    return Conformance.build([Impl("x", "x", "")], log, 0, RunInfo(settings={"reqs": list(reqs)}))


PASSED_FNV = _phase("a[x]", "call", "passed", "x", "HASH-FNV", level="MUST")
SKIPPED_ZERO = _phase("b[x]", "setup", "skipped", "x", "HASH-ZERO", "V2-SCALE", level="MUST")
NOT_APPLICABLE_SCALE = _phase(
    "c[x]", "setup", "skipped", "x", "V2-SCALE", level="MUST", not_applicable=True
)


def test_an_applicable_must_requirement_no_test_showed_is_named() -> None:
    judged = _judged(PASSED_FNV, SKIPPED_ZERO, NOT_APPLICABLE_SCALE)
    # V2-SCALE: one test did not apply, the other could have shown it
    assert judged.not_shown == {"x": ["HASH-ZERO", "V2-SCALE"]}
    assert judged.summaries[0].gate == "NOT SHOWN"
    assert "x: not shown: HASH-ZERO, V2-SCALE (applicable" in "\n".join(closing_lines(judged, []))


def test_not_applicable_requirements_need_no_test() -> None:
    judged = _judged(PASSED_FNV, NOT_APPLICABLE_SCALE)
    assert judged.not_shown == {}
    assert judged.summaries[0].gate == "PASS"


def test_a_run_that_showed_no_must_requirement_is_named() -> None:
    should = _phase("d[x]", "call", "passed", "x", "V2-PAD", level="SHOULD")
    assert _judged(NOT_APPLICABLE_SCALE, should).not_shown == {"x": [NOTHING_SHOWN]}
    # A known failure still failing shows something: the gate stays green while it is tracked.
    known = _phase("e[x]", "call", "skipped", "x", "HASH-ZERO", level="MUST", wasxfail=True)
    assert _judged(NOT_APPLICABLE_SCALE, known).not_shown == {}


def test_reqs_count_only_the_requirements_asked_for() -> None:
    """--reqs=HASH-FNV selects tests citing HASH-FNV, which may cite others: only HASH-FNV
    must be shown."""
    fnv_and_scale = _phase("f[x]", "setup", "skipped", "x", "HASH-FNV", "V2-SCALE", level="MUST")
    assert _judged(PASSED_FNV, fnv_and_scale, reqs=("HASH-FNV",)).not_shown == {}
    assert _judged(PASSED_FNV, fnv_and_scale).not_shown == {"x": ["V2-SCALE"]}
    assert _judged(fnv_and_scale, reqs=("HASH-FNV",)).not_shown == {"x": ["HASH-FNV"]}


def test_a_run_that_showed_nothing_does_not_exit_0(tmp_path: Path) -> None:
    """Through `tlkv-conformance run`: transfer cases against a library (none applies) exit
    with their own status, in the reports too."""
    out = tmp_path / "out"
    command = [sys.executable, "-m", "tlkv_conformance", "run", "--impl=ref", "--report"]
    result = subprocess.run(
        [*command, str(out), "-q", "-p", "no:cacheprovider", "cases/transfer.yaml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == EXIT_NOT_SHOWN, result.stdout[-3000:] + result.stderr[-3000:]
    assert "ref: not shown: no MUST requirement" in result.stdout
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert (report["gate"], report["exit_status"]) == ("fail", EXIT_NOT_SHOWN)
    assert report["not_shown"] == {"ref": [NOTHING_SHOWN]}
    assert "**Not shown**: ref: not shown: no MUST requirement" in (out / "report.md").read_text()


_USER_TESTS = """
import pytest
from tlkv_conformance.checks import not_applicable


@pytest.mark.reqs("HASH-FNV")
def test_shows_fnv(testee):
    assert testee.adapter.block_hash(0, [1, 2]) == 0xA91AB0C1027B9366  # the spec's example


@pytest.mark.reqs("HASH-ZERO")
def test_cannot_show_the_zero_rule_today(testee):
    pytest.skip("the engine's hash service is down")


@pytest.mark.reqs("V2-SCALE")
def test_no_v2_here(testee):
    not_applicable("this engine writes no v2")
"""


@pytest.mark.parametrize(
    ("selection", "status", "named"),
    [
        ((), EXIT_NOT_SHOWN, "HASH-ZERO"),
        (("--reqs=HASH-FNV,V2-SCALE",), 0, ""),
        (("-k", "fnv or v2"), 0, ""),
        (("-k", "v2"), EXIT_NOT_SHOWN, NOTHING_SHOWN),
    ],
    ids=["all", "reqs", "k", "k-nothing"],
)
def test_a_skip_that_could_have_shown_a_must_fails_the_gate(
    scratch_cases: Path, tmp_path: Path, selection: tuple[str, ...], status: int, named: str
) -> None:
    tests = scratch_cases.parent / "test_user.py"
    tests.write_text(_USER_TESTS, encoding="utf-8")
    run, report, _ = _run(tmp_path, "--impl=ref", *selection, str(tests.relative_to(ROOT)))
    assert run.returncode == status, run.output[-3000:]
    assert report["not_shown"] == ({"ref": [named]} if named else {})
    assert "V2-SCALE" not in run.output.split("TLKV conformance")[-1]


def test_a_run_citing_no_requirement_owes_nothing(scratch_cases: Path, tmp_path: Path) -> None:
    """Tests that cite no requirement (the self-tests, in a checkout whose ini names --impl=ref)
    ask nothing of the format: the run keeps pytest's status instead of 6."""
    tests = scratch_cases.parent / "test_plain.py"
    tests.write_text("def test_plain():\n    assert 1 + 1 == 2\n", encoding="utf-8")
    run, report, _ = _run(tmp_path, "--impl=ref", str(tests.relative_to(ROOT)))
    assert run.returncode == 0, run.output[-3000:]
    assert report["not_shown"] == {}


def test_implementation_identity() -> None:
    assert parse_impl("ref").identity == parse_impl("py:tlkv_conformance.references.pyref").identity
    assert parse_impl("ref,name=pyref").identity == "pyref"
    assert parse_impl("grpc:127.0.0.1:5,name=pyref").identity == "pyref"
    assert parse_impl("ctypes:/a/../a/lib.so").identity == parse_impl("ctypes:/a/lib.so").identity
    key = tlkv_report.test_key
    assert key("cases/x.yaml::prefixes-3[ref]", "ref") == "cases/x.yaml::prefixes-3[*]"
    assert key("t.py::t[ref-kv.wire.v1/a]", "ref") == "t.py::t[*-kv.wire.v1/a]"
    assert key("t.py::t[prefs]", "ref") == "t.py::t[prefs]"
