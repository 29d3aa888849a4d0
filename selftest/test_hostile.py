"""Hostile implementations under test, and hostile inputs to the suite itself.

A CI gate is only worth its exit status: an engine that crashes, exits, hangs, forks, hogs
memory, lies about its output or keeps the caller's arrays must never get status 0, and every
run must end, with its conformance report, in bounded time. Each test here runs the suite in a
child process (as an engine team's CI does) against one such implementation and checks the
verdict, the report and that the run ended.

The C libraries are the bundled reference with one function taken over (selftest/hostile/*.c,
through selftest/hostile/hostile.h); the Python modules are patched copies of reference/pyref.py;
the gRPC servers are the reference server with its hidden `--fault huge-pull`, and
selftest/hostile/grpc_server.py (the reference server with one rpc stalled or broken).

Time bounds are generous subprocess timeouts: a run must END, and how fast it ends is the
benchmarks' business (benchmarks/), not a test's.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from selftest.support import ROOT, Server, SuiteRun, patched_copy, start_reference_server

HOSTILE = ROOT / "selftest" / "hostile"
PYREF = ROOT / "reference" / "pyref.py"
PIDS_ENV = "TLKV_HOSTILE_PIDS"  # selftest/hostile/hostile.h
# Wall-time bounds, as subprocess timeouts. A run of a few dozen cases takes seconds; these
# only have to be far below "forever".
RUN_BOUND = 180
QUICK_BOUND = 60
# The reader and pool cases use this geometry (cases/reader-v1.yaml, cases/transfer.yaml).
READER_GEOMETRY = ("--block-tokens=4", "--n-layers=2", "--n-kv-heads=2", "--head-dim=8")


# -- helpers ------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def hostile_library(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """Build (once per session) a library of selftest/hostile: exit_import, hang_export, ..."""
    from tlkv_conformance.references.clib.build import build_library

    built: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in built:
            out = tmp_path_factory.mktemp(f"hostile-{name}")
            built[name] = build_library(out, source=HOSTILE / f"{name}.c")
        return built[name]

    return get


def report_option(tmp_path: Path) -> tuple[Path, str]:
    """A report base in the test's folder, and the option naming it."""
    base = tmp_path / "out" / "report"
    return base, f"--conformance-report={base}"


def read_report(base: Path) -> dict:
    path = base.with_name(base.name + ".json")
    assert path.is_file(), f"no conformance report at {path}"
    return json.loads(path.read_text(encoding="utf-8"))


def assert_report(base: Path, status: int, complete: bool | None = True) -> dict:
    """The report exists, records `status`, and (when not 0) lets no implementation pass."""
    report = read_report(base)
    assert report["exit_status"] == status, report["exit_status"]
    if complete is not None:
        assert report["complete"] is complete, report["incomplete_reason"]
    if status != 0:
        assert report["gate"] == "fail"
        gates = {impl["label"]: impl["gate"] for impl in report["implementations"]}
        assert "pass" not in gates.values(), gates
    return report


def assert_no_pass_claimed(base: Path) -> None:
    """After a run that was ended from inside: no report, or one that claims no pass."""
    path = base.with_name(base.name + ".json")
    if path.exists():
        report = json.loads(path.read_text(encoding="utf-8"))
        assert report["gate"] != "pass"
        assert all(impl["gate"] != "pass" for impl in report["implementations"])


@pytest.fixture(scope="session")
def passing_seconds(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., float]:
    """The wall time of a passing run of `args` (measured once per session and arguments):
    what a misbehaving implementation's run is held to. Both are measured as a user starts
    them, in a fresh interpreter (forked=False): a run forked from the self-test's zygote
    skips the second of imports that a bound of "twice a passing run" counts on."""
    from selftest.support import run_conformance

    measured: dict[tuple[str, ...], float] = {}

    def get(*args: str) -> float:
        if args not in measured:
            start = time.monotonic()
            run = run_conformance(
                list(args), tmp_path_factory.mktemp("passing"), RUN_BOUND, forked=False
            )
            measured[args] = time.monotonic() - start
            assert run.returncode == 0, run.output[-4000:]
        return measured[args]

    return get


def timed_run(
    run_suite: Callable[..., SuiteRun], impl: str, report: str, args: Sequence[str]
) -> tuple[SuiteRun, float]:
    """A run of `args` against `impl` (report option `report`) started as a user starts it, in
    a fresh interpreter (as `passing_seconds` measures one), and its wall time."""
    start = time.monotonic()
    run = run_suite(f"--impl={impl}", report, *args, timeout=RUN_BOUND, forked=False)
    return run, time.monotonic() - start


def first_cause(base: Path) -> dict:
    """The report's first probable cause ("start here"), of a complete report with exit 1."""
    report = assert_report(base, 1, complete=True)
    assert report["start_here"], "the report names no probable cause"
    return report["start_here"][0]


def error_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("ERROR:")]


def messages_in_order(run: SuiteRun) -> list[str]:
    """The failure messages in the order the tests ran (JUnit keeps that order)."""
    return [run.messages[node] for node in run.outcomes if node in run.messages]


