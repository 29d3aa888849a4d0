"""The suite's side of a worker process (`_worker.py` is the worker's): `WorkerChannel` starts
it, calls into the implementation's session there, and tells how it died, so that a crash, an
exit or a hang fails one case and the run goes on. Both C libraries (`_ffi.LibrarySession`) and
Python modules (`_pysession.ModuleSession`) run this way.

Why a plain subprocess speaking pickles over two pipes, rather than multiprocessing:
- the worker must start with its own environment (LD_PRELOAD of a sanitizer runtime,
  ASAN_OPTIONS, PYTHONMALLOC): the dynamic loader reads them at exec time, and multiprocessing's
  spawn/forkserver contexts take the parent's os.environ as it is;
- the worker must not re-import pytest's __main__ or the whole suite: run as a script that loads
  only its session module, a C worker starts in ~30 ms, which matters when it restarts after
  every crash;
- its stdout and stderr go to a file of ours, where a crash or a sanitizer report is read back,
  while the protocol uses pipes of its own that a library's printf cannot corrupt;
- the worker leads its own process group, so it is killed with any children it forked, and its
  death is seen on a pidfd (not as the end of a pipe a forked child may still hold open);
- `poll` on the reply pipe gives the per-call timeout, `waitpid` the signal that killed it.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import pickle
import re
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import WORKER_FAULTS, ImplementationFault, Refused, SuiteUsageError
from . import _worker
from ._observed import CHANNEL_BROKEN
from ._quarantine import CallLedger
from ._worker import (
    BATCH,
    CHANNEL_BROKEN_STATUS,
    FAULT,
    LENGTH,
    LOAD,
    OK,
    PROTOCOL,
    REFUSED,
    USAGE,
    SharedBuffer,
    write_all,
)

# Loading runs the library's constructors (or the module's import) and, under a sanitizer, its
# runtime's start-up; it gets at least this long whatever the per-call timeout.
STARTUP_TIMEOUT = 30.0
_EXIT_WAIT = 5.0  # seconds to wait for a worker that closed its pipe to be reaped
_OUTPUT_LIMIT = 16_000  # characters of a crash's output quoted in a failure message
# Operations whose calls have a size (the ledger names a fault that only larger calls meet):
# the unit, and where in the call's arguments (after the pool id) the sized list is.
_SIZED = {"export": ("block", 1)}


class _Gone(Exception):
    """The worker died."""


class _TimedOut(Exception):
    """No reply within the timeout."""


class _CallTimedOut(Exception):
    """A call got no reply within its timeout; the worker was killed."""


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


def _pidfd(pid: int) -> int:
    """A file descriptor that becomes readable when `pid` exits (-1 where there is none)."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return -1


