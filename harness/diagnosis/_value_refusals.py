"""Signatures of a valid envelope refused for a property of its VALUES that the format allows: a
NaN, an infinity (a reader taking a value that is not finite as a sign of corruption), a
negative zero, a subnormal (an f16 subnormal in v1, an e4m3 subnormal code in v2). The record
properties (no blocks, a partial block...) are _refusals'; these are probed the same way,
through the adapter's one probe operation, with the same controls: a minimal valid envelope of
one full block holding 1.0 with one filled value replaced by the property's (it must be refused
with the case's own status), the same one full block longer (refused too), and the valid
envelopes of 1.0 of other lengths without it (_refusals' controls, all accepted). A NaN and an
infinity both refused are one cause, a value that is not finite. A property the refused envelope
does not hold is not named; a fault or a refused pool names nothing."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .. import oracle
from ..adapters import Adapter
from ..evidence import RefusalEvidence
from ._causes import VALID_REFUSED, Cause
from ._refusals import OVER_ENFORCED, _chained_hashes, _control_answers, _probe

F16_MIN_NORMAL = 2.0**-14
E4M3_EXPONENT = 0x78  # the exponent field of an e4m3 code


@dataclass(frozen=True)
class _ValueProperty:
    """A property of a valid envelope's filled values: `has` tells it of a record's filled
    values and codes (None in v1), `value` is one value (in a block of 1.0, whose v2 scale is
    1/448) that has it, for `versions`."""

    name: str
    title: str
    has: Callable[[np.ndarray, np.ndarray | None], bool]
    value: float
    versions: frozenset[int]


def _subnormal(values: np.ndarray, codes: np.ndarray | None) -> bool:
    if codes is not None:
        return bool(((codes & E4M3_EXPONENT == 0) & (codes & 0x07 != 0)).any())
    magnitude = np.abs(values)
    return bool(((magnitude > 0) & (magnitude < F16_MIN_NORMAL)).any())


VALUE_PROPERTIES = (
    _ValueProperty(
        "nan",
        "a valid envelope holding a NaN refused",
        lambda values, codes: bool(np.isnan(values).any()),
        float("nan"),
        frozenset({1}),
    ),
    _ValueProperty(
        "infinity",
        "a valid envelope holding an infinity refused",
        lambda values, codes: bool(np.isinf(values).any()),
        float("inf"),
        frozenset({1}),
    ),
    _ValueProperty(
        "negative-zero",
        "a valid envelope holding a negative zero (-0.0) refused",
        lambda values, codes: bool(((values == 0) & np.signbit(values)).any()),
        -0.0,
        frozenset({1, 2}),
    ),
    _ValueProperty(
        "subnormal",
        "a valid envelope holding a subnormal value (an f16 subnormal in v1, an e4m3 "
        "subnormal code in v2) refused: subnormals taken as corruption",
        _subnormal,
        2.0**-8 / 448,  # f16: below 2^-14; e4m3, at the scale 1/448: code 0x02
        frozenset({1, 2}),
    ),
)
NON_FINITE = (  # a NaN and an infinity both refused
    "non-finite",
    "a valid envelope holding a value that is not finite (a NaN or an infinity) refused: the "
    "values checked for finiteness on reading",
)


def value_refusal_causes(implementation: Adapter, refusal: RefusalEvidence) -> list[Cause]:
    """The value properties a valid envelope's refusal (`refusal.envelope`, refused with
    `refusal.actual`) shows when probed: each that the envelope holds, refused in a minimal
    envelope and a longer one with the case's status, with the controls without it accepted;
    [] where none does."""
    code = refusal.actual
    if not refusal.envelope or code in (None, "fault"):
        return []
    try:
        envelope = oracle.decode(refusal.envelope)
    except oracle.Rejected:
        return []
    version = envelope.version
    held = {
        p.name
        for p in VALUE_PROPERTIES
        if version in p.versions and any(p.has(*_filled(r)) for r in envelope.records)
    }
    if not held:
        return []
    geometry = refusal.pool.geometry if refusal.pool is not None else envelope.geometry
    n = envelope.n_blocks
    if _probe(implementation, geometry, n + 1, refusal.envelope, n + 1) != code:
        return []  # accepted with room to spare, or refused otherwise: not its values
    if any(
        answer is not None for _, _, answer in _control_answers(implementation, geometry, version)
    ):
        return []  # valid envelopes of 1.0 refused too: no property of values explains it
    registered, other = _chained_hashes(geometry.block_tokens, 2)
    refused = {
        p.name
        for p in VALUE_PROPERTIES
        if version in p.versions
        and (p.name in held or p.name in ("nan", "infinity"))
        and all(
            _probe(implementation, geometry, 3, data, 3) == code
            for data in (
                _with_value(geometry, version, [registered], p.value),
                _with_value(geometry, version, [other, registered], p.value),
            )
        )
    }
    evidence = (
        f"refused with {code}; a minimal envelope of 1.0 with one such value is refused with "
        f"{code} (and one a block longer), valid envelopes of 1.0 without it are accepted"
    )
    causes = []
    if {"nan", "infinity"} <= refused and held & {"nan", "infinity"}:
        causes.append(_cause(*NON_FINITE, code, evidence))
        refused -= {"nan", "infinity"}
    causes += [
        _cause(p.name, p.title, code, evidence)
        for p in VALUE_PROPERTIES
        if p.name in refused & held
    ]
    return causes


def _cause(name: str, title: str, code: str, evidence: str) -> Cause:
    return Cause(
        OVER_ENFORCED + name,
        title,
        ("READ-ACCEPT",),
        evidence,
        frozenset({VALID_REFUSED.format(code=code)}),
    )


def _filled(record: oracle.Record) -> tuple[np.ndarray, np.ndarray | None]:
    n = record.n_tokens
    codes = record.decoded.codes
    return record.decoded.values[..., :n, :], None if codes is None else codes[..., :n, :]


def _with_value(geometry: oracle.Geometry, version: int, hashes: list[int], value: float) -> bytes:
    """A valid envelope of full blocks of 1.0 with `hashes`, its last block's first value
    `value`."""
    blocks = []
    for block_hash in hashes:
        values = np.ones(geometry.values_shape, dtype=np.float32)
        blocks.append(oracle.Block(block_hash, geometry.block_tokens, values))
    blocks[-1].values[(0,) * len(geometry.values_shape)] = value
    return oracle.encode(geometry, blocks, version)
