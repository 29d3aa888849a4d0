"""Known-failures lists round-trip for every mutant of the catalogue (docs/cases.md).

    .venv/bin/python benchmarks/bench_known_failures.py [--only ID ...] [--family F]
        [--jobs N] [--keep DIR]

For each mutant of selftest/mutants/catalogue.yaml (or those chosen), on the mutant's own test
paths with the mutant self-test's options (selftest.mutation.SUITE_ARGS, no -x): its run writes
a list (--write-known-failures); its run gated with that list must exit 0, every failure a
known one; the unbroken reference it was planted in (the same target, variant, server and
paths), gated with the same list, must exit 1 naming every entry stale. Prints one line per
mutant (entries written, failures, seconds, what broke), then the count that round-trip; exit
status 1 when one does not. Three runs per mutant, most over the whole corpus: on the shared
2-core machine that is hours, so choose with --only/--family, and keep the default --jobs 1.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from selftest.known_round_trip import round_trip  # noqa: E402 - after the path is set
from selftest.mutation import Mutant, MutantError, chosen_mutants  # noqa: E402


def one(mutant: Mutant, keep: Path | None) -> tuple[str, list[str]]:
    """The mutant's line, and what broke its round trip (nothing when it holds)."""
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-known-") as scratch:
        workdir = Path(scratch)
        try:
            trip = round_trip(mutant, workdir)
        except MutantError as exc:
            return f"{mutant.id:44} ERROR {str(exc).splitlines()[0]}", [str(exc)]
        problems = trip.problems()
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            (keep / f"{mutant.id}.yaml").write_text(trip.known.read_text(), encoding="utf-8")
        line = (
            f"{mutant.id:44} {mutant.family:10} {len(trip.entries):3} entries for "
            f"{len(trip.written.failed):4} failures  {time.monotonic() - start:7.1f} s  "
            + ("round-trips" if not problems else "BROKEN: " + "; ".join(problems))
        )
        return line, problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", metavar="ID", help="these mutants only")
    parser.add_argument("--family", help="this family's mutants only (hash, crc, reader, ...)")
    parser.add_argument("--jobs", type=int, default=1, help="mutants at once (default 1)")
    parser.add_argument("--keep", type=Path, help="keep each mutant's written list here")
    args = parser.parse_args(argv)
    try:
        mutants = chosen_mutants(args.only, args.family)
    except ValueError as exc:
        parser.error(str(exc))
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    print(f"{len(mutants)} mutants, {args.jobs} at a time", flush=True)
    start = time.monotonic()
    broken = []
    with ThreadPoolExecutor(args.jobs) as pool:
        for mutant, (line, problems) in zip(
            mutants, pool.map(lambda m: one(m, args.keep), mutants), strict=True
        ):
            print(f"  {line}", flush=True)
            if problems:
                broken.append(mutant.id)
    print(
        f"{len(mutants) - len(broken)} of {len(mutants)} mutants round-trip in "
        f"{time.monotonic() - start:.0f} s" + (f"; broken: {', '.join(broken)}" if broken else "")
    )
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
