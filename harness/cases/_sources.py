"""Turning the data a case declares (tokens, blocks, envelopes, mutations) into values and bytes."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import oracle
from ..errors import CorruptedGoldenFile
from ..golden import ManifestError, listed_entry, read_regular_file
from ..values import make_values, pcg64_raw

MAX_UNLISTED_BLOB = 64 << 20  # a blob no manifest describes: at most this many bytes
DEFAULT_VALUES = {"pcg64": {"seed": 1, "low": -2.0, "high": 2.0}}


class CaseDataError(ValueError):
    """The case's data cannot be built; the message says what (the loader adds where)."""


def geometry_of(raw: Any) -> oracle.Geometry:
    if isinstance(raw, Mapping):
        return oracle.Geometry(**raw)
    return oracle.Geometry(*raw)


def tokens_of(raw: Any) -> list[int]:
    """A token list from a list, {range: [a, b]}, {repeat: t, count: n} or {pcg64: {...}}."""
    if isinstance(raw, Sequence):
        return [int(t) for t in raw]
    if "range" in raw:
        start, stop = raw["range"]
        return list(range(start, stop))
    if "repeat" in raw:
        return [raw["repeat"]] * raw["count"]
    spec = raw["pcg64"]
    low, high = spec.get("min", 0), spec.get("max", 0xFFFFFFFF)
    if high < low:
        raise CaseDataError(f"pcg64 tokens: max {high} is below min {low}")
    draws = pcg64_raw(spec["seed"], 0, spec["count"]) % np.uint64(high - low + 1)
    return [int(d) + low for d in draws]


@dataclass(frozen=True, eq=False)
class BlockPlan:
    """A block to write: its label, hash, fill, f32 values, and the refusal it should get."""

    label: str | None
    block_hash: int
    n_tokens: int
    values: np.ndarray
    expect: str | None = None

    def as_oracle_block(self) -> oracle.Block:
        return oracle.Block(self.block_hash, self.n_tokens, self.values)


def plan_blocks(
    geometry: oracle.Geometry, raws: Sequence[Mapping[str, Any]], salt: int = 0
) -> list[BlockPlan]:
    """Block specs to plans. A full block with tokens gets H(previous full block's hash, tokens)
    unless `hash` is given; any other block gets hash 0."""
    plans = []
    parent = oracle.NO_HASH
    for index, raw in enumerate(raws):
        tokens = tokens_of(raw["tokens"]) if "tokens" in raw else None
        if tokens is not None and len(tokens) > geometry.block_tokens:
            raise CaseDataError(
                f"block {index} lists {len(tokens)} tokens, block_tokens is {geometry.block_tokens}"
            )
        n_tokens = raw.get("n_tokens", len(tokens) if tokens is not None else geometry.block_tokens)
        if "hash" in raw:
            block_hash = raw["hash"]
        elif tokens is not None and len(tokens) == geometry.block_tokens:
            block_hash = oracle.block_hash(parent, tokens)
        else:
            block_hash = oracle.NO_HASH
        if block_hash:
            parent = block_hash
        values = make_values(raw.get("values", DEFAULT_VALUES), geometry, salt=salt + index)
        plans.append(BlockPlan(raw.get("as"), block_hash, n_tokens, values, raw.get("expect")))
    return plans


@dataclass(frozen=True, eq=False)
class BuiltEnvelope:
    """Envelope bytes, and when the case built them, the blocks and geometry they came from."""

    data: bytes
    geometry: oracle.Geometry | None = None
    version: int | None = None
    blocks: tuple[BlockPlan, ...] = ()


class EnvelopeResolver:
    """Resolves envelope references of one case file: names, builds, hex, golden blobs."""

    def __init__(
        self, named: Mapping[str, Any], root: Path, golden_roots: Sequence[Path] = ()
    ) -> None:
        self._named = named
        self._root = root
        # Where a `golden:` blob may lie: the corpus's parity/ and the roots a user declared.
        self._golden_roots = [p.resolve() for p in (root / "parity", *golden_roots)]
        self._cache: dict[str, BuiltEnvelope] = {}

    def resolve(self, raw: Any) -> BuiltEnvelope:
        if isinstance(raw, str):
            if raw not in self._named:
                known = ", ".join(sorted(self._named)) or "none"
                raise CaseDataError(f"no envelope named {raw!r} in this file (named: {known})")
            if raw not in self._cache:
                self._cache[raw] = self.resolve(self._named[raw])
            return self._cache[raw]
        if "hex" in raw:
            return BuiltEnvelope(bytes_of_hex(raw["hex"]))
        if "golden" in raw:
            return BuiltEnvelope(self.golden_bytes(raw["golden"]))
        build = raw["build"]
        geometry = geometry_of(build["geometry"])
        blocks = plan_blocks(geometry, build["blocks"])
        try:
            data = oracle.encode(geometry, [b.as_oracle_block() for b in blocks], build["version"])
        except ValueError as exc:
            raise CaseDataError(f"cannot build the envelope: {exc}") from None
        return BuiltEnvelope(data, geometry, build["version"], tuple(blocks))

    def golden_path(self, relative: str) -> Path:
        """Where `golden: PATH` points: relative to the corpus root or to a declared parity
        root, and inside one of the parity roots (no absolute paths, no ../ out of them)."""
        if Path(relative).is_absolute():
            raise CaseDataError(f"golden file {relative}: give a path relative to a parity root")
        for base in (self._root, *self._golden_roots[1:]):
            path = (base / relative).resolve()
            if any(path.is_relative_to(r) for r in self._golden_roots) and path.exists():
                return path
        roots = ", ".join(str(r) for r in self._golden_roots)
        raise CaseDataError(
            f"golden file {relative}: no such file inside the parity roots ({roots})"
        )

    def golden_bytes(self, relative: str) -> bytes:
        """A blob's bytes; one listed in its folder's manifest is checked against it first."""
        path = self.golden_path(relative)
        try:
            entry = listed_entry(path, display_root=self._root)
            if entry is None:
                return read_regular_file(path, MAX_UNLISTED_BLOB)
            return entry.blob_bytes()
        except (CorruptedGoldenFile, ManifestError) as exc:
            raise CaseDataError(str(exc)) from None
        except OSError as exc:
            raise CaseDataError(f"golden file {relative}: {exc.strerror}") from None


