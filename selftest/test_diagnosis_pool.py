"""The models of a pool's bookkeeping (tlkv_conformance.diagnosis._pool_models): each mistaken
pool is written here as the mistake would write it (a write rule as a C condition, a history's
answers as the mistaken pool gives them, worked by hand), never by the models' own code."""

from __future__ import annotations

import numpy as np
from tlkv_conformance import oracle
from tlkv_conformance.adapters import Adapter, ImplInfo, PoolHandle
from tlkv_conformance.diagnosis import attribute
from tlkv_conformance.errors import Refused
from tlkv_conformance.evidence import (
    KnownMistake,
    PoolHistoryEvidence,
    PoolStep,
    RefusalEvidence,
)

GEOMETRY = oracle.Geometry(4, 2, 2, 8)


class _Pooled(Adapter):
    """An implementation whose probed writes answer as `refuses(block_hash, n_tokens, B)` says
    (True: EINVAL) and whose registry probe answers `registry`."""

    def __init__(self, refuses=None, registry: list[bool] | None = None) -> None:
        super().__init__("pooled")
        self.refuses, self.registry = refuses, registry
        self.writes: list[tuple[int, int]] = []

    def info(self) -> ImplInfo:
        return ImplInfo(frozenset({1}), frozenset({1}), "f32")

    def block_hash(self, parent: int, tokens: list[int]) -> int:
        raise NotImplementedError

    def open_pool(self, geometry: oracle.Geometry, capacity: int) -> PoolHandle:
        raise NotImplementedError

    def probe_write_read(self, geometry, block_hash, n_tokens, values) -> np.ndarray:
        self.writes.append((block_hash, n_tokens))
        if self.refuses(block_hash, n_tokens, geometry.block_tokens):
            raise Refused("EINVAL", "write")
        return np.asarray(values, np.float32)

    def probe_find_after(self, geometry, written, data, hashes) -> list[bool]:
        return list(self.registry or [])


def _write_refused(adapter: Adapter, block_hash: int, n_tokens: int, geometry=GEOMETRY):
    refusal = RefusalEvidence(
        frozenset(), frozenset(), "EINVAL", write=(geometry, block_hash, n_tokens)
    )
    return attribute(refusal, ["POOL-WRITE-READ"], adapter)


def test_a_full_block_with_hash_0_refused_by_the_hash_rule_taken_both_ways() -> None:
    # ho5's C condition: (block_hash != 0) != (n_tokens == B)
    adapter = _Pooled(refuses=lambda h, n, b: n < 1 or n > b or ((h != 0) != (n == b)))
    found = _write_refused(adapter, 0, GEOMETRY.block_tokens)
    assert found.cause is not None
    assert found.cause.id == "write-refuses-valid:full-block-hash-zero"
    assert found.blamed == ("POOL-WRITE-ARGS",)
    assert "full-hash-zero EINVAL, partial-hash-zero ok" in found.cause.evidence
    # one write of each kind: full hashed, full 0, partial 0, partial hashed
    assert [n for _, n in adapter.writes] == [4, 4, 3, 3]


def test_a_write_refusing_every_hash_0_is_another_rule() -> None:
    adapter = _Pooled(refuses=lambda h, n, b: h == 0 or n != b)
    assert _write_refused(adapter, 0, 3).cause.id == "write-refuses-valid:hash-zero"
    adapter = _Pooled(refuses=lambda h, n, b: n != b)
    assert _write_refused(adapter, 0, 3).cause.id == "write-refuses-valid:partial-block"


def test_with_one_token_a_block_no_partial_block_tells_the_rules_apart() -> None:
    geometry = oracle.Geometry(1, 1, 1, 7)
    adapter = _Pooled(refuses=lambda h, n, b: (h != 0) != (n == b))
    found = _write_refused(adapter, 0, 1, geometry)
    assert found.cause.id == (
        "one-of:write-refuses-valid:full-block-hash-zero+write-refuses-valid:hash-zero"
    )


def test_a_pool_refusing_every_write_names_no_rule() -> None:
    adapter = _Pooled(refuses=lambda h, n, b: True)
    assert _write_refused(adapter, 0, 4).cause is None


def test_a_write_refused_with_another_status_than_the_probes_names_no_rule() -> None:
    adapter = _Pooled(refuses=lambda h, n, b: (h != 0) != (n == b))
    refusal = RefusalEvidence(frozenset(), frozenset(), "ENOMEM", write=(GEOMETRY, 0, 4))
    assert attribute(refusal, ["POOL-WRITE-READ"], adapter).cause is None


