"""What the plugin records of a run: every phase of every test as the plugin judged it (a
`TestOutcome`, `tlkv_conformance.outcome`), merged into one result per test (`TestResult`) by a
`ResultLog`, so the same code serves a run in one process and a run spread over xdist workers
(whose reports reach the controller serialised).
The conformance report (`tlkv_conformance.report`) is built from it at the end of the run
(docs/report.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .diagnosis import Cause
from .outcome import TestOutcome

# A test's outcome, from its phases; pytest's words, plus "error" for a failed setup/teardown.
OUTCOMES = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")
MAX_MESSAGE_LINES = 60
PASSED_LIKE = frozenset({"passed", "xpassed"})
FAILED_LIKE = frozenset({"failed", "error"})


# -- the SHOULD level's words -------------------------------------------------------------


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

    def add(self, phase: TestOutcome) -> None:
        result = self._results.get(phase.test.nodeid)
        if result is None:
            test = phase.test
            roles = dict(test.roles)
            result = TestResult(test.nodeid, roles, test.reqs, test.level or None, test.key)
            self._results[test.nodeid] = result
        reported = phase.reported
        if reported == "failed" or phase.warning:
            self._failed(result, phase)
        elif reported == "skipped" and phase.when != "teardown":
            result.outcome = "xfailed" if phase.wasxfail else "skipped"
            result.message = _trim(phase.detail)
            result.not_applicable = phase.not_applicable and not phase.wasxfail
        elif phase.when == "call":
            result.outcome = "xpassed" if phase.wasxfail else "passed"

    def _failed(self, result: TestResult, phase: TestOutcome) -> None:
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
