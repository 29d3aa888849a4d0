"""What a real geometry costs: the full gate through ctypes (worker isolation) against the
bundled C reference, at the corpus's own small geometries and restricted to one engine's
geometry (16 tokens, 32 layers, 8 KV heads, head_dim 128: 2 MiB per v1 block).

    python benchmarks/bench_geometry.py [--runs 3] [--geometry 16x32x8x128]

Prints each run's wall time, the medians and their ratio.
The machines are shared: quote medians, and the ratio rather than the seconds.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tlkv_conformance.references.clib.build import build_library  # noqa: E402

from selftest.mutation import TARGETS, one_geometry_patch  # noqa: E402
from selftest.support import patched_copy  # noqa: E402


def _gate(impl: str) -> tuple[float, str]:
    start = time.perf_counter()
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--impl={impl}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    elapsed = time.perf_counter() - start
    if run.returncode != 0:
        sys.exit(f"the gate failed against {impl}:\n{run.stdout[-2000:]}")
    return elapsed, run.stdout.strip().splitlines()[-1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--geometry", default="16x32x8x128")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch)
        small = build_library(out)
        source = patched_copy(TARGETS["c"], [one_geometry_patch(args.geometry)], out / "one.c")
        large = build_library(out, source=source)
        impls = {
            "small geometries": f"ctypes:{small}",
            args.geometry: f"ctypes:{large},geometry={args.geometry}",
        }
        times: dict[str, list[float]] = {name: [] for name in impls}
        for run in range(args.runs):
            for name, impl in impls.items():  # interleaved, so load hits both alike
                elapsed, summary = _gate(impl)
                times[name].append(elapsed)
                print(f"run {run + 1} {name:>18}: {elapsed:6.1f} s  ({summary})", flush=True)
    medians = {name: statistics.median(values) for name, values in times.items()}
    for name, median in medians.items():
        print(f"median {name:>18}: {median:6.1f} s")
    small_median, large_median = medians.values()
    print(f"ratio {args.geometry} / small geometries: {large_median / small_median:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
