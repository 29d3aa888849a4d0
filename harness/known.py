"""Known failures: engine bugs a team tracks while its gate stays green (docs/cases.md).

An entry names a test (its corpus id, `cases/reader-v1.yaml::crc-big-endian`, or its pytest
node id) or a requirement id, with the reason. A requirement entry covers the failures BLAMED on
that requirement (their own diagnosis, decided when each fails; docs/diagnosis.md), one entry
per engine bug: a failure blamed on several requirements is covered only when every one of them
has an entry. `coverage` decides it, for the gate (the plugin, when a test fails) and for
`--write-known-failures` alike, so a list written from a run covers exactly that run's failures.

An entry's `tests` are the record of what failed: a strict entry one of whose listed tests
passes is stale and fails the run (a test entry: its test passes; a hand-written requirement
entry without `tests`: it covered nothing while a test citing its requirement passed).
"""

from __future__ import annotations

import fnmatch
import glob
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from .errors import SuiteUsageError
from .outcome import TestIdentity, TestOutcome
from .report import test_key
from .requirements import requirements
from .yamlsource import YamlSourceError, load_yaml

ENTRY_KEYS = {"case", "requirement", "reason", "strict", "impl", "tests"}
# A written file: what wrote it, then its entries (a hand-written file may be the list alone).
FILE_KEYS = {"written_by", "entries"}
TODO_REASON = "TODO: the engine bug behind this, and its ticket"
JUDGED_PHASES = ("setup", "call")  # the phases the list judges: a failed teardown is never covered


@dataclass(frozen=True)
class FailedTest:
    """A failed test as a known-failures list sees it, recorded on its report when it fails:
    its ids, the --impl it ran against ('' for a matrix test), the requirements it is blamed
    on (none for a failed setup)."""

    ids: tuple[str, ...]  # its pytest node id, its corpus id, its key
    key: str  # what a written entry lists: its corpus id, the --impl label in it as `*`
    label: str
    blamed: tuple[str, ...]

    @classmethod
    def of(cls, test: TestIdentity, blamed: tuple[str, ...]) -> FailedTest:
        ids, key = known_ids(test.nodeid, test.key, test.impl)
        return cls(ids, key, test.impl, blamed)


def failed_test(outcome: TestOutcome) -> FailedTest | None:
    """What --write-known-failures lists of a phase: a failed setup or call (the phases the
    list judges, JUDGED_PHASES), covered or not, blamed as it was when it failed."""
    if not outcome.failed or outcome.when not in JUDGED_PHASES:
        return None
    return FailedTest.of(outcome.test, outcome.blamed)


def known_ids(nodeid: str, corpus_id: str, label: str) -> tuple[tuple[str, ...], str]:
    """A test's ids for matching entries, and its key: its corpus id with the --impl label in
    its parameters as `*`, so that a list written against a library at one path applies to
    the same tests of a build at another."""
    key = test_key(corpus_id, label) if label else corpus_id
    return (nodeid, corpus_id, key), key


@dataclass(frozen=True)
class KnownFailure:
    target: str  # a test id, or a requirement id
    is_requirement: bool
    reason: str
    strict: bool
    impl: str  # a glob on the --impl label
    source: str  # file:line, for messages
    tests: tuple[str, ...] = field(default=(), compare=False)  # what failed when it was listed

    def applies_to(self, label: str) -> bool:
        return fnmatch.fnmatchcase(label, self.impl)

    def names(self, ids: Iterable[str]) -> bool:
        """A test entry naming one of these test ids (or the test they parametrize)."""
        return not self.is_requirement and self.target in _with_bases(ids)

    def lists(self, ids: Iterable[str]) -> bool:
        """Whether the entry's record holds this test: a test entry's own test, or one of a
        requirement entry's `tests`."""
        if not self.is_requirement:
            return self.names(ids)
        return bool(set(self.tests) & _with_bases(ids))

    def shown(self) -> str:
        return f"{self.source}: {'requirement ' if self.is_requirement else ''}{self.target}"


def _with_bases(ids: Iterable[str]) -> set[str]:
    return {i for test_id in ids for i in (test_id, test_id.split("[")[0])}


