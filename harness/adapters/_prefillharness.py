"""The prefill-client harness protocol (docs/contract.md, "A prefill client as a harness
process"): a long-lived process of the engine's, speaking JSON lines on its stdin and stdout,
behind the session interface the worker process serves (`_worker.py`), as
`_prefillsession.PrefillSession` is for a Python module. The harness runs as a child of the
worker, in its process group: a harness that hangs is killed with the worker when the call's
wait runs out; one that crashes, exits or prints what is not an answer fails the job it was
given, with one line saying so, and is started afresh for the next job.

Loaded from its file alone in the worker: the standard library only.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from typing import IO, Any

try:  # part of the package, in the suite's process
    from ..errors import ImplementationFault, SuiteUsageError
except ImportError:  # in a worker, loaded on its own: the worker loaded errors.py first
    from tlkv_worker_errors import ImplementationFault, SuiteUsageError  # type: ignore

PROTOCOL = 1
# An answer line longer than this is not one (a harness flooding its stdout).
LINE_LIMIT = 1 << 20
_STOP_WAIT = 2.0  # seconds a harness told to stop may take to exit before it is killed
_QUOTED = 120  # characters of a bad line, or of the harness's last stderr line, quoted
_ERROR_LIMIT = 500  # characters of an error the harness reports (its first line)
_GEOMETRY_KEYS = ("block_tokens", "n_layers", "n_kv_heads", "head_dim")


def _quote(text: str) -> str:
    return repr(text[:_QUOTED] + ("..." if len(text) > _QUOTED else ""))


def _positive(value: object) -> bool:
    """A positive JSON integer (not a boolean, which Python counts as one)."""
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def resolve_command(command: Sequence[str]) -> str:
    """The executable a harness command starts; SuiteUsageError (one line) if there is none."""
    found = shutil.which(command[0]) if command else None
    if found is None:
        raise SuiteUsageError(
            f"command {command[0] if command else ''!r} not found (not on PATH, nor an "
            "executable file)"
        )
    return found


class HarnessSession:
    """One harness command; its process is started on first use and after each fault."""

    CALLS: Mapping[str, str] = {
        "load": "finding the harness command",
        "start": "harness start",
        "push": "harness run",
        "stop": "harness stop",
    }

    def __init__(self, command: Sequence[str]) -> None:
        self.command = list(command)
        self._process: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None
        self._greeting: dict[str, Any] | None = None
        self._seq = 0

    def load(self) -> tuple[int, int, str]:
        """No read versions, write versions known only from `start`, and the executable."""
        return 0, 0, resolve_command(self.command)

    def start(self) -> dict[str, Any]:
        """The harness's answer to `start`, checked (starting it if it is not running)."""
        if self._process is None:
            self._launch()
        assert self._greeting is not None
        return self._greeting

    def push(self, job: dict[str, Any]) -> Any:
        """One `run` message and the `result` its answer carries."""
        self.start()
        self._seq += 1
        answer = self._exchange({"type": "run", "seq": self._seq, "job": dict(job)}, "a run")
        if answer.get("seq") != self._seq:
            self._fault(f"answered run {self._seq} with seq {answer.get('seq')!r}")
        if "error" in answer:
            # The harness stays: it answered in protocol, its client failed.
            error = (str(answer["error"]).strip().splitlines() or [""])[0][:_ERROR_LIMIT]
            raise ImplementationFault(f"the harness reported an error: {error}")
        if "result" not in answer:
            self._fault("answered a run without a result nor an error")
        return answer["result"]

    def stop(self) -> None:
        """`stop`, then a short wait for the harness to exit (killed if it lingers)."""
        if self._process is None:
            return
        with contextlib.suppress(OSError, ValueError):
            self._send({"type": "stop"})
        self._end(_STOP_WAIT)

    # -- the process -----------------------------------------------------------------------

    def _launch(self) -> None:
        self._stderr = tempfile.TemporaryFile(prefix="tlkv-harness-")  # noqa: SIM115
        try:
            self._process = subprocess.Popen(
                self.command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._stderr,
            )
        except OSError as exc:  # found by `load`, gone or not executable since
            self._stderr.close()
            self._stderr = None
            raise SuiteUsageError(f"cannot start {self.command[0]!r}: {exc.strerror}") from None
        self._seq = 0
        answer = self._exchange({"type": "start", "protocol": PROTOCOL}, "start")
        self._greeting = self._checked_greeting(answer)

    def _checked_greeting(self, answer: dict[str, Any]) -> dict[str, Any]:
        if answer.get("type") != "started":
            self._fault(f"answered start with type {answer.get('type')!r}, not 'started'")
        if answer.get("protocol") != PROTOCOL:
            self._fault(f"speaks protocol {answer.get('protocol')!r}; the suite speaks {PROTOCOL}")
        writes = answer.get("write_versions")
        if not isinstance(writes, list) or not all(_positive(v) and v < 32 for v in writes):
            self._fault(f"answered start with write_versions {writes!r}, not a list of versions")
        geometry = answer.get("geometry")
        dims = None
        if geometry is not None:
            if not isinstance(geometry, dict):
                self._fault(f"answered start with geometry {geometry!r}, not an object or null")
            dims = [geometry.get(k) for k in _GEOMETRY_KEYS]
            if not all(_positive(d) for d in dims):
                self._fault(
                    f"answered start with geometry {geometry!r}: "
                    + ", ".join(_GEOMETRY_KEYS)
                    + " must be positive integers"
                )
        suite_kv = answer.get("kv_from_suite")
        if not isinstance(suite_kv, bool):
            self._fault(f"answered start with kv_from_suite {suite_kv!r}, not true or false")
        return {
            "name": str(answer.get("name", "")),
            "write_versions": sorted(set(writes)),
            "geometry": dims,
            "kv_from_suite": suite_kv,
        }

    def _exchange(self, message: dict[str, Any], what: str) -> dict[str, Any]:
        """Send one message and read its answer: one line, a JSON object."""
        try:
            self._send(message)
            line = self._receive()
        except (BrokenPipeError, ConnectionResetError):
            line = b""
        if not line:
            self._fault(f"{self._ended()} before answering {what}")
        if not line.endswith(b"\n") and len(line) > LINE_LIMIT:
            self._fault(f"answered {what} with a line longer than {LINE_LIMIT} bytes")
        try:
            answer = json.loads(line)
        except ValueError:
            text = line.decode("utf-8", "replace").rstrip("\n")
            self._fault(f"answered {what} with a line that is not JSON: {_quote(text)}")
        if not isinstance(answer, dict):
            self._fault(f"answered {what} with {type(answer).__name__}, not an object")
        return answer

    def _send(self, message: dict[str, Any]) -> None:
        assert self._process is not None
        assert self._process.stdin is not None
        self._process.stdin.write(json.dumps(message).encode() + b"\n")
        self._process.stdin.flush()

    def _receive(self) -> bytes:
        assert self._process is not None
        assert self._process.stdout is not None
        return self._process.stdout.readline(LINE_LIMIT + 1)

    def _ended(self) -> str:
        """How the harness ended (it closed its stdout): its exit status or signal, and its
        last line on stderr."""
        assert self._process is not None
        try:
            code = self._process.wait(_STOP_WAIT)
        except subprocess.TimeoutExpired:
            return "closed its stdout"
        if code < 0:
            try:
                how = f"was killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"was killed by signal {-code}"
        else:
            how = f"exited with status {code}"
        last = self._last_stderr_line()
        return how + (f" (its last line on stderr: {_quote(last)})" if last else "")

    def _last_stderr_line(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0, 2)
        size = self._stderr.tell()
        self._stderr.seek(max(0, size - 4096))
        lines = self._stderr.read().decode("utf-8", "replace").strip().splitlines()
        return lines[-1].strip() if lines else ""

    def _fault(self, what: str) -> Any:
        """The harness broke the protocol or ended: it is killed if it lives, and started
        afresh for the next job."""
        self._end(0)
        raise ImplementationFault(f"the harness {what}")

    def _end(self, wait: float) -> None:
        process, self._process = self._process, None
        self._greeting = None
        if process is None:
            return
        for stream in (process.stdin, process.stdout):
            with contextlib.suppress(OSError):
                if stream is not None:
                    stream.close()
        try:
            process.wait(wait)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
