"""Loading a case file: YAML with lines, the schema, then each case built and confirmed."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from ..requirements import level_of, unknown_ids
from ..yamlsource import LineDict, YamlSourceError, line_of, load_yaml
from ._sources import CaseDataError, EnvelopeResolver
from .kinds import KINDS, Case, CaseOrigin, FileContext

SCHEMA_FILE = Path(__file__).with_name("case-schema.yaml")


class CaseFileError(Exception):
    """A case file the suite cannot use; the message is one line: file, line, case, problem."""


@dataclass(frozen=True)
class CaseFile:
    path: Path
    title: str
    cases: tuple[Case, ...]


@functools.cache
def _validator() -> jsonschema.Draft202012Validator:
    schema = yaml.safe_load(SCHEMA_FILE.read_text(encoding="utf-8"))
    return jsonschema.Draft202012Validator(schema)


def _display(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def _case_label(document: Any, error_path: list[Any]) -> str:
    if len(error_path) >= 2 and error_path[0] == "cases":
        try:
            case_id = document["cases"][error_path[1]].get("id")
        except (AttributeError, IndexError, KeyError, TypeError):
            case_id = None
        return f"case {case_id!r}" if case_id else f"case #{error_path[1] + 1}"
    return "file"


def _schema_message(error: jsonschema.ValidationError) -> str:
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
    # An error inside one branch of a oneOf explains more than "is not valid under any".
    if error.context:
        deepest = max(error.context, key=lambda e: len(e.absolute_path))
        if len(deepest.absolute_path) > len(error.absolute_path):
            return _schema_message(deepest)
    return f"{error.message} (at {where.lstrip('.') or 'top level'})"


def _case_sources(text: str, starts: list[int]) -> list[str]:
    lines = text.splitlines()
    bounds = [*starts[1:], len(lines) + 1]
    sources = []
    for start, end in zip(starts, bounds, strict=True):
        block = lines[start - 1 : end - 1]
        while block and (not block[-1].strip() or block[-1].lstrip().startswith("#")):
            block.pop()
        sources.append("\n".join(block))
    return sources


def load_case_file(path: Path, root: Path) -> CaseFile:
    """Load, check and build every case of a file; CaseFileError names the first problem."""
    shown = _display(path, root)
    try:
        document = load_yaml(path, shown)
    except YamlSourceError as exc:
        raise CaseFileError(str(exc)) from None
    if not isinstance(document, LineDict):
        raise CaseFileError(f"{shown}: a case file is a mapping with a 'cases' list")
    error = jsonschema.exceptions.best_match(_validator().iter_errors(document))
    if error is not None:
        error_path = list(error.absolute_path)
        line = line_of(document, error_path)
        raise CaseFileError(
            f"{shown}:{line}: {_case_label(document, error_path)}: {_schema_message(error)}"
        )
    raw_cases = document["cases"]
    text = path.read_text(encoding="utf-8")
    sources = _case_sources(text, [raw.line for raw in raw_cases])
    origins = {
        id(raw): CaseOrigin(path, raw.line, src)
        for raw, src in zip(raw_cases, sources, strict=True)
    }
    ctx = FileContext(
        resolver=EnvelopeResolver(document.get("envelopes", {}), root),
        origin=lambda raw: origins[id(raw)],
    )
    cases: list[Case] = []
    seen: set[str] = set()
    for raw in raw_cases:
        where = f"{shown}:{raw.line}: case {raw['id']!r}"
        try:
            built = _build_case(raw, ctx)
        except (CaseDataError, ValueError) as exc:
            raise CaseFileError(f"{where}: {exc}") from None
        for case in built:
            if case.id in seen:
                raise CaseFileError(f"{where}: the id {case.id!r} is used twice in this file")
            seen.add(case.id)
        cases.extend(built)
    return CaseFile(path, document.get("title", path.stem), tuple(cases))


def _build_case(raw: Mapping[str, Any], ctx: FileContext) -> list[Case]:
    reqs = tuple(raw["reqs"])
    unknown = unknown_ids(reqs)
    if unknown:
        raise CaseDataError(
            f"unknown requirement ids {', '.join(unknown)} (see harness/requirements.yaml)"
        )
    common = {
        "id": raw["id"],
        "reqs": reqs,
        "level": raw.get("level", level_of(reqs)),
        "doc": raw.get("doc", ""),
        "origin": ctx.origin(raw),
    }
    return KINDS[raw["kind"]].build(raw, common, ctx)


def build_generated_case(
    raw: Mapping[str, Any], root: Path, envelopes: Mapping[str, Any] | None = None
) -> list[Case]:
    """Build a case that no file declares (a fuzzer's), checked like a file's case."""
    document = {"cases": [raw], **({"envelopes": envelopes} if envelopes else {})}
    error = jsonschema.exceptions.best_match(_validator().iter_errors(document))
    if error is not None:
        raise CaseFileError(f"generated case {raw.get('id')!r}: {_schema_message(error)}")
    source = yaml.safe_dump(raw, sort_keys=False, default_flow_style=None, width=100)
    origin = CaseOrigin(Path("<generated>"), 1, source.rstrip())
    ctx = FileContext(resolver=EnvelopeResolver(envelopes or {}, root), origin=lambda _raw: origin)
    try:
        return _build_case(raw, ctx)
    except (CaseDataError, ValueError) as exc:
        raise CaseFileError(f"generated case {raw.get('id')!r}: {exc}") from None
