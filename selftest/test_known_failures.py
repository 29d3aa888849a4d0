"""Known failures round-trip: a requirement entry covers the failures blamed on it, the same
for the gate and for --write-known-failures (tlkv_conformance.known, docs/cases.md)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from tlkv_conformance.errors import SuiteUsageError
from tlkv_conformance.known import (
    FailedTest,
    KnownFailure,
    WrittenBy,
    covering_entries,
    known_failures_text,
    known_ids,
    listing_entries,
    load_known_failures,
    stale_test_entries,
)
from tlkv_conformance.outcome import TestIdentity

from selftest.known_round_trip import RoundTrip, gate_with, round_trip
from selftest.mutation import load_catalogue

SCALES = "cases/writer-v2.yaml::scales-are-f32-divisions"
TOP = "cases/writer-v2.yaml::largest-element-is-7e-not-nan"


def requirement_entry(req: str, impl: str = "*") -> KnownFailure:
    return KnownFailure(req, True, "ticket 1", True, impl, f"known.yaml:{req}")


def failed(key: str, *blamed: str, label: str = "ctypes:engine.so") -> FailedTest:
    return FailedTest((key,), key, label, blamed)


def test_a_requirement_entry_covers_what_is_blamed_on_it_not_what_cites_it() -> None:
    """The issue's case: a test citing V2-SCALE whose failure is blamed on V2-NOSAT."""
    nosat = requirement_entry("V2-NOSAT")
    assert covering_entries([nosat], failed(SCALES, "V2-NOSAT")) == [nosat]
    assert covering_entries([requirement_entry("V2-SCALE")], failed(SCALES, "V2-NOSAT")) == []


def test_a_failure_blamed_on_several_needs_an_entry_for_each() -> None:
    failure = failed(TOP, "V2-NOSAT", "V2-E4M3")
    nosat, e4m3 = requirement_entry("V2-NOSAT"), requirement_entry("V2-E4M3")
    assert covering_entries([nosat], failure) == []
    assert covering_entries([nosat, e4m3], failure) == [nosat, e4m3]


def test_a_failure_blamed_on_nothing_needs_a_test_entry() -> None:
    failure = failed("conformance/test_x.py::test_y[ctypes:engine.so]")
    assert covering_entries([requirement_entry("V2-NOSAT")], failure) == []
    entry = KnownFailure("conformance/test_x.py::test_y", False, "t", True, "*", "k:1")
    assert covering_entries([entry], failure) == [entry]


def test_an_entry_for_another_implementation_covers_nothing() -> None:
    entry = requirement_entry("V2-NOSAT", impl="grpc:*")
    assert covering_entries([entry], failed(SCALES, "V2-NOSAT")) == []


def test_a_written_list_loads_back_covering_every_failure(tmp_path: Path) -> None:
    failures = [
        failed(SCALES, "V2-NOSAT"),
        failed(TOP, "V2-NOSAT", "V2-E4M3"),
        failed("cases/hash.yaml::zero", "HASH-ZERO"),
        failed("conformance/test_x.py::test_y[ctypes:engine.so]"),
    ]
    builds = {"ctypes:engine.so": "engine.so, 10 bytes, sha256 00"}
    path = tmp_path / "known.yaml"
    path.write_text(known_failures_text(failures, "0.2.0", builds), encoding="utf-8")
    known = load_known_failures([path])
    for failure in failures:
        assert covering_entries(known.entries, failure), failure
    by_target = {entry.target: entry for entry in known.entries}
    # one entry per requirement, listing the tests it covers; a test entry for the unblamed
    assert set(by_target) == {
        "V2-NOSAT",
        "V2-E4M3",
        "HASH-ZERO",
        "conformance/test_x.py::test_y[ctypes:engine.so]",
    }
    assert by_target["V2-NOSAT"].tests == (TOP, SCALES)
    assert by_target["V2-E4M3"].tests == (TOP,)
    assert all(entry.impl == "*" for entry in known.entries)  # one implementation in the run
    assert known.written_by == [WrittenBy("0.2.0", builds, str(path))]


def test_a_run_of_several_implementations_writes_an_entry_for_each(tmp_path: Path) -> None:
    failures = [failed(SCALES, "V2-NOSAT", label="py:a"), failed(SCALES, "V2-NOSAT", label="b")]
    path = tmp_path / "known.yaml"
    path.write_text(known_failures_text(failures, "0.2.0", {"py:a": "a", "b": "b"}))
    entries = load_known_failures([path]).entries
    assert sorted(e.impl for e in entries) == ["b", "py:a"]
    assert covering_entries(entries, failed(SCALES, "V2-NOSAT", label="c")) == []


