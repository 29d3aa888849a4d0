"""The conformance report: each requirement's verdict per implementation, the cross-
implementation matrix, and the gate (docs/report.md).

The plugin feeds a `ResultLog` every phase of every test as plain values (`Phase`), so the same
code serves a run in one process and a run spread over xdist workers (whose reports reach the
controller serialised). At the end it builds a `Conformance` and renders it: a compact terminal
summary, Markdown and JSON.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .diagnosis import (
    MAX_FINDINGS,
    Attribution,
    Cause,
    Finding,
    consequence_of,
    findings,
    settle,
)
from .requirements import Requirement, requirements

REPORT_FORMAT = "tlkv-conformance-report"
REPORT_FORMAT_VERSION = 3

# A test's outcome, from its phases; pytest's words, plus "error" for a failed setup/teardown.
OUTCOMES = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")
# A requirement's verdict for one implementation (or a matrix cell), in order of precedence.
VERDICTS = ("failed", "affected", "passed", "xfail", "skipped", "not run")
ROLES = ("impl", "producer", "consumer")  # which --impl a test ran against, and as what

# What not_shown() gives an implementation for which no MUST requirement was shown at all.
NOTHING_SHOWN = "no MUST requirement"
MAX_MESSAGE_LINES = 60
MAX_TERMINAL_FAILURES = 10
SHORT_LABEL = 16  # longer --impl labels are numbered in terminal tables
PASSED_LIKE = frozenset({"passed", "xpassed"})
FAILED_LIKE = frozenset({"failed", "error"})


# -- the SHOULD / MUST gate -------------------------------------------------------------------


def is_should_failure(level: str | None, when: str, xfail_marked: bool) -> bool:
    """Whether a failed phase is a SHOULD requirement failing: the test's own check (its call)
    failed at SHOULD, and the test is not a listed known failure (whose surprise pass is the
    list's failure, not the requirement's)."""
    return when == "call" and level == "SHOULD" and not xfail_marked


def is_warning(level: str | None, when: str, xfail_marked: bool, strict: bool) -> bool:
    """Whether a failed phase is a warning rather than a failure of the run: a SHOULD
    requirement failing in a run that is not --strict."""
    return is_should_failure(level, when, xfail_marked) and not strict


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

    def as_json(self) -> dict[str, Any]:
        return {
            "nodeid": self.nodeid,
            "id": self.key,
            **self.roles,
            "requirements": list(self.reqs),
            "blamed": list(self.blamed),
            "diagnosis": [cause.as_json() for cause in self.causes],
            "consequence_of": self.consequence or None,
            "level": self.level,
            "outcome": self.outcome,
            "gating": self.gating,
            "message": self.message,
            "view": self.view,
        }


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


# -- the summary ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Impl:
    """An implementation under test, as the report names it: its --impl label, which
    implementation it is (for a library: its file name, size and sha256), what it says of
    itself."""

    label: str
    identity: str
    description: str
    fingerprint: str = ""


@dataclass(frozen=True)
class RunInfo:
    """What makes a run repeatable and its report trustworthy: which run, whether it finished,
    and everything that chose its tests and examples."""

    run_id: str = ""
    complete: bool = True
    incomplete_reason: str = ""  # why not, when it did not finish
    started: str = ""
    finished: str = ""
    suite_version: str = ""
    settings: dict[str, Any] = field(default_factory=dict)  # options, seed, profile, versions

    def as_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "complete": self.complete,
            "incomplete_reason": self.incomplete_reason or None,
            "started": self.started,
            "finished": self.finished,
            "suite_version": self.suite_version,
            "settings": self.settings,
        }


@dataclass
class Cell:
    """The tests of one requirement for one implementation (or of one matrix pair)."""

    counts: Counter[str] = field(default_factory=Counter)
    failures: list[TestResult] = field(default_factory=list)
    # failed tests citing this requirement whose differences lie elsewhere (blamed on others)
    affected: list[TestResult] = field(default_factory=list)
    # skipped tests that could have shown it (not skipped as not applicable)
    unshown: list[TestResult] = field(default_factory=list)

    def add(self, result: TestResult) -> None:
        self.counts[result.outcome] += 1
        if result.outcome in FAILED_LIKE:
            self.failures.append(result)
        if result.outcome == "skipped" and not result.not_applicable:
            self.unshown.append(result)

    def affect(self, result: TestResult) -> None:
        self.affected.append(result)

    @property
    def verdict(self) -> str:
        """failed if any test failed for it, else affected if tests citing it failed for
        another requirement, else passed if any passed, else xfail, skipped, not run."""
        if any(self.counts[o] for o in FAILED_LIKE):
            return "failed"
        if self.affected:
            return "affected"
        if any(self.counts[o] for o in PASSED_LIKE):
            return "passed"
        if self.counts["xfailed"]:
            return "xfail"
        return "skipped" if self.counts["skipped"] else "not run"

    @property
    def gating(self) -> bool:
        return any(f.gating for f in self.failures)

    @property
    def not_shown(self) -> bool:
        """It applies (a test that could show it was skipped for another reason than not
        applying) and no test showed it: nothing passed, failed, or confirmed a known failure."""
        return self.verdict == "skipped" and bool(self.unshown)

    @property
    def shown(self) -> str:
        """The verdict in a table: a SHOULD failure that does not fail the run is a warning."""
        if self.verdict == "failed":
            return "FAIL" if self.gating else "warn"
        shown = {"passed": "pass", "affected": "affected", "xfail": "xfail", "skipped": "skip"}
        return shown.get(self.verdict, "-")

    def as_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "gating": self.gating,
            "tests": {o: self.counts[o] for o in OUTCOMES if self.counts[o]},
            "failures": [{"test": f.nodeid, "message": f.message} for f in self.failures],
            "affected_by": [{"test": f.nodeid, "blamed": list(f.blamed)} for f in self.affected],
        }


@dataclass(frozen=True)
class SameImplementation:
    """--impl values that are one implementation (docs/report.md), and where they disagree."""

    identity: str
    labels: tuple[str, ...]
    compared: int  # tests (and matrix pairs among them) that two or more of them ran
    disagreements: tuple[tuple[str, dict[str, str]], ...]  # test key, label -> outcome
    matrix_failures: tuple[tuple[str, str], ...]  # (producer, consumer) pairs that failed


def test_key(nodeid: str, label: str) -> str:
    """The test id with the implementation's own id replaced by `*`, so that one test run
    against several implementations has one key. Only a whole id inside the brackets is
    replaced: a label such as `ref` also occurs inside names such as `prefixes`."""
    base, bracket, rest = nodeid.partition("[")
    if not bracket or not rest.endswith("]"):
        return nodeid
    padded, whole = f"-{rest[:-1]}-", f"-{label}-"  # parameter ids are joined by "-"
    if whole not in padded:
        return nodeid
    return f"{base}[{padded.replace(whole, '-*-', 1)[1:-1]}]"


def _counted_reqs(result: TestResult, table: dict[str, Requirement]) -> tuple[str, ...]:
    # A SHOULD-level case that also cites MUST requirements demands a project decision on top
    # of them (e.g. rules-before-limits-*): its failure is the decision's, not the MUST ones'.
    if result.outcome in FAILED_LIKE and result.level == "SHOULD":
        should = tuple(r for r in result.reqs if r in table and not table[r].is_must)
        return should or result.reqs
    return result.reqs


def _diagnose_run(results: Sequence[TestResult]) -> list[Finding]:
    """The run's probable causes; a failure with no cause of its own whose symptom one of them
    explains becomes its consequence, blamed on the cause's requirements."""
    failed = [r for r in results if r.outcome in FAILED_LIKE]
    attributions = settle({r.nodeid: Attribution(r.causes, r.blamed, r.symptom) for r in failed})
    found = findings(attributions.items())
    for result in failed:
        attribution = attributions[result.nodeid]
        result.causes, result.blamed = attribution.causes, attribution.blamed
        cause = consequence_of(attribution, found)
        if cause is not None:
            result.consequence, result.blamed = cause.id, cause.reqs
    return found


