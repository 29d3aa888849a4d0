"""The checks of a prefill case's record (tlkv_conformance.cases.kinds.prefill_client): what the
scripted decode server recorded of the client's calls, one check per requirement, in order.
Each runs only in the cases citing its requirement, so a SHOULD decision never fails a MUST
case.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Protocol

from ... import oracle
from ...adapters import Chunk, PrefillJob, PrefillResult
from ...checks import CaseFailure
from ...diff import envelope_diff
from ...evidence import KnownMistake
from ...scripted_server import (
    ChunkReceived,
    HasBlocksCall,
    ServerRecord,
    ServerScript,
    StreamEnded,
)
from ._prefill import Prompt

# The requirement of each check, in the order the checks run.
HASBLOCKS = "PREFILL-HASBLOCKS"
STREAM = "PREFILL-STREAM"
TAIL = "XFER-TAIL"
CHUNK_HASH = "PREFILL-CHUNK-HASH"
EMPTY_UNCONFIRMED = "PREFILL-EMPTY-UNCONFIRMED"
DEDUP = "XFER-DEDUP"
CHUNK_CRC = "PREFILL-CHUNK-CRC"
PAYLOAD = "PREFILL-PAYLOAD"
CONTENT = "PREFILL-CONTENT"
BYTES = "XFER-BYTES"
NO_EMPTY_TAIL = "PREFILL-NO-EMPTY-TAIL"
VERSION_RETRY = "PREFILL-VERSION-RETRY"
REPORT = "PREFILL-REPORT"
DEADLINE = "PREFILL-DEADLINE"
# How far past its deadline a client's answer may come (the worker's round trip, a loaded host).
DEADLINE_GRACE = 1.0
CHECKED = (
    HASBLOCKS,
    STREAM,
    TAIL,
    CHUNK_HASH,
    EMPTY_UNCONFIRMED,
    DEDUP,
    CHUNK_CRC,
    PAYLOAD,
    CONTENT,
    BYTES,
    NO_EMPTY_TAIL,
    VERSION_RETRY,
    REPORT,
    DEADLINE,
)


def mistake(cause: str, title: str, req: str, detail: str = "") -> KnownMistake:
    return KnownMistake(cause, title, (req,), detail)


class CheckedCase(Protocol):
    """What the checks read of a prefill case (PrefillCase)."""

    @property
    def reqs(self) -> tuple[str, ...]: ...

    @property
    def geometry(self) -> oracle.Geometry: ...

    @property
    def version(self) -> int: ...

    @property
    def reads(self) -> frozenset[int]: ...

    @property
    def stall(self) -> str | None: ...


class RecordCheck:
    """The checks of one case's record, each run when the case cites its requirement."""

    def __init__(
        self,
        case: CheckedCase,
        prompt: Prompt,
        script: ServerScript,
        job: PrefillJob,
        record: ServerRecord,
    ) -> None:
        self.case = case
        self.prompt = prompt
        self.script = script
        self.job = job
        self.record = record
        self.n_blocks = len(prompt.hashes)
        self.took = 0.0  # seconds the client's push took

    def fail(self, message: str, mistake: KnownMistake) -> CaseFailure:
        return CaseFailure(
            f"{message}\n{self.prompt.describe()}\nthe server's record:\n{self.recorded()}",
            mistake,
        )

    def recorded(self) -> str:
        lines = []
        for call in self.record.calls:
            text = repr(call)
            if isinstance(call, ChunkReceived):
                c = call.chunk
                text = (
                    f"chunk (stream {call.stream}): index {c.index}, kv_format {c.kv_format}, "
                    f"block_hash {c.block_hash:#x}, payload {len(c.payload)} bytes, crc32c "
                    f"{c.crc32c:#010x}, request_id {c.request_id!r}"
                )
            lines.append("  " + text)
        return "\n".join(lines[:40]) or "  (nothing)"

    def check(self, result: PrefillResult) -> None:
        for req in CHECKED:
            if req in self.case.reqs:
                getattr(self, "check_" + req.lower().replace("-", "_"))(result)

    # -- what the server was told ---------------------------------------------------------------

    def confirmed_before(self, stream: int) -> set[int]:
        """The hashes a HasBlocks answered as held before the stream's first chunk."""
        confirmed: set[int] = set()
        for call in self.record.calls:
            if isinstance(call, ChunkReceived | StreamEnded) and call.stream == stream:
                break
            if isinstance(call, HasBlocksCall) and call.status == "OK":
                confirmed |= {h for h in call.hashes if h in self.script.held}
        return confirmed

    def stream_ids(self) -> list[int]:
        seen: list[int] = []
        for call in self.record.calls:
            if isinstance(call, ChunkReceived | StreamEnded) and call.stream not in seen:
                seen.append(call.stream)
        return seen

    def accepted(self) -> list[int]:
        return [s.stream for s in self.record.streams() if s.status == "OK"]

    def expected_payload(self, index: int, kv_format: int) -> bytes:
        if kv_format == self.prompt.version:
            return self.prompt.payloads[index]
        return oracle.encode(self.case.geometry, [self.prompt.blocks[index]], kv_format)

    # -- the checks, in order -------------------------------------------------------------------

    def check_prefill_hasblocks(self, result: PrefillResult) -> None:
        full = self.prompt.full_hashes
        if not full:
            return  # nothing to ask (docs/decisions.md)
        first_chunk = self.record.first_chunk_at()
        asked = self.record.calls[:first_chunk] if first_chunk is not None else self.record.calls
        calls = [c for c in asked if isinstance(c, HasBlocksCall)]
        if not calls:
            raise self.fail(
                "the client sent chunks without asking HasBlocks first",
                mistake("prefill-no-hasblocks", "the prefill side skips HasBlocks", HASBLOCKS),
            )
        hashes = list(calls[0].hashes)
        if hashes != full:
            raise self.fail(
                f"HasBlocks asked {[f'{h:#x}' for h in hashes]}; the prompt's full-block "
                f"hashes in order are {[f'{h:#x}' for h in full]}",
                mistake(
                    "prefill-hasblocks-hashes",
                    "HasBlocks asks other hashes than the prompt's full blocks, in order",
                    HASBLOCKS,
                ),
            )

    def check_prefill_stream(self, result: PrefillResult) -> None:
        streams = self.stream_ids()
        refused = [s.stream for s in self.record.streams() if s.status != "OK"]
        if not streams and result.status == "OK":
            raise self.fail(
                "the client reported success without pushing a chunk",
                mistake("prefill-no-stream", "the prompt is never pushed", STREAM),
            )
        # First: a stream per block is the cause of what else is wrong with each stream (its
        # one chunk numbered k, not 0).
        later = [s for s in streams[1:] if streams[streams.index(s) - 1] not in refused]
        if later:
            raise self.fail(
                f"the prompt went in {len(streams)} PushKv streams, the later ones after an "
                "accepted one: one stream per sequence is due",
                mistake("prefill-several-streams", "one PushKv stream per block", STREAM),
            )
        for stream in streams:
            chunks = self.record.chunks(stream)
            ids = {c.request_id for c in chunks}
            # A stream without a chunk carries no request id: the blocks it lacks are XFER-TAIL's.
            if chunks and ids != {self.job.request_id}:
                raise self.fail(
                    f"stream {stream} carries request ids {sorted(ids)}; the job's is "
                    f"{self.job.request_id!r}",
                    mistake("prefill-request-id", "chunks carry another request id", STREAM),
                )
            indexes = [c.index for c in chunks]
            if indexes != list(range(len(chunks))):
                raise self.fail(
                    f"stream {stream} numbers its chunks {indexes}: from 0, in order, due",
                    mistake(
                        "prefill-chunk-index",
                        "chunks are not numbered 0..n-1 in order",
                        STREAM,
                    ),
                )
        # A prompt of whole blocks may get one more chunk, an empty tail (PREFILL-NO-EMPTY-TAIL
        # is the SHOULD that decides against it).
        allowed = self.n_blocks + (0 if self.prompt.hashes[-1] == 0 else 1)
        for stream in self.accepted():
            count = len(self.record.chunks(stream))
            if count > allowed:
                raise self.fail(
                    f"stream {stream} carries {count} chunks; the prompt has {self.n_blocks} "
                    "blocks",
                    mistake("prefill-extra-chunks", "more chunks than blocks", STREAM),
                )

    def check_xfer_tail(self, result: PrefillResult) -> None:
        for stream in self.accepted():
            count = len(self.record.chunks(stream))
            if count < self.n_blocks:
                tail = self.prompt.hashes[-1] == 0
                sent = f"was closed after {count} chunks" if count else "ended without a chunk"
                if self.n_blocks == 1:
                    blocks = "is 1 block" + (", the partial tail" if tail else "")
                else:
                    blocks = f"has {self.n_blocks} blocks" + (
                        ", the last the partial tail" if tail else ""
                    )
                raise self.fail(
                    f"stream {stream} {sent}; the prompt {blocks}",
                    mistake(
                        "prefill-tail-dropped" if tail else "prefill-blocks-dropped",
                        "the partial tail is not sent" if tail else "blocks are not sent",
                        TAIL,
                    ),
                )

    def check_prefill_chunk_hash(self, result: PrefillResult) -> None:
        for chunk in self.record.chunks():
            if chunk.index >= self.n_blocks:
                continue
            due = self.prompt.hashes[chunk.index]
            if chunk.block_hash != due:
                tail = due == 0
                raise self.fail(
                    f"chunk {chunk.index} has block_hash {chunk.block_hash:#x}; "
                    + ("the partial tail's is 0" if tail else f"its block's is {due:#x}"),
                    mistake(
                        "prefill-tail-hashed" if tail else "prefill-chunk-hash",
                        "the partial tail's chunk carries a hash"
                        if tail
                        else "a chunk carries another block's hash",
                        CHUNK_HASH,
                    ),
                )

    def check_prefill_empty_unconfirmed(self, result: PrefillResult) -> None:
        for stream in self.stream_ids():
            confirmed = self.confirmed_before(stream)
            for chunk in self.record.chunks(stream):
                if chunk.payload or chunk.index >= self.n_blocks:
                    continue
                due = self.prompt.hashes[chunk.index]
                if due == 0 or due not in confirmed:
                    what = "the partial tail" if due == 0 else "a block HasBlocks did not confirm"
                    raise self.fail(
                        f"chunk {chunk.index} of stream {stream} has an empty payload, for {what}"
                        ": the decode side would build the sequence on a block it does not have",
                        mistake(
                            "prefill-empty-unconfirmed",
                            "an empty payload for a block the server did not say it holds",
                            EMPTY_UNCONFIRMED,
                        ),
                    )

    def check_xfer_dedup(self, result: PrefillResult) -> None:
        for stream in self.stream_ids():
            confirmed = self.confirmed_before(stream)
            for chunk in self.record.chunks(stream):
                if chunk.payload and chunk.block_hash and chunk.block_hash in confirmed:
                    raise self.fail(
                        f"chunk {chunk.index} carries a payload of {len(chunk.payload)} bytes "
                        "for a block the server said it holds: an empty payload is due",
                        mistake(
                            "prefill-payload-for-held",
                            "held blocks are sent with their payload again",
                            DEDUP,
                        ),
                    )

    def check_prefill_chunk_crc(self, result: PrefillResult) -> None:
        for chunk in self.record.chunks():
            due = oracle.crc32c(chunk.payload)  # 0 for an empty payload
            if chunk.crc32c == due:
                continue
            trailer = (
                int.from_bytes(chunk.payload[-4:], "little") if len(chunk.payload) >= 4 else None
            )
            envelope_crc = chunk.crc32c == trailer
            raise self.fail(
                f"chunk {chunk.index} has crc32c {chunk.crc32c:#010x}; the CRC-32C of its "
                f"{len(chunk.payload)}-byte payload is {due:#010x}"
                + (" (the field holds the envelope's own CRC trailer)" if envelope_crc else ""),
                replace(
                    mistake(
                        "prefill-envelope-crc-in-chunk" if envelope_crc else "prefill-chunk-crc",
                        "the chunk's crc32c is the envelope's trailer, not the payload's CRC"
                        if envelope_crc
                        else "the chunk's crc32c is not the CRC-32C of its payload",
                        CHUNK_CRC,
                    ),
                    chunk_crc=(chunk.payload, chunk.crc32c),
                ),
            )

    def check_prefill_payload(self, result: PrefillResult) -> None:
        geometry = self.case.geometry
        for chunk in self.record.chunks():
            if not chunk.payload or chunk.index >= self.n_blocks:
                continue
            problem = self._payload_problem(chunk, geometry)
            if problem:
                raise self.fail(
                    f"chunk {chunk.index}'s payload: {problem}",
                    mistake(
                        "prefill-bad-payload", "a payload is not the block's envelope", PAYLOAD
                    ),
                )

    def _payload_problem(self, chunk: Chunk, geometry: oracle.Geometry) -> str:
        if len(chunk.payload) > oracle.MAX_CHUNK_PAYLOAD:
            return f"{len(chunk.payload)} bytes, over 4 MiB"
        try:
            envelope = oracle.decode(chunk.payload, oracle.ReaderProfile(geometry))
        except oracle.Rejected as exc:
            return f"not a valid envelope ({exc})"
        if envelope.version != chunk.kv_format:
            return f"an envelope of version {envelope.version}, kv_format {chunk.kv_format}"
        if len(envelope.records) != 1:
            return f"{len(envelope.records)} blocks, not 1"
        record = envelope.records[0]
        due = self.prompt.blocks[chunk.index]
        if (record.block_hash, record.n_tokens) != (due.block_hash, due.n_tokens):
            return (
                f"record hash {record.block_hash:#x}, n_tokens {record.n_tokens}; the block's are "
                f"{due.block_hash:#x}, {due.n_tokens}"
            )
        return ""

    def check_prefill_content(self, result: PrefillResult) -> None:
        for chunk in self.record.chunks():
            if not chunk.payload or chunk.index >= self.n_blocks:
                continue
            due = self.expected_payload(chunk.index, chunk.kv_format)
            if chunk.payload != due:
                raise self.fail(
                    f"chunk {chunk.index}'s payload differs from the oracle's v{chunk.kv_format} "
                    f"envelope of the suite's KV:\n{envelope_diff(due, chunk.payload)}",
                    mistake(
                        "prefill-content",
                        "payloads are not the envelope of the KV given",
                        CONTENT,
                    ),
                )

    def check_xfer_bytes(self, result: PrefillResult) -> None:
        for stream in self.accepted():
            chunks = self.record.chunks(stream)
            kv_format = chunks[0].kv_format if chunks else self.case.version
            moved = sum(len(c.payload) for c in chunks)
            missing = sum(1 for h in self.prompt.hashes if h and h not in self.script.held)
            tail = 1 if self.prompt.hashes and self.prompt.hashes[-1] == 0 else 0
            due = (missing + tail) * self.case.geometry.envelope_size(1, kv_format)
            if moved != due:
                raise self.fail(
                    f"stream {stream} moved {moved} payload bytes; (missing full blocks "
                    f"{missing} + tail {tail}) * envelope size is {due}",
                    mistake("prefill-bytes", "the bytes moved differ from the formula", BYTES),
                )

    def check_prefill_no_empty_tail(self, result: PrefillResult) -> None:
        for stream in self.stream_ids():
            count = len(self.record.chunks(stream))
            if self.prompt.hashes[-1] != 0 and count > self.n_blocks:
                raise self.fail(
                    f"a prompt of whole blocks was sent with {count} chunks for "
                    f"{self.n_blocks} blocks: no tail chunk is due (docs/decisions.md)",
                    mistake(
                        "prefill-empty-tail-chunk",
                        "a prompt of whole blocks gets a tail chunk",
                        NO_EMPTY_TAIL,
                    ),
                )

    def check_prefill_version_retry(self, result: PrefillResult) -> None:
        ends = {s.stream: s.status for s in self.record.streams()}
        refused: set[int] = set()
        for stream in self.stream_ids():
            formats = {c.kv_format for c in self.record.chunks(stream)}
            again = formats & refused
            if again:
                raise self.fail(
                    f"stream {stream} sends kv_format {sorted(again)} again after the server "
                    "refused it with FAILED_PRECONDITION",
                    mistake(
                        "prefill-version-again",
                        "a version refused with FAILED_PRECONDITION is sent again",
                        VERSION_RETRY,
                    ),
                )
            if ends.get(stream) == "FAILED_PRECONDITION":
                refused |= formats
        usable = self.case.reads - refused
        if refused and usable and not self.accepted():
            raise self.fail(
                f"after FAILED_PRECONDITION for v{sorted(refused)} the client gave up, though the "
                f"server reads v{sorted(self.case.reads)}: a new stream in a version it reads is "
                "due (docs/decisions.md)",
                mistake(
                    "prefill-no-version-retry",
                    "FAILED_PRECONDITION ends the push though the server reads another version",
                    VERSION_RETRY,
                ),
            )

    def check_prefill_deadline(self, result: PrefillResult) -> None:
        # Whether it reports the failure is PREFILL-REPORT's.
        if self.took > self.job.deadline + DEADLINE_GRACE:
            raise self.fail(
                f"the server stalled in {self.case.stall}; the client answered after "
                f"{self.took:.2f} s, its deadline {self.job.deadline:g} s: an answer within the "
                "deadline is due (docs/decisions.md)",
                mistake(
                    "prefill-ignores-deadline",
                    "the client waits on a stalled server past its deadline",
                    DEADLINE,
                ),
            )

    def check_prefill_report(self, result: PrefillResult) -> None:
        ends = self.record.streams()
        if self.case.stall == "PushKv":
            ends = []  # the stalled stream never ended
        if ends and ends[-1].status == "OK":
            counts = ends[-1].counts
            if result.status != "OK" or result.counts != counts:
                raise self.fail(
                    f"the client reported {result.status} {result.counts}; the server answered "
                    f"its last stream OK {counts}",
                    mistake(
                        "prefill-report-differs",
                        "the client's report differs from the server's answer",
                        REPORT,
                    ),
                )
        elif result.status == "OK":
            what = f"its last stream ended with {ends[-1].status}" if ends else "no stream ended"
            raise self.fail(
                f"the client reported success; {what}",
                mistake(
                    "prefill-silent-failure",
                    "a failed push is reported as a success",
                    REPORT,
                ),
            )
