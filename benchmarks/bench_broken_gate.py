"""How long the gate takes to fail a broken engine, against passing the same engine unbroken.

    .venv/bin/python benchmarks/bench_broken_gate.py [--only ID ...] [--family F] [--repeat N]
        [--jobs N] [--every N] [--mutation-args] [--logs DIR]

For every mutant of selftest/mutants/catalogue.yaml (or those chosen), the wall time of the
whole gate against it, as a user runs it (no -x, the default hypothesis profile `gate`, the
default call timeout, the mutant's own test paths: the whole corpus, or for a gRPC server the
cases written for it), and the wall time of the same gate against the unmutated reference it
was planted in (the same target, build variant, sanitizer, server configuration and paths).
A mutant's ratio is its time over the time of its reference's run just before it (with
--repeat, the median of those): a reference runs before each of its mutants by default
(--every 1), or before every N-th (--every N, quicker, but the pairs are further apart in
time and a shared machine's load changes between minutes). Prints each mutant's seconds, its
reference's median, the ratio and the exit status, then the median and the maximum ratio.
Building a library or starting a server is not timed.

The target (issue 13, docs/report.md): every mutant's gate within 2x its reference's, not
counting the call timeouts it waited out: an operation that hangs costs one `--call-timeout`
(it is then quarantined), which no run can save without calling a slow call a hang. Both
ratios are printed, with and without that wait; the exit status is 1 when a mutant misses the
target. `--mutation-args` adds the mutant self-test's own options
(selftest.mutation.SUITE_ARGS: --strict, a 3 s call timeout, the no-shrinking profile) to
both sides. The machine is shared: run with the default --jobs 1, and quote ratios.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from selftest.mutation import (  # noqa: E402 - after the path is set
    SUITE_ARGS,
    Mutant,
    MutantError,
    chosen_mutants,
    group_of,
    planted,
    reference_of,
)
from selftest.support import run_conformance  # noqa: E402

TARGET_RATIO = 2.0
RUN_TIMEOUT = 1800.0  # one gate run longer than this is cut short and counted at this time
_SUMMARY = re.compile(r"\b(passed|failed|errors?|skipped)\b.* in [\d.]+s")  # pytest's last line
_TIMED_OUT = re.compile(r"timed out after ([\d.]+) s")


@dataclasses.dataclass
class Timing:
    """One gate run: its wall time, exit status and pytest's closing line."""

    seconds: float
    status: int | str  # the exit status, or what went wrong ("timeout", "error: ...")
    summary: str
    hung: float = 0.0  # seconds spent waiting out call timeouts (one per test that hit one)


def plan(mutants: Sequence[Mutant], round_: int, every: int) -> list[tuple[str, Mutant, int]]:
    """One round of runs: a mutant's reference before its first mutant and again before every
    `every`-th one, so that each mutant run has a reference run shortly before it."""
    tasks: list[tuple[str, Mutant, int]] = []
    seen: dict[str, int] = {}
    for mutant in mutants:
        group = group_of(mutant)
        if seen.get(group, 0) % every == 0:
            tasks.append((group, reference_of(mutant), round_))
        seen[group] = seen.get(group, 0) + 1
        tasks.append((mutant.id, mutant, round_))
    return tasks


def time_gate(mutant: Mutant, extra: Sequence[str], logs: Path | None, tag: str) -> Timing:
    """Plant `mutant` (or a reference) in a scratch folder and time one gate run against it."""
    with tempfile.TemporaryDirectory(prefix="bench-gate-") as scratch:
        workdir = Path(scratch)
        try:
            with planted(mutant, workdir) as (impl, pythonpath):
                report = workdir / "report"
                args = [f"--impl={impl}", f"--conformance-report={report}", *extra, *mutant.suite]
                if logs is not None:
                    args.append("--durations=8")  # output only: where the time went
                start = time.perf_counter()
                try:
                    run = run_conformance(args, workdir, timeout=RUN_TIMEOUT, pythonpath=pythonpath)
                except subprocess.TimeoutExpired:
                    return Timing(RUN_TIMEOUT, "timeout", f"killed after {RUN_TIMEOUT:g} s")
                elapsed = time.perf_counter() - start
                hung = waited_out(report.with_suffix(".json"))
        except MutantError as exc:
            return Timing(float("nan"), "error", str(exc).splitlines()[0])
    if logs is not None:
        logs.mkdir(parents=True, exist_ok=True)
        (logs / f"{tag}.txt").write_text(run.output, encoding="utf-8")
    lines = [line for line in run.output.splitlines() if _SUMMARY.search(line)]
    return Timing(elapsed, run.returncode, lines[-1].strip("= ") if lines else "", hung)


