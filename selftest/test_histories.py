"""histories.json, the pool cases as portable histories (docs/vectors.md): run by a minimal
runner that reads only the JSON (selftest/history_runner.py) against the bundled C reference,
every history holds; against the reference with one pool mistake planted, the history written
for it fails. That is what an engine team gating on the vectors alone relies on."""

from __future__ import annotations

import ast
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from tlkv_conformance import oracle, vectors

from selftest import envelope_runner, history_runner, transfer_runner
from selftest.mutation import Mutant, load_catalogue, planted
from selftest.support import pool_flags, start_reference_server

CATALOGUE = {m.id: m for m in load_catalogue()}
# Not in the catalogue: the pytest suite's export-in-asked-order catches it too, but the
# catalogue has no export-order mutant of the C reference; planted here alone.
EXPORT_REVERSED = Mutant(
    id="pool-export-reversed",
    family="pool",
    side="pool",
    target="c",
    description="export writes the blocks asked for in reverse order",
    patch=(
        (
            "    for (uint32_t b = 0; b < n_blocks; b++, p += record) {\n",
            "    uint32_t reversed[n_blocks ? n_blocks : 1];\n"
            "    for (uint32_t b = 0; b < n_blocks; b++)\n"
            "        reversed[b] = blocks[n_blocks - 1 - b];\n"
            "    blocks = reversed;\n"
            "    for (uint32_t b = 0; b < n_blocks; b++, p += record) {\n",
        ),
    ),
)
# The catalogue's registry-shared-between-pools mistake (py-registry-shared-between-pools) is
# planted in the Python reference; this is the same mistake in the C reference, for the ctypes
# runner: one hash registry for the process, emptied when a pool is created.
REGISTRY_SHARED = Mutant(
    id="pool-registry-shared-between-pools",
    family="pool",
    side="pool",
    target="c",
    description="one hash registry per process, emptied when a pool is created",
    patch=(
        (
            "    pool->table = calloc((size_t)table_size, sizeof *pool->table);\n",
            "    static uint32_t shared_table[1u << 16];\n"
            "    memset(shared_table, 0, sizeof shared_table);\n"
            "    pool->table = table_size <= (1u << 16) ? shared_table : NULL;\n",
        ),
        ("    free(pool->table);\n", ""),
    ),
)
PLANTED_HERE = {m.id: m for m in (EXPORT_REVERSED, REGISTRY_SHARED)}
# Each planted mistake, and the history (with the failing step's operation) that must catch it.
PLANTED = {
    "pool-release-keeps-hash": ("cases/pool.yaml::references-and-registry", "find"),
    "pool-free-count-off": ("cases/pool.yaml::references-and-registry", "free_blocks"),
    "pool-write-accepts-hashed-partial": ("cases/pool.yaml::write-refuses-bad-fill", "write"),
    "pool-read-past-fill": ("cases/pool.yaml::write-read-back", "read"),
    "pool-export-unwritten-version": (
        "cases/pool.yaml::v1-only-writer-does-not-write-v2",
        "export_bytes",
    ),
    EXPORT_REVERSED.id: ("cases/pool.yaml::export-in-asked-order", "export"),
    "nan-as-infinity": ("cases/nans.yaml::write-read-nans-odd", "read"),
    REGISTRY_SHARED.id: ("cases/pool.yaml::two-pools-keep-their-own-registries", "find"),
    "registry-delete-without-shift": (
        "cases/pool.yaml::registry-churn-every-live-block-found",
        "find",
    ),
}
# The history each reference build skips, as the pytest suite does.
SKIPPED = {
    "default": {"cases/pool.yaml::v1-only-writer-does-not-write-v2"},
    "f32": {"cases/pool.yaml::v1-only-writer-does-not-write-v2"},
    "v1only": {"cases/pool.yaml::v2-import-exported-as-v1"},
}


@pytest.fixture(scope="session")
def histories_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("vectors")
    vectors.write_vectors(out)
    return out / vectors.HISTORIES_FILE


@pytest.fixture(scope="session")
def histories(histories_path: Path) -> dict[str, Any]:
    return json.loads(histories_path.read_text(encoding="ascii"))


@pytest.mark.parametrize("variant", sorted(SKIPPED))
def test_reference_passes_every_history(
    variant: str, reference_library: Callable[..., Path], histories_path: Path
) -> None:
    outcomes = history_runner.run_file(reference_library(variant), histories_path)
    assert [f"{o.source}: {o.reason}" for o in outcomes if o.verdict == "failed"] == []
    assert {o.source for o in outcomes if o.verdict == "skipped"} == SKIPPED[variant]
    assert len(outcomes) > 20