def test_another_build_or_suite_version_is_said() -> None:
    written = WrittenBy("0.2.0", {"ctypes:old/engine.so": "engine.so, 10 bytes, sha256 aa"}, "k")
    assert (
        written.differences("0.2.0", {"ctypes:engine.so": "engine.so, 10 bytes, sha256 aa"}) == []
    )
    (line,) = written.differences("0.2.0", {"ctypes:engine.so": "engine.so, 12 bytes, sha256 bb"})
    assert "written from another build (engine.so, 10 bytes, sha256 aa)" in line
    (line,) = written.differences("0.3.0", {"ctypes:engine.so": "engine.so, 10 bytes, sha256 aa"})
    assert "written by suite 0.2.0, this is 0.3.0" in line


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("written_by: {}\n", "a mapping of written_by and entries"),
        ("entries: []\nextra: 1\n", "a mapping of written_by and entries"),
        ("written_by: 3\nentries: []\n", "written_by is a mapping"),
        ("- requirement: V2-NOSAT\n  reason: r\n  tests: x\n", "'tests' is a list"),
        ("- requirement: NOPE\n  reason: r\n", "no requirement 'NOPE'"),
    ],
)
def test_a_bad_list_is_one_clear_error(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "known.yaml"
    path.write_text(text)
    with pytest.raises(SuiteUsageError, match=expected):
        load_known_failures([path])


# -- round trips through mutants (selftest/known_round_trip.py) -------------------------------

# One mutant per family, through each way in (c: ctypes, py, grpc, prefill: prefill-py), on the
# case files that catch it; v2-nan-at-the-top is the issue's: failures citing V2-SCALE, blamed on
# V2-NOSAT.
ROUND_TRIPS = {
    "hash-parent-ignored": ("cases/hash.yaml",),
    "py-crc-records-only": ("cases/writer-v1.yaml",),
    "v1-no-padding": ("cases/writer-v1.yaml",),
    "v2-nan-at-the-top": ("cases/writer-v2.yaml",),
    "py-read-ignores-trailing-bytes": ("cases/reader-v1.yaml",),
    "pool-release-keeps-hash": ("cases/pool.yaml",),
    "crash-assert-on-count": ("--reqs=READ-LENGTH", "cases/reader-v1.yaml"),
    "xfer-crc-unchecked": ("cases/transfer.yaml",),
    "prefill-tail-dropped": ("cases/prefill.yaml",),
}
CATALOGUE = {m.id: m for m in load_catalogue()}


@pytest.fixture(scope="session")
def trips(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], RoundTrip]:
    """Each mutant's round trip, run once for the tests that need it."""
    done: dict[str, RoundTrip] = {}

    def get(mutant_id: str) -> RoundTrip:
        if mutant_id not in done:
            workdir = tmp_path_factory.mktemp(mutant_id)
            done[mutant_id] = round_trip(CATALOGUE[mutant_id], workdir, ROUND_TRIPS[mutant_id])
        return done[mutant_id]

    return get


def test_the_round_trips_cover_every_family() -> None:
    chosen = [CATALOGUE[m] for m in ROUND_TRIPS]
    assert {m.family for m in chosen} == {m.family for m in CATALOGUE.values()}
    assert {m.target for m in chosen} == {"c", "py", "grpc", "prefill"}


@pytest.mark.parametrize("mutant_id", sorted(ROUND_TRIPS))
def test_a_list_written_from_a_mutant_round_trips(trips, mutant_id: str) -> None:
    """Written from the mutant's run, the list turns that run's gate green, every failure a
    known one; against the unbroken reference, it fails the gate naming its entries stale."""
    trip = trips(mutant_id)
    assert not trip.problems(), "\n".join(
        [
            *trip.problems(),
            trip.known.read_text(),
            trip.gated.output[-3000:],
            trip.fixed.output[-2000:],
        ]
    )
    assert "written from another build" in trip.fixed.output  # said, as a warning line
    assert "written from another build" not in trip.gated.output


def test_a_list_from_one_mutant_does_not_cover_another(trips, tmp_path: Path) -> None:
    listed, other = trips("v2-nan-at-the-top"), trips("py-crc-records-only")
    run = gate_with(other.mutant, listed.known, tmp_path, ROUND_TRIPS[other.mutant.id])
    assert run.returncode == 1, run.output[-3000:]
    assert run.failed == other.written.failed, run.output[-3000:]
    assert not run.with_outcome("xfailed")


def test_a_listed_test_is_the_same_test_against_another_build() -> None:
    """Tests parametrized by the --impl label are listed with `*` for it: the list written
    against a library at one path names the same tests of a build at another."""
    parity = "conformance/test_parity.py::test_import[kv.wire.v1/empty-{}]"
    a, b = parity.format("ctypes:a/lib.so"), parity.format("ctypes:b/lib.so")
    written_ids, key = known_ids(a, a, "ctypes:a/lib.so")
    assert key == parity.format("*")
    entry = KnownFailure("NAN-SIGN", True, "t", True, "*", "k:1", (key,))
    ids, _ = known_ids(b, b, "ctypes:b/lib.so")
    assert listing_entries([entry], ids, "ctypes:b/lib.so") == [entry]
    assert written_ids[0] not in ids


def test_a_test_entry_written_with_the_key_is_not_stale_at_collection() -> None:
    """A failure blamed on nothing is listed by its key (`*` for the --impl label); the check
    at collection finds that test, and calls stale only an entry whose test is gone."""
    parity = "conformance/test_parity.py::test_export[kv.wire.v1/empty-{}]"
    label = "ctypes:/tmp/x/lib.so"
    collected = TestIdentity(parity.format(label), parity.format(label), (("impl", label),))
    listed = KnownFailure(parity.format("*"), False, "t", True, "*", "k:1")
    gone = KnownFailure(parity.format("*").replace("empty", "gone"), False, "t", True, "*", "k:2")
    assert stale_test_entries([listed, gone], [collected]) == [gone]
