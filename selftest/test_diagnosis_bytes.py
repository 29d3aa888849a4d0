"""The diagnosis's byte-level models: the FNV step fed another operand than the unsigned byte,
the CRC-32C table built wrongly, a reader refusing valid envelopes for a property of their
values. Each mistaken output is built here the way the mistake builds it (a hand-written loop,
not the model's code), or was observed from a planted mutant; the right one comes from the
oracle."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from tlkv_conformance import oracle
from tlkv_conformance.adapters import Adapter, ImplInfo, PoolHandle
from tlkv_conformance.diagnosis import attribute
from tlkv_conformance.errors import Refused
from tlkv_conformance.evidence import (
    EnvelopeEvidence,
    FaultEvidence,
    HashEvidence,
    ReaderPool,
    RefusalEvidence,
)

U64 = (1 << 64) - 1

# The spec's worked example, block 1 (cases/hash.yaml: spec-example-block-1).
PARENT, TOKENS = 0xA91AB0C1027B9366, [3, 4]


def _fnv_signed_char(data: bytes, extend_to: int) -> int:
    """FNV-1a-64 whose bytes go through a signed char, widened to `extend_to` bits."""
    h = oracle.FNV64_OFFSET_BASIS
    for (value,) in struct.iter_unpack("b", data):
        h = ((h ^ (value & ((1 << extend_to) - 1))) * oracle.FNV64_PRIME) & U64
    return h or 1


def _hash_cause(parent: int, tokens: list[int], actual: int) -> str:
    evidence = HashEvidence(parent, tuple(tokens), oracle.block_hash(parent, tokens), actual)
    attribution = attribute(evidence, ["HASH-FNV", "HASH-INPUT"])
    return attribution.cause.id if attribution.cause else ""


def test_an_fnv_byte_sign_extended_through_char_as_the_planted_mutant_hashed_it() -> None:
    # 0xc08c294998803c60: what the C reference hashed with its bytes walked through a plain
    # char (held-out ho10-hash-bytes-through-char), recomputed here by hand too
    actual = 0xC08C294998803C60
    assert _fnv_signed_char(oracle.hash_input(PARENT, TOKENS), 64) == actual
    assert _hash_cause(PARENT, TOKENS, actual) == "hash-xor-operand:sign-extended-64"


def test_an_fnv_byte_sign_extended_to_32_bits_only() -> None:
    actual = _fnv_signed_char(oracle.hash_input(PARENT, TOKENS), 32)
    assert _hash_cause(PARENT, TOKENS, actual) == "hash-xor-operand:sign-extended-32"


def test_the_input_hashed_a_32_bit_word_at_a_time() -> None:
    data = oracle.hash_input(PARENT, TOKENS)
    h = oracle.FNV64_OFFSET_BASIS
    for (word,) in struct.iter_unpack("<I", data):
        h = ((h ^ word) * oracle.FNV64_PRIME) & U64
    assert _hash_cause(PARENT, TOKENS, h) == "hash-xor-operand:words-4"


def test_a_hash_no_operand_gives_names_nothing() -> None:
    right = oracle.block_hash(PARENT, TOKENS)
    assert _hash_cause(PARENT, TOKENS, right ^ 0x8000) == ""


def test_an_input_without_high_bytes_cannot_show_a_sign_extension() -> None:
    # parent 0, small tokens: every byte below 0x80, the signed char changes nothing
    data = oracle.hash_input(0, [1, 2])
    assert _fnv_signed_char(data, 64) == oracle.block_hash(0, [1, 2])


# -- the CRC-32C table ----------------------------------------------------------------------------

GEOMETRY = oracle.Geometry(4, 2, 3, 8)


def _table_crc(data: bytes, rounds: int, high_byte: bool = False) -> bytes:
    """CRC-32C with its table's entries reduced through `rounds` shifts, as the C reference's
    generator does with its loop bound changed, looked up by the register's low byte (or its
    high one); the trailer's bytes."""
    table = []
    for entry in range(256):
        c = entry
        for _ in range(rounds):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    crc = 0xFFFFFFFF
    for byte in data:
        index = (crc >> 24) ^ byte if high_byte else crc ^ byte
        crc = table[index & 0xFF] ^ (crc >> 8)
    return struct.pack("<I", crc ^ 0xFFFFFFFF)


