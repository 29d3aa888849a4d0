"""General models of a v2 reader's decoder: the e4m3 table wrong on one class of codes, the
slab scales taken from the wrong place, or each read as a fixed transform of itself. Each
recomputes the values read back from the source record's codes and scales, and is named only
where it gives every value read back exactly (through an import read back, or a v1 export of
blocks imported from v2)."""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence

import ml_dtypes
import numpy as np

from .. import oracle
from ._causes import Cause
from ._codec_model import named
from ._e4m3_signatures import NARROW_FORMATS
from ._signatures import ONE_OF
from ._v2_layout import _AXES, _STRIDES, _orders

F32 = np.float32


# -- the e4m3 decoder's table ----------------------------------------------------------------


# A decoder that takes a field of the code with the wrong mask or shift (a line copied from the
# one below, a mask one bit short or long), its NaN test made on the fields it took or on the
# code itself: (name, title, exponent shift, exponent mask, mantissa mask).
_FIELD_READS = (
    (
        "exponent-mask-0x7",
        "the e4m3 exponent field read with the mask 0x7 (three bits), not 0xF: the codes of "
        "magnitude 2 and more read back 2^8 smaller, and the NaN codes as numbers",
        3,
        0x7,
        0x7,
    ),
    (
        "exponent-mask-0x1f",
        "the e4m3 exponent field read with the mask 0x1F (the sign bit taken into it), not "
        "0xF: negative codes read back 2^16 larger",
        3,
        0x1F,
        0x7,
    ),
    (
        "exponent-shift-4",
        "the e4m3 exponent field read from bit 4 (shifted by 4, not 3)",
        4,
        0xF,
        0x7,
    ),
    (
        "mantissa-mask-0xf",
        "the e4m3 mantissa read with the mask 0xF (four bits, the exponent's low bit taken "
        "into it), not 0x7",
        3,
        0xF,
        0xF,
    ),
    (
        "mantissa-mask-0x3",
        "the e4m3 mantissa read with the mask 0x3 (two bits), not 0x7: its top bit dropped",
        3,
        0xF,
        0x3,
    ),
)


def _fields_decoded(
    codes: np.ndarray, shift: int, exp_mask: int, man_mask: int, nan_by_code: bool = False
) -> np.ndarray:
    """The values of e4m3 `codes` as a decoder taking its fields so gives them: NaN where the
    fields it took are the NaN's (`nan_by_code`: where the code is S.1111.111), m x 2^-9 for an
    exponent of 0, else 2^(e-7) x (1 + m/8)."""
    c = codes.astype(np.int64)
    exponent = (c >> shift) & exp_mask
    mantissa = (c & man_mask).astype(np.float64)
    magnitude = np.where(
        exponent == 0, mantissa * 2.0**-9, np.ldexp(1 + mantissa / 8, (exponent - 7).astype(int))
    )
    signed = np.where(c & 0x80, -magnitude, magnitude)
    nan = np.copysign(np.nan, np.where(c & 0x80, -1.0, 1.0))
    with np.errstate(all="ignore"):
        is_nan = (c & 0x7F) == 0x7F if nan_by_code else (exponent == 0xF) & (mantissa == 7)
        return np.where(is_nan, nan, signed).astype(F32)


