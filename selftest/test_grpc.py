"""The gRPC way in (`--impl=grpc:HOST:PORT`) and the reference decode server.

Each test starts its own reference server (python -m tlkv_conformance.references.grpc_server
--port 0) as a child process, so every run sees a fresh pool; the suite itself runs in another
child, as a user would run it. docs/grpc.md describes what is observable this way and what is
skipped.
"""

from __future__ import annotations

import dataclasses
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from tlkv_conformance import oracle
from tlkv_conformance.adapters import AdapterSettings, Chunk, PushCounts, parse_impl
from tlkv_conformance.adapters._grpc import GrpcAdapter
from tlkv_conformance.cases import RejectCase, load_case_file
from tlkv_conformance.cases.kinds import ImportCase, TransferCase
from tlkv_conformance.cases.kinds._base import record_hashes
from tlkv_conformance.checks import CaseFailure, calls_to_testee
from tlkv_conformance.diagnosis import attribute
from tlkv_conformance.errors import NotObservable, Refused, SuiteUsageError, WrongCount
from tlkv_conformance.evidence import CountEvidence
from tlkv_conformance.exit_status import EXIT_NOT_SHOWN
from tlkv_conformance.exprs import BuildTarget
from tlkv_conformance.references import grpc_server as reference_server

from selftest.support import (
    Server,
    SuiteRun,
    pool_flags,
    run_conformance,
    shared_once,
    start_reference_server,
)

ROOT = Path(__file__).resolve().parent.parent
# The reader cases of the corpus use this pool; the exhaustive ones the spec example's.
READER_GEOMETRY = (4, 2, 2, 8)
SPEC_GEOMETRY = (2, 1, 1, 2)
# One v1 block of this pool is an envelope of exactly 4 MiB (cases/transfer.yaml).
FOUR_MIB_GEOMETRY = (5, 1, 7, 29959)
# Every case leaves its blocks on the server (tl.kv.v1 cannot release), so plenty of room.
CAPACITY = 20_000
FAILED_PRECONDITION = "FAILED_PRECONDITION"


@pytest.fixture
def grpc_server() -> Iterator[Callable[..., Server]]:
    """`grpc_server(*flags, geometry=(B, L, H, D), capacity=N)` starts a reference server."""
    started: list[Server] = []

    def start(
        *flags: str, geometry: tuple[int, int, int, int] = READER_GEOMETRY, capacity: int = CAPACITY
    ) -> Server:
        server = start_reference_server([*pool_flags(geometry, capacity), *flags])
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


V1_ONLY = "--read-versions=1"


@pytest.fixture(scope="session")
def v1_only_run(tmp_path_factory: pytest.TempPathFactory) -> SuiteRun:
    """The case corpus against a v1-only reference server: run once for the whole self-test
    (support.shared_once), whichever pytest-xdist worker asks first, for the tests reading it."""

    def run() -> dict[str, Any]:
        server = start_reference_server([*pool_flags(READER_GEOMETRY, CAPACITY), V1_ONLY])
        try:
            args = [f"--impl={server.impl}", "cases", "-rs"]
            return dataclasses.asdict(run_conformance(args, tmp_path_factory.mktemp("v1")))
        finally:
            server.stop()

    return SuiteRun(**shared_once(tmp_path_factory, "grpc-v1-only-run", run))


def _adapter(server: Server, options: str = "") -> GrpcAdapter:
    spec = parse_impl(server.impl + options)
    return GrpcAdapter(spec, AdapterSettings(call_timeout=10))


def _skip_reasons(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("SKIPPED")]


def _assert_clean(run, what: str) -> None:
    assert not run.failed, f"{what}: failed {run.failed}\n{run.output[-4000:]}"
    assert run.returncode == 0, f"{what}: exit code {run.returncode}\n{run.output[-4000:]}"
    for line in _skip_reasons(run.output):
        # "SKIPPED [n] file:line: reason": a skip always says why.
        _, _, reason = line.partition(": ")
        assert reason.strip(), line


def _transfer_node(case_id: str) -> str:
    return f"cases/transfer.yaml::{case_id}"


