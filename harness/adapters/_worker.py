"""Running an implementation in a worker process, so that a crash, an exit or a hang fails one
case and the run goes on. Both C libraries (`_ffi.LibrarySession`) and Python modules
(`_pysession.ModuleSession`) run this way.

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

A message is a 4-byte little-endian length and a pickle. A request is (op, args); op names a
session method (or "load"). A reply is (kind, value).
"""

from __future__ import annotations

import contextlib
import inspect
import mmap
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
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def _load_file(name: str, path: Path) -> Any:
    """A module of this package loaded from its file alone, as `name` (the worker has no
    package around it, and must not import the whole suite)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


if __package__:
    from ..errors import ImplementationFault, Refused, SuiteUsageError
    from ._quarantine import CallLedger  # the parent's alone: the worker never needs it
else:  # the worker: this file run on its own
    _errors = _load_file("tlkv_worker_errors", Path(__file__).resolve().parent.parent / "errors.py")
    ImplementationFault, Refused, SuiteUsageError = (
        _errors.ImplementationFault,
        _errors.Refused,
        _errors.SuiteUsageError,
    )

_LENGTH = struct.Struct("<I")
_PROTOCOL = pickle.HIGHEST_PROTOCOL
OK, REFUSED, FAULT, USAGE, BUG = range(5)
LOAD = "load"
# Loading runs the library's constructors (or the module's import) and, under a sanitizer, its
# runtime's start-up; it gets at least this long whatever the per-call timeout.
STARTUP_TIMEOUT = 30.0
_EXIT_WAIT = 5.0  # seconds to wait for a worker that closed its pipe to be reaped
_OUTPUT_LIMIT = 16_000  # characters of a crash's output quoted in a failure message


# -- large buffers: shared memory -------------------------------------------------------------

# Values and envelopes of a real geometry are MiBs; through a pipe each would be pickled,
# written in 64 KiB pieces and unpickled again. Above this size they travel in a shared
# memory file instead (one per direction), and the message carries only where they are.
SHARED_MIN = 1 << 16
_SHARED_TAG = "__tlkv_shared__"


class SharedBuffer:
    """A memfd both processes map: one side writes large buffers into it, the other reads
    them. One call is in flight at a time, so each message starts again at offset 0."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._map: mmap.mmap | None = None

    @classmethod
    def create(cls) -> SharedBuffer | None:
        try:
            return cls(os.memfd_create("tlkv-worker", 0))
        except (AttributeError, OSError):  # no memfd here: everything goes through the pipe
            return None

    def _mapped(self, size: int, grow: bool) -> mmap.mmap:
        current = os.fstat(self.fd).st_size
        if grow and current < size:
            current = max(size, 2 * current)
            os.ftruncate(self.fd, current)
        if self._map is None or len(self._map) != current:
            if self._map is not None:
                self._map.close()
            self._map = mmap.mmap(self.fd, current)
        return self._map

    def put(self, value: Any) -> Any:
        """`value` with every large bytes-like in it moved into the buffer (written side)."""
        large: list[memoryview] = []

        def collect(item: Any) -> Any:
            if isinstance(item, bytes | bytearray | memoryview) and len(item) >= SHARED_MIN:
                large.append(memoryview(item).cast("B"))
                return (_SHARED_TAG, len(large) - 1)
            if isinstance(item, tuple | list):
                return type(item)(collect(i) for i in item)
            return item

        shaped = collect(value)
        if not large:
            return shaped
        region = self._mapped(sum(len(v) for v in large), grow=True)
        places, offset = [], 0
        for view in large:
            region[offset : offset + len(view)] = view
            places.append((offset, len(view)))
            offset += len(view)

        def place(item: Any) -> Any:
            if isinstance(item, tuple) and len(item) == 2 and item[0] == _SHARED_TAG:
                return (_SHARED_TAG, *places[item[1]])
            if isinstance(item, tuple | list):
                return type(item)(place(i) for i in item)
            return item

        return place(shaped)

    def take(self, value: Any, copy: bool = True) -> Any:
        """`value` with every buffer reference replaced by its bytes (read side): a copy, or
        (`copy=False`, for a call that copies what it keeps) a view that lives until the next
        message."""

        def restore(item: Any) -> Any:
            if isinstance(item, tuple) and len(item) == 3 and item[0] == _SHARED_TAG:
                _, offset, length = item
                view = memoryview(self._mapped(offset + length, grow=False))[
                    offset : offset + length
                ]
                return bytes(view) if copy else view
            if isinstance(item, tuple | list):
                return type(item)(restore(i) for i in item)
            return item

        return restore(value)

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
            self._map = None
        os.close(self.fd)


# -- the worker side ---------------------------------------------------------------------------


