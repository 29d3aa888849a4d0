"""The conformance report as JSON (report.json; docs/report.md, "The JSON report"), rendered
from the model (report.Conformance). report.html is rendered from this data."""

from __future__ import annotations

from collections import Counter
from typing import Any

from .report import OUTCOMES, Cell, Conformance, RunInfo, SameImplementation
from .requirements import requirements
from .result_log import TestResult

REPORT_FORMAT = "tlkv-conformance-report"
REPORT_FORMAT_VERSION = 3


def report_json(model: Conformance) -> dict[str, Any]:
    """The report as the dict report.json holds."""
    outcome_counts = Counter(r.outcome for r in model.results)
    return {
        "format": REPORT_FORMAT,
        "format_version": REPORT_FORMAT_VERSION,
        **_run(model.run),
        "gate": model.gate,
        "exit_status": model.exit_status,
        "strict": model.strict,
        "not_shown": model.not_shown if model.run.complete else {},
        "summary": {
            "tests": {o: outcome_counts[o] for o in OUTCOMES if outcome_counts[o]},
            "failures": model.gating_failures,
            "warnings": model.warnings,
            "collection_errors": len(model.collection_errors),
        },
        "collection_errors": model.collection_errors,
        "start_here": [
            {
                **finding.cause.as_json(),
                "shown_by": finding.shown_by,
                "consequences": finding.explains,
            }
            for finding in model.start_here
        ],
        "implementations": [
            {
                "label": s.impl.label,
                "identity": s.impl.identity,
                "fingerprint": s.impl.fingerprint,
                "description": s.impl.description,
                "gate": s.gate.split(" ")[0].lower(),
                "requirements": s.requirements,
                "tests": dict(s.tests),
            }
            for s in model.summaries
        ],
        "requirements": [
            {
                "id": rid,
                "level": requirement.level,
                "source": requirement.source,
                "section": requirement.section,
                "text": requirement.text,
                "results": {
                    label: _cell(cell) for label, cell in model.requirement_cells[rid].items()
                },
            }
            for rid, requirement in requirements().items()
        ],
        "matrix": None
        if not model.matrix
        else {
            "implementations": model.labels,
            "producers": model.matrix_producers,
            "consumers": model.matrix_consumers,
            "cells": [
                {
                    "producer": producer,
                    "consumer": consumer,
                    "same_implementation": model.identity(producer) == model.identity(consumer),
                    **_cell(cell),
                }
                for (producer, consumer), cell in model.matrix.items()
            ],
        },
        "same_implementation": [_same(group) for group in model.same],
        "tests": [_test(r) for r in model.results],
    }


def _run(run: RunInfo) -> dict[str, Any]:
    return {
        "run_id": run.run_id,
        "complete": run.complete,
        "incomplete_reason": run.incomplete_reason or None,
        "started": run.started,
        "finished": run.finished,
        "suite_version": run.suite_version,
        "settings": run.settings,
    }


def _cell(cell: Cell) -> dict[str, Any]:
    return {
        "verdict": cell.verdict,
        "gating": cell.gating,
        "tests": {o: cell.counts[o] for o in OUTCOMES if cell.counts[o]},
        "failures": [{"test": f.nodeid, "message": f.message} for f in cell.failures],
        "affected_by": [{"test": f.nodeid, "blamed": list(f.blamed)} for f in cell.affected],
    }


def _same(group: SameImplementation) -> dict[str, Any]:
    return {
        "identity": group.identity,
        "implementations": list(group.labels),
        "tests_compared": group.compared,
        "disagreements": [
            {"test": key, "outcomes": outcomes} for key, outcomes in group.disagreements
        ],
        "matrix_failures": [{"producer": p, "consumer": c} for p, c in group.matrix_failures],
    }


def _test(result: TestResult) -> dict[str, Any]:
    return {
        "nodeid": result.nodeid,
        "id": result.key,
        **result.roles,
        "requirements": list(result.reqs),
        "blamed": list(result.blamed),
        "diagnosis": [cause.as_json() for cause in result.causes],
        "consequence_of": result.consequence or None,
        "level": result.level,
        "outcome": result.outcome,
        "gating": result.gating,
        "message": result.message,
        "view": result.view,
    }
