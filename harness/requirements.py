"""The requirement list (harness/requirements.yaml): ids, levels, the words they come from, and
the clause of the project's docs (docs/format.md) each one checks."""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from .yamlsource import load_yaml

REQUIREMENTS_FILE = Path(__file__).with_name("requirements.yaml")
LEVELS = ("MUST", "SHOULD")
# The page a bare `clause:` anchor is on; `PAGE.md#anchor` names another page of docs/.
FORMAT_DOC = "format.md"
CLAUSE_PATTERN = re.compile(
    r"(?:(?P<page>[a-z0-9][a-z0-9_-]*\.md)#)?(?P<anchor>[a-z0-9][a-z0-9-]*)"
)


@dataclass(frozen=True)
class Requirement:
    id: str
    level: str
    source: str
    section: str
    text: str
    clause: str  # an anchor in docs/format.md, or PAGE.md#anchor for another page of docs/

    @property
    def is_must(self) -> bool:
        return self.level == "MUST"

    @property
    def clause_page(self) -> str:
        """The page of docs/ the clause is on, e.g. "format.md"."""
        return _clause_parts(self.clause)[0]

    @property
    def clause_anchor(self) -> str:
        """The clause's anchor on that page, without the "#"."""
        return _clause_parts(self.clause)[1]


FIELDS = tuple(f.name for f in dataclasses.fields(Requirement))


def _clause_parts(clause: str) -> tuple[str, str]:
    match = CLAUSE_PATTERN.fullmatch(clause)
    if match is None:
        raise ValueError(f"clause {clause!r} is neither an anchor nor PAGE.md#anchor")
    return match["page"] or FORMAT_DOC, match["anchor"]


def clause_url(req: Requirement, base: str = "docs/") -> str:
    """Where the requirement's clause is written: "docs/format.md#hash-zero-is-one". `base` is
    the docs folder as the reader reaches it (a relative path or a repository URL ending in /)."""
    page, anchor = _clause_parts(req.clause)
    return f"{base}{page}#{anchor}"


def _requirement(entry: object, index: int) -> Requirement:
    if not isinstance(entry, dict):
        raise ValueError(f"{REQUIREMENTS_FILE}: entry {index} is not a mapping")
    name = entry.get("id", f"entry {index}")
    missing = [f for f in FIELDS if f not in entry]
    unknown = sorted(set(entry) - set(FIELDS))
    if missing or unknown:
        problems = [f"missing {', '.join(missing)}"] if missing else []
        problems += [f"unknown {', '.join(unknown)}"] if unknown else []
        raise ValueError(f"{REQUIREMENTS_FILE}: {name}: {'; '.join(problems)}")
    if not all(isinstance(entry[f], str) for f in FIELDS):
        raise ValueError(f"{REQUIREMENTS_FILE}: {name}: every field is a string")
    if CLAUSE_PATTERN.fullmatch(entry["clause"]) is None:
        raise ValueError(
            f"{REQUIREMENTS_FILE}: {name}: clause {entry['clause']!r} is neither an anchor "
            "(of docs/format.md) nor PAGE.md#anchor"
        )
    return Requirement(**entry)


@functools.cache
def requirements() -> dict[str, Requirement]:
    """Every requirement, by id, in the order of the file."""
    entries = load_yaml(REQUIREMENTS_FILE)
    table = {req.id: req for req in (_requirement(e, i) for i, e in enumerate(entries))}
    if len(table) != len(entries):
        raise ValueError(f"{REQUIREMENTS_FILE}: duplicate requirement ids")
    return table


def unknown_ids(ids: Iterable[str]) -> list[str]:
    known = requirements()
    return [i for i in ids if i not in known]


def level_of(ids: Iterable[str]) -> str:
    """A case's level: MUST if any requirement it cites is MUST, else SHOULD."""
    table = requirements()
    return "MUST" if any(table[i].is_must for i in ids) else "SHOULD"
