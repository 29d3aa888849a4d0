"""Interop both ways (issue 24 item 5; conformance/test_interop.py): the reference client and
server cross cleanly as rows and columns of the report's producer x consumer matrix; a
catalogue mutant of the client fails its row's cell against the bundled reference server, and a
catalogue mutant of the server its column against the bundled reference client, each failure
naming the pair and the side at fault."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from selftest.mutation import load_catalogue, planted
from selftest.support import SuiteRun, pool_flags, run_conformance, start_reference_server

REFERENCE_CLIENT = "prefill-py:tlkv_conformance.references.prefill_client"
INTEROP = "conformance/test_interop.py"
GEOMETRY = (4, 2, 2, 8)  # the interop pairs' own default, so the bundled server is one


def _matrix(tmp_path: Path, name: str) -> dict[tuple[str, str], dict[str, Any]]:
    report = json.loads((tmp_path / f"{name}.json").read_text())
    matrix = report["matrix"]
    assert matrix["producers"][-1] == "ref-client"
    assert matrix["consumers"][-1] == "ref-server"
    return {(c["producer"], c["consumer"]): c for c in matrix["cells"]}


def _interop(run: SuiteRun, client: str, server: str) -> list[str]:
    """The pair's test ids (one per version)."""
    return [
        n for n in run.outcomes if n.startswith(f"{INTEROP}::") and f"-{client}->{server}]" in n
    ]


def test_the_reference_halves_cross_cleanly(tmp_path: Path) -> None:
    server = start_reference_server(pool_flags(GEOMETRY, 4096))
    try:
        run = run_conformance(
            [
                f"--impl={REFERENCE_CLIENT}",
                f"--impl={server.impl}",
                "--strict",
                f"--conformance-report={tmp_path / 'clean'}",
                INTEROP,
            ],
            tmp_path,
        )
    finally:
        server.stop()
    assert run.returncode == 0, run.output[-3000:]
    pairs = [
        (REFERENCE_CLIENT, "ref-server"),
        (REFERENCE_CLIENT, server.impl),
        ("ref-client", server.impl),
    ]
    for client, decode in pairs:
        tests = _interop(run, client, decode)
        assert len(tests) == 2, (client, decode, sorted(run.outcomes))  # v1 and v2
        assert {run.outcomes[t] for t in tests} == {"passed"}
    assert len(run.outcomes) == 6  # ref-client -> ref-server tests the suite: not crossed
    cells = _matrix(tmp_path, "clean")
    assert {pair: cells[pair]["verdict"] for pair in pairs} == dict.fromkeys(pairs, "passed")
    assert ("ref-client", "ref-server") not in cells
    assert "ref-client  -    pass  -" in run.output  # the terminal's row of the bundled client
    page = (tmp_path / "clean.html").read_text()
    pairs_section = page[page.index('<section id="pairs">') :]
    assert "<th><code>ref-client</code></th>" in pairs_section
    assert "<th><code>ref-server</code></th>" in pairs_section
    # Without a client or a server under test there is nothing to cross: one skip says so.
    alone = run_conformance(["--impl=ref", INTEROP], tmp_path)
    assert alone.returncode == 0, alone.output[-3000:]
    assert list(alone.outcomes.values()) == ["skipped"]


def test_a_mutant_client_fails_its_row_and_a_mutant_server_its_column(tmp_path: Path) -> None:
    mutants = {m.id: m for m in load_catalogue()}
    with contextlib.ExitStack() as stack:
        client, path = stack.enter_context(
            planted(mutants["prefill-tail-dropped"], tmp_path / "client")
        )
        server, _ = stack.enter_context(planted(mutants["xfer-tail-not-counted"], tmp_path))
        run = run_conformance(
            [
                f"--impl={client}",
                f"--impl={server}",
                f"--conformance-report={tmp_path / 'mutants'}",
                INTEROP,
            ],
            tmp_path,
            pythonpath=path,
        )
    assert run.returncode == 1, run.output[-3000:]
    cells = _matrix(tmp_path, "mutants")
    for pair in ((client, "ref-server"), ("ref-client", server), (client, server)):
        assert cells[pair]["verdict"] == "failed", (pair, cells[pair])
    # The client's cell against the bundled server: the client named, its mistake diagnosed.
    for test in _interop(run, client, "ref-server"):
        message = run.messages[test]
        assert f"client {client} -> server ref-server (the bundled reference server; client " in (
            message
        ), message
        assert run.blamed[test] == ["XFER-TAIL"], run.blamed[test]
        assert run.diagnoses[test] == "prefill-tail-dropped"
    # The server's cell against the bundled client: the server named, its mistake diagnosed.
    for test in _interop(run, "ref-client", server):
        message = run.messages[test]
        assert f"client ref-client -> server {server} (the bundled reference client's push; " in (
            message
        ), message
        assert run.blamed[test] == ["XFER-BYTES"], run.blamed[test]
        assert run.diagnoses[test] == "xfer-tail-not-counted"
