"""The portable vectors' JSON spelling of the values every file shares (tlkv_conformance.vectors,
tlkv_conformance.histories): hashes and f32 values as hex, a geometry, the fields every vector has.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .cases.kinds import Case
from .oracle import Geometry

# Prefixes and bit flips are kept in full (each its own envelope, so a harness needs no
# mutation code) while their base envelope is small, as it is at the case files' geometries.
# At an engine-sized --geometry a thousand copies of a MiB envelope would be gigabytes.
EXPANSION_MAX_BYTES = 16 * 1024


def hash_hex(value: int) -> str:
    # u64 values do not survive a JSON number (a double) in most languages.
    return f"{value:016x}"


def geometry_fields(geometry: Geometry) -> dict[str, int]:
    return geometry.as_dict()


def values_hex(values: np.ndarray) -> str:
    return np.ascontiguousarray(values, dtype="<f4").tobytes().hex()


def common_fields(case: Case, source: str) -> dict[str, Any]:
    common: dict[str, Any] = {
        "kind": case.kind,
        "source": source,
        "reqs": list(case.reqs),
        "level": case.level,
    }
    if case.doc:
        common["doc"] = " ".join(case.doc.split())
    return common
