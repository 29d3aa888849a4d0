"""Running a C library in a worker process, so that a crash or a hang fails one case.

Why a plain subprocess speaking pickles over two pipes, rather than multiprocessing:
- the worker must start with its own environment (LD_PRELOAD of a sanitizer runtime,
  ASAN_OPTIONS, PYTHONMALLOC): the dynamic loader reads them at exec time, and multiprocessing's
  spawn/forkserver contexts take the parent's os.environ as it is;
- the worker must not re-import pytest's __main__ or the harness (numpy): run as a script that
  imports only `_ffi`, it starts in ~30 ms, which matters when it restarts after every crash;
- its stdout and stderr go to a file of ours, where a crash or a sanitizer report is read back,
  while the protocol uses pipes of its own that a library's printf cannot corrupt;
- `poll` on the reply pipe gives the per-call timeout, and `waitpid` the signal that killed it.

A message is a 4-byte little-endian length and a pickle. A request is (op, args); op names the
one C function a `_ffi.Session` method calls (or "load"). A reply is (kind, value).
"""

from __future__ import annotations

import os
import pickle
import re
import select
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# Absolute: in the worker, this file is no part of a package (PYTHONPATH has the root).
from harness.errors import ImplementationFault, Refused, SuiteUsageError

_LENGTH = struct.Struct("<I")
_PROTOCOL = pickle.HIGHEST_PROTOCOL
OK, REFUSED, FAULT, USAGE, BUG = range(5)
LOAD = "load"
# Loading runs the library's constructors and, under a sanitizer, its runtime's start-up; it
# gets at least this long whatever the per-call timeout.
STARTUP_TIMEOUT = 30.0
_EXIT_WAIT = 5.0  # seconds to wait for a worker that closed its pipe to be reaped
_OUTPUT_LIMIT = 16_000  # characters of a crash's output quoted in a failure message
# The worker is `python -c _BOOTSTRAP THIS_FILE FD_IN FD_OUT PARENT_PID`. Not `python THIS_FILE`:
# that puts this directory first on sys.path, where _ctypes.py shadows the C module `import
# ctypes` needs. -c puts the current directory ("") there instead, which is taken out.
_BOOTSTRAP = (
    "import runpy, sys\n"
    "if sys.path[:1] == ['']: del sys.path[0]\n"
    "runpy.run_path(sys.argv[1], run_name='__main__')"
)


# -- the worker side ---------------------------------------------------------------------------


def _load_ffi() -> Any:
    """_ffi.py, the file next to this one, without the package around it (and its numpy)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("tlkv_ffi", Path(__file__).with_name("_ffi.py"))
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _serve(fd_in: int, fd_out: int) -> None:
    Session = _load_ffi().Session
    session: Any = None
    # Buffered, so a request's length and body usually arrive in one read.
    reader = open(fd_in, "rb", buffering=1 << 16)  # noqa: SIM115 - lives as long as the worker
    while True:
        header = reader.read(_LENGTH.size)
        if len(header) < _LENGTH.size:
            return  # the parent closed the pipe: we are done
        op, args = pickle.loads(reader.read(_LENGTH.unpack(header)[0]))
        try:
            if op == LOAD:
                session = Session(*args)
                reply: tuple[int, Any] = (OK, session.load())
            else:
                reply = (OK, getattr(session, op)(*args))
        except Refused as exc:
            reply = (REFUSED, (exc.code, exc.call, exc.detail))
        except ImplementationFault as exc:
            reply = (FAULT, str(exc))
        except SuiteUsageError as exc:
            reply = (USAGE, str(exc))
        except Exception as exc:
            import traceback

            reply = (BUG, "".join(traceback.format_exception(exc)))
        payload = pickle.dumps(reply, protocol=_PROTOCOL)
        _write_all(fd_out, _LENGTH.pack(len(payload)) + payload)


def _die_with_parent(parent: int) -> None:
    """A worker stuck in a library's endless loop must not outlive a killed pytest."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None).prctl(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() != parent:  # it died before prctl took effect
        os._exit(0)


