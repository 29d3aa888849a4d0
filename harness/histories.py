"""The portable vectors' histories (histories.json, docs/vectors.md): a pool case's steps and a
transfer case's tl.kv.v1 calls, every argument and expected result spelled out, as the case
kinds run them (tlkv_conformance.vectors collects them with the other files).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from . import oracle
from .adapters import Chunk
from .cases import BlockPlan
from .cases.kinds import (
    PULL_CHECKS,
    UNWRITTEN_FORMAT,
    PoolCase,
    PrefillRun,
    Prompt,
    TransferCase,
    draw_prompt,
    pull_index_asked,
    pull_order_asked,
    pull_unheld_asked,
    shuffled_order,
)
from .checks import in_pool_precision
from .oracle import Geometry
from .vector_fields import (
    EXPANSION_MAX_BYTES,
    common_fields,
    geometry_fields,
    hash_hex,
    values_hex,
)

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
    "--impl=prefill-py:MODULE or --impl=prefill-exec:COMMAND for it"
)


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
            "hash": hash_hex(self.block_hash),
            "n_tokens": self.n_tokens,
            "values_f32le_hex": values_hex(values),
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
                "hash": hash_hex(plan.block_hash),
                "n_tokens": plan.n_tokens,
                "values_f32le_hex": values_hex(plan.values),
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
            step = {"op": "find", "hash": hash_hex(block_hash), "expect": expect}
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


def pool_history(case: PoolCase, source: str) -> dict[str, Any]:
    return {
        **common_fields(case, source),
        "geometry": geometry_fields(case.geometry),
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
        "block_hash": hash_hex(chunk.block_hash),
        "payload_hex": chunk.payload.hex(),
        "crc32c": f"{chunk.crc32c:08x}",
    }


def _push(chunks: list[Chunk], expect: dict[str, Any]) -> dict[str, Any]:
    return {"op": "push", "chunks": [_chunk(c) for c in chunks], "expect": expect}


def _has_blocks(hashes: list[int], held: list[bool | None]) -> dict[str, Any]:
    return {"op": "has_blocks", "hashes": [hash_hex(h) for h in hashes], "expect": {"held": held}}


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
            {"op": "pull", "hashes": [hash_hex(h) for h in full], "kv_format": 1,
             "expect": {"payloads_hex": pulled}}
        )  # fmt: skip
    if "pull_order" in case.checks:
        asked = [hash_hex(h) for h in pull_order_asked(full)]
        steps.append(
            {"op": "pull", "hashes": asked, "kv_format": 1, "expect": {"block_hashes": asked}}
        )
    if "pull_index" in case.checks:
        asked = [hash_hex(h) for h in pull_index_asked(full)]
        steps.append(
            {"op": "pull", "hashes": asked, "kv_format": 1,
             "expect": {"indexes": list(range(len(asked)))}}
        )  # fmt: skip
    if "pull_unheld" in case.checks:
        steps.append(_pull_refused(pull_unheld_asked(full), 1, "NOT_FOUND"))
    if "pull_unwritten" in case.checks:
        steps.append(_pull_refused(full, UNWRITTEN_FORMAT, "FAILED_PRECONDITION"))
    return steps


def _pull_refused(hashes: list[int], kv_format: int, status: str) -> dict[str, Any]:
    return {
        "op": "pull",
        "hashes": [hash_hex(h) for h in hashes],
        "kv_format": kv_format,
        "expect": {"status": [status]},
    }


def transfer_history(case: TransferCase, source: str, geometry: Geometry) -> dict[str, Any]:
    salt = transfer_salt(source)
    prompt = draw_prompt(geometry, case.version, case.full_blocks, case.tail, case.values, salt)
    needs = sorted(
        {"GetInfo" for check in case.checks if check == "free_blocks"}
        | {"PullKv" for check in case.checks if check in PULL_CHECKS}
    )
    return {
        **common_fields(case, source),
        "geometry": geometry_fields(geometry),
        "version": case.version,
        "salt": hash_hex(salt),
        "tokens": prompt.tokens,
        "only_for_read_versions": [1] if case.v1_only else None,
        "needs_read_version": case.version if case.statuses is None else None,
        "needs": needs,
        "steps": transfer_steps(case, prompt),
    }


def transfer_left_out(case: TransferCase, geometry: Geometry) -> str | None:
    """Why a transfer case has no history at this geometry, or None."""
    if case.tail >= geometry.block_tokens:
        return f"a tail of {case.tail} tokens is no partial block with B = {geometry.block_tokens}"
    size = geometry.envelope_size(1, case.version)
    if size > EXPANSION_MAX_BYTES:
        return TRANSFER_TOO_LARGE.format(size=size, geometry=geometry, limit=EXPANSION_MAX_BYTES)
    return None