@dataclass
class Conformance:
    """Everything the report says, built once at the end of the run."""

    impls: list[Impl]
    results: list[TestResult]
    strict: bool
    exit_status: int
    run: RunInfo = field(default_factory=RunInfo)
    collection_errors: list[str] = field(default_factory=list)
    requirement_cells: dict[str, dict[str, Cell]] = field(default_factory=dict)
    matrix: dict[tuple[str, str], Cell] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)  # the run's probable causes
    same: list[SameImplementation] = field(default_factory=list)

    @classmethod
    def build(
        cls,
        impls: Sequence[Impl],
        log: ResultLog,
        exit_status: int,
        run: RunInfo | None = None,
    ) -> Conformance:
        table = requirements()
        labels = [i.label for i in impls]
        results = log.results()
        cells = {rid: {label: Cell() for label in labels} for rid in table}
        matrix = {(p, c): Cell() for p in labels for c in labels} if len(labels) > 1 else {}
        found = _diagnose_run(results)
        for result in results:
            impl = result.roles.get("impl")
            if impl in labels:
                counted = _counted_reqs(result, table)
                # A failure counts against the requirements it is blamed on; the others it
                # cites are affected, not failed (docs/report.md, "Diagnosis").
                blamed = result.blamed if result.outcome in FAILED_LIKE else ()
                for rid in blamed or counted:
                    if rid in cells:
                        cells[rid][impl].add(result)
                for rid in counted:
                    if blamed and rid not in blamed and rid in cells:
                        cells[rid][impl].affect(result)
            pair = (result.roles.get("producer", ""), result.roles.get("consumer", ""))
            if pair in matrix:
                matrix[pair].add(result)
        conformance = cls(
            list(impls),
            results,
            log.strict,
            exit_status,
            run or RunInfo(),
            list(log.collection_errors),
            cells,
            matrix,
            found,
        )
        conformance.same = conformance._same_implementations()
        return conformance

    # -- derived views ------------------------------------------------------------------------

    @property
    def labels(self) -> list[str]:
        return [i.label for i in self.impls]

    @property
    def conformance_tests(self) -> list[TestResult]:
        """The tests that ran against an implementation or cite a requirement."""
        return [r for r in self.results if r.roles or r.reqs]

    @property
    def gate(self) -> str:
        """pass only for a complete run with exit status 0."""
        return "pass" if self.exit_status == 0 and self.run.complete else "fail"

    @property
    def failures(self) -> list[TestResult]:
        """Failed tests, those that fail the run first."""
        failed = [r for r in self.results if r.outcome in FAILED_LIKE]
        return sorted(failed, key=lambda r: not r.gating)

    def impl_results(self, label: str) -> list[TestResult]:
        return [r for r in self.results if r.roles.get("impl") == label]

    def impl_gate(self, label: str) -> str:
        results = self.impl_results(label)
        if any(r.gating and r.outcome in FAILED_LIKE for r in results):
            return "FAIL"
        if not self.run.complete:
            return "INCOMPLETE"
        if label in self.not_shown():
            return "NOT SHOWN"
        warnings = sum(r.warning for r in results)
        return f"PASS ({warnings} SHOULD warning{'s' * (warnings != 1)})" if warnings else "PASS"

    def _asked_must(self) -> list[str]:
        """The MUST requirements this run was asked to show: all, or those --reqs names, less
        those --skip-reqs names."""
        asked = set(self.run.settings.get("reqs") or ())
        skipped = set(self.run.settings.get("skip_reqs") or ())
        return [
            rid
            for rid, requirement in requirements().items()
            if requirement.is_must and (not asked or rid in asked) and rid not in skipped
        ]

    def not_shown(self) -> dict[str, list[str]]:
        """Per implementation, what keeps a run without failures from showing conformance
        (docs/report.md, "What a run must show"): the asked MUST requirements that apply to it
        and that no test showed, or, when no MUST requirement was shown for it at all (every
        test skipped as not applicable, or only SHOULD-level ones selected), ["no MUST
        requirement"]."""
        if not any(result.reqs for result in self.results):
            # No test of the run cites a requirement (the suite's own tests in its checkout,
            # whose ini names an --impl): nothing was asked of the format, so nothing is owed.
            return {}
        asked = self._asked_must()
        missing: dict[str, list[str]] = {}
        for label in self.labels:
            cells = [self.requirement_cells[rid][label] for rid in asked]
            unshown = [rid for rid, cell in zip(asked, cells, strict=True) if cell.not_shown]
            shown = any(cell.verdict in ("passed", "failed", "affected", "xfail") for cell in cells)
            crossed = any(
                label in (result.roles.get("producer"), result.roles.get("consumer"))
                and result.outcome in PASSED_LIKE
                for result in self.results
            )
            if unshown:
                missing[label] = unshown
            elif not shown and not crossed:
                missing[label] = [NOTHING_SHOWN]
        return missing

    def _not_shown_lines(self) -> list[str]:
        return [
            f"{label}: not shown: "
            + (
                "no MUST requirement (every test was skipped as not applicable, or none was "
                "selected)"
                if ids == [NOTHING_SHOWN]
                else f"{', '.join(ids)} (applicable, but every test that could show "
                f"{'it' if len(ids) == 1 else 'them'} was skipped)"
            )
            for label, ids in self.not_shown().items()
        ]

    def requirement_counts(self, label: str) -> dict[str, int]:
        """How many requirements got each verdict for `label`; failures split by gating."""
        counts: Counter[str] = Counter()
        for rid, requirement in requirements().items():
            cell = self.requirement_cells[rid][label]
            if cell.verdict != "failed":
                counts[cell.verdict] += 1
            elif cell.gating:
                counts[f"{requirement.level} failed"] += 1
            else:
                counts["SHOULD warning"] += 1
        return dict(counts)

    def failing_requirements(self) -> list[tuple[Requirement, dict[str, Cell]]]:
        """Requirements that failed for some implementation: those failing the run (MUST
        first) before warnings."""
        rows = []
        for rid, requirement in requirements().items():
            row = self.requirement_cells[rid]
            if any(cell.verdict == "failed" for cell in row.values()):
                rows.append((requirement, row))

        def order(item: tuple[Requirement, dict[str, Cell]]) -> tuple[bool, bool]:
            requirement, row = item
            return (not any(c.gating for c in row.values()), not requirement.is_must)

        return sorted(rows, key=order)

    def _same_implementations(self) -> list[SameImplementation]:
        groups: dict[str, list[str]] = {}
        for impl in self.impls:
            groups.setdefault(impl.identity, []).append(impl.label)
        found = []
        for identity, labels in groups.items():
            if len(labels) < 2:
                continue
            by_key: dict[str, dict[str, str]] = {}
            for result in self.results:
                impl = result.roles.get("impl")
                if impl in labels:
                    by_key.setdefault(test_key(result.nodeid, impl), {})[impl] = result.outcome
            compared, disagreements = 0, []
            for key, outcomes in sorted(by_key.items()):
                decided = {
                    label: "pass" if o in PASSED_LIKE else "fail"
                    for label, o in outcomes.items()
                    if o in PASSED_LIKE | FAILED_LIKE
                }
                if len(decided) < 2:
                    continue  # a way in that cannot observe it skipped: nothing to compare
                compared += 1
                if len(set(decided.values())) > 1:
                    disagreements.append((key, outcomes))
            between = [
                (pair, cell)
                for pair, cell in self.matrix.items()
                if pair[0] in labels and pair[1] in labels and pair[0] != pair[1]
            ]
            compared += sum(cell.verdict in ("passed", "failed") for _, cell in between)
            matrix_failures = tuple(pair for pair, cell in between if cell.verdict == "failed")
            found.append(
                SameImplementation(
                    identity, tuple(labels), compared, tuple(disagreements), matrix_failures
                )
            )
        return found

    # -- JSON -----------------------------------------------------------------------------------

    def as_json(self) -> dict[str, Any]:
        outcome_counts = Counter(r.outcome for r in self.results)
        return {
            "format": REPORT_FORMAT,
            "format_version": REPORT_FORMAT_VERSION,
            **self.run.as_json(),
            "gate": self.gate,
            "exit_status": self.exit_status,
            "strict": self.strict,
            "not_shown": self.not_shown() if self.run.complete else {},
            "summary": {
                "tests": {o: outcome_counts[o] for o in OUTCOMES if outcome_counts[o]},
                "failures": sum(r.gating for r in self.failures),
                "warnings": sum(r.warning for r in self.failures),
                "collection_errors": len(self.collection_errors),
            },
            "collection_errors": self.collection_errors,
            "start_here": [
                {
                    **finding.cause.as_json(),
                    "shown_by": finding.shown_by,
                    "consequences": finding.explains,
                }
                for finding in self.findings[:MAX_FINDINGS]
            ],
            "implementations": [
                {
                    "label": impl.label,
                    "identity": impl.identity,
                    "fingerprint": impl.fingerprint,
                    "description": impl.description,
                    "gate": self.impl_gate(impl.label).split(" ")[0].lower(),
                    "requirements": self.requirement_counts(impl.label),
                    "tests": dict(Counter(r.outcome for r in self.impl_results(impl.label))),
                }
                for impl in self.impls
            ],
            "requirements": [
                {
                    "id": rid,
                    "level": requirement.level,
                    "source": requirement.source,
                    "section": requirement.section,
                    "text": requirement.text,
                    "results": {
                        label: cell.as_json() for label, cell in self.requirement_cells[rid].items()
                    },
                }
                for rid, requirement in requirements().items()
            ],
            "matrix": None
            if not self.matrix
            else {
                "implementations": self.labels,
                "cells": [
                    {
                        "producer": producer,
                        "consumer": consumer,
                        "same_implementation": self._identity(producer) == self._identity(consumer),
                        **cell.as_json(),
                    }
                    for (producer, consumer), cell in self.matrix.items()
                ],
            },
            "same_implementation": [
                {
                    "identity": group.identity,
                    "implementations": list(group.labels),
                    "tests_compared": group.compared,
                    "disagreements": [
                        {"test": key, "outcomes": outcomes} for key, outcomes in group.disagreements
                    ],
                    "matrix_failures": [
                        {"producer": p, "consumer": c} for p, c in group.matrix_failures
                    ],
                }
                for group in self.same
            ],
            "tests": [r.as_json() for r in self.results],
        }

    def _identity(self, label: str) -> str:
        return next(i.identity for i in self.impls if i.label == label)

    # -- the terminal ---------------------------------------------------------------------------

    def terminal_lines(self) -> list[str]:
        """The compact summary: one line per implementation, then only what failed."""
        lines = [self._impl_line(impl) for impl in self.impls]
        lines += self._start_here_lines()
        columns = self._columns()
        if any(len(label) > SHORT_LABEL for label in self.labels):
            lines += [f"  [{n}] = {label}" for n, label in enumerate(self.labels, 1)]
        failing = self.failing_requirements()
        if failing:
            lines.append("failing requirements (those failing the run first):")
            rows = [["requirement", "level", *columns]]
            rows += [
                [req.id, req.level, *(row[label].shown for label in self.labels)]
                for req, row in failing
            ]
            lines += _table(rows)
        if self.failures:  # matrix tests fail no implementation's requirement: list them too
            lines.append("failed tests:")
            shown = self.failures[:MAX_TERMINAL_FAILURES]
            for result in shown:
                lines.append(f"  {self._failure_line(result)}")
            if len(self.failures) > len(shown):
                lines.append(
                    f"  ... and {len(self.failures) - len(shown)} more (above, and in the "
                    "conformance report)"
                )
        if self.collection_errors:
            lines.append(f"{len(self.collection_errors)} collection errors (above)")
        if self.matrix:
            lines.append("cross-implementation matrix (rows export, columns import):")
            rows = [["", *columns]]
            for producer, column in zip(self.labels, columns, strict=True):
                rows.append([column, *(self.matrix[producer, c].shown for c in self.labels)])
            lines += _table(rows)
        lines += [self._same_line(group) for group in self.same]
        return lines

    def _start_here_lines(self) -> list[str]:
        if not self.findings:
            return []
        lines = ["start here: probable causes, the most failed tests first"]
        for number, finding in enumerate(self.findings[:MAX_FINDINGS], 1):
            lines.append(f"  {number}. {self._finding_line(finding)}")
            if finding.cause.evidence:
                lines.append(f"     evidence: {finding.cause.evidence}")
        return lines

    @staticmethod
    def _finding_line(finding: Finding) -> str:
        cause = finding.cause
        tests = f"{finding.tests} failed test{'s' * (finding.tests != 1)}"
        also = f" ({len(finding.explains)} of them as a consequence)" if finding.explains else ""
        example = (finding.shown_by or finding.explains)[0]
        return f"{cause.title}{cause.cited()}: {tests}{also}, e.g. {example}"

    def _columns(self) -> list[str]:
        if any(len(label) > SHORT_LABEL for label in self.labels):
            return [f"[{n}]" for n in range(1, len(self.labels) + 1)]
        return self.labels

    def _requirement_summary(self, label: str) -> str:
        counts = self.requirement_counts(label)
        order = ("MUST failed", "SHOULD failed", "SHOULD warning", *VERDICTS[1:])
        return ", ".join(f"{counts[k]} {k}" for k in order if counts.get(k))

    def _impl_line(self, impl: Impl) -> str:
        reqs = self._requirement_summary(impl.label)
        tests = Counter(r.outcome for r in self.impl_results(impl.label))
        tested = ", ".join(f"{tests[o]} {o}" for o in OUTCOMES if tests[o]) or "none"
        return f"{impl.label}: {self.impl_gate(impl.label)}; requirements: {reqs}; tests: {tested}"

    def _failure_line(self, result: TestResult) -> str:
        mark = "FAIL" if result.gating else "warn"
        who = result.roles.get("impl") or " -> ".join(
            result.roles[r] for r in ("producer", "consumer") if r in result.roles
        )
        cited = f"{result.level}: {', '.join(result.reqs)}" if result.reqs else "no requirement"
        blame = self._blame(result)
        return f"{mark} {result.nodeid} ({who}; {cited}{blame}): {headline(result.message)}"

    @staticmethod
    def _blame(result: TestResult) -> str:
        if result.consequence:
            return f"; a consequence of {result.consequence}"
        if result.causes:
            return f"; probable cause {result.causes[0].id}"
        if result.blamed and set(result.blamed) != set(result.reqs):
            return f"; blamed on {', '.join(result.blamed)}"
        return ""

    def _same_line(self, group: SameImplementation) -> str:
        who = f"same implementation {group.identity!r}: {', '.join(group.labels)}"
        if not group.disagreements and not group.matrix_failures:
            return f"{who} agree on all {group.compared} tests that more than one of them ran"
        parts = [
            f"{key} ({', '.join(f'{label} {o}' for label, o in outcomes.items())})"
            for key, outcomes in group.disagreements[:3]
        ]
        if len(group.disagreements) > 3:
            parts.append(f"... and {len(group.disagreements) - 3} more")
        parts += [f"matrix {p} -> {c} failed" for p, c in group.matrix_failures]
        return f"{who} DISAGREE: " + "; ".join(parts)

    def closing_lines(self, paths: Sequence[Path]) -> list[str]:
        failures = sum(r.gating for r in self.failures)
        lines = [
            f"gate: {self.gate.upper()} (exit status {self.exit_status})"
            + (f": {failures} failure{'s' * (failures != 1)} fail the run" if failures else "")
        ]
        if not self.run.complete:
            lines.append(f"the run is INCOMPLETE ({self.run.incomplete_reason}): no verdict")
        elif not failures:
            lines += self._not_shown_lines()
        warnings = sum(r.warning for r in self.failures)
        if warnings:
            them = f"{warnings} SHOULD-level failure{'s' * (warnings != 1)}"
            what = "a warning" if warnings == 1 else "warnings"
            if self.exit_status == 0 and self.run.complete:
                lines.append(
                    f"{them}: {what}, not a failed gate; exit status 0 (--strict makes "
                    "SHOULD-level failures fail the run)"
                )
            elif failures:
                lines.append(f"{them}: {what}; the run fails for its other failures")
            else:
                lines.append(f"{them}: {what}")
        if paths:
            lines.append("conformance report: " + ", ".join(str(p) for p in paths))
        return lines

    # -- Markdown ------------------------------------------------------------------------------

    def markdown(self) -> str:
        out = ["# TLKV conformance report", ""]
        failures = sum(r.gating for r in self.failures)
        warnings = sum(r.warning for r in self.failures)
        out.append(
            f"Gate: **{self.gate.upper()}** (exit status {self.exit_status}): {failures} "
            f"failure{'s' * (failures != 1)} failing the run, {warnings} SHOULD-level "
            f"warning{'s' * (warnings != 1)}"
            + (" (--strict: SHOULD failures fail the run)." if self.strict else ".")
        )
        if not self.run.complete:
            out.append(
                f"**The run is INCOMPLETE** ({self.run.incomplete_reason}): this report is "
                "partial and no implementation passed."
            )
        elif not failures:
            out += [f"**Not shown**: {line}" for line in self._not_shown_lines()]
        out.append(f"Run `{self.run.run_id}`, suite {self.run.suite_version}, {self.run.started}.")
        if self.collection_errors:
            out.append(f"{len(self.collection_errors)} collection errors.")
        out += ["", "## Implementations", ""]
        rows = [["implementation", "identity", "pool", "gate", "requirements", "tests"]]
        for impl in self.impls:
            tests = Counter(r.outcome for r in self.impl_results(impl.label))
            rows.append(
                [
                    f"`{impl.label}`",
                    f"`{impl.fingerprint or impl.identity}`",
                    impl.description,
                    self.impl_gate(impl.label),
                    self._requirement_summary(impl.label),
                    ", ".join(f"{tests[o]} {o}" for o in OUTCOMES if tests[o]),
                ]
            )
        out += _markdown_table(rows)
        if self.findings:
            out += ["", "## Start here", "", "Probable causes, the most failed tests first:", ""]
            for number, finding in enumerate(self.findings[:MAX_FINDINGS], 1):
                out.append(f"{number}. {self._finding_line(finding)}")
                if finding.cause.evidence:
                    out.append(f"   Evidence: {finding.cause.evidence}")
        failing = self.failing_requirements()
        if failing:
            out += ["", "## Failing requirements", ""]
            header = ["requirement", "level", *(f"`{label}`" for label in self.labels)]
            out += _markdown_table(
                [header]
                + [
                    [req.id, req.level, *(row[label].shown for label in self.labels)]
                    for req, row in failing
                ]
            )
        if self.failures:
            out += ["", "## Failed tests", ""]
            for result in self.failures:
                out += [f"### `{result.nodeid}`", "", self._failure_facts(result), ""]
                out += ["```text", result.message or "(no message)", "```", ""]
        if self.matrix:
            out += ["", "## Cross-implementation matrix", ""]
            out.append("Rows export (producer), columns import (consumer).")
            out.append("")
            rows = [["producer \\ consumer", *(f"`{c}`" for c in self.labels)]]
            for producer in self.labels:
                rows.append(
                    [f"`{producer}`", *(self.matrix[producer, c].shown for c in self.labels)]
                )
            out += _markdown_table(rows)
        if self.same:
            out += ["", "## One implementation, several ways in", ""]
            for group in self.same:
                out.append(f"- {self._same_line(group)}")
                out += [
                    f"  - `{key}`: {', '.join(f'{label} {o}' for label, o in outcomes.items())}"
                    for key, outcomes in group.disagreements
                ]
        out += ["", "## All requirements", ""]
        rows = [["requirement", "level", *(f"`{label}`" for label in self.labels), "text"]]
        for rid, requirement in requirements().items():
            row = self.requirement_cells[rid]
            rows.append(
                [
                    rid,
                    requirement.level,
                    *(row[label].shown for label in self.labels),
                    requirement.text,
                ]
            )
        out += _markdown_table(rows)
        out += [
            "",
            "Verdicts: pass, FAIL (fails the run), warn (a SHOULD-level failure, a warning "
            "unless --strict), affected (tests citing it failed, blamed on other requirements), "
            "xfail (a known failure), skip (not observable through this way "
            "in), - (not run).",
            "",
        ]
        return "\n".join(out)

    def _failure_facts(self, result: TestResult) -> str:
        roles = ", ".join(f"{role} `{label}`" for role, label in result.roles.items())
        verdict = "fails the run" if result.gating else "a warning (SHOULD)"
        cited = ", ".join(result.reqs) or "none"
        return (
            f"{result.outcome}, {verdict}; {roles or 'no implementation'}; {result.level}: {cited}"
            f"; blamed: {', '.join(result.blamed) or 'none'}{self._blame(result)}"
        )

    # -- files ----------------------------------------------------------------------------------

    def write(self, base: Path) -> list[Path]:
        """Write BASE.md, BASE.json and BASE.html (creating folders), each atomically (a reader
        sees the old report or the new one, never half of one), and return their paths."""
        from .report_html import render_html  # it renders this module's JSON

        base.parent.mkdir(parents=True, exist_ok=True)
        md, js = report_paths(base)
        data = self.as_json()
        for path, text in (
            (js, json.dumps(data, indent=2) + "\n"),
            (md, self.markdown()),
            (md.with_suffix(".html"), render_html(data)),
        ):
            partial = path.with_name(f".{path.name}.{self.run.run_id or os.getpid()}.partial")
            partial.write_text(text, encoding="utf-8")
            os.replace(partial, path)
        return [md, js, md.with_suffix(".html")]


def report_paths(base: Path) -> tuple[Path, Path]:
    """--conformance-report PATH writes PATH.md and PATH.json (and PATH.html beside them); a
    PATH already ending in .md, .json or .html names them as well."""
    if base.suffix in (".md", ".json", ".html"):
        base = base.with_suffix("")
    return base.with_name(base.name + ".md"), base.with_name(base.name + ".json")


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


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]


def _markdown_table(rows: list[list[str]]) -> list[str]:
    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cell(c) for c in rows[0]) + " |"]
    lines.append("|" + "---|" * len(rows[0]))
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows[1:]]
    return lines
