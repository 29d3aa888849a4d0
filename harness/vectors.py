"""Portable vectors: the bundled corpus as flat JSON, for engines that cannot run Python.

    tlkv-conformance vectors DIR [--geometry BxLxHkvxD]

writes DIR/hash.json, DIR/envelopes.json, DIR/exports.json, DIR/histories.json and
DIR/schema.json (the JSON Schema 2020-12 of all four, a copy of vectors-schema.json beside this
module). docs/vectors.md describes the fields. The expected values are the ones the pytest
suite checks (the cases as built by the loader, confirmed by the oracle), so an engine tested
through the vectors and one tested through pytest are held to the same answers.

The output is a pure function of the corpus and the geometry: keys sorted, no timestamps, one
vector a line, so a regenerated set diffs cleanly against a committed one.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from . import corpus, oracle
from .adapters import GRPC_STATUS_OF, Chunk
from .cases import BlockPlan, CaseFile, CaseFileError, load_case_file
from .cases.kinds import (
    Case,
    ExportCase,
    HashCase,
    HashSequenceCase,
    ImportCase,
    NotApplicableCase,
    PoolCase,
    PrefillCase,
    PrefillRun,
    Prompt,
    RejectCase,
    RoundtripCase,
    TransferCase,
    draw_prompt,
    pull_order_asked,
    shuffled_order,
)
from .checks import in_pool_precision
from .exit_status import EXIT_BROKEN_CASE_FILE, EXIT_USAGE
from .exprs import BuildTarget
from .oracle import Geometry

SCHEMA_FILE = Path(__file__).with_name("vectors-schema.json")
FORMAT = "tlkv-vectors"
FORMAT_VERSION = 1
HASH_FILE = "hash.json"
ENVELOPES_FILE = "envelopes.json"
EXPORTS_FILE = "exports.json"
HISTORIES_FILE = "histories.json"
SCHEMA_OUT = "schema.json"
ALL_READS = oracle.KNOWN_VERSIONS  # a reader of every version the format has
V1_ONLY = frozenset({1})
# Prefixes and bit flips are kept in full (each its own envelope, so a harness needs no
# mutation code) while their base envelope is small, as it is at the case files' geometries.
# At an engine-sized --geometry a thousand copies of a MiB envelope would be gigabytes.
EXPANSION_MAX_BYTES = 16 * 1024
# Which output file a case kind's vectors go to (the kinds not listed have no vectors).
FILE_OF_KIND = {
    HashCase.kind: HASH_FILE,
    HashSequenceCase.kind: HASH_FILE,
    ImportCase.kind: ENVELOPES_FILE,
    RejectCase.kind: ENVELOPES_FILE,
    ExportCase.kind: EXPORTS_FILE,
    RoundtripCase.kind: EXPORTS_FILE,
    PoolCase.kind: HISTORIES_FILE,
    TransferCase.kind: HISTORIES_FILE,
    PrefillCase.kind: HISTORIES_FILE,
}
# The precisions a pool may store in (CONTRACT.md): an imported block's later export depends
# on it, as the pytest suite's expectation does.
POOL_DTYPES = ("f16", "f32")
# Why a transfer case with a payload too large to spell out has no history (docs/vectors.md).
TRANSFER_TOO_LARGE = (
    "its one-block envelope is {size} bytes at {geometry} (the 4 MiB chunk limit's cases need "
    "a server of that geometry): payloads over {limit} bytes are not spelled out in the "
    "vectors; run the suite with --impl=grpc:HOST:PORT against such a server for it"
)
# Why the prefill cases have no history: the implementation is a client the suite serves.
PREFILL_OMITTED = (
    "a prefill case serves a client under test from a scripted decode server and checks what "
    "it recorded: a conversation, not data to hand an engine: run the suite with "
    "--impl=prefill-py:MODULE for it"
)


def _hash_hex(value: int) -> str:
    # u64 values do not survive a JSON number (a double) in most languages.
    return f"{value:016x}"


def _geometry(geometry: Geometry) -> dict[str, int]:
    return geometry.as_dict()


def _values_hex(values: np.ndarray) -> str:
    return np.ascontiguousarray(values, dtype="<f4").tobytes().hex()


def _block(block_hash: int, n_tokens: int, values: np.ndarray) -> dict[str, Any]:
    return {
        "hash": _hash_hex(block_hash),
        "n_tokens": n_tokens,
        "values_f32le_hex": _values_hex(values),
    }


@dataclass
class _Collected:
    """The vectors of one output file, and the cases it leaves out with the reason."""

    vectors: list[dict[str, Any]] = field(default_factory=list)
    omitted: list[dict[str, str]] = field(default_factory=list)


def _common(case: Case, source: str) -> dict[str, Any]:
    common: dict[str, Any] = {
        "kind": case.kind,
        "source": source,
        "reqs": list(case.reqs),
        "level": case.level,
    }
    if case.doc:
        common["doc"] = " ".join(case.doc.split())
    return common


# -- hashes -----------------------------------------------------------------------------------


def _hash_vector(case: HashCase, source: str) -> dict[str, Any]:
    return {
        **_common(case, source),
        "parent": _hash_hex(case.parent),
        "tokens": list(case.tokens),
        "input_hex": oracle.hash_input(case.parent, case.tokens).hex(),
        "hash": _hash_hex(case.expected),
    }


def _sequence_vector(case: HashSequenceCase, source: str) -> dict[str, Any]:
    blocks = []
    parent = oracle.NO_HASH
    b = case.block_tokens
    for index, expected in enumerate(case.expected):
        tokens = list(case.tokens[index * b : (index + 1) * b])
        blocks.append(
            {
                "parent": _hash_hex(parent),
                "tokens": tokens,
                "input_hex": oracle.hash_input(parent, tokens).hex(),
                "hash": _hash_hex(expected),
            }
        )
        parent = expected
    return {
        **_common(case, source),
        "block_tokens": b,
        "tokens": list(case.tokens),
        "blocks": blocks,
    }


# -- envelopes --------------------------------------------------------------------------------


def _broken(data: bytes, geometry: Geometry, reads: frozenset[int]) -> list[oracle.ReaderRule]:
    violations = oracle.find_violations(data, oracle.ReaderProfile(geometry, reads))
    rules = {v.rule.id: v.rule for v in violations}
    return [rules[rule_id] for rule_id in sorted(rules)]


def _declared_blocks(data: bytes) -> int | None:
    field_ = oracle.HEADER_FIELDS["n_blocks"]
    return field_.read(data) if len(data) >= field_.offset + field_.size else None


def _limit_codes(case: RejectCase, free: int) -> tuple[list[str], list[str]]:
    """The caller's-limit refusals the suite also accepts for a rule case (RejectCase's
    _limit_codes, docs/decisions.md): EINVAL when the header claims more blocks than
    max_blocks (the C way in only; max_blocks is the pool's capacity), ENOMEM when more than
    the free blocks."""
    declared = _declared_blocks(case.data)
    if case.rules_first or declared is None or not case.rules:
        return [], []
    c_codes, grpc_codes = [], []
    if declared > case.pool.capacity:
        c_codes.append("EINVAL")
    if declared > free:
        c_codes.append("ENOMEM")
        grpc_codes.append(GRPC_STATUS_OF["ENOMEM"])
    return sorted(c_codes), sorted(grpc_codes)


def _envelope_vector(case: ImportCase | RejectCase, source: str) -> dict[str, Any]:
    pool = case.pool
    reads = case.reads or ALL_READS
    data = case.data
    broken = _broken(data, pool.geometry, reads)
    # A reader of v1 alone may see a case differently (a v2 envelope breaks READ-VERSION for
    # it); the flag tells a v1-only engine which vectors hold for it as they are.
    v1_broken = broken if reads == V1_ONLY else _broken(data, pool.geometry, V1_ONLY)
    same_for_v1 = [r.id for r in v1_broken] == [r.id for r in broken]
    vector: dict[str, Any] = {
        **_common(case, source),
        "envelope_hex": data.hex(),
        "reader": {"geometry": _geometry(pool.geometry), "read_versions": sorted(reads)},
        "pool": {
            "capacity": pool.capacity,
            "preload": [
                {"hash": _hash_hex(p.block_hash), "n_tokens": p.n_tokens} for p in pool.preload
            ],
        },
        "broken_rules": [r.id for r in broken],
        "same_for_v1_only_reader": same_for_v1,
    }
    if isinstance(case, ImportCase):
        envelope = oracle.decode(data, oracle.ReaderProfile(pool.geometry, reads))
        blocks = []
        for record in envelope.records:
            # A reader reads positions past the fill as 0 whatever the bytes there hold.
            values = np.array(record.decoded.values, dtype=np.float32)
            values[..., record.n_tokens :, :] = 0
            blocks.append(_block(record.block_hash, record.n_tokens, values))
        return {
            **vector,
            "result": "valid",
            "version": envelope.version,
            "nan": case.nan,
            "blocks": blocks,
        }
    free = pool.capacity - len(pool.preload)
    if case.code is not None:
        c_codes = [case.code]
        grpc_codes = [case.grpc or GRPC_STATUS_OF[case.code]]
    else:
        c_codes = sorted({r.c_code for r in broken})
        grpc_codes = sorted({r.grpc_status for r in broken})
    also_c, also_grpc = _limit_codes(case, free)
    return {
        **vector,
        "result": "invalid",
        "refused_by": "rules" if broken else "pool",
        "c_codes": c_codes,
        "grpc_codes": grpc_codes,
        "also_allowed": {"c_codes": also_c, "grpc_codes": also_grpc},
    }


# -- exports ----------------------------------------------------------------------------------


def _export_vector(case: ExportCase | RoundtripCase, source: str) -> dict[str, Any]:
    history = getattr(case, "history", ())
    vector = {
        **_common(case, source),
        "geometry": _geometry(case.geometry),
        "version": case.version,
        "history": [_block(p.block_hash, p.n_tokens, p.values) for p in history],
        "blocks": [_block(p.block_hash, p.n_tokens, p.values) for p in case.blocks],
        "envelope_hex": case.expected.hex(),
        "v2_level": case.v2_level,
        "nan": case.nan,
    }
    # A value no f16 holds is held rounded by an f16 pool, which then exports other bytes:
    # its expectation, as ExportCase checks an f16 pool against it.
    in_f16 = getattr(case, "expected_f16", case.expected)
    if in_f16 != case.expected:
        vector["f16_pool_envelope_hex"] = in_f16.hex()
    return vector


# -- histories --------------------------------------------------------------------------------


def _status(expect: str | None) -> dict[str, list[str]]:
    """A step's allowed C statuses: OK, or the refusal the case expects."""
    return {"status": [expect or "OK"]}


@dataclass
class _Held:
    """A labelled block as the pool holds it: what a read gives back and an export encodes
    (PoolCase's plans: a written block's values as written, an imported block's as decoded)."""

    block_hash: int
    n_tokens: int
    values: np.ndarray
    imported: bool

    def read_back(self) -> dict[str, Any]:
        values = np.array(self.values, dtype=np.float32)
        values[..., self.n_tokens :, :] = 0  # a pool reads positions past the fill as 0
        return {
            "hash": _hash_hex(self.block_hash),
            "n_tokens": self.n_tokens,
            "values_f32le_hex": _values_hex(values),
        }

    def for_export(self, dtype: str) -> oracle.Block:
        # An imported block is held in the pool's precision, so a v2 re-export of it depends
        # on the pool's dtype (PoolCase._import); a written block encodes as written.
        values = in_pool_precision(self.values, dtype) if self.imported else self.values
        return oracle.Block(self.block_hash, self.n_tokens, values)


def history_steps(case: PoolCase) -> list[dict[str, Any]]:
    """A pool case's steps with every argument and expected result spelled out (blocks named
    by the labels the case gives them), as PoolCase runs them."""
    geometry = case.geometry
    held: dict[str, _Held] = {}
    steps: list[dict[str, Any]] = []
    for op, arg in case.steps:
        if op == "write":
            plan: BlockPlan = arg
            step = {
                "op": "write",
                "hash": _hash_hex(plan.block_hash),
                "n_tokens": plan.n_tokens,
                "values_f32le_hex": _values_hex(plan.values),
                "expect": _status(plan.expect),
            }
            if plan.label and not plan.expect:
                step["as"] = plan.label
                held[plan.label] = _Held(plan.block_hash, plan.n_tokens, plan.values, False)
        elif op == "read":
            expect: dict[str, Any] = _status(arg.get("expect"))
            if not arg.get("expect"):
                expect.update(held[arg["block"]].read_back())
            step = {"op": "read", "block": arg["block"], "expect": expect}
        elif op in ("release", "retain"):
            step = {"op": op, "block": arg["block"], "expect": _status(arg.get("expect"))}
        elif op == "find":
            key = arg["hash"]
            block_hash = held[key].block_hash if isinstance(key, str) else key
            found = arg["expect"]
            expect = _status("ENOTFOUND" if found == "ENOTFOUND" else None)
            if found != "ENOTFOUND":
                expect["block"] = found
            step = {"op": "find", "hash": _hash_hex(block_hash), "expect": expect}
        elif op == "free":
            step = {"op": "free_blocks", "expect": {"count": arg}}
        elif op == "export_bytes":
            step = {
                "op": "export_bytes",
                "n_blocks": arg["n_blocks"],
                "version": arg["version"],
                "expect": {"bytes": arg["expect"]},
            }
        elif op == "export":
            expect = _status(arg.get("expect"))
            if not arg.get("expect"):
                blocks = [held[label] for label in arg["blocks"]]
                expect["envelope_hex"] = {
                    dtype: oracle.encode(
                        geometry, [b.for_export(dtype) for b in blocks], arg["version"]
                    ).hex()
                    for dtype in POOL_DTYPES
                }
            step = {
                "op": "export",
                "blocks": list(arg["blocks"]),
                "version": arg["version"],
                "expect": expect,
            }
        elif op in ("use", "destroy"):
            step = {"op": op, "pool": arg}  # no call to compare: a pool opened or destroyed
        elif op == "import":
            data = arg["data"]
            expect = _status(arg.get("expect"))
            labels = list(arg.get("as", []))
            if not arg.get("expect"):
                envelope = oracle.decode(data, oracle.ReaderProfile(geometry))
                expect["n_blocks"] = len(envelope.records)
                for label, record in zip(labels, envelope.records, strict=False):
                    held[label] = _Held(
                        record.block_hash, record.n_tokens, record.decoded.values, True
                    )
            step = {
                "op": "import",
                "envelope_hex": data.hex(),
                "max_blocks": arg.get("max_blocks", case.capacity),
                "as": labels,
                "expect": expect,
            }
        else:
            raise ValueError(f"pool step {op!r} has no history form")
        steps.append(step)
    return steps


def _history_vector(case: PoolCase, source: str) -> dict[str, Any]:
    return {
        **_common(case, source),
        "geometry": _geometry(case.geometry),
        "capacity": case.capacity,
        "only_for_write_versions": None if case.writes is None else sorted(case.writes),
        "nan": case.nan,
        "steps": history_steps(case),
    }


# -- transfers --------------------------------------------------------------------------------


class _NoRequestIds:
    """PrefillRun's chunks without request ids: a runner gives each PushKv stream its own."""

    def new_request_id(self) -> str:
        return ""


def transfer_salt(source: str) -> int:
    """The salt a transfer history's tokens are drawn from: its source's own (fixed, so the file
    is the same bytes on every run; distinct, so no two histories share a block hash)."""
    return oracle.fnv1a64(source.encode()) or 1


def _chunk(chunk: Chunk) -> dict[str, Any]:
    return {
        "index": chunk.index,
        "kv_format": chunk.kv_format,
        "block_hash": _hash_hex(chunk.block_hash),
        "payload_hex": chunk.payload.hex(),
        "crc32c": f"{chunk.crc32c:08x}",
    }


def _push(chunks: list[Chunk], expect: dict[str, Any]) -> dict[str, Any]:
    return {"op": "push", "chunks": [_chunk(c) for c in chunks], "expect": expect}


def _has_blocks(hashes: list[int], held: list[bool | None]) -> dict[str, Any]:
    return {"op": "has_blocks", "hashes": [_hash_hex(h) for h in hashes], "expect": {"held": held}}


def _free_since_mark(least: int, most: int) -> dict[str, Any]:
    return {"op": "free_blocks", "expect": {"drop": [least, most]}}


def transfer_steps(case: TransferCase, prompt: Prompt) -> list[dict[str, Any]]:
    """A transfer case's calls with every chunk and expected answer spelled out, in the order
    TransferCase.run makes them (its prompt drawn from `prompt`)."""
    run = PrefillRun(_NoRequestIds(), prompt)  # type: ignore[arg-type]
    full = prompt.full_hashes
    size = prompt.geometry.envelope_size(1, case.version)
    steps = [_has_blocks(full, [False] * len(full))]
    if case.held:
        earlier = run.prefill_chunks([False] * case.held, upto=case.held)
        counts = {"blocks_stored": case.held, "blocks_reused": 0, "payload_bytes": case.held * size}
        steps.append(_push(earlier, {"status": ["OK"], **counts}))
    held = [i < case.held for i in range(len(full))]
    steps.append(_has_blocks(full, list(held)))
    order = shuffled_order(len(full))
    steps.append(_has_blocks([full[i] for i in order], [held[i] for i in order]))
    chunks = run.prefill_chunks(held)
    if case.tamper is not None:
        chunks = case._tampered(chunks, prompt)
    steps.append({"op": "free_blocks", "mark": True})
    if case.statuses is not None:
        assert case.tamper is None or case.tamper.chunk is not None
        first = case.held if case.tamper is None else case.tamper.chunk
        steps.append(_push(chunks, {"status": sorted(case.statuses)}))
        claimed = chunks[first].block_hash
        extra = [claimed] if claimed and claimed not in full else []
        wants: list[bool | None] = []
        for i in range(len(full) + len(extra)):  # as TransferCase._expect_refusal judges
            if i < len(held) and held[i]:
                wants.append(True)
            elif i < first and i < len(held):
                wants.append(False if case.atomic else None)
            else:
                wants.append(False)
        steps.append(_has_blocks(full + extra, wants))
        stored_before = 0 if case.atomic else sum(1 for c in chunks[:first] if c.payload)
        steps.append(_free_since_mark(0, stored_before))
        return steps
    stored = held.count(False) + (1 if case.tail else 0)
    counts = {"blocks_stored": stored, "blocks_reused": case.held, "payload_bytes": stored * size}
    steps.append(_push(chunks, {"status": ["OK"], **counts}))
    steps.append(_has_blocks(full, [True] * len(full)))
    steps.append(_free_since_mark(stored, stored))
    if "content" in case.checks:
        # What PullKv sends back in v1: each pushed block as decoded, in f16 (compare_content).
        pulled = []
        for payload in prompt.payloads[: len(full)]:
            (record,) = oracle.decode(payload).records
            block = oracle.Block(record.block_hash, record.n_tokens, record.decoded.values)
            pulled.append(oracle.encode(prompt.geometry, [block], 1).hex())
        steps.append(
            {"op": "pull", "hashes": [_hash_hex(h) for h in full], "kv_format": 1,
             "expect": {"payloads_hex": pulled}}
        )  # fmt: skip
    if "pull_order" in case.checks:
        asked = [_hash_hex(h) for h in pull_order_asked(full)]
        steps.append(
            {"op": "pull", "hashes": asked, "kv_format": 1, "expect": {"block_hashes": asked}}
        )
    return steps


def _transfer_vector(case: TransferCase, source: str, geometry: Geometry) -> dict[str, Any]:
    salt = transfer_salt(source)
    prompt = draw_prompt(geometry, case.version, case.full_blocks, case.tail, case.values, salt)
    needs = sorted(
        {"GetInfo" for check in case.checks if check == "free_blocks"}
        | {"PullKv" for check in case.checks if check in ("content", "pull_order")}
    )
    return {
        **_common(case, source),
        "geometry": _geometry(geometry),
        "version": case.version,
        "salt": _hash_hex(salt),
        "tokens": prompt.tokens,
        "only_for_read_versions": [1] if case.v1_only else None,
        "needs_read_version": case.version if case.statuses is None else None,
        "needs": needs,
        "steps": transfer_steps(case, prompt),
    }


def _transfer_left_out(case: TransferCase, geometry: Geometry) -> str | None:
    """Why a transfer case has no history at this geometry, or None."""
    if case.tail >= geometry.block_tokens:
        return f"a tail of {case.tail} tokens is no partial block with B = {geometry.block_tokens}"
    size = geometry.envelope_size(1, case.version)
    if size > EXPANSION_MAX_BYTES:
        return TRANSFER_TOO_LARGE.format(size=size, geometry=geometry, limit=EXPANSION_MAX_BYTES)
    return None


# -- the corpus -------------------------------------------------------------------------------


def case_files() -> list[Path]:
    """Every case file of the bundled corpus, in a fixed order."""
    root = corpus.cases_dir()
    return sorted(
        (p for p in root.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file()),
        key=lambda p: p.relative_to(root).as_posix(),
    )


def _source_file(path: Path) -> str:
    try:
        return path.resolve().relative_to(corpus.corpus_root().resolve()).as_posix()
    except ValueError:
        return path.as_posix()


def _expanded_from(case: Case) -> tuple[str, int] | None:
    """What a generated case is (prefixes or bit flips) and the size of the envelope it was
    expanded from; None for a case that is not generated."""
    if isinstance(case, RejectCase):
        variant = case.variant
        if variant.prefix is not None:
            return "prefixes", len(variant.base)
        if variant.flip is not None:
            return "single-bit flips", len(variant.base)
    return None


def _collect_file(
    loaded: CaseFile,
    cases: Iterable[Case],
    out: dict[str, _Collected],
    target: str,
    geometry: Geometry,
) -> None:
    shown = _source_file(loaded.path)
    spec_of_line = {spec.origin.line: spec for spec in loaded.specs}
    too_big: dict[str, tuple[int, str, int]] = {}  # spec id -> (left out, what, base size)
    for case in cases:
        source = f"{shown}::{case.id}"
        spec = spec_of_line.get(case.origin.line)
        raw_kind = str(spec.raw["kind"]) if spec is not None else case.kind
        if raw_kind not in FILE_OF_KIND:
            continue
        collected = out[FILE_OF_KIND[raw_kind]]
        if isinstance(case, NotApplicableCase):
            collected.omitted.append({"source": source, "reason": case.reason})
            continue
        expanded = _expanded_from(case)
        if expanded is not None and expanded[1] > EXPANSION_MAX_BYTES and spec is not None:
            count = too_big.get(spec.id, (0,))[0]
            too_big[spec.id] = (count + 1, *expanded)
            continue
        if isinstance(case, HashCase):
            collected.vectors.append(_hash_vector(case, source))
        elif isinstance(case, HashSequenceCase):
            collected.vectors.append(_sequence_vector(case, source))
        elif isinstance(case, ImportCase | RejectCase):
            collected.vectors.append(_envelope_vector(case, source))
        elif isinstance(case, ExportCase | RoundtripCase):
            collected.vectors.append(_export_vector(case, source))
        elif isinstance(case, PoolCase):
            collected.vectors.append(_history_vector(case, source))
        elif isinstance(case, TransferCase):
            # A case without a geometry runs at the server's: here the one asked for.
            at = case.geometry or geometry
            if (reason := _transfer_left_out(case, at)) is not None:
                collected.omitted.append({"source": source, "reason": reason})
            else:
                collected.vectors.append(_transfer_vector(case, source, at))
        elif isinstance(case, PrefillCase):
            collected.omitted.append({"source": source, "reason": PREFILL_OMITTED})
    for spec_id, (count, what, base) in too_big.items():
        out[ENVELOPES_FILE].omitted.append(
            {
                "source": f"{shown}::{spec_id}",
                "reason": f"{count} generated cases, {what} of a {base}-byte envelope at "
                f"{target}: envelopes over {EXPANSION_MAX_BYTES} bytes are not expanded into "
                "the vectors (a smaller geometry has them)",
            }
        )


def build_vectors(geometry: Geometry | None = None) -> dict[str, dict[str, Any]]:
    """The four vector documents, by file name: each case file's cases at its own geometry,
    or at `geometry` (CaseFile.cases_for). CaseFileError for a broken case file."""
    out = {name: _Collected() for name in (HASH_FILE, ENVELOPES_FILE, EXPORTS_FILE, HISTORIES_FILE)}
    root = corpus.corpus_root()
    for path in case_files():
        loaded = load_case_file(path, root)
        if geometry is None:
            cases, target = loaded.cases, f"the file's geometry {loaded.default.geometry}"
        else:
            cases, target = loaded.cases_for(BuildTarget(geometry)), f"geometry {geometry}"
        _collect_file(loaded, cases, out, target, geometry or loaded.default.geometry)
    documents = {}
    for name, collected in out.items():
        documents[name] = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "file": name.removesuffix(".json"),
            "geometry": None if geometry is None else _geometry(geometry),
            "vectors": collected.vectors,
            "omitted": collected.omitted,
        }
    return documents


