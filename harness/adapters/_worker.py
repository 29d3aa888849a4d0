"""The worker process's script: it serves an implementation's session (`_ffi.LibrarySession` for
a C library, `_pysession.ModuleSession` for a Python module) to the suite's process, so that a
crash, an exit or a hang fails one case and the run goes on. `_worker_channel.WorkerChannel`
starts it and calls into it.

It runs as a plain script (`python _worker.py ...`), not as a module of the package: it imports
only the standard library, and loads errors.py and its session's module from their files, so it
starts fast and without the suite.

A message is a 4-byte little-endian length and a pickle. A request is (op, args); op names a
session method (or "load"). A reply is (kind, value); a fault's value is (its class's name in
errors.py, its message), so that the suite raises the same class (errors.WORKER_FAULTS).

A request ("batch", [(op, args), ...]) makes several calls in one round trip: the worker makes
them in order and replies to each as it ends, so a crash or a hang is still the call whose reply
did not come; it stops after the first reply that is neither an answer nor a refusal.
"""

from __future__ import annotations

import itertools
import mmap
import os
import pickle
import signal
import struct
import sys
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
else:  # the worker: this file run on its own
    _errors = _load_file("tlkv_worker_errors", Path(__file__).resolve().parent.parent / "errors.py")
    ImplementationFault, Refused, SuiteUsageError = (
        _errors.ImplementationFault,
        _errors.Refused,
        _errors.SuiteUsageError,
    )

LENGTH = struct.Struct("<I")
PROTOCOL = pickle.HIGHEST_PROTOCOL
OK, REFUSED, FAULT, USAGE, BUG = range(5)
# The worker's exit status when its channel to the suite breaks (_observed.CHANNEL_BROKEN).
CHANNEL_BROKEN_STATUS = 86
LOAD = "load"
BATCH = "batch"


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


# -- large buffers: shared memory -------------------------------------------------------------

# Values and envelopes of a real geometry are MiBs; through a pipe each would be pickled,
# written in 64 KiB pieces and unpickled again. Above this size they travel in a shared
# memory file instead (one per direction), and the message carries only where they are.
SHARED_MIN = 1 << 16
_SHARED_TAG = "__tlkv_shared__"


# What may be, or hold, a large buffer. A call's lists of token ids or block numbers hold
# none: they are passed as they are, not rebuilt element by element (a round trip's largest
# cost in the suite's process, measured with a 64-token block_hash).
_BUFFERS = bytes | bytearray | memoryview | tuple | list


def _holds_any(items: tuple[Any, ...] | list[Any], kinds: Any) -> bool:
    return any(map(isinstance, items, itertools.repeat(kinds)))


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

    def put(self, value: Any, start: int = 0) -> tuple[Any, int]:
        """`value` with every large bytes-like in it moved into the buffer from offset `start`
        (written side), and the offset after them: the next reply of a batch goes there, so
        that it does not overwrite one the other side has not read yet."""
        large: list[memoryview] = []

        def collect(item: Any) -> Any:
            if isinstance(item, bytes | bytearray | memoryview) and len(item) >= SHARED_MIN:
                large.append(memoryview(item).cast("B"))
                return (_SHARED_TAG, len(large) - 1)
            if isinstance(item, tuple | list) and _holds_any(item, _BUFFERS):
                return type(item)(collect(i) for i in item)
            return item

        shaped = collect(value)
        if not large:
            return shaped, start
        region = self._mapped(start + sum(len(v) for v in large), grow=True)
        places, offset = [], start
        for view in large:
            region[offset : offset + len(view)] = view
            places.append((offset, len(view)))
            offset += len(view)

        def place(item: Any) -> Any:
            if isinstance(item, tuple) and len(item) == 2 and item[0] == _SHARED_TAG:
                return (_SHARED_TAG, *places[item[1]])
            if isinstance(item, tuple | list) and _holds_any(item, tuple | list):
                return type(item)(place(i) for i in item)
            return item

        return place(shaped), offset

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
            if isinstance(item, tuple | list) and _holds_any(item, tuple | list):
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
        header = reader.read(LENGTH.size)
        if len(header) < LENGTH.size:
            return  # the parent closed the pipe: we are done
        args = None  # the last request's views of the inbox: gone before it is remapped
        op, args = pickle.loads(reader.read(LENGTH.unpack(header)[0]))
        if inbox is not None:
            # Views, not copies: a session copies what it keeps (ctypes from_buffer_copy).
            args = inbox.take(args, copy=False)
        if op == LOAD:
            try:
                session = session_class(*args)
            except Exception as exc:
                _send(fd_out, _failed(session_class, op, exc))
                continue
        calls = args if op == BATCH else [(op, args)]
        end = 0  # where the next large buffer of this request's replies goes
        for call, call_args in calls:
            reply = _answer(session_class, session, call, call_args)
            if outbox is not None and reply[0] == OK:
                shaped, end = outbox.put(reply[1], end)
                reply = (OK, shaped)
            _send(fd_out, reply)
            if reply[0] not in (OK, REFUSED):
                break  # a batch's later calls are not made: the sequence's first fault ends it


def _answer(session_class: Any, session: Any, op: str, args: Any) -> tuple[int, Any]:
    """The reply to one call."""
    try:
        if op == LOAD:
            return (OK, session.load())
        return (OK, getattr(session, op)(*args))
    except BaseException as exc:
        return _failed(session_class, op, exc)


def _failed(session_class: Any, op: str, exc: BaseException) -> tuple[int, Any]:
    """The reply to a call that raised `exc`."""
    if isinstance(exc, Refused):
        return (REFUSED, (exc.code, exc.call, exc.detail))
    if isinstance(exc, ImplementationFault):
        return (FAULT, (type(exc).__name__, str(exc)))
    if isinstance(exc, SuiteUsageError):
        return (USAGE, str(exc))
    if isinstance(exc, SystemExit):  # a Python module calling sys.exit() in a call
        exited = f"raised SystemExit({exc.code!r}) in {session_class.CALLS.get(op, op)}"
        return (FAULT, (ImplementationFault.__name__, exited))
    if not isinstance(exc, Exception):
        raise exc
    import traceback

    return (BUG, "".join(traceback.format_exception(exc)))


def _send(fd_out: int, reply: tuple[int, Any]) -> None:
    payload = pickle.dumps(reply, protocol=PROTOCOL)
    write_all(fd_out, LENGTH.pack(len(payload)) + payload)


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
    try:
        _serve(fd_in, fd_out, argv[4], argv[5], int(argv[6]), int(argv[7]))
    except OSError:
        # Its pipes or shared buffers failed under it: the implementation closed or replaced
        # descriptors it did not open. The parent names this status; a traceback would not.
        os._exit(CHANNEL_BROKEN_STATUS)


if __name__ == "__main__":  # started by WorkerChannel
    _worker_main(sys.argv[1:])