class WorkerChannel:
    """Calls into a session living in a worker process; restarts the worker after it dies.

    `generation` counts workers lost: a pool created in an earlier generation is gone, and
    `loss` says how it went.
    """

    def __init__(
        self,
        session_class: type,
        load_args: Sequence[Any],
        call_timeout: float,
        env: Mapping[str, str] | None = None,
        memory_limit: int = 0,
    ) -> None:
        # The worker loads the session's module from its file alone, and takes the class by name.
        self.session_file = Path(inspect.getfile(session_class)).resolve()
        self.session_name = session_class.__name__
        self.load_args = tuple(load_args)
        self.calls = dict(session_class.CALLS)
        self.call_timeout = call_timeout
        self.env = {**os.environ, **(env or {})}
        self.memory_limit = memory_limit
        self.generation = 0
        self.loss = ""
        self._proc: subprocess.Popen[bytes] | None = None
        self._wfd = self._rfd = self._pidfd = -1
        self._outbox: SharedBuffer | None = None  # large request buffers, to the worker
        self._inbox: SharedBuffer | None = None  # large reply buffers, from it
        self._log: Any = None
        self._received = bytearray()  # what was read of the worker's replies, not yet taken
        self._poll = select.poll()
        # Hangs and crashes per operation: each call's wait, and which are not called again.
        self._ledger = CallLedger(
            call_timeout, self.calls, {op: unit for op, (unit, _) in _SIZED.items()}
        )

    def open(self) -> tuple[int, int, str]:
        """Start the worker and load the implementation: its (read, write) version masks and
        the file it was loaded from."""
        return self._start()

    def _start(self) -> tuple[int, int, str]:
        request_r, request_w = os.pipe()
        reply_r, reply_w = os.pipe()
        # Its stdout and stderr, read back after a crash; gone when closed.
        self._log = tempfile.TemporaryFile(prefix="tlkv-worker-")  # noqa: SIM115
        script = Path(_worker.__file__).resolve()
        command = [sys.executable, str(script)]
        command += [str(request_r), str(reply_w), str(os.getpid()), str(self.memory_limit)]
        self._outbox, self._inbox = SharedBuffer.create(), SharedBuffer.create()
        shared = [b.fd for b in (self._outbox, self._inbox) if b is not None]
        command += [
            str(self.session_file),
            self.session_name,
            *(str(b.fd if b else -1) for b in (self._outbox, self._inbox)),
        ]
        try:
            self._proc = subprocess.Popen(
                command,
                pass_fds=(request_r, reply_w, *shared),
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=self._log,
                env=self.env,
                # Its own session and process group: a Ctrl-C in the terminal is pytest's to
                # handle, not the worker's, and killing the group takes any children it forked.
                start_new_session=True,
            )
        finally:
            os.close(request_r)
            os.close(reply_w)
        self._wfd, self._rfd = request_w, reply_r
        self._received = bytearray()
        self._pidfd = _pidfd(self._proc.pid)
        self._poll = select.poll()
        self._poll.register(reply_r, select.POLLIN)
        if self._pidfd >= 0:
            self._poll.register(self._pidfd, select.POLLIN)
        timeout = max(self.call_timeout, STARTUP_TIMEOUT)
        try:
            where = "while loading"
            return self._reply(timeout, where, self._send((LOAD, self.load_args), where))
        except _CallTimedOut:
            raise ImplementationFault(f"timed out after {timeout:g} s while loading") from None

    def call(self, op: str, *args: Any) -> Any:
        """Run the session's `<op>(*args)` in the worker (starting one if none is running)."""
        (answer,) = self.batch([(op, args)])
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def batch(self, calls: Sequence[tuple[str, Sequence[Any]]]) -> list[Any]:
        """Make `calls` (op, args) in order in one round trip, as `call` makes each: a list of
        what each answered, or the exception it raised (Refused, or a fault). The list ends
        at the first fault (the calls after it are not made), so it may be shorter."""
        planned: list[tuple[str, str, int | None, float]] = []
        quarantined: ImplementationFault | None = None  # the answer of the first call not made
        for op, args in calls:
            size = len(args[_SIZED[op][1]]) if op in _SIZED else None
            try:  # Quarantined if op is not called any more
                timeout = self._ledger.timeout(op, size)
            except ImplementationFault as fault:
                quarantined = fault
                break
            planned.append((op, self._ledger.where(op), size, timeout))
        answers: list[Any] = []
        if not planned:
            return [quarantined] if quarantined is not None else []
        if self._proc is None:
            self._start()
        if len(planned) == 1:
            request: tuple[str, Any] = (planned[0][0], tuple(calls[0][1]))
        else:
            request = (BATCH, [(op, tuple(args)) for op, args in calls[: len(planned)]])
        mark = self._send(request, planned[0][1])
        for op, where, size, timeout in planned:
            start = time.monotonic()
            try:
                answer = self._reply(timeout, where, mark)
            except Refused as refused:
                self._ledger.answered(op, start, settled=False, size=size)
                answer = refused
            except _CallTimedOut:
                answer = self._ledger.timed_out(op, timeout, size=size)
            except ImplementationFault as fault:
                if self.generation_lost_in_call:
                    fault = self._ledger.faulted(op, fault, size=size)
                answer = fault
            else:
                self._ledger.answered(op, start, size=size)
            answers.append(answer)
            if isinstance(answer, ImplementationFault):
                return answers
        return answers if quarantined is None else [*answers, quarantined]

    generation_lost_in_call = False

    def _send(self, request: tuple[str, Any], where: str) -> int:
        """Write a request; where the worker's output starts from here on (the log's mark)."""
        self.generation_lost_in_call = False
        op, args = request
        shaped = self._outbox.put(args)[0] if self._outbox is not None else args
        payload = pickle.dumps((op, shaped), protocol=PROTOCOL)
        mark = os.fstat(self._log.fileno()).st_size  # output from here on is this call's
        try:
            write_all(self._wfd, LENGTH.pack(len(payload)) + payload)
        except BrokenPipeError:
            self._broken = (where, mark)
        else:
            self._broken = None
        return mark

    _broken: tuple[str, int] | None = None

    def _reply(self, timeout: float, where: str, mark: int) -> Any:
        """The next reply, as the call's answer; raises what the call raised."""
        try:
            if self._broken is not None:
                raise _Gone
            kind, value = self._receive(timeout)
        except _Gone:
            self.generation_lost_in_call = True
            raise self._lost(where, mark) from None
        except _TimedOut:
            self.generation_lost_in_call = True
            self._stop(kill=True)
            self._forget(f"was killed (timed out {where})")
            raise _CallTimedOut from None
        except BaseException:  # a KeyboardInterrupt mid-call: its reply would come to the next
            self._stop(kill=True)
            self._forget(f"was stopped {where}")
            raise
        if kind == OK:
            return self._inbox.take(value) if self._inbox is not None else value
        if kind == REFUSED:
            raise Refused(*value)
        if kind == FAULT:
            name, message = value
            raise WORKER_FAULTS.get(name, ImplementationFault)(message)
        if kind == USAGE:
            raise SuiteUsageError(value)
        raise RuntimeError(f"the worker failed {where} (a bug of the suite):\n{value}")

    def _receive(self, timeout: float) -> tuple[int, Any]:
        deadline = time.monotonic() + timeout
        # A batch's replies come one after another: a read may take in the next ones too.
        buffer = self._received
        while True:
            if len(buffer) >= LENGTH.size:
                end = LENGTH.size + LENGTH.unpack_from(buffer)[0]
                if len(buffer) >= end:
                    message = pickle.loads(memoryview(buffer)[LENGTH.size : end])
                    del buffer[:end]
                    return message
            events = self._poll.poll(max(0.0, deadline - time.monotonic()) * 1000)
            if not events:
                raise _TimedOut
            readable = {fd for fd, _ in events}
            if self._rfd not in readable:  # only the pidfd: the worker is gone, no reply came
                raise _Gone
            chunk = os.read(self._rfd, 1 << 16)
            if not chunk:
                raise _Gone
            buffer += chunk

    def _lost(self, where: str, mark: int) -> ImplementationFault:
        """The worker died during a call: reap it and describe how."""
        proc = self._proc
        assert proc is not None
        if not _exited(proc, self._pidfd, _EXIT_WAIT):  # closed its pipe but lives on
            _kill_group(proc)
        _kill_group(proc)  # what it forked dies with it
        code = proc.wait()
        output = self._output(mark)
        self._stop(kill=False)
        if code < 0:
            how = f"crashed with {_signal_name(-code)}"
        elif code == CHANNEL_BROKEN_STATUS:
            how = CHANNEL_BROKEN
        else:
            how = f"exited with status {code}"
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
        pidfd = self._pidfd
        for fd in (self._wfd, self._rfd):
            if fd >= 0:
                os.close(fd)
        self._wfd = self._rfd = self._pidfd = -1
        if proc is not None:
            if kill:
                _kill_group(proc)
            # Wait for it to end (seeing EOF on its requests) without reaping it, so its pid
            # still names its group; then kill whatever it forked and left behind, and reap.
            if not _exited(proc, pidfd, _EXIT_WAIT):
                _kill_group(proc)
            _kill_group(proc)
            proc.wait()
        if pidfd >= 0:
            os.close(pidfd)
        if self._log is not None:
            self._log.close()
            self._log = None
        for box in (self._outbox, self._inbox):
            if box is not None:
                box.close()
        self._outbox = self._inbox = None

    def close(self) -> None:
        """Let the worker see the end of its requests and exit (killed if it lingers)."""
        self._stop(kill=False)


def _exited(proc: subprocess.Popen[bytes], pidfd: int, timeout: float) -> bool:
    """Wait up to `timeout` for the worker to exit, without reaping it (its pid, which names
    its process group, stays reserved until then)."""
    if proc.returncode is not None:
        return True
    if pidfd >= 0:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        return bool(poller.poll(timeout * 1000))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
            return True
        time.sleep(0.01)
    return False


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the worker's process group: the worker and whatever it forked. Only before the
    worker is reaped: after that its pid may name another process."""
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
