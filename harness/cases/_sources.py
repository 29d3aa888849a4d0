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
from ..exprs import (
    BuildTarget,
    NotApplicable,
    evaluate,
    geometry_symbols,
    is_fixed,
    resolve_geometry,
    wrapping_count,
)
from ..golden import ManifestError, listed_entry, read_regular_file
from ..values import make_values, pcg64_raw

MAX_UNLISTED_BLOB = 64 << 20  # a blob no manifest describes: at most this many bytes
# Realistic KV magnitudes (tlkv_conformance.values), so values bite at any geometry.
DEFAULT_VALUES = {"kv": {"seed": 1}}


class CaseDataError(ValueError):
    """The case's data cannot be built; the message says what (the loader adds where)."""


def tokens_of(raw: Any, symbols: Mapping[str, int] | None = None) -> list[int]:
    """A token list from a list, {range: [a, b]}, {repeat: t, count: n} or {pcg64: {...}};
    counts and range ends may be expressions over the geometry's symbols (B for a full block)."""
    symbols = symbols or {}
    if isinstance(raw, Sequence):
        return [int(t) for t in raw]
    if "range" in raw:
        start, stop = (evaluate(end, symbols) for end in raw["range"])
        return list(range(start, stop))
    if "repeat" in raw:
        return [raw["repeat"]] * evaluate(raw["count"], symbols)
    spec = raw["pcg64"]
    low, high = spec.get("min", 0), spec.get("max", 0xFFFFFFFF)
    if high < low:
        raise CaseDataError(f"pcg64 tokens: max {high} is below min {low}")
    count = evaluate(spec["count"], symbols)
    draws = pcg64_raw(spec["seed"], 0, count) % np.uint64(high - low + 1)
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
    geometry: oracle.Geometry,
    raws: Sequence[Mapping[str, Any]],
    salt: int = 0,
    chain: int = oracle.NO_HASH,
) -> list[BlockPlan]:
    """Block specs to plans. A full block with tokens gets H(previous full block's hash, tokens)
    unless `hash` is given; any other block gets hash 0. The chain starts from `chain` (0, or a
    run's salt: hashes of its own for a server that keeps earlier runs' blocks); `salt` varies
    random values per block."""
    plans = []
    parent = chain
    symbols = geometry_symbols(geometry)
    for index, raw in enumerate(raws):
        tokens = tokens_of(raw["tokens"], symbols) if "tokens" in raw else None
        if tokens is not None and len(tokens) > geometry.block_tokens:
            raise CaseDataError(
                f"block {index} lists {len(tokens)} tokens, block_tokens is {geometry.block_tokens}"
            )
        default_fill = len(tokens) if tokens is not None else geometry.block_tokens
        n_tokens = evaluate(raw.get("n_tokens", default_fill), symbols)
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
    fixed: bool = True  # built at a geometry written out (not the one under test)


class EnvelopeResolver:
    """Resolves envelope references of one case file: names, builds, hex, golden blobs."""

    def __init__(
        self,
        named: Mapping[str, Any],
        root: Path,
        golden_roots: Sequence[Path] = (),
        target: BuildTarget | None = None,
    ) -> None:
        self._named = named
        self._root = root
        self.target = target or BuildTarget()
        # Where a `golden:` blob may lie: the corpus's parity/ and the roots a user declared.
        self._golden_roots = [p.resolve() for p in (root / "parity", *golden_roots)]
        self._cache: dict[str, BuiltEnvelope] = {}

    def for_target(self, target: BuildTarget) -> EnvelopeResolver:
        """The same envelopes built for `target` (another salt: hashes of their own)."""
        if target == self.target:
            return self
        return EnvelopeResolver(self._named, self._root, self._golden_roots[1:], target)

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
        geometry = resolve_geometry(build.get("geometry"), self.target.geometry)
        fixed = is_fixed(build.get("geometry"))
        blocks = plan_blocks(geometry, build["blocks"], chain=0 if fixed else self.target.salt)
        try:
            data = oracle.encode(geometry, [b.as_oracle_block() for b in blocks], build["version"])
        except ValueError as exc:
            raise CaseDataError(f"cannot build the envelope: {exc}") from None
        return BuiltEnvelope(data, geometry, build["version"], tuple(blocks), fixed)

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