def _transfer_cases() -> list[TransferCase]:
    loaded = load_case_file(ROOT / "cases" / "transfer.yaml", ROOT)
    return [c for c in loaded.cases if isinstance(c, TransferCase)]


# -- the suite against the reference server ----------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("geometry", [READER_GEOMETRY, SPEC_GEOMETRY], ids=["4x2x2x8", "2x1x1x2"])
def test_suite_passes_against_the_reference_server(grpc_server, run_suite, geometry):
    server = grpc_server(geometry=geometry)
    # The whole suite once (conformance/ too), then the case corpus only.
    scope = () if geometry == READER_GEOMETRY else ("cases",)
    run = run_suite(f"--impl={server.impl}", "-rs", *scope)
    _assert_clean(run, "the suite against the reference server")
    # Every transfer case for this server ran, not just skipped.
    for case in _transfer_cases():
        if case.geometry is None and not case.v1_only:
            assert run.outcomes.get(_transfer_node(case.id)) == "passed", case.id


def test_hash_salt_replays_a_run_and_a_bad_one_is_one_line(run_suite):
    """--hash-salt gives the hashes of the run that stated it (the same envelope bytes for the
    same case), another salt other hashes, and each case of a file hashes of its own, even
    from an envelope the file names once; a salt that is no 64-bit number stops the run."""
    loaded = load_case_file(ROOT / "cases" / "reader-v1.yaml", ROOT)
    geometry = oracle.Geometry(*READER_GEOMETRY)

    def envelopes(salt: int) -> dict[str, bytes]:
        built = loaded.cases_for(BuildTarget(geometry, salt))
        return {c.id: c.data for c in built if isinstance(c, ImportCase)}

    first, replay, other = envelopes(0x1234), envelopes(0x1234), envelopes(0x5678)
    fills, padded = first["accept-fills-the-pool"], first["accept-non-zero-padding-of-tail"]
    assert first == replay
    assert fills != other["accept-fills-the-pool"]
    # Both cases use the file's envelope three-blocks: its full blocks differ between them.
    assert record_hashes(fills)[:2] != record_hashes(padded)[:2]
    run = run_suite("--impl=ref", "--hash-salt=0xzz", "cases/transfer.yaml")
    assert run.returncode == 4, run.output[-2000:]
    lines = [line for line in run.output.splitlines() if line.strip()]
    expected = "expected a non-zero 64-bit number, e.g. 0x1f2e3d4c5b6a7988"
    assert lines == [f"ERROR: --hash-salt '0xzz': {expected}"], lines


def test_state_dependent_server_is_named_in_plain_words(grpc_server, run_suite):
    """A server that refuses a block's values the second time they come (the hidden
    --fault=state-dependent) answers one fuzzing input differently on its next try: the
    failure says so with both answers, never as hypothesis's FlakyFailure."""
    server = grpc_server("--fault=state-dependent")
    fuzz = "conformance/test_fuzz.py::test_export_equals_oracle"
    run = run_suite(f"--impl={server.impl}", fuzz)
    assert run.returncode == 1, run.output[-3000:]
    (node,) = run.failed
    message = run.messages[node]
    assert "the server answered this input differently the second time: state-dependent" in message
    assert "\n  first answer: " in message, message
    assert "\n  second answer: " in message, message
    assert "Flaky" not in run.output, run.output[-3000:]


def test_v1_only_server_refuses_v2_with_failed_precondition(v1_only_run, grpc_server):
    run = v1_only_run
    _assert_clean(run, "the suite against a v1-only server")
    assert run.outcomes[_transfer_node("v2-to-v1-only-reader")] == "passed"
    assert run.outcomes[_transfer_node("v2-held-prefix")] == "skipped"
    with _adapter(grpc_server(V1_ONLY)) as adapter:
        v2 = oracle.encode(
            adapter.geometry, [oracle.Block(0, 1, np.zeros(adapter.geometry.values_shape))], 2
        )
        with pytest.raises(Refused) as refusal:
            adapter.transfer.push([Chunk.of_payload(0, 2, 0, v2)])
        assert refusal.value.code == FAILED_PRECONDITION


