"""The held-out set (selftest/mutants/held-out.yaml): every mistake is caught, and the set stays
apart from the catalogue the diagnosis was tuned on.

The diagnosis's figures on it (right, none, wrong name) come from whole-suite runs, as a user's
gate gives them: `python -m selftest.mutation held-out` writes them to docs/held-out.md. A
whole suite per mistake is too costly here (39 of them, 10 to 60 s each), so the self-test runs
each mistake to its first failure only (its `args`), to check it is caught and record that
failure's probable cause and verdict as properties, and checks that docs/held-out.md's figures
are those its table's causes give under the current `accept` lists (a list judged again
without measuring again fails)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest
from tlkv_conformance.requirements import requirements

from selftest.mutation import (
    CATALOGUE,
    HELD_OUT,
    TARGETS,
    VERDICTS,
    Mutant,
    held_out_verdict,
    load_catalogue,
    run_reported,
    verdict_figures,
    verdict_of,
)
from selftest.support import ROOT, patched_text

HELD = load_catalogue(HELD_OUT)
MEASURED = ROOT / "docs" / "held-out.md"
# a row of its table: mutant, family, caught, first failure, probable cause, title, verdict
ROW = re.compile(
    r"^\| (ho[0-9a-z]*-[^ |]+) \| [^|]* \| [^|]* \| [^|]* \| ([^ |]+) \| .* \| ([a-z-]+) \|$"
)


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
    # The same mistake written with more or less of its line quoted is the same mistake: the
    # patched sources are compared, not the patches' text.
    planted = {_planted_source(m): m.id for m in catalogue}
    same = {m.id: planted[key] for m in HELD if (key := _planted_source(m)) in planted}
    assert not same, f"held-out mistakes that are the catalogue's: {same}"
    for mutant in HELD:
        assert not mutant.cause, mutant.id
        assert not mutant.diagnosis_gap, mutant.id
        assert not mutant.blame_gap, mutant.id


def _planted_source(mutant: Mutant) -> tuple[str, str]:
    """The file a mutant patches and its text once patched."""
    source = ROOT / "reference" / mutant.file if mutant.file else TARGETS[mutant.target]
    return str(source), patched_text(source, list(mutant.patch))


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


def test_measured_figures_are_the_judged_ones() -> None:
    """docs/held-out.md has a row for every held-out mistake, each verdict is what its probable
    cause gives under the mistake's `accept` list, and the figures count those verdicts."""
    text = MEASURED.read_text(encoding="utf-8")
    rows = {m.group(1): (m.group(2), m.group(3)) for m in map(ROW.match, text.splitlines()) if m}
    assert set(rows) == {m.id for m in HELD}, "run `python -m selftest.mutation held-out`"
    for mutant in HELD:
        cause, verdict = rows[mutant.id]
        assert verdict == verdict_of("" if cause == "-" else cause, mutant.accept), (
            f"{mutant.id}: {cause} is judged {verdict}, its accept list says otherwise: "
            "run `python -m selftest.mutation held-out`"
        )
    counts = Counter(verdict for _, verdict in rows.values())
    assert verdict_figures({v: counts[v] for v in VERDICTS}) in text.splitlines()
