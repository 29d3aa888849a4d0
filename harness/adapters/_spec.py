"""Parsing --impl values: which implementation, reached which way."""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field

from ..errors import SuiteUsageError
from ..oracle import Geometry

REFERENCE_MODULE = "tlkv_conformance.references.pyref"

ACCEPTED_FORMS = (
    "ref (the bundled Python reference)",
    "py:package.module",
    "ctypes:PATH.so[,status-profile=FILE.yaml]",
    "grpc:HOST:PORT[,shared]",
    "prefill-py:package.module (a prefill client of tl.kv.v1)",
    "prefill-exec:COMMAND (a prefill client's harness process, JSON lines; no comma in COMMAND)",
    "any of them with ,geometry=BxLxHkvxD (the one pool geometry it serves) and ,name=NAME "
    "(the implementation's identity)",
)
# `name` declares which implementation is behind a way in: --impl values of one name are one
# implementation reached different ways, and the report calls out where they disagree.
NAME_OPTION = "name"
# `geometry` declares that the implementation serves pools of one geometry only: the suite
# opens every pool at it, and runs the corpus re-targeted to it (docs/cases.md).
GEOMETRY_OPTION = "geometry"
# `shared` (gRPC): other clients use the server too, so its free-block count is not ours.
SHARED_OPTION = "shared"
_COMMON = frozenset({NAME_OPTION, GEOMETRY_OPTION})
_OPTION_KEYS = {
    "py": _COMMON,
    "ctypes": _COMMON | {"status-profile"},
    "grpc": _COMMON | {SHARED_OPTION},
    "prefill-py": _COMMON,
    "prefill-exec": _COMMON,
}
_FLAGS = frozenset({SHARED_OPTION})  # options given without a value
_DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
_HOST_PORT = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})$")


@dataclass(frozen=True)
class ImplSpec:
    """A parsed --impl value: `kind` is py, ctypes, grpc, prefill-py or prefill-exec; `target` a
    module, path, address or command."""

    text: str
    kind: str
    target: str
    options: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    geometry: Geometry | None = field(default=None, hash=False, compare=False)

    @property
    def label(self) -> str:
        """The short name used in test ids and reports (the --impl text itself)."""
        return self.text

    @property
    def identity(self) -> str:
        """Which implementation is behind this way in: `name=` when given, else the module,
        the library's real path or the address. So `ref` and `py:reference.pyref` are one
        implementation, and a gRPC server backed by a C library is that library only when both
        say the same name=."""
        if NAME_OPTION in self.options:
            return self.options[NAME_OPTION]
        if self.kind == "ctypes":
            return f"ctypes:{os.path.realpath(os.path.expanduser(self.target))}"
        return f"{self.kind}:{self.target}"


def _usage(text: str, problem: str) -> SuiteUsageError:
    return SuiteUsageError(
        f"--impl {text!r}: {problem}; accepted forms: " + ", ".join(ACCEPTED_FORMS)
    )


def parse_impl(text: str) -> ImplSpec:
    """Parse one --impl value, raising SuiteUsageError (one line) when it has no known form."""
    text = text.strip()
    if text == "ref" or text.startswith("ref,"):
        kind, target, option_texts = "py", REFERENCE_MODULE, text.split(",")[1:]
    else:
        kind, sep, rest = text.partition(":")
        if not sep or kind not in _OPTION_KEYS:
            return_error = "unknown kind" if sep else "no kind given"
            raise _usage(text, return_error)
        target, *option_texts = rest.split(",")
    options: dict[str, str] = {}
    for option in option_texts:
        key, eq, value = option.partition("=")
        if not eq and key in _FLAGS & _OPTION_KEYS[kind]:
            options[key] = "yes"
            continue
        if not eq or key not in _OPTION_KEYS[kind]:
            allowed = ", ".join(sorted(_OPTION_KEYS[kind])) or "none"
            raise _usage(text, f"unknown option {option!r} (options for {kind}: {allowed})")
        options[key] = value
    if options.get(NAME_OPTION) == "":
        raise _usage(text, "name= needs a value")
    if kind in ("py", "prefill-py") and not _DOTTED.match(target):
        raise _usage(text, f"{target!r} is not a dotted module name")
    if kind == "ctypes" and not target:
        raise _usage(text, "no library path given")
    if kind == "prefill-exec":
        harness_command(text, target)
    if kind == "grpc":
        match = _HOST_PORT.match(target)
        if not match or not 0 < int(match.group(2)) < 65536:
            raise _usage(text, f"{target!r} is not HOST:PORT")
    geometry = None
    if GEOMETRY_OPTION in options:
        try:
            geometry = Geometry.parse(options[GEOMETRY_OPTION])
        except ValueError as exc:
            raise _usage(text, str(exc)) from None
    return ImplSpec(text, kind, target, options, geometry)


def harness_command(text: str, target: str) -> list[str]:
    """A prefill-exec command split as a POSIX shell would (quotes kept together)."""
    try:
        command = shlex.split(target)
    except ValueError as exc:
        raise _usage(text, f"the command {target!r}: {exc}") from None
    if not command:
        raise _usage(text, "no command given")
    return command
