"""Golden vectors: the manifests under parity/ and the blobs they describe (docs/golden.md).

One loader for every user of golden files (the parity tests, YAML cases, the generator's
check). A manifest is the source of truth: each entry says how its blob was made (geometry,
version, per block the tokens, hash, fill and values recipe) and what its bytes must be (size,
sha256, CRC-32C). `GoldenEntry.blob_bytes` hands out a blob only after checking those three, so
a damaged file is reported as the suite's broken data, never as a fault of the implementation.
"""

from __future__ import annotations

import errno
import hashlib
import re
import stat
import struct
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from . import oracle
from .errors import CorruptedGoldenFile
from .values import RECIPES, make_values
from .yamlsource import file_version, refuse_aliases

MANIFEST_FILE = "manifest.yaml"
MANIFEST_FORMAT = 1
ENTRY_KEYS = (
    "name",
    "file",
    "description",
    "version",
    "geometry",
    "blocks",
    "size",
    "sha256",
    "crc32c",
)
BLOCK_KEYS = ("tokens", "hash", "n_tokens", "values")
NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
SHA256_PATTERN = re.compile(r"^[0-9a-f]{64}$")
U32_MAX = 0xFFFFFFFF
U64_MAX = 0xFFFFFFFFFFFFFFFF
REPAIR_HINT = (
    "restore it from version control, or rebuild it: python -m tlkv_conformance.generators.golden"
)

# libyaml when present: manifests hold long flow lists and are read at every collection.
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class ManifestError(ValueError):
    """A manifest the suite cannot use; the message names the manifest, the entry, the problem."""


@dataclass(frozen=True, eq=False)
class GoldenBlock:
    """One block of a golden envelope, as the manifest describes it.

    `values` is a recipe of tlkv_conformance.values, salted with the block's index in its entry (as
    in YAML cases), so the manifest alone reproduces every value.
    """

    tokens: tuple[int, ...] | None
    block_hash: int
    n_tokens: int
    values: Mapping[str, Any]

    def make_values(self, geometry: oracle.Geometry, index: int) -> np.ndarray:
        return make_values(self.values, geometry, salt=index)


@dataclass(frozen=True, eq=False)
class GoldenEntry:
    """One golden blob: how it was made, where it lives, what its bytes must be."""

    folder: Path
    display_folder: str  # the folder as messages show it, e.g. "parity/kv.wire.v1"
    name: str
    file: str
    description: str
    version: int
    geometry: oracle.Geometry
    blocks: tuple[GoldenBlock, ...]
    size: int
    sha256: str
    crc32c: int

    @property
    def path(self) -> Path:
        return self.folder / self.file

    @property
    def display(self) -> str:
        return f"{self.display_folder}/{self.file}"

    @property
    def id(self) -> str:
        """A short, unique test id: folder name and entry name."""
        return f"{self.folder.name}/{self.name}"

    @property
    def n_blocks(self) -> int:
        return len(self.blocks)

    @property
    def has_partial(self) -> bool:
        return any(b.n_tokens < self.geometry.block_tokens for b in self.blocks)

    @property
    def has_nan(self) -> bool:
        """Whether a filled position of a block holds a NaN (whose payload is a SHOULD)."""
        return any(np.isnan(b.values[..., : b.n_tokens, :]).any() for b in self.oracle_blocks())

    def oracle_blocks(self) -> list[oracle.Block]:
        """The blocks a writer is given: hash, fill, and the recipe's values."""
        return [
            oracle.Block(b.block_hash, b.n_tokens, b.make_values(self.geometry, index))
            for index, b in enumerate(self.blocks)
        ]

    def encode(self) -> bytes:
        """The blob the oracle builds from this entry's recipes (what the file must hold)."""
        try:
            return oracle.encode(self.geometry, self.oracle_blocks(), self.version)
        except ValueError as exc:
            raise ManifestError(
                f"{self.display}: cannot build it from the manifest: {exc}"
            ) from None

    def problems(self, data: bytes) -> list[str]:
        """How `data` differs from what the manifest records (empty when it matches)."""
        found = []
        if len(data) != self.size:
            found.append(f"size {len(data)} bytes, expected {self.size}")
        digest = hashlib.sha256(data).hexdigest()
        if digest != self.sha256:
            found.append(f"sha256 {digest}, expected {self.sha256}")
        if len(data) >= oracle.CRC_SIZE:
            trailer = struct.unpack_from("<I", data, len(data) - oracle.CRC_SIZE)[0]
            computed = oracle.crc32c(data[: -oracle.CRC_SIZE])
            if trailer != self.crc32c:
                found.append(f"crc32c trailer {trailer:#010x}, expected {self.crc32c:#010x}")
            if computed != trailer:
                found.append(
                    f"CRC-32C of the bytes before the trailer is {computed:#010x}, "
                    f"the trailer says {trailer:#010x}"
                )
        return found

    def blob_bytes(self) -> bytes:
        """The blob's bytes, after checking size, sha256 and CRC-32C against the manifest."""
        try:
            data = read_regular_file(self.path, self.size)
        except OSError as exc:
            raise CorruptedGoldenFile(
                f"corrupted golden file {self.display}: cannot read it ({exc.strerror}); "
                f"{REPAIR_HINT}"
            ) from None
        problems = self.problems(data)
        if problems:
            raise CorruptedGoldenFile(
                f"corrupted golden file {self.display}: {'; '.join(problems)}; {REPAIR_HINT}"
            )
        return data