# cases/pool.yaml's several-references, as a pool whose release unregisters the hash before it
# drops the reference answers it: the first release leaves the block held (free 1 of 2) and
# its hash no longer found.
HASH_A = 0x7E75BA253EFD3FC1
SEVERAL_REFERENCES = (
    PoolStep("write", "a", HASH_A),
    PoolStep("retain", "a"),
    PoolStep("retain", "a"),
    PoolStep("release", "a"),
    PoolStep("free", answer=1),
    PoolStep("find", block_hash=HASH_A, answer="ENOTFOUND"),
)


def _history(steps, registry) -> object:
    evidence = PoolHistoryEvidence(GEOMETRY, 2, tuple(steps))
    return attribute(evidence, ["POOL-REFS", "POOL-FIND"], _Pooled(registry=registry))


def test_a_hash_unregistered_at_the_first_of_several_releases() -> None:
    found = _history(SEVERAL_REFERENCES, [True] * 4)
    assert found.cause.id == "release-unregisters:any-release"
    assert found.blamed == ("POOL-REFS", "POOL-FIND")


def test_a_pool_whose_writes_register_nothing_is_not_named_by_its_releases() -> None:
    assert _history(SEVERAL_REFERENCES, [False, False, True, True]).cause is None
    assert _history(SEVERAL_REFERENCES, None).cause is None  # the probe cannot tell


def test_a_history_the_due_bookkeeping_gives_names_nothing() -> None:
    due = (*SEVERAL_REFERENCES[:-1], PoolStep("find", block_hash=HASH_A, answer="a"))
    assert _history(due, [True] * 4).cause is None


def test_a_release_that_frees_the_block_early_fits_no_removal_rule() -> None:
    # a release freeing the block at once (free 2): the count, not the registry
    freed = (*SEVERAL_REFERENCES[:4], PoolStep("free", answer=2), SEVERAL_REFERENCES[-1])
    assert _history(freed, [True] * 4).cause is None


def test_a_history_with_a_step_no_model_replays_names_nothing() -> None:
    steps = (PoolStep("use"), *SEVERAL_REFERENCES)
    assert _history(steps, [True] * 4).cause is None


# -- the registry's order -----------------------------------------------------------------------


class _Table(Adapter):
    """A registry of 8 slots, each hash's home slot its low 3 bits, written as the mistake
    writes it: `lookup` "home" reads only the home slot (insertion probes on), `insert`
    "overwrite" puts a hash in its home slot whatever is there (lookup probes on)."""

    def __init__(self, lookup: str = "probe", insert: str = "probe", home=lambda h: h & 7) -> None:
        super().__init__("table")
        self.lookup, self.insert, self.home = lookup, insert, home

    info = _Pooled.info
    block_hash = _Pooled.block_hash
    open_pool = _Pooled.open_pool

    def probe_find_after(self, geometry, written, data, hashes) -> list[bool]:
        hashes = [h for h, _, _ in written] + list(hashes)
        table: list[int | None] = [None] * 8
        for h in hashes:
            if not h:
                continue
            slot = self.home(h)
            if self.insert == "probe":
                while table[slot] is not None:
                    slot = (slot + 1) & 7
            table[slot] = h
        found = []
        for h in hashes:
            slot = self.home(h)
            while table[slot] is not None and table[slot] != h and self.lookup == "probe":
                slot = (slot + 1) & 7
            found.append(bool(h) and table[slot] == h)
        return found


def _blocks(hashes: list[int]) -> bytes:
    values = np.zeros(GEOMETRY.values_shape, np.float32)
    return oracle.encode(GEOMETRY, [oracle.Block(h, 4, values) for h in hashes], 1)


def _import_missed(adapter: Adapter, hashes: list[int], missed: int):
    evidence = KnownMistake(
        "import-not-registered",
        "imported blocks stored but their hashes not registered",
        ("READ-ACCEPT",),
        registry_probe=GEOMETRY,
        imported=(_blocks(hashes), missed),
    )
    return attribute(evidence, ["READ-ACCEPT"], adapter)


# 0x11 and 0x29 share home slot 1; 0x3a has slot 2 to itself
COLLIDING = [0x11, 0x3A, 0x29]


def test_a_find_reading_only_the_home_slot_misses_the_later_registered() -> None:
    found = _import_missed(_Table(lookup="home"), COLLIDING, 0x29)
    assert found.cause.id == "registry-misses:later-registered"
    assert found.blamed == ("POOL-FIND",)
    assert "misses 0x11 alone" in found.cause.evidence


def test_an_insertion_overwriting_its_home_slot_loses_the_earlier_registered() -> None:
    found = _import_missed(_Table(insert="overwrite"), COLLIDING, 0x11)
    assert found.cause.id == "registry-misses:earlier-registered"


