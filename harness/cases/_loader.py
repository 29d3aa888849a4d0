"""Loading a case file: YAML with lines, the schema, then each case built and confirmed."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema

from ..exprs import DEFAULT_GEOMETRY, BuildTarget, NotApplicable, resolve_geometry
from ..requirements import REQUIREMENTS_FILE, level_of, unknown_ids
from ..yamlsource import LineDict, YamlSourceError, file_version, line_of, load_yaml
from ._sources import CaseDataError, EnvelopeResolver
from .kinds import KINDS, Case, CaseOrigin, FileContext, NotApplicableCase

SCHEMA_FILE = Path(__file__).with_name("case-schema.yaml")


class CaseFileError(Exception):
    """A case file the suite cannot use; the message is one line: file, line, case, problem."""


@functools.cache
def _validator() -> jsonschema.Draft202012Validator:
    schema = load_yaml(SCHEMA_FILE)
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


@dataclass(frozen=True)
class CaseSpec:
    """One case as its file declares it, before it is built for a geometry."""

    raw: Mapping[str, Any]
    origin: CaseOrigin
    where: str  # file:line: case 'id', for messages

    @property
    def id(self) -> str:
        return str(self.raw["id"])


class CaseFile:
    """A checked case file: its cases as declared, built for each geometry they run at.

    Every case is built once at the file's own geometry when the file is loaded (so a broken
    case is an error of the file, whatever is tested); for another geometry under test it is
    built when first asked for, and a case that means nothing there is skipped with the reason.
    """

    def __init__(
        self,
        path: Path,
        title: str,
        document: Mapping[str, Any],
        specs: tuple[CaseSpec, ...],
        root: Path,
        golden_roots: Sequence[Path],
    ) -> None:
        self.path = path
        self.title = title
        self.specs = specs
        self.default = BuildTarget(resolve_geometry(document.get("geometry"), DEFAULT_GEOMETRY))
        self._envelopes = document.get("envelopes", {})
        self._root = root
        self._golden_roots = tuple(golden_roots)
        self.cases = self._build_all(self.default, strict=True)
        # Built strictly at its own geometry, the file's cases are what `cases_for` would build.
        self._built: dict[BuildTarget, tuple[Case, ...]] = {self.default: self.cases}

    def cases_for(self, target: BuildTarget) -> tuple[Case, ...]:
        """The file's cases built for `target` (cached)."""
        if target not in self._built:
            self._built[target] = self._build_all(target, strict=False)
        return self._built[target]

    def _build_all(self, target: BuildTarget, strict: bool) -> tuple[Case, ...]:
        # A salted run (a server keeps blocks) gives each file its own hashes: the same tokens
        # in two files must not name two contents to one server.
        target = target.salted(self.path.name)
        resolver = EnvelopeResolver(self._envelopes, self._root, self._golden_roots, target)
        origins = {id(spec.raw): spec.origin for spec in self.specs}
        ctx = FileContext(resolver=resolver, origin=lambda raw: origins[id(raw)], target=target)
        cases: list[Case] = []
        seen: set[str] = set()
        for spec in self.specs:
            try:
                built = _build_case(spec.raw, ctx)
            except (CaseDataError, NotApplicable, ValueError) as exc:
                if strict:
                    raise CaseFileError(f"{spec.where}: {exc}") from None
                built = [_not_applicable(spec, ctx, target, exc)]
            for case in built:
                if case.id in seen:
                    raise CaseFileError(
                        f"{spec.where}: the id {case.id!r} is used twice in this file"
                    )
                seen.add(case.id)
            cases.extend(built)
        return tuple(cases)


def _not_applicable(spec: CaseSpec, ctx: FileContext, target: BuildTarget, exc: Exception) -> Case:
    reqs = tuple(spec.raw["reqs"])
    return NotApplicableCase(
        id=spec.id,
        reqs=reqs,
        level=spec.raw.get("level", level_of(reqs)),
        doc=spec.raw.get("doc", ""),
        origin=spec.origin,
        reason=f"at the geometry under test ({target.geometry}) this case means nothing: {exc}",
    )


def load_case_file(path: Path, root: Path, golden_roots: Sequence[Path] = ()) -> CaseFile:
    """Load and check a case file and build every case at its own geometry; CaseFileError names
    the first problem."""
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
    specs = tuple(
        CaseSpec(raw, CaseOrigin(path, raw.line, src), f"{shown}:{raw.line}: case {raw['id']!r}")
        for raw, src in zip(raw_cases, sources, strict=True)
    )
    try:
        return CaseFile(path, document.get("title", path.stem), document, specs, root, golden_roots)
    except (NotApplicable, ValueError) as exc:
        raise CaseFileError(f"{shown}: the file's geometry: {exc}") from None


_LOADED: dict[tuple[Any, ...], CaseFile] = {}


def cached_case_file(path: Path, root: Path, golden_roots: Sequence[Path] = ()) -> CaseFile:
    """load_case_file, once per process for a file as it is on disk: a process that runs the
    suite several times (the self-test's zygote, selftest/forkserver.py) loads the corpus once,
    and a file changed since (its size, time or inode) is loaded again."""
    key = (*file_version(path), root, tuple(golden_roots))
    if key not in _LOADED:
        _LOADED[key] = load_case_file(path, root, golden_roots)
    return _LOADED[key]


def _build_case(raw: Mapping[str, Any], ctx: FileContext) -> list[Case]:
    reqs = tuple(raw["reqs"])
    unknown = unknown_ids(reqs)
    if unknown:
        raise CaseDataError(
            f"unknown requirement ids {', '.join(unknown)} (see {REQUIREMENTS_FILE})"
        )
    common = {
        "id": raw["id"],
        "reqs": reqs,
        "level": raw.get("level", level_of(reqs)),
        "doc": raw.get("doc", ""),
        "origin": ctx.origin(raw),
    }
    # ... and each case its own, for the blocks it states itself and the file's envelopes it
    # uses: a case that needs new blocks (filling a pool, counting free blocks) never meets
    # those an earlier case pushed, however the server shares what it holds.
    target = ctx.target.salted(str(raw["id"]))
    ctx = dataclasses.replace(ctx, target=target, resolver=ctx.resolver.for_target(target))
    return KINDS[raw["kind"]].build(raw, common, ctx)


def build_generated_case(
    raw: Mapping[str, Any],
    root: Path,
    envelopes: Mapping[str, Any] | None = None,
    target: BuildTarget | None = None,
    validate: bool = True,
) -> list[Case]:
    """Build a case that no file declares (a fuzzer's), checked like a file's case (its schema
    too, unless `validate` is False: a generator whose specs the schema already admits)."""
    if validate:
        document = {"cases": [raw], **({"envelopes": envelopes} if envelopes else {})}
        error = jsonschema.exceptions.best_match(_validator().iter_errors(document))
        if error is not None:
            raise CaseFileError(f"generated case {raw.get('id')!r}: {_schema_message(error)}")
    origin = CaseOrigin(Path("<generated>"), 1, "", raw)
    target = target or BuildTarget()
    resolver = EnvelopeResolver(envelopes or {}, root, (), target)
    ctx = FileContext(resolver=resolver, origin=lambda _raw: origin, target=target)
    try:
        return _build_case(raw, ctx)
    except (CaseDataError, NotApplicable, ValueError) as exc:
        raise CaseFileError(f"generated case {raw.get('id')!r}: {exc}") from None
