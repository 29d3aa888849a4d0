"""Fixtures for the suite's own tests: running the conformance suite as a user would."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

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


def run_conformance(args: list[str], tmp_path: Path, timeout: float = 600) -> SuiteRun:
    """Run `pytest ARGS` in the suite's root as a user would, in a child process."""
    junit = tmp_path / f"junit-{os.getpid()}-{len(list(tmp_path.iterdir()))}.xml"
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
               "-o", "junit_family=xunit1", f"--junitxml={junit}", *args]
    result = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    outcomes, messages = _parse_junit(junit)
    return SuiteRun(result.returncode, result.stdout + result.stderr, outcomes, messages)


@pytest.fixture
def run_suite(tmp_path: Path) -> Callable[..., SuiteRun]:
    """`run_suite("--impl=...", "cases/hash.yaml")` runs the conformance suite in a subprocess."""

    def run(*args: str, timeout: float = 600) -> SuiteRun:
        return run_conformance(list(args), tmp_path, timeout)

    return run


@pytest.fixture(scope="session")
def reference_library(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """Build (once per session) a variant of the bundled C reference: default, f32, v1only."""
    from reference.clib.build import build_library

    built: dict[tuple[str, bool], Path] = {}

    def get(variant: str = "default", sanitize: bool = False) -> Path:
        key = (variant, sanitize)
        if key not in built:
            out = tmp_path_factory.mktemp(f"lib-{variant}{'-san' if sanitize else ''}")
            built[key] = build_library(out, variant=variant, sanitize=sanitize)
        return built[key]

    return get
