"""The portable vectors (tlkv_conformance.vectors): the same bytes on every write, valid against
their schema, and agreed with, vector by vector, by a reader that shares nothing with the
oracle (selftest/vector_reader.py). An engine in another language will trust these files
without Python to cross-check them, so an oracle bug must not slip into them unnoticed."""

from __future__ import annotations

import json
import math
import re
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jsonschema
import ml_dtypes
import numpy as np
import pytest
from tlkv_conformance import cli, corpus, oracle, vectors
from tlkv_conformance.cases import load_case_file
from tlkv_conformance.cases.kinds import KINDS

from selftest import vector_reader as vr
from selftest.support import ROOT

FILES = (vectors.HASH_FILE, vectors.ENVELOPES_FILE, vectors.EXPORTS_FILE, vectors.HISTORIES_FILE)
SMALL_GEOMETRY = oracle.Geometry(2, 1, 2, 4)
DOC = ROOT / "docs" / "vectors.md"


@pytest.fixture(scope="module")
def out_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("vectors")
    written = vectors.write_vectors(out)
    assert [p.name for p in written] == [*FILES, vectors.SCHEMA_OUT]
    return out


@pytest.fixture(scope="module")
def docs(out_dir: Path) -> dict[str, dict[str, Any]]:
    return {name: json.loads((out_dir / name).read_text(encoding="ascii")) for name in FILES}


