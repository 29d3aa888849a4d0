"""The held-out set (selftest/mutants/held-out.yaml): every mistake is caught, and the set stays
apart from the catalogue the diagnosis was tuned on. The diagnosis's figures on it are measured
by `python -m selftest.mutation held-out` (docs/held-out.md), not asserted here: the judge's
`accept` lists come later; each run records its first probable cause as a property."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from tlkv_conformance.requirements import requirements

from selftest.mutation import (
    CATALOGUE,
    HELD_OUT,
    Mutant,
    held_out_verdict,
    load_catalogue,
    run_reported,
)

HELD = load_catalogue(HELD_OUT)


def test_held_out_is_apart_from_the_catalogue() -> None:
    """No held-out id or patch is the catalogue's, and no entry carries the catalogue's tuning
    data (`cause`, known gaps)."""
    catalogue = load_catalogue(CATALOGUE)
    ids = [m.id for m in HELD]
    assert len(ids) == len(set(ids)), [i for i, n in Counter(ids).items() if n > 1]
    assert not set(ids) & {m.id for m in catalogue}
    tuned = {replacement for m in catalogue for replacement in m.patch}
    shared = {m.id for m in HELD if set(m.patch) & tuned}
    assert not shared, f"patches copied from the catalogue: {sorted(shared)}"
    for mutant in HELD:
        assert not mutant.cause, mutant.id
        assert not mutant.diagnosis_gap, mutant.id
        assert not mutant.blame_gap, mutant.id


def test_held_out_covers_the_families() -> None:
    table = requirements()
    for mutant in HELD:
        assert mutant.reqs, mutant.id
        assert set(mutant.reqs) <= set(table), (mutant.id, mutant.reqs)
        assert mutant.description, mutant.id
    families = Counter(m.family for m in HELD)
    for family in ("hash", "crc", "v1-writer", "v2-writer", "reader", "pool", "robustness"):
        assert families[family] >= 2, family
    assert {m.target for m in HELD} == {"c", "py", "grpc"}


@pytest.mark.parametrize("mutant", HELD, ids=[m.id for m in HELD])
def test_held_out_mutant_is_caught(mutant: Mutant, tmp_path: Path, record_property) -> None:
    """Caught at its first failure, as the catalogue's mutants are; the probable cause the
    report names first is recorded, not judged."""
    outcome = run_reported(mutant, tmp_path, first_failure=True)
    assert outcome.killed, (
        f"survivor {mutant.id} ({mutant.family}): {mutant.description}\n"
        f"{outcome.run.output[-3000:]}"
    )
    record_property("caught_by", outcome.killers[0])
    record_property("diagnosis", outcome.first_diagnosis)
    record_property("diagnosis_title", outcome.first_title)
    record_property("verdict", held_out_verdict(outcome))
