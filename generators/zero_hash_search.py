"""Find realistic token blocks whose raw FNV-1a-64 block hash is exactly 0.

The block hash is ``H(parent, toks) = fnv1a64(le_u64(parent) || le_u32(toks[0]) || ...)`` with a
result of 0 replaced by 1.  To test that rule on the *first* block of a sequence we need
``parent = 0`` and ``B`` ordinary token ids whose raw FNV-1a-64 is 0.  A random block hits 0 with
probability 2^-64, so the block has to be constructed.  This module does that; run it as
``python -m tlkv_conformance.generators.zero_hash_search`` (see ``--help``).

How the search works, for a reader who has not seen it
------------------------------------------------------

1. FNV-1a is a chain of invertible steps.  One step is ``h' = (h XOR byte) * P mod 2^64`` with
   the odd prime ``P = 0x100000001B3``, so ``h = (h' * P^-1 mod 2^64) XOR byte``.  Given the
   bytes that come *after* some point we can therefore run the hash backwards from the wanted
   final value 0 and get the exact state that is needed at that point.

2. The block is split into a random prefix of tokens, a short "free" run of ``m`` tokens and a
   random suffix (all drawn from a seeded RNG, so the block looks like ordinary text).  Running
   the prefix forwards gives the state ``S`` entering the free run; running the suffix backwards
   from 0 gives the state ``T`` the free run has to leave.  What remains is a preimage problem:
   choose the low two bytes of ``m`` tokens (the high two bytes are 0, so each solved token is
   < 65536) such that the free run maps ``S`` to ``T``.  The free tokens are consecutive, and
   their high bytes are 0 rather than random, because step 3 is linear only for free bytes and
   zero bytes: a fixed non-zero byte in between would add an offset that depends on the state.

3. Linearise the XOR.  ``h XOR b`` only touches the low byte ``L = h & 0xFF``, so
   ``h XOR b = h + d`` with ``d = (L XOR b) - L``.  For a given ``L`` the reachable ``d`` are
   exactly the integers in ``[-L, 255 - L]`` (``b = L XOR (L + d)``), and a zero byte gives
   ``d = 0``.  Unrolling ``h_{j+1} = (h_j + d_j) * P`` over the ``n`` bytes of the run gives the
   exact identity::

       h_n = S * P^n + sum_j d_j * P^(n - j)   (mod 2^64)

   so the run maps ``S`` to ``T`` iff ``sum_j d_j c_j = T - S * P^n (mod 2^64)`` with
   ``c_j = P^(n - j)`` over the free positions ``j``.

4. That is a closest-vector problem.  The integer vectors ``d`` with ``sum d_j c_j = 0 mod 2^64``
   form a lattice of determinant 2^64; with ``k`` free bytes its short vectors have entries of
   about ``2^(64/k)``.  Any one solution ``d0`` of the congruence (a huge one is trivial, since
   every ``c_j`` is odd and so invertible) minus a lattice vector close to ``d0`` is a solution
   with small entries.  We LLL-reduce a basis (exact integer arithmetic, below) and enumerate
   the lattice vectors in a ball around ``d0`` (Schnorr-Euchner / Fincke-Pohst enumeration),
   smallest first.

5. Realise each candidate.  Whether ``d_j`` is reachable depends on the low byte of the real
   state at that moment, which depends on the earlier ``d``; so each candidate is simply replayed
   byte by byte, and it is kept only if every ``d_j`` lies in ``[-L_j, 255 - L_j]`` and the
   resulting tokens are in range.  Because the identity in (3) is exact, a candidate that
   replays is a true solution, no rounding involved.  If no candidate in the ball works, the
   prefix/suffix are re-drawn (the next context from the same seeded RNG).

Why ``m = 5`` by default: 10 free bytes give 80 bits of choice against a 64-bit target, so
about 2^16 byte strings per context solve it; the shortest candidates have ``|d|`` of a few
tens, a quarter or so of them replay, and a 16-token block is found in a few milliseconds.
Fewer (``m = 4``, 64 bits of choice) leaves about one solution per context, so it needs a few
contexts; more makes the short ``d`` smaller, so the solved tokens get smaller and less varied
and the ball to search gets crowded.  The 8-free-byte case is the one exhaustive search here:
``--zero-u64`` (8 free bytes, no token constraint, ``S`` = the FNV offset basis, ``T`` = 0)
enumerates every lattice vector in the ball that contains the whole box ``|d_j| <= 255`` and so
lists *every* u64 ``p`` with ``fnv1a64(le_u64(p)) == 0``.

Everything is deterministic for a given ``--seed``: the RNG is ``random.Random(seed)``, LLL and
the candidate order use exact integers, and ties are broken by the candidate vector itself.
Every printed result is re-checked with a plain byte-by-byte FNV-1a-64 before it is printed.
"""