@pytest.fixture(scope="module")
def validator(out_dir: Path) -> jsonschema.Draft202012Validator:
    schema = json.loads((out_dir / vectors.SCHEMA_OUT).read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _problems(items: list[dict[str, Any]], check: Any) -> list[str]:
    """Every vector's problem, so one run lists them all."""
    return [f"{v['source']}: {problem}" for v in items if (problem := check(v))]


# -- the files --------------------------------------------------------------------------------


def test_same_bytes_on_every_write(out_dir: Path, tmp_path: Path) -> None:
    vectors.write_vectors(tmp_path)
    for name in (*FILES, vectors.SCHEMA_OUT):
        assert (tmp_path / name).read_bytes() == (out_dir / name).read_bytes(), name
    assert (out_dir / vectors.SCHEMA_OUT).read_bytes() == vectors.SCHEMA_FILE.read_bytes()


def test_files_match_the_schema(
    docs: dict[str, dict[str, Any]], validator: jsonschema.Draft202012Validator
) -> None:
    for name, doc in docs.items():
        errors = [f"{list(e.absolute_path)}: {e.message[:200]}" for e in validator.iter_errors(doc)]
        assert not errors, f"{name}: " + "\n".join(errors[:10])
        assert doc["file"] == name.removesuffix(".json")
        assert doc["geometry"] is None


def test_schema_names_every_reader_rule(validator: jsonschema.Draft202012Validator) -> None:
    schema = validator.schema
    assert schema["$defs"]["rule_id"]["enum"] == list(oracle.READER_RULES)
    assert set(vr.RULE_CODES) == set(oracle.READER_RULES)
    for rule in oracle.READER_RULES.values():
        assert vr.RULE_CODES[rule.id] == (rule.c_code, rule.grpc_status)


def _one(doc: dict[str, Any], vector: dict[str, Any]) -> dict[str, Any]:
    return {**doc, "vectors": [vector]}


def test_schema_refuses_what_a_harness_could_not_use(
    docs: dict[str, dict[str, Any]], validator: jsonschema.Draft202012Validator
) -> None:
    envelopes = docs[vectors.ENVELOPES_FILE]
    valid = next(v for v in envelopes["vectors"] if v["result"] == "valid")
    invalid = next(v for v in envelopes["vectors"] if v["result"] == "invalid")
    hashed = docs[vectors.HASH_FILE]["vectors"][0]
    export = docs[vectors.EXPORTS_FILE]["vectors"][0]
    broken = [
        _one(envelopes, {**valid, "result": "invalid"}),  # no codes to refuse with
        _one(envelopes, {**invalid, "result": "valid"}),  # no blocks to read back
        _one(envelopes, {**invalid, "c_codes": []}),
        _one(envelopes, {**valid, "envelope_hex": valid["envelope_hex"] + "0"}),
        _one(docs[vectors.HASH_FILE], {**hashed, "hash": int(hashed["hash"], 16)}),
        _one(docs[vectors.HASH_FILE], {**hashed, "surprise": 1}),
        _one(docs[vectors.EXPORTS_FILE], {k: v for k, v in export.items() if k != "history"}),
        {**docs[vectors.EXPORTS_FILE], "file": "envelopes"},
    ]
    for doc in broken:
        assert not validator.is_valid(doc)


def test_every_case_is_in_exactly_one_file(docs: dict[str, dict[str, Any]]) -> None:
    """Every case id of the corpus is a vector or an `omitted` entry of exactly one file, the
    one its kind belongs to (FILE_OF_KIND), so no case kind is silently left out."""
    where: dict[str, list[str]] = {}
    for name, doc in docs.items():
        for entry in [*doc["vectors"], *doc["omitted"]]:
            where.setdefault(entry["source"], []).append(name)
    twice = {source: names for source, names in where.items() if len(names) > 1}
    assert not twice, f"in more than one place: {twice}"
    root = corpus.corpus_root()
    missing, misplaced = [], []
    for path in vectors.case_files():
        loaded = load_case_file(path, root)
        shown = path.relative_to(root).as_posix()
        # A case not applicable at its geometry keeps its declared kind in the spec.
        declared = {spec.origin.line: str(spec.raw["kind"]) for spec in loaded.specs}
        for case in loaded.cases:
            kind = declared.get(case.origin.line, case.kind)
            assert kind in vectors.FILE_OF_KIND, f"{shown}: kind {kind} has no vector file"
            source = f"{shown}::{case.id}"
            if source not in where:
                missing.append(source)
            elif where[source] != [vectors.FILE_OF_KIND[kind]]:
                misplaced.append(f"{source} in {where[source]}")
    assert not missing, f"cases in no vector file: {missing[:10]}"
    assert not misplaced, misplaced[:10]
    kinds = {v["kind"] for doc in docs.values() for v in doc["vectors"]}
    # A prefill case is a conversation with a client under test: every one is in `omitted`.
    assert kinds == set(KINDS) - {"prefill"}
    # The generated prefixes and bit flips are kept, each its own envelope.
    envelopes = docs[vectors.ENVELOPES_FILE]["vectors"]
    assert any(v["source"].endswith("::prefix-at-geometry-33") for v in envelopes)
    assert any(v["source"].endswith("::v2-bit-flip-at-geometry-0.0") for v in envelopes)


def test_doc_names_the_file_of_every_kind(docs: dict[str, dict[str, Any]]) -> None:
    """docs/vectors.md's table gives every case kind its file, and for a kind whose cases are
    all in `omitted`, says so with the reason and what an engine loses."""
    rows = re.findall(r"^\| `([a-z-]+)` \| `(\w+\.json)`(, in `omitted`)? \|(.*)\|$",
                      DOC.read_text(encoding="utf-8"), re.MULTILINE)  # fmt: skip
    table = {kind: (file, bool(omitted), why) for kind, file, omitted, why in rows}
    assert set(table) == set(KINDS)
    for kind, (file, omitted, why) in table.items():
        assert file == vectors.FILE_OF_KIND[kind], kind
        has_vectors = any(v["kind"] == kind for v in docs[file]["vectors"])
        assert omitted == (not has_vectors), f"{kind}: the table says omitted={omitted}"
        assert bool(why.strip()) == omitted, f"{kind}: a kind left out needs its reason"


def test_doc_figures_are_current(docs: dict[str, dict[str, Any]], out_dir: Path) -> None:
    """The sizes and counts docs/vectors.md quotes for the case files' own geometries."""
    text = " ".join(DOC.read_text(encoding="utf-8").split())
    quoted = re.findall(r"`(\w+\.json)` about ([\d.]+) (KB|MB) \((\d+) vectors", text)
    assert sorted(name for name, *_ in quoted) == sorted(FILES)
    for name, size, unit, count in quoted:
        assert int(count) == len(docs[name]["vectors"]), name
        actual = (out_dir / name).stat().st_size / (1000 if unit == "KB" else 1000**2)
        assert abs(actual - float(size)) <= 0.15 * actual, f"{name}: about {size} {unit}?"
    generated = re.search(r"(\d+) of them the generated prefixes", text)
    assert generated is not None
    exhaustive = docs[vectors.ENVELOPES_FILE]["vectors"]
    assert int(generated[1]) == sum(
        v["source"].startswith("cases/exhaustive.yaml") for v in exhaustive
    )
    omitted = re.search(r"(\d+) transfer cases and (\d+) prefill cases omitted", text)
    assert omitted is not None
    sources = [entry["source"] for entry in docs[vectors.HISTORIES_FILE]["omitted"]]
    assert int(omitted[1]) == sum(s.startswith("cases/transfer.yaml") for s in sources)
    assert int(omitted[2]) == sum(s.startswith("cases/prefill.yaml") for s in sources)
    assert int(omitted[1]) + int(omitted[2]) == len(sources)
    several_pools = re.search(r"the (\d+) histories of two pools", text)
    assert several_pools is not None
    histories = docs[vectors.HISTORIES_FILE]["vectors"]
    assert int(several_pools[1]) == sum(
        any(step["op"] == "use" for step in h["steps"]) for h in histories
    )


# -- the independent reader itself ------------------------------------------------------------


def test_reader_check_values() -> None:
    assert vr.crc32c(b"123456789") == 0xE3069283
    assert vr.crc32c(b"") == 0
    assert vr.fnv1a64(b"a") == 0xAF63DC4C8601EC8C
    assert vr.block_hash(0, [1, 2]) == 0xA91AB0C1027B9366  # the spec's worked example


def test_reader_e4m3_table_is_ocp_e4m3fn() -> None:
    reference = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    for code, want in enumerate(reference.tolist()):
        got = vr.E4M3[code]
        assert math.copysign(1, got) == math.copysign(1, want), code
        if math.isnan(want):
            assert math.isnan(got), code
        else:
            assert got == want, code
    assert vr.E4M3[0x7E] == 448.0  # the largest
    assert vr.E4M3[0x01] == 2.0**-9  # the smallest subnormal
    assert vr.E4M3[0x08] == 2.0**-6  # the smallest normal


def test_reader_e4m3_encoding_is_ocp_e4m3fn() -> None:
    """The reader's v2 writer rounds as ml_dtypes does (every code's value, the midpoints
    between neighbours, and points just off them), with no saturation past 464."""
    values = np.arange(0x7F, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    midpoints = (values[:-1] + values[1:]) / 2
    probes = np.concatenate(
        [values, midpoints, np.nextafter(midpoints, 0), np.nextafter(midpoints, 1000)]
    ).astype(np.float32)
    probes = np.concatenate([probes, -probes, np.float32([463.99, 464.01, 1000.0])])
    want = probes.astype(ml_dtypes.float8_e4m3fn).view(np.uint8).tolist()
    got = [vr.e4m3_code(float(q)) for q in probes]
    assert got == want


# -- hashes -----------------------------------------------------------------------------------


def _hash_problem(v: dict[str, Any]) -> str | None:
    blocks = [v] if v["kind"] == "hash" else v["blocks"]
    if v["kind"] == "hash-sequence":
        b = v["block_tokens"]
        if len(blocks) != len(v["tokens"]) // b:
            return f"{len(blocks)} blocks for {len(v['tokens'])} tokens of {b}"
    parent = 0
    for index, block in enumerate(blocks):
        if v["kind"] == "hash-sequence":
            if int(block["parent"], 16) != parent:
                return f"block {index}: parent {block['parent']}, the chain gives {parent:016x}"
            if block["tokens"] != v["tokens"][index * b : (index + 1) * b]:
                return f"block {index}: tokens are not the sequence's"
        parent = int(block["parent"], 16)
        data = vr.hash_input(parent, block["tokens"])
        if block["input_hex"] != data.hex():
            return f"block {index}: input {block['input_hex']}, expected {data.hex()}"
        want = vr.block_hash(parent, block["tokens"])
        if int(block["hash"], 16) != want:
            return f"block {index}: hash {block['hash']}, the reader computes {want:016x}"
        parent = want
    return None


def test_hash_vectors(docs: dict[str, dict[str, Any]]) -> None:
    hashes = docs[vectors.HASH_FILE]["vectors"]
    assert not _problems(hashes, _hash_problem)
    # The zero rule is among them: a block whose FNV-1a-64 is 0, given hash 1.
    inputs = [b["input_hex"] for v in hashes for b in ([v] if v["kind"] == "hash" else v["blocks"])]
    assert any(vr.fnv1a64(bytes.fromhex(h)) == 0 for h in inputs)


# -- envelopes --------------------------------------------------------------------------------


def _values_problem(expected_hex: str, got: list[float], what: str) -> str | None:
    want = struct.unpack(f"<{len(expected_hex) // 8}I", bytes.fromhex(expected_hex))
    if len(want) != len(got):
        return f"{what}: {len(want)} values, the reader decodes {len(got)}"
    for index, (w, value) in enumerate(zip(want, got, strict=True)):
        if not vr.same_f32(w, vr.f32_bits(value)):
            return f"{what}: value {index} is {w:#010x}, the reader decodes {vr.f32_bits(value):#x}"
    return None


def _shape(geometry: dict[str, int]) -> vr.Shape:
    return vr.Shape(**geometry)


def _envelope_problem(v: dict[str, Any]) -> str | None:
    data = bytes.fromhex(v["envelope_hex"])
    pool = _shape(v["reader"]["geometry"])
    verdict = vr.read(data, pool, v["reader"]["read_versions"])
    if sorted(verdict.broken) != v["broken_rules"]:
        return f"broken rules {v['broken_rules']}, the reader finds {sorted(verdict.broken)}"
    if (vr.read(data, pool, [1]).broken == verdict.broken) != v["same_for_v1_only_reader"]:
        return f"same_for_v1_only_reader is {v['same_for_v1_only_reader']}, the reader disagrees"
    capacity, preloaded = v["pool"]["capacity"], len(v["pool"]["preload"])
    free = capacity - preloaded
    if v["result"] == "valid":
        if verdict.n_blocks is None or verdict.n_blocks > free:
            return f"valid, but {verdict.n_blocks} blocks into {free} free"
        if verdict.version != v["version"] or len(verdict.blocks) != len(v["blocks"]):
            return "version or block count differs"
        for index, (block, want) in enumerate(zip(verdict.blocks, v["blocks"], strict=True)):
            if (block.block_hash, block.n_tokens) != (int(want["hash"], 16), want["n_tokens"]):
                return f"block {index}: hash or n_tokens differs"
            problem = _values_problem(want["values_f32le_hex"], block.values, f"block {index}")
            if problem:
                return problem
        return None
    if v["refused_by"] == "rules":
        if not verdict.broken:
            return "refused by the rules, but the reader finds none broken"
        c_codes = sorted({vr.RULE_CODES[r][0] for r in verdict.broken})
        grpc_codes = sorted({vr.RULE_CODES[r][1] for r in verdict.broken})
        if (v["c_codes"], v["grpc_codes"]) != (c_codes, grpc_codes):
            got = f"{v['c_codes']} / {v['grpc_codes']}"
            return f"codes {got}, the rules give {c_codes} / {grpc_codes}"
    else:
        if verdict.broken or verdict.n_blocks is None or verdict.n_blocks <= free:
            return f"a pool refusal of {verdict.n_blocks} blocks with {free} free"
        if (v["c_codes"], v["grpc_codes"]) != (["ENOMEM"], ["RESOURCE_EXHAUSTED"]):
            return f"pool refusal codes {v['c_codes']} / {v['grpc_codes']}"
    declared = int.from_bytes(data[8:12], "little") if len(data) >= 12 else None
    limits = set()
    if declared is not None and declared > capacity:
        limits.add("EINVAL")
    if declared is not None and declared > free:
        limits.add("ENOMEM")
    also = v["also_allowed"]
    if not set(also["c_codes"]) <= limits or set(also["grpc_codes"]) - {"RESOURCE_EXHAUSTED"}:
        return f"also_allowed {also}, the header's n_blocks {declared} allows {sorted(limits)}"
    if "READ-RULES-FIRST" in v["reqs"] and (also["c_codes"] or also["grpc_codes"]):
        return "a rules-first case allows limit codes"
    return None


def test_envelope_vectors(docs: dict[str, dict[str, Any]]) -> None:
    envelopes = docs[vectors.ENVELOPES_FILE]["vectors"]
    assert not _problems(envelopes, _envelope_problem)
    results = {(v["result"], v.get("refused_by")) for v in envelopes}
    assert results == {("valid", None), ("invalid", "rules"), ("invalid", "pool")}
    assert {tuple(v["reader"]["read_versions"]) for v in envelopes} == {(1,), (1, 2)}


def test_nan_bits_are_should_vectors(docs: dict[str, dict[str, Any]]) -> None:
    """A NaN stays a NaN at MUST (`nan: any`); a vector asking for a NaN's sign or payload is
    a SHOULD (docs/decisions.md), so an engine's harness warns on it, never fails."""
    valued = [
        v
        for name in (vectors.ENVELOPES_FILE, vectors.EXPORTS_FILE)
        for v in docs[name]["vectors"]
        if "nan" in v
    ]
    stricter = [v for v in valued if v["nan"] != "any"]
    assert stricter
    assert [v["source"] for v in stricter if v["level"] != "SHOULD"] == []
    must_nans = {v["source"] for v in valued if v["level"] == "MUST"}
    for case in ("import-v1-nans-odd", "import-v2-nan-codes-odd", "roundtrip-nans-odd"):
        assert f"cases/nans.yaml::{case}" in must_nans
        twin = next(v for v in stricter if v["source"] == f"cases/nans.yaml::{case}-bits")
        assert "NAN-SIGN" in twin["reqs"]


# -- exports ----------------------------------------------------------------------------------


def _padding_problem(block: vr.Block, shape: vr.Shape, version: int) -> str | None:
    """Positions at or past n_tokens are zero bytes (v1) or zero codes (v2)."""
    width = 2 if version == 1 else 1
    row = shape.head_dim * width
    per_slab = shape.block_tokens * row
    for slab in range(shape.slabs):
        start = slab * per_slab + block.n_tokens * row
        if any(block.payload[start : (slab + 1) * per_slab]):
            return f"slab {slab} has non-zero padding"
    return None


def _v2_payload_problem(block: vr.Block, shape: vr.Shape, values: Sequence[float]) -> str | None:
    """The record's codes and scales against the independent reader's v2 writer."""
    per_slab = shape.block_tokens * shape.head_dim
    filled = block.n_tokens * shape.head_dim
    scales = struct.unpack_from(f"<{shape.slabs}f", block.payload, shape.elements)
    for slab in range(shape.slabs):
        start = slab * per_slab
        codes, scale = vr.encode_v2_slab(values[start : start + filled])
        if vr.f32_bits(scales[slab]) != vr.f32_bits(scale):
            return f"slab {slab}: scale {scales[slab]!r}, the format's text gives {scale!r}"
        written = list(block.payload[start : start + filled])
        if written != codes:
            at = next(i for i, (a, b) in enumerate(zip(written, codes, strict=True)) if a != b)
            return f"slab {slab} element {at}: code {written[at]:#04x}, the text: {codes[at]:#04x}"
    return None


def _export_problem(v: dict[str, Any]) -> str | None:
    data = bytes.fromhex(v["envelope_hex"])
    shape = _shape(v["geometry"])
    verdict = vr.read(data, shape, [1, 2])
    if verdict.broken:
        return f"the expected envelope breaks {sorted(verdict.broken)}"
    version = v["version"]
    want_header = {
        "version": version,
        "dtype": vr.DTYPE_OF_VERSION[version],
        "n_blocks": len(v["blocks"]),
        **v["geometry"],
    }
    if vr.header(data) != want_header:
        return f"header {vr.header(data)}, expected {want_header}"
    for index, (block, written) in enumerate(zip(verdict.blocks, v["blocks"], strict=True)):
        if (block.block_hash, block.n_tokens) != (int(written["hash"], 16), written["n_tokens"]):
            return f"block {index}: hash or n_tokens is not the written block's"
        if problem := _padding_problem(block, shape, version):
            return f"block {index}: {problem}"
        raw = bytes.fromhex(written["values_f32le_hex"])
        values = struct.unpack(f"<{len(raw) // 4}f", raw)
        per_slab = shape.block_tokens * shape.head_dim
        filled = block.n_tokens * shape.head_dim
        if version == 2:
            if problem := _v2_payload_problem(block, shape, values):
                return f"block {index}: {problem}"
            continue
        rounded = [vr.f16_round(x) if i % per_slab < filled else 0.0 for i, x in enumerate(values)]
        expected_hex = b"".join(struct.pack("<I", vr.f32_bits(x)) for x in rounded).hex()
        if problem := _values_problem(expected_hex, block.values, f"block {index}"):
            return problem
    return None


def _pool_export_problem(v: dict[str, Any]) -> str | None:
    """Each pool precision's expectation is the oracle's export of the written blocks as that
    pool holds them: as written (f32) and each value rounded to f16, nearest even (f16)."""
    geometry = oracle.Geometry(**v["geometry"])
    for dtype, key in (("f32", "envelope_hex"), ("f16", "f16_pool_envelope_hex")):
        blocks = []
        for block in v["blocks"]:
            raw = np.frombuffer(bytes.fromhex(block["values_f32le_hex"]), dtype="<f4")
            values = raw.reshape(geometry.values_shape).astype(np.float32)
            held = oracle.round_to_f16(values) if dtype == "f16" else values
            blocks.append(oracle.Block(int(block["hash"], 16), block["n_tokens"], held))
        expected = oracle.encode(geometry, blocks, v["version"]).hex()
        if v.get(key, v["envelope_hex"]) != expected:
            return f"an {dtype} pool's expected export is not the oracle's ({key})"
    return None


def test_each_pool_precision_has_its_export(docs: dict[str, dict[str, Any]]) -> None:
    exports = docs[vectors.EXPORTS_FILE]["vectors"]
    assert not _problems(exports, _pool_export_problem)
    # the one case whose values no f16 holds (docs/vectors.md)
    split = [v["source"] for v in exports if "f16_pool_envelope_hex" in v]
    assert split == ["cases/writer-v2.yaml::tiny-slabs"]


def test_export_vectors(docs: dict[str, dict[str, Any]]) -> None:
    exports = docs[vectors.EXPORTS_FILE]["vectors"]
    assert not _problems(exports, _export_problem)
    assert {v["version"] for v in exports} == {1, 2}
    assert any(v["history"] for v in exports), "no export case writes history blocks first"


def _one_code_changed(v: dict[str, Any], where: int) -> dict[str, Any]:
    """`v` with the byte at `where` of its first record's payload one step up (the CRC
    recomputed), so that only the value check can see it."""
    data = bytearray.fromhex(v["envelope_hex"])
    data[vr.HEADER + vr.RECORD_HEAD + where] += 1
    data[-vr.TRAILER :] = vr.crc32c(bytes(data[: -vr.TRAILER])).to_bytes(4, "little")
    return {**v, "envelope_hex": data.hex()}


def test_v2_export_values_are_checked(docs: dict[str, dict[str, Any]]) -> None:
    """A v2 export vector one code or one scale off (CRC recomputed) is caught by the
    independent reader: the oracle's v2 rounding does not reach the vectors unchecked."""
    exports = docs[vectors.EXPORTS_FILE]["vectors"]
    v2 = next(v for v in exports if v["version"] == 2 and v["blocks"][0]["n_tokens"] > 0)
    shape = _shape(v2["geometry"])
    assert _export_problem(v2) is None
    code_problem = _export_problem(_one_code_changed(v2, 0))
    assert code_problem is not None
    assert "element 0: code" in code_problem
    scale_problem = _export_problem(_one_code_changed(v2, shape.elements))
    assert scale_problem is not None
    assert "scale" in scale_problem


# -- the command ------------------------------------------------------------------------------


def test_command_at_another_geometry(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "small"
    assert cli.main(["vectors", str(out), "--geometry", str(SMALL_GEOMETRY)]) == 0
    assert str(out / vectors.ENVELOPES_FILE) in capsys.readouterr().out
    doc = json.loads((out / vectors.ENVELOPES_FILE).read_text(encoding="ascii"))
    assert doc["geometry"] == SMALL_GEOMETRY.as_dict()
    schema = json.loads((out / vectors.SCHEMA_OUT).read_text(encoding="utf-8"))
    assert jsonschema.Draft202012Validator(schema).is_valid(doc)
    # Cases built at the geometry under test are at the small one; written-out ones keep theirs.
    assert SMALL_GEOMETRY.as_dict() in [v["reader"]["geometry"] for v in doc["vectors"]]
    assert not _problems(doc["vectors"], _envelope_problem)


def test_command_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["vectors", str(tmp_path), "--geometry", "4x2"]) == 4
    assert "BxLxHkvxD" in capsys.readouterr().err
    assert cli.main(["vectors"]) == 4
    assert not list(tmp_path.iterdir())