def _envelope() -> bytes:
    values = np.random.default_rng(12).standard_normal(GEOMETRY.values_shape).astype(np.float32)
    block = oracle.Block(0x1234, GEOMETRY.block_tokens, oracle.round_to_f16(values))
    return oracle.encode(GEOMETRY, [block], 1)


def test_the_tables_crc_is_crc32c_at_eight_rounds() -> None:
    body = _envelope()[:-4]
    assert _table_crc(body, 8) == struct.pack("<I", oracle.crc32c(body))


@pytest.mark.parametrize("rounds", [7, 9, 1, 16])
def test_a_writers_crc_table_built_with_k_rounds(rounds: int) -> None:
    expected = _envelope()
    body = expected[:-4]
    got = attribute(EnvelopeEvidence(expected, body + _table_crc(body, rounds), ()), ["ENV-CRC"])
    assert (got.cause.id, got.blamed, got.symptom) == (
        f"crc-table-rounds:{rounds}",
        ("ENV-CRC",),
        "crc-only",
    )
    assert f"{rounds} shift rounds" in got.cause.title
    assert "valid-refused:EFORMAT" in got.cause.explains


def test_a_writers_crc_table_looked_up_by_the_registers_high_byte() -> None:
    expected = _envelope()
    body = expected[:-4]
    mistaken = _table_crc(body, 8, high_byte=True)
    got = attribute(EnvelopeEvidence(expected, body + mistaken, ()), ["ENV-CRC"])
    assert got.cause.id == "crc-table-indexed-by-high-byte"


class _TableReader(Adapter):
    """A reader whose CRC-32C table is built with `rounds` shifts: it accepts an envelope only
    when its trailer is that CRC's."""

    def __init__(self, rounds: int) -> None:
        super().__init__("table-reader")
        self.rounds, self.imports = rounds, 0

    def info(self) -> ImplInfo:
        return ImplInfo(frozenset({1}), frozenset({1}), "f32")

    def block_hash(self, parent: int, tokens: list[int]) -> int:
        raise NotImplementedError

    def open_pool(self, geometry: oracle.Geometry, capacity: int) -> PoolHandle:
        return _TablePool(self, geometry, capacity)


class _TablePool(PoolHandle):
    dtype = "f32"

    def __init__(self, reader: _TableReader, geometry: oracle.Geometry, capacity: int) -> None:
        super().__init__(geometry, capacity)
        self.reader = reader

    def import_envelope(self, data: bytes, max_blocks: int) -> list[int]:
        self.reader.imports += 1
        if data[-4:] != _table_crc(data[:-4], self.reader.rounds):
            raise Refused("EFORMAT", "import")
        return [0]

    def release(self, block: int) -> None:
        pass

    def free_blocks(self) -> int:
        raise NotImplementedError

    write = read = find = export_bytes = export = free_blocks  # type: ignore[assignment]


def test_a_readers_crc_table_built_with_seven_rounds_is_found_by_probe() -> None:
    reader = _TableReader(7)
    refused = RefusalEvidence(
        frozenset(), frozenset(), "EFORMAT", _envelope(), pool=ReaderPool(GEOMETRY, 2, 3)
    )
    got = attribute(refused, ["READ-ACCEPT"], reader)
    assert (got.cause.id, got.blamed) == ("crc-table-rounds:7", ("READ-CRC",))
    # the control, the parametrised CRC's probes, then the tables': a bounded few
    assert reader.imports <= 45
    # The table found is probed first on the reader's next refusal (after the control and
    # the parametrised CRC's probes).
    first = reader.imports
    reader.imports = 0
    assert attribute(refused, ["READ-ACCEPT"], reader).cause.id == "crc-table-rounds:7"
    assert reader.imports < first