def test_a_hash_missed_in_a_new_pool_too_whatever_the_order_names_no_order() -> None:
    # the registry works: the case's miss is not made again in a new pool
    assert _import_missed(_Table(), COLLIDING, 0x29).cause is None
    # three hashes in one slot: two missed, no pair to name
    assert _import_missed(_Table(lookup="home"), [0x11, 0x29, 0x31], 0x29).cause is None


def _reference_home(h: int) -> int:
    """The reference's home slot (tl_kv_ref.c, reg_home) in its 8-slot table of a 4-block pool."""
    h ^= h >> 33
    h = h * 0xFF51AFD7ED558CCD % 2**64
    h ^= h >> 33
    return h & 7


def test_an_overwriting_insertion_is_not_named_a_write_registering_nothing() -> None:
    # The registry probe's first set shares one home slot in the reference's table: 0x1111,
    # 0x8000000000002222 and 0x3333 all map to slot 1 (worked with tl_kv_ref.c's mix), so an
    # insertion overwriting it loses both writes and answers as writes registering nothing.
    adapter = _Table(insert="overwrite", home=_reference_home)
    probe = adapter.probe_find_after(
        GEOMETRY, [(0x1111, 4, None), (2**63 + 0x2222, 4, None)], b"", [0x3333, 2**63 + 0x4444]
    )
    assert probe == [False, False, True, True]
    # A block written alone is found, and another set of hashes answers otherwise: not named.
    written = KnownMistake(
        "write-not-registered",
        "written blocks stored but their hashes not registered",
        ("POOL-FIND",),
        registry_probe=GEOMETRY,
    )
    assert attribute(written, ["POOL-FIND"], adapter).cause is None


def _write_missed(adapter: Adapter, registered: list[int], missed: int):
    evidence = KnownMistake(
        "write-not-registered",
        "written blocks stored but their hashes not registered",
        ("POOL-FIND",),
        registry_probe=GEOMETRY,
        registered=(tuple(registered), missed),
    )
    return attribute(evidence, ["POOL-FIND"], adapter)


def test_a_written_hash_missed_is_named_by_which_of_a_pair_find_misses() -> None:
    # 0x11 then 0x29 (home slot 1 both) written in a new pool: an overwriting insertion loses
    # 0x11, a lookup reading the home slot alone misses 0x29; 0x3a (slot 2) misses nothing
    found = _write_missed(_Table(insert="overwrite"), COLLIDING, 0x11)
    assert found.cause.id == "registry-misses:earlier-registered"
    assert found.blamed == ("POOL-FIND",)
    assert "registered after it" in found.cause.evidence
    found = _write_missed(_Table(lookup="home"), COLLIDING, 0x29)
    assert found.cause.id == "registry-misses:later-registered"
    # a registry that works finds every pair: the case's miss is not the registry's order
    assert _write_missed(_Table(), COLLIDING, 0x29).cause is None
    # the pairs contradict the case: an overwriting insertion cannot lose 0x29, registered
    # after 0x11
    assert _write_missed(_Table(insert="overwrite"), COLLIDING, 0x29).cause is None


# cases/pool.yaml's write-enomem, as a pool whose search for a free block starts above the last
# block handed out answers it: the write after a's release runs off the pool's end.
WRITE_ENOMEM = (
    PoolStep("write", "a", 0x1A),
    PoolStep("write", "b", 0x1B),
    PoolStep("free", answer=0),
    PoolStep("write", "", 0x1C, "ENOMEM"),
    PoolStep("release", "a"),
    PoolStep("write", "c", 0x1C, "fault"),
)
CRASH = "crashed with SIGSEGV in tl_kv_pool_write"


def _faulted(steps, capacity: int = 2):
    evidence = PoolHistoryEvidence(GEOMETRY, capacity, tuple(steps), CRASH)
    return attribute(evidence, ["POOL-ENOMEM"], _Pooled(registry=[True] * 4))


def test_a_write_faulting_where_only_blocks_released_below_the_last_handed_out_are_free() -> None:
    found = _faulted(WRITE_ENOMEM)
    assert found.cause.id == "free-search:forward-only"
    assert found.cause.title.startswith("tl_kv_pool_write crashes with SIGSEGV on a write")
    assert found.blamed == ("POOL-REFS",)


def test_a_write_faulting_with_a_free_block_above_the_last_handed_out_names_no_search() -> None:
    # capacity 3: slot 2 is free above a and b, so a forward-only search finds it
    steps = (*WRITE_ENOMEM[:2], PoolStep("release", "a"), PoolStep("write", "c", 0x1C, "fault"))
    found = _faulted(steps, capacity=3)
    assert found.cause is None
    assert found.symptom  # the fault, as a symptom another cause may explain
