"""The prefill side of one prompt, as the transfer cases play it (spec, "Transfer"): the prompt
drawn, its chunks, and the checks of what the decode server says it holds, stored and sends
back. `transfer.py` composes them into cases.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ... import oracle
from ...adapters import Chunk, PushCounts, ReadBack, Transfer
from ...checks import WRONG_COUNT, CaseFailure, ValueSource, compare_readback, refused_with
from ...errors import Refused
from ...evidence import KnownMistake, RefusalEvidence
from ...values import make_values


@dataclass(frozen=True)
class Prompt:
    """One drawn prompt: its tokens, each block's hash (0 for the tail), envelope and block."""

    geometry: oracle.Geometry
    version: int
    tokens: list[int]
    hashes: list[int]
    blocks: list[oracle.Block]
    payloads: list[bytes] = field(repr=False)

    @property
    def full_hashes(self) -> list[int]:
        return [h for h in self.hashes if h]

    def describe(self) -> str:
        shown = " ".join(str(t) for t in self.tokens[:12]) + (
            " ..." if len(self.tokens) > 12 else ""
        )
        hashes = ", ".join(f"{h:#018x}" for h in self.hashes)
        return (
            f"prompt of {len(self.tokens)} tokens ({shown}), B = {self.geometry.block_tokens}, "
            f"block hashes {hashes}"
        )


def draw_prompt(
    geometry: oracle.Geometry,
    version: int,
    full: int,
    tail: int,
    recipe: Mapping[str, Any],
    salt: int,
) -> Prompt:
    """The prompt's tokens come from `salt` (the case's, of the run's hash salt); a case built
    unsalted (for no server) draws fresh ones."""
    b = geometry.block_tokens
    rng = np.random.default_rng(salt or secrets.randbits(128))
    tokens = [int(t) for t in rng.integers(0, 1 << 32, size=full * b + tail, dtype=np.uint64)]
    hashes = oracle.sequence_hashes(tokens, b)
    blocks, payloads = [], []
    for index, block_hash in enumerate(hashes):
        n_tokens = b if block_hash else tail
        values = make_values(recipe, geometry, salt=index)
        block = oracle.Block(block_hash, n_tokens, values)
        blocks.append(block)
        payloads.append(oracle.encode(geometry, [block], version))
    return Prompt(geometry, version, tokens, hashes, blocks, payloads)


