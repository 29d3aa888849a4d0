"""An engine tested at the geometry it serves (issue 12, "Done when").

A C library whose tl_kv_pool_create accepts one geometry only (16x16x8x64, as a shim over an
engine serving one model) is tested with `--impl=ctypes:LIB,geometry=16x16x8x64`: correct, it
passes while running most of what an unrestricted build runs; each planted bug fails the run.
A reference gRPC server of that geometry passes repeated and parallel runs, and a server that
gets the geometry rule wrong fails. Every run is a child process, as a user would start it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from tlkv_conformance.references.clib.build import build_library

from selftest.mutation import (
    TARGETS,
    Mutant,
    load_catalogue,
    one_geometry_patch,
    run_mutant,
)
from selftest.support import (
    Server,
    SuiteRun,
    patched_copy,
    pool_flags,
    start_reference_server,
)

GEOMETRY = "16x16x8x64"
DIMS = [int(v) for v in GEOMETRY.split("x")]
CATALOGUE = {m.id: m for m in load_catalogue()}
# The bugs the issue names, one mutant each: layout order, scale order, trailing bytes, a
# non-atomic import, reciprocal scaling, f16 truncation, geometry fields compared with the
# wrong pool field, the CRC skipped for empty envelopes.
C_MUTANTS = (
    "v1-k-v-swapped",
    "v2-scales-first",
    "read-ignores-trailing-bytes",
    "read-non-atomic",
    "v2-scale-reciprocal",
    "v1-f16-round-toward-zero",
    "read-geometry-wrong-field",
    "read-crc-skipped-empty",
)
# Servers that get the geometry rule wrong: one whose engine does not compare the geometry
# fields, one that answers FAILED_PRECONDITION instead of DATA_LOSS for a mismatch.
GRPC_MUTANTS = ("xfer-backend-geometry-unchecked", "xfer-geometry-precondition")
# tl.kv.v1 cannot release a block, so every run leaves its blocks on the server: a full run at
# 16x16x8x64 stores about 310 (measured), and this server takes three runs (~512 KiB each).
CAPACITY = 1500
# A held block's payload is read in full before the block is shared (a prefix cache's way).
HELD_PAYLOAD_CASE = "cases/transfer.yaml::held-block-payload-checked"
GENERATED = "cases/exhaustive.yaml"
SPEC_EXAMPLE = re.compile(r"cases/exhaustive\.yaml::(prefix|bit-flip)-\d")


def ran(run: SuiteRun) -> list[str]:
    """The tests that ran (passed, failed, warned or xfailed), not the skipped ones."""
    return sorted(node for node, outcome in run.outcomes.items() if outcome != "skipped")


def assert_passes(run: SuiteRun, what: str) -> None:
    assert not run.failed, f"{what}: failed {run.failed[:10]}\n{run.output[-3000:]}"
    assert run.returncode == 0, f"{what}: exit {run.returncode}\n{run.output[-3000:]}"


@pytest.fixture(scope="session")
def one_geometry_library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The C reference, correct, with a tl_kv_pool_create that refuses every other geometry."""
    out = tmp_path_factory.mktemp("one-geometry")
    source = patched_copy(TARGETS["c"], [one_geometry_patch(GEOMETRY)], out / "one_geometry.c")
    return build_library(out, source=source)


# -- ctypes ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_one_geometry_library_passes_running_most_of_the_corpus(
    one_geometry_library, reference_outcomes, run_suite
):
    restricted = run_suite(f"--impl=ctypes:{one_geometry_library},geometry={GEOMETRY}")
    assert_passes(restricted, f"the library serving {GEOMETRY} only")
    # The unrestricted build's whole suite (the self-test's one run of it; it passed).
    unrestricted = reference_outcomes("cases", "conformance")
    # The spec's 60-byte example means something at its own geometry only, and runs only
    # there (issue 12, item 2): its 540 generated prefixes and bit flips would alone hold the
    # share under 70%, so the comparison leaves them out (and says both figures).
    compared_restricted = [n for n in ran(restricted) if not SPEC_EXAMPLE.match(n)]
    unrestricted_ran = sorted(n for n, outcome in unrestricted.items() if outcome != "skipped")
    compared = [n for n in unrestricted_ran if not SPEC_EXAMPLE.match(n)]
    share = len(compared_restricted) / len(compared)
    raw = len(ran(restricted)) / len(unrestricted_ran)
    assert share >= 0.8, (
        f"at {GEOMETRY} {len(compared_restricted)} tests ran, unrestricted {len(compared)}"
        f" ({share:.0%}, needs 80%; {raw:.0%} with the spec example's expansions)"
    )
    # The single-fault families at the engine's geometry: each field's bits, the CRC resealed.
    field_flips = [n for n in ran(restricted) if "field-bit-flip-at-geometry-" in n]
    assert len(field_flips) >= 350, f"{len(field_flips)} field bit flips ran at {GEOMETRY}"


def test_without_its_geometry_the_run_stops_with_one_line_naming_the_option(
    one_geometry_library, run_suite
):
    run = run_suite(f"--impl=ctypes:{one_geometry_library}")
    assert run.returncode == 4, run.output[-2000:]
    lines = [line for line in run.output.splitlines() if line.strip()]
    assert len(lines) == 1, run.output[-2000:]
    assert "describing itself failed" in lines[0]
    assert ",geometry=" in lines[0], lines[0]


