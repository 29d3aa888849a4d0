"""Regenerate the committed tl.kv.v1 Python stubs (harness/grpc_stubs/) from the .proto.

The stubs are committed so that running the suite needs only grpcio and protobuf; this script
needs grpcio-tools (the `dev` extra). Run it as
`python -m tlkv_conformance.generators.gen_grpc_stubs` after changing
harness/proto/tl/kv/v1/kv.proto; selftest/test_grpc_stubs.py fails while the committed files
differ from what it generates.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import tlkv_conformance

PACKAGE_DIR = Path(tlkv_conformance.__file__).resolve().parent
PROTO_ROOT = PACKAGE_DIR / "proto"
PROTO = "tl/kv/v1/kv.proto"  # relative to PROTO_ROOT: it is the name the descriptor pool records
STUBS_DIR = PACKAGE_DIR / "grpc_stubs"
GENERATED = ("kv_pb2.py", "kv_pb2.pyi", "kv_pb2_grpc.py")
BANNER = "# Regenerate with `python -m tlkv_conformance.generators.gen_grpc_stubs`.\n"

# protoc writes an absolute import of the message module; inside tlkv_conformance.grpc_stubs it
# must be relative, or importing the stubs would need harness/grpc_stubs on sys.path.
_ABSOLUTE_IMPORT = "from tl.kv.v1 import kv_pb2 as tl_dot_kv_dot_v1_dot_kv__pb2\n"
_RELATIVE_IMPORT = "from . import kv_pb2 as tl_dot_kv_dot_v1_dot_kv__pb2\n"


class GenerationError(RuntimeError):
    """grpcio-tools is missing, protoc failed, or its output is not what this script expects."""


def _protoc_main() -> object:
    try:
        from grpc_tools import protoc
    except ImportError as exc:
        raise GenerationError(
            f"grpcio-tools is not installed ({exc}); install the dev extra: pip install -e '.[dev]'"
        ) from None
    return protoc


def grpc_tools_version() -> str:
    """The installed grpcio-tools version (GenerationError if it is missing)."""
    _protoc_main()
    from importlib.metadata import version

    return version("grpcio-tools")


def generate(out_dir: Path) -> list[Path]:
    """Write the stubs into `out_dir` (created if needed); return the files written."""
    protoc = _protoc_main()
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tlkv-protoc-") as tmp:
        args = [
            "grpc_tools.protoc",
            f"--proto_path={PROTO_ROOT}",
            f"--python_out={tmp}",
            f"--pyi_out={tmp}",
            f"--grpc_python_out={tmp}",
            PROTO,
        ]
        status = protoc.main(args)  # type: ignore[attr-defined]
        if status != 0:
            raise GenerationError(f"protoc exited with {status} on {PROTO_ROOT / PROTO}")
        produced = Path(tmp) / Path(PROTO).parent
        written = []
        for name in GENERATED:
            source = produced / name
            if not source.exists():
                raise GenerationError(f"protoc did not write {name} (wrote: {_listing(produced)})")
            text = source.read_text(encoding="utf-8")
            if name == "kv_pb2_grpc.py":
                if _ABSOLUTE_IMPORT not in text:
                    raise GenerationError(
                        f"{name} lacks the import line {_ABSOLUTE_IMPORT.strip()!r}: grpcio-tools "
                        "changed its output; update this script"
                    )
                text = text.replace(_ABSOLUTE_IMPORT, _RELATIVE_IMPORT)
            target = out_dir / name
            target.write_text(BANNER + text, encoding="utf-8")
            written.append(target)
    return written


def _listing(directory: Path) -> str:
    names = sorted(p.name for p in directory.iterdir()) if directory.is_dir() else []
    return ", ".join(names) or "nothing"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out-dir",
        type=Path,
        default=STUBS_DIR,
        help=f"where to write {', '.join(GENERATED)} (default: {STUBS_DIR})",
    )
    args = parser.parse_args(argv)
    try:
        if args.out_dir.resolve() == STUBS_DIR.resolve():
            # Write beside, then replace, so a failed run leaves the committed stubs intact.
            with tempfile.TemporaryDirectory(prefix="tlkv-stubs-") as tmp:
                for path in generate(Path(tmp)):
                    shutil.copyfile(path, STUBS_DIR / path.name)
            written = [STUBS_DIR / name for name in GENERATED]
        else:
            written = generate(args.out_dir)
    except GenerationError as exc:
        print(f"gen_grpc_stubs: {exc}", file=sys.stderr)
        return 1
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
