"""The requirement list against the corpus: every MUST id has a case, every case cites ids."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from tlkv_conformance.requirements import requirements

from selftest.support import ROOT


@pytest.fixture(scope="module")
def collected(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """Every conformance item the default run collects, with the requirement ids it cites."""
    out = tmp_path_factory.mktemp("reqs") / "reqs.json"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "selftest.reqs_probe",
            "-p",
            "no:cacheprovider",
        ],
        cwd=ROOT,
        check=True,
        capture_output=True,
        env={**os.environ, "TLKV_REQS_PROBE": str(out)},
    )
    return json.loads(out.read_text())


def test_every_item_cites_requirements(collected: dict[str, dict]) -> None:
    assert collected, "nothing collected"
    assert all(entry["reqs"] for entry in collected.values())


def test_every_must_requirement_has_a_case(collected: dict[str, dict]) -> None:
    cited = {req for entry in collected.values() for req in entry["reqs"]}
    uncovered = [r.id for r in requirements().values() if r.is_must and r.id not in cited]
    assert not uncovered, f"MUST requirements without a case: {', '.join(uncovered)}"


def test_requirement_ids_are_well_formed() -> None:
    table = requirements()
    for req in table.values():
        assert req.level in ("MUST", "SHOULD"), req
        assert req.source in ("spec", "contract", "decision"), req
        assert req.text.strip(), req
        if req.source == "decision":
            assert req.level == "SHOULD", f"{req.id}: a decision of ours cannot be a MUST"


def test_reader_rules_have_three_single_fault_cases_per_version() -> None:
    from tlkv_conformance.cases import RejectCase, load_case_file
    from tlkv_conformance.oracle import READER_RULES

    counts: dict[tuple[str, int], int] = {}
    for path in sorted((ROOT / "cases").glob("*.yaml")):
        for case in load_case_file(path, ROOT).cases:
            if isinstance(case, RejectCase) and case.rule and not case.also:
                key = (case.rule, case.version)
                counts[key] = counts.get(key, 0) + 1
    short = [
        f"{rule} v{version}: {counts.get((rule, version), 0)}"
        for rule in READER_RULES
        for version in (1, 2)
        if counts.get((rule, version), 0) < 3
    ]
    assert not short, "reader rules with fewer than 3 single-fault cases: " + "; ".join(short)
