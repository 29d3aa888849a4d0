"""Interop of the two halves of tl.kv.v1 (docs/grpc.md, "Interop"; docs/report.md): each
prefill client of the run pushes one prompt into each decode server of the run, and the
decode side shows that it arrived.

The clients are the bundled reference client (`ref-client`, tlkv_conformance.references.
prefill_client) and each --impl prefill-py: or prefill-exec:; the servers the bundled
reference server (`ref-server`, started by the suite) and each --impl grpc:. Every pair with
a side under test is crossed (ref-client -> ref-server tests the suite, not an engine: the
self-test runs it), in each version the client writes and the server reads. The server holds
the prompt's first block already (the suite pushes it first, an earlier prompt sharing its
prefix), so the client must skip it; then the client pushes the whole prompt (full blocks and
a partial tail) from the suite's KV. Through the suite's own client (`Transfer`) the decode
side must then hold every full block (HasBlocks), its counts be the spec's (the client's
report of them: blocks stored = missing full blocks + the tail, one reused, payload bytes by
the formula) and, with PullKv, every block read back be the oracle's (v1: byte for byte).

The verdicts are cells of the report's producer x consumer matrix: a client is a row, a server
a column; a failure starts with the pair, and with a bundled side on one end it names the other
side as at fault. With no prefill client and no decode server among the --impl values there is
nothing to cross: one skip says so.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from tlkv_conformance import oracle, runstate
from tlkv_conformance.adapters import (
    AdapterSettings,
    Capability,
    ImplSpec,
    PrefillJob,
    PrefillResult,
    open_adapter,
)
from tlkv_conformance.cases.kinds import PrefillRun, count_mistake, draw_prompt
from tlkv_conformance.cases.kinds.transfer import DEFAULT_VALUES
from tlkv_conformance.checks import CaseFailure, calls_to_testee, not_applicable
from tlkv_conformance.evidence import KnownMistake, RefusalEvidence
from tlkv_conformance.exprs import BuildTarget
from tlkv_conformance.references.grpc_server import ServerDidNotStart, launch
from tlkv_conformance.testee import BundledSide, Testee

pytestmark = [pytest.mark.transfer]

REF_CLIENT = BundledSide("ref-client")
REF_SERVER = BundledSide("ref-server")
CLIENT_MODULE = "tlkv_conformance.references.prefill_client"
SERVER_MODULE = "tlkv_conformance.references.grpc_server"
# The checks' requirements: the decode side holds what was pushed (XFER-HASBLOCKS), the held
# block skipped (XFER-DEDUP), the tail sent (XFER-TAIL), the counts; and the content, read back
# with PullKv (PREFILL-CONTENT), cited only where the server offers PullKv.
REQS = ("XFER-HASBLOCKS", "XFER-DEDUP", "XFER-TAIL", "XFER-BYTES", "XFER-COUNTS")
CONTENT = "PREFILL-CONTENT"
VERSIONS = (1, 2)
# Small, so that a pair costs little; B = 4 leaves room for a partial tail of 3.
DEFAULT_GEOMETRY = oracle.Geometry(block_tokens=4, n_layers=2, n_kv_heads=2, head_dim=8)
FULL_BLOCKS = 3  # the first held by the server before the push
SERVER_CAPACITY = 4096  # blocks: a run's pairs take 4 each per version
SERVER_STARTUP = 20.0  # seconds the bundled server may take to say where it listens
NO_HALF = (
    "interop needs a prefill client (--impl prefill-py: or prefill-exec:) or a decode server "
    "(--impl grpc:) to cross with the bundled references"
)
PARAMS = ("producer", "consumer", "version")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "producer" not in metafunc.fixturenames:
        return
    testees = runstate.testees_of(metafunc.config)
    clients = [t for t in testees if t.can(Capability.PREFILL)]
    servers = [t for t in testees if t.adapter.transfer is not None]
    if not clients and not servers:
        skip = pytest.mark.skip(reason=NO_HALF)
        metafunc.parametrize(PARAMS, [pytest.param(None, None, 0, id="no-half", marks=skip)])
        return
    params = [
        pytest.param(
            client,
            server,
            version,
            id=f"v{version}-{client.label}->{server.label}",
            marks=[getattr(pytest.mark, f"v{version}"), pytest.mark.reqs(*_reqs(server))],
        )
        for version in VERSIONS
        for client in (REF_CLIENT, *clients)
        for server in (REF_SERVER, *servers)
        if (client, server) != (REF_CLIENT, REF_SERVER)
    ]
    metafunc.parametrize(PARAMS, params)


def _reqs(server: Testee | BundledSide) -> tuple[str, ...]:
    transfer = server.adapter.transfer if isinstance(server, Testee) else None
    pulls = transfer is None or transfer.has_pull  # the bundled server offers PullKv
    return (*REQS, CONTENT) if pulls else REQS


class BundledReferences:
    """The bundled reference client and servers (one per geometry), each opened the way an
    --impl is on first use, and closed with the session."""

    def __init__(self, settings: AdapterSettings, v2_level: str, hash_salt: int) -> None:
        self._settings = settings
        self._testee_args = (v2_level, hash_salt)
        self._client: Testee | None = None
        self._servers: dict[oracle.Geometry, Testee] = {}
        self._processes: list[subprocess.Popen[str]] = []

    def _open(self, spec: ImplSpec) -> Testee:
        adapter = open_adapter(spec, self._settings)
        return Testee(spec, adapter, adapter.info(), *self._testee_args)

    def client(self) -> Testee:
        if self._client is None:
            self._client = self._open(ImplSpec(REF_CLIENT.label, "prefill-py", CLIENT_MODULE))
        return self._client

    def server(self, geometry: oracle.Geometry) -> Testee:
        if geometry not in self._servers:
            address = self._start_server(geometry)
            spec = ImplSpec(REF_SERVER.label, "grpc", address, geometry=geometry)
            self._servers[geometry] = self._open(spec)
        return self._servers[geometry]

    def _start_server(self, geometry: oracle.Geometry) -> str:
        """`python -m tlkv_conformance.references.grpc_server` on a port the OS chooses; its
        first line says which."""
        g = geometry
        command = [
            sys.executable,
            "-m",
            SERVER_MODULE,
            "--host=127.0.0.1",
            "--port=0",
            f"--block-tokens={g.block_tokens}",
            f"--n-layers={g.n_layers}",
            f"--n-kv-heads={g.n_kv_heads}",
            f"--head-dim={g.head_dim}",
            f"--capacity={SERVER_CAPACITY}",
        ]
        try:
            address, process = launch(command, SERVER_STARTUP)
        except ServerDidNotStart as exc:
            pytest.fail(f"the bundled reference server: {exc}", pytrace=False)
        self._processes.append(process)
        return address

    def close(self) -> None:
        for testee in [*self._servers.values(), *([self._client] if self._client else [])]:
            testee.adapter.close()
        for process in self._processes:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.fixture(scope="session")
def bundled(request: pytest.FixtureRequest) -> Iterator[BundledReferences]:
    config = request.config
    run = runstate.settings_of(config)
    references = BundledReferences(
        runstate.adapter_settings_of(config), run.v2_level, run.hash_salt
    )
    try:
        yield references
    finally:
        references.close()


def _geometry(client: Testee, server: Testee | BundledSide) -> oracle.Geometry:
    """The one geometry a side serves (a harness's, a server's pool), else a small default."""
    fixed = {t.geometry for t in (client, server) if isinstance(t, Testee) and t.geometry}
    if len(fixed) > 1:
        not_applicable(f"{client.label} and {server.label} serve different geometries")
    return fixed.pop() if fixed else DEFAULT_GEOMETRY


def _skip_unless_able(
    client: Testee, server: Testee, version: int, geometry: oracle.Geometry
) -> None:
    if not client.can(Capability.SUITE_KV):
        not_applicable(
            f"client {client.label} pushes its engine's own KV only (kv_from_suite false): "
            "what the decode side holds cannot be compared with the oracle's"
        )
    if version not in client.info.write_versions:
        not_applicable(f"client {client.label} does not write v{version}")
    if version not in server.info.read_versions:
        not_applicable(f"server {server.label} does not read v{version}")
    size = geometry.envelope_size(1, version)
    if size > oracle.MAX_CHUNK_PAYLOAD:
        not_applicable(f"a one-block v{version} envelope of {geometry} is {size} bytes")


def _pair(producer: Testee | BundledSide, consumer: Testee | BundledSide) -> str:
    """How a failure names its pair, and the side at fault when the other is a reference."""
    pair = f"client {producer.label} -> server {consumer.label}"
    if isinstance(producer, BundledSide):
        return f"{pair} (the bundled reference client's push; server {consumer.label} at fault)"
    if isinstance(consumer, BundledSide):
        return f"{pair} (the bundled reference server; client {producer.label} at fault)"
    return pair


def test_interop(
    producer: Testee | BundledSide,
    consumer: Testee | BundledSide,
    version: int,
    bundled: BundledReferences,
) -> None:
    """The client's push of a prompt reaches the server whole: every full block held, the held
    one reused, the tail stored, the counts the spec's, the content the oracle's."""
    client = bundled.client() if isinstance(producer, BundledSide) else producer
    geometry = _geometry(client, consumer)
    server = bundled.server(geometry) if isinstance(consumer, BundledSide) else consumer
    _skip_unless_able(client, server, version, geometry)
    try:
        _cross(client, server, version, geometry, producer, consumer)
    except CaseFailure as failure:
        raise failure.prefixed(f"{_pair(producer, consumer)}: ") from None


def _cross(
    client: Testee,
    server: Testee,
    version: int,
    geometry: oracle.Geometry,
    producer: Testee | BundledSide,
    consumer: Testee | BundledSide,
) -> None:
    transfer, prefill = server.adapter.transfer, client.adapter.prefill
    # The parameters are such sides.
    assert transfer is not None
    assert prefill is not None
    # Against a server (its blocks outlive the run) the prompt is the run's own.
    chain = server.build_target(BuildTarget(geometry)).salt
    salt = zlib.crc32(f"interop v{version} {client.label} {server.label} {chain}".encode()) + 1
    tail = 1 if geometry.block_tokens > 1 else 0
    prompt = draw_prompt(geometry, version, FULL_BLOCKS, tail, DEFAULT_VALUES, salt)
    run = PrefillRun(transfer, prompt)
    with calls_to_testee(f"server {server.label}"):
        run.prime(1)
    with tempfile.TemporaryDirectory(prefix="tlkv-interop-") as folder:
        kv_path = Path(folder) / "prompt.tlkv"
        kv_path.write_bytes(oracle.encode(geometry, prompt.blocks, 1))
        job = PrefillJob(
            target=server.spec.target,
            request_id=transfer.new_request_id(),
            tokens=tuple(prompt.tokens),
            geometry=geometry,
            kv_format=version,
            deadline=prefill.deadline,
            kv_path=str(kv_path),
        )
        with calls_to_testee(f"client {client.label}"):
            result = prefill.push(job)
    if result.status != "OK":
        raise CaseFailure(
            f"the push ended with {result.status}\n{prompt.describe()}",
            RefusalEvidence(frozenset(), frozenset(), result.status),
        )
    with calls_to_testee(f"server {server.label}"):
        run.expect_held([True] * FULL_BLOCKS, "after the push")
        _check_counts(result, geometry, version, tail, client_at_fault=consumer is REF_SERVER)
        if transfer.has_pull:
            run.compare_content()


def _check_counts(
    result: PrefillResult,
    geometry: oracle.Geometry,
    version: int,
    tail: int,
    client_at_fault: bool,
) -> None:
    """The counts the client reports (the server's answer): every full block but the held one
    stored, and the tail; the held one reused; payload bytes by the spec's formula."""
    size = geometry.envelope_size(1, version)
    stored = FULL_BLOCKS - 1 + tail
    expected = (stored, 1, stored * size)
    counts = result.counts
    got = (counts.blocks_stored, counts.blocks_reused, counts.payload_bytes)
    if got == expected:
        return
    message = (
        f"the push stored {got[0]} blocks, reused {got[1]}, moved {got[2]} payload bytes; "
        f"expected {expected[0]} (missing full blocks {FULL_BLOCKS - 1} + tail {tail}), "
        f"1 (the block the server held), {expected[2]} ({stored} x {size}-byte envelopes)"
    )
    tail_missing = tail and got == (stored - 1, 1, (stored - 1) * size)
    held_resent = got == (stored + 1, 0, (stored + 1) * size)
    if client_at_fault and tail_missing:
        mistake = KnownMistake(
            "prefill-tail-dropped", "the partial tail is not sent", ("XFER-TAIL",)
        )
    elif client_at_fault and held_resent:
        mistake = KnownMistake(
            "prefill-payload-for-held",
            "held blocks are sent with their payload again",
            ("XFER-DEDUP",),
        )
    else:
        mistake = count_mistake(got, expected, size, bool(tail))
    raise CaseFailure(message, mistake)
