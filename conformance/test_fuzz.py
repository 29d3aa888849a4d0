"""Properties on drawn inputs, through whichever adapter is selected (tlkv_conformance.strategies).

Each example is a case spec run by the same case kinds as the YAML corpus; a failing example is
shown as a YAML case (and written to cases/regressions/ with --write-regressions).
"""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from tlkv_conformance import oracle, strategies
from tlkv_conformance.adapters import Capability
from tlkv_conformance.cases import EnvelopeResolver, mutate, needs
from tlkv_conformance.checks import not_applicable

pytestmark = pytest.mark.fuzz
MAX_POOL_ELEMENTS = 1 << 20


def _fixed(testee) -> list[int] | None:
    g = testee.geometry
    return None if g is None else [g.block_tokens, g.n_layers, g.n_kv_heads, g.head_dim]


def _observable(testee, *capabilities: str) -> None:
    """Skip the test before it draws anything when its way in cannot observe what every one of
    its examples needs (a prefill client has no pool): each would only be skipped in turn."""
    if reason := needs(testee, *capabilities):
        not_applicable(reason)


def _versions(testee, which: str) -> list[int]:
    versions = sorted(getattr(testee.info, which) & oracle.KNOWN_VERSIONS)
    if not versions:
        not_applicable(f"{testee.label} has no envelope version for this property")
    return versions


@pytest.mark.hash
@pytest.mark.reqs("HASH-FNV", "HASH-INPUT", "HASH-ZERO")
@given(parent=st.integers(0, strategies.U64_MAX), tokens=strategies.tokens(1, 64))
def test_block_hash_equals_oracle(testee, fuzz_case, parent, tokens) -> None:
    if not testee.can(Capability.HASH):
        not_applicable(f"{testee.label} cannot observe block_hash")
    fuzz_case.check({"kind": "hash", "parent": parent, "tokens": tokens}, testee)


@pytest.mark.writer
@pytest.mark.reqs(
    "ENV-HEADER", "ENV-RECORD", "ENV-CRC", "V1-LAYOUT", "V1-PAD", "V2-LAYOUT", "V2-SCALE", "V2-E4M3"
)
@given(data=st.data())
def test_export_equals_oracle(testee, fuzz_case, data) -> None:
    _observable(testee, Capability.POOL, Capability.EXPORT)
    version = data.draw(st.sampled_from(_versions(testee, "write_versions")), label="version")
    envelope = strategies.envelope_specs(version, fixed=testee.geometry)
    build = data.draw(envelope, label="envelope")["build"]
    fuzz_case.check({"kind": "export", **build}, testee)


@pytest.mark.writer
@pytest.mark.reader
@pytest.mark.reqs("READ-ACCEPT", "POOL-WRITE-READ", "V2-DECODE")
@given(data=st.data())
def test_import_of_export_reads_back(testee, fuzz_case, data) -> None:
    _observable(testee, Capability.POOL, Capability.EXPORT, Capability.IMPORT)
    versions = sorted(set(_versions(testee, "write_versions")) & testee.info.read_versions)
    version = data.draw(st.sampled_from(versions or [0]), label="version")
    if not version:
        not_applicable(f"{testee.label} reads none of the versions it writes")
    envelope = strategies.envelope_specs(version, fixed=testee.geometry)
    build = data.draw(envelope, label="envelope")["build"]
    fuzz_case.check({"kind": "roundtrip", **build}, testee)