from __future__ import annotations

import argparse
import math
import random
import struct
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction

FNV64_OFFSET_BASIS = 0xCBF29CE484222325
FNV64_PRIME = 0x100000001B3
MOD64 = 1 << 64
MASK64 = MOD64 - 1
# P is odd, so it has an inverse mod 2^64; this is what makes every FNV-1a step reversible.
FNV64_PRIME_INV = pow(FNV64_PRIME, -1, MOD64)
ZERO_REPLACEMENT = 1

# Solved tokens use only their two low bytes, so they are always below this.
SOLVED_TOKEN_LIMIT = 1 << 16


# --------------------------------------------------------------------------------------------
# Plain FNV-1a-64 and the block hash (the independent check; no lattice code is involved).
# --------------------------------------------------------------------------------------------


def fnv1a64(data: bytes, state: int = FNV64_OFFSET_BASIS) -> int:
    """FNV-1a-64 of ``data``, continuing from ``state`` (the offset basis for a fresh hash)."""
    h = state
    for byte in data:
        h = ((h ^ byte) * FNV64_PRIME) & MASK64
    return h


def fnv1a64_unstep(state_after: int, byte: int) -> int:
    """The state before one FNV-1a step, given the state after it and the byte it consumed."""
    return ((state_after * FNV64_PRIME_INV) & MASK64) ^ byte


def hash_input(parent: int, tokens: Sequence[int]) -> bytes:
    """The bytes the block hash covers: ``le_u64(parent) || le_u32(token) ...``."""
    return struct.pack(f"<Q{len(tokens)}I", parent, *tokens)


def block_hash(parent: int, tokens: Sequence[int]) -> int:
    """``H(parent, tokens)``: the raw FNV-1a-64 of :func:`hash_input`, with 0 replaced by 1."""
    return fnv1a64(hash_input(parent, tokens)) or ZERO_REPLACEMENT


# --------------------------------------------------------------------------------------------
# Lattice tools: exact integral LLL, floating Gram-Schmidt for enumeration.
# --------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------
# The FNV-1a preimage of a run of bytes: the linear model and its lattice.
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunSolution:
    """A byte string that takes the FNV state from ``start`` to ``end``, and its XOR offsets."""

    data: bytes
    offsets: tuple[int, ...]


def run_coefficients(layout: Sequence[bool]) -> list[int]:
    """``c_j = P^(n - j) mod 2^64`` for every free position ``j`` of a run of ``n`` bytes.

    ``layout[j]`` is True where the byte is free and False where it is fixed to 0 (a zero byte
    XORs nothing in, so its offset is always 0 and it contributes only a factor P).
    """
    n = len(layout)
    return [pow(FNV64_PRIME, n - j, MOD64) for j, free in enumerate(layout) if free]


def kernel_basis(coeffs: Sequence[int]) -> list[list[int]]:
    """A basis of the lattice ``{d in Z^k : sum d_j c_j = 0 mod 2^64}`` (all ``c_j`` odd).

    Row ``j < k-1`` is ``e_j - (c_j / c_{k-1} mod 2^64) e_{k-1}`` and the last row is
    ``2^64 e_{k-1}``; the determinant is 2^64, the index of the kernel in Z^k.
    """
    k = len(coeffs)
    pivot_inv = pow(coeffs[-1], -1, MOD64)
    rows: list[list[int]] = []
    for j in range(k - 1):
        row = [0] * k
        row[j] = 1
        row[-1] = -((coeffs[j] * pivot_inv) % MOD64)
        rows.append(row)
    last = [0] * k
    last[-1] = MOD64
    rows.append(last)
    return rows


def replay_offsets(start: int, layout: Sequence[bool], offsets: Sequence[int]) -> bytes | None:
    """Turn XOR offsets into bytes by replaying the hash from ``start``, or None if impossible.

    At a free position with current low byte ``L`` the offset ``d`` is reachable iff
    ``0 <= L + d <= 255``, and then the byte is ``L XOR (L + d)``.
    """
    h = start
    out = bytearray()
    it = iter(offsets)
    for free in layout:
        byte = 0
        if free:
            low = h & 0xFF
            x = low + next(it)
            if not 0 <= x <= 0xFF:
                return None
            byte = low ^ x
        out.append(byte)
        h = ((h ^ byte) * FNV64_PRIME) & MASK64
    return bytes(out)


