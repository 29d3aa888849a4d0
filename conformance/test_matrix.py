"""The cross-implementation matrix: what each --impl exports, each --impl imports
(docs/report.md).

With two or more --impl values, every (producer, consumer) pair, each implementation with
itself included, gets one test per block set and envelope version: the producer writes the
blocks and exports them, the consumer imports the bytes and must read back what they hold.
The terminal summary and the conformance report show the verdicts as a table, rows export and
columns import. A failure names the side at fault: the producer when its envelope differs from
the oracle's encoding of the blocks it was given, the consumer when it refuses the envelope or
reads back other values. Each NaN must stay a NaN; its sign and payload are SHOULDs
(docs/decisions.md), checked by test_matrix_nan_bits for each v1 pair: a warning in the
pair's cell. With one --impl there is nothing to cross: one skip says so.
"""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING, Any

import pytest
from tlkv_conformance import oracle, runstate
from tlkv_conformance.adapters import Capability
from tlkv_conformance.cases import check_imported, plan_blocks
from tlkv_conformance.checks import (
    CaseFailure,
    calls_to_testee,
    compare_envelopes,
    free_count,
    not_applicable,
)
from tlkv_conformance.errors import NotObservable, Refused
from tlkv_conformance.evidence import RefusalEvidence
from tlkv_conformance.exprs import BuildTarget

if TYPE_CHECKING:  # imported plainly, pytest would try to collect the class Testee
    from tlkv_conformance.testee import Testee

pytestmark = [pytest.mark.writer, pytest.mark.reader]

VERSION_REQS = {
    1: ("READ-ACCEPT", "IMPORT-ORDER", "V1-LAYOUT", "V1-F16"),
    2: ("READ-ACCEPT", "IMPORT-ORDER", "V2-LAYOUT", "V2-DECODE"),
}
# Small, so that a pair costs little; B = 4 leaves room for a partial tail of 3.
DEFAULT_GEOMETRY = oracle.Geometry(block_tokens=4, n_layers=2, n_kv_heads=2, head_dim=8)
BLOCK_SETS = ("full", "tail")  # two chained full blocks; a full block and a partial tail
# f16 patterns v1 must carry exactly: -0.0, the smallest subnormal, the largest finite, -inf;
# and quiet NaNs of both signs with payloads, which must stay NaNs (their sign and payload:
# test_matrix_nan_bits). Signalling NaNs are a SHOULD of their own: not here.
V1_SPECIALS = (0x8000, 0x0001, 0x7BFF, 0xFC00, 0x7E55, 0xFE01)
NAN_BITS_REQS = ("NAN-SIGN", "V1-F16-NAN-PAYLOAD")
ONE_IMPL = "the cross-implementation matrix needs two or more --impl values"
PARAMS = ("producer", "consumer", "version", "block_set")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "producer" not in metafunc.fixturenames:
        return
    testees = runstate.testees_of(metafunc.config)
    if len(testees) < 2:
        skip = pytest.mark.skip(reason=ONE_IMPL)
        metafunc.parametrize(PARAMS, [pytest.param(None, None, 0, "", id="one-impl", marks=skip)])
        return
    nan_bits = metafunc.definition.originalname == "test_matrix_nan_bits"
    params = [
        pytest.param(
            producer,
            consumer,
            version,
            block_set,
            id=f"{block_set}-v{version}-{producer.label}->{consumer.label}",
            marks=[
                getattr(pytest.mark, f"v{version}"),
                pytest.mark.reqs(*(NAN_BITS_REQS if nan_bits else VERSION_REQS[version])),
            ],
        )
        for block_set in BLOCK_SETS
        for version in ((1,) if nan_bits else VERSION_REQS)
        for producer in testees
        for consumer in testees
    ]
    metafunc.parametrize(PARAMS, params)


def _geometry(producer: Testee, consumer: Testee) -> oracle.Geometry:
    # A gRPC server has one pool of one geometry: a pair with one uses it.
    fixed = {
        g
        for t in (producer, consumer)
        if isinstance(g := getattr(t.adapter, "geometry", None), oracle.Geometry)
    }
    if len(fixed) > 1:
        not_applicable(f"{producer.label} and {consumer.label} hold pools of different geometries")
    return fixed.pop() if fixed else DEFAULT_GEOMETRY


def _block_specs(
    geometry: oracle.Geometry, version: int, block_set: str, seed: int
) -> list[dict[str, Any]]:
    """Random f16-representable values (v1: with specials), the same on every run; tokens
    unique to the test (the run's hash salt makes its hashes the run's own: test_matrix), so
    that a server's registry (which outlives a run) never hands one test the blocks of
    another."""
    b = geometry.block_tokens
    tokens = seed

    def values(salt: int) -> dict[str, Any]:
        recipe: dict[str, Any] = {"pcg64": {"seed": seed + salt, "low": -8.0, "high": 8.0}}
        if version == 1:
            recipe["set"] = [
                {"at": [0, "K", 0, 0, d], "f16_bits": bits}
                for d, bits in enumerate(V1_SPECIALS[: geometry.head_dim])
            ]
        return recipe

    first = {"tokens": {"pcg64": {"seed": tokens, "count": b}}, "values": values(0)}
    if block_set == "full":
        second = {"tokens": {"pcg64": {"seed": tokens + 1, "count": b}}, "values": values(1)}
    else:
        second = {"n_tokens": max(1, b - 1), "values": values(1)}
    return [first, second]