def waited_out(report: Path) -> float:
    """Seconds the run waited out call timeouts, from its report's test messages (SHOULD
    warnings included, which JUnit records as passed). A quarantined call's message quotes the
    timeouts that quarantined it: only a message that starts with one is a wait."""
    if not report.is_file():
        return 0.0
    tests = json.loads(report.read_text(encoding="utf-8")).get("tests", [])
    return sum(
        float(found.group(1))
        for test in tests
        if (found := _TIMED_OUT.search((test.get("message") or "").split(": not called", 1)[0]))
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", metavar="ID", help="these mutants only")
    parser.add_argument("--family", help="this family's mutants only (hash, crc, reader, ...)")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each (the median wins)")
    parser.add_argument("--jobs", type=int, default=1, help="gate runs at once (default 1)")
    parser.add_argument(
        "--every",
        type=int,
        default=1,
        metavar="N",
        help="run a mutant's reference before every N-th of its mutants (default 1: each)",
    )
    parser.add_argument(
        "--mutation-args",
        action="store_true",
        help="add the mutant self-test's options (SUITE_ARGS) to every run",
    )
    parser.add_argument("--logs", type=Path, help="keep each run's output in this folder")
    args = parser.parse_args(argv)
    if min(args.repeat, args.jobs, args.every) < 1:
        parser.error("--repeat, --jobs and --every must be at least 1")

    try:
        mutants = chosen_mutants(args.only, args.family)
    except ValueError as exc:
        parser.error(str(exc))
    references = {group_of(m): reference_of(m) for m in mutants}
    extra = list(SUITE_ARGS) if args.mutation_args else []
    print(
        f"{len(mutants)} mutants against {len(references)} references, {args.repeat} run(s) "
        f"each, {args.jobs} at a time; gate options: {' '.join(extra) or '(defaults)'}",
        flush=True,
    )

    tasks = [task for round_ in range(args.repeat) for task in plan(mutants, round_, args.every)]

    def one(task: tuple[str, Mutant, int]) -> tuple[str, Timing]:
        name, subject, round_ = task
        timing = time_gate(subject, extra, args.logs, f"{name}.{round_ + 1}")
        print(
            f"  run {round_ + 1} {name:44} {timing.seconds:7.1f} s  exit {timing.status}  "
            f"({timing.summary})",
            flush=True,
        )
        return name, timing

    times: dict[str, list[Timing]] = {}
    # Each mutant run against the run of its reference just before it: the pair saw the same
    # load, which on a shared machine changes more between minutes than within one.
    pairs: dict[str, list[float]] = {}
    waits: dict[str, list[float]] = {}  # the same, the mutant's call timeouts not counted
    last: dict[str, float] = {}
    with ThreadPoolExecutor(args.jobs) as pool:
        for (name, timing), (_, subject, _) in zip(pool.map(one, tasks), tasks, strict=True):
            times.setdefault(name, []).append(timing)
            if subject.patch:
                reference = last[group_of(subject)]
                pairs.setdefault(name, []).append(timing.seconds / reference)
                waits.setdefault(name, []).append((timing.seconds - timing.hung) / reference)
            else:
                last[name] = timing.seconds

    def median(name: str) -> float:
        return statistics.median(t.seconds for t in times[name])

    print("\nreference gates (should pass: exit 0; median, and the range of their runs):")
    for name in references:
        seconds = [t.seconds for t in times[name]]
        statuses = ", ".join(sorted({str(t.status) for t in times[name]}))
        print(
            f"  {name:44} {median(name):7.1f} s  ({min(seconds):.1f}-{max(seconds):.1f} s over "
            f"{len(seconds)} runs)  exit {statuses}"
        )
    bad_refs = [n for n in references if any(t.status != 0 for t in times[n])]

    print(
        f"\nmutants (median of {args.repeat}; ratio: the median, over runs, of the mutant's time "
        "over its reference run just before it; then without the call timeouts it waited out, "
        "where it hit any):"
    )
    ratios: dict[str, float] = {}
    unwaited: dict[str, float] = {}
    for mutant in mutants:
        seconds, reference = median(mutant.id), median(group_of(mutant))
        ratios[mutant.id] = statistics.median(pairs[mutant.id])
        unwaited[mutant.id] = statistics.median(waits[mutant.id])
        statuses = ", ".join(str(t.status) for t in times[mutant.id])
        hung = statistics.median(t.hung for t in times[mutant.id])
        waited = f" ({unwaited[mutant.id]:.2f}x without {hung:g} s of timeouts)" if hung else ""
        over = "  OVER 2x" if unwaited[mutant.id] > TARGET_RATIO else ""
        print(
            f"  {mutant.id:44} {mutant.family:10} {seconds:7.1f} s  ref {reference:6.1f} s  "
            f"{ratios[mutant.id]:5.2f}x{waited}  exit {statuses}{over}"
        )
    finite = [r for r in ratios.values() if r == r]  # a mutant that did not build has NaN
    print()
    for label, figures in (("", ratios), (", call timeouts not counted", unwaited)):
        worst = max(figures, key=lambda k: figures[k] if figures[k] == figures[k] else -1.0)
        above = [m for m, r in figures.items() if r > TARGET_RATIO]
        print(
            f"ratio mutant / reference over {len(finite)} mutants{label}: median "
            f"{statistics.median(r for r in figures.values() if r == r):.2f}x, max "
            f"{figures[worst]:.2f}x ({worst}); {len(above)} over {TARGET_RATIO:g}x"
            f"{': ' + ', '.join(above) if above else ''}"
        )
    over = [m for m, r in unwaited.items() if r > TARGET_RATIO]
    unfailed = [m.id for m in mutants if any(t.status != 1 for t in times[m.id])]
    if unfailed:
        print(f"mutants whose gate did not exit 1: {', '.join(unfailed)}")
    if bad_refs:
        print(f"references whose gate did not pass (ratios to them mean little): {bad_refs}")
    return 1 if over or bad_refs or len(finite) < len(ratios) else 0


if __name__ == "__main__":
    sys.exit(main())
