"""Results in another order, and header fields written from another source (docs/diagnosis.md,
"Orders and header fields from another source").

Three parametrised models, each named only when it gives exactly what the implementation gave:

- a permutation of items (an export's records, an import's block ids): the order found is
  named as a structural one (reversed, rotated by k) or as the items sorted by one of their
  keys (the ids an export was asked for, the hashes), every one that gives it;
- the block's values laid out with the axes [L][2][Hkv][B][D] in another order (any of the
  5! - 1 others), the v2 scales following the order of their own axes [L][2][Hkv];
- an integer field (a header field, a record's n_tokens) holding a value from another source:
  another header field, block_tokens, the pool's dtype, the other version's value, one off.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from .. import oracle
from ._causes import Cause
from ._signatures import one_of

# What came in another order: (cause id prefix, title with {how}).
_SUBJECTS = {
    "export": ("export-order", "export writes the blocks {how}, not in the order asked"),
    "import": ("import-ids-order", "import returns the block ids {how}, not in the records' order"),
}


def _order_names(order: Sequence[int], keys: Mapping[str, Sequence[int]]) -> list[tuple[str, str]]:
    """(id suffix, how) of each named order that `order` is: `order[i]` is the position, in the
    order due, of the item found at position i. A key whose values repeat names no order (the
    sort would depend on how ties fall)."""
    n = len(order)
    found = list(order)
    names = []
    if n > 1 and found == list(range(n - 1, -1, -1)):
        names.append(("reversed", "in reverse order"))
    for shift in range(1, n):
        if n > 2 and found == [(i + shift) % n for i in range(n)]:
            names.append(("rotated", f"rotated by {shift} (the item due at {shift} first)"))
    for key, values in keys.items():
        if len(values) != n or len(set(values)) != n:
            continue
        slug = key.replace(" ", "-")
        for descending in (False, True):
            if found == sorted(range(n), key=lambda i: values[i], reverse=descending):
                way = "descending" if descending else "ascending"
                suffix = f"by-{slug}" + ("-descending" if descending else "")
                names.append((suffix, f"sorted by {key} ({way})"))
    return names


def permutation_causes(
    subject: str,
    order: Sequence[int],
    reqs: tuple[str, ...],
    keys: Mapping[str, Sequence[int]],
    evidence: str,
) -> list[Cause]:
    """The cause of a result whose items are exactly those due in another order (`order`, as
    `_order_names` takes it): the named orders it is ("one of" when several give it), else the
    order itself."""
    prefix, title = _SUBJECTS[subject]
    if sorted(order) != list(range(len(order))) or list(order) == sorted(order):
        return []
    names = _order_names(order, keys)
    if not names:
        names = [("permuted", "in the order " + ", ".join(str(i) for i in order) + " of those due")]
    causes = [
        Cause(f"{prefix}:{suffix}", title.format(how=how), reqs, evidence) for suffix, how in names
    ]
    return [one_of(causes)]


def records_permuted_causes(
    expected: bytes,
    actual: bytes,
    record_offsets: Sequence[int],
    record_size: int,
    block_ids: Sequence[int],
) -> list[Cause]:
    """An export whose header is the one due and whose records are exactly those due in another
    order (the CRC then follows from them): which order. `block_ids`: the ids asked, in the
    order asked (empty where unknown)."""
    crc_at = len(expected) - oracle.CRC_SIZE
    if expected[: oracle.HEADER_SIZE] != actual[: oracle.HEADER_SIZE]:
        return []
    if actual[crc_at:] != oracle.crc32c(actual[:crc_at]).to_bytes(4, "little"):
        return []
    want = [expected[o : o + record_size] for o in record_offsets]
    got = [actual[o : o + record_size] for o in record_offsets]
    if len(set(want)) != len(want) or sorted(want) != sorted(got) or want == got:
        return []
    order = [want.index(record) for record in got]
    keys = {"hash": [int.from_bytes(r[:8], "little") for r in want]}
    if len(block_ids) == len(want):
        keys = {"block id": list(block_ids), **keys}
    evidence = "records " + ", ".join(str(i) for i in order) + " of those due, each exact"
    return permutation_causes("export", order, ("ENV-RECORD",), keys, evidence)


# -- the payload's axes ---------------------------------------------------------------------

_AXIS_NAMES = ("L", "2", "Hkv", "B", "D")


def _axis_order_name(order: Sequence[int]) -> str:
    return "".join(f"[{_AXIS_NAMES[a]}]" for a in order)


def axis_order_layouts(
    geometry: oracle.Geometry, version: int, payload: bytes
) -> dict[str, tuple[str, bytes]]:
    """A record's payload as a writer with the values' axes [L][2][Hkv][B][D] in each other
    order writes it: cause id -> (title, bytes). The v2 scales, an array of the slab axes
    [L][2][Hkv], follow those axes' order among themselves. Orders that differ only in where an
    axis of size 1 goes give the same bytes: only the one nearest the spec's is kept."""
    width = 2 if version == 1 else 1
    shape = geometry.values_shape
    n = geometry.n_elements * width
    values = np.frombuffer(payload[:n], dtype=np.uint8).reshape(*shape, width)
    scales = payload[n:]
    slabs = (
        np.frombuffer(scales, dtype=np.uint8).reshape(*shape[:3], len(scales) // geometry.n_slabs)
        if scales
        else None
    )
    out: dict[str, tuple[str, bytes]] = {}
    seen: set[tuple[int, ...]] = set()
    by_nearness = sorted(itertools.permutations(range(5)), key=_inversions)
    for order in by_nearness[1:]:
        moved = tuple(a for a in order if shape[a] != 1)
        if moved in seen or moved == tuple(a for a in range(5) if shape[a] != 1):
            continue
        seen.add(moved)
        body = np.ascontiguousarray(values.transpose(*order, 5)).tobytes()
        if slabs is not None:
            slab_order = [a for a in order if a < 3]
            body += np.ascontiguousarray(slabs.transpose(*slab_order, 3)).tobytes()
        name = _axis_order_name(order)
        out[f"axes-order:{name}"] = (
            f"the payload's values laid out {name} instead of [L][2][Hkv][B][D]",
            body,
        )
    return out


def _inversions(order: Sequence[int]) -> int:
    return sum(1 for i, j in itertools.combinations(range(len(order)), 2) if order[i] > order[j])


# -- integer fields written from another source --------------------------------------------

# The pool's dtype as the dtype field spells it (tl_dtype).
_POOL_DTYPES = {"f32": oracle.DType.F32, "f16": oracle.DType.F16, "bf16": oracle.DType.BF16}
# A source: (id, title of what was written, the value it gives for the field due `due`).
_Source = tuple[str, str, Callable[[int], int | None]]


def _header_sources(header: Mapping[str, int], name: str, pool_dtype: str) -> list[_Source]:
    """The plausible other sources of header field `name`: a count one off, a geometry field
    swapped with another, the version's or dtype's other value, the pool's dtype, 0 (unset)."""
    sources: list[_Source] = [("zero", "0 (left unset)", lambda due: 0)]
    if name == "n_blocks":
        sources += [
            ("plus-one", "one more", lambda due: due + 1),
            ("minus-one", "one less", lambda due: due - 1),
        ]
    if name in oracle.GEOMETRY_FIELDS:
        sources += [
            (other, f"{other} ({header[other]})", lambda due, v=header[other]: v)
            for other in oracle.GEOMETRY_FIELDS
            if other != name
        ]
    if name in ("version", "dtype"):
        for version, dtype in oracle.VERSION_DTYPES.items():
            if version != header["version"]:
                value = version if name == "version" else int(dtype)
                what = (
                    f"{value}, the other version"
                    if name == "version"
                    else (f"the v{version} dtype ({dtype.name.lower()}, {value})")
                )
                sources.append(("other-version", what, lambda due, v=value: v))
    if name == "dtype":
        version = header["version"]
        sources.append(("version", f"the version ({version})", lambda due: version))
        if pool_dtype in _POOL_DTYPES:
            code = int(_POOL_DTYPES[pool_dtype])
            sources.append(
                (
                    "pool-dtype",
                    f"the pool's storage dtype ({pool_dtype}, {code})",
                    lambda due: code,
                )
            )
    return sources


def _n_tokens_sources(header: Mapping[str, int]) -> list[_Source]:
    tokens = header["block_tokens"]
    return [
        ("block_tokens", f"block_tokens ({tokens})", lambda due: tokens),
        ("plus-one", "one more", lambda due: due + 1),
        ("minus-one", "one less", lambda due: due - 1),
        ("zero", "0", lambda due: 0),
    ]


def field_source_causes(
    expected: bytes,
    actual: bytes,
    record_offsets: Sequence[int],
    header_reqs: Mapping[str, str],
    pool_dtype: str,
) -> list[Cause]:
    """Where only integer fields differ (header fields but the magic, records' n_tokens) and
    the CRC is the bytes' own: for each field that differs, the sources that give exactly the
    value written, in every record for n_tokens ("one of" when several do). Nothing when one
    field's value has no known source."""
    crc_at = len(expected) - oracle.CRC_SIZE
    if actual[crc_at:] != oracle.crc32c(actual[:crc_at]).to_bytes(4, "little"):
        return []
    patched = bytearray(actual)
    header = {name: f.read(expected) for name, f in oracle.HEADER_FIELDS.items()}
    causes: list[Cause] = []
    for name, field in oracle.HEADER_FIELDS.items():
        due, got = header[name], field.read(actual)
        if due == got:
            continue
        if name == "magic":
            return []
        fits = [s for s in _header_sources(header, name, pool_dtype) if s[2](due) == got]
        if not fits:
            return []
        req = header_reqs.get(name, "ENV-HEADER")
        causes.append(
            one_of(
                [
                    Cause(
                        f"field-source:{name}={sid}",
                        f"the header's {name} written as {what} instead of {due}",
                        (req,),
                        f"{name} = {got}, {due} due",
                    )
                    for sid, what, _ in fits
                ]
            )
        )
        field.write(patched, due)
    n_tokens = oracle.RECORD_FIELDS["n_tokens"]
    records = [(n_tokens.read(expected, o), n_tokens.read(actual, o)) for o in record_offsets]
    wrong = [(due, got) for due, got in records if due != got]
    if wrong:
        fits = [s for s in _n_tokens_sources(header) if all(s[2](d) == g for d, g in records)]
        if not fits:
            return []
        due, got = wrong[0]
        causes.append(
            one_of(
                [
                    Cause(
                        f"field-source:n_tokens={sid}",
                        f"a record's n_tokens written as {what} instead of the block's {due} "
                        + ("token" if due == 1 else "tokens"),
                        ("ENV-RECORD",),
                        f"{len(wrong)} of {len(records)} records' n_tokens differ ({got}, "
                        f"{due} due)",
                    )
                    for sid, what, _ in fits
                ]
            )
        )
        for offset in record_offsets:
            n_tokens.write(patched, n_tokens.read(expected, offset), offset)
    if not causes or bytes(patched[:crc_at]) != expected[:crc_at]:
        return []
    return causes
