"""Fixtures for the suite's own tests."""

from __future__ import annotations

import itertools
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from selftest.support import (
    DIRECTED_CASES,
    FAULTY_CASES,
    ROOT,
    SuiteRun,
    outcomes_by_case,
    run_conformance,
    shared_once,
)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "slow: runs the whole conformance suite or more (about 10 s or over)"
    )


# The outermost wrapper: the order after every other plugin's (pytest's own regrouping too).
@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> Iterator[None]:
    # pytest-xdist hands tests to its workers one at a time in this order: the longest first,
    # so that none of them starts last and leaves one worker running it alone at the end.
    # A module's tests then come to a worker apart, so a costly fixture they share is
    # session-scoped: a module-scoped one is made again each time its module comes back.
    result = yield
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
    return result


@pytest.fixture
def run_suite(tmp_path: Path) -> Callable[..., SuiteRun]:
    """`run_suite("--impl=...", "cases/hash.yaml")` runs the conformance suite in a subprocess."""

    def run(
        *args: str, timeout: float = 600, pythonpath: Path | None = None, forked: bool = True
    ) -> SuiteRun:
        return run_conformance(list(args), tmp_path, timeout, pythonpath, forked)

    return run


@pytest.fixture(scope="session")
def reference_library(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """Build (once per session) a variant of the bundled C reference: default, f32, v1only."""
    from tlkv_conformance.references.clib.build import build_library

    built: dict[tuple[str, bool], Path] = {}

    def get(variant: str = "default", sanitize: bool = False) -> Path:
        key = (variant, sanitize)
        if key not in built:
            out = tmp_path_factory.mktemp(f"lib-{variant}{'-san' if sanitize else ''}")
            built[key] = build_library(out, variant=variant, sanitize=sanitize)
        return built[key]

    return get


# The default C build's whole run: the case corpus, the Python conformance tests and the test
# libraries' cases, made once for the self-test and read by selftest/test_ctypes_adapter.py
# (the corpus) and selftest/test_geometry.py (the corpus and the tests).
WHOLE_REFERENCE_RUN = ("cases", "conformance", FAULTY_CASES)


@pytest.fixture(scope="session")
def reference_outcomes(
    tmp_path_factory: pytest.TempPathFactory, reference_library
) -> Callable[..., dict[str, str]]:
    """`reference_outcomes(*paths)`: the outcomes, by case (outcomes_by_case), of the default C
    build through ctypes over `paths`: a part of WHOLE_REFERENCE_RUN, or the directed cases and
    the test libraries' (DIRECTED_CASES, FAULTY_CASES). Each of the two runs is made once for
    the whole self-test, by whichever pytest-xdist worker asks first."""

    def run(paths: tuple[str, ...]) -> dict[str, str]:
        label = f"ctypes:{reference_library('default')}"
        result = run_conformance([f"--impl={label}", *paths], tmp_path_factory.mktemp("ref"))
        assert result.returncode == 0, result.output[-4000:]
        return outcomes_by_case(result, label)

    def outcomes(*paths: str) -> dict[str, str]:
        if paths == (*DIRECTED_CASES, FAULTY_CASES):
            return shared_once(tmp_path_factory, "c-reference-directed", lambda: run(paths))
        assert set(paths) <= set(WHOLE_REFERENCE_RUN), paths
        whole = shared_once(tmp_path_factory, "c-reference-whole", lambda: run(WHOLE_REFERENCE_RUN))
        return {n: o for n, o in whole.items() if n.split("::")[0].startswith(paths)}

    return outcomes


@pytest.fixture
def scratch_cases() -> Iterator[Path]:
    """A case folder of the test's own inside the suite's root (the plugin loads from there),
    where no default run looks: give its files to the suite by path."""
    # Digits only in the name: pytest's -k matches the folders' names too, and a random
    # "v2" in one would select every case in it.
    for attempt in itertools.count():
        folder = ROOT / f".selftest-{os.getpid()}-{attempt}" / "cases"
        try:
            folder.parent.mkdir()
        except FileExistsError:
            continue
        break
    folder.mkdir()
    try:
        yield folder
    finally:
        shutil.rmtree(folder.parent)


# Case files of the test libraries: the ctypes self-tests give them to the suite by path.
collect_ignore = ["faulty/cases"]
