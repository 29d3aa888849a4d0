"""Golden vectors replayed through the implementation under test (docs/golden.md).

Every entry of every manifest under the parity roots (the bundled parity/, and any added with
--parity-root or the ini key tlkv_parity_root) gives two tests: writing its blocks and exporting
them must give the blob, and importing the blob must give back its blocks, each NaN a NaN. A
v1 entry holding NaNs gives two more, at SHOULD: the same with each NaN's sign and payload
(NAN-SIGN, V1-F16-NAN-PAYLOAD); a v2 entry with a partial block one: the e4m3 codes past the
fill are zero (V2-PAD). Both are docs/decisions.md's. Folders made with `tlkv-conformance
golden new` are picked up without any change here.

A blob that no longer matches its manifest (size, sha256, CRC-32C), or a manifest that cannot be
read, is the suite's broken data, not the implementation's fault: its tests ERROR at setup with
one line, "corrupted golden file parity/...: ...", and never fail.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from tlkv_conformance import oracle
from tlkv_conformance.adapters import Capability, PoolHandle
from tlkv_conformance.checks import (
    CaseFailure,
    ValueSource,
    calls_to_testee,
    compare_envelopes,
    compare_readback,
    expect_free,
    free_count,
    not_applicable,
)
from tlkv_conformance.errors import CorruptedGoldenFile, Refused
from tlkv_conformance.evidence import (
    NOT_HELD,
    EnvelopeEvidence,
    KnownMistake,
    ReaderPool,
    RefusalEvidence,
    SizeEvidence,
)
from tlkv_conformance.golden import (
    MANIFEST_FILE,
    GoldenEntry,
    ManifestError,
    cached_manifest,
    manifest_folders,
)
from tlkv_conformance.runstate import parity_roots

if TYPE_CHECKING:  # imported plainly, pytest would try to collect the class Testee
    from tlkv_conformance.testee import Testee

ENVELOPE_REQS = ("ENV-HEADER", "ENV-VERSION-DTYPE", "ENV-RECORD", "ENV-RECORD-HASH", "ENV-LE")
EXPORT_REQS = {
    1: (*ENVELOPE_REQS, "ENV-CRC", "ENV-SIZE", "V1-LAYOUT", "V1-F16"),
    2: (*ENVELOPE_REQS, "ENV-CRC", "ENV-SIZE", "V2-LAYOUT", "V2-SCALE", "V2-E4M3", "V2-NOSAT"),
}
IMPORT_REQS = {
    1: ("READ-ACCEPT", "IMPORT-ORDER", "V1-LAYOUT", "V1-F16"),
    2: ("READ-ACCEPT", "IMPORT-ORDER", "V2-LAYOUT", "V2-DECODE"),
}
# A NaN's sign and payload: SHOULDs, checked by the *_nan_bits twins (docs/decisions.md).
NAN_BITS_REQS = ("NAN-SIGN", "V1-F16-NAN-PAYLOAD")
PAD_NOTE = (
    "(e4m3 codes past each fill were zeroed before comparing: V2-PAD is checked on its own, "
    "at SHOULD, by test_export_v2_pad)"
)


@dataclass(frozen=True)
class Unusable:
    """A manifest the suite cannot read: its tests error with this message."""

    id: str
    message: str


class GoldenDataError(pytest.fail.Exception):
    """Damaged golden data, raised at setup: the test ERRORs (never fails) and the report is
    the message alone, summarised as "GoldenDataError: corrupted golden file ..."."""

    __module__ = "builtins"  # as pytest does for Failed: reports show the bare class name


def _has_zero_slab(block: oracle.Block) -> bool:
    filled = block.values[..., : block.n_tokens, :]
    return bool((np.abs(filled).max(axis=(-2, -1)) == 0).any())


def _reqs(test: str, entry: GoldenEntry) -> tuple[str, ...] | None:
    """What `test` checks with `entry`, or None when the entry has nothing for it."""
    if test == "test_import":
        return IMPORT_REQS[entry.version]
    if test == "test_export_v2_pad":
        return ("V2-PAD",) if entry.version == 2 and entry.has_partial else None
    if test in ("test_export_nan_bits", "test_import_nan_bits"):
        return NAN_BITS_REQS if entry.version == 1 and entry.has_nan else None
    reqs = EXPORT_REQS[entry.version]
    if entry.version == 1 and entry.has_partial:
        reqs += ("V1-PAD",)
    if entry.version == 2 and any(_has_zero_slab(b) for b in entry.oracle_blocks()):
        reqs += ("V2-SCALE-ZERO",)
    return reqs


def _params(config: pytest.Config, test: str) -> list[Any]:
    params = []
    for index, root in enumerate(parity_roots(config)):
        # The bundled root's entries are folder/entry; an added root's are prefixed with its
        # name, so that a folder of the same name in both stays two sets of tests.
        prefix = "" if index == 0 else f"+{root.name}/"
        for folder in manifest_folders(root):
            try:
                manifest = cached_manifest(folder / MANIFEST_FILE)
            except ManifestError as exc:
                unusable = Unusable(
                    f"{prefix}{folder.name}/{MANIFEST_FILE}", f"corrupted golden manifest {exc}"
                )
                params.append(pytest.param(unusable, id=unusable.id))
                continue
            for entry in manifest:
                reqs = _reqs(test, entry)
                if reqs is not None:
                    marks = [getattr(pytest.mark, f"v{entry.version}"), pytest.mark.reqs(*reqs)]
                    params.append(pytest.param(entry, id=prefix + entry.id, marks=marks))
    return params


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "golden" in metafunc.fixturenames:
        metafunc.parametrize("golden", _params(metafunc.config, metafunc.definition.originalname))


@pytest.fixture
def blob(golden: GoldenEntry | Unusable) -> bytes:
    """The entry's blob, checked against its manifest; damaged data errors the test here."""
    if isinstance(golden, Unusable):
        message = golden.message
    else:
        try:
            return golden.blob_bytes()
        except CorruptedGoldenFile as exc:
            message = str(exc)
    # Outside the except clause, so the report is this one line and no exception chain.
    raise GoldenDataError(message, pytrace=False)


