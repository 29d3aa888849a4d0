"""CPU seconds of a command and of every process it starts, the median of N runs.

    .venv/bin/python benchmarks/bench_cpu.py [--repeat N] -- COMMAND [ARG ...]
    e.g. ... -- .venv/bin/python -m pytest -q -p no:xdist selftest/test_golden.py

On a shared machine the wall time measures the neighbours too; CPU seconds measure the command.
A self-test's conformance runs are forked from its zygote (selftest/forkserver.py), which
pytest never waits for, so `/usr/bin/time` leaves them out: this process makes itself the
subreaper of everything the command starts and reaps all of it, so that the CPU time of the
children (RUSAGE_CHILDREN) counts them.

Measured at issue 23 item 7 (a loaded 2-core machine, --repeat 3 alternating before/after),
CPU seconds (wall), medians:
    a conformance run, --impl=ref (pyref, 2176 tests)    20.5 (65.8) -> 16.9 (55.3)
    the same, the default C build through ctypes          16.4 (16.7) -> 15.3 (15.5)
    selftest/test_hostile.py -k "property_tests and (ci or gate or verdict)"
                                                         29.0 (72.2) -> 24.4 (54.7)
"""

from __future__ import annotations

import argparse
import ctypes
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence

_PR_SET_CHILD_SUBREAPER = 36


def measured(command: Sequence[str]) -> tuple[float, float, int]:
    """One run in a child of ours: (CPU seconds of its whole tree, wall seconds, exit status).
    Only the CPU of the runs since the last call counts (RUSAGE_CHILDREN adds up)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    status = subprocess.run(command, stdout=subprocess.DEVNULL, check=False).returncode
    wall = time.monotonic() - start
    while True:  # the orphans it left (a zygote, a server): reparented to us, reaped here
        try:
            os.wait()
        except ChildProcessError:
            break
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return cpu, wall, status


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs (default 3)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given: bench_cpu.py [--repeat N] -- COMMAND ...")
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(_PR_SET_CHILD_SUBREAPER, 1)
    runs = [measured(command) for _ in range(args.repeat)]
    for cpu, wall, status in runs:
        print(f"cpu {cpu:7.2f} s  wall {wall:7.2f} s  exit {status}")
    cpu = statistics.median(run[0] for run in runs)
    wall = statistics.median(run[1] for run in runs)
    print(f"median: cpu {cpu:.2f} s, wall {wall:.2f} s")
    return max(run[2] for run in runs)


if __name__ == "__main__":
    sys.exit(main())
