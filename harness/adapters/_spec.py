"""Parsing --impl values: which implementation, reached which way."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..errors import SuiteUsageError

REFERENCE_MODULE = "reference.pyref"

ACCEPTED_FORMS = (
    "ref (the bundled Python reference)",
    "py:package.module",
    "ctypes:PATH.so[,status-profile=FILE.yaml]",
    "grpc:HOST:PORT[,geometry=BxLxHxD]",
)
_OPTION_KEYS = {
    "py": frozenset(),
    "ctypes": frozenset({"status-profile"}),
    "grpc": frozenset({"geometry"}),
}
_DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
_HOST_PORT = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})$")


@dataclass(frozen=True)
class ImplSpec:
    """A parsed --impl value: `kind` is py, ctypes or grpc; `target` a module, path or address."""

    text: str
    kind: str
    target: str
    options: dict[str, str] = field(default_factory=dict, hash=False, compare=False)

    @property
    def label(self) -> str:
        """The short name used in test ids and reports (the --impl text itself)."""
        return self.text


def _usage(text: str, problem: str) -> SuiteUsageError:
    return SuiteUsageError(
        f"--impl {text!r}: {problem}; accepted forms: " + ", ".join(ACCEPTED_FORMS)
    )


def parse_impl(text: str) -> ImplSpec:
    """Parse one --impl value, raising SuiteUsageError (one line) when it has no known form."""
    text = text.strip()
    if text == "ref":
        return ImplSpec(text, "py", REFERENCE_MODULE)
    kind, sep, rest = text.partition(":")
    if not sep or kind not in _OPTION_KEYS:
        return_error = "unknown kind" if sep else "no kind given"
        raise _usage(text, return_error)
    target, *option_texts = rest.split(",")
    options: dict[str, str] = {}
    for option in option_texts:
        key, eq, value = option.partition("=")
        if not eq or key not in _OPTION_KEYS[kind]:
            allowed = ", ".join(sorted(_OPTION_KEYS[kind])) or "none"
            raise _usage(text, f"unknown option {option!r} (options for {kind}: {allowed})")
        options[key] = value
    if kind == "py" and not _DOTTED.match(target):
        raise _usage(text, f"{target!r} is not a dotted module name")
    if kind == "ctypes" and not target:
        raise _usage(text, "no library path given")
    if kind == "grpc":
        match = _HOST_PORT.match(target)
        if not match or not 0 < int(match.group(2)) < 65536:
            raise _usage(text, f"{target!r} is not HOST:PORT")
    return ImplSpec(text, kind, target, options)