def _worker_main(argv: list[str]) -> None:
    fd_in, fd_out, parent = (int(a) for a in argv)
    _die_with_parent(parent)
    try:
        import resource

        # A crash must not stall for seconds writing a core file: the parent is waiting.
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (ImportError, ValueError, OSError):
        pass
    _serve(fd_in, fd_out)


# -- the parent side ---------------------------------------------------------------------------


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class _Gone(Exception):
    """The worker closed its pipe: it died."""


class _TimedOut(Exception):
    """No reply within the timeout."""


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


# The start of a sanitizer report: ASan/LSan/TSan/MSan "==PID==ERROR: ...Sanitizer", UBSan
# "file:line:col: runtime error: ...", with the "=====" rule ASan prints before it.
_REPORT = re.compile(
    r"^(?:=+\n)?"
    r"(?:==\d+==(?:ERROR|WARNING): \w*Sanitizer|.*: runtime error: |WARNING: \w*Sanitizer)",
    re.MULTILINE,
)
_SUMMARY = re.compile(r"^SUMMARY: (\w*Sanitizer: [\w-]+).*$", re.MULTILINE)
_FRAME = re.compile(r"^\s+#\d+ ")
# A stack frame in ctypes or libffi: every frame below it is the Python interpreter.
_CTYPES_FRAME = re.compile(r"libffi|ffi_call|_ctypes")


def sanitizer_report(output: str) -> tuple[str, str] | None:
    """The first sanitizer report in a worker's output: its headline ("AddressSanitizer:
    heap-buffer-overflow") and its text up to the SUMMARY line (without the shadow-byte map
    after it, nor the interpreter's frames below ctypes in each stack); None if there is none."""
    start = _REPORT.search(output)
    if start is None:
        return None
    summary = _SUMMARY.search(output, start.end())
    end = summary.end() if summary else len(output)
    headline = summary.group(1) if summary else "sanitizer report"
    kept: list[str] = []
    skipping = False
    for line in output[start.start() : end].strip().splitlines():
        if _FRAME.match(line):
            if skipping:
                continue
            skipping = bool(_CTYPES_FRAME.search(line))
            kept.append(line)
            if skipping:
                kept.append("    ... (the frames of ctypes and the Python interpreter left out)")
            continue
        skipping = False
        kept.append(line)
    return headline, "\n".join(kept)[:_OUTPUT_LIMIT]


def _tail(output: str, lines: int = 20) -> str:
    return "\n".join(output.strip().splitlines()[-lines:])[-_OUTPUT_LIMIT:]