def coverage(
    known: Sequence[KnownFailure], failure: FailedTest
) -> tuple[list[KnownFailure], list[str]]:
    """The entries that cover a failure, and the requirements it is blamed on that no entry
    names. A test entry naming the test covers it alone; otherwise the requirement entries of
    its blamed requirements do, when they name every one (a failure blamed on none needs a
    test entry). The one decision the gate and the writer share: see `covering_entries`."""
    entries = [e for e in known if e.applies_to(failure.label)]
    by_test = [e for e in entries if e.names(failure.ids)]
    if by_test:
        return by_test, []
    by_requirement = [e for e in entries if e.is_requirement and e.target in failure.blamed]
    named = {e.target for e in by_requirement}
    return by_requirement, [r for r in failure.blamed if r not in named]


def covering_entries(known: Sequence[KnownFailure], failure: FailedTest) -> list[KnownFailure]:
    """The entries covering a failure, or none when it is not (all) covered."""
    entries, missing = coverage(known, failure)
    return [] if missing else entries


def listing_entries(
    known: Sequence[KnownFailure], ids: Iterable[str], label: str
) -> list[KnownFailure]:
    """The entries whose record holds a test that just passed: strict ones are stale."""
    ids = tuple(ids)
    return [e for e in known if e.applies_to(label) and e.lists(ids)]


def unlisted_requirement_entries(
    known: Sequence[KnownFailure], cited: Iterable[str], label: str
) -> list[KnownFailure]:
    """Hand-written requirement entries without `tests` whose requirement a passing test
    cites: stale at the end of the run unless they covered a failure in it."""
    cited = set(cited)
    return [
        e
        for e in known
        if e.is_requirement and not e.tests and e.target in cited and e.applies_to(label)
    ]


@dataclass(frozen=True)
class WrittenBy:
    """What a written list records of the run it came from."""

    suite_version: str
    builds: dict[str, str]  # --impl label -> build (file name, size, sha256; or the address)
    source: str  # the file, for messages

    def differences(self, suite_version: str, builds: dict[str, str]) -> list[str]:
        """How this run differs from the one the list was written from (one line each)."""
        lines = []
        if self.suite_version != suite_version:
            lines.append(
                f"known failures {self.source} were written by suite {self.suite_version}, "
                f"this is {suite_version}: tests and their blame may have changed"
            )
        recorded = self.builds
        if len(recorded) == 1 and len(builds) == 1:  # one implementation: its label may move
            recorded = {next(iter(builds)): next(iter(recorded.values()))}
        for label, build in builds.items():
            if label in recorded and recorded[label] != build:
                lines.append(
                    f"known failures {self.source} were written from another build "
                    f"({recorded[label]}); {label} is {build}"
                )
        return lines


@dataclass
class KnownFailures:
    entries: list[KnownFailure] = field(default_factory=list)
    written_by: list[WrittenBy] = field(default_factory=list)


def load_known_failures(paths: Iterable[Path]) -> KnownFailures:
    known = KnownFailures()
    table = requirements()
    for path in map(Path, paths):
        try:
            document = load_yaml(path)
        except YamlSourceError as exc:
            raise SuiteUsageError(str(exc)) from None
        entries = document
        if isinstance(document, dict):
            extra = set(document) - FILE_KEYS
            if extra or not isinstance(document.get("entries"), list):
                raise SuiteUsageError(
                    f"{path}: a known-failures file is a YAML list of entries, or a mapping "
                    "of written_by and entries"
                )
            entries = document["entries"]
            known.written_by.append(_written_by(path, document.get("written_by")))
        if entries is None:
            continue
        if not isinstance(entries, list):
            raise SuiteUsageError(f"{path}: a known-failures file is a YAML list of entries")
        for entry in entries:
            known.entries.append(_entry(path, entry, table))
    return known


def _written_by(path: Path, data: Any) -> WrittenBy:
    if not isinstance(data, dict):
        raise SuiteUsageError(f"{path}: written_by is a mapping (suite_version, builds)")
    builds = data.get("builds") or {}
    if not isinstance(builds, dict):
        raise SuiteUsageError(f"{path}: written_by.builds maps --impl labels to builds")
    return WrittenBy(
        str(data.get("suite_version", "")), {str(k): str(v) for k, v in builds.items()}, str(path)
    )