class PrefillRun:
    """One prompt's transfers against one server."""

    def __init__(self, transfer: Transfer, prompt: Prompt) -> None:
        self.transfer = transfer
        self.prompt = prompt

    def prefill_chunks(self, held: Sequence[bool], upto: int | None = None) -> list[Chunk]:
        prompt = self.prompt
        request_id = self.transfer.new_request_id()
        chunks = []
        count = len(prompt.hashes) if upto is None else upto
        for index in range(count):
            block_hash = prompt.hashes[index]
            reuse = block_hash != 0 and index < len(held) and held[index]
            payload = b"" if reuse else prompt.payloads[index]
            chunks.append(Chunk.of_payload(index, prompt.version, block_hash, payload, request_id))
        return chunks

    def push_accepted(self, chunks: Sequence[Chunk], what: str) -> PushCounts:
        """A PushKv the server must accept: a refusal fails the case."""
        try:
            return self.transfer.push(chunks)
        except Refused as refusal:
            raise CaseFailure(
                f"{what} was refused: {refusal}",
                RefusalEvidence(frozenset(), frozenset(), refusal.code),
            ) from None

    def prime(self, n_blocks: int) -> None:
        """Transfer the first n full blocks as an earlier prompt, so the server holds them."""
        chunks = self.prefill_chunks([False] * n_blocks, upto=n_blocks)
        counts = self.push_accepted(chunks, f"the earlier prompt of {n_blocks} blocks")
        size = self.prompt.geometry.envelope_size(1, self.prompt.version)
        got = (counts.blocks_stored, counts.blocks_reused, counts.payload_bytes)
        expected = (n_blocks, 0, n_blocks * size)
        if got != expected:
            raise CaseFailure(
                f"the earlier prompt of {n_blocks} new blocks: blocks_stored {got[0]}, "
                f"blocks_reused {got[1]}, payload_bytes {got[2]}; expected {n_blocks}, 0, "
                f"{n_blocks * size}",
                count_mistake(got, expected, size, False),
            )

    def expect_held(self, expected: list[bool], when: str) -> None:
        got = self.transfer.has_blocks(self.prompt.full_hashes)
        if got != expected:
            never = not any(got) and any(expected)
            raise CaseFailure(
                f"HasBlocks {when} says held {got}, expected {expected}",
                KnownMistake(
                    "hasblocks-never-held" if never else "hasblocks-wrong",
                    "HasBlocks never reports a block as held"
                    if never
                    else "HasBlocks answers wrongly which blocks are held",
                    ("XFER-HASBLOCKS",),
                ),
            )

    def expect_held_shuffled(self, expected: list[bool]) -> None:
        """The answers follow the request's order, whatever it is."""
        hashes = self.prompt.full_hashes
        order = shuffled_order(len(hashes))
        got = self.transfer.has_blocks([hashes[i] for i in order])
        want = [expected[i] for i in order]
        if got != want:
            raise CaseFailure(
                f"HasBlocks of the blocks in the order {order} says held {got}, expected {want}"
            )

    def free_blocks(self) -> int | None:
        if not self.transfer.has_info or self.transfer.shared:
            return None
        return self.transfer.server_info().free_blocks

    def expect_free(self, before: int | None, used: int, what: str, at_most: bool = False) -> None:
        if before is None:
            return  # no GetInfo: cases that need the count say so in `check`
        after = self.transfer.server_info().free_blocks
        if after == before - used or (at_most and before - used <= after <= before):
            return
        bound = f"between {before - used} and {before}" if at_most and used else f"{before - used}"
        raise CaseFailure(
            f"GetInfo says {after} free blocks after {what}, {before} before; expected {bound}",
            KnownMistake(
                "free-count",
                "the free-block count moves by another number than the blocks stored",
                ("XFER-INFO",),
            ),
        )

    def expect_pull_order(self) -> None:
        """PullKv of several hashes answers in the order asked (XFER-PULL-ORDER, SHOULD)."""
        asked = pull_order_asked(self.prompt.full_hashes)
        sent = [chunk.block_hash for chunk in self.transfer.pulled(asked, 1)]
        if sent != asked:
            raise CaseFailure(
                "PullKv of "
                + ", ".join(f"{h:#018x}" for h in asked)
                + " streamed them in the order "
                + ", ".join(f"{h:#018x}" for h in sent),
                KnownMistake(
                    "pull-order",
                    "PullKv streams blocks in another order than asked",
                    ("XFER-PULL-ORDER",),
                ),
            )

    def expect_pull_index(self) -> None:
        """Each chunk of a PullKv stream has its position in the request as its index, whatever
        the block's position in the prompt or its id in the pool (XFER-PULL-ORDER, SHOULD)."""
        asked = pull_index_asked(self.prompt.full_hashes)
        chunks = self.transfer.pull(asked, 1)
        indexes = [chunk.index for chunk in chunks]
        if indexes != list(range(len(asked))):
            raise CaseFailure(
                "PullKv of "
                + ", ".join(f"{h:#018x}" for h in asked)
                + " numbered their chunks "
                + ", ".join(map(str, indexes))
                + f"; expected 0 to {len(asked) - 1}, each chunk's position in the request",
                KnownMistake(
                    "pull-index",
                    "PullKv numbers its chunks otherwise than by their positions in the request",
                    ("XFER-PULL-ORDER",),
                ),
            )

    def expect_pull_refused(self, hashes: Sequence[int], kv_format: int, status: str) -> None:
        """PullKv of `hashes` in `kv_format` fails with `status` (XFER-PULL-REFUSED, SHOULD): a
        stream that leaves a block out, or stops after its first chunks, would hand the client a
        sequence with a hole in it."""

        def pull() -> str:  # what was streamed, said in a line (not the payloads)
            chunks = self.transfer.pulled(hashes, kv_format, offered=True)
            return f"{len(chunks)} chunks of " + ", ".join(f"{c.block_hash:#018x}" for c in chunks)

        refused_with(
            status,
            f"PullKv of {', '.join(f'{h:#018x}' for h in hashes)} in kv_format {kv_format}",
            pull,
            ["XFER-PULL-REFUSED"],
        )

    def compare_content(self) -> None:
        hashes = self.prompt.full_hashes
        chunks = self.transfer.pull(hashes, 1)
        profile = oracle.ReaderProfile(self.prompt.geometry, frozenset({1}))
        for index, chunk in enumerate(chunks):
            try:
                envelope = oracle.decode(chunk.payload, profile)
            except oracle.Rejected as exc:
                raise CaseFailure(
                    f"PullKv of block {index} sent an unreadable envelope: {exc}"
                ) from None
            if envelope.n_blocks != 1:
                raise CaseFailure(f"PullKv of block {index} sent {envelope.n_blocks} blocks")
            (record,) = envelope.records
            sent = oracle.decode(self.prompt.payloads[index]).records[0]
            expected = oracle.Block(sent.block_hash, sent.n_tokens, sent.decoded.values)
            compare_readback(
                expected,
                ReadBack(record.block_hash, record.n_tokens, record.decoded.values),
                "f16",
                f"block {index} pulled back in v1",
                block=f"block {index}",
                source=ValueSource.of_record(self.prompt.payloads[index], sent),
            )


