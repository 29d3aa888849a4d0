"""A zygote for the self-test's conformance runs.

The self-test runs the conformance suite a few hundred times, each in a child process as a user
would (`python -m pytest ...`), and each child spends about a second importing pytest, numpy,
hypothesis and the plugin before it collects anything (benchmarks/bench_selftest.py measures
what the zygote saves).
This server imports them once, then forks one child per run; the child calls `pytest.main`
with the run's arguments, working directory and environment, its output in files, exactly as
the `python -m pytest` child would, and exits with pytest's status. Nothing is shared between
runs: each child starts from the state the server had after its imports and after loading the
bundled case files (which every run collects), before any run.

Protocol, one JSON line each way per run: the request {args, cwd, env, stdout, stderr,
timeout}; the answer {returncode} or {timeout: true} (the child's process group killed).
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import io
import json
import os
import signal
import sys
import time
from importlib import import_module
from importlib.metadata import distributions, entry_points
from pathlib import PurePath
from typing import Any

POLL_SECONDS = 0.02


def _preload() -> None:
    """What every run imports: pytest and the plugins it loads through their entry points."""
    import pytest  # noqa: F401

    for entry in entry_points(group="pytest11"):
        import_module(entry.value.split(":")[0])
    # A module that started threads cannot be forked safely: grpc must be imported by the child.
    assert "grpc" not in sys.modules, "the zygote must not import grpc"
    _imported_on_purpose()
    _load_the_corpus()


def _load_the_corpus() -> None:
    """Every run collects the bundled case files and parity manifests: loaded here once, each
    child collects them from the zygote's copy (tlkv_conformance.cases.cached_case_file,
    tlkv_conformance.golden.cached_manifest; a file changed since is loaded again)."""
    from tlkv_conformance.cases import cached_case_file
    from tlkv_conformance.corpus import cases_dir, corpus_root, parity_dir
    from tlkv_conformance.golden import MANIFEST_FILE, cached_manifest, manifest_folders

    for path in sorted(cases_dir().glob("*.yaml")):
        cached_case_file(path, corpus_root())
    for folder in manifest_folders(parity_dir()):
        cached_manifest(folder / MANIFEST_FILE)
    assert "grpc" not in sys.modules, "loading the corpus must not import grpc"


def _imported_on_purpose() -> None:
    """pytest rewrites the asserts of its plugins' distributions as it imports them, and warns
    in the run's output (PytestAssertRewriteWarning) about each module it finds imported
    already. Here they are, on purpose and before any run: each says so as pytest reads it."""
    for dist in distributions():
        if not any(entry.group == "pytest11" for entry in dist.entry_points):
            continue
        tops = {PurePath(str(f)).parts[0].removesuffix(".py") for f in dist.files or []}
        for name in tops & set(sys.modules):
            module = sys.modules[name]
            module.__doc__ = f"{module.__doc__ or ''}\n\nPYTEST_DONT_REWRITE"


def _child(request: dict[str, Any]) -> None:
    """In the forked child: become `python -m pytest ARGS` in the request's directory and
    environment, then exit with pytest's status (never returns)."""
    code = 3
    try:
        os.setsid()  # its own process group: a timeout kills the run and whatever it started
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        # PYTHONPATH is read when an interpreter starts: its entries go where it puts them.
        extra = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
        sys.path[1:1] = extra
        sys.path[0] = request["cwd"]  # `python -m` puts the working directory first
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(target, fd)
            os.close(target)
        sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), line_buffering=True)
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), line_buffering=True)
        sys.argv = [sys.executable, "-m", "pytest", *request["args"]]

        import pytest

        code = int(pytest.main(request["args"]))
        atexit._run_exitfuncs()  # as the interpreter would at exit (workers are closed there)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # a crash of the run itself: said on its stderr, as Python would
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def _wait(pid: int, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return {"returncode": os.waitstatus_to_exitcode(status)}
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return {"timeout": True}
        time.sleep(POLL_SECONDS)


def serve() -> None:
    _preload()
    # What the zygote loaded lives as long as every child: out of the collector's sight, so
    # that a child's collections (pytest runs two full ones at its end) do not walk it each
    # time, and the pages they would touch stay shared with the zygote.
    gc.collect()
    gc.freeze()
    requests, answers = sys.stdin, sys.stdout
    answers.write("ready\n")
    answers.flush()
    for line in requests:
        request = json.loads(line)
        answers.flush()
        pid = os.fork()
        if pid == 0:
            _child(request)
        answers.write(json.dumps(_wait(pid, request["timeout"])) + "\n")
        answers.flush()


if __name__ == "__main__":
    serve()
