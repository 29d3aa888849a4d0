"""The conformance report as a model: each requirement's verdict per implementation, the
cross-implementation matrix, "start here", what was not shown, and the gate (docs/report.md).

`Conformance.build` computes it all once, at the end of the run, from the `ResultLog` the plugin
fed (result_log.py); the renderers read it and compute nothing of their own: report_text.py
(terminal, Markdown), report_json.py (JSON), report_html.py (the page, from the JSON) and
report_files.py (writing them).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .diagnosis import MAX_FINDINGS, Attribution, Finding, diagnose_run
from .requirements import Requirement, requirements
from .result_log import (
    FAILED_LIKE,
    OUTCOMES,
    PASSED_LIKE,
    ResultLog,
    TestResult,
    headline,
    warning_note,
)

__all__ = [
    "FAILED_LIKE",
    "NOTHING_SHOWN",
    "OUTCOMES",
    "PASSED_LIKE",
    "VERDICTS",
    "Cell",
    "Conformance",
    "Impl",
    "ImplSummary",
    "ResultLog",
    "RunInfo",
    "SameImplementation",
    "TestResult",
    "headline",
    "report_paths",
    "shown_verdict",
    "test_key",
    "warning_note",
]

# What the producer x consumer matrix's rows and columns are (docs/report.md).
MATRIX_AXES = (
    "rows produce (export, or push as a prefill client), columns consume (import, or receive "
    "as a decode server)"
)
# A requirement's verdict for one implementation (or a matrix cell), in order of precedence.
VERDICTS = ("failed", "affected", "passed", "xfail", "skipped", "not run")
# What not_shown gives an implementation for which no MUST requirement was shown at all.
NOTHING_SHOWN = "no MUST requirement"
# A verdict as the tables show it (terminal, Markdown, HTML); "failed" is FAIL or warn.
_SHOWN = {
    "passed": "pass",
    "affected": "affected",
    "xfail": "xfail",
    "skipped": "skip",
    "not run": "-",
}


# -- the model ---------------------------------------------------------------------------------


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


def shown_verdict(verdict: str, gating: bool) -> str:
    """A cell's verdict in a table: a SHOULD failure that does not fail the run is a warning."""
    if verdict == "failed":
        return "FAIL" if gating else "warn"
    return _SHOWN.get(verdict, verdict)


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
        return shown_verdict(self.verdict, self.gating)


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


