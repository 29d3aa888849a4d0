"""Models of a pool's bookkeeping: the write's argument rule, the registry's order, and the
references, registry and free-block search behind a pool case's steps, each parametrised by the
mistakes a pool makes in it and named only where what the fitting parameters have in common
reproduces every answer the evidence holds (the parameter in the cause's id and title).

- *The write's rule* (a valid write refused): the write's hash/fill rule as the pool applies
  it, probed with one write of each kind of block into a new pool (`Adapter.probe_write_read`):
  a full block with a hash, a full block with hash 0, a partial block with hash 0 (all three
  valid) and a partial block with a hash (refused with EINVAL). The variant whose refusals are
  exactly the probe's, with the case's own status, and which refuses the case's write, is named
  ("one of" where several are: with B = 1 there is no partial block to probe).
- *The registry's order* (an imported hash find refuses, where the registry probe finds every
  block): the import made again in new pools, as it was, reversed, and the missed record alone,
  shows which of two hashes sharing a place in the registry find misses, the later or the
  earlier registered (`registry_order_causes`); a written hash find refuses, written again
  with each other hash of the case's pool in either order (`registry_pair_causes`).
- *A pool's history* (a find refused for a block still held, a write that faults): the case's
  steps, with their answers, replayed on small models of the pool's bookkeeping (`MODELS`):
  writes registering their hash or not; the hash removed at the last release (due), at any
  release, or never; the free-block search finding any free block (due) or only those above
  the last one handed out. Each parameter every model that gives all the answers shares, with a
  mistaken value, is named. The registry probe (`registry_answers`) settles whether writes
  register at all (a find that fails for every block fits every removal rule)."""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .. import oracle
from ..adapters import Adapter
from ..errors import ImplementationFault, NotObservable, Refused
from ..evidence import PoolHistoryEvidence, PoolStep
from ._causes import VALID_REFUSED, Cause
from ._faults import fault_title
from ._probe import found_after
from ._signatures import one_of

# -- the write's rule ---------------------------------------------------------------------------

WRITE_REFUSES = "write-refuses-valid:"
PROBE_HASH = 0x7E57_0000_0000_0A11  # a hash no case writes (the probe's pool is new anyway)


@dataclass(frozen=True)
class _WriteKind:
    """A kind of write by its hash and fill: `valid` whether the format allows it."""

    name: str
    hashed: bool
    full: bool

    @property
    def valid(self) -> bool:
        return self.full or not self.hashed

    def of(self, block_hash: int, n_tokens: int, block_tokens: int) -> bool:
        return bool(block_hash) == self.hashed and (n_tokens == block_tokens) == self.full


KINDS = (
    _WriteKind("full-hashed", True, True),
    _WriteKind("full-hash-zero", False, True),
    _WriteKind("partial-hash-zero", False, False),
    _WriteKind("partial-hashed", True, False),
)


@dataclass(frozen=True)
class _WriteRule:
    """A write rule refusing the valid kinds `refuses` (and every invalid one)."""

    name: str
    refuses: frozenset[str]
    title: str


WRITE_RULES = (
    _WriteRule(
        "full-block-hash-zero",
        frozenset({"full-hash-zero"}),
        "a write of a full block with hash 0 refused: the hash rule taken both ways (a block "
        "must be full if hashed, and hashed if full)",
    ),
    _WriteRule(
        "hash-zero",
        frozenset({"full-hash-zero", "partial-hash-zero"}),
        "a write of a block with hash 0, full or partial, refused (a hash required of every block)",
    ),
    _WriteRule(
        "partial-block",
        frozenset({"partial-hash-zero"}),
        "a write of a partial block (hash 0) refused (every written block required full)",
    ),
    _WriteRule(
        "hashed-block",
        frozenset({"full-hashed"}),
        "a write of a full block with a hash refused (the hash rule reversed: a hashed block "
        "refused)",
    ),
)

_answers: weakref.WeakKeyDictionary[Adapter, dict[oracle.Geometry, dict[str, str] | None]] = (
    weakref.WeakKeyDictionary()
)


