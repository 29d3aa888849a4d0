"""The prefill side of tl.kv.v1 (issue 24): the scripted decode server answers as its script
says and records what it received; the `prefill-py:` way in isolates a client that raises,
hangs, exits or answers garbage (a failed case, the run goes on); the reference client passes
(the catalogue's prefill mutants are caught by selftest/test_mutants.py)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import grpc
import numpy as np
import pytest
import yaml
from tlkv_conformance import oracle
from tlkv_conformance.adapters import Chunk, PushCounts, parse_impl
from tlkv_conformance.adapters._grpc_client import chunk_message
from tlkv_conformance.errors import SuiteUsageError
from tlkv_conformance.grpc_stubs import kv_pb2, kv_pb2_grpc
from tlkv_conformance.scripted_server import (
    ChunkReceived,
    GetInfoCall,
    HasBlocksCall,
    ScriptedDecodeServer,
    ServerScript,
    Stalled,
    StreamEnded,
)

from selftest.mutation import load_catalogue, planted
from selftest.support import ROOT, run_conformance

GEOMETRY = oracle.Geometry(2, 1, 1, 2)
REFERENCE = "prefill-py:tlkv_conformance.references.prefill_client"
CASES = "cases/prefill.yaml"
# The spec's worked example: tokens [1, 2, 3, 4, 5] at B = 2.
HASHES = [0xA91AB0C1027B9366, 0x03DF829571605C60]


def _payload(block_hash: int, version: int = 1) -> bytes:
    values = np.zeros(GEOMETRY.values_shape, dtype=np.float32)
    return oracle.encode(GEOMETRY, [oracle.Block(block_hash, 2, values)], version)


def _stub(server: ScriptedDecodeServer) -> tuple[grpc.Channel, kv_pb2_grpc.KvTransferStub]:
    channel = grpc.insecure_channel(server.address)
    return channel, kv_pb2_grpc.KvTransferStub(channel)


def test_scripted_server_answers_as_scripted_and_records_in_order() -> None:
    script = ServerScript(GEOMETRY, frozenset({1}), held=frozenset({HASHES[0]}))
    with ScriptedDecodeServer(script) as server:
        channel, stub = _stub(server)
        with channel:
            info = stub.GetInfo(kv_pb2.GetInfoRequest(), timeout=5)
            held = stub.HasBlocks(kv_pb2.HasBlocksRequest(block_hashes=HASHES), timeout=5)
            chunks = [
                Chunk.of_payload(0, 1, HASHES[0], b"", "r"),
                Chunk.of_payload(1, 1, HASHES[1], _payload(HASHES[1]), "r"),
            ]
            counts = stub.PushKv(iter([chunk_message(c) for c in chunks]), timeout=5)
            v2 = Chunk.of_payload(0, 2, HASHES[1], _payload(HASHES[1], 2), "r")
            with pytest.raises(grpc.RpcError) as refused:
                stub.PushKv(iter([chunk_message(v2)]), timeout=5)
    assert (info.block_tokens, info.head_dim, list(info.read_versions)) == (2, 2, [1])
    assert list(held.held) == [True, False]
    size = GEOMETRY.envelope_size(1, 1)
    assert (counts.blocks_stored, counts.blocks_reused, counts.payload_bytes) == (1, 1, size)
    # The spec: a chunk whose kv_format the decode side does not read fails the stream.
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert server.record.calls == [
        GetInfoCall(),
        HasBlocksCall(tuple(HASHES), "OK"),
        ChunkReceived(0, chunks[0]),
        ChunkReceived(0, chunks[1]),
        StreamEnded(0, "OK", PushCounts(1, 1, size)),
        ChunkReceived(1, v2),
        StreamEnded(1, "FAILED_PRECONDITION", None),
    ]


def test_scripted_server_injects_faults() -> None:
    script = ServerScript(
        GEOMETRY,
        frozenset({1, 2}),
        has_blocks_status="UNAVAILABLE",
        fail_after=1,
        fail_status="DATA_LOSS",
    )
    chunks = [Chunk.of_payload(i, 1, h, _payload(h), "r") for i, h in enumerate(HASHES)]
    with ScriptedDecodeServer(script) as server:
        channel, stub = _stub(server)
        with channel:
            with pytest.raises(grpc.RpcError) as has_blocks:
                stub.HasBlocks(kv_pb2.HasBlocksRequest(block_hashes=HASHES), timeout=5)
            with pytest.raises(grpc.RpcError) as push:
                stub.PushKv(iter([chunk_message(c) for c in chunks]), timeout=5)
    assert has_blocks.value.code() == grpc.StatusCode.UNAVAILABLE
    assert push.value.code() == grpc.StatusCode.DATA_LOSS
    # Chunk 1 was received (and recorded) before the stream failed on it.
    assert server.record.chunks() == chunks
    assert server.record.streams() == [StreamEnded(0, "DATA_LOSS", None)]


def test_scripted_server_stalls_until_the_case_ends() -> None:
    script = ServerScript(GEOMETRY, frozenset({1}), stall="HasBlocks")
    started = time.monotonic()
    with ScriptedDecodeServer(script) as server:
        channel, stub = _stub(server)
        with channel, pytest.raises(grpc.RpcError) as stalled:
            stub.HasBlocks(kv_pb2.HasBlocksRequest(block_hashes=HASHES), timeout=0.5)
    assert stalled.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert server.record.calls == [HasBlocksCall(tuple(HASHES), "STALLED"), Stalled("HasBlocks")]
    assert time.monotonic() - started < 5  # the stalled handler let go when the case ended


def test_prefill_impl_spelling() -> None:
    spec = parse_impl("prefill-py:my_engine.client,name=engine")
    assert (spec.kind, spec.target, spec.identity) == ("prefill-py", "my_engine.client", "engine")
    with pytest.raises(SuiteUsageError, match="not a dotted module name"):
        parse_impl("prefill-py:not/a/module")


def test_reference_client_passes_and_other_impls_skip(tmp_path: Path) -> None:
    passing = run_conformance([f"--impl={REFERENCE}", "--strict", CASES], tmp_path)
    assert passing.returncode == 0, passing.output[-3000:]
    assert passing.passed
    assert set(passing.outcomes.values()) == {"passed"}, passing.outcomes
    # Every other way in skips them, saying why (here all of the file: nothing to show).
    skipped = run_conformance(["--impl=ref", CASES], tmp_path)
    assert set(skipped.outcomes.values()) == {"skipped"}, skipped.outcomes
    assert "ref is not one (--impl prefill-py:package.module or prefill-exec:COMMAND)" in (
        skipped.output
    )


def test_the_property_tests_skip_a_prefill_client_before_drawing(tmp_path: Path) -> None:
    """A prefill client has no pool: each property test is skipped as not applicable at once,
    not after drawing examples that are each skipped in turn (seconds per test)."""
    run = run_conformance(
        [f"--impl={REFERENCE}", "conformance/test_fuzz.py", "--durations=0", "--durations-min=0"],
        tmp_path,
    )
    assert run.returncode == 6, run.output[-3000:]  # nothing shown: never a pass
    assert list(run.outcomes.values()) == ["skipped"] * 5, run.outcomes
    assert "cannot observe pool through this way in" in run.output
    calls = re.findall(r"^(\d+\.\d+)s call +conformance/test_fuzz.py::(\w+)", run.output, re.M)
    slow = {name: float(took) for took, name in calls if float(took) > 1.0}
    assert slow == {}, run.output[-3000:]


def test_a_module_without_the_protocol_is_one_line(tmp_path: Path) -> None:
    run = run_conformance(["--impl=prefill-py:json", CASES], tmp_path)
    assert run.returncode == 4, run.output[-3000:]
    assert "module json lacks WRITE_VERSIONS, push" in run.output
    assert "Traceback" not in run.output


# Client modules that go wrong in each way a client can: each must fail its cases with the
# reason, and the run must go on to the end (exit 1, every case reported).
BROKEN_CLIENTS = {
    "raises": ("raise RuntimeError('no route to decode')", "push raised RuntimeError"),
    "exits": ("import os; os._exit(3)", "exited with status 3"),
    "hangs": ("import time; time.sleep(60)", "timed out after"),
    "garbage": ("return ['not', 'a', 'result']", "push returned list, not a dict"),
}


@pytest.mark.parametrize("how", sorted(BROKEN_CLIENTS))
def test_a_broken_client_fails_its_cases_and_the_run_goes_on(how: str, tmp_path: Path) -> None:
    body, reason = BROKEN_CLIENTS[how]
    module = tmp_path / f"broken_client_{how}.py"
    module.write_text(f"WRITE_VERSIONS = {{1, 2}}\n\n\ndef push(job):\n    {body}\n")
    started = time.monotonic()
    run = run_conformance(
        [f"--impl=prefill-py:{module.stem}", "--call-timeout=2", CASES, "-k", "fresh or held"],
        tmp_path,
        pythonpath=tmp_path,
    )
    took = time.monotonic() - started
    assert run.returncode == 1, run.output[-3000:]
    assert len(run.failed) == len(run.outcomes) >= 3, run.outcomes
    assert reason in run.messages[run.failed[0]], run.messages[run.failed[0]]
    # A hang costs one deadline and one short wait, then the push is quarantined.
    assert took < 40, took


def test_a_client_reporting_success_after_data_loss_is_caught(tmp_path: Path) -> None:
    """The SHOULD checks can fail: a client that always says OK."""
    module = tmp_path / "optimistic_client.py"
    module.write_text(
        "from tlkv_conformance.references import prefill_client\n"
        "WRITE_VERSIONS = prefill_client.WRITE_VERSIONS\n\n\n"
        "def push(job):\n"
        "    result = prefill_client.push(job)\n"
        "    return {**result, 'status': 'OK'}\n"
    )
    run = run_conformance(
        [f"--impl=prefill-py:{module.stem}", "--strict", CASES, "-k", "reported"],
        tmp_path,
        pythonpath=tmp_path,
    )
    assert run.returncode == 1, run.output[-3000:]
    refused = [
        f"{CASES}::data-loss-reported",
        f"{CASES}::unavailable-once-mid-stream-reported",
        f"{CASES}::unavailable-reported",
    ]
    assert run.failed == refused, run.outcomes
    assert {run.diagnoses[node] for node in refused} == {"prefill-silent-failure"}


@pytest.mark.parametrize(
    ("mistake", "rounding"),
    [
        ("away-from-zero", "np.floor(a / quantum + 0.5)"),
        ("toward-zero", "np.ceil(a / quantum - 0.5)"),
    ],
)
def test_a_client_rounding_e4m3_ties_otherwise_than_to_even_is_caught(
    tmp_path: Path, mistake: str, rounding: str
) -> None:
    """The v2 case's KV holds exact e4m3 ties (and the other edges of the v2 writer cases), so
    a codec that rounds them away from zero (C's round(), a new user's client did) or toward
    zero sends other payload bytes than the oracle's: the reference client over a patched copy
    of its codec (the catalogue's prefill-e4m3-ties-toward-zero, and its other direction)."""
    mutant = next(m for m in load_catalogue() if m.id == "prefill-e4m3-ties-toward-zero")
    (old, _), *_ = mutant.patch
    mutant = dataclasses.replace(
        mutant,
        id=f"prefill-e4m3-ties-{mistake}",
        patch=((old, f"    rounded = {rounding} * quantum"),),
    )
    with planted(mutant, tmp_path / "mutant") as (impl, package):
        run = run_conformance([f"--impl={impl}", CASES, "-k", "v2"], tmp_path, pythonpath=package)
    caught = f"{CASES}::v2-e4m3-edges"
    assert run.returncode == 1, run.output[-3000:]
    assert run.failed == [caught], run.outcomes
    assert (run.blamed[caught], run.diagnoses[caught]) == (["PREFILL-CONTENT"], "prefill-content")


def test_a_dropped_tail_alone_is_reported_as_no_chunk_sent(tmp_path: Path) -> None:
    """A prompt shorter than a block, its tail dropped: a stream without a chunk, reported as
    that and blamed on XFER-TAIL (not as chunks carrying another request id)."""
    mutant = next(m for m in load_catalogue() if m.id == "prefill-tail-dropped")
    with planted(mutant, tmp_path / "mutant") as (impl, package):
        run = run_conformance(
            [f"--impl={impl}", CASES, "-k", "tail-only"], tmp_path, pythonpath=package
        )
    case = f"{CASES}::tail-only"
    assert run.failed == [case], run.outcomes
    assert (run.blamed[case], run.diagnoses[case]) == (["XFER-TAIL"], "prefill-tail-dropped")
    message = run.messages[case]
    assert "stream 0 ended without a chunk; the prompt is 1 block, the partial tail" in message
    assert "request id" not in message.split("the server's record")[0], message


# -- the harness-process way in (prefill-exec:COMMAND) ------------------------------------------

REFERENCE_HARNESS = shlex.join(
    [sys.executable, "-m", "tlkv_conformance.references.prefill_harness"]
)


def test_harness_impl_spelling() -> None:
    spec = parse_impl("prefill-exec:./engine-harness --port-base 9000,name=engine")
    assert (spec.kind, spec.target, spec.identity) == (
        "prefill-exec",
        "./engine-harness --port-base 9000",
        "engine",
    )
    with pytest.raises(SuiteUsageError, match="No closing quotation"):
        parse_impl("prefill-exec:./harness 'unclosed")
    with pytest.raises(SuiteUsageError, match="no command given"):
        parse_impl("prefill-exec: ")


def test_reference_harness_passes(tmp_path: Path) -> None:
    run = run_conformance([f"--impl=prefill-exec:{REFERENCE_HARNESS}", "--strict", CASES], tmp_path)
    assert run.returncode == 0, run.output[-3000:]
    every_case = yaml.safe_load((ROOT / CASES).read_text(encoding="utf-8"))["cases"]
    assert len(run.passed) == len(run.outcomes) == len(every_case), run.outcomes


def _readme_prefill_commands() -> list[str]:
    """The shell lines of README's "Testing your prefill client" example."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("### Testing your prefill client", 1)[1]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line and not line.startswith("#")]


def test_the_readme_example_runs_from_an_empty_folder(tmp_path: Path) -> None:
    """README: an engine team copies the bundled harness into a folder of its own and runs only
    the prefill cases with it, as the README says, word for word (the venv's interpreter for
    its `.venv/bin/python`)."""
    copy, run_own, *_ = _readme_prefill_commands()
    every_case = yaml.safe_load((ROOT / CASES).read_text(encoding="utf-8"))["cases"]
    for line in (copy, run_own):
        command = line.replace(".venv/bin/python", shlex.quote(sys.executable))
        done = subprocess.run(
            command, shell=True, cwd=tmp_path, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, (command, done.stdout[-3000:], done.stderr[-3000:])
    assert (tmp_path / "my_harness.py").is_file()
    assert f"{len(every_case)} passed, " in done.stdout, done.stdout[-3000:]
    assert "gate: PASS" in done.stdout


def test_a_harness_commands_build_is_its_executable_and_the_files_it_names(tmp_path: Path) -> None:
    """The report's fingerprint of a harness covers its script, not only the interpreter
    (known-failures files record it: a changed script must read as another build)."""
    from tlkv_conformance.references import prefill_harness

    script = tmp_path / "my_harness.py"
    script.write_bytes(Path(prefill_harness.__file__).read_bytes())
    impl = "prefill-exec:" + shlex.join([sys.executable, str(script)])
    report = tmp_path / "report"
    run = run_conformance(
        [f"--impl={impl}", CASES, "-k", "tail-only", f"--conformance-report={report}"], tmp_path
    )
    assert run.returncode == 0, run.output[-3000:]
    (tested,) = json.loads(report.with_suffix(".json").read_text())["implementations"]
    interpreter = Path(shutil.which(sys.executable) or sys.executable)
    assert tested["fingerprint"] == "; ".join(
        f"{path.name}, {len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()}"
        for path, data in ((p, p.read_bytes()) for p in (interpreter, script))
    )


def test_a_harness_command_not_found_is_one_line(tmp_path: Path) -> None:
    run = run_conformance(["--impl=prefill-exec:no-such-harness --flag", CASES], tmp_path)
    assert run.returncode == 4, run.output[-3000:]
    errors = [line for line in run.output.splitlines() if line.startswith("ERROR")]
    assert errors == [
        "ERROR: --impl prefill-exec:no-such-harness --flag: command 'no-such-harness' not "
        "found (not on PATH, nor an executable file)"
    ], run.output[-3000:]
    assert "Traceback" not in run.output


# A harness speaks in protocol up to the point where it goes wrong (`start` or `run`).
_HARNESS = """\
import json, sys, time
GREETING = {{"type": "started", "protocol": 1, "name": "hostile", "write_versions": [1, 2],
            "geometry": None, "kv_from_suite": True}}
for line in sys.stdin:
    message = json.loads(line)
    if message["type"] == "start":
        {start}
    elif message["type"] == "run":
        {run}
    else:
        break
"""
_GREET = "print(json.dumps(GREETING), flush=True)"
# Each harness going wrong in one way: it must fail its cases with the reason, in one line, and
# the run must go on to the end (exit 1, every case reported) in bounded time.
HOSTILE_HARNESSES = {
    "crashes-at-start": (
        "sys.stderr.write('engine: no device\\n'); sys.exit(3)",
        "pass",
        "the harness exited with status 3 (its last line on stderr: 'engine: no device') "
        "before answering start",
    ),
    "garbage-line": (
        _GREET,
        "print('pushing 3 blocks...', flush=True)",
        "the harness answered a run with a line that is not JSON: 'pushing 3 blocks...'",
    ),
    "floods-stdout": (
        _GREET,
        "sys.stdout.write('x' * (3 << 20)); sys.stdout.flush()",
        "the harness answered a run with a line longer than 1048576 bytes",
    ),
    "hangs-on-a-job": (_GREET, "time.sleep(60)", "timed out after 2 s in harness run"),
    "another-protocol": (
        "print(json.dumps({**GREETING, 'protocol': 2}), flush=True)",
        "pass",
        "the harness speaks protocol 2; the suite speaks 1",
    ),
    "exits-mid-run": (
        _GREET,
        "sys.exit(0)",
        "the harness exited with status 0 before answering a run",
    ),
}


@pytest.mark.parametrize("how", sorted(HOSTILE_HARNESSES))
def test_a_hostile_harness_fails_its_cases_and_the_run_goes_on(how: str, tmp_path: Path) -> None:
    start, run_body, reason = HOSTILE_HARNESSES[how]
    script = tmp_path / f"{how}.py"
    script.write_text(_HARNESS.format(start=start, run=run_body))
    command = shlex.join([sys.executable, str(script)])
    started = time.monotonic()
    run = run_conformance(
        [f"--impl=prefill-exec:{command}", "--call-timeout=2", CASES, "-k", "fresh or held"],
        tmp_path,
    )
    took = time.monotonic() - started
    assert run.returncode == 1, run.output[-3000:]
    assert len(run.failed) == len(run.outcomes) >= 3, run.outcomes
    first = run.messages[run.failed[0]]
    assert reason in first, first
    assert "Traceback" not in run.output
    # A hang costs one call's wait and one short wait, then the run is quarantined.
    assert took < 40, took
    assert not _processes_running(script), "a harness outlived the run"


def _processes_running(script: Path) -> list[int]:
    """The processes whose command line names `script`."""
    running = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if str(script).encode() in cmdline.read_bytes().split(b"\0"):
                running.append(int(cmdline.parent.name))
        except OSError:  # it ended while we looked
            continue
    return running


# The reference harness with its greeting or its client changed (a wrapper script).
_WRAPPED = """\
from tlkv_conformance.references import prefill_client, prefill_harness
{change}
prefill_harness.main()
"""


def _wrapped_harness(tmp_path: Path, change: str) -> str:
    script = tmp_path / "wrapped_harness.py"
    script.write_text(_WRAPPED.format(change=change))
    return "prefill-exec:" + shlex.join([sys.executable, str(script)])


def _push_replaced(*body: str) -> str:
    """The change to the reference harness that makes `body` its client's push(job)."""
    return "\n".join(
        ["real_push = prefill_client.push", "def push(job):"]
        + [f"    {line}" for line in body]
        + ["prefill_client.push = push"]
    )


def test_the_geometry_a_harness_serves_is_the_one_its_jobs_have(tmp_path: Path) -> None:
    served = "{'block_tokens': 3, 'n_layers': 1, 'n_kv_heads': 2, 'head_dim': 4}"
    change = f"prefill_harness.GREETING['geometry'] = {served}\n" + _push_replaced(
        "geometry = [job[k] for k in ('block_tokens', 'n_layers', 'n_kv_heads', 'head_dim')]",
        "assert geometry == [3, 1, 2, 4], f'a job at {geometry}'",
        "return real_push(job)",
    )
    impl = _wrapped_harness(tmp_path, change)
    run = run_conformance([f"--impl={impl}", CASES, "-k", "held"], tmp_path)
    assert run.returncode == 0, run.output[-3000:]
    assert len(run.passed) == len(run.outcomes) >= 3, run.outcomes
    # Told another geometry on the command line: bad input, one line.
    conflict = run_conformance([f"--impl={impl},geometry=4x2x2x8", CASES], tmp_path)
    assert conflict.returncode == 4, conflict.output[-3000:]
    assert "geometry=4x2x2x8 given, but the harness serves 3x1x2x4" in conflict.output


def test_a_harness_reporting_an_error_fails_its_cases_and_stays(tmp_path: Path) -> None:
    change = _push_replaced("raise ConnectionError('decode side unreachable')")
    run = run_conformance(
        [f"--impl={_wrapped_harness(tmp_path, change)}", CASES, "-k", "held"], tmp_path
    )
    assert run.returncode == 1, run.output[-3000:]
    assert len(run.failed) == len(run.outcomes) >= 3, run.outcomes
    expected = "the harness reported an error: ConnectionError: decode side unreachable"
    assert all(expected in run.messages[node] for node in run.failed), run.messages


def test_a_harness_pushing_its_engines_own_kv_gets_only_the_engine_kv_cases(
    tmp_path: Path,
) -> None:
    impl = _wrapped_harness(tmp_path, "prefill_harness.GREETING['kv_from_suite'] = False")
    run = run_conformance([f"--impl={impl}", CASES], tmp_path)
    assert run.returncode == 0, run.output[-3000:]
    # Its jobs carry no kv_path; their payloads are checked for structure only.
    engine = {node for node in run.outcomes if "::engine-kv-" in node}
    assert len(engine) >= 2
    assert set(run.passed) == engine, run.outcomes
    assert set(run.with_outcome("skipped")) == set(run.outcomes) - engine
    assert "pushes its engine's own KV only (kv_from_suite false)" in run.output


def test_the_engine_kv_cases_catch_a_client_dropping_the_tail(tmp_path: Path) -> None:
    """Without the suite's KV there is no content to compare, but the structure is checked."""
    from selftest.mutation import load_catalogue, planted

    (mutant,) = [m for m in load_catalogue() if m.id == "prefill-tail-dropped"]
    with planted(mutant, tmp_path) as (impl, path):
        run = run_conformance(
            [f"--impl={impl}", CASES, "-k", "engine-kv"], tmp_path, pythonpath=path
        )
    assert run.returncode == 1, run.output[-3000:]
    assert len(run.failed) == len(run.outcomes) == 2, run.outcomes
    assert all(run.diagnoses[node] == "prefill-tail-dropped" for node in run.failed), run.diagnoses


# The reference client, retrying a stream that broke with UNAVAILABLE in one of three ways
# (its stub wrapped): the whole sequence again, the rest from where it broke, or the whole
# sequence with empty payloads for the blocks the broken stream carried.
_RETRYING_CLIENT = """\
import grpc
from tlkv_conformance.references import prefill_client
from tlkv_conformance.references.grpc_server import messages as pb

WRITE_VERSIONS = prefill_client.WRITE_VERSIONS
push = prefill_client.push
Stub = prefill_client._Stub


class RetryingStub(Stub):
    def __init__(self, channel):
        super().__init__(channel)
        once = self.push_kv

        def push_kv(chunks, timeout):
            chunks, sent = list(chunks), []

            def counted():
                for chunk in chunks:
                    sent.append(chunk)
                    yield chunk

            try:
                return once(counted(), timeout=timeout)
            except grpc.RpcError as error:
                if error.code() != grpc.StatusCode.UNAVAILABLE:
                    raise
            if "{mode}" == "resume":
                chunks = chunks[len(sent) - 1 :]
            elif "{mode}" == "assume-kept":
                chunks = [
                    pb.KvChunk(request_id=c.request_id, index=c.index, kv_format=c.kv_format,
                               block_hash=c.block_hash)
                    if c in sent[:-1] and c.block_hash else c
                    for c in chunks
                ]
            return once(iter(chunks), timeout=timeout)

        self.push_kv = push_kv


prefill_client._Stub = RetryingStub
"""
RETRIES = {
    "whole": None,
    "resume": "prefill-chunk-index",
    "assume-kept": "prefill-empty-unconfirmed",
}


@pytest.mark.parametrize("mode", sorted(RETRIES))
def test_a_retry_after_a_broken_stream_is_the_whole_sequence(mode: str, tmp_path: Path) -> None:
    module = tmp_path / f"retrying_client_{mode.replace('-', '_')}.py"
    module.write_text(_RETRYING_CLIENT.format(mode=mode))
    run = run_conformance(
        [f"--impl=prefill-py:{module.stem}", "--strict", CASES, "-k", "mid-stream"],
        tmp_path,
        pythonpath=tmp_path,
    )
    cases = [f"{CASES}::unavailable-mid-stream", f"{CASES}::unavailable-once-mid-stream"]
    # Whatever the retry sent, the client reports what the server answered it.
    reported = f"{CASES}::unavailable-once-mid-stream-reported"
    assert sorted(run.outcomes) == sorted([*cases, reported]), run.outcomes
    assert run.outcomes[reported] == "passed", run.outcomes
    if RETRIES[mode] is None:
        assert run.returncode == 0, run.output[-3000:]
        assert set(run.passed) >= set(cases), run.outcomes
    else:
        assert run.returncode == 1, run.output[-3000:]
        assert run.failed == cases, run.outcomes
        assert {run.diagnoses[node] for node in cases} == {RETRIES[mode]}, run.diagnoses