def bytes_of_hex(text: str) -> bytes:
    return bytes.fromhex("".join(text.split()))


def _offset(data: bytes | bytearray, offset: int) -> int:
    position = offset + len(data) if offset < 0 else offset
    if not 0 <= position < len(data):
        raise CaseDataError(f"offset {offset} is outside the {len(data)} bytes being mutated")
    return position


def _record_offset(base: bytes, block: int) -> int:
    geometry = oracle.header_geometry(base)
    version = oracle.HEADER_FIELDS["version"].read(base)
    return geometry.record_offset(block, version)


def mutate(
    base: bytes, mutations: Sequence[Mapping[str, Any]], reseal: bool, resolver: EnvelopeResolver
) -> bytes:
    """Apply `mutations` in order. With `reseal`, they act on the bytes before the CRC trailer
    and a fresh CRC-32C is appended, so only the rule a mutation targets is broken."""
    data = bytearray(base[: -oracle.CRC_SIZE] if reseal else base)
    for mutation in mutations:
        ((op, arg),) = mutation.items()
        if op == "set_header":
            field = oracle.HEADER_FIELDS[arg["field"]]
            if arg["value"] >= 1 << (8 * field.size):
                raise CaseDataError(f"{arg['value']} does not fit header {field.name}")
            field.write(data, arg["value"])
        elif op == "set_block":
            field = oracle.RECORD_FIELDS[arg["field"]]
            field.write(data, arg["value"], _record_offset(base, arg["block"]))
        elif op == "set_bytes":
            patch = bytes_of_hex(arg["hex"])
            start = _offset(data, arg["offset"])
            data[start : start + len(patch)] = patch
        elif op == "flip_bit":
            data[_offset(data, arg["offset"])] ^= 1 << arg["bit"]
        elif op == "truncate":
            del data[len(data) - arg :]
        elif op == "truncate_to":
            del data[arg:]
        elif op == "append":
            data += bytes_of_hex(arg["hex"]) if "hex" in arg else bytes(arg["zeros"])
        elif op == "set_crc":
            if reseal:
                raise CaseDataError("set_crc writes the trailer itself: set reseal: false")
            body = bytes(data[: -oracle.CRC_SIZE])
            data[-oracle.CRC_SIZE :] = wrong_crc(arg, body)
        elif op == "splice":
            donor = resolver.resolve(arg["from"]).data
            take = _record_offset(donor, arg["from_block"])
            size = _record_offset(donor, arg["from_block"] + 1) - take
            put = _record_offset(base, arg["block"])
            data[put : put + size] = donor[take : take + size]
        else:  # the schema admits no other key
            raise CaseDataError(f"unknown mutation {op!r}")
    return oracle.seal(bytes(data)) if reseal else bytes(data)


def wrong_crc(variant: str, body: bytes) -> bytes:
    """The trailer a writer with a typical CRC bug produces for `body`."""
    if variant == "crc32-ieee":
        return struct.pack("<I", zlib.crc32(body))
    if variant == "no-final-xor":
        return struct.pack("<I", oracle.crc32c(body) ^ 0xFFFFFFFF)
    if variant == "no-initial-inversion":
        return struct.pack("<I", _crc32c_raw(body, 0) ^ 0xFFFFFFFF)
    if variant == "records-only":
        return struct.pack("<I", oracle.crc32c(body[oracle.HEADER_SIZE :]))
    if variant == "big-endian":
        return struct.pack(">I", oracle.crc32c(body))
    if variant == "zero":
        return bytes(oracle.CRC_SIZE)
    raise CaseDataError(f"unknown CRC variant {variant!r}")


def _crc32c_raw(data: bytes, register: int) -> int:
    """The bare reflected CRC-32C register update, bit by bit (no inversions)."""
    for byte in data:
        register ^= byte
        for _ in range(8):
            register = (register >> 1) ^ (0x82F63B78 if register & 1 else 0)
    return register