def _skip_unless(testee: Testee, *capabilities: str) -> None:
    for capability in capabilities:
        if not testee.can(capability):
            not_applicable(f"{testee.label} cannot observe {capability} through this way in")


def _open(testee: Testee, entry: GoldenEntry) -> PoolHandle:
    return testee.adapter.open_pool(entry.geometry, max(entry.n_blocks, 1))


def _export(testee: Testee, golden: GoldenEntry, expected_size: int) -> bytes:
    """Write the entry's blocks into a fresh pool of its geometry and export them."""
    _skip_unless(testee, Capability.POOL, Capability.EXPORT)
    if golden.version not in testee.info.write_versions:
        not_applicable(f"{testee.label} does not write v{golden.version}")
    with calls_to_testee(), _open(testee, golden) as pool:
        ids = []
        for index, block in enumerate(golden.oracle_blocks()):
            try:
                ids.append(pool.write(block.block_hash, block.n_tokens, block.values))
            except Refused as refusal:
                raise CaseFailure(
                    f"{golden.display}: writing block {index}: {refusal}",
                    RefusalEvidence(frozenset(), frozenset(), refusal.code),
                ) from None
        size = pool.export_bytes(len(ids), golden.version)
        if size != expected_size:
            raise CaseFailure(
                f"export_bytes({len(ids)}, v{golden.version}) = {size}, the golden file "
                f"{golden.display} has {expected_size} bytes",
                SizeEvidence(len(ids), golden.version, expected_size, size),
            )
        return pool.export(ids, golden.version)


def _pad_codes(data: bytes | bytearray, golden: GoldenEntry) -> Iterator[tuple[int, np.ndarray]]:
    """Each partial v2 block's index and its e4m3 codes past the fill (a view into `data`)."""
    g = golden.geometry
    for index, block in enumerate(golden.blocks):
        if block.n_tokens < g.block_tokens:
            start = g.record_offset(index, 2) + oracle.RECORD_PREFIX_SIZE
            codes = np.frombuffer(data, dtype=np.uint8, count=g.n_elements, offset=start)
            yield index, codes.reshape(g.values_shape)[..., block.n_tokens :, :]


def _without_v2_pad(data: bytes, golden: GoldenEntry) -> bytes:
    """`data` with zero codes past each fill and a fresh CRC, if its own CRC was right: what
    the pad holds is V2-PAD's business (SHOULD), not the MUST comparison's."""
    if len(data) != golden.size or oracle.crc32c(data[: -oracle.CRC_SIZE]) != int.from_bytes(
        data[-oracle.CRC_SIZE :], "little"
    ):
        return data
    out = bytearray(data)
    for _, codes in _pad_codes(out, golden):
        codes[...] = 0
    return oracle.seal(bytes(out[: -oracle.CRC_SIZE]))


@pytest.mark.writer
def test_export(testee: Testee, golden: GoldenEntry, blob: bytes) -> None:
    """Write the entry's blocks into a pool of its geometry; exporting them gives the blob
    (v2 at the run's --v2-level)."""
    data = _export(testee, golden, len(blob))
    level = testee.v2_level if golden.version == 2 else "strict"
    compared = _without_v2_pad(data, golden) if golden.version == 2 else data
    try:
        compare_envelopes(blob, compared, level, blocks=golden.oracle_blocks)
    except CaseFailure as exc:
        note = f" {PAD_NOTE}" if compared != data else ""
        failure = exc.prefixed(f"export differs from {golden.display} ({level}){note}:\n")
        if compared != data and isinstance(exc.evidence, EnvelopeEvidence):
            # The diagnosis matches mistakes against the bytes as written, padding included.
            failure.evidence = EnvelopeEvidence(blob, data, exc.evidence.blocks)
        raise failure from None