def solve_run(
    start: int,
    end: int,
    layout: Sequence[bool],
    radius: float,
    max_nodes: int = 2_000_000,
) -> Iterator[RunSolution]:
    """Yield byte runs (zero where ``layout`` is False) taking the FNV state ``start`` to ``end``.

    Every one is exact; candidates are tried in order of increasing ``|d|`` (ties broken by the
    vector itself, for determinism), out to Euclidean ``radius``.
    """
    coeffs = run_coefficients(layout)
    if not coeffs:
        return
    n = len(layout)
    # sum d_j c_j must equal this, by the unrolled identity h_n = S P^n + sum d_j P^(n-j).
    want = (end - start * pow(FNV64_PRIME, n, MOD64)) % MOD64
    particular = [0] * len(coeffs)
    particular[-1] = (want * pow(coeffs[-1], -1, MOD64)) % MOD64
    reduced = lll_reduce(kernel_basis(coeffs))
    candidates = []
    for v in close_vectors(reduced, particular, radius, max_nodes):
        d = [p - x for p, x in zip(particular, v, strict=True)]
        norm2 = sum(x * x for x in d)
        if norm2 <= radius * radius:
            candidates.append((norm2, d))
    candidates.sort()
    for _, d in candidates:
        data = replay_offsets(start, layout, d)
        if data is not None:
            # Belt and braces: the identity is exact, but check with the plain hash anyway.
            assert fnv1a64(data, start) == end
            yield RunSolution(data, tuple(d))


# --------------------------------------------------------------------------------------------
# The two searches the suite needs.
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ZeroBlock:
    """A first block (parent 0) whose raw FNV-1a-64 is 0, and how it was found."""

    tokens: tuple[int, ...]
    free_start: int
    free_tokens: int
    contexts_tried: int
    candidates_checked: int


def _random_tokens(rng: random.Random, count: int, min_token: int, max_token: int) -> list[int]:
    return [rng.randrange(min_token, max_token) for _ in range(count)]


def find_zero_first_block(
    block_tokens: int = 16,
    max_token: int = 100_000,
    min_token: int = 1000,
    seed: int = 0,
    free_tokens: int = 5,
    max_contexts: int = 200,
) -> ZeroBlock:
    """Find ``block_tokens`` token ids in ``[min_token, max_token)`` with
    ``fnv1a64(le_u64(0) || le_u32 tokens) == 0``.

    ``free_tokens`` consecutive tokens (at a seed-chosen offset) are solved for; the others are
    random.  Raises ``RuntimeError`` if ``max_contexts`` random contexts all fail.
    """
    if not 0 <= min_token < max_token <= 1 << 32:
        raise ValueError("need 0 <= min_token < max_token <= 2^32")
    if min_token >= SOLVED_TOKEN_LIMIT:
        raise ValueError(f"solved tokens are < {SOLVED_TOKEN_LIMIT}; lower --min-token")
    free_tokens = min(free_tokens, block_tokens)
    if free_tokens < 1:
        raise ValueError("need at least one token to solve for")
    solved_limit = min(max_token, SOLVED_TOKEN_LIMIT)
    # Per solved token: two free low bytes, two zero high bytes.
    layout = [True, True, False, False] * free_tokens
    # 255 per free byte bounds every reachable offset vector, so no solution lies outside this.
    box_radius = 255.0 * math.sqrt(2 * free_tokens)
    if free_tokens == block_tokens:
        # Nothing is random, so every context would be the same one: one try is all there is.
        max_contexts = 1
    rng = random.Random(seed)
    checked = 0
    for context in range(1, max_contexts + 1):
        free_start = rng.randrange(block_tokens - free_tokens + 1)
        prefix = _random_tokens(rng, free_start, min_token, max_token)
        suffix = _random_tokens(rng, block_tokens - free_tokens - free_start, min_token, max_token)
        start = fnv1a64(hash_input(0, prefix))
        end = 0
        for byte in reversed(struct.pack(f"<{len(suffix)}I", *suffix)):
            end = fnv1a64_unstep(end, byte)
        # Grow the ball: small offsets are the likeliest to replay, so look there first.
        radius = 64.0
        seen: set[bytes] = set()
        while True:
            for solution in solve_run(start, end, layout, min(radius, box_radius), 200_000):
                if solution.data in seen:
                    continue
                seen.add(solution.data)
                checked += 1
                middle = list(struct.unpack(f"<{free_tokens}I", solution.data))
                if all(min_token <= t < solved_limit for t in middle):
                    return ZeroBlock(
                        tuple(prefix + middle + suffix), free_start, free_tokens, context, checked
                    )
            if radius >= box_radius:
                break
            radius *= 2
    raise RuntimeError(f"no zero-hash block found in {max_contexts} contexts")


