"""Find x / scale ties: slab values whose e4m3 code depends on computing the quotient as the
contract says (scale = amax / 448 and x / scale, both f32 divisions) rather than exactly (in
f64, or as x * 448 / amax).

    python -m tlkv_conformance.generators.e4m3_ties [--count 8] [--min-amax 0.25] [--max-amax 64]

A tie is an element whose exact quotient x * 448 / amax lies exactly midway between two e4m3
values: rounded to nearest even from there it takes the even code, while the f32 quotient,
moved off the midpoint by the rounding of scale, takes the neighbour. The search enumerates,
for every normal f16 amax, every e4m3 midpoint m and x = m * amax / 448, keeping the x that are
f16 values themselves and whose two codes differ. Deterministic; the ones printed are committed
as cases (cases/writer-v2.yaml, f32-division-ties), so a writer computing in f64 fails every
run, not one in ten million elements.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Iterator
from fractions import Fraction

import numpy as np
from tlkv_conformance import oracle

E4M3_VALUES = [
    Fraction(float(v)) for v in oracle.e4m3_codes_to_f32(np.arange(0x7F, dtype=np.uint8))
]
MIDPOINTS = [(a + b) / 2 for a, b in itertools.pairwise(E4M3_VALUES)]


def _f16(value: Fraction) -> int | None:
    """The f16 bits of `value` if it is exactly an f16, else None."""
    as_f16 = np.float16(float(value))
    return int(np.array([as_f16]).view(np.uint16)[0]) if Fraction(float(as_f16)) == value else None


def ties(min_amax: float, max_amax: float) -> Iterator[tuple[int, int, int, int]]:
    """(amax f16 bits, x f16 bits, code of the f32 quotient, code of the exact quotient)."""
    for amax_bits in range(0x0400, 0x7C00):
        amax = Fraction(float(np.uint16(amax_bits).view(np.float16)))
        if amax < min_amax:
            continue
        if amax > max_amax:
            break
        scale = np.float32(np.float32(float(amax)) / np.float32(448))
        for midpoint in MIDPOINTS:
            x = midpoint * amax / 448
            if x > amax:
                break
            x_bits = _f16(x)
            if x_bits is None:
                continue
            in_f32 = oracle.f32_to_e4m3_codes(np.array([np.float32(float(x)) / scale]))[0]
            exact = oracle.f32_to_e4m3_codes(np.array([np.float32(float(midpoint))]))[0]
            if in_f32 != exact:
                yield amax_bits, x_bits, int(in_f32), int(exact)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tlkv_conformance.generators.e4m3_ties")
    parser.add_argument("--count", type=int, default=8)
    parser.add_argument("--min-amax", type=float, default=0.25, help="realistic magnitudes")
    parser.add_argument("--max-amax", type=float, default=64.0)
    args = parser.parse_args(argv)
    found = 0
    for amax, x, in_f32, exact in ties(args.min_amax, args.max_amax):
        print(
            f"amax 0x{amax:04X} ({float(np.uint16(amax).view(np.float16))!r}), x 0x{x:04X} "
            f"({float(np.uint16(x).view(np.float16))!r}): f32 quotient -> 0x{in_f32:02X}, "
            f"exact -> 0x{exact:02X}"
        )
        found += 1
        if found == args.count:
            break
    return 0 if found else 1


if __name__ == "__main__":
    sys.exit(main())
