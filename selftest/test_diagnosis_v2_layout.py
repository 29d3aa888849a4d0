"""The general v2 models (tlkv_conformance.diagnosis._v2_layout): each mistaken export or read-back
is built here by hand, the way the mistake would build it (struct packing, explicit loops,
values worked out on paper), never by the model's own code; the right one comes from the
oracle."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from tlkv_conformance import oracle
from tlkv_conformance.diagnosis import Attribution, attribute
from tlkv_conformance.evidence import EnvelopeEvidence, ValuesEvidence

GEOMETRY = oracle.Geometry(4, 2, 3, 8)  # L=2, Hkv=3: every order of [L][2][Hkv] differs
L, HKV = GEOMETRY.n_layers, GEOMETRY.n_kv_heads
N = GEOMETRY.n_elements
FILL = 3
F32 = np.float32


def _blocks(seed: int = 11) -> list[oracle.Block]:
    rng = np.random.default_rng(seed)
    values = oracle.round_to_f16((rng.standard_normal(GEOMETRY.values_shape) * 3).astype(F32))
    return [oracle.Block(0, FILL, values)]


def _rewritten(expected: bytes, scale_bytes) -> bytes:
    """`expected` with its one record's scale array replaced by `scale_bytes(due scales as a
    flat [L][2][Hkv] list)`, resealed (the CRC of the bytes written)."""
    start = oracle.HEADER_SIZE + oracle.RECORD_PREFIX_SIZE + N
    count = L * 2 * HKV
    due = list(struct.unpack_from(f"<{count}f", expected, start))
    body = expected[:start] + scale_bytes(due) + expected[start + 4 * count : -4]
    return oracle.seal(body)


def _attributed(actual: bytes, blocks) -> Attribution:
    expected = oracle.encode(GEOMETRY, blocks, 2)
    assert actual != expected
    attribution = attribute(EnvelopeEvidence(expected, actual, tuple(blocks)), [])
    assert attribution.note == "", attribution.note
    return attribution


def _column_major(due: list[float]) -> bytes:
    out = b""
    for h in range(HKV):
        for kv in range(2):
            for layer in range(L):
                out += struct.pack("<f", due[(layer * 2 + kv) * HKV + h])
    return out


def _kv_major(due: list[float]) -> bytes:
    out = b""
    for kv in range(2):
        for layer in range(L):
            for h in range(HKV):
                out += struct.pack("<f", due[(layer * 2 + kv) * HKV + h])
    return out


def _at_stride(stride: int):
    def write(due: list[float]) -> bytes:
        buffer = bytearray(4 * len(due))
        for s, scale in enumerate(due):
            buffer[stride * s : stride * s + 4] = struct.pack("<f", scale)
        return bytes(buffer)

    return write


PLACED = {
    "v2-scale-order:[Hkv][2][L]": _column_major,
    "v2-scale-order:[2][L][Hkv]": _kv_major,
    "v2-scale-stride:1": _at_stride(1),
    "v2-scale-stride:2": _at_stride(2),
}


@pytest.mark.parametrize("cause", PLACED)
def test_scales_written_elsewhere_are_named_with_the_layout_found(cause: str) -> None:
    blocks = _blocks()
    actual = _rewritten(oracle.encode(GEOMETRY, blocks, 2), PLACED[cause])
    got = _attributed(actual, blocks)
    assert got.cause is not None, got.causes
    assert got.cause.id == cause, got.causes


def _inverse(due: list[float]) -> bytes:
    return b"".join(struct.pack("<f", float(F32(1) / F32(s))) for s in due)


def _big_endian(due: list[float]) -> bytes:
    return b"".join(struct.pack(">f", s) for s in due)


def _undivided(blocks):
    amax = np.abs(blocks[0].values[..., :FILL, :]).max(axis=(-2, -1)).ravel()
    return lambda due: b"".join(struct.pack("<f", float(a)) for a in amax)


@pytest.mark.parametrize(
    ("cause", "written"),
    [
        ("v2-scale-inverted", _inverse),
        ("v2-scale-big-endian", _big_endian),
        ("v2-scale-undivided", None),
    ],
)
def test_scales_written_in_another_form_are_named_with_the_transform(cause, written) -> None:
    blocks = _blocks()
    actual = _rewritten(oracle.encode(GEOMETRY, blocks, 2), written or _undivided(blocks))
    got = _attributed(actual, blocks)
    assert got.cause is not None, got.causes
    assert got.cause.id == cause, got.causes


def test_scales_in_no_model_s_order_name_nothing() -> None:
    blocks = _blocks()

    def shuffled(due: list[float]) -> bytes:  # the first two exchanged: no order of the axes
        due = [due[1], due[0], *due[2:]]
        return b"".join(struct.pack("<f", s) for s in due)

    got = _attributed(_rewritten(oracle.encode(GEOMETRY, blocks, 2), shuffled), blocks)
    assert got.cause is None, got.causes


def test_amax_over_f16_bit_patterns_is_named() -> None:
    """Worked by hand: the slab K[0][0] holds 1.0 (0x3C00 = 15360) and -2.0 (0xC000 = 49152):
    amax 49152, scale 49152 / 448; every other slab the same way from its own bits."""
    blocks = _blocks()
    values = blocks[0].values
    codes = bytearray(N)
    scales = []
    flat = 0
    for layer in range(L):
        for kv in range(2):
            for h in range(HKV):
                slab = values[layer, kv, h]
                bits = [int(b) for b in slab[:FILL].astype(np.float16).view(np.uint16).ravel()]
                scale = F32(F32(max(bits)) / F32(448))
                scales.append(scale)
                for t in range(FILL):
                    for d in range(GEOMETRY.head_dim):
                        q = np.array([F32(slab[t, d]) / scale], dtype=F32)
                        at = flat * GEOMETRY.block_tokens * GEOMETRY.head_dim
                        codes[at + t * GEOMETRY.head_dim + d] = oracle.f32_to_e4m3_codes(q)[0]
                flat += 1
    payload = bytes(codes) + b"".join(struct.pack("<f", float(s)) for s in scales)
    head = oracle.encode_header(GEOMETRY, 2, 1) + struct.pack("<QI", 0, FILL)
    got = _attributed(oracle.seal(head + payload), blocks)
    assert got.cause is not None, got.causes
    assert got.cause.id == "v2-amax-of:f16-bits", got.causes


# -- the e4m3 encoder's carry ------------------------------------------------------------------

CARRY_GEOMETRY = oracle.Geometry(1, 1, 1, 4)
# K: amax 448 (scale 1.0), 7.75 rounds up to 8 (exponent field 10, code 0x50) and 15.5 to 16
# (field 11, code 0x58); V: 448 alone.
CARRY_VALUES = np.array([[[[[448, 7.75, 15.5, 0]]], [[[448, 0, 0, 0]]]]], dtype=F32)


@pytest.mark.parametrize(
    ("cause", "k_codes"),
    [
        # | keeps the carry only where the exponent field below is even (10 - 1 = 9 is odd)
        ("e4m3-encode-carry:or", [0x7E, 0x48, 0x58, 0x00]),
        ("e4m3-encode-carry:dropped", [0x7E, 0x48, 0x50, 0x00]),
    ],
)
def test_an_encoder_losing_the_mantissa_carry_is_named(cause: str, k_codes: list[int]) -> None:
    blocks = [oracle.Block(0, 1, CARRY_VALUES)]
    expected = oracle.encode(CARRY_GEOMETRY, blocks, 2)
    payload = bytes(k_codes) + bytes([0x7E, 0, 0, 0]) + struct.pack("<2f", 1.0, 1.0)
    head = oracle.encode_header(CARRY_GEOMETRY, 2, 1) + struct.pack("<QI", 0, 1)
    actual = oracle.seal(head + payload)
    assert expected[oracle.HEADER_SIZE + 12 : oracle.HEADER_SIZE + 16] == bytes(
        [0x7E, 0x50, 0x58, 0x00]
    )
    got = attribute(EnvelopeEvidence(expected, actual, tuple(blocks)), [])
    assert got.cause is not None, got.causes
    assert got.cause.id == cause, got.causes


# -- the e4m3 decoder's table ------------------------------------------------------------------

TABLE_GEOMETRY = oracle.Geometry(1, 1, 1, 4)
# 0x38 = 1.0, 0x30 = 0.5 (exponent field 6), 0x78 = 256, 0xF9 = -288 (field 15), scale 1.0
TABLE_CODES = [0x38, 0x30, 0x78, 0xF9]
INF, NAN = float("inf"), float("nan")
TABLE_READS = {
    "e4m3-decode-table:top-exponent-nan": [1.0, 0.5, NAN, -NAN],
    "e4m3-decode-table:top-exponent-ieee": [1.0, 0.5, INF, -NAN],
    "e4m3-decode-table:exponent-wraps": [1.0, INF, 256.0, -288.0],
}


def _table_envelope(codes: list[int] = TABLE_CODES) -> bytes:
    payload = bytes(codes) + bytes([0x38, 0, 0, 0]) + struct.pack("<2f", 1.0, 1.0)
    head = oracle.encode_header(TABLE_GEOMETRY, 2, 1) + struct.pack("<QI", 0, 1)
    return oracle.seal(head + payload)


def _read(k_values: list[float]) -> np.ndarray:
    values = np.zeros(TABLE_GEOMETRY.values_shape, dtype=F32)
    values[0, 0, 0, 0] = k_values
    values[0, 1, 0, 0, 0] = 1.0
    return values


@pytest.mark.parametrize("cause", TABLE_READS)
def test_a_decoder_wrong_on_a_class_of_codes_is_named(cause: str) -> None:
    data = _table_envelope()
    expected = _read([1.0, 0.5, 256.0, -288.0])
    got = attribute(
        ValuesEvidence(expected, _read(TABLE_READS[cause]), 1, "f32", (data, oracle.HEADER_SIZE)),
        [],
    )
    assert got.cause is not None, got.causes
    assert got.cause.id == cause, got.causes


@pytest.mark.parametrize("cause", TABLE_READS)
def test_a_decoder_table_is_named_from_a_v1_export_after_the_import(cause: str) -> None:
    data = _table_envelope()
    due = oracle.encode(TABLE_GEOMETRY, [oracle.Block(0, 1, _read([1.0, 0.5, 256.0, -288.0]))], 1)
    held = _read(TABLE_READS[cause])
    k = struct.pack("<4e", *held[0, 0, 0, 0])  # f16 of each value read (NaN, inf exact)
    v = struct.pack("<4e", 1.0, 0, 0, 0)
    head = oracle.encode_header(TABLE_GEOMETRY, 1, 1) + struct.pack("<QI", 0, 1)
    actual = oracle.seal(head + k + v)
    evidence = EnvelopeEvidence(due, actual, sources=((data, oracle.HEADER_SIZE),))
    got = attribute(evidence, [])
    assert got.cause is not None, got.causes
    assert got.cause.id == cause, got.causes


def test_a_v1_export_of_written_blocks_names_no_decoder_table() -> None:
    due = oracle.encode(TABLE_GEOMETRY, [oracle.Block(0, 1, _read([1.0, 0.5, 256.0, 2.0]))], 1)
    head = oracle.encode_header(TABLE_GEOMETRY, 1, 1) + struct.pack("<QI", 0, 1)
    k = struct.pack("<4e", 1.0, INF, 256.0, 2.0)
    actual = oracle.seal(head + k + struct.pack("<4e", 1.0, 0, 0, 0))
    got = attribute(EnvelopeEvidence(due, actual, sources=(None,)), [])
    assert got.cause is None or not got.cause.id.startswith("e4m3-decode-table"), got.causes


# 0x83 = -3 * 2^-9 and 0x80 = -0.0 (subnormal codes), 0x01 = 2^-9
SUBNORMAL_CODES = [0x38, 0x83, 0x80, 0x01]


def test_a_decoder_dropping_the_subnormals_sign_is_named() -> None:
    data = _table_envelope(SUBNORMAL_CODES)
    expected = _read([1.0, -3 * 2.0**-9, -0.0, 2.0**-9])
    actual = _read([1.0, 3 * 2.0**-9, 0.0, 2.0**-9])
    got = attribute(ValuesEvidence(expected, actual, 1, "f32", (data, oracle.HEADER_SIZE)), [])
    assert got.cause is not None, got.causes
    assert got.cause.id == "e4m3-decode-table:subnormal-unsigned", got.causes


def test_negative_zero_alone_read_as_plus_zero_names_no_decoder_table() -> None:
    """-0.0 read back as +0 alone: an f16 store losing the sign of zero gives it too."""
    data = _table_envelope([0x38, 0x80, 0x00, 0x01])
    expected = _read([1.0, -0.0, 0.0, 2.0**-9])
    actual = _read([1.0, 0.0, 0.0, 2.0**-9])
    got = attribute(ValuesEvidence(expected, actual, 1, "f32", (data, oracle.HEADER_SIZE)), [])
    assert not any(c.id.startswith("e4m3-decode-table") for c in got.causes), got.causes


# -- the decoder's scales from the wrong place -------------------------------------------------


def _column_major_read(flat: list[float]) -> list[float]:
    """Slab (l, kv, h) given the scale at [h][kv][l] of the array read as [Hkv][2][L]."""
    return [
        flat[(h * 2 + kv) * L + layer] for layer in range(L) for kv in range(2) for h in range(HKV)
    ]


def _stride_one_read(flat: list[float]) -> list[float]:
    raw = struct.pack(f"<{len(flat)}f", *flat)
    return [struct.unpack_from("<f", raw, k)[0] for k in range(len(flat))]


@pytest.mark.parametrize(
    ("cause", "read"),
    [
        ("v2-decode-scale-order:[Hkv][2][L]", _column_major_read),
        ("v2-decode-scale-stride:1", _stride_one_read),
    ],
)
def test_a_decoder_taking_the_scales_from_the_wrong_place_is_named(cause: str, read) -> None:
    blocks = _blocks()
    data = oracle.encode(GEOMETRY, blocks, 2)
    decoded = oracle.decode(data).records[0].decoded
    expected = decoded.values.copy()
    expected[..., FILL:, :] = 0
    flat = [float(s) for s in decoded.scales.ravel()]
    taken = np.array(read(flat), dtype=F32).reshape(L, 2, HKV)
    actual = (oracle.e4m3_codes_to_f32(decoded.codes) * taken[..., None, None]).astype(F32)
    actual[..., FILL:, :] = 0
    evidence = ValuesEvidence(expected, actual, FILL, "f32", (data, oracle.HEADER_SIZE))
    got = attribute(evidence, [])
    assert got.cause is not None, got.causes
    assert got.cause.id == cause, got.causes


# -- the decoder's scales read as a fixed transform of themselves -------------------------------

FORM_GEOMETRY = oracle.Geometry(2, 1, 1, 4)  # two slabs (K, V) of 2 x 4 codes
# 1.0, 1.5, 1.875, 0.5, 3.0, 448, -0.75, 2^-9 (a subnormal) in each slab
FORM_CODES = [0x38, 0x3C, 0x3F, 0x30, 0x44, 0x7E, 0xB4, 0x01]
SUBNORMAL_SCALE = 0x34122492  # 1.36e-7: an f16 subnormal, rounded to f16 it is 2^-23


def _f32_of(bits: int) -> float:
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def _bits_of(value: float) -> int:
    return struct.unpack("<I", struct.pack("<f", value))[0]


def _form_envelope(scale_bits: tuple[int, int]) -> bytes:
    scales = struct.pack("<2I", *scale_bits)
    payload = bytes(FORM_CODES) * 2 + scales
    head = oracle.encode_header(FORM_GEOMETRY, 2, 1) + struct.pack("<QI", 0, 2)
    return oracle.seal(head + payload)


def _form_read(scale_bits: tuple[int, int], read, f16_pool: bool) -> np.ndarray:
    """The values a decoder applying `read(the written scale's f32 bits) -> the f32 it applies`
    gives: each code's value (worked out above) times that scale, in f32, then held in the
    pool's precision (struct's "e": f16, rounded to nearest even)."""
    code_values = [1.0, 1.5, 1.875, 0.5, 3.0, 448.0, -0.75, 2.0**-9]
    out = np.zeros(FORM_GEOMETRY.values_shape, dtype=F32)
    for kv, bits in enumerate(scale_bits):
        scale = F32(read(bits))
        for at, value in enumerate(code_values):
            product = float(F32(value) * scale)
            if f16_pool:
                product = struct.unpack("<e", struct.pack("<e", product))[0]
            out[0, kv, 0, at // 4, at % 4] = product
    return out


def _bf16_rounded(bits: int) -> float:
    return _f32_of((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000)


SCALE_FORMS = {
    "v2-decode-scale-form:power-of-two": lambda b: _f32_of(b & 0xFF800000),
    "v2-decode-scale-form:bf16-truncated": lambda b: _f32_of(b & 0xFFFF0000),
    "v2-decode-scale-form:bf16": _bf16_rounded,
    "v2-decode-scale-form:f16": lambda b: struct.unpack("<e", struct.pack("<e", _f32_of(b)))[0],
    "v2-decode-scale-form:big-endian": lambda b: struct.unpack(">f", struct.pack("<I", b))[0],
    "v2-decode-scale-form:reciprocal": lambda b: F32(1) / F32(_f32_of(b)),
}
# 3/448 and 5/448 in f32: mantissas that every transform changes
NORMAL_SCALES = (_bits_of(3 / 448), _bits_of(5 / 448))


def _form_attribution(scale_bits: tuple[int, int], read, dtype: str) -> Attribution:
    data = _form_envelope(scale_bits)
    expected = oracle.decode(data).records[0].decoded.values
    if dtype == "f16":
        expected = oracle.round_to_f16(expected)
    actual = _form_read(scale_bits, read, dtype == "f16")
    assert not np.array_equal(expected.view(np.uint32), actual.view(np.uint32))
    return attribute(ValuesEvidence(expected, actual, 2, dtype, (data, oracle.HEADER_SIZE)), [])


@pytest.mark.parametrize("cause", SCALE_FORMS)
def test_a_decoder_reading_each_scale_in_another_form_is_named(cause: str) -> None:
    got = _form_attribution(NORMAL_SCALES, SCALE_FORMS[cause], "f32")
    assert got.cause is not None, got.causes
    assert got.cause.id == cause, got.causes


def test_a_power_of_two_scale_on_an_f16_pool_is_not_named_as_the_product_in_f16() -> None:
    """The ho10 mistake's values on an f16 pool, scales normal in f16: the product computed in
    f16 reproduces none of it (the f16 store's rounding accounted for exactly)."""
    read = SCALE_FORMS["v2-decode-scale-form:power-of-two"]
    got = _form_attribution(NORMAL_SCALES, read, "f16")
    assert got.cause is not None, got.causes
    assert got.cause.id == "v2-decode-scale-form:power-of-two", got.causes


def test_an_f16_subnormal_scale_names_the_product_in_f16_only_with_the_scale_forms() -> None:
    """Issue 27, ho10: a scale that is an f16 subnormal (0x34122492) rounds in f16 to 2^-23,
    its power of two too, so the product in f16 gives exactly the values of a power-of-two
    scale: never named alone, but "one of" with each transform that gives them."""
    read = SCALE_FORMS["v2-decode-scale-form:power-of-two"]
    assert read(SUBNORMAL_SCALE) == SCALE_FORMS["v2-decode-scale-form:f16"](SUBNORMAL_SCALE)
    got = _form_attribution((SUBNORMAL_SCALE, SUBNORMAL_SCALE), read, "f16")
    assert got.cause is not None, got.causes
    members = set(got.cause.id.removeprefix("one-of:").split("+"))
    assert got.cause.id.startswith("one-of:"), got.causes
    assert {"v2-decode-in:f16", "v2-decode-scale-form:power-of-two"} <= members, got.causes
