"""A conformance run's state, kept on pytest's config and items: the stash keys, defined here
once, and the accessors the plugin, the collected items and the corpus tests read it through
(the plugin writes it; nothing imports the plugin)."""

from __future__ import annotations

from pathlib import Path

import pytest

from . import corpus, options
from .adapters import AdapterSettings
from .fuzzing import ShrinkBudget
from .known import KnownFailure, WrittenBy
from .outcome import TestIdentity
from .testee import Testee

# The run's, on config.stash.
ACTIVE = pytest.StashKey[bool]()
TESTEES = pytest.StashKey[list[Testee]]()
KNOWN = pytest.StashKey[list[KnownFailure]]()
KNOWN_WRITTEN_BY = pytest.StashKey[list[WrittenBy]]()
SETTINGS = pytest.StashKey[options.RunSettings]()
STARTED = pytest.StashKey[float]()
SHRINKING = pytest.StashKey[ShrinkBudget]()
PROFILE = pytest.StashKey[str]()
# Each test's, on item.stash: what it is (its case, the requirement ids it checks, their level).
TESTED = pytest.StashKey[TestIdentity]()


def is_active(config: pytest.Config) -> bool:
    """Whether this run is a conformance run: --impl was given, or the ini file names
    implementations (tlkv_impl). Otherwise the plugin stays out of the way."""
    return config.stash.get(ACTIVE, False)


def settings_of(config: pytest.Config) -> options.RunSettings:
    return config.stash[SETTINGS]


def adapter_settings_of(config: pytest.Config) -> AdapterSettings:
    """The run's settings every way in honours (its own and those the suite opens itself,
    the bundled interop references: conformance/test_interop.py)."""
    run = settings_of(config)
    return AdapterSettings(
        call_timeout=run.call_timeout,
        isolation=run.isolation,
        sanitizer_runtime=run.sanitizer_runtime,
        worker_memory=run.worker_memory_mib << 20,
        concurrent_runs=int(getattr(config, "workerinput", {}).get("workercount", 1)),
    )


def testees_of(config: pytest.Config) -> list[Testee]:
    return config.stash.get(TESTEES, [])


def parity_roots(config: pytest.Config) -> list[Path]:
    """The golden-vector roots: the bundled parity/ and every one a user added
    (--parity-root, ini tlkv_parity_root)."""
    roots = [corpus.parity_dir()]
    added = (Path(p).resolve() for p in options.value(config, options.PARITY_ROOT))
    return roots + [r for r in added if r not in roots]


def user_case_dirs(config: pytest.Config) -> list[Path]:
    """The case folders a user added (--cases, ini tlkv_cases), resolved."""
    return [Path(p).resolve() for p in options.value(config, options.CASES)]


__all__ = [
    "ACTIVE",
    "KNOWN",
    "KNOWN_WRITTEN_BY",
    "PROFILE",
    "SETTINGS",
    "SHRINKING",
    "STARTED",
    "TESTED",
    "TESTEES",
    "adapter_settings_of",
    "is_active",
    "parity_roots",
    "settings_of",
    "testees_of",
    "user_case_dirs",
]
