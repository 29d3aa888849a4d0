"""The requirement list (harness/requirements.yaml): ids, levels and the words they come from."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import yaml

REQUIREMENTS_FILE = Path(__file__).with_name("requirements.yaml")
LEVELS = ("MUST", "SHOULD")


@dataclass(frozen=True)
class Requirement:
    id: str
    level: str
    source: str
    section: str
    text: str

    @property
    def is_must(self) -> bool:
        return self.level == "MUST"


@functools.cache
def requirements() -> dict[str, Requirement]:
    """Every requirement, by id, in the order of the file."""
    entries = yaml.safe_load(REQUIREMENTS_FILE.read_text(encoding="utf-8"))
    table = {entry["id"]: Requirement(**entry) for entry in entries}
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
