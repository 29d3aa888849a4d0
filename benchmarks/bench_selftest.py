"""What a mutant run of the self-test costs, with and without what makes it cheap.

    .venv/bin/python benchmarks/bench_selftest.py [--only ID ...] [--repeat N]

For each chosen mutant of selftest/mutants/catalogue.yaml (default: one per way in and one a
generated case catches), runs it as selftest/test_mutants.py does (selftest.mutation.run_mutant,
to the first failure) three ways, N times each, and prints the median wall seconds:
  whole    the whole suite in one run, in a fresh `python -m pytest` (the self-test until
           issue 23: the ~1,900 generated cases collected for every mutant)
  staged   the directed stage, then the generated one only when it passes, fresh processes
  forked   the same stages, each run forked from the zygote (selftest/forkserver.py), as now
then the ratios whole/staged and whole/forked, and checks that the three agree on the first
failure. All three run the tests in the plugin's order (directed first), which alone took a
mutant a directed case catches from about 9 s to about 4 s (whole, against the alphabetical
order that ran cases/exhaustive.yaml first). Run it on a quiet machine: the figures are medians
because these machines are shared.

Measured at issue 23 (quiet 2-core machine, --repeat 3), seconds:
    mutant                   whole  staged  forked  whole/staged  whole/forked
    hash-token-big-endian     4.11    2.95    2.07          1.39          1.99
    py-crc-records-only       4.16    2.76    1.59          1.50          2.62
    read-drop-crc             3.31    3.12    2.51          1.06          1.32
    grpc-nan-canonical        4.08    3.17    2.35          1.28          1.74
(grpc-nan-canonical runs its own case files, one stage either way: its whole/staged is noise.)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from selftest.mutation import Mutant, Outcome, chosen_mutants, run_mutant  # noqa: E402

DEFAULT = ("hash-token-big-endian", "py-crc-records-only", "grpc-nan-canonical", "read-drop-crc")
WAYS = {
    "whole": {"staged": False, "forked": False},
    "staged": {"staged": True, "forked": False},
    "forked": {"staged": True, "forked": True},
}


def timed(mutant: Mutant, way: dict[str, bool]) -> tuple[float, Outcome]:
    with tempfile.TemporaryDirectory(prefix="bench-selftest-") as scratch:
        start = time.monotonic()
        outcome = run_mutant(mutant, Path(scratch), **way)
        return time.monotonic() - start, outcome


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", metavar="ID", default=list(DEFAULT))
    parser.add_argument("--repeat", type=int, default=3, help="runs of each way (default 3)")
    args = parser.parse_args(argv)
    mutants = chosen_mutants(args.only, None)
    print(f"{'mutant':34} {'whole':>7} {'staged':>7} {'forked':>7}  whole/staged  whole/forked")
    disagree = 0
    for mutant in mutants:
        medians, first = {}, set()
        for name, way in WAYS.items():
            runs = [timed(mutant, way) for _ in range(args.repeat)]
            medians[name] = statistics.median(seconds for seconds, _ in runs)
            first.update(outcome.killers[0] if outcome.killers else "" for _, outcome in runs)
        disagree += len(first) > 1
        print(
            f"{mutant.id:34} {medians['whole']:7.2f} {medians['staged']:7.2f} "
            f"{medians['forked']:7.2f}  {medians['whole'] / medians['staged']:12.2f}  "
            f"{medians['whole'] / medians['forked']:12.2f}"
            + ("" if len(first) == 1 else f"  FIRST FAILURES DIFFER: {sorted(first)}")
        )
    return 1 if disagree else 0


if __name__ == "__main__":
    sys.exit(main())
