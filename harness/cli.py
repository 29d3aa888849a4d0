"""The `tlkv-conformance` command (and `python -m tlkv_conformance`).

    tlkv-conformance run --impl ctypes:./libengine.so --report out/   # the gate
    tlkv-conformance golden new --name myengine ...                     # golden vectors
    tlkv-conformance vectors DIR                                        # portable JSON vectors
    tlkv-conformance build-reference OUT [--variant default|f32|v1only] # the bundled C library

`run` runs pytest on the bundled corpus in a child process and trusts only a run that says it
finished: whatever ends that process (an implementation calling exit(0) in-process, a signal),
its exit status is 0 only when the run completed and every MUST held (docs/report.md).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from .exit_status import COMPLETION_ENV, EXIT_INTERNAL


def _run(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="tlkv-conformance run",
        description="Run the conformance suite (the bundled corpus unless paths are given); "
        "every other argument goes to pytest.",
    )
    parser.add_argument(
        "--report",
        metavar="DIR",
        type=Path,
        help="write DIR/report.md, DIR/report.json, DIR/report.html and DIR/junit.xml",
    )
    known, rest = parser.parse_known_args(argv)
    args = list(rest)
    if known.report is not None:
        args += [
            f"--conformance-report={known.report / 'report'}",
            f"--junitxml={known.report / 'junit.xml'}",
        ]
    return run_pytest(args)


def run_pytest(args: Sequence[str], cwd: Path | None = None) -> int:
    """`python -m pytest ARGS` in a child; its exit status, unless it claims success without
    having written its verdict (then EXIT_INTERNAL, with one line saying why)."""
    with tempfile.TemporaryDirectory(prefix="tlkv-run-") as scratch:
        marker = Path(scratch) / "completion.json"
        env = {**os.environ, COMPLETION_ENV: str(marker)}
        command = [sys.executable, "-m", "pytest", *args]
        child = subprocess.Popen(command, cwd=cwd, env=env)
        forwarded = _forward_signals(child)
        try:
            status = child.wait()
        finally:
            for signum, previous in forwarded.items():
                signal.signal(signum, previous)
        verdict = _read_marker(marker)
    if status < 0:
        name = signal.Signals(-status).name if -status in signal.Signals else str(-status)
        print(f"tlkv-conformance: the run was killed by {name}: no verdict", file=sys.stderr)
        return 128 - status
    if verdict is None:
        if status == 0:
            print(
                "tlkv-conformance: the run exited with status 0 without writing its verdict "
                "(something ended the process early, such as an implementation calling exit "
                "in-process): no verdict",
                file=sys.stderr,
            )
            return EXIT_INTERNAL
        return status
    if status == 0 and verdict.get("exit_status") != 0:
        # The run decided on failure, then something made the process exit 0.
        return int(verdict.get("exit_status") or EXIT_INTERNAL)
    return status


def _read_marker(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("complete") else None


def _forward_signals(child: subprocess.Popen) -> dict[int, object]:
    """SIGINT and SIGTERM go to the child, which writes its (incomplete) report and stops."""
    previous = {}
    for signum in (signal.SIGINT, signal.SIGTERM):
        previous[signum] = signal.getsignal(signum)
        signal.signal(signum, lambda number, _frame: child.send_signal(number))
    return previous


def _golden(argv: Sequence[str]) -> int:
    from .generators import golden

    return golden.main(list(argv))


def _build_reference(argv: Sequence[str]) -> int:
    from .references.clib import build

    return build.main(list(argv))


def _vectors(argv: Sequence[str]) -> int:
    from . import vectors

    return vectors.main(list(argv))


COMMANDS = {
    "run": (_run, "run the conformance suite (a gate: see docs/report.md)"),
    "golden": (_golden, "build, check or add golden vectors (docs/golden.md)"),
    "vectors": (_vectors, "write the corpus as portable JSON vectors (docs/vectors.md)"),
    "build-reference": (_build_reference, "compile the bundled C reference library"),
}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        width = max(map(len, COMMANDS))
        lines = [f"  {name.ljust(width)}  {text}" for name, (_, text) in COMMANDS.items()]
        print("usage: tlkv-conformance COMMAND [ARGS]\n\ncommands:\n" + "\n".join(lines))
        if argv and argv[0] not in ("-h", "--help"):
            print(f"\ntlkv-conformance: unknown command {argv[0]!r}", file=sys.stderr)
            return 4
        return 0
    command, _ = COMMANDS[argv[0]]
    return command(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