def test_without_extensions_content_checks_are_skipped(grpc_server, run_suite):
    server = grpc_server("--no-extensions")
    b, layers, heads, dim = READER_GEOMETRY
    impl = f"{server.impl},geometry={b}x{layers}x{heads}x{dim}"
    run = run_suite(f"--impl={impl}", "cases", "-rs")
    _assert_clean(run, "the suite against a server without GetInfo and PullKv")
    assert run.outcomes[_transfer_node("fresh-prompt")] == "passed"
    assert run.outcomes[_transfer_node("pull-back-v1")] == "skipped"
    assert run.outcomes[_transfer_node("free-blocks-count-stored-only")] == "skipped"
    assert "the server does not offer PullKv" in run.output
    assert "cannot observe pool through this way in" in run.output
    assert not run.passed or all(node.startswith("cases/transfer.yaml::") for node in run.passed), (
        "without the extensions only transfer cases can pass"
    )


def test_without_extensions_the_geometry_is_required(grpc_server, run_suite):
    server = grpc_server("--no-extensions")
    run = run_suite(f"--impl={server.impl}", "cases/transfer.yaml")
    assert run.returncode == 4
    assert "give its pool geometry: grpc:" in run.output


def test_unreachable_server_is_one_line(run_suite):
    with socket.socket() as probe:  # a port nobody listens on (closed again at once)
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    run = run_suite(f"--impl=grpc:127.0.0.1:{port}", "cases/transfer.yaml", "--call-timeout=5")
    assert run.returncode == 4, run.output
    lines = [line for line in run.output.splitlines() if "cannot reach the server" in line]
    assert len(lines) == 1, run.output
    assert f"--impl grpc:127.0.0.1:{port}: cannot reach the server (UNAVAILABLE" in lines[0]
    assert "Traceback" not in run.output


def _expects_only_failed_precondition(case: object, reads: frozenset[int]) -> bool:
    if isinstance(case, TransferCase):
        return case.statuses == frozenset({FAILED_PRECONDITION})
    if isinstance(case, RejectCase):
        testee = SimpleNamespace(
            info=SimpleNamespace(read_versions=reads),
            adapter=SimpleNamespace(status_domain="grpc"),
            refusal=lambda c_code, grpc_status: grpc_status,
        )
        verdict = case._verdict_for(testee)  # type: ignore[arg-type]
        return verdict is not None and case._acceptable(testee, verdict) == {  # type: ignore[arg-type]
            FAILED_PRECONDITION
        }
    return False


def test_wrong_version_status_fails_exactly_the_failed_precondition_cases(
    v1_only_run, grpc_server, run_suite
):
    faulty = grpc_server(V1_ONLY, "--fault=wrong-version-status")
    good = v1_only_run
    bad = run_suite(f"--impl={faulty.impl}", "cases")
    _assert_clean(good, "the suite against a v1-only server")
    covering = set()
    for path in sorted((ROOT / "cases").glob("*.yaml")):
        for case in load_case_file(path, ROOT).cases:
            node = f"cases/{path.name}::{case.id}"
            if good.outcomes.get(node) == "passed" and _expects_only_failed_precondition(
                case, frozenset({1})
            ):
                covering.add(node)
    assert _transfer_node("v2-to-v1-only-reader") in covering
    assert _transfer_node("kv-format-not-read") in covering
    assert set(bad.failed) == covering, (
        f"failed but not FAILED_PRECONDITION cases: {sorted(set(bad.failed) - covering)}; "
        f"FAILED_PRECONDITION cases that passed: {sorted(covering - set(bad.failed))}"
    )


def test_payload_of_exactly_4_mib(grpc_server, run_suite):
    server = grpc_server(geometry=FOUR_MIB_GEOMETRY, capacity=4)
    run = run_suite(f"--impl={server.impl}", "cases/transfer.yaml", "-k", "4-mib")
    _assert_clean(run, "the 4 MiB cases")
    assert {
        _transfer_node("payload-of-4-mib-accepted"),
        _transfer_node("payload-over-4-mib-refused"),
        _transfer_node("payload-over-4-mib-status"),
    } == set(run.passed)