def dumps(document: dict[str, Any]) -> str:
    """Sorted keys, ASCII, and each vector on a line of its own (one changed case is one
    changed line in a diff)."""
    placeholder = "\x00vectors\x00"
    head = json.dumps({**document, "vectors": placeholder}, sort_keys=True, ensure_ascii=True)
    lines = [json.dumps(v, sort_keys=True, ensure_ascii=True) for v in document["vectors"]]
    body = "[\n" + ",\n".join(lines) + "\n]" if lines else "[]"
    quoted = json.dumps(placeholder)
    assert head.count(quoted) == 1
    return head.replace(quoted, body) + "\n"


def write_vectors(out_dir: Path, geometry: Geometry | None = None) -> list[Path]:
    """Write the corpus's vectors and their schema into `out_dir` (created if needed); the
    paths written, in a fixed order. CaseFileError for a broken case file."""
    documents = build_vectors(geometry)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, document in documents.items():
        path = out_dir / name
        path.write_text(dumps(document), encoding="ascii", newline="\n")
        written.append(path)
    schema = out_dir / SCHEMA_OUT
    schema.write_bytes(SCHEMA_FILE.read_bytes())
    written.append(schema)
    return written


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:
        # The suite's usage errors exit 4 (README), not argparse's 2, which means a broken
        # case file here.
        raise _UsageError(message)


def main(argv: Sequence[str]) -> int:
    """`tlkv-conformance vectors DIR [--geometry BxLxHkvxD]`; the exit status."""
    parser = _Parser(
        prog="tlkv-conformance vectors",
        description="Write the bundled case corpus as portable JSON vectors (docs/vectors.md).",
    )
    parser.add_argument("out_dir", metavar="DIR", type=Path, help="where the files go")
    parser.add_argument(
        "--geometry",
        metavar="BxLxHkvxD",
        help="build every case at this geometry instead of each case file's own",
    )
    try:
        args = parser.parse_args(list(argv))
        geometry = None if args.geometry is None else Geometry.parse(args.geometry)
    except (_UsageError, ValueError) as exc:
        print(f"tlkv-conformance vectors: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    try:
        written = write_vectors(args.out_dir, geometry)
    except CaseFileError as exc:
        print(f"tlkv-conformance vectors: {exc}", file=sys.stderr)
        return EXIT_BROKEN_CASE_FILE
    for path in written:
        print(f"{path} ({path.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
