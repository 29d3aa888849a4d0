"""What the suite's own tests share: running the conformance suite as a user would, and
making patched copies of implementations."""

from __future__ import annotations

import fcntl
import json
import os
import re
import subprocess
import sys
import threading
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tlkv_conformance.references.grpc_server import launch

ROOT = Path(__file__).resolve().parent.parent
# The test libraries' own cases (selftest/faulty), given to the suite by path.
FAULTY_CASES = "selftest/faulty/cases"
# The corpus without its ~1,900 generated cases (cases/exhaustive.yaml).
DIRECTED_CASES = ("cases", "--ignore=cases/exhaustive.yaml")


@dataclass
class SuiteRun:
    """The outcome of one conformance run: exit code, output, and each test's outcome."""

    returncode: int
    output: str
    # nodeid -> passed / failed / skipped / xfailed / warned (a SHOULD failure, not gating)
    outcomes: dict[str, str] = field(default_factory=dict)
    messages: dict[str, str] = field(default_factory=dict)  # nodeid -> failure text
    requirements: dict[str, list[str]] = field(default_factory=dict)  # nodeid -> cited ids
    # a failure's diagnosis (JUnit properties): nodeid -> blamed ids, nodeid -> cause id
    blamed: dict[str, list[str]] = field(default_factory=dict)
    diagnoses: dict[str, str] = field(default_factory=dict)

    def with_outcome(self, outcome: str) -> list[str]:
        return sorted(node for node, o in self.outcomes.items() if o == outcome)

    @property
    def failed(self) -> list[str]:
        return self.with_outcome("failed")

    @property
    def passed(self) -> list[str]:
        return self.with_outcome("passed")


def _nodeid(case: ET.Element) -> str:
    classname, name = case.get("classname", ""), case.get("name", "")
    # JUnit flattens "cases/hash.yaml::x" into classname "cases.hash.yaml"; rebuild the path.
    file_attr = case.get("file")
    if file_attr:
        return f"{file_attr}::{name}"
    return f"{classname}::{name}"


def _parse_junit(path: Path) -> SuiteRun:
    """The outcomes, messages and properties of a JUnit file (the exit code and output are
    left for the caller)."""
    run = SuiteRun(0, "")
    outcomes, messages, requirements = run.outcomes, run.messages, run.requirements
    if not path.exists():
        return run
    for case in ET.parse(path).getroot().iter("testcase"):
        node = _nodeid(case)
        properties = [(p.get("name", ""), p.get("value", "")) for p in case.iter("property")]
        requirements[node] = [value for name, value in properties if name == "requirement"]
        for name, value in properties:
            if name == "blamed":
                run.blamed[node] = [r for r in value.split(",") if r]
            elif name == "diagnosis":
                run.diagnoses[node] = value
        # A SHOULD-level failure is a warning: passed for JUnit, with a should_failure property.
        warned = any(p.get("name") == "should_failure" for p in case.iter("property"))
        outcome = "warned" if warned else "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed"
                messages[node] = (child.get("message") or "") + "\n" + (child.text or "")
            elif child.tag == "skipped":
                kind = child.get("type", "")
                outcome = "xfailed" if kind == "pytest.xfail" else "skipped"
        outcomes[node] = outcome
    return run


def run_conformance(
    args: list[str],
    tmp_path: Path,
    timeout: float = 600,
    pythonpath: Path | None = None,
    forked: bool = True,
) -> SuiteRun:
    """Run `pytest ARGS` in the suite's root as a user would, in a child process; `pythonpath`
    is put first on the child's module path (for an implementation module made by the test).
    The child is forked from a zygote that has imported pytest and the plugin (forkserver.py),
    or with `forked=False` started afresh (`python -m pytest`, for benchmarks/bench_selftest.py);
    subprocess.TimeoutExpired when it runs longer than `timeout`."""
    junit = tmp_path / f"junit-{os.getpid()}-{len(list(tmp_path.iterdir()))}.xml"
    command = [
        "-p",
        "no:cacheprovider",
        "-q",
        "-o",
        "junit_family=xunit1",
        f"--junitxml={junit}",
        *args,
    ]
    env = _child_environment()
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(pythonpath), env.get("PYTHONPATH")]))
    if forked:
        returncode, output = _zygote().run(command, ROOT, env, timeout, junit.with_suffix(""))
    else:
        result = subprocess.run(
            [sys.executable, "-m", "pytest", *command],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
        )
        returncode, output = result.returncode, result.stdout + result.stderr
    run = _parse_junit(junit)
    run.returncode, run.output = returncode, output
    return run


