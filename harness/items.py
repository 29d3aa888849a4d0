"""YAML case files as pytest collects them: a File per case file, an Item per case and
implementation, whose failure shows the case, its YAML line and what differed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from . import corpus
from .cases import Case, CaseFileError, cached_case_file
from .checks import CaseFailure, calls_to_testee, not_applicable
from .runstate import parity_roots, testees_of
from .testee import Testee
from .yamlsource import YamlSourceError


def display_path(path: Path) -> str:
    """A file as messages name it: relative to the corpus root when it lies there."""
    try:
        return str(Path(path).resolve().relative_to(corpus.corpus_root()))
    except ValueError:
        return str(path)


class CaseFileCollector(pytest.File):
    """A YAML case file: one item per case and implementation under test."""

    def collect(self) -> Iterator[CaseItem]:
        loaded = cached_case_file(self.path, corpus.corpus_root(), parity_roots(self.config)[1:])
        testees = testees_of(self.config)
        for testee in testees:
            # Each implementation gets the file's cases built for the geometry it serves.
            for case in loaded.cases_for(testee.build_target(loaded.default)):
                name = case.id if len(testees) == 1 else f"{case.id}[{testee.label}]"
                yield CaseItem.from_parent(self, name=name, case=case, testee=testee)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException]) -> str:  # type: ignore[override]
        if isinstance(excinfo.value, CaseFileError | YamlSourceError):
            return str(excinfo.value)
        return super().repr_failure(excinfo)


class CaseItem(pytest.Item):
    def __init__(self, *, case: Case, testee: Testee, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.case = case
        self.testee = testee
        for marker in case.item_markers():
            self.add_marker(marker)

    def setup(self) -> None:
        reason = self.case.skip_reason(self.testee)
        if reason:
            not_applicable(reason)

    def runtest(self) -> None:
        with calls_to_testee():
            self.case.run(self.testee)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException]) -> str:  # type: ignore[override]
        if not isinstance(excinfo.value, CaseFailure):
            return super().repr_failure(excinfo)
        origin = self.case.origin
        header = (
            f"case {self.case.id} ({self.case.kind}, {self.case.level}: "
            f"{', '.join(self.case.reqs)}) against {self.testee.label}\n"
            f"{display_path(origin.file)}:{origin.line}:"
        )
        source = "\n".join(f"    {line}" for line in origin.source.splitlines())
        return f"{header}\n{source}\n\n{excinfo.value}"

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, self.case.origin.line - 1, f"case {self.case.id}"
