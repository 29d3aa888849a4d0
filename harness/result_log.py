"""What the plugin records of a run: every phase of every test as plain values (`Phase`), merged
into one result per test (`TestResult`) by a `ResultLog`, so the same code serves a run in one
process and a run spread over xdist workers (whose reports reach the controller serialised).
The conformance report (report.py) is built from it at the end of the run (docs/report.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .diagnosis import Cause

# A test's outcome, from its phases; pytest's words, plus "error" for a failed setup/teardown.
OUTCOMES = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")
ROLES = ("impl", "producer", "consumer")  # which --impl a test ran against, and as what
MAX_MESSAGE_LINES = 60
PASSED_LIKE = frozenset({"passed", "xpassed"})
FAILED_LIKE = frozenset({"failed", "error"})


# -- the SHOULD / MUST gate -------------------------------------------------------------------


def is_should_failure(level: str | None, when: str, xfail_marked: bool) -> bool:
    """Whether a failed phase is a SHOULD requirement failing: the test's own check (its call)
    failed at SHOULD, and the test is not a listed known failure (whose surprise pass is the
    list's failure, not the requirement's)."""
    return when == "call" and level == "SHOULD" and not xfail_marked


def warning_note(reqs: Sequence[str], strict: bool) -> str:
    """What a SHOULD-level failure's report says about it (terminal, JUnit)."""
    ids = ", ".join(reqs) or "none"
    if strict:
        return f"SHOULD-level failure ({ids}): it fails the run because of --strict"
    return (
        f"SHOULD-level failure ({ids}): a warning; the run's exit status stays 0 unless "
        "--strict is given"
    )


# -- what the plugin records --------------------------------------------------------------------


@dataclass(frozen=True)
class Phase:
    """One phase (setup, call, teardown) of one test, as plain values."""

    nodeid: str
    when: str
    outcome: str  # pytest's: passed, failed, skipped
    properties: tuple[tuple[str, str], ...]  # the test's user properties
    wasxfail: bool = False  # an expected failure that failed (skipped) or passed (xpassed)
    xfail_marked: bool = False  # the test carries an xfail marker (a known failure)
    detail: str = ""  # the failure message or the skip reason
    # A SHOULD-level failure the plugin reported as a warning (pytest counts it as passed, so
    # that it neither stops -x nor fails the run).
    warning: bool = False
    blamed: tuple[str, ...] = ()  # a failure's requirements whose own bytes or fields differ
    causes: tuple[Cause, ...] = ()  # its probable causes (tlkv_conformance.diagnosis)
    symptom: str = ""  # what it shows when its evidence cannot say why (a valid envelope refused)
    # a skip saying the test means nothing for this implementation (checks.not_applicable)
    not_applicable: bool = False
    view: dict[str, Any] | None = None  # what the HTML report shows of it (failure_view)


@dataclass
class TestResult:
    """One test's outcome, its phases merged."""

    __test__ = False  # not a test class, whatever its name suggests to pytest

    nodeid: str
    roles: dict[str, str]  # impl / producer / consumer -> --impl label
    reqs: tuple[str, ...]
    level: str | None
    key: str = ""  # the test's corpus id (cases/x.yaml::case), the same wherever it ran
    blamed: tuple[str, ...] = ()  # the requirements whose own bytes or fields differ
    causes: tuple[Cause, ...] = ()  # probable causes its own evidence shows
    symptom: str = ""
    consequence: str = ""  # the run's cause (id) that explains this failure, when it has none
    outcome: str = ""  # until a phase says (OUTCOMES)
    gating: bool = False  # a failure that fails the run (MUST, --strict, error, strict XPASS)
    message: str = ""
    not_applicable: bool = False  # skipped as meaning nothing for its implementation
    view: dict[str, Any] | None = None  # the failure's view (failure_view), for report.html

    @property
    def warning(self) -> bool:
        return self.outcome in FAILED_LIKE and not self.gating


KEY_PROPERTY = "tlkv_id"  # the user property holding a test's corpus id


def _properties(
    pairs: Iterable[tuple[str, str]],
) -> tuple[dict[str, str], tuple[str, ...], str, str]:
    roles: dict[str, str] = {}
    reqs: list[str] = []
    level = key = ""
    for name, value in pairs:
        if name == "requirement":
            reqs.append(str(value))
        elif name == "level":
            level = str(value)
        elif name == KEY_PROPERTY:
            key = str(value)
        elif name in ROLES:
            roles[name] = str(value)
    return roles, tuple(reqs), level, key


def _trim(text: str) -> str:
    lines = text.strip("\n").splitlines()
    if len(lines) > MAX_MESSAGE_LINES:
        lines = [*lines[:MAX_MESSAGE_LINES], f"... ({len(lines) - MAX_MESSAGE_LINES} more lines)"]
    return "\n".join(lines)


class ResultLog:
    """Every test's phases as they are reported, merged into one result per test."""

    def __init__(self, strict: bool) -> None:
        self.strict = strict
        self.warnings = 0  # failed call phases that are SHOULD-level warnings
        self.collection_errors: list[str] = []
        self._results: dict[str, TestResult] = {}

    def add(self, phase: Phase) -> None:
        result = self._results.get(phase.nodeid)
        if result is None:
            roles, reqs, level, key = _properties(phase.properties)
            result = TestResult(phase.nodeid, roles, reqs, level or None, key or phase.nodeid)
            self._results[phase.nodeid] = result
        if phase.outcome == "failed" or phase.warning:
            self._failed(result, phase)
        elif phase.outcome == "skipped" and phase.when != "teardown":
            result.outcome = "xfailed" if phase.wasxfail else "skipped"
            result.message = _trim(phase.detail)
            result.not_applicable = phase.not_applicable and not phase.wasxfail
        elif phase.when == "call":
            result.outcome = "xpassed" if phase.wasxfail else "passed"

    def _failed(self, result: TestResult, phase: Phase) -> None:
        message = _trim(phase.detail)
        result.blamed = phase.blamed or result.blamed
        result.causes = phase.causes or result.causes
        result.symptom = phase.symptom or result.symptom
        result.view = phase.view or result.view
        if phase.when == "call":
            self.warnings += phase.warning
            result.outcome, result.gating, result.message = "failed", not phase.warning, message
            return
        # A setup or teardown error is the run's problem whatever the level: it always gates.
        if result.outcome not in FAILED_LIKE:
            result.outcome = "error"
        result.gating = True
        prefix = f"{result.message}\n{phase.when}: " if result.message else f"{phase.when}: "
        result.message = prefix + message

    def add_collection_error(self, nodeid: str, detail: str) -> None:
        self.collection_errors.append(f"{nodeid}: {_trim(detail)}" if nodeid else _trim(detail))

    def results(self) -> list[TestResult]:
        return [r for r in self._results.values() if r.outcome]


def headline(message: str) -> str:
    """The line of a failure message that says what differs: the first, with the one after it
    when that is an indented detail (a value diff's first differing element)."""
    lines = [line for line in message.splitlines() if line.strip()]
    if not lines:
        return "(no message)"
    first = lines[0]
    if len(lines) > 1 and lines[1].startswith("  "):
        return f"{first} {lines[1].strip()}"
    return first