def find_zero_u64() -> list[int]:
    """Every u64 ``p`` with ``fnv1a64(le_u64(p)) == 0``, by exhausting the offset box.

    Eight free bytes from the offset basis to 0: each offset is in ``[-255, 255]``, so every
    solution lies in the ball of radius ``255 * sqrt(8)`` around the particular solution, and
    enumerating that ball (no node limit) finds them all.
    """
    layout = [True] * 8
    found = [
        struct.unpack("<Q", s.data)[0]
        for s in solve_run(FNV64_OFFSET_BASIS, 0, layout, 255.0 * math.sqrt(8), max_nodes=10**9)
    ]
    return sorted(found)


# --------------------------------------------------------------------------------------------
# Command line.
# --------------------------------------------------------------------------------------------


def _hex64(value: int) -> str:
    return f'"0x{value:016x}"'


def _emit_block(result: ZeroBlock, args: argparse.Namespace, elapsed: float) -> list[str]:
    tokens = list(result.tokens)
    raw = fnv1a64(hash_input(0, tokens))
    if raw != 0 or any(not args.min_token <= t < args.max_token for t in tokens):
        raise AssertionError("internal error: result does not verify")  # never print a bad case
    h0 = block_hash(0, tokens)
    # The chained next block: any tokens will do; draw them from the same seed for variety.
    nxt_rng = random.Random(f"next-block:{args.seed}")
    nxt = _random_tokens(nxt_rng, args.block_tokens, args.min_token, args.max_token)
    h1 = block_hash(h0, nxt)
    free_end = result.free_start + result.free_tokens
    return [
        f"# generators.zero_hash_search --block-tokens {args.block_tokens} "
        f"--max-token {args.max_token} --min-token {args.min_token} "
        f"--free-tokens {args.free_tokens} --seed {args.seed}",
        f"# solved tokens [{result.free_start}, {free_end}); others random; "
        f"{result.contexts_tried} context(s), {result.candidates_checked} candidate(s), "
        f"{elapsed:.2f} s",
        "parent: 0",
        f"tokens: [{', '.join(str(t) for t in tokens)}]",
        f"check:  # plain FNV-1a-64 over le_u64(0) || le_u32(tokens), {8 + 4 * len(tokens)} bytes",
        f"  raw_fnv1a64: {_hex64(raw)}",
        f"  block_hash: {_hex64(h0)}  # 0 replaced by 1",
        "next_block:  # chained: its parent is the first block's hash",
        f"  parent: {_hex64(h0)}",
        f"  tokens: [{', '.join(str(t) for t in nxt)}]",
        f"  block_hash: {_hex64(h1)}",
    ]


def _emit_u64(values: list[int], elapsed: float) -> list[str]:
    lines = [
        "# every u64 p with fnv1a64(le_u64(p)) == 0 (exhaustive lattice enumeration), "
        f"{elapsed:.2f} s",
        "zero_u64_inputs:",
    ]
    for p in values:
        data = struct.pack("<Q", p)
        if fnv1a64(data) != 0:
            raise AssertionError("internal error: result does not verify")
        lines += [
            f"  - parent: {_hex64(p)}  # = {p}",
            f'    bytes: "{data.hex(" ")}"',
            f"    raw_fnv1a64: {_hex64(fnv1a64(data))}",
        ]
    return lines


def main(argv: Sequence[str] | None = None, out: Callable[[str], object] = print) -> int:
    """Command-line entry point: print a verified zero-hash first block (or the u64 inputs)."""
    parser = argparse.ArgumentParser(
        prog="python -m tlkv_conformance.generators.zero_hash_search",
        description="Find a parent-0 token block whose raw FNV-1a-64 block hash is 0.",
    )
    parser.add_argument("--block-tokens", type=int, default=16, help="tokens per block (B)")
    parser.add_argument("--max-token", type=int, default=100_000, help="token ids are below this")
    parser.add_argument("--min-token", type=int, default=1000, help="token ids are at least this")
    parser.add_argument("--free-tokens", type=int, default=5, help="tokens solved for (>= 4)")
    parser.add_argument("--seed", type=int, default=0, help="RNG seed; same seed, same result")
    parser.add_argument(
        "--zero-u64",
        action="store_true",
        help="instead, list every u64 p with fnv1a64(le_u64(p)) == 0",
    )
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    if args.zero_u64:
        values = find_zero_u64()
        lines = _emit_u64(values, time.perf_counter() - t0)
    else:
        try:
            result = find_zero_first_block(
                block_tokens=args.block_tokens,
                max_token=args.max_token,
                min_token=args.min_token,
                seed=args.seed,
                free_tokens=args.free_tokens,
            )
        except (RuntimeError, ValueError) as exc:
            print(f"zero_hash_search: {exc}", file=sys.stderr)
            return 1
        lines = _emit_block(result, args, time.perf_counter() - t0)
    for line in lines:
        out(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
