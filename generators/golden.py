"""Build, rebuild and check the golden vectors under parity/ (docs/golden.md).

    tlkv-conformance golden            # rewrite the standard set, rebuild other folders
    tlkv-conformance golden --check    # regenerate into a temporary folder and compare
    tlkv-conformance golden new --name myengine --block-tokens 16 --n-layers 4 \
        --n-kv-heads 8 --head-dim 128 --version 2

(`python -m tlkv_conformance.generators.golden` is the same.)

The manifest is the source of truth. Every blob is rebuilt from its manifest entry through the
oracle (tlkv_conformance.golden.GoldenEntry.encode), and every value comes from a
tlkv_conformance.values recipe built on PCG64's raw output, integer and float64 arithmetic and
IEEE conversions, so the bytes are the same on any machine and numpy version. The standard set
(kv.wire.v1, kv.wire.v2) is also defined here, and --check insists its manifests equal that
definition byte for byte.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from tlkv_conformance import corpus, oracle
from tlkv_conformance.golden import (
    MANIFEST_FILE,
    NAME_PATTERN,
    GoldenEntry,
    ManifestError,
    load_manifest,
    manifest_folders,
)

from ._golden_drafts import (
    FolderPlan,
    drafts_for,
    e4m3_ties,
    empty,
    f16_all_binades,
    f16_specials,
    nosat_448,
    partial_tail_amax,
    sequence,
    shape_words,
    spec_example,
    specials_v2,
    unregistered,
    zero_slabs,
)
from ._golden_manifests import (
    entry_of,
    rebuild_folder,
    write_folder,
    write_plan,
)

DEFAULT_PARITY_ROOT = corpus.parity_dir()


# -- the standard set ---------------------------------------------------------------------------

D128 = oracle.Geometry(block_tokens=16, n_layers=2, n_kv_heads=2, head_dim=128)
D64 = oracle.Geometry(block_tokens=16, n_layers=3, n_kv_heads=4, head_dim=64)
SMALL = oracle.Geometry(block_tokens=16, n_layers=2, n_kv_heads=2, head_dim=64)
ONE_LAYER = oracle.Geometry(block_tokens=16, n_layers=1, n_kv_heads=2, head_dim=64)
WIDE_HEADS = oracle.Geometry(block_tokens=16, n_layers=2, n_kv_heads=4, head_dim=64)


def standard_set() -> list[FolderPlan]:
    """The committed golden vectors (kept small: all blobs together well under 2 MiB)."""
    v1 = FolderPlan(
        "kv.wire.v1",
        "TLKV envelope format v1 (f16)",
        (
            spec_example(),
            empty(SMALL, 1),
            sequence(D128, 1, name="seq-d128", blocks=3, tail=1, seed=11),
            sequence(D64, 1, name="seq-d64", blocks=3, tail=15, seed=13, low=-0.5, high=0.5),
            unregistered(SMALL, 1),
            f16_specials(SMALL),
            f16_all_binades(D128),
        ),
    )
    v2 = FolderPlan(
        "kv.wire.v2",
        "TLKV envelope format v2 (fp8 e4m3 with per-slab f32 scales)",
        (
            empty(SMALL, 2),
            sequence(D128, 2, name="seq-d128", blocks=3, tail=1, seed=11),
            sequence(D64, 2, name="seq-d64", blocks=3, tail=15, seed=13, low=-0.5, high=0.5),
            unregistered(SMALL, 2),
            zero_slabs(SMALL),
            nosat_448(WIDE_HEADS),
            e4m3_ties(ONE_LAYER),
            specials_v2(ONE_LAYER),
            partial_tail_amax(D128),
        ),
    )
    return [v1, v2]


# -- commands ------------------------------------------------------------------------------------


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _first_difference(a: bytes, b: bytes) -> int:
    pairs = enumerate(zip(a, b, strict=False))
    return next((i for i, (x, y) in pairs if x != y), min(len(a), len(b)))


def _compare_folder(committed: Path, regenerated: Path) -> str | None:
    """The first file that differs, as a message (None when the folders match)."""
    names = sorted(
        {p.name for p in committed.glob("*.bin")} | {p.name for p in regenerated.glob("*.bin")}
    )
    for name in [*names, MANIFEST_FILE]:  # a blob's difference says more than its digest's
        mine, theirs = committed / name, regenerated / name
        if not mine.exists():
            return f"{_shown(mine)}: missing (the regeneration writes it)"
        if not theirs.exists():
            return f"{_shown(mine)}: not listed in the manifest (a stray blob)"
        a, b = mine.read_bytes(), theirs.read_bytes()
        if a != b:
            return (
                f"{_shown(mine)}: differs from its regeneration ({len(a)} bytes committed, "
                f"{len(b)} regenerated; first difference at byte {_first_difference(a, b)})"
            )
    return None


def check(root: Path) -> str | None:
    """Regenerate everything into a temporary folder and compare; the first problem or None."""
    plans = {plan.folder: plan for plan in standard_set()}
    with tempfile.TemporaryDirectory(prefix="tlkv-golden-") as tmp:
        scratch = Path(tmp)
        # The suite's own root must hold the standard set; another root holds what it holds.
        required = plans if root.resolve() == DEFAULT_PARITY_ROOT.resolve() else {}
        folders = sorted({*(root / name for name in required), *manifest_folders(root)})
        for folder in folders:
            try:
                if folder.name in plans:
                    write_plan(plans[folder.name], scratch)
                else:
                    rebuild_folder(folder, scratch / folder.name)
            except (ManifestError, ValueError) as exc:
                return f"{_shown(folder)}: cannot regenerate: {exc}"
            problem = _compare_folder(folder, scratch / folder.name)
            if problem:
                return problem
    return None


def regenerate(root: Path) -> list[GoldenEntry]:
    """Rewrite the standard set from its definition and every other folder from its manifest."""
    written: list[GoldenEntry] = []
    plans = standard_set()
    for plan in plans:
        written += write_plan(plan, root)
    standard = {plan.folder for plan in plans}
    for folder in manifest_folders(root):
        if folder.name not in standard:
            with tempfile.TemporaryDirectory(prefix="tlkv-golden-") as tmp:
                rebuilt = rebuild_folder(folder, Path(tmp) / folder.name)
                for path in Path(tmp, folder.name).iterdir():
                    shutil.copyfile(path, folder / path.name)
                for stale in folder.glob("*.bin"):
                    if not Path(tmp, folder.name, stale.name).exists():
                        stale.unlink()
            written += [dataclasses.replace(e, folder=folder) for e in rebuilt]
    return written


def new_folder(
    out: Path, name: str, geometry: oracle.Geometry, version: int, blocks: int
) -> list[GoldenEntry]:
    title = f"{name}: TLKV envelope format v{version}, {shape_words(geometry)}"
    drafts = drafts_for(geometry, version, blocks)
    return write_folder(out, title, [entry_of(d, out) for d in drafts])


def chunk_warning(entries: Sequence[GoldenEntry]) -> str | None:
    """One line when some blob's blocks are over 4 MiB each as a one-block envelope: a replay
    over gRPC sends every block in a KvChunk of its own, and such a block does not fit one."""
    over = [
        e
        for e in entries
        if e.n_blocks and e.geometry.envelope_size(1, e.version) > oracle.MAX_CHUNK_PAYLOAD
    ]
    if not over:
        return None
    first = over[0]
    size = first.geometry.envelope_size(1, first.version)
    others = f" and {len(over) - 1} more" if len(over) > 1 else ""
    return (
        f"warning: {first.file}{others}: a block of {first.geometry} in v{first.version} is "
        f"{size:,} bytes as a one-block envelope, over the 4 MiB of a KvChunk: it cannot cross "
        "a single KvChunk over gRPC, so these blobs replay through ctypes or py, not over gRPC"
    )


def _warn_of_chunks(entries: Sequence[GoldenEntry]) -> None:
    warning = chunk_warning(entries)
    if warning:
        print(warning, file=sys.stderr)


def _summary(entries: Sequence[GoldenEntry]) -> str:
    total = sum(e.size for e in entries)
    return f"{len(entries)} blobs, {total} bytes ({total / 1024:.1f} KiB)"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tlkv_conformance.generators.golden",
        description="Build, rebuild or check the golden TLKV envelopes (docs/golden.md).",
    )
    parser.add_argument(
        "--root",
        type=Path,
        default=DEFAULT_PARITY_ROOT,
        help="the parity root holding one folder per manifest (default: the suite's parity/)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="regenerate into a temporary folder and compare with the files on disk",
    )
    commands = parser.add_subparsers(dest="command")
    new = commands.add_parser(
        "new",
        help="write a folder of golden vectors for your engine's geometry and version",
        description="Write a new folder of golden vectors (blobs and manifest) for a geometry.",
    )
    new.add_argument("--name", required=True, help="a short name: lower case, digits, . _ -")
    for flag, meaning in (
        ("--block-tokens", "B, token positions per block"),
        ("--n-layers", "L, layers"),
        ("--n-kv-heads", "Hkv, KV heads"),
        ("--head-dim", "D, head dimension"),
    ):
        new.add_argument(flag, type=int, required=True, help=meaning)
    new.add_argument(
        "--version",
        type=int,
        choices=sorted(oracle.KNOWN_VERSIONS),
        required=True,
        help="envelope format",
    )
    new.add_argument(
        "--blocks", type=int, default=3, help="blocks in the sequence entry (default 3)"
    )
    new.add_argument("--out", type=Path, help="the folder (default: ROOT/kv.wire.vV-NAME)")
    new.add_argument("--force", action="store_true", help="overwrite an existing folder")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    root: Path = args.root
    if args.command == "new":
        return _new(args, root)
    if args.check:
        problem = check(root)
        if problem:
            print(f"golden vectors out of date: {problem}", file=sys.stderr)
            print("rebuild with: python -m tlkv_conformance.generators.golden", file=sys.stderr)
            return 1
        entries = [e for f in manifest_folders(root) for e in load_manifest(f / MANIFEST_FILE)]
        print(f"golden vectors match their manifests: {_summary(entries)} under {_shown(root)}")
        return 0
    written = regenerate(root)
    _warn_of_chunks(written)
    print(f"wrote {_summary(written)} under {_shown(root)}")
    return 0


def _new(args: argparse.Namespace, root: Path) -> int:
    if not NAME_PATTERN.match(args.name):
        print(f"--name {args.name!r}: use lower case letters, digits, . _ -", file=sys.stderr)
        return 2
    try:
        geometry = oracle.Geometry(args.block_tokens, args.n_layers, args.n_kv_heads, args.head_dim)
    except ValueError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    if args.blocks < 1:
        print("--blocks must be at least 1", file=sys.stderr)
        return 2
    out: Path = args.out or root / f"kv.wire.v{args.version}-{args.name}"
    if out.exists() and any(out.iterdir()) and not args.force:
        print(f"{_shown(out)} exists; pick another --name or --out, or --force", file=sys.stderr)
        return 2
    entries = new_folder(out, args.name, geometry, args.version, args.blocks)
    _warn_of_chunks(entries)
    for entry in entries:
        blocks = f"{entry.n_blocks} block{'' if entry.n_blocks == 1 else 's'}"
        print(f"  {entry.file:24} {entry.size:>10} bytes  {blocks}")
    print(f"wrote {_summary(entries)} to {_shown(out)}")
    if out.parent.resolve() != DEFAULT_PARITY_ROOT.resolve():
        print(f"replay them with: pytest conformance/test_parity.py --parity-root {out.parent}")
    else:
        print("replay them with: pytest conformance/test_parity.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