def test_reference_passes_the_histories_at_another_geometry(
    reference_library: Callable[..., Path], tmp_path: Path
) -> None:
    """`--geometry` builds the cases at the geometry under test at the engine's: the histories
    hold there too (those with a written-out geometry keep it)."""
    geometry = oracle.Geometry(2, 1, 2, 4)
    vectors.write_vectors(tmp_path, geometry)
    path = tmp_path / vectors.HISTORIES_FILE
    document = json.loads(path.read_text(encoding="ascii"))
    schema = json.loads((tmp_path / vectors.SCHEMA_OUT).read_text(encoding="utf-8"))
    assert jsonschema.Draft202012Validator(schema).is_valid(document)
    assert geometry.as_dict() in [h["geometry"] for h in document["vectors"]]
    outcomes = history_runner.run_file(reference_library(), path)
    assert [f"{o.source}: {o.reason}" for o in outcomes if o.verdict == "failed"] == []
    assert {o.source for o in outcomes if o.verdict == "skipped"} == SKIPPED["default"]


@pytest.mark.parametrize("mutant_id", sorted(PLANTED))
def test_planted_pool_mistake_fails_its_history(
    mutant_id: str, histories_path: Path, tmp_path: Path
) -> None:
    mutant = CATALOGUE.get(mutant_id) or PLANTED_HERE[mutant_id]
    source, op = PLANTED[mutant_id]
    with planted(mutant, tmp_path) as (impl, _):
        library = Path(impl.removeprefix("ctypes:"))
        outcomes = history_runner.run_file(library, histories_path)
    failed = {o.source: o for o in outcomes if o.verdict == "failed"}
    assert source in failed, f"{mutant_id} passes {source}"
    assert f"({op})" in failed[source].reason
    assert failed[source].level == "MUST"


def test_a_mistake_of_shoulds_fails_only_should_histories(
    histories_path: Path, tmp_path: Path
) -> None:
    """The catalogue's nan-canonical reads every NaN back as 0x7FFFFFFF: its sign and payload
    lost, a SHOULD (docs/decisions.md). Only the histories asking for NaN bits fail."""
    with planted(CATALOGUE["nan-canonical"], tmp_path) as (impl, _):
        outcomes = history_runner.run_file(Path(impl.removeprefix("ctypes:")), histories_path)
    failed = {o.source: o.level for o in outcomes if o.verdict == "failed"}
    assert "cases/nans.yaml::write-read-nans-odd-bits" in failed
    assert set(failed.values()) == {"SHOULD"}


def test_histories_follow_the_pool_cases(histories: dict[str, Any]) -> None:
    """The histories carry each case's levels and reqs, name blocks before using them, and
    spell out every step's expected result."""
    by_source = {h["source"]: h for h in histories["vectors"]}
    history = by_source["cases/pool.yaml::references-and-registry"]
    assert history["reqs"] == ["POOL-REFS", "POOL-FIND"]
    assert history["level"] == "MUST"
    ops = [(s["op"], s["expect"]) for s in history["steps"]]
    assert ops[6:8] == [("free_blocks", {"count": 2}), ("find", {"status": ["ENOTFOUND"]})]
    assert by_source["cases/nans.yaml::write-read-nans-bits"]["level"] == "SHOULD"
    for h in histories["vectors"]:
        in_pool: dict[str, str] = {}  # label -> the pool it names a block of
        current = history_runner.FIRST_POOL
        for step in h["steps"]:
            current = step["pool"] if step["op"] == "use" else current
            expect = step.get("expect", {})
            used = [step.get("block"), *step.get("blocks", []), expect.get("block")]
            for label in filter(None, used):
                assert in_pool.get(label) == current, f"{h['source']}: {label} not in {current}"
            named = [step["as"]] if isinstance(step.get("as"), str) else step.get("as", [])
            in_pool.update(dict.fromkeys(named, current))
    two_pools = by_source["cases/pool.yaml::fresh-pool-after-another-was-destroyed"]["steps"]
    assert [(s["op"], s.get("pool")) for s in two_pools[:6]] == [
        ("use", "old"), ("write", None), ("write", None), ("use", "first"),
        ("destroy", "old"), ("use", "fresh"),
    ]  # fmt: skip
    # Of the transfer cases only those of the 4 MiB chunk limit are left out, each for its
    # payload's size (the prefill cases are all left out: conversations with a client).
    left_out = {
        o["source"].split("::")[1]: o["reason"]
        for o in histories["omitted"]
        if o["source"].startswith("cases/transfer.yaml::")
    }
    assert set(left_out) == {
        "payload-of-4-mib-accepted",
        "payload-over-4-mib-refused",
        "valid-payload-over-4-mib-refused",
        "engine-sized-payload-over-4-mib-refused",
        "payload-over-4-mib-status",
    }
    assert all("payloads over 16384 bytes are not spelled out" in r for r in left_out.values())