class WorkerChannel:
    """Calls into a library loaded in a worker process; restarts the worker after it dies.

    `generation` counts workers lost: a pool created in an earlier generation is gone, and
    `loss` says how it went.
    """

    def __init__(
        self,
        library: str,
        statuses: Mapping[str, int],
        call_timeout: float,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.library = library
        self.statuses = dict(statuses)
        self.call_timeout = call_timeout
        self.env = {**os.environ, **(env or {})}
        self.generation = 0
        self.loss = ""
        self._proc: subprocess.Popen[bytes] | None = None
        self._wfd = self._rfd = -1
        self._log: Any = None
        self._poll = select.poll()

    def open(self) -> tuple[int, int]:
        """Start the worker and load the library; its (read, write) version masks."""
        return self._start()

    def _start(self) -> tuple[int, int]:
        request_r, request_w = os.pipe()
        reply_r, reply_w = os.pipe()
        # Its stdout and stderr, read back after a crash; gone when closed.
        self._log = tempfile.TemporaryFile(prefix="tlkv-worker-")  # noqa: SIM115
        script = Path(__file__).resolve()
        root = script.parents[2]
        pythonpath = self.env.get("PYTHONPATH", "")
        command = [sys.executable, "-c", _BOOTSTRAP, str(script)]
        command += [str(request_r), str(reply_w), str(os.getpid())]
        try:
            self._proc = subprocess.Popen(
                command,
                pass_fds=(request_r, reply_w),
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=self._log,
                env={
                    **self.env,
                    "PYTHONPATH": os.pathsep.join(filter(None, (str(root), pythonpath))),
                },
                # Its own session: a Ctrl-C in the terminal is pytest's to handle, not the
                # worker's (which would look like a crash of the library).
                start_new_session=True,
            )
        finally:
            os.close(request_r)
            os.close(reply_w)
        self._wfd, self._rfd = request_w, reply_r
        self._poll = select.poll()
        self._poll.register(reply_r, select.POLLIN)
        timeout = max(self.call_timeout, STARTUP_TIMEOUT)
        return self._call(LOAD, (self.library, self.statuses), timeout, "while loading")

    def call(self, op: str, *args: Any) -> Any:
        """Run `Session.<op>(*args)` in the worker (starting one if none is running)."""
        if self._proc is None:
            self._start()
        return self._call(op, args, self.call_timeout, f"in {op}")

    def _call(self, op: str, args: tuple[Any, ...], timeout: float, where: str) -> Any:
        payload = pickle.dumps((op, args), protocol=_PROTOCOL)
        mark = os.fstat(self._log.fileno()).st_size  # output from here on is this call's
        try:
            _write_all(self._wfd, _LENGTH.pack(len(payload)) + payload)
            kind, value = self._receive(timeout)
        except (_Gone, BrokenPipeError):
            raise self._lost(where, mark) from None
        except _TimedOut:
            self._stop(kill=True)
            self._forget(f"was killed (timed out {where})")
            raise ImplementationFault(f"timed out after {timeout:g} s {where}") from None
        except BaseException:  # a KeyboardInterrupt mid-call: its reply would come to the next
            self._stop(kill=True)
            self._forget(f"was stopped {where}")
            raise
        if kind == OK:
            return value
        if kind == REFUSED:
            raise Refused(*value)
        if kind == FAULT:
            raise ImplementationFault(value)
        if kind == USAGE:
            raise SuiteUsageError(value)
        raise RuntimeError(f"the ctypes worker failed {where} (a bug of the suite):\n{value}")

    def _receive(self, timeout: float) -> tuple[int, Any]:
        deadline = time.monotonic() + timeout
        buffer = bytearray()
        need = _LENGTH.size
        while True:
            if not self._poll.poll(max(0.0, deadline - time.monotonic()) * 1000):
                raise _TimedOut
            chunk = os.read(self._rfd, max(need - len(buffer), 1 << 16))
            if not chunk:
                raise _Gone
            buffer += chunk
            if need == _LENGTH.size and len(buffer) >= need:
                need += _LENGTH.unpack_from(buffer)[0]
            if len(buffer) >= need > _LENGTH.size:
                return pickle.loads(memoryview(buffer)[_LENGTH.size : need])

    def _lost(self, where: str, mark: int) -> ImplementationFault:
        """The worker died during a call: reap it and describe how."""
        proc = self._proc
        assert proc is not None
        try:
            code = proc.wait(_EXIT_WAIT)
        except subprocess.TimeoutExpired:  # closed its pipe but lives on: make sure
            proc.kill()
            code = proc.wait()
        output = self._output(mark)
        self._stop(kill=False)
        how = f"crashed with {_signal_name(-code)}" if code < 0 else f"exited with status {code}"
        self._forget(f"{how} {where}")
        report = sanitizer_report(output)
        if report:
            headline, text = report
            return ImplementationFault(f"{how} {where}: {headline}\n{text}")
        if output.strip():
            return ImplementationFault(f"{how} {where}; its output:\n{_tail(output)}")
        return ImplementationFault(f"{how} {where}")

    def _output(self, mark: int) -> str:
        fd = self._log.fileno()
        size = os.fstat(fd).st_size
        return os.pread(fd, size - mark, mark).decode("utf-8", "replace")

    def _forget(self, how: str) -> None:
        self.generation += 1
        self.loss = how

    def _stop(self, kill: bool) -> None:
        proc, self._proc = self._proc, None
        for fd in (self._wfd, self._rfd):
            if fd >= 0:
                os.close(fd)
        self._wfd = self._rfd = -1
        if proc is not None:
            if kill:
                proc.kill()
            try:
                proc.wait(_EXIT_WAIT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    def close(self) -> None:
        """Let the worker see the end of its requests and exit (killed if it lingers)."""
        self._stop(kill=False)


if __name__ == "__main__":  # started by WorkerChannel through _BOOTSTRAP
    _worker_main(sys.argv[2:])
