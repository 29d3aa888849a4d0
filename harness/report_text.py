"""The conformance report as text, rendered from the model (report.Conformance): the compact
terminal summary and the Markdown report (docs/report.md). What both say of a section (a
probable cause, a failed test's blame, a group of --impl values that are one implementation)
is phrased once, here; each renderer lays the sections out its own way."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

from .diagnosis import Finding
from .report import (
    MATRIX_AXES,
    NOTHING_SHOWN,
    OUTCOMES,
    VERDICTS,
    Conformance,
    SameImplementation,
)
from .requirements import requirements
from .result_log import TestResult, headline

MAX_TERMINAL_FAILURES = 10
SHORT_LABEL = 16  # longer --impl labels are numbered in terminal tables


# -- phrases both renderers use ---------------------------------------------------------------


def _start_here(model: Conformance, indent: str, evidence: str) -> list[str]:
    """The numbered probable causes, each with its evidence on the line below."""
    lines = []
    for number, finding in enumerate(model.start_here, 1):
        lines.append(f"{indent}{number}. {_finding_line(finding)}")
        if finding.cause.evidence:
            lines.append(f"{indent}   {evidence}: {finding.cause.evidence}")
    return lines


def _finding_line(finding: Finding) -> str:
    cause = finding.cause
    tests = f"{finding.tests} failed test{'s' * (finding.tests != 1)}"
    also = f" ({len(finding.explains)} of them as a consequence)" if finding.explains else ""
    example = (finding.shown_by or finding.explains)[0]
    return f"{cause.title}{cause.cited()}: {tests}{also}, e.g. {example}"


def _failing_rows(model: Conformance) -> list[list[str]]:
    return [
        [req.id, req.level, *(row[label].shown for label in model.labels)]
        for req, row in model.failing
    ]


def _matrix_rows(
    model: Conformance, names: Sequence[str], quote: Callable[[str], str]
) -> list[list[str]]:
    """The header and one row per producer, an --impl named as in `names` (a bundled interop
    side by its label, quoted), its cells in consumer order; "-" for a pair no test crosses."""
    name = dict(zip(model.labels, names, strict=True))
    columns = [name.get(c, quote(c)) for c in model.matrix_consumers]
    return [["", *columns]] + [
        [
            name.get(producer, quote(producer)),
            *(
                model.matrix[producer, c].shown if (producer, c) in model.matrix else "-"
                for c in model.matrix_consumers
            ),
        ]
        for producer in model.matrix_producers
    ]


def _requirement_summary(counts: dict[str, int]) -> str:
    order = ("MUST failed", "SHOULD failed", "SHOULD warning", *VERDICTS[1:])
    return ", ".join(f"{counts[k]} {k}" for k in order if counts.get(k))


def _tests(counts: Counter[str]) -> str:
    return ", ".join(f"{counts[o]} {o}" for o in OUTCOMES if counts[o])


def _blame(result: TestResult) -> str:
    if result.consequence:
        return f"; a consequence of {result.consequence}"
    if result.causes:
        return f"; probable cause {result.causes[0].id}"
    if result.blamed and set(result.blamed) != set(result.reqs):
        return f"; blamed on {', '.join(result.blamed)}"
    return ""


def _outcomes(outcomes: dict[str, str]) -> str:
    return ", ".join(f"{label} {o}" for label, o in outcomes.items())


def _same_line(group: SameImplementation) -> str:
    who = f"same implementation {group.identity!r}: {', '.join(group.labels)}"
    if not group.disagreements and not group.matrix_failures:
        return f"{who} agree on all {group.compared} tests that more than one of them ran"
    parts = [f"{key} ({_outcomes(outcomes)})" for key, outcomes in group.disagreements[:3]]
    if len(group.disagreements) > 3:
        parts.append(f"... and {len(group.disagreements) - 3} more")
    parts += [f"matrix {p} -> {c} failed" for p, c in group.matrix_failures]
    return f"{who} DISAGREE: " + "; ".join(parts)


def _not_shown_lines(model: Conformance) -> list[str]:
    return [
        f"{label}: not shown: "
        + (
            "no MUST requirement (every test was skipped as not applicable, or none was selected)"
            if ids == [NOTHING_SHOWN]
            else f"{', '.join(ids)} (applicable, but every test that could show "
            f"{'it' if len(ids) == 1 else 'them'} was skipped)"
        )
        for label, ids in model.not_shown.items()
    ]


# -- the terminal -----------------------------------------------------------------------------


def terminal_lines(model: Conformance) -> list[str]:
    """The compact summary: one line per implementation, then only what failed."""
    lines = [
        f"{s.impl.label}: {s.gate}; requirements: {_requirement_summary(s.requirements)}"
        f"; tests: {_tests(s.tests) or 'none'}"
        for s in model.summaries
    ]
    if model.start_here:
        lines.append("start here: probable causes, the most failed tests first")
        lines += _start_here(model, "  ", "evidence")
    numbered = any(len(label) > SHORT_LABEL for label in model.labels)
    columns = [f"[{n}]" for n in range(1, len(model.labels) + 1)] if numbered else model.labels
    if numbered:
        lines += [f"  [{n}] = {label}" for n, label in enumerate(model.labels, 1)]
    if model.failing:
        lines.append("failing requirements (those failing the run first):")
        lines += _table([["requirement", "level", *columns], *_failing_rows(model)])
    if model.failures:  # matrix tests fail no implementation's requirement: list them too
        lines.append("failed tests:")
        shown = model.failures[:MAX_TERMINAL_FAILURES]
        lines += [f"  {_failure_line(result)}" for result in shown]
        if len(model.failures) > len(shown):
            lines.append(
                f"  ... and {len(model.failures) - len(shown)} more (above, and in the "
                "conformance report)"
            )
    if model.collection_errors:
        lines.append(f"{len(model.collection_errors)} collection errors (above)")
    if model.matrix:
        lines.append(f"cross-implementation matrix ({MATRIX_AXES}):")
        lines += _table(_matrix_rows(model, columns, str))
    lines += [_same_line(group) for group in model.same]
    return lines


def _failure_line(result: TestResult) -> str:
    mark = "FAIL" if result.gating else "warn"
    who = result.roles.get("impl") or " -> ".join(
        result.roles[r] for r in ("producer", "consumer") if r in result.roles
    )
    cited = f"{result.level}: {', '.join(result.reqs)}" if result.reqs else "no requirement"
    return f"{mark} {result.nodeid} ({who}; {cited}{_blame(result)}): {headline(result.message)}"


def closing_lines(model: Conformance, paths: Sequence[Path]) -> list[str]:
    """The gate, what was not shown, the SHOULD-level warnings and where the report is."""
    failures, warnings = model.gating_failures, model.warnings
    lines = [
        f"gate: {model.gate.upper()} (exit status {model.exit_status})"
        + (f": {failures} failure{'s' * (failures != 1)} fail the run" if failures else "")
    ]
    if not model.run.complete:
        lines.append(f"the run is INCOMPLETE ({model.run.incomplete_reason}): no verdict")
    elif not failures:
        lines += _not_shown_lines(model)
    if warnings:
        them = f"{warnings} SHOULD-level failure{'s' * (warnings != 1)}"
        what = "a warning" if warnings == 1 else "warnings"
        if model.exit_status == 0 and model.run.complete:
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


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]


# -- Markdown ---------------------------------------------------------------------------------


def markdown(model: Conformance) -> str:
    out = ["# TLKV conformance report", ""]
    failures, warnings = model.gating_failures, model.warnings
    out.append(
        f"Gate: **{model.gate.upper()}** (exit status {model.exit_status}): {failures} "
        f"failure{'s' * (failures != 1)} failing the run, {warnings} SHOULD-level "
        f"warning{'s' * (warnings != 1)}"
        + (" (--strict: SHOULD failures fail the run)." if model.strict else ".")
    )
    run = model.run
    if not run.complete:
        out.append(
            f"**The run is INCOMPLETE** ({run.incomplete_reason}): this report is "
            "partial and no implementation passed."
        )
    elif not failures:
        out += [f"**Not shown**: {line}" for line in _not_shown_lines(model)]
    out.append(f"Run `{run.run_id}`, suite {run.suite_version}, {run.started}.")
    if model.collection_errors:
        out.append(f"{len(model.collection_errors)} collection errors.")
    out += ["", "## Implementations", ""]
    rows = [["implementation", "identity", "pool", "gate", "requirements", "tests"]]
    rows += [
        [
            f"`{s.impl.label}`",
            f"`{s.impl.fingerprint or s.impl.identity}`",
            s.impl.description,
            s.gate,
            _requirement_summary(s.requirements),
            _tests(s.tests),
        ]
        for s in model.summaries
    ]
    out += _markdown_table(rows)
    if model.start_here:
        out += ["", "## Start here", "", "Probable causes, the most failed tests first:", ""]
        out += _start_here(model, "", "Evidence")
    quoted = [f"`{label}`" for label in model.labels]
    if model.failing:
        out += ["", "## Failing requirements", ""]
        out += _markdown_table([["requirement", "level", *quoted], *_failing_rows(model)])
    if model.failures:
        out += ["", "## Failed tests", ""]
        for result in model.failures:
            out += [f"### `{result.nodeid}`", "", _failure_facts(result), ""]
            out += ["```text", result.message or "(no message)", "```", ""]
    if model.matrix:
        out += ["", "## Cross-implementation matrix", ""]
        out.append(f"{MATRIX_AXES[0].upper()}{MATRIX_AXES[1:]}.")
        out.append("")
        header, *rows = _matrix_rows(model, quoted, lambda label: f"`{label}`")
        out += _markdown_table([["producer \\ consumer", *header[1:]], *rows])
    if model.same:
        out += ["", "## One implementation, several ways in", ""]
        for group in model.same:
            out.append(f"- {_same_line(group)}")
            out += [f"  - `{key}`: {_outcomes(outcomes)}" for key, outcomes in group.disagreements]
    out += ["", "## All requirements", ""]
    rows = [["requirement", "level", *quoted, "text"]]
    for rid, requirement in requirements().items():
        row = model.requirement_cells[rid]
        shown = [row[label].shown for label in model.labels]
        rows.append([rid, requirement.level, *shown, requirement.text])
    out += _markdown_table(rows)
    out += [
        "",
        "Verdicts: pass, FAIL (fails the run), warn (a SHOULD-level failure, a warning "
        "unless --strict), affected (tests citing it failed, blamed on other requirements "
        "or on an operation's fault), "
        "xfail (a known failure), skip (not observable through this way "
        "in), - (not run).",
        "",
    ]
    return "\n".join(out)


def _failure_facts(result: TestResult) -> str:
    roles = ", ".join(f"{role} `{label}`" for role, label in result.roles.items())
    verdict = "fails the run" if result.gating else "a warning (SHOULD)"
    cited = ", ".join(result.reqs) or "none"
    return (
        f"{result.outcome}, {verdict}; {roles or 'no implementation'}; {result.level}: {cited}"
        f"; blamed: {', '.join(result.blamed) or 'none'}{_blame(result)}"
    )


def _markdown_table(rows: list[list[str]]) -> list[str]:
    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cell(c) for c in rows[0]) + " |"]
    lines.append("|" + "---|" * len(rows[0]))
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows[1:]]
    return lines