def _charged(
    result: TestResult, table: dict[str, Requirement]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The requirements a test counts for, and those its failure only affects: a failure
    counts against the requirements it is blamed on, and the others it cites are affected,
    not failed (docs/report.md, "Diagnosis"). A failure whose probable cause is an operation's
    own fault (blamed on none: it hung, was not called) affects all it cites."""
    if result.outcome not in FAILED_LIKE:
        return result.reqs, ()
    cited, blamed = result.reqs, result.blamed
    if not blamed and (result.causes or result.consequence):
        return (), cited
    if result.level == "SHOULD":
        # A SHOULD-level failure is its SHOULD requirements', never a MUST one's: a case that
        # also cites MUST requirements demands a project decision on top of them (e.g.
        # rules-before-limits-*), and a difference in a MUST requirement's field (a tiny
        # slab's scale) is what breaking the decision looks like.
        cited = tuple(r for r in cited if r in table and not table[r].is_must)
        must_blamed, blamed = (
            blamed,
            tuple(r for r in blamed if r in table and not table[r].is_must),
        )
        if must_blamed and not blamed and (result.causes or result.consequence):
            # A known mistake of MUST requirements explains it (a CRC that refuses every
            # envelope, the NaN cases' too): the SHOULD decision was not shown, not broken.
            return (), cited
    if not blamed:
        return cited, ()
    return blamed, tuple(r for r in cited if r not in blamed)


def _diagnose_run(results: Sequence[TestResult]) -> list[Finding]:
    """The run's probable causes (tlkv_conformance.diagnosis.diagnose_run), each failed result
    given its attribution as the run settles it."""
    failed = [r for r in results if r.outcome in FAILED_LIKE]
    run = diagnose_run({r.nodeid: Attribution(r.causes, r.blamed, r.symptom) for r in failed})
    for result in failed:
        settled = run.attributions[result.nodeid]
        result.causes, result.blamed = settled.causes, settled.blamed
        result.consequence = settled.consequence or result.consequence
    return run.findings


@dataclass(frozen=True)
class ImplSummary:
    """One implementation's line of the report: its gate, how many requirements got each
    verdict (failures split by level and gating), how many tests had each outcome."""

    impl: Impl
    gate: str  # FAIL, INCOMPLETE, NOT SHOWN, PASS or PASS (n SHOULD warnings)
    requirements: dict[str, int]
    tests: Counter[str]  # in the order the tests ran


@dataclass
class Conformance:
    """Everything the report says, computed once at the end of the run, as plain data."""

    impls: list[Impl]
    results: list[TestResult]
    strict: bool
    exit_status: int  # the gate sets it again when writing the report fails (gate.py)
    run: RunInfo
    collection_errors: list[str]
    requirement_cells: dict[str, dict[str, Cell]]  # requirement id -> --impl label -> cell
    # (producer, consumer) -> cell: every pair of two or more --impl, and each interop pair
    # (an --impl with a bundled reference side too: conformance/test_interop.py)
    matrix: dict[tuple[str, str], Cell]
    matrix_producers: list[str]  # the matrix's rows: --impl labels first, then bundled sides
    matrix_consumers: list[str]  # its columns, in the same order
    start_here: list[Finding]  # the run's probable causes, the most failed tests first
    failures: list[TestResult]  # failed tests, those that fail the run first
    # requirements failing for some implementation: those failing the run (MUST first) first
    failing: list[tuple[Requirement, dict[str, Cell]]]
    not_shown: dict[str, list[str]]  # --impl label -> what keeps a clean run from showing it
    summaries: list[ImplSummary]
    same: list[SameImplementation]

    @classmethod
    def build(
        cls,
        impls: Sequence[Impl],
        log: ResultLog,
        exit_status: int,
        run: RunInfo | None = None,
    ) -> Conformance:
        run = run or RunInfo()
        labels = [i.label for i in impls]
        results = log.results()
        found = _diagnose_run(results)
        cells, matrix = _cells(labels, results)
        failed = [r for r in results if r.outcome in FAILED_LIKE]
        not_shown = _not_shown(labels, results, cells, run)
        return cls(
            impls=list(impls),
            results=results,
            strict=log.strict,
            exit_status=exit_status,
            run=run,
            collection_errors=list(log.collection_errors),
            requirement_cells=cells,
            matrix=matrix,
            matrix_producers=_axis(labels, [p for p, _ in matrix]),
            matrix_consumers=_axis(labels, [c for _, c in matrix]),
            start_here=found[:MAX_FINDINGS],
            failures=sorted(failed, key=lambda r: not r.gating),
            failing=_failing(cells),
            not_shown=not_shown,
            summaries=[_summary(impl, results, cells, run, not_shown) for impl in impls],
            same=_same_implementations(impls, results, matrix),
        )

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
    def gating_failures(self) -> int:
        return sum(r.gating for r in self.failures)

    @property
    def warnings(self) -> int:
        """SHOULD-level failures that do not fail the run."""
        return sum(r.warning for r in self.failures)

    def identity(self, label: str) -> str:
        """An --impl's identity; a bundled interop side (not an --impl) is its own label."""
        return next((i.identity for i in self.impls if i.label == label), label)


def _cells(
    labels: list[str], results: Sequence[TestResult]
) -> tuple[dict[str, dict[str, Cell]], dict[tuple[str, str], Cell]]:
    """Each requirement's cell per implementation, and the producer x consumer matrix."""
    table = requirements()
    cells = {rid: {label: Cell() for label in labels} for rid in table}
    matrix = {(p, c): Cell() for p in labels for c in labels} if len(labels) > 1 else {}
    for result in results:
        impl = result.roles.get("impl")
        if impl in labels:
            counted, affected = _charged(result, table)
            for rid in counted:
                if rid in cells:
                    cells[rid][impl].add(result)
            for rid in affected:
                if rid in cells:
                    cells[rid][impl].affect(result)
        producer, consumer = result.roles.get("producer"), result.roles.get("consumer")
        if producer and consumer:
            matrix.setdefault((producer, consumer), Cell()).add(result)
    return cells, matrix


def _axis(labels: Sequence[str], names: Sequence[str]) -> list[str]:
    """One axis of the producer x consumer matrix: the --impl labels on it in --impl order,
    then the bundled sides in the order first met."""
    return [label for label in labels if label in names] + list(
        dict.fromkeys(name for name in names if name not in labels)
    )


def _asked_must(run: RunInfo) -> list[str]:
    """The MUST requirements this run was asked to show: all, or those --reqs names, less
    those --skip-reqs names."""
    asked = set(run.settings.get("reqs") or ())
    skipped = set(run.settings.get("skip_reqs") or ())
    return [
        rid
        for rid, requirement in requirements().items()
        if requirement.is_must and (not asked or rid in asked) and rid not in skipped
    ]


def _not_shown(
    labels: list[str],
    results: Sequence[TestResult],
    cells: dict[str, dict[str, Cell]],
    run: RunInfo,
) -> dict[str, list[str]]:
    """Per implementation, what keeps a run without failures from showing conformance
    (docs/report.md, "What a run must show"): the asked MUST requirements that apply to it
    and that no test showed, or, when no MUST requirement was shown for it at all (every
    test skipped as not applicable, or only SHOULD-level ones selected), ["no MUST
    requirement"]."""
    if not any(result.reqs for result in results):
        # No test of the run cites a requirement (the suite's own tests in its checkout,
        # whose ini names an --impl): nothing was asked of the format, so nothing is owed.
        return {}
    asked = _asked_must(run)
    missing: dict[str, list[str]] = {}
    for label in labels:
        row = [cells[rid][label] for rid in asked]
        unshown = [rid for rid, cell in zip(asked, row, strict=True) if cell.not_shown]
        shown = any(cell.verdict in ("passed", "failed", "affected", "xfail") for cell in row)
        crossed = any(
            label in (result.roles.get("producer"), result.roles.get("consumer"))
            and result.outcome in PASSED_LIKE
            for result in results
        )
        if unshown:
            missing[label] = unshown
        elif not shown and not crossed:
            missing[label] = [NOTHING_SHOWN]
    return missing


def _summary(
    impl: Impl,
    results: Sequence[TestResult],
    cells: dict[str, dict[str, Cell]],
    run: RunInfo,
    not_shown: dict[str, list[str]],
) -> ImplSummary:
    own = [r for r in results if r.roles.get("impl") == impl.label]
    counts: Counter[str] = Counter()
    for rid, requirement in requirements().items():
        cell = cells[rid][impl.label]
        if cell.verdict != "failed":
            counts[cell.verdict] += 1
        elif cell.gating:
            counts[f"{requirement.level} failed"] += 1
        else:
            counts["SHOULD warning"] += 1
    warnings = sum(r.warning for r in own)
    if any(r.gating and r.outcome in FAILED_LIKE for r in own):
        gate = "FAIL"
    elif not run.complete:
        gate = "INCOMPLETE"
    elif impl.label in not_shown:
        gate = "NOT SHOWN"
    elif warnings:
        gate = f"PASS ({warnings} SHOULD warning{'s' * (warnings != 1)})"
    else:
        gate = "PASS"
    return ImplSummary(impl, gate, dict(counts), Counter(r.outcome for r in own))


def _failing(cells: dict[str, dict[str, Cell]]) -> list[tuple[Requirement, dict[str, Cell]]]:
    """Requirements that failed for some implementation: those failing the run (MUST
    first) before warnings."""
    rows = []
    for rid, requirement in requirements().items():
        row = cells[rid]
        if any(cell.verdict == "failed" for cell in row.values()):
            rows.append((requirement, row))

    def order(item: tuple[Requirement, dict[str, Cell]]) -> tuple[bool, bool]:
        requirement, row = item
        return (not any(c.gating for c in row.values()), not requirement.is_must)

    return sorted(rows, key=order)


def _same_implementations(
    impls: Sequence[Impl],
    results: Sequence[TestResult],
    matrix: dict[tuple[str, str], Cell],
) -> list[SameImplementation]:
    groups: dict[str, list[str]] = {}
    for impl in impls:
        groups.setdefault(impl.identity, []).append(impl.label)
    found = []
    for identity, labels in groups.items():
        if len(labels) < 2:
            continue
        by_key: dict[str, dict[str, str]] = {}
        for result in results:
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
            for pair, cell in matrix.items()
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


def report_paths(base: Path) -> tuple[Path, Path]:
    """--conformance-report PATH writes PATH.md and PATH.json (and PATH.html beside them); a
    PATH already ending in .md, .json or .html names them as well."""
    if base.suffix in (".md", ".json", ".html"):
        base = base.with_suffix("")
    return base.with_name(base.name + ".md"), base.with_name(base.name + ".json")
