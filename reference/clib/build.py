"""Compile the reference C library (abi/tl_kv.h, reference/clib/tl_kv_ref.c) into a .so."""

from __future__ import annotations

import argparse
import os
import pathlib
import secrets
import shlex
import subprocess
import sys

_HERE = pathlib.Path(__file__).resolve().parent
_ROOT = _HERE.parent.parent
DEFAULT_SOURCE = _HERE / "tl_kv_ref.c"
INCLUDE_DIR = _ROOT / "abi"

VARIANTS: dict[str, tuple[str, ...]] = {
    "default": (),  # f16 pool, reads and writes v1 and v2
    "f32": ("-DTL_KV_POOL_F32",),
    "v1only": ("-DTL_KV_V1_ONLY",),
}
_WARNINGS = ("-std=c11", "-Wall", "-Wextra", "-Werror", "-fPIC", "-shared")
_SANITIZE = ("-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-g", "-O1")


class BuildError(RuntimeError):
    """The compiler could not be run or rejected the source; `output` keeps its full text."""

    def __init__(self, message: str, output: str = "") -> None:
        super().__init__(message)
        self.output = output


def _first_error(output: str) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for line in lines:
        if "error" in line:
            return line
    return lines[-1] if lines else "no compiler output"


def build_library(
    out_dir: pathlib.Path,
    *,
    variant: str = "default",
    sanitize: bool = False,
    source: pathlib.Path | None = None,
    cc: str | None = None,
    optimise: bool = True,
) -> pathlib.Path:
    """Compile `source` (default: the reference) as `variant`; return the path of the .so.
    `optimise=False` builds at -O0, in a third of the time (the self-test's many mutants)."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; expected one of {sorted(VARIANTS)}")
    src = pathlib.Path(source or DEFAULT_SOURCE).resolve()
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    # Named by source stem too, so mutants built into one directory do not overwrite each other.
    out = out_dir / f"lib{src.stem}-{variant}{'-asan' if sanitize else ''}.so"
    compiler = shlex.split(cc or os.environ.get("CC") or "cc")
    opt = _SANITIZE if sanitize else ("-O2",) if optimise else ("-O0",)
    # Compile to a private name and rename: parallel test workers may build the same library,
    # and none of them may load a half-written file.
    tmp = out_dir / f".{out.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    cmd = [
        *compiler,
        *_WARNINGS,
        *opt,
        *VARIANTS[variant],
        "-I",
        str(INCLUDE_DIR),
        str(src),
        "-o",
        str(tmp),
    ]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise BuildError(f"cannot run compiler {compiler[0]!r}: {exc}") from exc
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        output = proc.stderr + proc.stdout
        raise BuildError(
            f"{compiler[0]} failed on {src.name} ({variant}): {_first_error(output)}", output
        )
    tmp.replace(out)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tlkv_conformance.references.clib.build", description=__doc__
    )
    parser.add_argument("out_dir", type=pathlib.Path)
    parser.add_argument("--variant", choices=sorted(VARIANTS), default="default")
    parser.add_argument("--sanitize", action="store_true")
    args = parser.parse_args(argv)
    try:
        path = build_library(args.out_dir, variant=args.variant, sanitize=args.sanitize)
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