@pytest.mark.writer
def test_export_nan_bits(testee: Testee, golden: GoldenEntry, blob: bytes) -> None:
    """The blob byte for byte, each NaN's sign and payload included (test_export lets a NaN
    differ as long as it stays a NaN: its sign and payload are SHOULDs, docs/decisions.md)."""
    data = _export(testee, golden, len(blob))
    try:
        compare_envelopes(blob, data, "strict", nan="exact", blocks=golden.oracle_blocks)
    except CaseFailure as exc:
        raise exc.prefixed(f"export differs from {golden.display} in NaN bits:\n") from None


@pytest.mark.writer
def test_export_v2_pad(testee: Testee, golden: GoldenEntry, blob: bytes) -> None:
    """A v2 writer writes zero codes past a partial block's fill, as v1 writes zero bytes."""
    data = _export(testee, golden, len(blob))
    if len(data) != len(blob):
        pytest.skip(f"the export has {len(data)} bytes, not {len(blob)}: test_export reports it")
    for index, codes in _pad_codes(data, golden):
        nonzero = np.flatnonzero(codes)
        if nonzero.size:
            raise CaseFailure(
                f"{golden.display} block {index} (n_tokens {golden.blocks[index].n_tokens}): "
                f"{nonzero.size} of {codes.size} e4m3 codes past the fill are not 0x00 (first "
                f"{int(codes.ravel()[nonzero[0]]):#04x})",
                # The whole export, so that the padding is told apart from a layout mistake.
                EnvelopeEvidence(blob, data, tuple(golden.oracle_blocks())),
            )


@pytest.mark.reader
def test_import(testee: Testee, golden: GoldenEntry, blob: bytes) -> None:
    """Import the blob into an empty pool: every block reads back with its hash, fill and
    values (v1: the manifest's values exactly, each NaN a NaN; v2: the decoded values in the
    pool's precision), and every hashed block is registered."""
    _import(testee, golden, blob, "any")


@pytest.mark.reader
def test_import_nan_bits(testee: Testee, golden: GoldenEntry, blob: bytes) -> None:
    """test_import, each NaN read back with its sign and payload (a signalling one may come
    back quieted): SHOULDs, docs/decisions.md."""
    _import(testee, golden, blob, "quieted")


def _import(testee: Testee, golden: GoldenEntry, blob: bytes, nan: str) -> None:
    """Import the blob and check every block, NaNs compared as `nan` says."""
    _skip_unless(testee, Capability.POOL, Capability.IMPORT)
    if golden.version not in testee.info.read_versions:
        not_applicable(f"{testee.label} does not read v{golden.version}")
    expected = _expected_blocks(golden, blob)
    records = oracle.decode(blob).records
    with calls_to_testee(), _open(testee, golden) as pool:
        free_before = free_count(pool)
        room = max(golden.n_blocks, 1)  # the pool's blocks (_open), all free
        try:
            ids = pool.import_envelope(blob, room)
        except Refused as refusal:
            raise CaseFailure(
                f"{golden.display} was refused: {refusal}",
                RefusalEvidence(
                    frozenset(),
                    frozenset(),
                    refusal.code,
                    blob,
                    pool=ReaderPool(golden.geometry, room, room),
                ),
            ) from None
        if len(ids) != golden.n_blocks or len(set(ids)) != len(ids):
            raise CaseFailure(f"import returned block ids {ids} for {golden.n_blocks} blocks")
        expect_free(pool, free_before, -len(ids), f"importing {golden.display}")
        for index, (block, block_id) in enumerate(zip(expected, ids, strict=True)):
            where = f"{golden.display} block {index} (id {block_id})"
            compare_readback(
                block,
                pool.read(block_id),
                pool.dtype,
                where,
                block=f"block {index}",
                source=ValueSource.of_record(blob, records[index]),
                nan=nan,
            )
            if block.block_hash:
                _check_registered(pool, block.block_hash, where)


def _expected_blocks(golden: GoldenEntry, blob: bytes) -> list[oracle.Block]:
    if golden.version == 1:
        return golden.oracle_blocks()
    envelope = oracle.decode(blob)
    return [
        oracle.Block(r.block_hash, r.n_tokens, np.asarray(r.decoded.values))
        for r in envelope.records
    ]


def _check_registered(pool: PoolHandle, block_hash: int, where: str) -> None:
    # Any block of that hash will do: a pool that already held one (a server's pool outlives a
    # test) may well hand out the older copy.
    try:
        found = pool.find(block_hash)
    except Refused as refusal:
        raise CaseFailure(
            f"{where}: hash {block_hash:#x} is not registered: {refusal}",
            KnownMistake(
                "import-not-registered",
                "imported blocks stored but their hashes not registered",
                ("READ-ACCEPT",),
                f"find({block_hash:#x}) refused with {refusal.code} after import",
                yields_to=NOT_HELD,
                registry_probe=pool.geometry,
            ),
        ) from None
    if pool.read(found).block_hash != block_hash:
        raise CaseFailure(f"{where}: find({block_hash:#x}) gives block {found} of another hash")
