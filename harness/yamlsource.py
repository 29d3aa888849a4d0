"""YAML loading that remembers where each mapping and list started, for one-line errors."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml


class LineDict(dict):
    """A mapping from a YAML file, with the 1-based line it starts on."""

    line: int = 0


class LineList(list):
    """A list from a YAML file, with the 1-based line it starts on."""

    line: int = 0


def file_version(path: Path) -> tuple[Any, ...]:
    """`path` as it is on disk (its resolved name, modification time, size and inode): the key
    of a per-process cache of what was read from it, read again once the file changed."""
    resolved = Path(path).resolve()
    info = resolved.stat()
    return (resolved, info.st_mtime_ns, info.st_size, info.st_ino)


# libyaml's parser when present (the constructors below stay in Python and keep the lines).
_BaseLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _LineLoader(_BaseLoader):  # type: ignore[misc, valid-type]
    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> LineDict:
        self.flatten_mapping(node)  # resolve "<<: *anchor" merges before looking for duplicates
        keys = [self.construct_object(k, deep=True) for k, _ in node.value]
        duplicates = {k for k in keys if keys.count(k) > 1}
        if duplicates:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {sorted(map(str, duplicates))[0]!r}", node.start_mark
            )
        mapping = LineDict(super().construct_mapping(node, deep=True))
        mapping.line = node.start_mark.line + 1
        return mapping

    def construct_sequence(self, node: yaml.SequenceNode, deep: bool = False) -> LineList:
        sequence = LineList(super().construct_sequence(node, deep=True))
        sequence.line = node.start_mark.line + 1
        return sequence


_LineLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _LineLoader.construct_mapping
)
_LineLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _LineLoader.construct_sequence
)


class YamlSourceError(Exception):
    """A YAML file that cannot be used: the message names the file, the line and the problem."""


def load_yaml(path: Path, shown: str | None = None) -> Any:
    """Parse a YAML file into LineDict/LineList; YamlSourceError with file:line on bad syntax.
    `shown` is how messages name the file (default: the path as given)."""
    shown = shown or str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise YamlSourceError(f"{shown}: cannot read: {exc.strerror}") from None
    try:
        refuse_aliases(text)
        return yaml.load(text, Loader=_LineLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{shown}:{mark.line + 1}" if mark else shown
        raise YamlSourceError(f"{where}: invalid YAML: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise YamlSourceError(f"{shown}: invalid YAML: {exc}") from None


def refuse_aliases(text: str) -> None:
    """An alias (*name) can make a few lines expand into gigabytes (a "billion laughs"): the
    suite's YAML files have no use for one, so any is refused before anything is built."""
    for event in yaml.parse(text, Loader=_BaseLoader):
        if isinstance(event, yaml.AliasEvent):
            raise yaml.MarkedYAMLError(
                problem=f"aliases (*{event.anchor}) are not allowed in this file",
                problem_mark=event.start_mark,
            )


def line_of(document: Any, path: Sequence[Any]) -> int:
    """The line of the deepest node along `path` that knows its line (0 if none does)."""
    line = getattr(document, "line", 0)
    node = document
    for key in path:
        try:
            node = node[key]
        except (KeyError, IndexError, TypeError):
            break
        line = getattr(node, "line", line)
    return line
