"""Known failures: engine bugs a team tracks while its gate stays green (docs/cases.md).

An entry names a test (its corpus id, `cases/reader-v1.yaml::crc-big-endian`, or its pytest
node id) or a requirement id (every test citing it: one entry per engine bug, not per test),
with the reason. Listed tests run as expected failures. A strict entry that no longer fails
fails the run, so the list cannot go stale: a test entry when its test passes, a requirement
entry when every test citing it passes. `--write-known-failures FILE` writes a list from a run.
"""

from __future__ import annotations

import fnmatch
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from .errors import SuiteUsageError
from .requirements import requirements
from .yamlsource import YamlSourceError, load_yaml

ENTRY_KEYS = {"case", "requirement", "reason", "strict", "impl", "tests"}


@dataclass(frozen=True)
class KnownFailure:
    target: str  # a test id, or a requirement id
    is_requirement: bool
    reason: str
    strict: bool
    impl: str  # a glob on the --impl label
    source: str  # file:line, for messages

    def matches(self, ids: Iterable[str], reqs: Sequence[str], label: str) -> bool:
        if not fnmatch.fnmatchcase(label, self.impl):
            return False
        if self.is_requirement:
            return self.target in reqs
        return self.target in {i for test_id in ids for i in (test_id, test_id.split("[")[0])}

    def marker(self) -> pytest.MarkDecorator:
        # A requirement entry covers tests that fail and tests that pass alike: its staleness is
        # judged over all of them at the end (stale_requirement_entries), not per test.
        strict = self.strict and not self.is_requirement
        return pytest.mark.xfail(reason=f"known failure: {self.reason}", strict=strict)


def load_known_failures(paths: Iterable[Path]) -> list[KnownFailure]:
    known = []
    table = requirements()
    for path in map(Path, paths):
        try:
            entries = load_yaml(path)
        except YamlSourceError as exc:
            raise SuiteUsageError(str(exc)) from None
        if entries is None:
            continue
        if not isinstance(entries, list):
            raise SuiteUsageError(f"{path}: a known-failures file is a YAML list of entries")
        for entry in entries:
            where = f"{path}:{getattr(entry, 'line', 0)}"
            if not isinstance(entry, dict) or "reason" not in entry:
                raise SuiteUsageError(f"{where}: an entry needs a 'reason'")
            named = [k for k in ("case", "requirement") if k in entry]
            if len(named) != 1:
                raise SuiteUsageError(f"{where}: an entry names one 'case' or one 'requirement'")
            extra = set(entry) - ENTRY_KEYS
            if extra:
                raise SuiteUsageError(f"{where}: unknown keys {', '.join(sorted(extra))}")
            target = str(entry[named[0]])
            if named[0] == "requirement" and target not in table:
                raise SuiteUsageError(f"{where}: no requirement {target!r}")
            known.append(
                KnownFailure(
                    target,
                    named[0] == "requirement",
                    str(entry["reason"]),
                    bool(entry.get("strict", True)),
                    str(entry.get("impl", "*")),
                    where,
                )
            )
    return known


def stale_test_entries(
    known: Sequence[KnownFailure], used: set[KnownFailure], collected_files: set[str]
) -> list[KnownFailure]:
    """Test entries naming a test that no collected file has any more."""
    return [
        e
        for e in known
        if not e.is_requirement and e not in used and e.target.split("::")[0] in collected_files
    ]


def stale_requirement_entries(
    known: Sequence[KnownFailure], outcomes: dict[KnownFailure, list[str]]
) -> list[KnownFailure]:
    """Strict requirement entries whose tests all passed this run: the bug is fixed."""
    return [
        e
        for e in known
        if e.is_requirement
        and e.strict
        and outcomes.get(e)
        and not any(o in ("xfailed", "failed", "error") for o in outcomes[e])
    ]


def known_failures_text(failures: Iterable[tuple[str, str, Sequence[str]]]) -> str:
    """A known-failures file for (impl label, requirement, tests): one entry per requirement
    and implementation, listing the tests it covers (informative: the entry matches by the
    requirement)."""
    grouped: dict[tuple[str, str], list[str]] = defaultdict(list)
    for label, requirement, tests in failures:
        grouped[label, requirement].extend(tests)
    entries = [
        {
            "requirement": requirement,
            "impl": label,
            "reason": "TODO: the engine bug behind this, and its ticket",
            "tests": sorted(set(tests)),
        }
        for (label, requirement), tests in sorted(grouped.items())
    ]
    header = (
        "# Known failures written by --write-known-failures: give each entry its reason, then\n"
        "# run with --known-failures FILE. An entry fails the run once its bug is fixed.\n"
    )
    return header + yaml.safe_dump(entries, sort_keys=False, width=100)
