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
   with small entries.  We LLL-reduce a basis (exact integer arithmetic) and enumerate the
   lattice vectors in a ball around ``d0`` (Schnorr-Euchner / Fincke-Pohst enumeration),
   smallest first; these lattice tools are in ``tlkv_conformance.generators._lattice``.

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

from ._lattice import close_vectors, lll_reduce

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
