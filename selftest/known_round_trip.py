"""A known-failures list round-trips (docs/cases.md): written from a mutant's run, it turns
that run's gate green, and it fails the unbroken reference's gate naming its entries stale.
Shared by the self-test (selftest/test_known_failures.py, a few mutants) and the benchmark
(benchmarks/bench_known_failures.py, the whole catalogue)."""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tlkv_conformance.known import KnownFailure, load_known_failures

from selftest.mutation import SUITE_ARGS, Mutant, MutantError, planted, reference_of
from selftest.support import SuiteRun, run_conformance


@dataclass
class RoundTrip:
    mutant: Mutant
    known: Path  # the list written from the mutant's run
    written: SuiteRun  # the mutant's run, writing it
    gated: SuiteRun  # the mutant's run again, gated with it
    fixed: SuiteRun  # the unbroken reference's run, gated with it
    seconds: float

    @property
    def entries(self) -> list[KnownFailure]:
        return load_known_failures([self.known]).entries

    def problems(self) -> list[str]:
        """Why the round trip does not hold (none when it does)."""
        found = []
        if self.written.returncode != 1 or not self.written.failed:
            found.append(f"the mutant's run exits {self.written.returncode}, no failure to list")
        if self.gated.returncode != 0:
            found.append(
                f"gated with its own list, the mutant's run exits {self.gated.returncode} "
                f"(failed: {', '.join(self.gated.failed) or 'none'})"
            )
        if self.gated.with_outcome("xfailed") != self.written.failed:
            found.append(
                f"known failures {self.gated.with_outcome('xfailed')} are not the failures "
                f"{self.written.failed}"
            )
        if self.fixed.returncode != 1:
            found.append(
                f"the unbroken reference gated with the list exits {self.fixed.returncode}"
            )
        unnamed = [e.shown() for e in self.entries if not stale_named(self.fixed, e)]
        if unnamed:
            found.append(f"entries not named stale against the reference: {', '.join(unnamed)}")
        return found


def stale_named(run: SuiteRun, entry: KnownFailure) -> bool:
    """Whether the run names this entry stale (tlkv_conformance.gate's closing line)."""
    return bool(re.search(rf"stale known failure {re.escape(entry.shown())} \(", run.output))


def mutant_args(paths: Sequence[str] | None, mutant: Mutant) -> list[str]:
    """The mutant self-test's options (no -x: every failure is listed), on its paths."""
    return [*SUITE_ARGS, *(mutant.suite if paths is None else paths)]


def round_trip(mutant: Mutant, workdir: Path, paths: Sequence[str] | None = None) -> RoundTrip:
    """Write the list from the mutant's run, gate the mutant with it, then gate the reference
    it was planted in (the same target, variant, server and paths, unpatched) with it."""
    known = workdir / "known.yaml"
    args = mutant_args(paths, mutant)
    for folder in ("mutant", "reference"):
        (workdir / folder).mkdir(exist_ok=True)
    start = time.monotonic()
    with planted(mutant, workdir / "mutant") as (impl, pythonpath):
        written = _run(
            [f"--impl={impl}", f"--write-known-failures={known}", *args], workdir, pythonpath
        )
        gated = _run([f"--impl={impl}", f"--known-failures={known}", *args], workdir, pythonpath)
    with planted(reference_of(mutant), workdir / "reference") as (impl, pythonpath):
        fixed = _run([f"--impl={impl}", f"--known-failures={known}", *args], workdir, pythonpath)
    return RoundTrip(mutant, known, written, gated, fixed, time.monotonic() - start)


def gate_with(
    mutant: Mutant, known: Path, workdir: Path, paths: Sequence[str] | None = None
) -> SuiteRun:
    """The mutant's run gated with a list (another mutant's, say)."""
    (workdir / "other").mkdir(exist_ok=True)
    with planted(mutant, workdir / "other") as (impl, pythonpath):
        return _run(
            [f"--impl={impl}", f"--known-failures={known}", *mutant_args(paths, mutant)],
            workdir,
            pythonpath,
        )


def _run(args: list[str], workdir: Path, pythonpath: Path | None) -> SuiteRun:
    run = run_conformance(args, workdir, pythonpath=pythonpath)
    if run.returncode not in (0, 1):
        tail = "\n".join(run.output.strip().splitlines()[-15:])
        raise MutantError(f"the suite did not run (exit {run.returncode}):\n{tail}")
    return run