def _payload_view(data: bytearray, base: bytes, block: int) -> tuple[np.ndarray, int, int]:
    """A block's payload elements in `data`, as bytes [L][2][Hkv][B][D][width] (v1: two bytes
    an f16; v2: one, the codes only), with the block's fill and version."""
    geometry = oracle.header_geometry(base)
    version = oracle.HEADER_FIELDS["version"].read(base)
    start = geometry.record_offset(block, version)
    n_tokens = oracle.RECORD_FIELDS["n_tokens"].read(base, start)
    width = 2 if version == 1 else 1
    count = geometry.n_elements * width
    payload = start + oracle.RECORD_PREFIX_SIZE
    if payload + count > len(data):
        raise CaseDataError(f"block {block} is not all there to change")
    view = np.frombuffer(memoryview(data)[payload : payload + count], dtype=np.uint8)
    return view.reshape(*geometry.values_shape, width), n_tokens, version


def _fill_padding(data: bytearray, base: bytes, block: int, pattern: bytes) -> None:
    """Write `pattern` (repeated) over every element at or past the block's fill."""
    view, n_tokens, _ = _payload_view(data, base, block)
    padding = view[..., n_tokens:, :, :]
    if not padding.size:
        raise NotApplicable(f"block {block} is full: it has no padding")
    padding[...] = np.resize(np.frombuffer(pattern, dtype=np.uint8), padding.shape)


def _set_codes(data: bytearray, base: bytes, block: int, at: int, codes: bytes) -> None:
    """Write e4m3 codes from element `at` (flat, [L][2][Hkv][B][D] order) of a v2 block."""
    view, _, version = _payload_view(data, base, block)
    if version != 2:
        raise CaseDataError("set_codes writes e4m3 codes: a v2 envelope's")
    flat = view.reshape(-1)
    if at + len(codes) > flat.size:
        raise NotApplicable(f"{len(codes)} codes from element {at} pass the block's {flat.size}")
    flat[at : at + len(codes)] = np.frombuffer(codes, dtype=np.uint8)


def _record_offset(base: bytes, block: int) -> int:
    geometry = oracle.header_geometry(base)
    version = oracle.HEADER_FIELDS["version"].read(base)
    return geometry.record_offset(block, version)


def _mutation_symbols(base: bytes) -> tuple[dict[str, int], dict[str, Any]]:
    """The symbols a mutation's numbers may use: the envelope's own geometry (B, L, Hkv, D), its
    record size R and block count N, and wrap(n) (docs/cases.md)."""
    try:
        geometry = oracle.header_geometry(base)
        version = oracle.HEADER_FIELDS["version"].read(base)
        record = geometry.record_size(version)
    except ValueError:
        return {}, {}
    symbols = {
        **geometry_symbols(geometry),
        "R": record,
        "N": oracle.HEADER_FIELDS["n_blocks"].read(base),
    }
    return symbols, {"wrap": lambda n: wrapping_count(n, record)}


def _numbers(arg: Any, symbols: Mapping[str, int], functions: Mapping[str, Any]) -> Any:
    """A mutation's argument with its expressions evaluated (field names and hex stay)."""
    if isinstance(arg, Mapping):
        numeric = ("value", "block", "offset", "zeros", "from_block", "at")
        return {k: evaluate(v, symbols, functions) if k in numeric else v for k, v in arg.items()}
    return evaluate(arg, symbols, functions) if isinstance(arg, int | str) else arg


def mutate(
    base: bytes, mutations: Sequence[Mapping[str, Any]], reseal: bool, resolver: EnvelopeResolver
) -> bytes:
    """Apply `mutations` in order. With `reseal`, they act on the bytes before the CRC trailer
    and a fresh CRC-32C is appended, so only the rule a mutation targets is broken."""
    data = bytearray(base[: -oracle.CRC_SIZE] if reseal else base)
    symbols, functions = _mutation_symbols(base)
    for mutation in mutations:
        ((op, raw_arg),) = mutation.items()
        arg = raw_arg if op in ("set_crc", "splice") else _numbers(raw_arg, symbols, functions)
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
            if "crc" in arg:  # the CRC-32C of everything so far: a valid trailer after a valid one
                data += struct.pack("<I", oracle.crc32c(bytes(data)))
            else:
                data += bytes_of_hex(arg["hex"]) if "hex" in arg else bytes(arg["zeros"])
        elif op == "fill_padding":
            _fill_padding(data, base, arg["block"], bytes_of_hex(arg["hex"]))
        elif op == "set_codes":
            _set_codes(data, base, arg["block"], arg["at"], bytes_of_hex(arg["hex"]))
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