def shuffled_order(count: int) -> list[int]:
    """The order a second HasBlocks asks for a prompt's full blocks in: neither theirs nor its
    reverse (when there are three or more), so an answer in the prompt's order shows."""
    order = list(reversed(range(count)))
    return order[1:] + order[:1] if count > 2 else order


def pull_order_asked(hashes: Sequence[int]) -> list[int]:
    """The order the PullKv-order case asks for the blocks in: rotated, then reversed."""
    return list(reversed([*hashes[1:], *hashes[:1]] if len(hashes) > 1 else hashes))


# The transfer cases' checks that call PullKv.
PULL_CHECKS = frozenset({"content", "pull_order", "pull_index", "pull_unheld", "pull_unwritten"})
# A kv_format no version of the spec defines: no server writes it.
UNWRITTEN_FORMAT = 3


def pull_unheld_asked(hashes: Sequence[int]) -> list[int]:
    """The blocks the unheld-pull case asks for: the prompt's first, then one no prompt of
    the suite holds (the first's hash chained with a token id no tokenizer draws)."""
    return [hashes[0], oracle.block_hash(hashes[0], [0xFFFFFFFF])]


def pull_index_asked(hashes: Sequence[int]) -> list[int]:
    """The blocks the PullKv-index case asks for: all but the first, in reverse, so that no
    block's position in the request is its position in the prompt (with three or more)."""
    return list(reversed(hashes[1:])) if len(hashes) > 1 else list(hashes)


def count_mistake(
    got: tuple[int, int, int], expected: tuple[int, int, int], size: int, tail: bool
) -> KnownMistake:
    if got[:2] == expected[:2] and tail and got[2] == expected[2] - size:
        return KnownMistake(
            "xfer-tail-not-counted",
            "the partial tail's payload not counted in payload_bytes",
            ("XFER-BYTES",),
            f"payload_bytes {got[2]} is one {size}-byte envelope short",
        )
    reqs = ("XFER-BYTES",) if got[:2] == expected[:2] else ("XFER-COUNTS",)
    return KnownMistake(*WRONG_COUNT, reqs)
