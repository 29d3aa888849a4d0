"""Each reported phase of a test judged once, for the plugin's pytest_runtest_makereport: its
TestOutcome (tlkv_conformance.outcome: what the test is and showed, its diagnosis, the
known-failures list's decisions, the SHOULD level), and pytest's report told what it decided
(the one-line difference and probable cause at the top of a failure, the regression case of a
drawn example, the SHOULD-level note, JUnit properties, the outcome pytest counts).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from . import corpus, options, profiles
from .adapters import Adapter
from .checks import CaseFailure, is_not_applicable
from .diagnosis import Attribution, attribute
from .failure_view import failure_view
from .fuzzing import FuzzRecorder, case_file_text, regression_case, write_regression
from .items import CaseItem, display_path
from .known import (
    CITED_PASSED,
    COVERED,
    JUDGED_PHASES,
    STALE,
    FailedTest,
    covering_entries,
    listing_entries,
    unlisted_requirement_entries,
)
from .outcome import REPORT_ATTRIBUTE, TestIdentity, TestOutcome
from .report import headline, warning_note
from .runstate import KNOWN, TESTED, settings_of, user_case_dirs
from .testee import Testee

SHOULD_FAILURE_PROPERTY = "should_failure"


def judge_phase(item: pytest.Item, report: pytest.TestReport, call: pytest.CallInfo[None]) -> None:
    """The phase judged once: its TestOutcome, carried on the report in one attribute
    (REPORT_ATTRIBUTE), and the report told what it decided."""
    _tidy(item, report)
    outcome = _judge(item, report, call)
    _tell(item, report, call, outcome)
    setattr(report, REPORT_ATTRIBUTE, outcome)


def _tidy(item: pytest.Item, report: pytest.TestReport) -> None:
    """Hypothesis's words on shrinking as the run's budget has it; a skip at the test's file."""
    recorder = getattr(item, "funcargs", {}).get("fuzz_case")
    cut_short = isinstance(recorder, FuzzRecorder) and recorder.cut_short
    report.sections = profiles.bounded_shrink_note(
        report.sections, settings_of(item.config).fuzz_shrink_seconds, cut_short
    )
    # A skip points at the test's file, not at the harness line that raised it; with no line,
    # pytest's summary folds the file's skips of one reason into one line.
    if report.skipped and not hasattr(report, "wasxfail") and isinstance(report.longrepr, tuple):
        report.longrepr = (str(item.path), None, report.longrepr[2])


def _judge(
    item: pytest.Item, report: pytest.TestReport, call: pytest.CallInfo[None]
) -> TestOutcome:
    """The phase's outcome, made once: what the test is, what it showed, the blame and
    probable causes of a failed call (tlkv_conformance.diagnosis), and the known-failures
    list's decisions on it."""
    test = item.stash[TESTED]
    failed_call = report.failed and call.when == "call"
    failure = call.excinfo.value if call.excinfo is not None else None
    attribution = Attribution()
    if failed_call:
        attribution = attribute(getattr(failure, "evidence", None), test.reqs, _adapter_of(item))
    known = _apply_known_failures(item, report, call, test, attribution.blamed)
    return TestOutcome(
        test=test,
        when=call.when,
        outcome=report.outcome,
        wasxfail=hasattr(report, "wasxfail"),
        xfail_marked=item.get_closest_marker("xfail") is not None,
        strict=settings_of(item.config).strict,
        # the message alone, for the conformance report
        detail=_detail(report, call) if report.failed or report.skipped else "",
        blamed=attribution.blamed,
        causes=attribution.causes,
        symptom=attribution.symptom,
        not_applicable=report.skipped and failure is not None and is_not_applicable(failure),
        view=_failure_view(item, failure) if failed_call else None,
        known=known,
    )


def _adapter_of(item: pytest.Item) -> Adapter | None:
    """The way in a test ran against, which the diagnosis may probe again: a YAML case's, or a
    Python test's `testee` fixture's."""
    testee = getattr(item, "testee", None) or getattr(item, "funcargs", {}).get("testee")
    return testee.adapter if isinstance(testee, Testee) else None


def _tell(
    item: pytest.Item, report: pytest.TestReport, call: pytest.CallInfo[None], outcome: TestOutcome
) -> None:
    """What the outcome says, where a user sees it: at the top of a failed call, its one-line
    difference and probable cause (no harness traceback for a CaseFailure), the regression
    case of a drawn example, the SHOULD-level note; JUnit properties; the outcome pytest counts
    (a covered known failure is expected, a SHOULD-level warning passes)."""
    if outcome.failed and outcome.when == "call":
        _show_diagnosis(item, report, call, outcome)
        recorder = getattr(item, "funcargs", {}).get("fuzz_case")
        if isinstance(recorder, FuzzRecorder):
            failure = str(call.excinfo.value) if call.excinfo else ""
            _report_regression(item, report, recorder, failure, outcome.blamed)
    if outcome.should_failure:
        _note_should_failure(item, report, outcome)
    report.outcome = outcome.reported  # type: ignore[assignment]


