"""What the suite's own tests share: running the conformance suite as a user would, and
making patched copies of implementations."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class SuiteRun:
    """The outcome of one conformance run: exit code, output, and each test's outcome."""

    returncode: int
    output: str
    outcomes: dict[str, str] = field(default_factory=dict)  # nodeid -> passed/failed/skipped/...
    messages: dict[str, str] = field(default_factory=dict)  # nodeid -> failure text

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


def _parse_junit(path: Path) -> tuple[dict[str, str], dict[str, str]]:
    outcomes, messages = {}, {}
    if not path.exists():
        return outcomes, messages
    for case in ET.parse(path).getroot().iter("testcase"):
        node = _nodeid(case)
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed"
                messages[node] = (child.get("message") or "") + "\n" + (child.text or "")
            elif child.tag == "skipped":
                kind = child.get("type", "")
                outcome = "xfailed" if kind == "pytest.xfail" else "skipped"
        outcomes[node] = outcome
    return outcomes, messages


def run_conformance(
    args: list[str], tmp_path: Path, timeout: float = 600, pythonpath: Path | None = None
) -> SuiteRun:
    """Run `pytest ARGS` in the suite's root as a user would, in a child process; `pythonpath`
    is put first on the child's module path (for an implementation module made by the test)."""
    junit = tmp_path / f"junit-{os.getpid()}-{len(list(tmp_path.iterdir()))}.xml"
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        "-o",
        "junit_family=xunit1",
        f"--junitxml={junit}",
        *args,
    ]
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(pythonpath), env.get("PYTHONPATH")]))
    result = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env
    )
    outcomes, messages = _parse_junit(junit)
    return SuiteRun(result.returncode, result.stdout + result.stderr, outcomes, messages)


def patched_copy(source: Path, replacements: list[tuple[str, str]], out: Path) -> Path:
    """Write `source` with each (old, new) replaced exactly once to `out`; a replacement that
    does not apply is an error, so a patch cannot silently stop planting its bug."""
    text = source.read_text(encoding="utf-8")
    for old, new in replacements:
        count = text.count(old)
        if count != 1:
            raise AssertionError(f"{source.name}: {old!r} occurs {count} times, expected once")
        text = text.replace(old, new)
    out.write_text(text, encoding="utf-8")
    return out