def _table_variants(codes: np.ndarray) -> dict[str, tuple[str, tuple[np.ndarray, ...]]]:
    """The e4m3 values of `codes` as decoders wrong on one class of codes give them (each
    variant's tables: one, or one per way it may test for NaN)."""
    right = oracle.e4m3_codes_to_f32(codes)
    exponent = (codes.astype(np.int64) >> 3) & 0xF
    mantissa = codes & 0x07
    sign = np.where(codes & 0x80, F32(-1), F32(1))
    # a NaN of the code's sign, as a decoder applying the sign last gives it
    nan = np.copysign(F32(np.nan), sign).astype(F32)
    inf = (sign * F32(np.inf)).astype(F32)
    tables = {
        "top-exponent-nan": (
            "every e4m3 code of exponent field 1111 decoded as NaN (e4m3 taken for an IEEE-like "
            "format), not only S.1111.111: the magnitudes 256 to 448 read back as NaN",
            np.where(exponent == 0xF, nan, right),
        ),
        "top-exponent-ieee": (
            "the e4m3 codes of exponent field 1111 decoded as IEEE's (mantissa 0 infinity, the "
            "rest NaN): the magnitudes 256 to 448 read back as infinity or NaN",
            np.where(exponent == 0xF, np.where(mantissa == 0, inf, nan), right),
        ),
        "subnormal-unsigned": (
            "the e4m3 subnormal codes decoded without their sign (0x80 to 0x87 read back as +0 "
            "and positive subnormals)",
            np.where(exponent == 0, np.abs(right), right),
        ),
        "exponent-wraps": (
            "the e4m3 exponent - 7 computed in an unsigned 8-bit type: it wraps for the normal "
            "codes of magnitude below 1 (exponent field 1 to 6), which decode as infinity",
            np.where((exponent >= 1) & (exponent <= 6), inf, right),
        ),
    }
    fields = {
        name: (
            title,
            tuple(_fields_decoded(codes, *read, nan_by_code=by_code) for by_code in (False, True)),
        )
        for name, title, *read in _FIELD_READS
    }
    return {**{name: (title, (table,)) for name, (title, table) in tables.items()}, **fields}


def decode_table_causes(
    codes: np.ndarray, scales: np.ndarray, matches: Callable[[np.ndarray], bool]
) -> list[Cause]:
    """A v2 decoder wrong on one class of e4m3 codes: the values read back (`matches` compares
    a candidate's f32 values, stored in the pool's precision, with them) are each code's value
    in one variant table times its slab's scale, where the right table's are not."""
    causes = []
    s = scales[..., None, None]
    variants = _table_variants(codes)
    if not ((codes > 0x80) & (codes <= 0x87)).any():
        # with -0 alone, an f16 store losing the sign of zero gives the same values
        del variants["subnormal-unsigned"]
    for name, (title, tables) in variants.items():
        with np.errstate(all="ignore"):
            fits = any(matches((table * s).astype(F32)) for table in tables)
        if fits:
            causes.append(
                Cause(
                    f"e4m3-decode-table:{name}",
                    title,
                    ("V2-DECODE",),
                    "every value read back is that table's value times its slab's scale",
                )
            )
    return named(causes)


def _scale_reads(scales: np.ndarray) -> dict[str, tuple[str, np.ndarray]]:
    """The slab scales [L][2][Hkv] as a reader taking them from the wrong place reads them: the
    array read as if laid out in another order of its axes, or scale k read at byte offset
    stride * k of the array (within it)."""
    lead = scales.shape
    flat = scales.astype("<f4").ravel()
    raw = flat.tobytes()
    out: dict[str, tuple[str, np.ndarray]] = {}
    for cause_id, (title, _) in _orders(lead).items():
        order = tuple(_AXES.index(a) for a in cause_id.split(":")[1][1:-1].split("]["))
        read = flat.reshape([lead[a] for a in order]).transpose(np.argsort(order))
        out[cause_id.replace("v2-scale-order", "v2-decode-scale-order")] = (
            title.replace("written", "read as if laid out"),
            np.ascontiguousarray(read),
        )
    for stride in _STRIDES:
        read = [struct.unpack_from("<f", raw, stride * k)[0] for k in range(flat.size)]
        out[f"v2-decode-scale-stride:{stride}"] = (
            f"scale k read at byte offset {stride}*k of the scale array instead of 4*k",
            np.array(read, dtype=F32).reshape(lead),
        )
    return out