def read_regular_file(path: Path, limit: int) -> bytes:
    """The bytes of a regular file of at most `limit` bytes: a FIFO, a device or a directory
    (which could block or never end) is refused without being opened for reading."""
    info = path.stat()
    if not stat.S_ISREG(info.st_mode):
        raise OSError(errno.EINVAL, "not a regular file")
    if info.st_size > limit:
        raise OSError(errno.EFBIG, f"{info.st_size} bytes, more than the {limit} expected")
    return path.read_bytes()


@dataclass(frozen=True, eq=False)
class Manifest:
    """A folder's manifest.yaml: a title and its entries, in file order."""

    path: Path
    title: str
    entries: tuple[GoldenEntry, ...]

    @property
    def folder(self) -> Path:
        return self.path.parent

    def __iter__(self) -> Iterator[GoldenEntry]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def entry_for_file(self, file: str) -> GoldenEntry | None:
        return next((e for e in self.entries if e.file == file), None)


def manifest_folders(root: Path) -> list[Path]:
    """The folders directly under `root` that hold a manifest, in name order."""
    if not root.is_dir():
        return []
    return sorted(p.parent for p in root.glob(f"*/{MANIFEST_FILE}"))


def load_manifest(path: Path, display_root: Path | None = None) -> Manifest:
    """Read and check a manifest (not its blobs: `GoldenEntry.blob_bytes` checks those).

    Messages show paths relative to `display_root`, by default the parity root's parent, so a
    blob reads as parity/<folder>/<file> wherever the tree lives.
    """
    path = Path(path)
    folder = path.parent
    display_root = folder.parent.parent if display_root is None else display_root
    display_folder = _display(folder, display_root)
    shown = f"{display_folder}/{path.name}"
    try:
        text = path.read_text(encoding="utf-8")
        refuse_aliases(text)
        document = yaml.load(text, Loader=_Loader)
    except OSError as exc:
        raise ManifestError(f"{shown}: cannot read it ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise ManifestError(f"{shown}: not valid YAML: {exc}") from None
    if not isinstance(document, dict) or set(document) != {"format", "title", "entries"}:
        raise ManifestError(f"{shown}: a manifest is a mapping of format, title and entries")
    if document["format"] != MANIFEST_FORMAT:
        raise ManifestError(
            f"{shown}: format {document['format']!r}, this suite reads format {MANIFEST_FORMAT}"
        )
    if not isinstance(document["entries"], list):
        raise ManifestError(f"{shown}: entries must be a list")
    entries: list[GoldenEntry] = []
    for index, raw in enumerate(document["entries"]):
        label = raw.get("name") if isinstance(raw, dict) else None
        where = f"{shown}: entry {label or f'#{index + 1}'}"
        try:
            entries.append(_entry(raw, folder, display_folder))
        except (ManifestError, ValueError, TypeError, KeyError) as exc:
            raise ManifestError(f"{where}: {exc}") from None
    for attribute in ("name", "file"):
        values = [getattr(e, attribute) for e in entries]
        repeated = sorted({v for v in values if values.count(v) > 1})
        if repeated:
            raise ManifestError(f"{shown}: {attribute} {repeated[0]!r} is used twice")
    return Manifest(path, str(document["title"]), tuple(entries))


_LOADED: dict[tuple[Any, ...], Manifest] = {}


def cached_manifest(path: Path) -> Manifest:
    """load_manifest, once per process for a manifest as it is on disk (each of the parity
    tests parametrizes itself from every manifest; the self-test's zygote loads them before
    its runs); a manifest changed since (its size, time or inode) is read again."""
    key = file_version(path)
    if key not in _LOADED:
        _LOADED[key] = load_manifest(path)
    return _LOADED[key]


def listed_entry(blob: Path, display_root: Path | None = None) -> GoldenEntry | None:
    """The manifest entry of a blob, when its folder has a manifest listing it."""
    manifest = blob.parent / MANIFEST_FILE
    if not manifest.is_file():
        return None
    return load_manifest(manifest, display_root).entry_for_file(blob.name)


def _display(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return path.as_posix()


def _int(raw: Any, what: str, low: int, high: int) -> int:
    # bool is an int to Python; in a manifest it is always a typo.
    if not isinstance(raw, int) or isinstance(raw, bool) or not low <= raw <= high:
        raise ManifestError(f"{what} must be an integer in {low}..{high}, not {raw!r}")
    return raw


def _keys(raw: Any, allowed: Sequence[str], what: str) -> None:
    if not isinstance(raw, dict):
        raise ManifestError(f"{what} must be a mapping")
    unknown = sorted(set(map(str, raw)) - set(allowed))
    missing = [k for k in allowed if k not in raw]
    if unknown or missing:
        parts = ([f"unknown keys {', '.join(unknown)}"] if unknown else []) + (
            [f"missing keys {', '.join(missing)}"] if missing else []
        )
        raise ManifestError(f"{what}: {'; '.join(parts)}")


def _entry(raw: Any, folder: Path, display_folder: str) -> GoldenEntry:
    _keys(raw, ENTRY_KEYS, "an entry")
    name, file = raw["name"], raw["file"]
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise ManifestError(f"name {name!r} must match {NAME_PATTERN.pattern}")
    if not isinstance(file, str) or not file.endswith(".bin") or not NAME_PATTERN.match(file):
        raise ManifestError(f"file {file!r} must be a plain file name ending in .bin")
    version = raw["version"]
    if version not in oracle.KNOWN_VERSIONS:
        raise ManifestError(f"version {version!r} is not one of {sorted(oracle.KNOWN_VERSIONS)}")
    _keys(raw["geometry"], oracle.GEOMETRY_FIELDS, "geometry")
    geometry = oracle.Geometry(
        **{k: _int(raw["geometry"][k], k, 1, U32_MAX) for k in oracle.GEOMETRY_FIELDS}
    )
    if not isinstance(raw["blocks"], list):
        raise ManifestError("blocks must be a list")
    blocks = _blocks(raw["blocks"], geometry)
    size = _int(raw["size"], "size", oracle.MIN_ENVELOPE_SIZE, 1 << 62)
    expected_size = geometry.envelope_size(len(blocks), version)
    if size != expected_size:
        raise ManifestError(
            f"size {size} does not fit {len(blocks)} blocks of this geometry in v{version} "
            f"({expected_size} bytes)"
        )
    sha256 = raw["sha256"]
    if not isinstance(sha256, str) or not SHA256_PATTERN.match(sha256):
        raise ManifestError(f"sha256 {sha256!r} must be 64 lower-case hex digits")
    return GoldenEntry(
        folder=folder,
        display_folder=display_folder,
        name=name,
        file=file,
        description=str(raw["description"]),
        version=version,
        geometry=geometry,
        blocks=blocks,
        size=size,
        sha256=sha256,
        crc32c=_int(raw["crc32c"], "crc32c", 0, U32_MAX),
    )


def _blocks(raws: list[Any], geometry: oracle.Geometry) -> tuple[GoldenBlock, ...]:
    """Check each block, including that a full block's hash chains from the one before."""
    blocks = []
    parent = oracle.NO_HASH
    b = geometry.block_tokens
    for index, raw in enumerate(raws):
        what = f"block {index}"
        _keys(raw, BLOCK_KEYS, what)
        n_tokens = _int(raw["n_tokens"], f"{what} n_tokens", 1, b)
        block_hash = _int(raw["hash"], f"{what} hash", 0, U64_MAX)
        tokens = raw["tokens"]
        if tokens is not None:
            if not isinstance(tokens, list):
                raise ManifestError(f"{what} tokens must be a list of token ids or null")
            tokens = tuple(_int(t, f"{what} token", 0, U32_MAX) for t in tokens)
            if len(tokens) != n_tokens:
                raise ManifestError(f"{what} lists {len(tokens)} tokens, n_tokens is {n_tokens}")
            expected = oracle.block_hash(parent, tokens) if n_tokens == b else oracle.NO_HASH
            if block_hash != expected:
                raise ManifestError(
                    f"{what} hash {block_hash:#018x}, its tokens give {expected:#018x}"
                    + (f" (parent {parent:#018x})" if n_tokens == b else " (a partial block)")
                )
        if block_hash and n_tokens != b:
            raise ManifestError(
                f"{what} has hash {block_hash:#x} but only {n_tokens} of {b} tokens"
            )
        values = raw["values"]
        if not isinstance(values, dict) or not [k for k in values if k in RECIPES]:
            raise ManifestError(f"{what} values must be a recipe ({', '.join(RECIPES)})")
        if block_hash:
            parent = block_hash
        blocks.append(GoldenBlock(tokens, block_hash, n_tokens, values))
    return tuple(blocks)