def test_a_reader_whose_table_no_model_builds_names_no_table() -> None:
    # no shift at all (each entry its own index): outside the rounds tried, 1 to 16
    reader = _TableReader(0)
    refused = RefusalEvidence(
        frozenset(), frozenset(), "EFORMAT", _envelope(), pool=ReaderPool(GEOMETRY, 2, 3)
    )
    got = attribute(refused, ["READ-ACCEPT"], reader)
    assert got.cause is None
    assert reader.imports > 1  # probed, every variant refused


# -- a valid envelope refused for a property of its values -----------------------------------------


class _ValueReader(Adapter):
    """A reader that refuses with EFORMAT every envelope the oracle rejects or holding a filled
    value `refuses` says it refuses, and accepts the rest."""

    def __init__(self, refuses) -> None:
        super().__init__("value-reader")
        self.refuses, self.imports = refuses, 0

    def info(self) -> ImplInfo:
        return ImplInfo(frozenset({1, 2}), frozenset({1, 2}), "f32")

    def block_hash(self, parent: int, tokens: list[int]) -> int:
        raise NotImplementedError

    def open_pool(self, geometry: oracle.Geometry, capacity: int) -> PoolHandle:
        return _ValuePool(self, geometry, capacity)


class _RecordCheckPool(_TablePool):
    """A reader refusing with EFORMAT whatever the oracle rejects, and with `refusal(record)`
    each record it checks more than the format asks."""

    def refusal(self, record: oracle.Record) -> str | None:
        raise NotImplementedError

    def import_envelope(self, data: bytes, max_blocks: int) -> list[int]:
        self.reader.imports += 1
        try:
            records = oracle.decode(data).records
        except oracle.Rejected:
            raise Refused("EFORMAT", "import") from None
        for record in records:
            if (code := self.refusal(record)) is not None:
                raise Refused(code, "import")
        return [0]


class _ValuePool(_RecordCheckPool):
    def refusal(self, record: oracle.Record) -> str | None:
        filled = record.decoded.values[..., : record.n_tokens, :]
        return "EFORMAT" if any(self.reader.refuses(float(v)) for v in filled.ravel()) else None


def _with(version: int, special: float) -> bytes:
    values = np.ones(GEOMETRY.values_shape, np.float32)
    values[1, 0, 2, 1, 3] = special
    return oracle.encode(GEOMETRY, [oracle.Block(0x1234, GEOMETRY.block_tokens, values)], version)


def _value_cause(reader: _ValueReader, envelope: bytes) -> str | None:
    refused = RefusalEvidence(
        frozenset(), frozenset(), "EFORMAT", envelope, pool=ReaderPool(GEOMETRY, 2, 3)
    )
    got = attribute(refused, ["READ-ACCEPT"], reader)
    return got.cause.id if got.cause else None


@pytest.mark.parametrize("special", [float("nan"), float("-inf")])
def test_a_reader_refusing_values_that_are_not_finite(special: float) -> None:
    reader = _ValueReader(lambda v: not np.isfinite(v))
    assert _value_cause(reader, _with(1, special)) == "refuses-valid:non-finite"


def test_a_reader_refusing_nans_alone() -> None:
    reader = _ValueReader(np.isnan)
    assert _value_cause(reader, _with(1, float("nan"))) == "refuses-valid:nan"


@pytest.mark.parametrize("version", [1, 2])
def test_a_reader_refusing_negative_zero(version: int) -> None:
    reader = _ValueReader(lambda v: v == 0 and np.signbit(v))
    assert _value_cause(reader, _with(version, -0.0)) == "refuses-valid:negative-zero"


def test_a_reader_refusing_f16_subnormals() -> None:
    reader = _ValueReader(lambda v: 0 < abs(v) < 2.0**-14)
    assert _value_cause(reader, _with(1, 2.0**-20)) == "refuses-valid:subnormal"


def test_a_reader_refusing_a_value_no_property_names_names_none() -> None:
    # refused for a value no property names (0.5): the envelope holds none of them
    reader = _ValueReader(lambda v: v == 0.5)
    assert _value_cause(reader, _with(1, 0.5)) is None


def test_a_reader_refusing_every_envelope_names_no_value_property() -> None:
    reader = _ValueReader(lambda v: True)
    assert _value_cause(reader, _with(1, float("nan"))) is None