def _entry(path: Path, entry: Any, table: dict[str, Any]) -> KnownFailure:
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
    tests = entry.get("tests") or []
    if not isinstance(tests, list):
        raise SuiteUsageError(f"{where}: 'tests' is a list of test ids")
    return KnownFailure(
        target,
        named[0] == "requirement",
        str(entry["reason"]),
        bool(entry.get("strict", True)),
        str(entry.get("impl", "*")),
        where,
        tuple(map(str, tests)),
    )


def stale_test_entries(
    known: Sequence[KnownFailure], tests: Iterable[TestIdentity]
) -> list[KnownFailure]:
    """Test entries naming a test that no collected file has any more. A collected test is
    matched on the ids a failure is (known_ids: its key, with the --impl label as `*`, is what
    --write-known-failures lists), and the list is read once, not once per test."""
    ids: set[str] = set()
    files: set[str] = set()
    for test in tests:
        test_ids, _ = known_ids(test.nodeid, test.key, test.impl)
        ids |= _with_bases(test_ids)
        files.update(i.split("::", 1)[0] for i in test_ids)
    return [
        e
        for e in known
        if not e.is_requirement and e.target not in ids and e.target.split("::")[0] in files
    ]


COVERED, STALE, CITED_PASSED = "covered", "stale", "cited-passed"  # an entry's outcome in a test


def stale_entries(
    known: Sequence[KnownFailure], outcomes: dict[KnownFailure, list[tuple[str, str]]]
) -> list[tuple[KnownFailure, list[str]]]:
    """Strict entries that are stale after this run, each with the tests that show it: a
    listed test passed, or (a requirement entry without `tests`) it covered no failure while
    tests citing its requirement passed."""
    stale = []
    for entry in known:
        seen = outcomes.get(entry, [])
        passed = sorted({test for outcome, test in seen if outcome == STALE})
        unlisted = entry.is_requirement and not entry.tests
        if not passed and unlisted and all(outcome != COVERED for outcome, _ in seen):
            passed = sorted({test for outcome, test in seen if outcome == CITED_PASSED})
        if entry.strict and passed:
            stale.append((entry, passed))
    return stale


def written_entries(failures: Iterable[FailedTest], several_impls: bool) -> list[KnownFailure]:
    """The entries `--write-known-failures` writes: for each failure, what `coverage` says is
    missing to cover it (an entry per blamed requirement, per implementation when the run had
    several; a test entry for a failure blamed on none), and the test in the record of every
    entry covering it."""
    written: list[KnownFailure] = []
    for failure in failures:
        impl = glob.escape(failure.label) if several_impls and failure.label else "*"
        entries, missing = coverage(written, failure)
        added = [KnownFailure(r, True, TODO_REASON, True, impl, "") for r in missing]
        if not entries and not missing:
            added = [KnownFailure(failure.key, False, TODO_REASON, True, impl, "")]
        written += added
        recording = {id(e) for e in (*entries, *added)}
        written = [
            replace(e, tests=(*e.tests, failure.key))
            if id(e) in recording and failure.key not in e.tests
            else e
            for e in written
        ]
    return written


def known_failures_text(
    failures: Sequence[FailedTest], suite_version: str, builds: dict[str, str]
) -> str:
    """A known-failures file covering these failures (written_entries), recording the suite
    version and each implementation's build, so that a run of another build says so."""
    entries = []
    for entry in sorted(written_entries(failures, len(builds) > 1), key=_entry_order):
        kind = "requirement" if entry.is_requirement else "case"
        item: dict[str, Any] = {kind: entry.target}
        if entry.impl != "*":
            item["impl"] = entry.impl
        item["reason"] = entry.reason
        item["tests"] = sorted(entry.tests)
        entries.append(item)
    document = {
        "written_by": {"suite_version": suite_version, "builds": dict(sorted(builds.items()))},
        "entries": entries,
    }
    header = (
        "# Known failures written by --write-known-failures: give each entry its reason, then\n"
        "# run with --known-failures FILE. A requirement entry covers the failures blamed on\n"
        "# it; its tests record what failed, and one of them passing makes the entry stale\n"
        "# (the run fails: remove it).\n"
    )
    return header + yaml.safe_dump(document, sort_keys=False, width=100)


def _entry_order(entry: KnownFailure) -> tuple[bool, str, str]:
    return (not entry.is_requirement, entry.impl, entry.target)