def test_schema_refuses_broken_histories(histories_path: Path, histories: dict[str, Any]) -> None:
    schema = json.loads((histories_path.parent / vectors.SCHEMA_OUT).read_text(encoding="utf-8"))
    validator = jsonschema.Draft202012Validator(schema)
    assert validator.is_valid(histories)
    history = histories["vectors"][0]

    def with_step(step: dict[str, Any]) -> dict[str, Any]:
        return {**histories, "vectors": [{**history, "steps": [step]}]}

    assert validator.is_valid(with_step({"op": "free_blocks", "expect": {"count": 1}}))
    broken = [
        with_step({"op": "free_blocks"}),  # nothing to compare with
        with_step({"op": "find", "hash": "01", "expect": {"status": ["OK"]}}),
        with_step({"op": "release", "block": "a", "expect": {"status": []}}),
        with_step({"op": "forget", "block": "a", "expect": {"status": ["OK"]}}),
        {**histories, "vectors": [{k: v for k, v in history.items() if k != "capacity"}]},
    ]
    for doc in broken:
        assert not validator.is_valid(doc)
    transfer = next(h for h in histories["vectors"] if h["kind"] == "transfer")
    push = next(s for s in transfer["steps"] if s["op"] == "push")

    def with_transfer_step(step: dict[str, Any]) -> dict[str, Any]:
        return {**histories, "vectors": [{**transfer, "steps": [step]}]}

    assert validator.is_valid(with_transfer_step(push))
    for step in [
        {**push, "expect": {"status": ["EFORMAT"]}},  # a C status, not a gRPC one
        {**push, "chunks": [{**push["chunks"][0], "crc32c": 1}]},
        {"op": "free_blocks"},  # neither a mark nor a drop
        {"op": "write", "hash": "00", "n_tokens": 1, "values_f32le_hex": "", "expect": {}},
    ]:
        assert not validator.is_valid(with_transfer_step(step))


@pytest.mark.parametrize("runner", [history_runner, envelope_runner, transfer_runner])
def test_runner_shares_nothing_with_the_suite(runner: Any) -> None:
    """A runner computes no expectation: it imports no part of the suite or the oracle (the
    transfer runner only the stubs generated from the proto, as any engine generates its own)."""
    tree = ast.parse(Path(runner.__file__).read_text(encoding="utf-8"))
    imported = {
        alias.name if isinstance(node, ast.Import) else node.module or ""
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    imported.discard("tlkv_conformance.grpc_stubs")
    assert not {m for m in imported if m.startswith(("tlkv_conformance", "harness", "numpy"))}


# -- transfer histories -----------------------------------------------------------------------

# The server the transfer histories are written for: the pool of cases/transfer.yaml's geometry
# (the reference server's default; room for every history's blocks).
TRANSFER_SERVER = pool_flags((4, 2, 2, 8), 20_000)
# The transfer histories a reference server reading v1 and v2 skips: the v1-only reader's.
TRANSFER_SKIPPED = {"cases/transfer.yaml::v2-to-v1-only-reader"}
# Each planted server mistake (the catalogue's gRPC mutants), the history that must catch it,
# the step that fails, and its level (an atomic stream is a decision: docs/grpc.md).
PLANTED_IN_SERVER = {
    "xfer-crc-unchecked": ("cases/transfer.yaml::crc-field-mismatch", "push", "MUST"),
    "xfer-stream-not-atomic": (
        "cases/transfer.yaml::refused-stream-is-atomic",
        "has_blocks",
        "SHOULD",
    ),
    "xfer-pull-index-block-id": (
        "cases/transfer.yaml::pull-numbers-chunks-by-request",
        "pull",
        "SHOULD",
    ),
}


def _verdicts(outcomes: list[transfer_runner.Outcome], verdict: str) -> dict[str, str]:
    return {o.source: o.reason for o in outcomes if o.verdict == verdict}


def test_reference_server_passes_every_transfer_history(histories_path: Path) -> None:
    server = start_reference_server(TRANSFER_SERVER)
    try:
        outcomes = transfer_runner.run_file(server.address, histories_path)
    finally:
        server.stop()
    assert _verdicts(outcomes, "failed") == {}
    assert set(_verdicts(outcomes, "skipped")) == TRANSFER_SKIPPED
    assert len(outcomes) > 20


def test_transfer_histories_need_a_fresh_server(histories_path: Path) -> None:
    """A server keeps what it stored: run twice, the histories find their blocks held before
    anything was sent (docs/vectors.md: a fresh server, or fresh tokens from the suite)."""
    server = start_reference_server(TRANSFER_SERVER)
    try:
        transfer_runner.run_file(server.address, histories_path)
        again = transfer_runner.run_file(server.address, histories_path)
    finally:
        server.stop()
    failed = _verdicts(again, "failed")
    assert "step 1 (has_blocks)" in failed["cases/transfer.yaml::fresh-prompt"]


@pytest.mark.parametrize("mutant_id", sorted(PLANTED_IN_SERVER))
def test_planted_server_mistake_fails_its_transfer_history(
    mutant_id: str, histories_path: Path, tmp_path: Path
) -> None:
    mutant = CATALOGUE[mutant_id]
    assert mutant.target == "grpc"
    source, op, level = PLANTED_IN_SERVER[mutant_id]
    with planted(mutant, tmp_path) as (impl, _):
        outcomes = transfer_runner.run_file(impl.removeprefix("grpc:"), histories_path)
    failed = {o.source: o for o in outcomes if o.verdict == "failed"}
    assert source in failed, f"{mutant_id} passes {source}"
    assert f"({op})" in failed[source].reason
    assert failed[source].level == level