def _apply_known_failures(
    item: pytest.Item,
    report: pytest.TestReport,
    call: pytest.CallInfo[None],
    test: TestIdentity,
    blamed: tuple[str, ...],
) -> tuple[tuple[str, str, str], ...]:
    """The known-failures list, after the fact (as the SHOULD level): a failure it covers
    (tlkv_conformance.known, coverage: on the requirements it is blamed on) is an expected
    failure; a passing test an entry lists is an XPASS, and a strict entry is then stale (the
    gate fails the run at its end, naming it). Its decisions, (entry, decision, test key) for
    the gate; the reason on the report (wasxfail)."""
    known = item.config.stash.get(KNOWN, [])
    if call.when not in JUDGED_PHASES:
        return ()
    failure = FailedTest.of(test, blamed)
    if report.failed:
        covering = covering_entries(known, failure)
        if covering:
            report.wasxfail = "known failure: " + "; ".join(
                f"{e.reason} ({e.shown()})" for e in covering
            )
        return tuple((e.source, COVERED, failure.key) for e in covering)
    if call.when != "call" or not report.passed or not known:
        return ()
    listing = listing_entries(known, failure.ids, test.impl)
    unlisted = unlisted_requirement_entries(known, test.reqs, test.impl)
    decisions = [(e.source, CITED_PASSED, failure.key) for e in unlisted]
    decisions += [(e.source, STALE, failure.key) for e in listing if e.strict]
    if listing:
        # XPASS: the run fails at its end, naming the stale entries (tlkv_conformance.gate); the
        # test itself passed, so its requirements do not fail in the report.
        report.wasxfail = "; ".join(
            f"{'stale' if e.strict else 'known'} failure {e.shown()}: {e.reason}" for e in listing
        )
    return tuple(decisions)


def _show_diagnosis(
    item: pytest.Item, report: pytest.TestReport, call: pytest.CallInfo[None], outcome: TestOutcome
) -> None:
    """A failed call's blame and probable cause as JUnit properties, and at the top of the
    failure, which for a CaseFailure starts with its one-line difference and shows no harness
    traceback."""
    # JUnit takes the properties of the teardown report, which copies the item's.
    properties = [("blamed", ",".join(outcome.blamed))]
    if outcome.causes:
        properties.append(("diagnosis", outcome.causes[0].id))
    item.user_properties.extend(properties)
    report.user_properties.extend(properties)
    failure = call.excinfo.value if call.excinfo is not None else None
    if not isinstance(failure, CaseFailure):
        return
    message = str(failure)
    attribution = Attribution(outcome.causes, outcome.blamed, outcome.symptom)
    top = "\n".join(filter(None, [headline(message), attribution.headline()]))
    if isinstance(report.longrepr, str):
        report.longrepr = f"{top}\n\n{report.longrepr}"
    else:
        path, line, _ = item.location
        report.longrepr = f"{top}\n\n{path}:{(line or 0) + 1}: {item.name}\n{message}"


def _failure_view(item: pytest.Item, failure: BaseException | None) -> dict[str, Any]:
    """The HTML report's view of a failure (tlkv_conformance.failure_view): a YAML case's
    text and line, or the Python test's line, and its evidence as bytes and an error grid."""
    evidence = getattr(failure, "evidence", None)
    if isinstance(item, CaseItem):
        origin = item.case.origin
        return failure_view(evidence, f"{display_path(origin.file)}:{origin.line}", origin.source)
    path, line, _ = item.location
    return failure_view(evidence, f"{path}:{(line or 0) + 1}")


def _detail(report: pytest.TestReport, call: pytest.CallInfo[None]) -> str:
    parts = [str(report.wasxfail)] if hasattr(report, "wasxfail") else []
    excinfo = call.excinfo
    if excinfo is not None and not isinstance(excinfo.value, pytest.skip.Exception):
        value = excinfo.value
        parts.append(str(value) if isinstance(value, CaseFailure) else excinfo.exconly())
    elif isinstance(report.longrepr, tuple):  # a skip: (path, line, "Skipped: reason")
        parts.append(str(report.longrepr[2]).removeprefix("Skipped: "))
    elif report.longrepr is not None and not parts:  # e.g. "[XPASS(strict)] reason"
        parts.append(str(report.longrepr))
    return "\n".join(parts)


def _note_should_failure(
    item: pytest.Item, report: pytest.TestReport, outcome: TestOutcome
) -> None:
    """A SHOULD requirement failing: said in the failure itself and in a JUnit property
    (unless --strict, the outcome makes it a warning: TestOutcome.warning)."""
    note = warning_note(outcome.test.reqs, outcome.strict)
    if isinstance(report.longrepr, str):
        report.longrepr = f"{report.longrepr}\n\n{note}"
    elif hasattr(report.longrepr, "addsection"):
        report.longrepr.addsection("SHOULD-level failure", note)
    # JUnit takes a test's properties from its teardown report, made after this one.
    item.user_properties.append((SHOULD_FAILURE_PROPERTY, note))


def _report_regression(
    item: pytest.Item,
    report: pytest.TestReport,
    recorder: FuzzRecorder,
    failure: str,
    blamed: tuple[str, ...],
) -> None:
    if recorder.last is None:
        return
    testee = item.funcargs.get("testee")  # type: ignore[attr-defined]
    label = testee.label if isinstance(testee, Testee) else "?"
    case = regression_case(recorder.last, item.nodeid, label, failure, blamed)
    text = case_file_text(case)
    if options.value(item.config, options.WRITE_REGRESSIONS):
        path = write_regression(regressions_dir(item.config), case)
        text = f"# written to {path}\n{text}"
    report.sections.append(("regression case (commit it to your cases folder)", text))


def regressions_dir(config: pytest.Config) -> Path:
    """Where --write-regressions writes: the checkout's cases/regressions/, or for an installed
    suite the first --cases folder's regressions/ (else ./tlkv-regressions/)."""
    if corpus.is_checkout():
        return corpus.cases_dir() / "regressions"
    folders = user_case_dirs(config)
    if folders:
        return folders[0] / "regressions"
    return config.invocation_params.dir / "tlkv-regressions"
