"""What isolating a C library in a worker process costs, against calling it in-process.

    .venv/bin/python benchmarks/bench_ctypes.py [--lib PATH.so] [--calls N] [--repeats R]

Prints the median per-call time of tl_kv_block_hash and of a small import (one 16-token block,
then its release) through the ctypes adapter both ways, and the median wall time of a full
conformance run (`pytest --impl=ctypes:LIB`, the default test paths) both ways, with the
ratios. The library defaults to the bundled C reference, built into a temporary directory.
Targets (docs/ctypes.md): a full run isolated at most 2x in-process, and at most 30 s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tlkv_conformance import oracle  # noqa: E402 - after the path is set
from tlkv_conformance.adapters import AdapterSettings, parse_impl  # noqa: E402
from tlkv_conformance.adapters._ctypes_adapter import CtypesAdapter  # noqa: E402

ISOLATIONS = ("worker", "inprocess")
GEOMETRY = oracle.Geometry(16, 1, 1, 8)  # one block: 28 + 12 + 512 + 4 = 556 bytes in v1


def _median_per_call(action: Callable[[], object], calls: int, repeats: int) -> float:
    """Median over `repeats` of the mean time of one `action` over `calls` calls, in s."""
    for _ in range(min(calls, 200)):  # warm up (the worker starts, caches fill)
        action()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            action()
        times.append((time.perf_counter() - start) / calls)
    return statistics.median(times)


def _measure(adapter: CtypesAdapter, calls: int, repeats: int) -> dict[str, float]:
    values = np.linspace(-1, 1, GEOMETRY.n_elements, dtype=np.float32)
    block = oracle.Block(0, GEOMETRY.block_tokens, values.reshape(GEOMETRY.values_shape))
    envelope = oracle.encode(GEOMETRY, [block], 1)
    tokens = list(range(16))
    with adapter.open_pool(GEOMETRY, 2) as pool:

        def import_and_release() -> None:
            (new,) = pool.import_envelope(envelope, 2)
            pool.release(new)

        return {
            "tl_kv_block_hash": _median_per_call(
                lambda: adapter.block_hash(0, tokens), calls, repeats
            ),
            "tl_kv_import + release": _median_per_call(import_and_release, calls, repeats),
        }


def per_call(lib: Path, calls: int, repeats: int) -> dict[str, dict[str, float]]:
    results: dict[str, dict[str, float]] = {}
    for isolation in ISOLATIONS:
        adapter = CtypesAdapter(parse_impl(f"ctypes:{lib}"), AdapterSettings(isolation=isolation))
        try:
            results[isolation] = _measure(adapter, calls, repeats)
        finally:
            adapter.close()
    return results


def full_run(lib: Path, isolation: str) -> tuple[float, str]:
    """Wall time of one conformance run, and pytest's summary line."""
    command = [
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
        f"--impl=ctypes:{lib}", f"--isolation={isolation}",
    ]  # fmt: skip
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    lines = done.stdout.strip().splitlines()
    return elapsed, lines[-1] if lines else f"exit {done.returncode}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lib", type=Path, help="library to measure (default: the reference)")
    parser.add_argument("--calls", type=int, default=5000, help="calls per repetition")
    parser.add_argument("--repeats", type=int, default=5, help="repetitions (the median wins)")
    parser.add_argument("--runs", type=int, default=3, help="full conformance runs per mode")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="bench-ctypes-") as tmp:
        lib = args.lib
        if lib is None:
            from tlkv_conformance.references.clib.build import build_library

            lib = build_library(Path(tmp))
        lib = lib.resolve()
        print(f"library {lib}; python {sys.version.split()[0]}; {os.cpu_count()} cpus")

        print(f"\nper call (median of {args.repeats} x {args.calls} calls):")
        results = per_call(lib, args.calls, args.repeats)
        for name in results["worker"]:
            worker, inprocess = results["worker"][name], results["inprocess"][name]
            print(
                f"  {name:24} worker {worker * 1e6:7.1f} us   in-process "
                f"{inprocess * 1e6:7.1f} us   overhead {(worker - inprocess) * 1e6:6.1f} us "
                f"({worker / inprocess:.1f}x)"
            )

        print(f"\nfull conformance run (median of {args.runs}):")
        medians = {}
        for isolation in ISOLATIONS:
            runs = [full_run(lib, isolation) for _ in range(args.runs)]
            medians[isolation] = statistics.median(t for t, _ in runs)
            print(f"  {isolation:10} {medians[isolation]:6.2f} s   ({runs[-1][1]})")
        ratio = medians["worker"] / medians["inprocess"]
        verdict = "ok" if ratio <= 2 and medians["worker"] <= 30 else "OVER TARGET"
        print(f"  ratio worker / in-process: {ratio:.2f} (target <= 2, and <= 30 s): {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