@pytest.mark.parametrize("mutant_id", C_MUTANTS)
def test_each_planted_bug_fails_the_run_at_the_geometry(mutant_id: str, tmp_path: Path) -> None:
    mutant = CATALOGUE[mutant_id]
    outcome = run_mutant(mutant, tmp_path, geometry=GEOMETRY, first_failure=True)
    assert outcome.killed, (
        f"survivor at {GEOMETRY}: {mutant.id}: {mutant.description}\n{outcome.run.output[-3000:]}"
    )


# -- gRPC --------------------------------------------------------------------------------------


@pytest.fixture
def server() -> Iterator[Server]:
    # A prefix cache (--dedup: a payload for a held hash is read in full, then the held block
    # shared), the engine a model's decode side is likely to be: it must pass as the default
    # server does, which selftest/test_grpc.py runs at 4x2x2x8.
    started = start_reference_server([*pool_flags(DIMS, CAPACITY), "--dedup"])
    yield started
    started.stop()


@pytest.mark.slow
def test_server_at_the_geometry_passes_again_and_in_parallel(server, run_suite, tmp_path):
    """A decode server that is a prefix cache (--dedup: a payload for a hash it holds is read
    in full, then the held block is shared and counted in blocks_reused), at an engine's
    geometry, passes the whole suite twice in a row on one server, the second run with two
    workers at once: each run, each case and each fuzzing try pushes hashes of its own, and
    what reads the counts or the free blocks accepts a shared payload (docs/decisions.md)."""
    runs = {}
    # The second run leaves out the ~1,900 generated reader cases (cases/exhaustive.yaml):
    # envelopes the server refuses, which store nothing and share nothing with the first run.
    for attempt, args in (("first", ()), ("second", ("-n", "2", f"--ignore={GENERATED}"))):
        report = tmp_path / attempt
        run = run_suite(f"--impl={server.impl}", f"--conformance-report={report}", *args)
        assert_passes(run, f"the {attempt} run against a prefix-cache server at {GEOMETRY}")
        assert run.outcomes[HELD_PAYLOAD_CASE] == "passed", run.outcomes.get(HELD_PAYLOAD_CASE)
        assert "Flaky" not in run.output
        settings = json.loads(report.with_suffix(".json").read_text(encoding="utf-8"))["settings"]
        runs[attempt] = (run, settings["hash_salt"])
    (first, first_salt), (again, again_salt) = runs["first"], runs["second"]
    assert first_salt != again_salt, "each run draws a hash salt of its own"
    assert len(ran(first)) >= len(first.outcomes) / 2, (
        f"{len(ran(first))} of {len(first.outcomes)} tests ran against the server at {GEOMETRY}"
    )
    # The geometry rule at the server's own geometry, with the fields that differ swapped.
    swapped = "cases/reader-v1.yaml::geometry-layers-and-heads-swapped"
    assert first.outcomes.get(swapped) == "passed", first.outcomes.get(swapped)
    # The server now holds the first run's blocks: the second run makes its own, so the same
    # tests run (none skipped as held from outside) and pass.
    again_expected = [n for n in ran(first) if not n.startswith(f"{GENERATED}::")]
    assert ran(again) == again_expected, sorted(set(again_expected) ^ set(ran(again)))[:10]


@pytest.mark.parametrize("mutant_id", GRPC_MUTANTS)
def test_a_server_wrong_about_the_geometry_is_a_mutant_at_the_geometry(mutant_id: str) -> None:
    """Such servers are catalogue mutants served at 16x16x8x64, so selftest/test_mutants.py
    runs them (and requires them caught and diagnosed) with the rest."""
    mutant: Mutant | None = CATALOGUE.get(mutant_id)
    assert mutant is not None, f"selftest/mutants/catalogue.yaml has no mutant {mutant_id}"
    assert mutant.target == "grpc"
    assert mutant.server.get("geometry") == DIMS, f"{mutant_id} must be served at {GEOMETRY}"


def test_header_says_once_that_v1_blocks_do_not_fit_a_chunk(run_suite):
    """At 16x80x8x128 one v1 block is 28 + 12 + 2 * 16 * 80 * 8 * 128 * 2 + 4 = 5,242,924
    bytes, over the 4 MiB a KvChunk carries; its v2 envelope (2,626,604 bytes) fits."""
    big = start_reference_server(pool_flags((16, 80, 8, 128), capacity=1))
    try:
        # -v undoes -q, which hides the header; one small file keeps collecting cheap.
        run = run_suite(f"--impl={big.impl}", "--collect-only", "-v", "cases/hash.yaml")
    finally:
        big.stop()
    assert run.returncode == 0, run.output[-2000:]
    notes = [line for line in run.output.splitlines() if "4 MiB gRPC chunk" in line]
    assert notes == [
        "tlkv: a one-block v1 envelope of 16x80x8x128 is 5,242,924 bytes, over the 4 MiB gRPC "
        "chunk: v1 transfer cases are skipped, v2 used where it fits"
    ], notes