def write_rule_causes(
    implementation: Adapter | None,
    geometry: oracle.Geometry,
    block_hash: int,
    n_tokens: int,
    code: str,
) -> list[Cause]:
    """The write rule that refuses a valid write of (`block_hash`, `n_tokens`) with `code`, as
    the probe's writes of each kind answer ("one of" them where several fit: with B = 1 no
    partial block is probed); none where no rule fits or the probe cannot tell (a fault, a
    pool refused)."""
    if implementation is None:
        return []
    known = _answers.setdefault(implementation, {})
    if geometry not in known:
        known[geometry] = _probe_kinds(implementation, geometry)
    answers = known[geometry]
    refused = next((k for k in KINDS if k.of(block_hash, n_tokens, geometry.block_tokens)), None)
    if answers is None or refused is None or not refused.valid:
        return []
    fits = [rule for rule in WRITE_RULES if _fits(rule, answers, refused.name, code)]
    seen = ", ".join(f"{name} {answer}" for name, answer in answers.items())
    causes = [
        Cause(
            WRITE_REFUSES + rule.name,
            rule.title,
            ("POOL-WRITE-ARGS",),
            f"write of hash {block_hash:#x}, n_tokens {n_tokens} refused with {code}; "
            f"one write of each kind into a new pool: {seen}",
            frozenset({VALID_REFUSED.format(code=code)}),
        )
        for rule in fits
    ]
    # Where B is 1 no partial block tells the rules about it apart: one of them, which the
    # run's other geometries settle.
    return [one_of(causes), *causes] if len(causes) > 1 else causes


def _fits(rule: _WriteRule, answers: dict[str, str], refused: str, code: str) -> bool:
    if refused not in rule.refuses:
        return False
    for kind in KINDS:
        if kind.name not in answers:
            continue  # no partial block where B is 1
        answer = answers[kind.name]
        if not kind.valid:
            if answer == "ok":
                return False  # the due refusal missing: another mistake
        elif (answer == code) != (kind.name in rule.refuses) or answer not in ("ok", code):
            return False
    return True


def _probe_kinds(implementation: Adapter, geometry: oracle.Geometry) -> dict[str, str] | None:
    """Each kind's answer to one write into a new pool: "ok" or the refusal's status."""
    zeros = np.zeros(geometry.values_shape, np.float32)
    answers = {}
    for kind in KINDS:
        n_tokens = geometry.block_tokens - (0 if kind.full else 1)
        if n_tokens < 1:
            continue
        try:
            implementation.probe_write_read(
                geometry, PROBE_HASH if kind.hashed else 0, n_tokens, zeros
            )
            answers[kind.name] = "ok"
        except Refused as refusal:
            answers[kind.name] = refusal.code
        except (ImplementationFault, NotObservable):
            return None
    return answers


# -- a pool's history: references, the hash registry and the free-block search -----------------


@dataclass(frozen=True)
class _Bookkeeping:
    """One model of a pool's bookkeeping. `registers`: a write registers its block's hash;
    `removal`: when the hash leaves the registry ("last-release", due; "any-release";
    "never"); `search`: which free blocks the search for one finds ("lowest", due: any;
    "forward-only": only those above the last block handed out, never coming back to blocks
    released below it, as a next-free hint not lowered at release does; a search finding none
    before the pool's end runs off it)."""

    registers: bool
    removal: str
    search: str


DUE = _Bookkeeping(True, "last-release", "lowest")
MODELS = [
    _Bookkeeping(registers, removal, search)
    for registers in (True, False)
    for removal in ("last-release", "any-release", "never")
    for search in ("lowest", "forward-only")
]
# The mistaken value of each parameter, as a cause: its id and title.
HISTORY_CAUSES = {
    ("removal", "any-release"): (
        "release-unregisters:any-release",
        "a release removes the block's hash from the registry at any release, not at its last: "
        "a block still held is no longer found by its hash",
    ),
    ("removal", "never"): (
        "release-keeps-hash",
        "releasing a block's last reference leaves its hash registered",
    ),
    ("search", "forward-only"): (
        "free-search:forward-only",
        "{fault} on a write while blocks were free: the search for a free block never comes back "
        "to blocks released below the last one handed out (as a next-free hint not lowered at "
        "release does) and runs off the pool's end",
    ),
}