def _skip_unless_able(producer: Testee, consumer: Testee, version: int) -> None:
    for role, testee, needs in (
        ("producer", producer, (Capability.POOL, Capability.EXPORT)),
        ("consumer", consumer, (Capability.POOL, Capability.IMPORT)),
    ):
        for capability in needs:
            if not testee.can(capability):
                not_applicable(f"{role} {testee.label} cannot observe {capability} this way in")
    if version not in producer.info.write_versions:
        not_applicable(f"producer {producer.label} does not write v{version}")
    if version not in consumer.info.read_versions:
        not_applicable(f"consumer {consumer.label} does not read v{version}")


def _export(
    producer: Testee, geometry: oracle.Geometry, blocks: list[oracle.Block], version: int
) -> list[tuple[bytes, list[oracle.Block]]]:
    """The producer's envelopes, each with the blocks it should hold."""
    with producer.adapter.open_pool(geometry, len(blocks)) as pool:
        ids = [pool.write(b.block_hash, b.n_tokens, b.values) for b in blocks]
        try:
            return [(pool.export(ids, version), blocks)]
        except NotObservable:
            # A way in that exports one block per envelope (PullKv) is crossed block by block.
            return [(pool.export([i], version), [b]) for i, b in zip(ids, blocks, strict=True)]


def _check_producer(
    producer: Testee,
    geometry: oracle.Geometry,
    data: bytes,
    blocks: list[oracle.Block],
    v: int,
    nan: str,
) -> None:
    expected = oracle.encode(geometry, blocks, v)
    level = producer.v2_level if v == 2 else "strict"
    try:
        compare_envelopes(expected, data, level, nan, blocks)
    except CaseFailure as exc:
        raise exc.prefixed(
            f"producer {producer.label}: its v{v} export differs from the oracle's encoding of "
            "the blocks it was given:\n"
        ) from None


def _check_consumer(
    consumer: Testee, producer: Testee, geometry: oracle.Geometry, data: bytes, nan: str
) -> None:
    envelope = oracle.decode(data, oracle.ReaderProfile(geometry, consumer.info.read_versions))
    what = f"the v{envelope.version} envelope {producer.label} exported"
    n = max(envelope.n_blocks, 1)
    with consumer.adapter.open_pool(geometry, n) as pool:
        free_before = free_count(pool)
        try:
            ids = pool.import_envelope(data, n)
            check_imported(pool, envelope, ids, [], free_before, data, nan)
        except Refused as refusal:
            raise CaseFailure(
                f"consumer {consumer.label} refused {what}: {refusal}",
                RefusalEvidence(frozenset(), frozenset(), refusal.code, data),
            ) from None
        except CaseFailure as failure:
            raise failure.prefixed(f"consumer {consumer.label}, {what}: ") from None


def test_matrix(producer: Testee, consumer: Testee, version: int, block_set: str) -> None:
    """The consumer reads back, in its own precision, what the producer's envelope holds
    (each NaN a NaN)."""
    _cross(producer, consumer, version, block_set, "any")


def test_matrix_nan_bits(producer: Testee, consumer: Testee, version: int, block_set: str) -> None:
    """test_matrix with each NaN's sign and payload: the producer's envelope byte for byte,
    and the consumer reading back the same bits (SHOULDs, docs/decisions.md)."""
    _cross(producer, consumer, version, block_set, "exact")


def _cross(producer: Testee, consumer: Testee, version: int, block_set: str, nan: str) -> None:
    """One producer x consumer pair, NaNs compared as `nan` says
    (tlkv_conformance.diff.NAN_POLICIES)."""
    _skip_unless_able(producer, consumer, version)
    geometry = _geometry(producer, consumer)
    seed = zlib.crc32(f"{block_set} v{version} {producer.label} {consumer.label}".encode())
    # Against a server (its blocks outlive the run) the hash chain starts from the run's salt.
    chain = max(t.build_target(BuildTarget(geometry)).salt for t in (producer, consumer))
    plans = plan_blocks(geometry, _block_specs(geometry, version, block_set, seed), chain=chain)
    blocks = [plan.as_oracle_block() for plan in plans]
    with calls_to_testee(f"producer {producer.label}"):
        envelopes = _export(producer, geometry, blocks, version)
    for data, held in envelopes:
        _check_producer(producer, geometry, data, held, version, nan)
        with calls_to_testee(f"consumer {consumer.label}"):
            _check_consumer(consumer, producer, geometry, data, nan)
