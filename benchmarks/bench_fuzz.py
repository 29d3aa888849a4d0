"""Fuzzing throughput: examples per second of each property, for each adapter.

    .venv/bin/python benchmarks/bench_fuzz.py [--repeats R] [--impl IMPL ...]

Runs conformance/test_fuzz.py with the `ci` profile (150 derandomized examples per property)
against each implementation, R times, and prints the median examples per second of each
property's generate phase, as hypothesis's statistics report it. The defaults are the bundled
Python reference and the bundled C reference through ctypes (isolated and in-process), built
into a temporary directory.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tlkv_conformance.references.clib.build import build_library  # noqa: E402 - after the path is set

PROFILE = "ci"
EXAMPLES = 150
_TEST = re.compile(r"^conformance/test_fuzz\.py::(\w+)\[")
_PHASE = re.compile(r"during generate phase \(([\d.]+) seconds\)")


def _throughput(impl: str, extra: list[str]) -> dict[str, float]:
    """Examples per second of each property in one run."""
    command = [
        sys.executable,
        "-m",
        "pytest",
        "conformance/test_fuzz.py",
        f"--impl={impl}",
        f"--hypothesis-profile={PROFILE}",
        "--hypothesis-show-statistics",
        "-q",
        "-p",
        "no:cacheprovider",
        *extra,
    ]
    output = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=True).stdout
    rates, test = {}, None
    for line in output.splitlines():
        if match := _TEST.match(line):
            test = match.group(1)
        elif (match := _PHASE.search(line)) and test:
            rates[test] = EXAMPLES / max(float(match.group(1)), 1e-9)
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--impl", action="append", help="an --impl value (repeatable)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        if args.impl:
            runs = [(impl, []) for impl in args.impl]
        else:
            library = build_library(Path(workdir))
            runs = [
                ("ref", []),
                (f"ctypes:{library}", []),
                (f"ctypes:{library}", ["--isolation=inprocess"]),
            ]
        for impl, extra in runs:
            samples = [_throughput(impl, extra) for _ in range(args.repeats)]
            name = impl if not extra else f"{impl} {' '.join(extra)}"
            print(f"{name}  (median of {args.repeats}, examples per second)")
            for test in samples[0]:
                rate = statistics.median(s[test] for s in samples if test in s)
                print(f"  {test:58s} {rate:8.0f}")


if __name__ == "__main__":
    main()