def history_causes(history: PoolHistoryEvidence, writes_registered: bool | None) -> list[Cause]:
    """The mistakes every model of the pool's bookkeeping (MODELS) that gives every answer of
    `history` makes, where the due one does not give them: each parameter that all those models
    share with a mistaken value, joined by "&" when several are. `writes_registered`: whether
    the registry probe found written blocks by their hash (None: it could not tell, and a model
    whose writes register nothing stays a candidate)."""
    fits = [
        model
        for model in MODELS
        if writes_registered is None or model.registers == writes_registered
        if _replays(history.steps, history.capacity, model)
    ]
    if not fits or DUE in fits:
        return []
    shared = [
        (name, getattr(fits[0], name))
        for name in ("registers", "removal", "search")
        if len({getattr(model, name) for model in fits}) == 1
        and getattr(fits[0], name) != getattr(DUE, name)
    ]
    named = [HISTORY_CAUSES[p] for p in shared if p in HISTORY_CAUSES]
    if not named or len(named) != len(shared):
        return []  # a registry that registers nothing: the registry probe's causes
    fault = fault_title(history.fault) if history.fault else "a fault"
    last = history.steps[-1]
    asked = f"find({last.block_hash:#x})" if last.op == "find" else last.op
    return [
        Cause(
            "&".join(cause_id for cause_id, _ in named),
            "; ".join(title.format(fault=fault) for _, title in named),
            ("POOL-REFS", "POOL-FIND") if last.op == "find" else ("POOL-REFS",),
            f"{asked} answered {last.answer}; the case's {len(history.steps)} steps replayed on "
            "every model of its bookkeeping that gives all their answers, free counts included, "
            f"share {' and '.join(f'{name} {value}' for name, value in shared)}",
        )
    ]


def _replays(steps: Sequence[PoolStep], capacity: int, model: _Bookkeeping) -> bool:
    """Whether a pool of `capacity` keeping its books as `model` says answers every step as the
    implementation did."""
    refs: dict[str, int] = {}
    hashes: dict[str, int] = {}
    slots: list[str | None] = [None] * capacity  # the block in each slot
    registry: dict[int, str] = {}
    hint = 0  # where a "forward-only" search starts
    for number, step in enumerate(steps):
        block = step.block or f"#{number}"  # an unlabelled write's block
        answer: str | int
        if step.op == "write" and step.answer not in ("ok", "ENOMEM", "fault"):
            answer = step.answer  # an argument refused: the write's rule, not modelled here
        elif step.op == "write":
            start = hint if model.search == "forward-only" else 0
            free = [slot for slot in range(start, capacity) if slots[slot] is None]
            if None not in slots:
                answer = "ENOMEM"
            elif not free:
                answer = "fault"  # the search ran off the pool's end
            else:
                answer = "ok"
                slots[free[0]], hint = block, free[0] + 1
                refs[block], hashes[block] = 1, step.block_hash
                if model.registers and step.block_hash:
                    registry.setdefault(step.block_hash, block)
        elif step.op in ("retain", "read"):
            answer = "ok" if refs.get(block, 0) > 0 else "EINVAL"
            if answer == "ok" and step.op == "retain":
                refs[block] += 1
        elif step.op == "release":
            answer = "ok" if refs.get(block, 0) > 0 else "EINVAL"
            if answer == "ok":
                refs[block] -= 1
                if refs[block] == 0:
                    slots[slots.index(block)] = None
                last = refs[block] == 0
                removed = model.removal == "any-release" or (
                    model.removal == "last-release" and last
                )
                if removed and registry.get(hashes[block]) == block:
                    del registry[hashes[block]]
        elif step.op == "find":
            answer = registry.get(step.block_hash, "ENOTFOUND")
        elif step.op == "free":
            answer = slots.count(None)
        else:
            return False  # a step no model here replays (an import, another pool)
        if answer != step.answer:
            return False
    return True


# -- the registry's order: a hash missed where another took its place ---------------------------

# Which of two hashes sharing a place in the registry find misses: the one registered later (a
# lookup that reads only the first slot the hash maps to, where a probing insertion placed it
# further on) or the one registered earlier (an insertion that overwrote its entry).
REGISTRY_LOSES = {
    "later-registered": (
        "find misses a hash registered after another one that shares its place in the "
        "registry: the lookup reads only the slot the hash maps to first (its home slot), "
        "where the insertion probed further on"
    ),
    "earlier-registered": (
        "a hash is no longer found once another one sharing its place in the registry is "
        "registered after it: the insertion overwrites the entry there"
    ),
}


