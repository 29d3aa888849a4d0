"""The suite proves itself: every mutant in the catalogue is caught, naming the case."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from tlkv_conformance.oracle import READER_RULES

from selftest.mutation import Mutant, load_catalogue, run_mutant

CATALOGUE = load_catalogue()


def test_catalogue_covers_the_families() -> None:
    assert len(CATALOGUE) >= 40
    ids = [m.id for m in CATALOGUE]
    assert len(ids) == len(set(ids)), [i for i, n in Counter(ids).items() if n > 1]
    families = Counter(m.family for m in CATALOGUE)
    for family in (
        "hash",
        "crc",
        "v1-writer",
        "v2-writer",
        "reader",
        "pool",
        "robustness",
        "transfer",
    ):
        assert families[family] >= 2, family
    # every reader rule has its own mutants (one that drops it, at least one that weakens it)
    per_rule = Counter(m.rule for m in CATALOGUE if m.rule)
    assert all(per_rule[rule] >= 1 for rule in READER_RULES), per_rule


@pytest.mark.parametrize("mutant", CATALOGUE, ids=[m.id for m in CATALOGUE])
def test_mutant_is_caught(mutant: Mutant, tmp_path: Path, record_property) -> None:
    outcome = run_mutant(mutant, tmp_path)
    assert outcome.killed, (
        f"survivor {mutant.id} ({mutant.family}): {mutant.description}\n"
        f"{outcome.run.output[-3000:]}"
    )
    record_property("caught_by", outcome.killers[0])


FAMILY_MUTANTS = {
    rule: next(m for m in CATALOGUE if m.rule == rule and not m.sanitize and m.target == "c")
    for rule in READER_RULES
    if any(m.rule == rule and not m.sanitize and m.target == "c" for m in CATALOGUE)
}


@pytest.mark.parametrize("rule", sorted(FAMILY_MUTANTS))
def test_each_reader_family_is_needed(rule: str, tmp_path: Path) -> None:
    """Deleting the cases of one reader rule lets that rule's mutant through: no other family
    covers for it."""
    mutant = FAMILY_MUTANTS[rule]
    outcome = run_mutant(mutant, tmp_path, extra=[f"--skip-reqs={rule}"], paths=["cases"])
    assert not outcome.killed, (
        f"{mutant.id} is still caught without the {rule} cases, by {outcome.killers}"
    )