def decode_scale_place_causes(
    codes: np.ndarray, scales: np.ndarray, matches: Callable[[np.ndarray], bool]
) -> list[Cause]:
    """A v2 decoder applying the due scales from the wrong place: the values read back are the
    codes decoded right times the scale the reader took for each slab."""
    values = oracle.e4m3_codes_to_f32(codes)
    causes = []
    for cause_id, (title, read) in _scale_reads(np.asarray(scales, dtype=F32)).items():
        with np.errstate(all="ignore"):
            if matches((values * read[..., None, None]).astype(F32)):
                causes.append(
                    Cause(
                        cause_id,
                        title,
                        ("V2-LAYOUT",),
                        "every value read back is its code's value times that slab's scale",
                    )
                )
    return named(causes)


def _f32_bits_masked(mask: int) -> Callable[[np.ndarray], np.ndarray]:
    return lambda s: (s.astype(F32).view(np.uint32) & np.uint32(mask)).view(F32)


# cause id -> (title, the scale a decoder applies for each written f32 scale)
SCALE_FORMS: dict[str, tuple[str, Callable[[np.ndarray], np.ndarray]]] = {
    "v2-decode-scale-form:power-of-two": (
        "each slab's scale read as a power of two (its mantissa dropped: & 0xFF800000)",
        _f32_bits_masked(0xFF80_0000),
    ),
    "v2-decode-scale-form:f16": (
        "each slab's scale rounded to f16 before it is applied",
        lambda s: s.astype(np.float16).astype(F32),
    ),
    "v2-decode-scale-form:bf16": (
        "each slab's scale rounded to bf16 before it is applied",
        lambda s: s.astype(ml_dtypes.bfloat16).astype(F32),
    ),
    "v2-decode-scale-form:bf16-truncated": (
        "each slab's scale truncated to bf16 (its low 16 bits dropped: & 0xFFFF0000)",
        _f32_bits_masked(0xFFFF_0000),
    ),
    "v2-decode-scale-form:big-endian": (
        "each slab's scale read as a big-endian f32 (the codes and other fields little-endian)",
        lambda s: s.astype("<f4").view(">f4").astype(F32),
    ),
    "v2-decode-scale-form:reciprocal": (
        "each slab's code values multiplied by 1 / scale (in f32) instead of by the scale",
        lambda s: (F32(1) / s.astype(F32)).astype(F32),
    ),
}


def decode_scale_form_causes(
    codes: np.ndarray, scales: np.ndarray, matches: Callable[[np.ndarray], bool]
) -> list[Cause]:
    """A v2 decoder applying a fixed transform of each slab's written scale: the values read
    back are the codes decoded right times the transformed scale (in f32, then stored in the
    pool's precision by `matches`). Each transform that gives every value is a candidate; the
    caller's `named` makes several "one of" (a scale whose transforms coincide, e.g. an f16
    subnormal's rounding and its power of two)."""
    values = oracle.e4m3_codes_to_f32(codes)
    written = np.asarray(scales, dtype=F32)
    causes = []
    for cause_id, (title, transform) in SCALE_FORMS.items():
        with np.errstate(all="ignore"):
            read = transform(written)
            if _same_values(read, written).all():
                continue  # no slab's scale changes: the model says nothing here
            if matches((values * read[..., None, None]).astype(F32)):
                causes.append(
                    Cause(
                        cause_id,
                        title,
                        ("V2-DECODE",),
                        "every value read back is its code's value times its slab's scale so "
                        f"transformed (e.g. {float(written.ravel()[0])!r} read as "
                        f"{float(read.ravel()[0])!r})",
                    )
                )
    return causes