def run_gate(args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """`python -m tlkv_conformance run ARGS`: the runner that trusts a status 0 only from a run
    that wrote its completion marker."""
    command = [sys.executable, "-m", "tlkv_conformance", "run", "-p", "no:cacheprovider", "-q"]
    return subprocess.run(
        [*command, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def runner_complaint(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("tlkv-conformance:")]


def _alive(pid: int) -> bool:
    """Whether `pid` runs. A zombie counts as dead: its parent is gone, and whatever adopted it
    (here PID 1 may not reap) decides when it disappears."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


def survivors(pid_file: Path, wait: float = 10.0) -> list[int]:
    """Pids recorded by a forking library that are still alive after `wait` seconds; any found
    are killed afterwards, so that a failing test leaves no strays of its own."""
    pids = [int(line) for line in pid_file.read_text().split()] if pid_file.exists() else []
    deadline = time.monotonic() + wait
    alive = [p for p in pids if _alive(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = [p for p in alive if _alive(p)]
    for pid in alive:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return alive


def pyref_module(tmp_path: Path, name: str, patches: list[tuple[str, str]]) -> str:
    """A patched copy of reference/pyref.py as module `name` in tmp_path/mods (give
    pythonpath=tmp_path / "mods" to run_suite); its --impl value."""
    folder = tmp_path / "mods"
    folder.mkdir(exist_ok=True)
    patched_copy(PYREF, patches, folder / f"{name}.py")
    return f"py:{name}"


# Anchors in reference/pyref.py for the patches below.
WRITE_RETURN = "        return self._allocate(block_hash, n_tokens, kv)\n"
READ_RETURN = (
    "        return self._hash[block], self._fill[block], self._values[block].astype(np.float32)\n"
)
IMPORT_START = (
    "    def import_envelope(self, data: bytes, max_blocks: int | None = None) -> list[int]:\n"
    "        data = bytes(data)\n"
)
POOL_INIT_END = "        self._registry: dict[int, int] = {}\n"


# -- the bundled v1-only reference and the property tests ----------------------------------


# explore draws fresh examples on every run, whatever --fuzz-seed says (profiles.EXPLORING):
# one run of it; the deterministic profiles from the gate's seed. Not verdict: it is the gate
# without shrinking, which a passing run never enters, so it draws the gate's examples.
@pytest.mark.slow
@pytest.mark.parametrize(
    ("profile", "seed"),
    [("explore", None), ("ci", 0), ("gate", 0)],
)
def test_v1_only_reference_passes_the_property_tests(
    run_suite, reference_library, tmp_path, monkeypatch, profile, seed
):
    """A correct v1-only reader must pass every property test, whatever the profile or seed:
    a fuzzer that draws v2 envelopes for it and calls their refusal a failure would fail a
    conformant engine. (First in the file, longest first: pytest-xdist starts them first, so the
    short runs below fill the gaps and the file ends sooner.)"""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # explore's example database
    label = f"ctypes:{reference_library('v1only')}"
    base, report = report_option(tmp_path)
    run = run_suite(
        f"--impl={label}",
        f"--hypothesis-profile={profile}",
        *([] if seed is None else [f"--fuzz-seed={seed}"]),
        report,
        "conformance/test_fuzz.py",
        timeout=RUN_BOUND,
    )
    assert run.returncode == 0, run.output[-4000:]
    assert run.passed
    assert_report(base, 0, complete=True)


# -- C libraries ----------------------------------------------------------------------------


def test_exit_in_import_fails_the_run(run_suite, hostile_library, tmp_path):
    """exit(0) in every tl_kv_import: each import case fails (the worker's exit is seen), the
    run goes on to its end and its verdict."""
    label = f"ctypes:{hostile_library('exit_import')}"
    base, report = report_option(tmp_path)
    run = run_suite(f"--impl={label}", report, "cases/reader-v1.yaml", timeout=RUN_BOUND)
    assert run.returncode == 1, run.output[-4000:]
    assert_report(base, 1, complete=True)
    messages = messages_in_order(run)
    assert messages, run.output[-4000:]
    assert "exited with status 0 in tl_kv_import" in messages[0]


def test_exit_in_import_inprocess_is_no_verdict(hostile_library, tmp_path):
    """In-process the library's exit(0) ends pytest itself with status 0: the runner must not
    pass that on as a verdict, and says why in one line."""
    base, report = report_option(tmp_path)
    lib = hostile_library("exit_import")
    gate = run_gate(
        [f"--impl=ctypes:{lib}", "--isolation=inprocess", report, "cases/reader-v1.yaml"],
        timeout=RUN_BOUND,
    )
    assert gate.returncode == 3, gate.stdout[-2000:] + gate.stderr[-2000:]
    complaint = runner_complaint(gate.stderr)
    assert len(complaint) == 1, gate.stderr
    assert "without writing its verdict" in complaint[0]
    assert_no_pass_claimed(base)


def test_exit_at_load_is_a_usage_error(run_suite, hostile_library):
    """A constructor calling _exit(0) ends the worker while it loads the library: the
    implementation cannot be used at all, which is one ERROR line and status 4."""
    label = f"ctypes:{hostile_library('exit_on_load')}"
    run = run_suite(f"--impl={label}", "cases/hash.yaml", timeout=RUN_BOUND)
    assert run.returncode == 4, run.output[-4000:]
    errors = error_lines(run.output)
    assert len(errors) == 1, run.output[-4000:]
    assert errors[0].startswith(f"ERROR: --impl {label}: ")
    assert "exited with status 0" in errors[0]
    assert "Traceback" not in run.output


def test_exit_at_load_inprocess_is_no_verdict(hostile_library, tmp_path):
    """In-process the constructor's _exit(0) ends pytest before it starts: status 3."""
    base, report = report_option(tmp_path)
    lib = hostile_library("exit_on_load")
    gate = run_gate(
        [f"--impl=ctypes:{lib}", "--isolation=inprocess", report, "cases/hash.yaml"],
        timeout=RUN_BOUND,
    )
    assert gate.returncode == 3, gate.stdout[-2000:] + gate.stderr[-2000:]
    complaint = runner_complaint(gate.stderr)
    assert len(complaint) == 1, gate.stderr
    assert "without writing its verdict" in complaint[0]
    assert_no_pass_claimed(base)


def test_hanging_export_times_out_then_is_not_called(run_suite, hostile_library, tmp_path):
    """tl_kv_export never returns: the first export waits the whole call timeout, the second
    only the short wait after a hang (the run has failed already; no export ever answered, so
    the floor, 1 s), and after two hangs in a row the function is not called again: a hanging
    engine's gate ends in about the time of a passing one plus one call timeout, with its
    verdict and a complete report."""
    label = f"ctypes:{hostile_library('hang_export')}"
    base, report = report_option(tmp_path)
    run = run_suite(
        f"--impl={label}", "--call-timeout=2", report, "cases/writer-v1.yaml", timeout=RUN_BOUND
    )
    assert run.returncode == 1, run.output[-4000:]
    assert_report(base, 1, complete=True)
    messages = messages_in_order(run)
    assert len(messages) >= 3, run.output[-4000:]
    assert "timed out after 2 s in tl_kv_export" in messages[0]
    assert "timed out after 1 s in tl_kv_export (the wait after an earlier hang" in messages[1]
    assert all("not called in tl_kv_export" in m for m in messages[2:]), messages


def failed_requirements(report: dict) -> list[str]:
    """The requirements the report fails (FAIL or warn) for some implementation."""
    return [
        requirement["id"]
        for requirement in report["requirements"]
        if any(cell["verdict"] == "failed" for cell in requirement["results"].values())
    ]


# The writer and pool cases: exports of one block and of several.
EXPORT_RUN = ("--call-timeout=2", "cases/writer-v1.yaml", "cases/pool.yaml")


def test_export_hanging_from_2_blocks_is_one_cause_blaming_nothing(
    run_suite, hostile_library, reference_library, passing_seconds, tmp_path
):
    """tl_kv_export stops its process for 2 or more blocks and answers 1-block exports: "start
    here" names that as one cause, with every failure as its evidence; no requirement fails
    (the tests that only failed for want of an export are affected), 1-block exports still
    pass after the larger ones are quarantined, and the run ends in bounded time."""
    passing = passing_seconds(f"--impl=ctypes:{reference_library()}", *EXPORT_RUN)
    base, report_arg = report_option(tmp_path)
    library = hostile_library("stop_export_2_blocks")
    run, took = timed_run(run_suite, f"ctypes:{library}", report_arg, EXPORT_RUN)
    assert run.returncode == 1, run.output[-4000:]
    report = assert_report(base, 1, complete=True)
    assert len(report["start_here"]) == 1, report["start_here"]
    cause = report["start_here"][0]
    assert cause["id"] == "faults-from-size:tl_kv_export"
    assert cause["title"] == "tl_kv_export hangs for 2 or more blocks; answered calls for 1 block"
    failed = [t for t in report["tests"] if t["outcome"] == "failed"]
    assert failed
    assert sorted(cause["shown_by"]) == sorted(t["nodeid"] for t in failed)
    assert all(t["blamed"] == [] for t in failed), [t["blamed"] for t in failed]
    assert failed_requirements(report) == []
    (label,) = (impl["label"] for impl in report["implementations"])
    affected = [r for r in report["requirements"] if r["results"][label]["verdict"] == "affected"]
    assert affected, "no requirement is affected: the test tests nothing"
    messages = messages_in_order(run)
    assert any(
        "not called in tl_kv_export: it failed on 2 calls for 2 or more" in m for m in messages
    )
    assert run.passed, "no export case passed"
    assert took <= 2 * passing + 2 * 2, f"{took:.1f} s, over 2 x {passing:.1f} s + two deadlines"


def test_library_closing_the_workers_descriptors_gets_a_report(
    run_suite, hostile_library, tmp_path
):
    """The first tl_kv_pool_create of each worker closes every descriptor it did not open, the
    worker's pipes among them: exit 1 (never 4: the user typed nothing wrong) with a report
    whose first cause names the call and what it did, and no worker traceback anywhere."""
    base, report_arg = report_option(tmp_path)
    run = run_suite(
        f"--impl=ctypes:{hostile_library('close_fds_pool_create')}",
        report_arg,
        *POOL_RUN,
        timeout=RUN_BOUND,
    )
    assert run.returncode == 1, run.output[-4000:]
    cause = first_cause(base)
    assert cause["id"] == "breaks-channel:tl_kv_pool_create", cause
    assert "closes descriptors it did not open" in cause["title"]
    assert "Traceback" not in run.output
    assert "Traceback" not in json.dumps(read_report(base))
    assert not error_lines(run.output), error_lines(run.output)


# A fault on a refused input, each titled with what was observed (the first cause's title);
# a status breach is a cause of its own, whatever rule the input breaks.
OBSERVED_TITLES = [
    (
        "n_out_after_refusal",
        "n-out-after-refusal",
        "tl_kv_import refuses with EFORMAT but leaves *n_out = 1 (0 is due after any failure) "
        "on input breaking READ-MAGIC",
    ),
    ("hang_on_refusal", "fault-on:READ-MAGIC", "tl_kv_import hangs on input breaking READ-MAGIC"),
    (
        "abort_import",
        "fault-on:READ-MAGIC",
        "tl_kv_import crashes with SIGABRT on input breaking READ-MAGIC",
    ),
    (
        "exit_import",
        "fault-on:READ-MAGIC",
        "tl_kv_import exits with status 0 on input breaking READ-MAGIC",
    ),
]


@pytest.mark.parametrize(
    ("library", "cause", "title"), OBSERVED_TITLES, ids=[t[0] for t in OBSERVED_TITLES]
)
def test_a_fault_is_titled_as_what_was_observed(
    run_suite, hostile_library, tmp_path, library, cause, title
):
    """A library faulting on an envelope it must refuse: the cause's title says what it did (a
    status breach is not a crash, a crash names its signal, an exit its status), never "a
    crash or hang"."""
    base, report_arg = report_option(tmp_path)
    run = run_suite(
        f"--impl=ctypes:{hostile_library(library)}",
        "--call-timeout=2",
        report_arg,
        "cases/reader-v1.yaml",
        # an import answered first: a hang then is the input's, not "does not answer"
        "-k",
        "accept-one-full or magic-tlkw",
        timeout=RUN_BOUND,
    )
    assert run.returncode == 1, run.output[-4000:]
    first_cause(base)
    titles = {cause["id"]: cause["title"] for cause in read_report(base)["start_here"]}
    assert titles.get(cause) == title, titles


def test_an_exception_is_titled_with_its_type(run_suite, tmp_path):
    """A Python module raising ValueError where ENOMEM is due: "raises ValueError", with the
    method, on the input breaking IMPORT-ENOMEM."""
    impl = pyref_module(
        tmp_path,
        "hostile_value_error",
        [
            (
                '            raise KvError("ENOMEM", f"{n_blocks} blocks, ',
                '            raise ValueError(f"{n_blocks} blocks, ',
            )
        ],
    )
    base, report_arg = report_option(tmp_path)
    run = run_suite(
        f"--impl={impl}",
        report_arg,
        "cases/reader-v1.yaml",
        "-k",
        "enomem-three-blocks-two-free",
        pythonpath=tmp_path / "mods",
        timeout=RUN_BOUND,
    )
    assert run.returncode == 1, run.output[-4000:]
    cause = first_cause(base)
    assert (cause["id"], cause["title"]) == (
        "fault-on:IMPORT-ENOMEM",
        "Pool.import_envelope raises ValueError on input breaking IMPORT-ENOMEM",
    )


def failing_case(monkeypatch: pytest.MonkeyPatch, quarantined: bool) -> list[int]:
    """Every drawn case fails (on a quarantined call, or on one of its own); returns the list
    each run of a case appends to."""
    from tlkv_conformance import fuzzing
    from tlkv_conformance.checks import CaseFailure
    from tlkv_conformance.evidence import FaultEvidence

    runs: list[int] = []

    class Case:
        def skip_reason(self, testee: object) -> None:
            return None

        def run(self, testee: object) -> None:
            runs.append(1)
            detail = "not called in tl_kv_export" if quarantined else "crashed with SIGSEGV"
            raise CaseFailure(detail, FaultEvidence(detail, quarantined=quarantined))

    monkeypatch.setattr(fuzzing, "build_generated_case", lambda *a, **k: [Case()])
    return runs


def drawn(recorder: object, seeds: Sequence[int]) -> list[str]:
    """What each drawn spec did in `recorder`: failed, or passed without being tried."""
    from types import SimpleNamespace

    from tlkv_conformance.checks import CaseFailure

    testee = SimpleNamespace(
        build_target=lambda target: target,
        adapter=SimpleNamespace(keeps_blocks=False),
        geometry=None,
    )
    outcomes = []
    for seed in seeds:
        try:
            recorder.check({"kind": "export", "seed": seed}, testee)  # type: ignore[attr-defined]
            outcomes.append("untried")
        except CaseFailure:
            outcomes.append("failed")
    return outcomes


@pytest.mark.parametrize("quarantined", [True, False])
def test_quarantined_failure_is_not_shrunk(monkeypatch, quarantined):
    """A property test whose example fails on a quarantined call stops shrinking at once: any
    example fails the same way, and each would cost a case run. A failure of the example's own
    (a crash on this input) goes on shrinking within the budget; a failing example replayed
    fails again without running."""
    from tlkv_conformance.fuzzing import FuzzRecorder, ShrinkBudget

    runs = failing_case(monkeypatch, quarantined)
    recorder = FuzzRecorder(ROOT, budget=ShrinkBudget(600.0))
    outcomes = drawn(recorder, [0, 1, 2, 0])
    if quarantined:
        assert outcomes == ["failed", "untried", "untried", "failed"]
        assert len(runs) == 1
    else:
        assert outcomes == ["failed"] * 4
        assert len(runs) == 3
    assert not recorder.cut_short


def test_shrinking_budget_is_the_runs(monkeypatch):
    """The shrinking budget is shared by the run's property tests: once spent by one, a later
    test reports its first failing example without shrinking it, and says it was cut short
    (an engine failing every property pays the budget once, not once per test)."""
    from tlkv_conformance.fuzzing import FuzzRecorder, ShrinkBudget

    runs = failing_case(monkeypatch, quarantined=False)
    budget = ShrinkBudget(0.0)
    first, second = FuzzRecorder(ROOT, budget=budget), FuzzRecorder(ROOT, budget=budget)
    assert drawn(first, [0]) == ["failed"]
    time.sleep(0.01)  # past the 0 s budget: shrinking is over for every test of the run
    assert drawn(first, [1, 0]) == ["untried", "failed"]
    assert drawn(second, [5, 6, 5]) == ["failed", "untried", "failed"]
    assert len(runs) == 2
    assert first.cut_short
    assert second.cut_short


def test_export_returning_ok_without_writing_fails(run_suite, hostile_library, tmp_path):
    """tl_kv_export answers with the reference's statuses but never writes its buffer."""
    label = f"ctypes:{hostile_library('lazy_export')}"
    base, report = report_option(tmp_path)
    run = run_suite(f"--impl={label}", report, "cases/writer-v1.yaml", timeout=RUN_BOUND)
    assert run.returncode == 1, run.output[-4000:]
    assert run.failed
    assert_report(base, 1, complete=True)


def test_abort_in_import_fails_the_run(run_suite, hostile_library, tmp_path):
    """abort() in every tl_kv_import (a failed assertion): SIGABRT fails each import case."""
    label = f"ctypes:{hostile_library('abort_import')}"
    base, report = report_option(tmp_path)
    run = run_suite(f"--impl={label}", report, "cases/reader-v1.yaml", timeout=RUN_BOUND)
    assert run.returncode == 1, run.output[-4000:]
    assert_report(base, 1, complete=True)
    assert "crashed with SIGABRT in tl_kv_import" in messages_in_order(run)[0]


def test_children_forked_by_pool_create_end_with_the_worker(
    run_suite, hostile_library, tmp_path, monkeypatch
):
    """tl_kv_pool_create forks a child that sleeps for minutes. That is invisible through the
    ABI (the library is the reference otherwise, so the run passes), but the children must not
    outlive the run: the worker is killed with its process group."""
    pid_file = tmp_path / "pids"
    monkeypatch.setenv(PIDS_ENV, str(pid_file))
    label = f"ctypes:{hostile_library('fork_pool_create')}"
    base, report = report_option(tmp_path)
    run = run_suite(f"--impl={label}", report, "cases/pool.yaml", timeout=RUN_BOUND)
    assert run.returncode == 0, run.output[-4000:]
    assert_report(base, 0, complete=True)
    assert pid_file.exists(), "the library forked no child: the test tests nothing"
    assert survivors(pid_file) == []


def test_crash_with_a_child_holding_the_pipes_is_seen_as_a_crash(
    run_suite, hostile_library, tmp_path, monkeypatch
):
    """tl_kv_import forks a child that keeps the worker's pipes open, then the worker crashes.
    The reply pipe never reaches its end, so only the worker's own death can say what happened:
    the case says "crashed with SIGSEGV" (not a timeout), and the child dies with the worker."""
    pid_file = tmp_path / "pids"
    monkeypatch.setenv(PIDS_ENV, str(pid_file))
    label = f"ctypes:{hostile_library('fork_segv_import')}"
    base, report = report_option(tmp_path)
    run = run_suite(
        f"--impl={label}", "--call-timeout=2", report, "cases/reader-v1.yaml", timeout=RUN_BOUND
    )
    assert run.returncode == 1, run.output[-4000:]
    assert_report(base, 1, complete=True)
    messages = messages_in_order(run)
    assert "crashed with SIGSEGV in tl_kv_import" in messages[0], messages[0]
    assert not [m for m in messages if "timed out" in m], messages
    assert pid_file.exists(), "the library forked no child: the test tests nothing"
    assert survivors(pid_file) == []


def test_memory_hog_fails_its_cases_under_the_worker_limit(run_suite, hostile_library, tmp_path):
    """tl_kv_import allocates and touches 2 GiB with a 256 MiB worker limit: its cases fail
    with an implementation fault, the hash cases still pass, the run ends with status 1."""
    label = f"ctypes:{hostile_library('hog_import')}"
    base, report = report_option(tmp_path)
    run = run_suite(
        f"--impl={label}",
        "--worker-memory=256",
        report,
        "cases/reader-v1.yaml",
        "cases/hash.yaml",
        timeout=RUN_BOUND,
    )
    assert run.returncode == 1, run.output[-4000:]
    assert_report(base, 1, complete=True)
    messages = messages_in_order(run)
    assert "implementation fault:" in messages[0]
    assert "in tl_kv_import" in messages[0]
    hash_cases = [n for n in run.outcomes if n.startswith("cases/hash.yaml::")]
    assert hash_cases
    assert all(run.outcomes[n] == "passed" for n in hash_cases), run.output[-4000:]


# What a run of pool and hash cases against the C reference and the Python reference takes
# (the hostile ones below are held to twice that, plus one deadline).
POOL_RUN = ("--call-timeout=2", "cases/pool.yaml", "cases/hash.yaml")


def test_library_crashing_in_its_first_pool_gets_a_report(
    run_suite, hostile_library, reference_library, passing_seconds, tmp_path
):
    """tl_kv_pool_create crashes on every call, the first made while the suite describes the
    library: not a usage error (it loaded), but exit 1 with a report naming the function first;
    the hash cases, which need no pool, still pass, and the run ends in bounded time."""
    passing = passing_seconds(f"--impl=ctypes:{reference_library()}", *POOL_RUN)
    base, report = report_option(tmp_path)
    run, took = timed_run(
        run_suite, f"ctypes:{hostile_library('crash_pool_create')}", report, POOL_RUN
    )
    assert run.returncode == 1, run.output[-4000:]
    assert first_cause(base)["id"] == "fails:tl_kv_pool_create"
    assert "crashed with SIGSEGV in tl_kv_pool_create" in messages_in_order(run)[0]
    hash_cases = [n for n in run.outcomes if n.startswith("cases/hash.yaml::")]
    assert hash_cases
    assert all(run.outcomes[n] == "passed" for n in hash_cases), run.output[-4000:]
    assert took <= 2 * passing + 2, f"{took:.1f} s, over 2 x {passing:.1f} s + one deadline"


# -- Python modules ---------------------------------------------------------------------------


def test_module_exiting_on_one_input_fails_that_case(run_suite, tmp_path):
    """Pool.import_envelope calls os._exit(0) on one input (3 blocks into a pool with exactly 3
    free): the worker dies in that case alone, which fails; a new worker serves the others,
    which pass; the run goes on to status 1."""
    impl = pyref_module(
        tmp_path,
        "hostile_exit3",
        [
            ("import struct\n", "import os\nimport struct\n"),
            (
                IMPORT_START,
                IMPORT_START
                + "        if data[8:12] == bytes([3, 0, 0, 0]) and self.free_blocks() == 3:\n"
                "            os._exit(0)\n",
            ),
        ],
    )
    base, report = report_option(tmp_path)
    run = run_suite(
        f"--impl={impl}",
        report,
        "cases/reader-v1.yaml",
        pythonpath=tmp_path / "mods",
        timeout=RUN_BOUND,
    )
    assert run.returncode == 1, run.output[-4000:]
    assert_report(base, 1, complete=True)
    fills = "cases/reader-v1.yaml::accept-fills-the-pool"
    assert run.failed == [fills], run.output[-4000:]
    assert "exited with status 0 in Pool.import_envelope" in run.messages[fills]
    assert run.outcomes["cases/reader-v1.yaml::accept-three-blocks"] == "passed"


@pytest.mark.parametrize("isolation", ["worker", "inprocess"])
@pytest.mark.parametrize("read", ["view", "copy"])
def test_rejected_import_that_changes_a_block_fails(run_suite, tmp_path, read, isolation):
    """A refused import that first writes into a block the pool holds breaks READ-ATOMIC. With
    Pool.read handing out a view of the pool's storage, a suite that kept what read returned
    (rather than a copy) would see the change on both sides of its comparison and miss it."""
    patches = [
        (
            IMPORT_START,
            "    def import_envelope(self, data: bytes, max_blocks: int | None = None)"
            " -> list[int]:\n"
            "        try:\n"
            "            return self._import_checked(data, max_blocks)\n"
            "        except KvError:\n"
            "            live = [b for b, refs in enumerate(self._refs) if refs]\n"
            "            if live:\n"
            "                self._values[live[0]] += np.float16(1)\n"
            "            raise\n\n"
            "    def _import_checked(self, data: bytes, max_blocks: int | None = None)"
            " -> list[int]:\n"
            "        data = bytes(data)\n",
        )
    ]
    if read == "view":
        patches.append(
            (
                READ_RETURN,
                "        return self._hash[block], self._fill[block], self._values[block]\n",
            )
        )
    impl = pyref_module(tmp_path, f"hostile_atomic_{read}", patches)
    base, report = report_option(tmp_path)
    run = run_suite(
        f"--impl={impl}",
        f"--isolation={isolation}",
        report,
        "cases/reader-v1.yaml",
        pythonpath=tmp_path / "mods",
        timeout=RUN_BOUND,
    )
    assert run.returncode == 1, run.output[-4000:]
    assert_report(base, 1, complete=True)
    messages = messages_in_order(run)
    assert messages, run.output[-4000:]
    assert "the rejected import changed the pool: existing block" in messages[0], messages[0]


def test_module_keeping_the_callers_array_fails(run_suite, tmp_path):
    """Pool.write keeps the caller's kv array instead of a copy: once the caller reuses its
    buffer, the block's values are gone."""
    impl = pyref_module(
        tmp_path,
        "hostile_keeps",
        [
            (POOL_INIT_END, POOL_INIT_END + "        self._kept: dict[int, np.ndarray] = {}\n"),
            (
                WRITE_RETURN,
                "        block = self._allocate(block_hash, n_tokens, kv)\n"
                "        self._kept[block] = kv\n"
                "        return block\n",
            ),
            (
                READ_RETURN,
                "        if block in self._kept:\n"
                "            return self._hash[block], self._fill[block], self._kept[block]\n"
                + READ_RETURN,
            ),
        ],
    )
    base, report = report_option(tmp_path)
    run = run_suite(
        f"--impl={impl}",
        report,
        "cases/roundtrip.yaml",
        "cases/pool.yaml",
        pythonpath=tmp_path / "mods",
        timeout=RUN_BOUND,
    )
    assert run.returncode == 1, run.output[-4000:]
    assert run.failed
    assert_report(base, 1, complete=True)


def test_module_writing_into_the_callers_array_fails(run_suite, tmp_path):
    """Pool.write "clears the padding" past n_tokens in the caller's own array."""
    impl = pyref_module(
        tmp_path,
        "hostile_scribbles",
        [(WRITE_RETURN, "        kv[..., n_tokens:, :] = 0\n" + WRITE_RETURN)],
    )
    base, report = report_option(tmp_path)
    run = run_suite(
        f"--impl={impl}",
        report,
        "cases/reader-v1.yaml",
        "cases/roundtrip.yaml",
        pythonpath=tmp_path / "mods",
        timeout=RUN_BOUND,
    )
    assert run.returncode == 1, run.output[-4000:]
    assert_report(base, 1, complete=True)
    messages = messages_in_order(run)
    assert messages
    assert any("changed the caller's kv array" in m for m in messages), messages[0]


@pytest.mark.parametrize("isolation", ["worker", "inprocess"])
def test_module_raising_system_exit_fails(run_suite, tmp_path, isolation):
    """Pool.find raises SystemExit(0) (sys.exit(0)): a failure of the call, never the end of
    the run with status 0."""
    impl = pyref_module(
        tmp_path,
        "hostile_sysexit",
        [
            ("import struct\n", "import struct\nimport sys\n"),
            (
                "    def find(self, block_hash: int) -> int:\n",
                "    def find(self, block_hash: int) -> int:\n        sys.exit(0)\n",
            ),
        ],
    )
    base, report = report_option(tmp_path)
    run = run_suite(
        f"--impl={impl}",
        f"--isolation={isolation}",
        report,
        "cases/pool.yaml",
        pythonpath=tmp_path / "mods",
        timeout=RUN_BOUND,
    )
    assert run.returncode == 1, run.output[-4000:]
    assert_report(base, 1, complete=True)
    assert any("SystemExit" in m for m in messages_in_order(run)), run.output[-4000:]


def test_module_hanging_in_its_first_pool_gets_a_report(run_suite, passing_seconds, tmp_path):
    """Pool() never returns, first while the suite describes the module: exit 1 with a report
    whose first cause is that Pool() does not answer (one deadline, one short wait, then not
    called); the hash cases still pass."""
    hanging = pyref_module(
        tmp_path,
        "hostile_hang_pool",
        [
            ("import struct\n", "import struct\nimport time\n"),
            (POOL_INIT_END, POOL_INIT_END + "        time.sleep(3600)\n"),
        ],
    )
    passing = passing_seconds("--impl=py:tlkv_conformance.references.pyref", *POOL_RUN)
    base, report = report_option(tmp_path)
    start = time.monotonic()
    run = run_suite(
        f"--impl={hanging}",
        report,
        *POOL_RUN,
        pythonpath=tmp_path / "mods",
        timeout=RUN_BOUND,
        forked=False,
    )
    took = time.monotonic() - start
    assert run.returncode == 1, run.output[-4000:]
    assert first_cause(base)["title"] == "Pool() does not answer"
    messages = messages_in_order(run)
    assert "timed out after 1 s in Pool() (the wait after an earlier hang" in messages[0]
    assert all(
        "not called in Pool(): it failed on each of its last 2 calls" in m for m in messages[1:]
    )
    hash_cases = [n for n in run.outcomes if n.startswith("cases/hash.yaml::")]
    assert hash_cases
    assert all(run.outcomes[n] == "passed" for n in hash_cases), run.output[-4000:]
    # The 2 s deadline of the first hang and the 1 s wait of the second (the messages above).
    bound = 2 * passing + 2 + 1
    assert took <= bound, f"{took:.1f} s, over 2 x {passing:.1f} s + one deadline + one 1 s wait"


# -- gRPC -------------------------------------------------------------------------------------


@pytest.fixture
def huge_pull_server() -> Iterator[Server]:
    server = start_reference_server([*READER_GEOMETRY, "--capacity=20000", "--fault=huge-pull"])
    try:
        yield server
    finally:
        server.stop()


def test_server_answering_pull_with_100_mb_fails_in_bounded_time(
    run_suite, huge_pull_server, tmp_path
):
    """PullKv answers with a ~100 MB chunk: the client's receive limit (4 MiB + 64 KiB) refuses
    it, so the pull cases fail and the run ends instead of swallowing the stream."""
    base, report = report_option(tmp_path)
    run = run_suite(
        f"--impl={huge_pull_server.impl}",
        "--call-timeout=10",
        report,
        "cases/transfer.yaml",
        "-k",
        "pull",
        timeout=RUN_BOUND,
    )
    assert run.returncode == 1, run.output[-4000:]
    assert run.failed
    assert_report(base, 1, complete=True)
    assert any("RESOURCE_EXHAUSTED" in m for m in messages_in_order(run)), run.output[-4000:]


# Misbehaving servers (selftest/hostile/grpc_server.py): a short deadline keeps each run to
# seconds; the transfer cases call every method.
HOSTILE_SERVER = HOSTILE / "grpc_server.py"
HOSTILE_DEADLINE = 2
GRPC_METHODS = 4  # HasBlocks, PushKv, GetInfo, PullKv: one deadline each at most
GRPC_RUN = (f"--call-timeout={HOSTILE_DEADLINE}", "cases/transfer.yaml")
HOSTILE_SERVER_POOL = [*READER_GEOMETRY, "--capacity=20000"]


@pytest.fixture(scope="session")
def passing_grpc_seconds(passing_seconds: Callable[..., float]) -> float:
    """The wall time of GRPC_RUN against the reference server (the hostile one's geometry)."""
    reference = start_reference_server(HOSTILE_SERVER_POOL)
    try:
        return passing_seconds(f"--impl={reference.impl}", *GRPC_RUN)
    finally:
        reference.stop()


def hostile_server_run(
    fault: str, run_suite: Callable[..., SuiteRun], passing: float, base: str
) -> SuiteRun:
    """A run against the hostile server with `fault` (report option `base`), which must end
    with exit 1 within 2x a passing run's time (`passing`) plus one deadline per method."""
    server = start_reference_server(
        [*HOSTILE_SERVER_POOL, f"--fault={fault}"], script=HOSTILE_SERVER
    )
    start = time.monotonic()
    try:
        run = run_suite(f"--impl={server.impl}", base, *GRPC_RUN, timeout=RUN_BOUND, forked=False)
    finally:
        took = time.monotonic() - start
        server.stop()
    assert run.returncode == 1, run.output[-4000:]
    bound = 2 * passing + GRPC_METHODS * HOSTILE_DEADLINE
    assert took <= bound, f"{took:.1f} s, over 2 x {passing:.1f} s + {GRPC_METHODS} deadlines"
    return run


def test_stalled_push_is_quarantined_and_named_first(run_suite, passing_grpc_seconds, tmp_path):
    """PushKv takes its stream and never answers: the first push waits the whole deadline, the
    second the short wait after a hang, later ones are not made (but a stream shorter than any
    it hung on, tried with the short wait: it might answer those); the report's first cause is
    "PushKv does not answer", and the run ends in bounded time."""
    base, report = report_option(tmp_path)
    run = hostile_server_run("stall-PushKv", run_suite, passing_grpc_seconds, report)
    assert first_cause(base)["title"] == "PushKv does not answer"
    messages = messages_in_order(run)
    assert f"timed out after {HOSTILE_DEADLINE} s in PushKv" in messages[0], messages[0]
    assert "timed out after 1 s in PushKv on 127.0.0.1:" in messages[1], messages[1]
    assert "(the wait after an earlier hang" in messages[1]
    quarantined, shorter = "not called in PushKv: it failed on", "timed out after 1 s in PushKv"
    assert all(quarantined in m or shorter in m for m in messages[2:]), messages
    assert quarantined in messages[-1], messages[-1]


def test_push_stalling_for_long_streams_is_one_cause_blaming_nothing(
    run_suite, passing_grpc_seconds, tmp_path
):
    """PushKv stalls for streams of 2 or more chunks and answers 1-chunk streams: "start here"
    names that as one cause, no requirement fails (the transfer tests' are affected), and the
    run ends in bounded time."""
    base, report = report_option(tmp_path)
    hostile_server_run("stall-long-PushKv", run_suite, passing_grpc_seconds, report)
    found = read_report(base)["start_here"]
    assert [cause["id"] for cause in found] == ["faults-from-size:PushKv"], found
    assert found[0]["title"].startswith("PushKv hangs for 2 or more chunks; answered calls for")
    assert failed_requirements(read_report(base)) == []


@pytest.mark.parametrize(
    ("fault", "cause", "message"),
    [
        # Mid-run: PushKv's answers do not parse (quarantined after three); the server dies
        # mid-push (one retry, then no call is made).
        ("malformed-push-answer", "malformed-answer:PushKv", "not called in PushKv: it failed"),
        ("die-mid-push", "connection-lost", "the connection to the server broke"),
        # While the suite describes the server: every case fails with that reason.
        ("stall-HasBlocks", "no-answer:HasBlocks", "describing the server failed (timed out"),
        ("stall-GetInfo", "no-answer:GetInfo", "describing the server failed (timed out"),
        ("stall-PullKv", "no-answer:PullKv", "describing the server failed (timed out"),
        ("huge-empty-pull", "oversized-answer:PullKv", "Received message larger than max"),
    ],
)
def test_misbehaving_server_gets_a_bounded_run_and_a_report(
    run_suite, passing_grpc_seconds, tmp_path, fault, cause, message
):
    """A server that stalls a method, breaks the connection mid-push, or answers too large or
    unparsable: exit 1 (never 4: the server was reached), a complete report whose first
    probable cause names the method and how, in bounded time."""
    base, report = report_option(tmp_path)
    run = hostile_server_run(fault, run_suite, passing_grpc_seconds, report)
    assert first_cause(base)["id"] == cause
    messages = messages_in_order(run)
    assert any(message in m for m in messages), messages[:3]


# -- inputs to the suite itself ---------------------------------------------------------------


def _alias_bomb(levels: int = 9, width: int = 9) -> str:
    """A `literal` of nested anchors and aliases: a few lines that expand to width**levels
    numbers (a "billion laughs")."""
    node = "&l0 [" + ", ".join(["0.5"] * width) + "]"
    for level in range(1, levels + 1):
        node = f"&l{level} [{node}, " + ", ".join([f"*l{level - 1}"] * (width - 1)) + "]"
    return node


def test_yaml_alias_bomb_is_one_error_line(run_suite, scratch_cases, tmp_path):
    """A case file whose `literal` values are an alias bomb is refused as it is parsed, before
    anything expands: one line naming the file and line, no traceback, no hang."""
    case_file = scratch_cases / "bomb.yaml"
    case_file.write_text(
        "title: an alias bomb\n"
        "cases:\n"
        "  - id: bomb\n"
        "    kind: roundtrip\n"
        "    reqs: [POOL-WRITE-READ]\n"
        "    geometry: [4, 2, 2, 8]\n"
        "    version: 1\n"
        "    blocks:\n"
        f"      - values: {{literal: {_alias_bomb()}}}\n"
    )
    shown = case_file.relative_to(ROOT).as_posix()
    base, report = report_option(tmp_path)
    run = run_suite("--impl=ref", report, shown, timeout=QUICK_BOUND)
    assert run.returncode == 2, run.output[-4000:]
    problem = [line for line in run.output.splitlines() if "aliases" in line]
    assert len(problem) == 1, run.output[-4000:]
    assert problem[0].startswith(f"{shown}:9: invalid YAML: aliases (*l0) are not allowed")
    assert "Traceback" not in run.output
    assert_report(base, 2, complete=False)


@pytest.mark.parametrize("where", ["fifo", "outside", "absolute"])
def test_golden_paths_outside_the_parity_roots_are_refused(
    run_suite, scratch_cases, tmp_path, where
):
    """`golden:` may only name files inside the parity roots: a FIFO elsewhere (which would
    block a reader forever), a path climbing out with ../, an absolute path. Each is one line
    naming the case file, found before anything is read."""
    fifo = scratch_cases / "blob.bin"
    os.mkfifo(fifo)
    golden = {
        "fifo": fifo.relative_to(ROOT).as_posix(),
        "outside": "../../../etc/passwd",
        "absolute": "/etc/passwd",
    }[where]
    case_file = scratch_cases / "golden.yaml"
    case_file.write_text(
        "title: golden paths\n"
        "cases:\n"
        "  - id: golden-elsewhere\n"
        "    kind: import\n"
        "    reqs: [READ-ACCEPT]\n"
        f"    envelope: {{golden: {golden!r}}}\n"
    )
    shown = case_file.relative_to(ROOT).as_posix()
    base, report = report_option(tmp_path)
    run = run_suite("--impl=ref", report, shown, timeout=QUICK_BOUND)
    assert run.returncode == 2, run.output[-4000:]
    problem = [line for line in run.output.splitlines() if f"golden file {golden}" in line]
    assert len(problem) == 1, run.output[-4000:]
    assert problem[0].startswith(f"{shown}:3: case 'golden-elsewhere': ")
    assert "Traceback" not in run.output
    assert_report(base, 2, complete=False)


@pytest.mark.parametrize("below", ["report", "sub/report"])
def test_report_below_a_regular_file_is_one_line(run_suite, tmp_path, below):
    """A report that cannot be written is the run's own failure (3), said in one line before
    any test runs: a gate must not run for minutes and then lose its verdict."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")
    run = run_suite(
        "--impl=ref",
        f"--conformance-report={blocker / below}",
        "cases/hash.yaml",
        timeout=QUICK_BOUND,
    )
    assert run.returncode == 3, run.output[-4000:]
    lines = [line for line in run.output.splitlines() if str(blocker) in line]
    assert len(lines) == 1, run.output[-4000:]
    assert "--conformance-report" in lines[0]
    assert "Traceback" not in run.output
    assert not run.outcomes  # nothing ran


@pytest.mark.parametrize("value", ["inf", "1e12", "-5", "nan", "abc"])
def test_bad_call_timeouts_are_usage_errors(run_suite, value):
    """An infinite, absurd, negative, NaN or non-numeric timeout would let a hang last forever
    (or fail every call): each is a usage error, one line."""
    run = run_suite("--impl=ref", f"--call-timeout={value}", "cases/hash.yaml", timeout=QUICK_BOUND)
    assert run.returncode == 4, run.output[-4000:]
    errors = error_lines(run.output)
    assert len(errors) == 1, run.output[-4000:]
    assert errors[0].startswith("ERROR: --call-timeout ")
    assert "Traceback" not in run.output


_PYTEST_WITH_CTRL_C = (
    "import signal, sys, pytest; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "sys.exit(pytest.main(sys.argv[1:]))"
)


class _Child:
    """A conformance run in a child process, whose output is collected as it comes."""

    def __init__(self, args: list[str]) -> None:
        # pytest with SIGINT as a terminal gives it: a shell ignores SIGINT for the jobs it runs
        # in the background, and a child inherits that (the self-test started with `&`).
        command = [sys.executable, "-c", _PYTEST_WITH_CTRL_C, "-p", "no:cacheprovider", "-q", *args]
        self.process = subprocess.Popen(
            command,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.output = ""
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for chunk in iter(lambda: self.process.stdout.read(1), ""):
            self.output += chunk

    def wait_for(self, condition: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if self.process.poll() is not None:
                raise AssertionError(f"the run ended before {what}:\n{self.output[-4000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {what} within {timeout} s:\n{self.output[-4000:]}")
            time.sleep(0.05)

    def finish(self, timeout: float) -> int:
        try:
            status = self.process.wait(timeout=timeout)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
            self._reader.join(timeout=10)
        return status


# A run long enough to be interrupted: the case corpus and the Python tests (property tests).
LONG_RUN = ("--impl=ref", "cases", "conformance")


def progress_count(output: str) -> int:
    """How many tests pytest -q has reported so far: the characters of its progress lines."""
    return sum(len(m.group(1)) for m in _PROGRESS.finditer(output))


_PROGRESS = re.compile(r"^([.FEsxXW]+)(?:\s+\[\s*\d+%\])?$", re.MULTILINE)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_interrupted_run_reports_itself_incomplete(tmp_path, signum):
    """SIGTERM (a CI job cancelled) or SIGINT (Ctrl-C) mid-run: the run stops with a status
    other than 0, and its report says it is incomplete, with no implementation passing."""
    base, report = report_option(tmp_path)
    child = _Child([*LONG_RUN, report])
    try:
        child.wait_for(lambda: progress_count(child.output) >= 20, QUICK_BOUND, "tests running")
        child.process.send_signal(signum)
    finally:
        status = child.finish(timeout=QUICK_BOUND)
    assert status not in (0, -signum), child.output[-4000:]
    report_data = read_report(base)
    assert report_data["complete"] is False
    assert report_data["gate"] == "fail"
    assert report_data["implementations"]
    assert all(impl["gate"] != "pass" for impl in report_data["implementations"])


def test_second_run_on_the_same_report_is_refused(tmp_path):
    """Two runs writing one report would replace each other's verdict: the second, started
    while the first holds the report's lock, is refused with one line (status 4)."""
    base, report = report_option(tmp_path)
    lock = base.with_name(base.name + ".lock")
    first = _Child([*LONG_RUN, report])
    try:
        first.wait_for(lock.exists, QUICK_BOUND, "the first run's report lock")
        second = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-p",
                "no:cacheprovider",
                "-q",
                "--impl=ref",
                report,
                "cases/hash.yaml",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=QUICK_BOUND,
        )
        still_running = first.process.poll() is None
        first.process.send_signal(signal.SIGTERM)
    finally:
        first.finish(timeout=QUICK_BOUND)
    output = second.stdout + second.stderr
    assert still_running, "the first run ended before the second started: nothing was tested"
    assert second.returncode == 4, output[-4000:]
    errors = error_lines(output)
    assert len(errors) == 1, output[-4000:]
    assert "another run" in errors[0]
    assert "is writing the report" in errors[0]
    assert str(base) in errors[0]
    assert "Traceback" not in output


# -- the call ledger (tlkv_conformance.adapters._quarantine), without a subprocess ------------


def test_ledger_shortens_the_wait_then_quarantines_a_hanging_operation():
    """An operation that answered in 0.1 s and then hangs: the next wait is 4 x 0.1 s, floored at
    1 s; a second hang in a row quarantines it. Having answered before, its hangs are the
    inputs' (no cause of the operation's own); another operation is not affected."""
    from tlkv_conformance.adapters._quarantine import CallLedger
    from tlkv_conformance.errors import Quarantined

    ledger = CallLedger(10.0, {"export": "tl_kv_export"})
    ledger.answered("export", time.monotonic() - 0.1)
    assert ledger.timeout("export") == 10.0
    first = ledger.timed_out("export", 10.0)
    assert str(first) == "timed out after 10 s in tl_kv_export"
    assert first.operation_fault is None
    assert ledger.timeout("export") == 1.0
    second = ledger.timed_out("export", 1.0)
    assert "(the wait after an earlier hang" in str(second)
    with pytest.raises(Quarantined, match="not called in tl_kv_export: it failed on each of") as q:
        ledger.timeout("export")
    assert q.value.operation_fault is None
    assert ledger.timeout("import") == 10.0


def test_ledger_names_an_operation_that_never_answered():
    """An rpc that never answered: its hang says "does not answer", and so does each call not
    made after the second; one failing three times in a row otherwise "fails on every call"."""
    from tlkv_conformance.adapters._quarantine import CallLedger
    from tlkv_conformance.errors import ImplementationFault, Quarantined

    ledger = CallLedger(2.0)
    assert ledger.timed_out("PushKv", 2.0).operation_fault.title == "PushKv does not answer"
    ledger.timed_out("PushKv", 1.0)
    with pytest.raises(Quarantined) as not_called:
        ledger.timeout("PushKv")
    assert not_called.value.operation_fault.id == "no-answer:PushKv"
    for _ in range(3):
        ledger.faulted("pool_create", ImplementationFault("crashed with SIGSEGV"))
    with pytest.raises(Quarantined) as crashed:
        ledger.timeout("pool_create")
    assert crashed.value.operation_fault.title == "pool_create fails on every call"


def test_ledger_names_an_operation_faulting_from_a_size_on():
    """A sized operation that answered 1-block calls and hangs for 3 blocks: named for the
    sizes it hangs from; after a second such hang, calls of 2 or more blocks are not made, and
    1-block calls still are. A hang at a size it answered before is the input's (no name)."""
    from tlkv_conformance.adapters._quarantine import CallLedger
    from tlkv_conformance.errors import Quarantined

    ledger = CallLedger(10.0, {"export": "tl_kv_export"}, {"export": "block"})
    ledger.answered("export", time.monotonic() - 0.1, size=1)
    first = ledger.timed_out("export", 10.0, size=3)
    assert first.operation_fault is not None
    assert first.operation_fault.id == "faults-from-size:tl_kv_export"
    assert first.operation_fault.title == (
        "tl_kv_export hangs for 3 or more blocks; answered calls for 1 block"
    )
    ledger.answered("export", time.monotonic() - 0.1, size=1)
    second = ledger.timed_out("export", ledger.timeout("export", 2), size=2)
    assert second.operation_fault.title == (
        "tl_kv_export hangs for 2 or more blocks; answered calls for 1 block"
    )
    with pytest.raises(Quarantined, match="it failed on 2 calls for 2 or more blocks") as q:
        ledger.timeout("export", 5)
    assert q.value.operation_fault == second.operation_fault
    assert ledger.timeout("export", 1) == 1.0  # the short wait after a hang, but called
    other = CallLedger(10.0, {"export": "tl_kv_export"}, {"export": "block"})
    other.answered("export", time.monotonic() - 0.1, size=4)
    assert other.timed_out("export", 10.0, size=2).operation_fault is None


def test_ledger_renames_a_sized_operation_that_answers_after_its_hangs():
    """A stream that hangs for 3 and 2 chunks before any call answered "does not answer" and is
    quarantined for 2 chunks or more only; a 1-chunk stream is still made, and once it answers
    the quarantined calls name the sizes it hangs from, which the earlier cause yields to."""
    from tlkv_conformance.adapters._quarantine import CallLedger
    from tlkv_conformance.errors import Quarantined

    ledger = CallLedger(2.0, sized={"PushKv": "chunk"})
    first = ledger.timed_out("PushKv", 2.0, size=3)
    assert first.operation_fault.id == "no-answer:PushKv"
    assert first.operation_fault.yields_to == {"faults-from-size:PushKv"}
    ledger.timed_out("PushKv", ledger.timeout("PushKv", 2), size=2)
    with pytest.raises(Quarantined, match="it failed on 2 calls for 2 or more chunks"):
        ledger.timeout("PushKv", 2)
    assert ledger.timeout("PushKv", 1) == 1.0  # made, with the short wait after a hang
    ledger.answered("PushKv", time.monotonic() - 0.1, size=1)
    with pytest.raises(Quarantined) as renamed:
        ledger.timeout("PushKv", 7)
    assert renamed.value.operation_fault.title == (
        "PushKv hangs for 2 or more chunks; answered calls for 1 chunk"
    )


@pytest.mark.parametrize(
    ("message", "title"),
    [
        ("Pool.find raised KeyError: 7", "Pool.find raises KeyError"),
        ("raised SystemExit(3) in Pool.write", "Pool.write raises SystemExit(3)"),
        ("crashed with SIGSEGV in tl_kv_import", "tl_kv_import crashes with SIGSEGV"),
        (
            "crashed with SIGABRT in tl_kv_import: AddressSanitizer: heap-buffer-overflow\n...",
            "tl_kv_import crashes with SIGABRT",
        ),
        (
            "exited with status 3 in tl_kv_export; its output:\nbye",
            "tl_kv_export exits with status 3",
        ),
        ("timed out after 2 s in tl_kv_import", "tl_kv_import hangs"),
        (
            "tl_kv_import refused with ENOMEM but left *n_out = 2 (it must be 0 after any failure)",
            "tl_kv_import refuses with ENOMEM but leaves *n_out = 2 (0 is due after any failure)",
        ),
        (
            "tl_kv_import succeeded with *n_out = 9, more than max_blocks (4)",
            "tl_kv_import answers *n_out = 9, more than max_blocks",
        ),
        (
            "tl_kv_pool_find returned status 42, which is none of TL_OK 0",
            "tl_kv_pool_find answers status 42, which the contract does not define",
        ),
        (
            "Pool.import_envelope raised KvError with code 'EBAD', not one of EINVAL",
            "Pool.import_envelope raises KvError with code 'EBAD', which the contract does not "
            "define",
        ),
        (
            "broke the worker's channel to the suite (closed its pipes) in tl_kv_pool_create",
            "tl_kv_pool_create breaks the worker's channel (closes descriptors it did not open)",
        ),
        ("something else entirely", "an implementation fault"),
    ],
)
def test_a_fault_message_is_titled_as_what_it_says(message, title):
    """Each way a way in words a fault (an exception, a crash, an exit, a hang, a status breach,
    a broken channel) gives a title of its own, with the operation; "an implementation fault"
    when the message says nothing more. A refusal case's fault cause carries it."""
    from tlkv_conformance.diagnosis import attribute
    from tlkv_conformance.evidence import RefusalEvidence

    evidence = RefusalEvidence(
        frozenset({"READ-MAGIC"}), frozenset({"EFORMAT"}), "fault", b"", fault=message
    )
    cause = attribute(evidence, ["READ-MAGIC"]).cause
    assert cause is not None
    # *n_out left after a refusal: a status breach of the import, its own cause
    breach = "but leaves *n_out" in title
    assert (cause.id, cause.title) == (
        "n-out-after-refusal" if breach else "fault-on:READ-MAGIC",
        f"{title} on input breaking READ-MAGIC",
    )


def test_an_operation_fault_is_a_probable_cause_of_its_own():
    """A fault that says what the operation does whatever the input is a cause in "start here",
    blamed on none (the requirements the test cites were not shown); any other fault is a
    symptom, as before."""
    from tlkv_conformance.diagnosis import attribute
    from tlkv_conformance.errors import OperationFault
    from tlkv_conformance.evidence import FaultEvidence

    never = OperationFault("no-answer:PushKv", "PushKv does not answer")
    named = attribute(FaultEvidence("timed out after 2 s in PushKv", False, never), ["XFER-TAIL"])
    assert named.cause is not None
    assert (named.cause.id, named.blamed) == ("no-answer:PushKv", ())
    assert (
        named.headline() == "probable cause: PushKv does not answer: timed out after 2 s in PushKv"
    )
    plain = attribute(FaultEvidence("crashed with SIGSEGV in tl_kv_import"), ["READ-ACCEPT"])
    assert plain.cause is None
    assert plain.symptom == "fault"