def _refused_or_read(
    data: bytes,
    envelope: dict,
    mutations: list,
    reseal: bool,
    read_versions: frozenset[int],
    pool: list[int] | None = None,
) -> dict:
    """The case spec for a mutated envelope: a rejection if the oracle rejects it under this
    reader and pool geometry (default: the header's), else an import that must read back what
    the oracle decodes."""
    try:
        geometry = oracle.Geometry(*pool) if pool else oracle.header_geometry(data)
    except ValueError:
        geometry = None
    if geometry is not None:
        violations = oracle.find_violations(data, oracle.ReaderProfile(geometry, read_versions))
        if not violations:
            # A valid envelope declaring a geometry no test pool can hold (an empty envelope
            # with head_dim 2^32 - 1, say) says nothing a smaller one would not.
            assume(geometry.n_elements <= MAX_POOL_ELEMENTS)
            return {"kind": "import", "envelope": {"hex": data.hex()}}
    spec = {"kind": "reject", "envelope": envelope, "reseal": reseal, "expect": {"any_rule": True}}
    if read_versions == {1}:
        # A v1-only reader's verdict is the one to check (a v2 envelope breaks READ-VERSION).
        spec["reader"] = "v1-only"
    if mutations:
        spec["mutate"] = mutations
    if pool:
        spec["pool"] = {"geometry": pool}
    elif geometry is None and "build" in envelope:
        spec["pool"] = {"geometry": envelope["build"]["geometry"]}
    return spec


@pytest.mark.reader
@pytest.mark.reqs(
    "READ-LENGTH",
    "READ-MAGIC",
    "READ-CRC",
    "READ-VERSION",
    "READ-DTYPE",
    "READ-GEOMETRY",
    "READ-NTOKENS",
    "READ-HASH-FILL",
    "READ-ATOMIC",
)
@given(data=st.data())
def test_mutated_envelope_refused_with_oracle_code_or_read(testee, fuzz_case, data) -> None:
    _observable(testee, Capability.POOL, Capability.IMPORT)
    fixed = _fixed(testee)
    if fixed is None:
        envelope_strategy = strategies.envelope_specs(min_blocks=1, realistic=False)
        envelope = data.draw(envelope_strategy, label="envelope")
        pool = data.draw(strategies.other_geometries(envelope["build"]["geometry"]), label="pool")
    else:  # the pool is the implementation's own; the envelope may be of another geometry
        pool = fixed
        shape = oracle.Geometry(*data.draw(strategies.other_geometries(fixed), label="shape"))
        envelope_strategy = strategies.envelope_specs(min_blocks=1, fixed=shape)
        envelope = data.draw(envelope_strategy, label="envelope")
    reseal = data.draw(st.sampled_from([True, True, True, False]), label="reseal")
    resolver = EnvelopeResolver({}, fuzz_case.root)
    base = resolver.resolve(envelope).data
    mutations = data.draw(strategies.mutation_lists(base, envelope, reseal), label="mutations")
    mutated = mutate(base, mutations, reseal, resolver)
    # A way in that reads nothing (a prefill client) cannot import: the spec is built as for a
    # reader of every version, and skipped as not observable.
    read_versions = testee.info.read_versions or oracle.KNOWN_VERSIONS
    spec = _refused_or_read(mutated, envelope, mutations, reseal, read_versions, pool)
    fuzz_case.check(spec, testee)


@pytest.mark.reader
@pytest.mark.reqs("READ-LENGTH-MIN", "READ-LENGTH", "READ-MAGIC", "READ-CRC", "READ-ATOMIC")
@given(envelope=strategies.random_envelopes())
def test_arbitrary_bytes_are_refused_safely(testee, fuzz_case, envelope) -> None:
    _observable(testee, Capability.POOL, Capability.IMPORT)
    data = bytes.fromhex(envelope["hex"])
    spec = _refused_or_read(data, envelope, [], False, testee.info.read_versions, _fixed(testee))
    if spec["kind"] == "reject" and "pool" not in spec:
        try:
            fits = oracle.header_geometry(data).n_elements <= MAX_POOL_ELEMENTS
        except ValueError:
            fits = False
        # A header too short to read, or declaring a pool no test can hold (a 28-byte input
        # can declare 2^30 positions per block): refused just the same by a small pool.
        if not fits:
            spec["pool"] = {"geometry": [2, 1, 1, 2]}
    fuzz_case.check(spec, testee)
