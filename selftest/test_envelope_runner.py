"""The runner of envelopes.json walked through in docs/vectors.md ("Writing a runner"),
selftest/envelope_runner.py, against the bundled C reference: every vector it chooses holds in
each build; with a reader mistake planted, vectors of the broken rule fail."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from tlkv_conformance import vectors

from selftest import envelope_runner
from selftest.mutation import load_catalogue, planted

CATALOGUE = {m.id: m for m in load_catalogue()}


@pytest.fixture(scope="session")
def envelopes_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("vectors")
    vectors.write_vectors(out)
    return out / vectors.ENVELOPES_FILE


@pytest.mark.parametrize("variant", ["default", "f32", "v1only"])
def test_reference_holds_every_chosen_vector(
    variant: str, reference_library: Callable[..., Path], envelopes_path: Path
) -> None:
    outcomes = envelope_runner.run_file(reference_library(variant), envelopes_path)
    assert [f"{o.source}: {o.reason}" for o in outcomes if o.verdict == "failed"] == []
    ran = [o for o in outcomes if o.verdict == "passed"]
    assert len(ran) > 1000  # the chosen vectors are most of the file, whichever reader


@pytest.mark.parametrize(
    ("mutant", "rule"), [("read-drop-crc", "READ-CRC"), ("read-non-atomic", "READ-ATOMIC")]
)
def test_planted_reader_mistake_fails_its_vectors(
    mutant: str, rule: str, envelopes_path: Path, tmp_path: Path
) -> None:
    with planted(CATALOGUE[mutant], tmp_path) as (impl, _):
        outcomes = envelope_runner.run_file(Path(impl.removeprefix("ctypes:")), envelopes_path)
    failed = [o.source for o in outcomes if o.verdict == "failed"]
    assert failed, f"{mutant}: no vector failed"
    cited = {v["source"]: v["reqs"] for v in json.loads(envelopes_path.read_text())["vectors"]}
    assert [source for source in failed if rule not in cited[source]] == []
