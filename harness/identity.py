"""What a collected test is (TestIdentity, tlkv_conformance.outcome), fixed as pytest collects
it: its corpus id, the implementations it runs against, the requirement ids it cites and their
level; recorded in the item's stash for its outcomes, and as JUnit properties.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from . import corpus
from .items import CaseItem
from .outcome import TestIdentity
from .requirements import level_of, unknown_ids
from .runstate import TESTED, user_case_dirs
from .testee import BundledSide, Testee

KEY_PROPERTY = "tlkv_id"  # the JUnit property holding a test's corpus id


def record_identity(item: pytest.Item) -> None:
    """The test's TestIdentity in its stash (TESTED), and as JUnit properties."""
    roles, key = tuple(_roles(item)), corpus_id(item)
    reqs, level = _requirements(item)
    item.stash[TESTED] = TestIdentity(item.nodeid, key, roles, reqs, level)
    item.user_properties.extend(roles)
    item.user_properties.append((KEY_PROPERTY, key))
    if level:
        item.user_properties.extend(("requirement", r) for r in reqs)
        item.user_properties.append(("level", level))


def corpus_id(item: pytest.Item) -> str:
    """The test's id relative to the corpus it comes from (cases/x.yaml::case, or for a user
    folder FOLDER/x.yaml::case), the same wherever the suite is installed and pytest started."""
    rest = item.nodeid.split("::", 1)[1] if "::" in item.nodeid else item.name
    roots = (corpus.corpus_root(), *(d.parent for d in user_case_dirs(item.config)))
    file = _corpus_file(Path(item.path), roots)
    return item.nodeid if file is None else f"{file}::{rest}"


@functools.cache
def _corpus_file(path: Path, roots: tuple[Path, ...]) -> str | None:
    """`path` relative to the first of `roots` holding it (None: to none); once per file, not
    per test (resolving a path costs a system call per component)."""
    resolved = path.resolve()
    for root in roots:
        if resolved.is_relative_to(root):
            return resolved.relative_to(root).as_posix()
    return None


def _requirements(item: pytest.Item) -> tuple[tuple[str, ...], str]:
    """The requirement ids a test cites and its level; none ((), "") without a reqs marker."""
    if isinstance(item, CaseItem):
        return item.case.reqs, item.case.level
    marker = item.get_closest_marker("reqs")
    if marker is None:
        return (), ""
    unknown = unknown_ids(marker.args)
    if unknown:
        raise pytest.UsageError(f"{item.nodeid}: unknown requirement ids {', '.join(unknown)}")
    return tuple(marker.args), level_of(marker.args)


def _testee_params(item: pytest.Item) -> dict[str, Testee | BundledSide]:
    callspec = getattr(item, "callspec", None)
    params = callspec.params if callspec is not None else {}
    return {
        name: value for name, value in params.items() if isinstance(value, Testee | BundledSide)
    }


def _roles(item: pytest.Item) -> list[tuple[str, str]]:
    """Which --impl the test runs against, as JUnit properties and for the report: ("impl",
    label), or ("producer", label) and ("consumer", label) for a matrix test."""
    if isinstance(item, CaseItem):
        return [("impl", item.testee.label)]
    roles = {"testee": "impl", "producer": "producer", "consumer": "consumer"}
    return [
        (roles[name], testee.label)
        for name, testee in _testee_params(item).items()
        if name in roles
    ]
