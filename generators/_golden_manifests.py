"""Writing a folder of golden vectors: each blob built from its entry through the oracle, and
the manifest in one canonical text, read back and rebuilt before it is trusted.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tlkv_conformance import oracle
from tlkv_conformance.golden import (
    MANIFEST_FILE,
    MANIFEST_FORMAT,
    NAME_PATTERN,
    GoldenBlock,
    GoldenEntry,
    load_manifest,
)

from ._golden_drafts import Draft, FolderPlan

WRAP = 100  # columns a manifest's lines keep within
_PLAIN = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_YAML_WORDS = frozenset({"y", "n", "yes", "no", "on", "off", "true", "false", "null"})


def _float(value: float) -> str:
    """A float YAML 1.1 reads back exactly (PyYAML needs a '.' and a signed exponent)."""
    if math.isnan(value):
        return ".nan"
    if math.isinf(value):
        return ".inf" if value > 0 else "-.inf"
    mantissa, _, exponent = repr(float(value)).partition("e")
    if "." not in mantissa:
        mantissa += ".0"
    if not exponent:
        return mantissa
    return f"{mantissa}e{exponent if exponent[0] in '+-' else '+' + exponent}"


def _flow(value: Any, hex_ints: bool = False) -> str:
    """One value in YAML flow style; ints under an f16_bits key in hex."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_flow(v, k == 'f16_bits')}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_flow(v, hex_ints) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"{value:#06x}" if hex_ints else str(value)
    if isinstance(value, float):
        return _float(value)
    if value is None:
        return "null"
    text = str(value)
    if text and set(text) <= _PLAIN and not text[0].isdigit() and text.lower() not in _YAML_WORDS:
        return text
    return json.dumps(text)


def _wrapped(prefix: str, flow: str, indent: int) -> list[str]:
    """`prefix + flow`, broken after commas so lines stay near WRAP columns."""
    first, *pieces = flow.split(", ")
    lines: list[str] = []
    current = prefix + first
    for piece in pieces:
        if len(current) + 2 + len(piece) >= WRAP:
            lines.append(current + ",")
            current = " " * indent + piece
        else:
            current += ", " + piece
    return [*lines, current]


def render_manifest(title: str, entries: Sequence[GoldenEntry]) -> str:
    """A manifest's text: one canonical form, so regenerating it is byte for byte."""
    lines = [
        "# Golden TLKV envelopes: how each blob was made and what its bytes must be.",
        "# See docs/golden.md. Written by `tlkv-conformance golden`, which rebuilds every",
        "# blob from these entries; `tlkv-conformance golden --check` compares them.",
        f"format: {MANIFEST_FORMAT}",
        f"title: {json.dumps(title)}",
        "entries:" if entries else "entries: []",
    ]
    for e in entries:
        if "  " in e.description or "\n" in e.description:
            raise ValueError(f"{e.name}: a description is one line with single spaces")
        lines += [f"- name: {e.name}", f"  file: {e.file}", "  description: >-"]
        lines += textwrap.wrap(
            e.description, WRAP, initial_indent="    ", subsequent_indent="    ",
            break_on_hyphens=False,
        )  # fmt: skip
        lines += [
            f"  version: {e.version}",
            f"  geometry: {_flow(e.geometry.as_dict())}",
            "  blocks:" if e.blocks else "  blocks: []",
        ]
        for b in e.blocks:
            tokens = "null" if b.tokens is None else _flow(list(b.tokens))
            lines += _wrapped("  - tokens: ", tokens, 6)
            lines += [f"    hash: {b.block_hash:#018x}", f"    n_tokens: {b.n_tokens}"]
            lines += _wrapped("    values: ", _flow(b.values), 6)
        lines += [
            f"  size: {e.size}",
            f'  sha256: "{e.sha256}"',
            f"  crc32c: {e.crc32c:#010x}",
        ]
    return "\n".join(lines) + "\n"


def _sealed(entry: GoldenEntry) -> tuple[GoldenEntry, bytes]:
    """The entry with its blob's facts filled in, and the blob."""
    data = entry.encode()
    trailer = int.from_bytes(data[-oracle.CRC_SIZE :], "little")
    facts = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest(), "crc32c": trailer}
    return dataclasses.replace(entry, **facts), data


def entry_of(draft: Draft, folder: Path) -> GoldenEntry:
    if not NAME_PATTERN.match(draft.name):
        raise ValueError(f"entry name {draft.name!r} must match {NAME_PATTERN.pattern}")
    return GoldenEntry(
        folder=folder,
        display_folder=folder.name,
        name=draft.name,
        file=f"{draft.name}.bin",
        description=draft.description,
        version=draft.version,
        geometry=draft.geometry,
        blocks=draft.blocks,
        size=0,
        sha256="",
        crc32c=0,
    )


def _same_block(a: GoldenBlock, b: GoldenBlock) -> bool:
    return (a.tokens, a.block_hash, a.n_tokens, a.values) == (
        b.tokens,
        b.block_hash,
        b.n_tokens,
        b.values,
    )


def write_folder(folder: Path, title: str, entries: Sequence[GoldenEntry]) -> list[GoldenEntry]:
    """Build every blob, write blobs and manifest, drop blobs the manifest no longer lists.

    The manifest is then read back and every blob rebuilt from it, so what is written is
    exactly what the manifest reproduces.
    """
    folder.mkdir(parents=True, exist_ok=True)
    sealed = [_sealed(dataclasses.replace(e, folder=folder)) for e in entries]
    for entry, data in sealed:
        (folder / entry.file).write_bytes(data)
    (folder / MANIFEST_FILE).write_text(
        render_manifest(title, [e for e, _ in sealed]), encoding="utf-8"
    )
    listed = {e.file for e, _ in sealed}
    for stale in folder.glob("*.bin"):
        if stale.name not in listed:
            stale.unlink()
    reread = load_manifest(folder / MANIFEST_FILE)
    for (written, data), again in zip(sealed, reread.entries, strict=True):
        same = (
            written.name == again.name
            and written.description == again.description
            and written.version == again.version
            and written.geometry == again.geometry
            and len(written.blocks) == len(again.blocks)
            and all(map(_same_block, written.blocks, again.blocks))
        )
        if not same or again.encode() != data or again.problems(data):
            raise RuntimeError(f"{folder / MANIFEST_FILE}: {written.name} does not read back")
    return list(reread.entries)


def write_plan(plan: FolderPlan, root: Path) -> list[GoldenEntry]:
    folder = root / plan.folder
    return write_folder(folder, plan.title, [entry_of(d, folder) for d in plan.drafts])


def rebuild_folder(source: Path, target: Path) -> list[GoldenEntry]:
    """Rebuild a folder's blobs and manifest from its manifest alone, into `target`."""
    manifest = load_manifest(source / MANIFEST_FILE)
    return write_folder(target, manifest.title, list(manifest.entries))
