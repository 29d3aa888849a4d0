"""Starting a tl.kv.v1 server as a child process and learning where it listens: the one way the
suite's interop tests and its self-test start the reference server (or a patched copy of it)."""

from __future__ import annotations

import selectors
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

# The first line a server prints on stdout, followed by HOST:PORT (the OS-assigned port for
# --port 0).
LISTENING = "listening on "


class ServerDidNotStart(RuntimeError):
    """The command exited, or said something else, before `listening on HOST:PORT`."""


def launch(
    command: Sequence[str], startup_seconds: float, cwd: Path | None = None
) -> tuple[str, subprocess.Popen[str]]:
    """Run `command` and wait up to `startup_seconds` for its first line: (HOST:PORT, process).
    Its stderr goes to a file, so that a long-lived server never blocks on a full pipe; it is
    quoted when the server does not start."""
    with tempfile.TemporaryFile("w+") as stderr:
        process = subprocess.Popen(
            list(command), cwd=cwd, stdout=subprocess.PIPE, stderr=stderr, text=True
        )
        assert process.stdout is not None
        deadline = time.monotonic() + startup_seconds
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)
            while time.monotonic() < deadline and process.poll() is None:
                if selector.select(timeout=0.1):
                    break
        line = process.stdout.readline().strip() if process.poll() is None else ""
        if line.startswith(LISTENING):
            return line[len(LISTENING) :], process
        process.kill()
        process.wait()
        stderr.seek(0)
        said = stderr.read().strip().splitlines()
    raise ServerDidNotStart(
        f"{' '.join(command)} did not start: {line or 'no line'!r}"
        + (f"; its last words: {said[-1]}" if said else "")
    )
