"""Comparisons a case makes, each failing with a message that names what differs."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, NoReturn, TypeVar

import numpy as np
import pytest

from . import oracle
from .adapters import PoolHandle, ReadBack, values_digest
from .diff import E4M3_NAN, ValueSource, envelope_diff, nan_tolerated, values_diff
from .errors import CallerArrayChanged, ImplementationFault, NotObservable, Refused, WrongCount
from .evidence import (
    CountEvidence,
    EnvelopeEvidence,
    Evidence,
    FaultEvidence,
    KnownMistake,
    PoolChangeEvidence,
    RefusalEvidence,
    ValuesEvidence,
)

T = TypeVar("T")
__all__ = [
    "CaseFailure",
    "PoolSnapshot",
    "ValueSource",
    "compare_envelopes",
    "compare_readback",
    "compare_snapshots",
    "compare_values",
    "expect_free",
    "free_count",
    "in_pool_precision",
    "is_not_applicable",
    "not_applicable",
    "refused_with",
    "snapshot",
]


class CaseFailure(AssertionError):
    """The implementation's behaviour differs from the expectation; the message says how, and
    `evidence` keeps what the check saw, for the diagnosis (tlkv_conformance.diagnosis)."""

    def __init__(self, message: str, evidence: Evidence | None = None) -> None:
        super().__init__(message)
        self.evidence = evidence

    def prefixed(self, prefix: str, suffix: str = "") -> CaseFailure:
        """The same failure, its message between `prefix` and `suffix`."""
        return CaseFailure(f"{prefix}{self}{suffix}", self.evidence)


def not_applicable(reason: str) -> NoReturn:
    """Skip the running test as meaning nothing for its implementation: its way in cannot
    observe what the test checks, it does not read or write the version, its pool has another
    geometry. The gate then counts the test's requirements as not applicable to it; any other
    skip leaves them applicable but not shown (docs/report.md, "What a run must show")."""
    skip = pytest.skip.Exception(reason)
    skip.not_applicable = True  # type: ignore[attr-defined]
    raise skip


def is_not_applicable(exc: BaseException) -> bool:
    """Whether `exc` is a skip raised by not_applicable()."""
    return getattr(exc, "not_applicable", False) is True


@contextmanager
def calls_to_testee(who: str = "") -> Iterator[None]:
    """Calls into the testee: a refusal or fault where none was expected fails the test with
    one line (prefixed with `who`), and what this way in cannot observe skips it as not
    applicable."""
    prefix = f"{who}: " if who else ""
    try:
        yield
    except NotObservable as exc:
        not_applicable(f"{prefix}{exc}")
    except ImplementationFault as exc:
        evidence = (
            KnownMistake(
                "write-into-caller",
                "write changes the caller's array (the contract says it copies)",
                ("POOL-WRITE-COPIES",),
            )
            if isinstance(exc, CallerArrayChanged)
            else FaultEvidence.of(exc)
        )
        raise CaseFailure(f"{prefix}implementation fault: {exc}", evidence) from None
    except Refused as refusal:
        raise CaseFailure(
            f"{prefix}unexpected refusal: {refusal}",
            RefusalEvidence(frozenset(), frozenset(), refusal.code),
        ) from None
    except WrongCount as exc:
        raise CaseFailure(f"{prefix}{exc}", KnownMistake(*WRONG_COUNT, exc.reqs)) from None


# A count the transfer fixes answered wrongly: the cause the diagnosis names (not a fault).
WRONG_COUNT = ("xfer-counts", "PushKv counts wrongly what it stored and reused")


def refused_with(
    expected: str, call: str, action: Callable[[], T], rules: Iterable[str] = ()
) -> None:
    """Run `action`, which must be refused with `expected` (`rules`: the requirements that
    demand the refusal, for the diagnosis). A fault instead of the status (an exception, a
    crash, a hang, a status breach such as *n_out left non-zero) is a failure on input
    breaking those rules."""
    try:
        result = action()
    except ImplementationFault as fault:
        evidence = FaultEvidence.of_operation(fault) or RefusalEvidence(
            frozenset(rules), frozenset({expected}), "fault", fault=str(fault)
        )
        raise CaseFailure(f"{call}: implementation fault: {fault}", evidence) from None
    except Refused as refusal:
        if refusal.code != expected:
            raise CaseFailure(
                f"{call}: refused with {refusal.code}, expected {expected}"
                + (f" ({refusal.detail})" if refusal.detail else ""),
                RefusalEvidence(frozenset(rules), frozenset({expected}), refusal.code),
            ) from None
        return
    raise CaseFailure(
        f"{call}: succeeded (returned {result!r}), expected refusal {expected}",
        RefusalEvidence(frozenset(rules), frozenset({expected}), None),
    )


def in_pool_precision(values: np.ndarray, dtype: str) -> np.ndarray:
    """What a pool of `dtype` reads back for f32 `values`."""
    values = np.asarray(values, dtype=np.float32)
    return oracle.round_to_f16(values) if dtype == "f16" else values


def compare_values(
    expected: np.ndarray,
    actual: np.ndarray,
    where: str,
    dtype: str = "f32",
    *,
    block: str | None = None,
    source: ValueSource | None = None,
    nan: str = "any",
    n_tokens: int | None = None,
    written: np.ndarray | None = None,
    released: Sequence[np.ndarray] = (),
) -> None:
    """Bit-exact comparison of f32 values (so -0.0 counts; NaNs as `nan` says), reported in
    the pool's precision `dtype`; `block`, `source`, `nan` as for
    `tlkv_conformance.diff.values_diff`; `n_tokens` (the block's fill), `written` (what a
    write gave the pool) and `released` (what blocks released before held) for the diagnosis."""
    problem = values_diff(expected, actual, dtype, block=block, source=source, nan=nan)
    if problem is not None:
        evidence = ValuesEvidence(
            expected,
            actual,
            expected.shape[-2] if n_tokens is None else n_tokens,
            dtype,
            None if source is None else (source.data, source.record_offset),
            written,
            tuple(released),
        )
        raise CaseFailure(f"{where}: {problem}", evidence)


def compare_readback(
    expected: oracle.Block,
    got: ReadBack,
    dtype: str,
    where: str,
    *,
    block: str | None = None,
    source: ValueSource | None = None,
    nan: str = "any",
    written: np.ndarray | None = None,
    released: Sequence[np.ndarray] = (),
) -> None:
    """A block read back against what it should hold: hash, fill, and the values in the pool's
    precision (positions past the fill as 0). `source`: the envelope record it was imported
    from, quoted in a value diff; `nan`: how NaNs compare (tlkv_conformance.diff.NAN_POLICIES);
    `written`: the values a write gave the pool (past the fill included), and `released`: those
    of the blocks released before, for the diagnosis."""
    if (got.block_hash, got.n_tokens) != (expected.block_hash, expected.n_tokens):
        raise CaseFailure(
            f"{where}: read back hash {got.block_hash:#x}, n_tokens {got.n_tokens}; expected "
            f"hash {expected.block_hash:#x}, n_tokens {expected.n_tokens}"
        )
    values = np.array(expected.values, dtype=np.float32)
    values[..., expected.n_tokens :, :] = 0
    compare_values(
        in_pool_precision(values, dtype),
        got.values,
        where,
        dtype,
        block=block,
        source=source,
        nan=nan,
        n_tokens=expected.n_tokens,
        written=written,
        released=released,
    )


def _e4m3_tolerance_problem(
    expected: np.ndarray, actual: np.ndarray, nan: str = "exact"
) -> str | None:
    """What the tolerant level cannot let through between two arrays of e4m3 codes, or None.
    It allows one step between finite codes of the same sign (a rounding difference), and a
    NaN code for a NaN code as `nan` allows (NAN_POLICIES); never a NaN code for a number (or
    a number for NaN), never a sign change of a number, nothing further."""
    want = expected.astype(np.int32)
    got = actual.astype(np.int32)
    differ = (want != got) & ~nan_tolerated(expected, actual, nan)
    nan_code = ((want & E4M3_NAN) == E4M3_NAN) | ((got & E4M3_NAN) == E4M3_NAN)
    if (differ & nan_code).any():
        index = int(np.flatnonzero(differ & nan_code)[0])
        return f"element {index}: code {got[index]:#04x} where {want[index]:#04x} is due (NaN)"
    sign_change = differ & ((want & 0x80) != (got & 0x80))
    if sign_change.any():
        index = int(np.flatnonzero(sign_change)[0])
        return f"element {index}: code {got[index]:#04x} where {want[index]:#04x} is due (sign)"
    far = np.abs((want & 0x7F) - (got & 0x7F)) > 1
    if far.any():
        index = int(np.flatnonzero(far)[0])
        return (
            f"element {index}: code {got[index]:#04x} where {want[index]:#04x} is due (more "
            "than one e4m3 code away)"
        )
    return None


def compare_envelopes(
    expected: bytes,
    actual: bytes,
    level: str = "strict",
    nan: str = "any",
    blocks: Sequence[oracle.Block] | Callable[[], Sequence[oracle.Block]] = (),
    block_ids: Sequence[int] = (),
    pool_dtype: str = "",
    held_read_back: bool = False,
    released: Sequence[oracle.Block] = (),
    sources: Sequence[tuple[bytes, int] | None] = (),
    given: Callable[[], Sequence[oracle.Block]] | None = None,
) -> None:
    """Byte-exact, or for v2 at the tolerant level: header, hashes, fills, scales exact, the
    CRC valid for the bytes written, and each e4m3 element the expected code or one step from
    it, finite and of the same sign (_e4m3_tolerance_problem).
    An f16 NaN element (v1) or an e4m3 NaN code (v2) may differ as `nan` allows
    (tlkv_conformance.diff.NAN_POLICIES; the CRC then follows the bytes written). `blocks`: what the
    writer held (in the pool's precision, past each fill included), or a function giving
    them (called only on a failure), `block_ids` the ids exported and `pool_dtype` the pool's,
    for the diagnosis; `held_read_back` when the blocks were read back right just before;
    `released`: the blocks written and released before (what a reused slot may hold);
    `sources`: for each block exported, the envelope and record offset it was imported from
    (None for a block written); `given`: the blocks as the writes gave them, in f32 (called only
    on a failure)."""
    if expected == actual or _only_nans_differ(expected, actual, nan):
        return
    evidence = EnvelopeEvidence(
        expected,
        actual,
        tuple(blocks() if callable(blocks) else blocks),
        tuple(block_ids),
        pool_dtype,
        held_read_back,
        tuple(released),
        tuple(sources),
        tuple(given() if given is not None else ()),
    )
    if level == "tolerant" and len(expected) == len(actual):
        problem = _tolerant_problem(expected, actual, nan)
        if problem is None:
            return
        raise CaseFailure(f"v2 (tolerant): {problem}\n{envelope_diff(expected, actual)}", evidence)
    if _only_nans_differ(expected, actual, "any"):
        raise CaseFailure(f"{NAN_BITS_DIFFER}\n{envelope_diff(expected, actual)}", evidence)
    raise CaseFailure(envelope_diff(expected, actual), evidence)


NAN_BITS_DIFFER = (
    "only NaNs differ: each is still a NaN (the MUST), with another sign or payload (a SHOULD, "
    "docs/decisions.md); the CRC-32C trailer is that of the bytes written, as it must be"
)


def _only_nans_differ(expected: bytes, actual: bytes, nan: str) -> bool:
    """Whether `actual` is `expected` but for f16 NaN elements (v1) or e4m3 NaN codes (v2)
    that `nan` tolerates, with a trailer that is the CRC-32C of its own bytes."""
    if nan == "exact" or len(expected) != len(actual) or len(expected) < oracle.MIN_ENVELOPE_SIZE:
        return False
    body = actual[: -oracle.CRC_SIZE]
    if oracle.crc32c(body) != int.from_bytes(actual[-oracle.CRC_SIZE :], "little"):
        return False
    try:
        reference = oracle.decode(expected)
    except oracle.Rejected:
        return False
    # Where NaNs may lie: v1 every f16 element, v2 the e4m3 codes (never a scale).
    width = 2 if reference.version == 1 else 1
    n_elements = reference.geometry.n_elements
    elements = np.zeros(len(expected), dtype=bool)
    for record in reference.records:
        start = record.offset + oracle.RECORD_PREFIX_SIZE
        elements[start : start + n_elements * width] = True
    want = np.frombuffer(expected, dtype=np.uint8)
    got = np.frombuffer(actual, dtype=np.uint8)
    unequal = want != got
    unequal[-oracle.CRC_SIZE :] = False
    if (unequal & ~elements).any():
        return False
    # Every differing element is a NaN the policy lets pass.
    dtype = "<u2" if width == 2 else np.uint8
    for record in reference.records:
        base = record.offset + oracle.RECORD_PREFIX_SIZE
        mine = np.flatnonzero(unequal[base : base + n_elements * width]) // width
        if not mine.size:
            continue
        index = np.unique(mine)
        want_elements = np.frombuffer(expected, dtype=dtype, offset=base, count=n_elements)
        got_elements = np.frombuffer(actual, dtype=dtype, offset=base, count=n_elements)
        if not nan_tolerated(want_elements[index], got_elements[index], nan).all():
            return False
    return True


def _tolerant_problem(expected: bytes, actual: bytes, nan: str) -> str | None:
    try:
        reference = oracle.decode(expected)
    except oracle.Rejected as exc:
        return f"the expected envelope is unreadable: {exc}"
    if reference.version != 2:
        return "only v2 envelopes compare at the tolerant level"
    if actual[: oracle.HEADER_SIZE] != expected[: oracle.HEADER_SIZE]:
        return "the header differs"
    if oracle.crc32c(actual[: -oracle.CRC_SIZE]) != int.from_bytes(actual[-4:], "little"):
        return "the CRC-32C trailer does not match the bytes before it"
    n_codes = reference.geometry.n_elements
    for record in reference.records:
        got = actual[
            record.offset : record.offset + oracle.RECORD_PREFIX_SIZE + len(record.payload)
        ]
        want = expected[record.offset : record.offset + len(got)]
        if got[: oracle.RECORD_PREFIX_SIZE] != want[: oracle.RECORD_PREFIX_SIZE]:
            return f"block {record.index} hash or n_tokens differs"
        payload = got[oracle.RECORD_PREFIX_SIZE :]
        if payload[n_codes:] != record.payload[n_codes:]:
            return f"block {record.index} scales differ (they must be exact)"
        problem = _e4m3_tolerance_problem(
            np.frombuffer(record.payload[:n_codes], dtype=np.uint8),
            np.frombuffer(payload[:n_codes], dtype=np.uint8),
            nan,
        )
        if problem is not None:
            return f"block {record.index}, {problem}"
    return None


def free_count(pool: PoolHandle) -> int | None:
    """The pool's free blocks, or None where this way in cannot observe them (a shared server)."""
    try:
        return pool.free_blocks()
    except NotObservable:
        return None


def expect_free(
    pool: PoolHandle, before: int | None, change: int, what: str, released: bool = False
) -> None:
    """The free count moved by exactly `change` over `what` (unless it cannot be observed);
    `released`: `what` released blocks (for the diagnosis)."""
    if before is None:
        return
    after = pool.free_blocks()
    if after != before + change:
        raise CaseFailure(
            f"free blocks {before} before {what}, {after} after; expected {before + change}",
            CountEvidence(before + change, after, released),
        )


@dataclass
class PoolSnapshot:
    """What a rejected import must leave unchanged."""

    free: int | None  # None where the way in cannot observe it
    blocks: dict[int, ReadBack] = field(default_factory=dict)
    registered: dict[int, int | None] = field(default_factory=dict)


NOT_FOUND = frozenset({"ENOTFOUND", "NOT_FOUND"})  # find's answer to an unknown hash, C and gRPC


def _registered_block(block_hash: int, answer: object) -> int | None:
    """The block registered under `block_hash`, from find's `answer` (PoolHandle.query), None
    when none is; a find answering otherwise (another status, an exception) is POOL-FIND's
    failure, whatever the case is about."""
    if isinstance(answer, Refused):
        if answer.code in NOT_FOUND:
            return None
        raise CaseFailure(
            f"find({block_hash:#x}) refused with {answer.code}, not found due",
            RefusalEvidence(frozenset({"POOL-FIND"}), NOT_FOUND, answer.code),
        )
    if isinstance(answer, ImplementationFault):
        evidence = FaultEvidence.of_operation(answer) or RefusalEvidence(
            frozenset({"POOL-FIND"}), NOT_FOUND, "fault", fault=str(answer)
        )
        raise CaseFailure(f"find({block_hash:#x}): implementation fault: {answer}", evidence)
    return _answered(answer)


def _answered(answer: Any) -> Any:
    """A query's answer (PoolHandle.query), or what it raised raised here."""
    if isinstance(answer, BaseException):
        raise answer
    return answer


def snapshot(
    pool: PoolHandle,
    blocks: Iterable[int],
    hashes: Iterable[int],
    reference: PoolSnapshot | None = None,
) -> PoolSnapshot:
    """What can be observed of the pool; a block or hash the way in cannot reach is left out
    (over gRPC: an unregistered block). Given a `reference` snapshot, a block whose digest is
    unchanged is not read again (a real geometry's block is MiBs)."""
    blocks, hashes = list(blocks), [h for h in hashes if h]
    known = reference.blocks if reference is not None else {}
    # One request for every query (a worker's round trip each would be most of a case's
    # time): a block seen before is looked at by its digest, read again only if it changed.
    calls = [("free_blocks", ())]
    calls += [("read_digest" if b in known else "read", (b,)) for b in blocks]
    calls += [("find", (h,)) for h in hashes]
    answers = iter(pool.query(calls))
    try:
        free = _answered(next(answers))
    except NotObservable:
        free = None
    shot = PoolSnapshot(free=free)
    for block in blocks:
        with contextlib.suppress(NotObservable):
            answer = _answered(next(answers))
            old = known.get(block)
            if old is None:
                shot.blocks[block] = answer
            elif answer == (old.block_hash, old.n_tokens, values_digest(old.values)):
                shot.blocks[block] = old
            else:
                shot.blocks[block] = pool.read(block)
    for block_hash in hashes:
        with contextlib.suppress(NotObservable):
            shot.registered[block_hash] = _registered_block(block_hash, next(answers))
    return shot


def compare_snapshots(
    before: PoolSnapshot, after: PoolSnapshot, what: str, reqs: tuple[str, ...] = ("READ-ATOMIC",)
) -> None:
    problems = []
    if None not in (before.free, after.free) and after.free != before.free:
        problems.append(f"free blocks {before.free} before, {after.free} after")
    for block_hash, held in before.registered.items():
        if block_hash not in after.registered:
            continue
        now = after.registered[block_hash]
        if now != held:
            was = "unregistered" if held is None else f"block {held}"
            problems.append(
                f"hash {block_hash:#x} was {was}, is now "
                + ("unregistered" if now is None else f"block {now}")
            )
    for block, old in before.blocks.items():
        if block not in after.blocks:
            continue
        new = after.blocks[block]
        if (old.block_hash, old.n_tokens) != (new.block_hash, new.n_tokens):
            problems.append(
                f"existing block {block} changed from hash {old.block_hash:#x}, n_tokens "
                f"{old.n_tokens} to hash {new.block_hash:#x}, n_tokens {new.n_tokens}"
            )
            continue
        # f32: what was read before is the reference, whatever the pool's precision.
        changed = values_diff(old.values, new.values, "f32", block=f"block {block}", nan="exact")
        if changed is not None:
            problems.append(f"existing block {block} changed: {changed}")
    if problems:
        raise CaseFailure(
            f"{what} changed the pool: " + "; ".join(problems), PoolChangeEvidence(reqs)
        )