def _child_environment() -> dict[str, str]:
    # Bytecode (and pytest's rewritten test modules) cached on disk saves each of the many
    # child runs a second of compiling the harness again.
    return {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


class Zygote:
    """The self-test process's fork server (selftest/forkserver.py), started on first use."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "selftest.forkserver"],
            cwd=ROOT,
            env=_child_environment(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        ready = self.process.stdout.readline()
        if ready != "ready\n":
            raise RuntimeError(f"the self-test's fork server did not start: {ready!r}")

    def run(
        self, args: list[str], cwd: Path, env: dict[str, str], timeout: float, base: Path
    ) -> tuple[int, str]:
        """pytest ARGS in a forked child: (exit status, stdout + stderr)."""
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        stdout, stderr = base.with_suffix(".stdout"), base.with_suffix(".stderr")
        request = {
            "args": args,
            "cwd": str(cwd),
            "env": env,
            "stdout": str(stdout),
            "stderr": str(stderr),
            "timeout": timeout,
        }
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        answer = json.loads(self.process.stdout.readline() or "null")
        if answer is None:
            raise RuntimeError("the self-test's fork server exited")
        output = "".join(p.read_text(errors="replace") for p in (stdout, stderr) if p.exists())
        if answer.get("timeout"):
            raise subprocess.TimeoutExpired(["pytest", *args], timeout, output=output)
        return answer["returncode"], output


# One fork server per thread: a server answers one request at a time, on one pipe, so threads
# sharing it would wait for each other's runs and could read each other's answers
# (benchmarks/bench_known_failures.py --jobs runs mutants in threads).
_ZYGOTES = threading.local()


def _zygote() -> Zygote:
    zygote = getattr(_ZYGOTES, "server", None)
    if zygote is None or zygote.process.poll() is not None:
        zygote = _ZYGOTES.server = Zygote()
    return zygote


def outcomes_by_case(run: SuiteRun, label: str) -> dict[str, str]:
    """The outcomes of one implementation's items, by node id with its label taken out, so that
    runs against different libraries (or several at once) compare case by case."""
    mark = re.compile(r"(?<=[\[-])" + re.escape(label) + r"(?=[\]-])")
    outcomes = {}
    for nodeid, outcome in run.outcomes.items():
        if "[" in nodeid and not mark.search(nodeid):
            continue  # another implementation's item
        outcomes[mark.sub("IMPL", nodeid).removesuffix("[IMPL]")] = outcome
    return outcomes


def shared_once(tmp_path_factory: Any, name: str, compute: Callable[[], Any]) -> Any:
    """`compute()`'s result (JSON), computed once for the whole self-test run, whichever
    pytest-xdist worker asks first: the others wait on its lock and read it. Whole conformance
    runs that several tests compare with are made once this way, not once per worker."""
    folder = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        folder = folder.parent  # the workers' common root, this run's alone
    folder = folder / "shared-once"
    folder.mkdir(parents=True, exist_ok=True)
    result = folder / f"{name}.json"
    with open(folder / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not result.exists():
            value = compute()
            partial = result.with_suffix(f".{os.getpid()}.tmp")
            partial.write_text(json.dumps(value), encoding="utf-8")
            partial.replace(result)
    return json.loads(result.read_text(encoding="utf-8"))


def patched_text(source: Path, replacements: list[tuple[str, str]]) -> str:
    """`source`'s text with each (old, new) replaced exactly once; a replacement that does not
    apply is an error, so a patch cannot silently stop planting its bug."""
    text = source.read_text(encoding="utf-8")
    for old, new in replacements:
        count = text.count(old)
        if count != 1:
            raise AssertionError(f"{source.name}: {old!r} occurs {count} times, expected once")
        text = text.replace(old, new)
    return text


def patched_copy(source: Path, replacements: list[tuple[str, str]], out: Path) -> Path:
    """Write `source` patched (patched_text) to `out`."""
    out.write_text(patched_text(source, replacements), encoding="utf-8")
    return out


STARTUP_SECONDS = 20


@dataclass
class Server:
    """A reference decode server (python -m tlkv_conformance.references.grpc_server), a child."""

    port: int
    process: subprocess.Popen[str]

    @property
    def impl(self) -> str:
        return f"grpc:127.0.0.1:{self.port}"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.communicate()


REFERENCES = "tlkv_conformance.references"


def pool_flags(geometry: Sequence[int], capacity: int) -> list[str]:
    """The reference server's options for its one pool: geometry (B, L, Hkv, D) and capacity."""
    b, layers, heads, dim = geometry
    return [
        f"--block-tokens={b}",
        f"--n-layers={layers}",
        f"--n-kv-heads={heads}",
        f"--head-dim={dim}",
        f"--capacity={capacity}",
    ]


def start_reference_server(
    args: list[str],
    package: str = REFERENCES,
    package_root: Path = ROOT,
    script: Path | None = None,
) -> Server:
    """Start the reference server of `package` (the bundled references, or a patched copy for a
    mutant, found under `package_root`; or `script`, a server taking the same options) on an
    OS-assigned port, and wait for the line that names the port."""
    server = [str(script)] if script is not None else ["-m", f"{package}.grpc_server"]
    # `python -m` looks in the working directory first, so that is where the package is chosen.
    address, process = launch(
        [sys.executable, *server, "--port", "0", *args], STARTUP_SECONDS, cwd=package_root
    )
    return Server(int(address.rpartition(":")[2]), process)
