"""Lattice tools for the zero-hash search (`tlkv_conformance.generators.zero_hash_search`):
exact integral LLL, Babai's nearest plane in exact rationals, and Fincke-Pohst enumeration of
the lattice vectors close to a target, steered by a floating Gram-Schmidt.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from fractions import Fraction


def lll_reduce(
    basis: Sequence[Sequence[int]], delta: tuple[int, int] = (99, 100)
) -> list[list[int]]:
    """LLL-reduce the rows of ``basis`` (linearly independent) with exact integer arithmetic.

    This is the integral LLL of Cohen, *A Course in Computational Algebraic Number Theory*,
    Algorithm 2.6.7: instead of the rational Gram-Schmidt coefficients ``mu`` it keeps
    ``lam[i][j] = d_{j+1} * mu[i][j]`` and the Gram determinants ``d_i``, which are integers, so
    nothing is rounded and the result is the same on every machine.  ``delta`` is the Lovasz
    constant as a fraction (99/100 gives a well reduced basis at a small extra cost).
    """
    b = [list(row) for row in basis]
    n = len(b)
    if n == 0:
        return b
    num, den = delta

    def dot(u: Sequence[int], v: Sequence[int]) -> int:
        return sum(x * y for x, y in zip(u, v, strict=True))

    # d[0] = 1 and d[i + 1] = Gram determinant of the first i + 1 rows (Cohen's d_i, shifted).
    d = [1] + [0] * n
    lam = [[0] * n for _ in range(n)]
    d[1] = dot(b[0], b[0])
    if d[1] == 0:
        raise ValueError("basis rows are linearly dependent")

    def reduce(k: int, j: int) -> None:
        # Size-reduce row k against row j so that |mu[k][j]| <= 1/2.
        if 2 * abs(lam[k][j]) > d[j + 1]:
            q = (2 * lam[k][j] + d[j + 1]) // (2 * d[j + 1])  # round(lam / d), exact
            bk, bj = b[k], b[j]
            for i in range(len(bk)):
                bk[i] -= q * bj[i]
            lam[k][j] -= q * d[j + 1]
            for i in range(j):
                lam[k][i] -= q * lam[j][i]

    def swap(k: int, kmax: int) -> None:
        # Exchange rows k-1 and k and update lam and d exactly (Cohen's SWAPI).
        b[k], b[k - 1] = b[k - 1], b[k]
        for j in range(k - 1):
            lam[k][j], lam[k - 1][j] = lam[k - 1][j], lam[k][j]
        lk = lam[k][k - 1]
        new_d = (d[k - 1] * d[k + 1] + lk * lk) // d[k]
        for i in range(k + 1, kmax + 1):
            t = lam[i][k]
            lam[i][k] = (d[k + 1] * lam[i][k - 1] - lk * t) // d[k]
            lam[i][k - 1] = (new_d * t + lk * lam[i][k]) // d[k + 1]
        d[k] = new_d

    k, kmax = 1, 0
    while k < n:
        if k > kmax:
            # Incremental Gram-Schmidt for the new row k, in integers.
            kmax = k
            for j in range(k + 1):
                u = dot(b[k], b[j])
                for i in range(j):
                    u = (d[i + 1] * u - lam[k][i] * lam[j][i]) // d[i]
                if j < k:
                    lam[k][j] = u
                else:
                    if u == 0:
                        raise ValueError("basis rows are linearly dependent")
                    d[k + 1] = u
        reduce(k, k - 1)
        # Lovasz condition, multiplied out so it stays in integers:
        # d_k * d_{k-2} >= delta * d_{k-1}^2 - lam^2  (Cohen's indices).
        if den * d[k + 1] * d[k - 1] < num * d[k] * d[k] - den * lam[k][k - 1] ** 2:
            swap(k, kmax)
            k = max(1, k - 1)
        else:
            for j in range(k - 2, -1, -1):
                reduce(k, j)
            k += 1
    return b


def _gram_schmidt(
    basis: Sequence[Sequence[int]],
) -> tuple[list[list[float]], list[list[float]], list[float]]:
    """Floating Gram-Schmidt of a (reduced, hence well conditioned) basis: ``b*``, ``mu``,
    ``|b*|^2``.

    Floats are fine here: they only steer the enumeration, and every candidate it produces is
    re-checked in exact integers; a small slack on the radius covers rounding at the boundary.
    """
    n = len(basis)
    bstar: list[list[float]] = []
    bsq: list[float] = []
    mu = [[0.0] * n for _ in range(n)]
    for i in range(n):
        v = [float(x) for x in basis[i]]
        for j in range(i):
            mu[i][j] = sum(float(x) * y for x, y in zip(basis[i], bstar[j], strict=True)) / bsq[j]
            v = [a - mu[i][j] * c for a, c in zip(v, bstar[j], strict=True)]
        bstar.append(v)
        bsq.append(sum(x * x for x in v))
    return bstar, mu, bsq


def babai_nearest_plane(basis: Sequence[Sequence[int]], target: Sequence[int]) -> list[int]:
    """A lattice vector near ``target`` by Babai's nearest-plane rounding, in exact rationals.

    Used once per search to pull a huge target (a particular solution has a ~2^64 entry) next
    to the lattice, so that the floating-point enumeration only ever sees small numbers.
    """
    n = len(basis)
    bstar: list[list[Fraction]] = []
    for i in range(n):
        v = [Fraction(x) for x in basis[i]]
        for j in range(i):
            m = sum((x * y for x, y in zip(basis[i], bstar[j], strict=True)), Fraction(0))
            m /= sum((y * y for y in bstar[j]), Fraction(0))
            v = [a - m * c for a, c in zip(v, bstar[j], strict=True)]
        bstar.append(v)
    residual = [Fraction(x) for x in target]
    lattice_vector = [0] * len(target)
    for j in range(n - 1, -1, -1):
        num = sum((x * y for x, y in zip(residual, bstar[j], strict=True)), Fraction(0))
        q = round(num / sum((y * y for y in bstar[j]), Fraction(0)))
        if q:
            residual = [r - q * b for r, b in zip(residual, basis[j], strict=True)]
            lattice_vector = [v + q * b for v, b in zip(lattice_vector, basis[j], strict=True)]
    return lattice_vector


def close_vectors(
    basis: Sequence[Sequence[int]],
    target: Sequence[int],
    radius: float,
    max_nodes: int = 2_000_000,
) -> Iterator[list[int]]:
    """Yield every lattice vector ``v`` (integer combination of ``basis`` rows, full rank) with
    ``|target - v| <= radius``, found by depth-first Fincke-Pohst enumeration.

    The basis should be LLL-reduced, otherwise the search tree is huge.  Stops (silently) after
    ``max_nodes`` tree nodes so that a hopeless radius cannot hang the caller.
    """
    n = len(basis)
    # Enumerate around a small residual (exact shift), never around a huge float target.
    shift = babai_nearest_plane(basis, target)
    target = [t - s for t, s in zip(target, shift, strict=True)]
    bstar, mu, bsq = _gram_schmidt(basis)
    # Coordinates of the target along the Gram-Schmidt directions: target = sum tau_j b*_j.
    tau = [
        sum(float(t) * c for t, c in zip(target, bstar[j], strict=True)) / bsq[j] for j in range(n)
    ]
    r2 = radius * radius * (1.0 + 1e-9) + 1e-6
    coeffs = [0] * n
    nodes = 0

    def walk(level: int, partial: float) -> Iterator[list[int]]:
        nonlocal nodes
        # Centre of the admissible interval for coefficient x_level given the deeper ones.
        centre = tau[level] - sum(mu[i][level] * coeffs[i] for i in range(level + 1, n))
        room = (r2 - partial) / bsq[level]
        if room < 0:
            return
        half = math.sqrt(room)
        # Zig-zag from the centre outwards so that close vectors tend to come out first.
        lo, hi = math.ceil(centre - half), math.floor(centre + half)
        start = round(centre)
        order: list[int] = []
        for step in range(0, max(start - lo, hi - start) + 1):
            for x in (start + step, start - step) if step else (start,):
                if lo <= x <= hi:
                    order.append(x)
        for x in order:
            nodes += 1
            if nodes > max_nodes:
                return
            coeffs[level] = x
            cost = partial + (centre - x) ** 2 * bsq[level]
            if level == 0:
                yield [shift[c] + sum(coeffs[i] * basis[i][c] for i in range(n)) for c in range(n)]
            else:
                yield from walk(level - 1, cost)
        coeffs[level] = 0

    yield from walk(n - 1, 0.0)
