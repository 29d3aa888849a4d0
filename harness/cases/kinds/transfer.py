"""The `transfer` case kind: the suite plays the prefill side of tl.kv.v1 (spec, "Transfer").

A case describes a prompt (full blocks and a partial tail, with values), how much of it the
decode server already holds (an earlier, shorter prompt transferred first), and optionally one
chunk to tamper with. It runs exactly as a prefill engine would: HasBlocks first, an empty
payload for each held block, a one-block envelope for every other block including the tail.

The server's pool outlives every case and cannot be cleared over tl.kv.v1, so the tokens are
drawn from the run's hash salt mixed with the case's file and id (random per run, stated in the
report, --hash-salt replays it): the hashes are new to the server whatever ran before (the
tokens and hashes are in every failure message). Only gRPC testees run these cases.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from ... import oracle
from ...adapters import Chunk
from ...checks import CaseFailure
from ...errors import NotObservable, Refused
from ...evidence import PoolChangeEvidence, RefusalEvidence
from ...testee import Testee
from .._sources import CaseDataError, EnvelopeResolver, mutate
from ._base import Case, FileContext
from ._prefill import (
    PULL_CHECKS,
    UNWRITTEN_FORMAT,
    PrefillRun,
    Prompt,
    count_mistake,
    draw_prompt,
    pull_unheld_asked,
)

DEFAULT_VALUES = {"pcg64": {"seed": 11, "low": -4.0, "high": 4.0}}


@dataclass(frozen=True)
class Tamper:
    """What to change in one chunk of the transfer (the first one with a payload by default)."""

    chunk: int | None = None
    empty_payload: bool = False
    resend: bool = False  # a held block's chunk carries its payload again
    payload_blocks: int | None = None  # carry this many blocks (from this one on) in one envelope
    mutations: tuple[Mapping[str, Any], ...] = ()
    reseal: bool = True
    crc32c_xor: int = 0
    kv_format: int | None = None
    block_hash: int | None = None  # the chunk's block_hash, in place of its block's
    block_hash_xor: int = 0

    def rules(self) -> frozenset[str]:
        """The requirements the tampered chunk breaks, as far as the tampering says."""
        broken = {
            "XFER-CHUNK-CRC": bool(self.crc32c_xor),
            "XFER-CHUNK-HASH": self.block_hash is not None or bool(self.block_hash_xor),
            "XFER-FORMAT": self.kv_format is not None,
            "XFER-CHUNK-ONE": self.payload_blocks is not None,
            "XFER-EMPTY-UNHELD": self.empty_payload,
            "XFER-READER": bool(self.mutations),
        }
        return frozenset(rule for rule, tampered in broken.items() if tampered)

    @classmethod
    def of(cls, raw: Mapping[str, Any] | None) -> Tamper | None:
        if raw is None:
            return None
        return cls(
            chunk=raw.get("chunk"),
            empty_payload=raw.get("empty_payload", False),
            resend=raw.get("resend", False),
            payload_blocks=raw.get("payload_blocks"),
            mutations=tuple(raw.get("mutate", ())),
            reseal=raw.get("reseal", True),
            crc32c_xor=raw.get("crc32c_xor", 0),
            kv_format=raw.get("kv_format"),
            block_hash=raw.get("block_hash"),
            block_hash_xor=raw.get("block_hash_xor", 0),
        )


def _listing(statuses: frozenset[str]) -> str:
    return " or ".join(sorted(statuses))


@dataclass(frozen=True, eq=False, kw_only=True)
class TransferCase(Case):
    kind = "transfer"
    markers = ("transfer",)

    geometry: oracle.Geometry | None  # None: whatever the server's pool is
    version: int
    full_blocks: int
    tail: int
    held: int
    values: Mapping[str, Any]
    v1_only: bool
    tamper: Tamper | None
    statuses: frozenset[str] | None  # None: the transfer is accepted
    atomic: bool
    checks: frozenset[str]
    resolver: EnvelopeResolver
    salt: int  # the case's hash salt: its prompt's tokens

    @classmethod
    def build(cls, raw: Mapping[str, Any], common: dict[str, Any], ctx: FileContext) -> list[Case]:
        # None: whatever the server's pool is (a written-out geometry: that one only).
        geometry = ctx.geometry(raw["geometry"]) if "geometry" in raw else None
        full, tail, held = raw["full_blocks"], raw.get("tail", 1), raw.get("held", 0)
        n_chunks = full + (1 if tail else 0)
        if not n_chunks:
            raise CaseDataError("the prompt has no block: give full_blocks or tail")
        if held > full:
            raise CaseDataError(f"held {held} of only {full} full blocks")
        if geometry is not None and tail >= geometry.block_tokens:
            raise CaseDataError(
                f"a tail of {tail} tokens is no partial block with B = {geometry.block_tokens}"
            )
        expect = raw.get("expect", {})
        status = expect.get("status")
        statuses = (
            None if status is None else frozenset([status] if isinstance(status, str) else status)
        )
        tamper = Tamper.of(raw.get("tamper"))
        if tamper is not None:
            if statuses is None:
                raise CaseDataError("a tampered chunk needs expect: status")
            chunk = held if tamper.chunk is None else tamper.chunk
            if chunk >= n_chunks:
                raise CaseDataError(f"tamper chunk {chunk}: the prompt has {n_chunks} chunks")
            if tamper.resend and chunk >= held:
                raise CaseDataError(f"resend: chunk {chunk} is not held, it carries its payload")
            payload_tampered = tamper.mutations or tamper.payload_blocks is not None
            if chunk < held and payload_tampered and not tamper.resend:
                raise CaseDataError(f"chunk {chunk} is held: it carries no payload to tamper")
            if tamper.payload_blocks is not None and chunk + tamper.payload_blocks > n_chunks:
                raise CaseDataError(
                    f"payload_blocks {tamper.payload_blocks} from chunk {chunk}: the prompt has "
                    f"{n_chunks} blocks"
                )
            tamper = replace(tamper, chunk=chunk)
        if expect.get("atomic") and tamper is None:
            raise CaseDataError("atomic: true needs a tampered chunk")
        return [
            cls(
                **common,
                geometry=geometry,
                version=raw.get("version", 1),
                full_blocks=full,
                tail=tail,
                held=held,
                values=raw.get("values", DEFAULT_VALUES),
                v1_only=raw.get("reader") == "v1-only",
                tamper=tamper,
                statuses=statuses,
                atomic=bool(expect.get("atomic")),
                checks=frozenset(raw.get("check", ())),
                resolver=ctx.resolver,
                salt=ctx.target.salt,
            )
        ]

    def item_markers(self) -> tuple[str, ...]:
        return (*self.markers, f"v{self.version}")

    # -- whether this testee can run it ---------------------------------------------------------

    def skip_reason(self, testee: Testee) -> str | None:
        transfer = testee.adapter.transfer
        if transfer is None:
            return (
                f"transfer cases play the prefill side of tl.kv.v1; {testee.label} is not a "
                "gRPC endpoint (--impl grpc:HOST:PORT)"
            )
        server = transfer.geometry
        if self.geometry is not None and self.geometry != server:
            return f"the server's pool is {_shape(server)}; this case needs {_shape(self.geometry)}"
        if self.tail >= server.block_tokens:
            return f"the server's B is {server.block_tokens}: no partial tail of {self.tail} tokens"
        reads = testee.info.read_versions
        if self.v1_only and reads != frozenset({1}):
            return f"this case is for a v1-only reader; {testee.label} reads {_versions(reads)}"
        if self.statuses is None and self.version not in reads:
            return f"{testee.label} does not read v{self.version}"
        size = server.envelope_size(1, self.version)
        if size > oracle.MAX_CHUNK_PAYLOAD and self.statuses is None:
            return (
                f"a one-block v{self.version} envelope of the server's pool is {size} bytes, "
                "more than 4 MiB"
            )
        return None

    # -- running it -----------------------------------------------------------------------------

    def run(self, testee: Testee) -> None:
        transfer = testee.adapter.transfer
        assert transfer is not None  # skip_reason skips the testees without one
        geometry = self.geometry or transfer.geometry
        if self.checks & PULL_CHECKS and not transfer.has_pull:
            raise NotObservable("this case compares content; the server does not offer PullKv")
        if "free_blocks" in self.checks and not transfer.has_info:
            raise NotObservable("this case counts free blocks; the server does not offer GetInfo")
        prompt = draw_prompt(
            geometry, self.version, self.full_blocks, self.tail, self.values, self.salt
        )
        run = PrefillRun(transfer, prompt)
        try:
            run.expect_held([False] * len(prompt.full_hashes), "before anything was sent")
            if self.held:
                run.prime(self.held)
            self._transfer(run)
        except CaseFailure as failure:
            raise failure.prefixed("", f"\n{prompt.describe()}") from None

    def _transfer(self, run: PrefillRun) -> None:
        prompt = run.prompt
        held = [i < self.held for i in range(len(prompt.full_hashes))]
        run.expect_held(held, "after the earlier prompt")
        run.expect_held_shuffled(held)
        chunks = run.prefill_chunks(held)
        if self.tamper is not None:
            chunks = self._tampered(chunks, prompt)
        largest = max((len(c.payload) for c in chunks), default=0)
        if largest > oracle.MAX_CHUNK_PAYLOAD and "RESOURCE_EXHAUSTED" not in (self.statuses or ()):
            # The 4 MiB chunk limit answers first: what this case checks cannot be observed.
            raise NotObservable(
                f"a {largest}-byte payload at this geometry is over the 4 MiB chunk limit, "
                "which answers before what this case checks"
            )
        free_before = run.free_blocks()
        if self.statuses is not None:
            self._expect_refusal(run, chunks, held, free_before)
            return
        counts = run.push_accepted(chunks, "the transfer")
        missing = sum(1 for h in held if not h)
        stored = missing + (1 if self.tail else 0)
        size = prompt.geometry.envelope_size(1, self.version)
        expected = (stored, self.held, stored * size)
        got = (counts.blocks_stored, counts.blocks_reused, counts.payload_bytes)
        if got != expected:
            raise CaseFailure(
                f"PushKv answered blocks_stored {got[0]}, blocks_reused {got[1]}, payload_bytes "
                f"{got[2]}; expected {expected[0]}, {expected[1]}, {expected[2]} ({missing} "
                f"missing full blocks + {1 if self.tail else 0} tail, {size}-byte envelopes, "
                f"{self.held} held)",
                count_mistake(got, expected, size, self.tail > 0),
            )
        run.expect_held([True] * len(held), "after the transfer")
        run.expect_free(free_before, stored, "the transfer")
        if "content" in self.checks:
            run.compare_content()
        if "pull_order" in self.checks:
            run.expect_pull_order()
        if "pull_index" in self.checks:
            run.expect_pull_index()
        if "pull_unheld" in self.checks:
            run.expect_pull_refused(pull_unheld_asked(prompt.full_hashes), 1, "NOT_FOUND")
        if "pull_unwritten" in self.checks:
            run.expect_pull_refused(prompt.full_hashes, UNWRITTEN_FORMAT, "FAILED_PRECONDITION")

    def _tampered(self, chunks: list[Chunk], prompt: Prompt) -> list[Chunk]:
        tamper = self.tamper
        assert tamper is not None
        assert tamper.chunk is not None
        index = tamper.chunk
        chunk = chunks[index]
        payload = prompt.payloads[index] if tamper.resend else chunk.payload
        if tamper.payload_blocks is not None:
            blocks = prompt.blocks[index : index + tamper.payload_blocks]
            payload = oracle.encode(prompt.geometry, blocks, self.version)
        if tamper.mutations:
            payload = mutate(payload, list(tamper.mutations), tamper.reseal, self.resolver)
        if tamper.empty_payload:
            payload = b""
        crc = (oracle.crc32c(payload) if payload else 0) ^ tamper.crc32c_xor
        chunks[index] = replace(
            chunk,
            payload=payload,
            crc32c=crc,
            kv_format=chunk.kv_format if tamper.kv_format is None else tamper.kv_format,
            block_hash=(chunk.block_hash if tamper.block_hash is None else tamper.block_hash)
            ^ tamper.block_hash_xor,
        )
        return chunks

    def _expect_refusal(
        self, run: PrefillRun, chunks: list[Chunk], held: list[bool], free_before: int | None
    ) -> None:
        assert self.statuses is not None
        first = self.tamper.chunk if self.tamper is not None else self.held
        assert first is not None
        rules = frozenset(self.reqs) - AFTERMATH
        if not rules and self.tamper is not None:  # a case about what a refusal leaves
            rules = self.tamper.rules()
        try:
            counts = run.transfer.push(chunks)
        except Refused as refusal:
            if refusal.code not in self.statuses:
                raise CaseFailure(
                    f"refused with {refusal.code}, expected {_listing(self.statuses)}: "
                    f"{_what(chunks[first], first)} ({refusal.detail})",
                    RefusalEvidence(rules, frozenset(self.statuses), refusal.code),
                ) from None
        else:
            raise CaseFailure(
                f"accepted (blocks_stored {counts.blocks_stored}, blocks_reused "
                f"{counts.blocks_reused}) a transfer it must refuse with "
                f"{_listing(self.statuses)}: {_what(chunks[first], first)}",
                RefusalEvidence(rules, frozenset(self.statuses), None),
            )
        # The rejected chunk, and any after it, register nothing; blocks held before stay held;
        # with `atomic`, the blocks earlier chunks of the stream stored are gone too. Without it,
        # either is fine for those.
        hashes = run.prompt.full_hashes
        claimed = chunks[first].block_hash
        extra = [claimed] if claimed and claimed not in hashes else []
        got = run.transfer.has_blocks(hashes + extra)
        wrong = []
        for i, (block_hash, now) in enumerate(zip(hashes + extra, got, strict=True)):
            if i < len(held) and held[i]:
                want: bool | None = True
            elif i < first and i < len(held):
                want = False if self.atomic else None
            else:
                want = False
            if want is not None and now != want:
                wrong.append(
                    f"block {i if i < len(hashes) else 'claimed'} {block_hash:#018x} is "
                    f"{'held' if now else 'not held'}"
                )
        if wrong:
            raise CaseFailure(
                f"after the refused transfer (chunk {first} refused"
                + (", and the stream is all or nothing" if self.atomic else "")
                + "), HasBlocks says: "
                + "; ".join(wrong),
                PoolChangeEvidence(("XFER-ATOMIC",) if self.atomic else ("XFER-REJECTED",)),
            )
        stored_before = 0 if self.atomic else sum(1 for c in chunks[:first] if c.payload)
        run.expect_free(free_before, stored_before, "the refused transfer", at_most=True)


# What a refused transfer must leave behind, as opposed to the rule that refuses it.
AFTERMATH = frozenset({"XFER-REJECTED", "XFER-ATOMIC", "READ-ATOMIC"})


def _what(chunk: Chunk, index: int) -> str:
    return (
        f"chunk {index} (kv_format {chunk.kv_format}, block_hash {chunk.block_hash:#018x}, "
        f"{len(chunk.payload)}-byte payload, crc32c field {chunk.crc32c:#010x})"
    )


def _shape(geometry: oracle.Geometry) -> str:
    return f"{geometry.block_tokens}x{geometry.n_layers}x{geometry.n_kv_heads}x{geometry.head_dim}"


def _versions(reads: frozenset[int]) -> str:
    return ",".join(f"v{v}" for v in sorted(reads))