def registry_order_causes(
    implementation: Adapter | None, geometry: oracle.Geometry, data: bytes, missed: int
) -> list[Cause]:
    """Which hash of a colliding pair find misses (REGISTRY_LOSES), where find refused `missed`
    after `data` was imported: the envelope imported again into new pools
    (`Adapter.probe_find_after`), as it is (find must miss `missed` again, and one hash alone),
    its records reversed (find must then miss one other hash alone, and find `missed`), and
    `missed`'s record alone (found). Which of the two missed hashes came first names the
    variant. The registry's size and hash are the implementation's: the claim is what the
    orders show, whatever they are."""
    if implementation is None:
        return []
    try:
        envelope = oracle.decode(data, oracle.ReaderProfile(geometry))
        forward = _missed(implementation, geometry, envelope, envelope.records)
        backward = _missed(implementation, geometry, envelope, envelope.records[::-1])
        record = next((r for r in envelope.records if r.block_hash == missed), None)
        alone = None if record is None else _missed(implementation, geometry, envelope, [record])
    except (ImplementationFault, NotObservable, Refused, oracle.Rejected, ValueError):
        return []
    if forward != [missed] or alone != [] or len(backward) != 1 or backward == [missed]:
        return []
    hashes = [r.block_hash for r in envelope.records]
    (other,) = backward
    first = hashes.index(other) < hashes.index(missed)
    variant = "later-registered" if first else "earlier-registered"
    return [
        Cause(
            "registry-misses:" + variant,
            REGISTRY_LOSES[variant],
            ("POOL-FIND",),
            f"imported again into a new pool, find misses {missed:#x} alone; with the records "
            f"reversed it finds it and misses {other:#x} alone; {missed:#x} imported alone is "
            "found",
        )
    ]


def _missed(
    implementation: Adapter,
    geometry: oracle.Geometry,
    envelope: oracle.Envelope,
    records: Sequence[oracle.Record],
) -> list[int]:
    """The hashes find misses after `records` are imported into a new pool, in that order."""
    blocks = [oracle.Block(r.block_hash, r.n_tokens, r.decoded.values) for r in records]
    data = oracle.encode(geometry, blocks, envelope.version)
    hashes = [r.block_hash for r in records]
    found = implementation.probe_find_after(geometry, [], data, hashes)
    return [h for h, hit in zip(hashes, found, strict=True) if h and not hit]


def registry_pair_causes(
    implementation: Adapter | None,
    geometry: oracle.Geometry,
    registered: Sequence[int],
    missed: int,
) -> list[Cause]:
    """Which hash of a colliding pair find misses (REGISTRY_LOSES), where find refused a
    written hash `missed` among the hashes the case's pool `registered` (in that order): `missed`
    written alone into a new pool (found), then with each other hash, in the case's order (find
    must miss `missed` alone) and reversed (find must miss the other alone). Every pair that fits
    must agree on which of the two is missed, the one registered later or earlier in the case;
    the claim is what the pairs show, whatever the registry's size and hash."""
    if implementation is None or missed not in registered:
        return []
    later: set[bool] = set()  # for each pair that fits: whether the other came later
    try:
        if found_after(implementation, geometry, [missed], [0])[0] is not True:
            return []
        for other in registered:
            if other in (0, missed):
                continue
            first = registered.index(other) < registered.index(missed)
            pair = [other, missed] if first else [missed, other]
            forward = found_after(implementation, geometry, pair, [0])[:2]
            backward = found_after(implementation, geometry, pair[::-1], [0])[:2]
            if forward == [first, not first] and backward == [first, not first]:
                later.add(not first)
    except (ImplementationFault, NotObservable, Refused):
        return []
    if len(later) != 1:
        return []
    variant = "earlier-registered" if later.pop() else "later-registered"
    return [
        Cause(
            "registry-misses:" + variant,
            REGISTRY_LOSES[variant],
            ("POOL-FIND",),
            f"written alone into a new pool, {missed:#x} is found; written with another hash "
            f"the case registered {'after' if variant == 'earlier-registered' else 'before'} "
            "it, in the case's order, find misses it alone, and in the other order the other "
            "hash alone",
        )
    ]