@pytest.mark.parametrize(
    ("geometry", "case"),
    [
        ((5, 1, 7, 29960), "valid-payload-over-4-mib-refused"),
        ((16, 80, 8, 128), "engine-sized-payload-over-4-mib-refused"),
    ],
)
def test_a_valid_payload_over_4_mib_is_refused(grpc_server, run_suite, geometry, case):
    """At these pools a valid one-block v1 envelope exists that is over 4 MiB: the server
    refuses it (the client sends it as it is), and the case's stream registers nothing."""
    server = grpc_server(geometry=geometry, capacity=2)
    run = run_suite(f"--impl={server.impl}", f"cases/transfer.yaml::{case}")
    _assert_clean(run, case)
    assert run.passed == [_transfer_node(case)]


def test_transfer_cases_skip_on_other_testees(run_suite):
    """None applies to a library: the run showed nothing, and does not exit 0."""
    run = run_suite("--impl=ref", "cases/transfer.yaml", "-rs")
    assert run.returncode == EXIT_NOT_SHOWN, run.output
    assert not run.passed, run.output
    assert "is not a gRPC endpoint (--impl grpc:HOST:PORT)" in run.output
    assert "ref: not shown: no MUST requirement" in run.output


def test_the_transfer_types_need_no_grpcio():
    """The transfer kind and a scripted peer use Chunk and Transfer without importing grpcio
    (a run that sends nothing over gRPC never loads it)."""
    code = (
        "import sys; import tlkv_conformance.cases.kinds.transfer; "
        "from tlkv_conformance.adapters import Chunk, PushCounts, ServerInfo, Transfer; "
        "print(sorted(m for m in sys.modules if m == 'grpc' or m.startswith('grpc.')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


def test_chunk_limits_are_the_specs_and_the_reference_servers():
    """One chunk carries at most 4 MiB (spec, "Transfer"); the suite and the reference server,
    which shares no code with it, receive the same: 4 MiB and 64 KiB for the other fields."""
    assert oracle.MAX_CHUNK_PAYLOAD == 4 * 1024 * 1024 == reference_server.MAX_PAYLOAD
    assert oracle.CHUNK_RECEIVE_LIMIT == 4 * 1024 * 1024 + 64 * 1024
    assert oracle.CHUNK_RECEIVE_LIMIT == reference_server.RECEIVE_LIMIT


# -- the adapter and the server, in this process -----------------------------------------------


def test_server_describes_its_pool(grpc_server):
    server = grpc_server("--read-versions=1,2", capacity=7)
    with _adapter(server) as adapter:
        info = adapter.transfer.server_info()
        assert info.geometry == oracle.Geometry(*READER_GEOMETRY)
        assert info.read_versions == {1, 2}
        assert info.free_blocks == 7
        described = adapter.info()
        assert "hash" not in described.capabilities
        assert {"pool", "import", "export"} <= described.capabilities
        with pytest.raises(NotObservable, match="block_hash cannot be observed"):
            adapter.block_hash(0, [1, 2, 3, 4])


def test_pool_full_is_resource_exhausted_and_the_stream_is_undone(grpc_server):
    server = grpc_server(capacity=2)
    with _adapter(server) as adapter:
        geometry = adapter.geometry
        blocks = [
            oracle.Block(oracle.block_hash(0, [i] * 4), 4, np.full(geometry.values_shape, i))
            for i in range(3)
        ]
        envelopes = [oracle.encode(geometry, [b], 1) for b in blocks]
        first = [Chunk.of_payload(0, 1, blocks[0].block_hash, envelopes[0])]
        assert adapter.transfer.push(first).blocks_stored == 1
        # Two more blocks into one free one: the second is refused and the first undone.
        rest = [
            Chunk.of_payload(i, 1, blocks[i + 1].block_hash, envelopes[i + 1]) for i in range(2)
        ]
        with pytest.raises(Refused) as refusal:
            adapter.transfer.push(rest)
        assert refusal.value.code == "RESOURCE_EXHAUSTED"
        assert adapter.transfer.has_blocks([b.block_hash for b in blocks]) == [True, False, False]
        assert adapter.transfer.server_info().free_blocks == 1


def test_prefix_cache_reads_a_held_payload_in_full_then_shares_it(grpc_server):
    """--dedup: a payload for a held hash is counted in blocks_reused and payload_bytes and
    takes no block; one breaking a reader rule is refused as if the hash were new. A case's
    pool counts the shared payload as a block of its own, as a fresh pool would."""
    server = grpc_server("--dedup")
    with _adapter(server) as adapter:
        geometry = adapter.geometry
        block = oracle.Block(oracle.block_hash(0, [7] * 4), 4, np.ones(geometry.values_shape))
        payload = oracle.encode(geometry, [block], 1)
        chunk = Chunk.of_payload(0, 1, block.block_hash, payload)
        assert adapter.transfer.push([chunk]) == PushCounts(1, 0, len(payload))
        free = adapter.transfer.server_info().free_blocks
        assert adapter.transfer.push([chunk]) == PushCounts(0, 1, len(payload))
        assert adapter.transfer.server_info().free_blocks == free
        bad = oracle.seal(payload[: oracle.HEADER_SIZE + 8] + b"\0\0\0\0" + payload[40:-4])
        with pytest.raises(Refused) as refusal:
            adapter.transfer.push([Chunk.of_payload(0, 1, block.block_hash, bad)])
        assert refusal.value.code == "DATA_LOSS"
        assert adapter.transfer.has_blocks([block.block_hash]) == [True]
        with adapter.open_pool(geometry, 4) as pool:
            first = pool.write(block.block_hash, 4, block.values)
            again = pool.import_envelope(payload, 4)
            assert len({first, *again}) == 2
            assert pool.free_blocks() == 2


def test_a_wrong_count_is_its_own_cause_not_a_fault():
    """A PushKv count that breaks blocks_stored + blocks_reused = chunks, and a free count that
    moves by another number than the blocks allocated, are diagnosed as such: not as a crash
    or hang (which "implementation fault" is kept for)."""
    with pytest.raises(CaseFailure) as failure, calls_to_testee():
        raise WrongCount("PushKv of 3 payloads answered blocks_stored 1", ("XFER-COUNTS",))
    counted = attribute(failure.value.evidence, ("READ-ACCEPT",))
    assert getattr(counted.cause, "id", None) == "xfer-counts"
    assert counted.blamed == ("XFER-COUNTS",)
    assert "implementation fault" not in str(failure.value)
    freed = attribute(CountEvidence(0, 3, released=False), ("READ-ACCEPT", "IMPORT-ENOMEM"))
    assert getattr(freed.cause, "id", None) == "free-count"
    assert freed.blamed == ("READ-ACCEPT",)


def test_chunks_come_in_order(grpc_server):
    server = grpc_server()
    with _adapter(server) as adapter:
        block = oracle.Block(0, 1, np.zeros(adapter.geometry.values_shape))
        envelope = oracle.encode(adapter.geometry, [block], 1)
        with pytest.raises(Refused) as refusal:
            adapter.transfer.push([Chunk.of_payload(1, 1, 0, envelope)])
        assert refusal.value.code == "INVALID_ARGUMENT"
        assert "index 1" in refusal.value.detail


def test_pull_of_an_unheld_hash_or_unread_format(grpc_server):
    server = grpc_server("--read-versions=1")
    with _adapter(server) as adapter:
        with pytest.raises(Refused) as unheld:
            adapter.transfer.pull([0x1234], 1)
        assert unheld.value.code == "NOT_FOUND"
        with pytest.raises(Refused) as unread:
            adapter.transfer.pull([], 2)
        assert unread.value.code == FAILED_PRECONDITION


def test_receive_limit_admits_4_mib_and_the_other_fields(grpc_server):
    server = grpc_server()
    with _adapter(server) as adapter:
        long_id = "r" * 30_000
        header = oracle.encode_header(adapter.geometry, 1, 1)
        exact = header + b"\x00" * (4 * 1024 * 1024 - len(header))  # READ-LENGTH: DATA_LOSS
        with pytest.raises(Refused) as refusal:  # not a valid envelope: refused, but not for size
            adapter.transfer.push([Chunk.of_payload(0, 1, 0, exact, long_id)])
        assert refusal.value.code == "DATA_LOSS"
        with pytest.raises(Refused) as refusal:
            adapter.transfer.push([Chunk.of_payload(0, 1, 0, exact + b"\x00", long_id)])
        assert refusal.value.code == "RESOURCE_EXHAUSTED"


def test_pool_operations_map_onto_the_transfer(grpc_server):
    server = grpc_server()
    with _adapter(server) as adapter:
        geometry = adapter.geometry
        with adapter.open_pool(geometry, 8) as pool:
            assert pool.free_blocks() == 8
            values = np.arange(geometry.n_elements, dtype=np.float32).reshape(geometry.values_shape)
            tokens = [7, 8, 9, 10]
            full = oracle.Block(oracle.block_hash(0, tokens), 4, values)
            tail = oracle.Block(0, 2, values)
            data = oracle.encode(geometry, [full, tail], 1)
            ids = pool.import_envelope(data, 8)  # valid: one stream of one-block chunks
            assert len(ids) == 2
            assert pool.free_blocks() == 6
            assert pool.find(full.block_hash) == ids[0]
            read = pool.read(ids[0])
            assert (read.block_hash, read.n_tokens) == (full.block_hash, 4)
            np.testing.assert_array_equal(read.values, values.astype(np.float16))
            assert pool.export([ids[0]], 1) == oracle.encode(geometry, [full], 1)
            with pytest.raises(NotObservable, match="no hash"):
                pool.read(ids[1])
            with pytest.raises(NotObservable, match="no way to release"):
                pool.release(ids[0])
            # A rejected two-block envelope: DATA_LOSS, saying both rules call for it.
            broken = bytearray(data)
            broken[-1] ^= 1
            with pytest.raises(Refused) as refusal:
                pool.import_envelope(bytes(broken), 8)
            assert refusal.value.code == "DATA_LOSS"
            assert "n_blocks 2" in refusal.value.detail
            assert "READ-CRC" in refusal.value.detail
            assert pool.free_blocks() == 6
        with pytest.raises(NotObservable, match="serves pools of 4x2x2x8 only"):
            adapter.open_pool(oracle.Geometry(2, 1, 1, 2), 4)


def test_a_hidden_failed_precondition_is_not_replayed(grpc_server):
    server = grpc_server("--read-versions=1")
    with _adapter(server) as adapter, adapter.open_pool(adapter.geometry, 4) as pool:
        block = oracle.Block(0, 1, np.zeros(adapter.geometry.values_shape))
        two_v2 = oracle.encode(adapter.geometry, [block, block], 2)
        with pytest.raises(NotObservable, match="FAILED_PRECONDITION of READ-VERSION"):
            pool.import_envelope(two_v2, 4)


def test_no_extensions_probes_the_versions_read(grpc_server):
    server = grpc_server("--no-extensions", "--read-versions=1")
    b, layers, heads, dim = READER_GEOMETRY
    with _adapter(server, f",geometry={b}x{layers}x{heads}x{dim}") as adapter:
        info = adapter.info()
        assert info.read_versions == {1}
        assert info.capabilities == {"import"}
    with pytest.raises(SuiteUsageError, match="is geometry= right"):
        _adapter(server, ",geometry=4x2x2x16")


def test_a_server_that_does_not_start_is_named_with_its_last_words() -> None:
    """The one way a reference server is started (the interop tests, the self-test) waits for
    `listening on HOST:PORT`; a server that exits first is one message naming the command and
    the last line it wrote on stderr, never a hang."""
    command = [sys.executable, "-c", "import sys; print('cannot bind', file=sys.stderr); exit(3)"]
    with pytest.raises(reference_server.ServerDidNotStart) as raised:
        reference_server.launch(command, startup_seconds=20)
    assert (
        str(raised.value)
        == f"{' '.join(command)} did not start: 'no line'; its last words: cannot bind"
    )