# -- a fault on a valid envelope, in the operation that faulted ------------------------------


@pytest.mark.parametrize(
    ("fault", "cause", "blamed"),
    [
        (
            "HasBlocks on 127.0.0.1:39779 failed with UNKNOWN: Exception calling application: "
            "ENOTFOUND: no block has hash 0x2b158e6f040a9c9d",
            "fault-on:XFER-HASBLOCKS",
            ("XFER-HASBLOCKS",),
        ),
        (
            "Pool.import_envelope raised ValueError: cannot reshape",
            "fault-on-valid",
            ("READ-ACCEPT",),
        ),
    ],
)
def test_a_fault_importing_a_valid_envelope_is_the_operation_that_faulted(
    fault: str, cause: str, blamed: tuple[str, ...]
) -> None:
    # over gRPC an import asks HasBlocks first: a HasBlocks that fails is not a reader's fault
    refused = RefusalEvidence(frozenset(), frozenset(), "fault", _envelope(), fault=fault)
    got = attribute(refused, ["READ-ACCEPT"])
    assert (got.cause.id, got.blamed) == (cause, blamed)
    assert got.cause.title.startswith(fault.split(" ")[0])
    assert "valid envelope" in got.cause.title


def test_a_hasblocks_that_fails_is_its_own_fault_whoever_called_it() -> None:
    # a transfer case's own HasBlocks, or a preload's through the way in: XFER-HASBLOCKS
    detail = "HasBlocks on 127.0.0.1:1 failed with UNKNOWN: Exception calling application"
    got = attribute(FaultEvidence(detail), ["XFER-HASBLOCKS", "XFER-TAIL"])
    assert (got.cause.id, got.blamed) == ("fault-on:XFER-HASBLOCKS", ("XFER-HASBLOCKS",))
    assert got.cause.title == "HasBlocks fails with status UNKNOWN when asked about block hashes"
    # another operation faulting on some input names nothing (its failures stay the inputs')
    other = attribute(FaultEvidence("PushKv on 127.0.0.1:1 failed with UNKNOWN: x"), ["XFER-TAIL"])
    assert other.cause is None


# -- a valid envelope refused for a block hash of 2^63 or more ------------------------------------


class _SignedHashPool(_RecordCheckPool):
    """A reader comparing each record's hash as a signed 64-bit integer with an unsigned copy
    of it (as a server does against a chunk's fixed64 field): refuses every hash of 2^63 or
    more with DATA_LOSS; and whatever the oracle rejects with EFORMAT."""

    def refusal(self, record: oracle.Record) -> str | None:
        (signed,) = struct.unpack("<q", struct.pack("<Q", record.block_hash))
        return "DATA_LOSS" if signed != record.block_hash else None


class _SignedHashReader(_TableReader):
    def open_pool(self, geometry: oracle.Geometry, capacity: int) -> PoolHandle:
        return _SignedHashPool(self, geometry, capacity)


def _refused_one_full_block(block_hash: int) -> RefusalEvidence:
    values = np.ones(GEOMETRY.values_shape, np.float32)
    data = oracle.encode(GEOMETRY, [oracle.Block(block_hash, GEOMETRY.block_tokens, values)], 1)
    return RefusalEvidence(
        frozenset(), frozenset(), "DATA_LOSS", data, pool=ReaderPool(GEOMETRY, 2, 3)
    )


@pytest.mark.parametrize("block_hash", [0x8000_0000_0000_0001, 0xD31B_3772_2241_BC90])
def test_a_reader_reading_block_hashes_as_signed(block_hash: int) -> None:
    got = attribute(_refused_one_full_block(block_hash), ["READ-ACCEPT"], _SignedHashReader(8))
    assert (got.cause.id, got.blamed) == ("refuses-valid:hash-from-2^63", ("READ-ACCEPT",))


def test_a_hash_below_2_63_refused_names_no_signed_hash() -> None:
    # refused, but with a hash the signed reading keeps: not this property
    got = attribute(_refused_one_full_block(0x1234), ["READ-ACCEPT"], _SignedHashReader(8))
    assert got.cause is None or got.cause.id != "refuses-valid:hash-from-2^63"