def _serve(
    fd_in: int, fd_out: int, session_file: str, session_name: str, requests: int, replies: int
) -> None:
    session_class = getattr(_load_file("tlkv_worker_session", Path(session_file)), session_name)
    session: Any = None
    inbox = SharedBuffer(requests) if requests >= 0 else None
    outbox = SharedBuffer(replies) if replies >= 0 else None
    # Buffered, so a request's length and body usually arrive in one read.
    reader = open(fd_in, "rb", buffering=1 << 16)  # noqa: SIM115 - lives as long as the worker
    while True:
        header = reader.read(_LENGTH.size)
        if len(header) < _LENGTH.size:
            return  # the parent closed the pipe: we are done
        args = None  # the last request's views of the inbox: gone before it is remapped
        op, args = pickle.loads(reader.read(_LENGTH.unpack(header)[0]))
        if inbox is not None:
            # Views, not copies: a session copies what it keeps (ctypes from_buffer_copy).
            args = inbox.take(args, copy=False)
        try:
            if op == LOAD:
                session = session_class(*args)
                reply: tuple[int, Any] = (OK, session.load())
            else:
                reply = (OK, getattr(session, op)(*args))
        except Refused as exc:
            reply = (REFUSED, (exc.code, exc.call, exc.detail))
        except ImplementationFault as exc:
            reply = (FAULT, str(exc))
        except SuiteUsageError as exc:
            reply = (USAGE, str(exc))
        except SystemExit as exc:  # a Python module calling sys.exit() in a call
            reply = (FAULT, f"raised SystemExit({exc.code!r}) in {session_class.CALLS.get(op, op)}")
        except Exception as exc:
            import traceback

            reply = (BUG, "".join(traceback.format_exception(exc)))
        if outbox is not None and reply[0] == OK:
            reply = (OK, outbox.put(reply[1]))
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
    fd_in, fd_out, parent, memory = (int(a) for a in argv[:4])
    _die_with_parent(parent)
    try:
        import resource

        # A crash must not stall for seconds writing a core file: the parent is waiting.
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if memory:  # an implementation that allocates without bound fails its case, not the host
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    except (ImportError, ValueError, OSError):
        pass
    _serve(fd_in, fd_out, argv[4], argv[5], int(argv[6]), int(argv[7]))


# -- the parent side ---------------------------------------------------------------------------


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


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
        self._poll = select.poll()
        # Hangs and crashes per operation: each call's wait, and which are not called again.
        self._ledger = CallLedger(call_timeout, self.calls)

    def open(self) -> tuple[int, int, str]:
        """Start the worker and load the implementation: its (read, write) version masks and
        the file it was loaded from."""
        return self._start()

    def _start(self) -> tuple[int, int, str]:
        request_r, request_w = os.pipe()
        reply_r, reply_w = os.pipe()
        # Its stdout and stderr, read back after a crash; gone when closed.
        self._log = tempfile.TemporaryFile(prefix="tlkv-worker-")  # noqa: SIM115
        script = Path(__file__).resolve()
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
        self._pidfd = _pidfd(self._proc.pid)
        self._poll = select.poll()
        self._poll.register(reply_r, select.POLLIN)
        if self._pidfd >= 0:
            self._poll.register(self._pidfd, select.POLLIN)
        timeout = max(self.call_timeout, STARTUP_TIMEOUT)
        try:
            return self._call(LOAD, self.load_args, timeout, "while loading")
        except _CallTimedOut:
            raise ImplementationFault(f"timed out after {timeout:g} s while loading") from None

    def call(self, op: str, *args: Any) -> Any:
        """Run the session's `<op>(*args)` in the worker (starting one if none is running)."""
        where = self._ledger.where(op)
        timeout = self._ledger.timeout(op)  # Quarantined if op is not called any more
        if self._proc is None:
            self._start()
        start = time.monotonic()
        try:
            result = self._call(op, args, timeout, where)
        except Refused:
            self._ledger.answered(op, start, settled=False)
            raise
        except _CallTimedOut:
            raise self._ledger.timed_out(op, timeout) from None
        except ImplementationFault as fault:
            if self.generation_lost_in_call:
                fault = self._ledger.faulted(op, fault)
            raise fault from None
        self._ledger.answered(op, start)
        return result

    generation_lost_in_call = False

    def _call(self, op: str, args: Sequence[Any], timeout: float, where: str) -> Any:
        self.generation_lost_in_call = False
        shaped = self._outbox.put(tuple(args)) if self._outbox is not None else tuple(args)
        payload = pickle.dumps((op, shaped), protocol=_PROTOCOL)
        mark = os.fstat(self._log.fileno()).st_size  # output from here on is this call's
        try:
            _write_all(self._wfd, _LENGTH.pack(len(payload)) + payload)
            kind, value = self._receive(timeout)
        except (_Gone, BrokenPipeError):
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
            raise ImplementationFault(value)
        if kind == USAGE:
            raise SuiteUsageError(value)
        raise RuntimeError(f"the worker failed {where} (a bug of the suite):\n{value}")

    def _receive(self, timeout: float) -> tuple[int, Any]:
        deadline = time.monotonic() + timeout
        buffer = bytearray()
        need = _LENGTH.size
        while True:
            events = self._poll.poll(max(0.0, deadline - time.monotonic()) * 1000)
            if not events:
                raise _TimedOut
            readable = {fd for fd, _ in events}
            if self._rfd not in readable:  # only the pidfd: the worker is gone, no reply came
                raise _Gone
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
        if not _exited(proc, self._pidfd, _EXIT_WAIT):  # closed its pipe but lives on
            _kill_group(proc)
        _kill_group(proc)  # what it forked dies with it
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


if __name__ == "__main__":  # started by WorkerChannel
    _worker_main(sys.argv[1:])