def decode_product_causes(
    codes: np.ndarray, scales: np.ndarray, matches: Callable[[np.ndarray], bool]
) -> list[Cause]:
    """A decoder computing code x scale in a narrower float format F (`v2-decode-in:F`): both
    rounded to F, the product rounded to F again (exact in f32 before that rounding: each
    factor has at most 11 significant bits)."""
    as_f32 = oracle.e4m3_codes_to_f32(codes)
    s = scales[..., None, None]
    causes = []
    for name, narrow in NARROW_FORMATS.items():
        with np.errstate(all="ignore"):
            product = narrow(narrow(as_f32) * narrow(s))
        if matches(product):
            causes.append(
                Cause(
                    f"v2-decode-in:{name}",
                    f"the e4m3 value and the slab's scale each rounded to {name} and multiplied "
                    f"in {name}, not in f32",
                    ("V2-DECODE",),
                    f"every value read back is code x scale computed in {name}",
                )
            )
    return causes


def v2_decode_causes(
    codes: np.ndarray, scales: np.ndarray, matches: Callable[[np.ndarray], bool]
) -> list[Cause]:
    """The decoder's models here: a table wrong on a class of codes, the scales from the wrong
    place, each scale read as a fixed transform of itself, the product in a narrower format
    (where the evidence is in f16, an f16 product and a scale rounded to f16 give the same
    values: one of them)."""
    return named(
        [
            *decode_table_causes(codes, scales, matches),
            *decode_scale_place_causes(codes, scales, matches),
            *decode_scale_form_causes(codes, scales, matches),
            *decode_product_causes(codes, scales, matches),
        ]
    )


def _same_values(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Bit-equal f32, or both NaN of one sign."""
    a, b = np.asarray(a, dtype=F32), np.asarray(b, dtype=F32)
    same_nan = np.isnan(a) & np.isnan(b) & (np.signbit(a) == np.signbit(b))
    return (a.view(np.uint32) == b.view(np.uint32)) | same_nan


def imported_decode_causes(
    actual: bytes, sources: Sequence[tuple[bytes, int] | None]
) -> list[Cause]:
    """A v1 export of blocks imported from v2 envelopes (`sources`: each block's envelope and
    record offset, None for a block written), read through the decoder models: a table variant
    is named when, for every imported block, its value times the slab's scale, rounded to f16,
    is exactly what the export holds, and differs from the right decode somewhere."""
    if not sources or any(s is None for s in sources):
        return []
    try:
        exported = oracle.decode(actual)
    except Exception:
        return []
    if exported.version != 1 or len(exported.records) != len(sources):
        return []
    fitting: set[str] | None = None
    titles: dict[str, str] = {}
    differs = False
    for record, (data, offset) in zip(exported.records, sources, strict=True):
        if oracle.HEADER_FIELDS["version"].read(data) != 2:
            return []
        geometry = oracle.header_geometry(data)
        start = offset + oracle.RECORD_PREFIX_SIZE
        source = oracle.decode_payload(geometry, 2, data[start : start + geometry.payload_size(2)])
        got = np.asarray(record.decoded.values, dtype=F32)
        if source.codes is None or source.scales is None or got.shape != source.codes.shape:
            return []
        fill = record.n_tokens
        scales = source.scales[..., None, None]

        def matches(values: np.ndarray, got: np.ndarray = got, fill: int = fill) -> bool:
            return bool(_same_values(oracle.round_to_f16(values), got)[..., :fill, :].all())

        with np.errstate(all="ignore"):
            differs |= not matches((oracle.e4m3_codes_to_f32(source.codes) * scales).astype(F32))
        found = v2_decode_causes(source.codes, source.scales, matches)
        titles.update({c.id: c.title for c in found})
        ids = {c.id for c in found if not c.id.startswith(ONE_OF)}
        fitting = ids if fitting is None else fitting & ids
    if not differs:
        return []
    return named(
        [
            Cause(
                cause_id,
                titles[cause_id],
                ("V2-DECODE",),
                "every value the v1 export holds of the blocks imported from v2 is that table's "
                "value times its slab's scale, rounded to f16",
            )
            for cause_id in sorted(fitting or ())
        ]
    )
