"""The docs, messages and comments name files and modules that exist, and name a module of the
package one way, by its import name (docs/layers.md, "How a module is named"); the package
states the names corpus tests and users may import (`tlkv_conformance.__all__`), and the bundled
corpus tests import nothing else."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import tlkv_conformance

from selftest.support import ROOT

PACKAGE = "tlkv_conformance"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CODE_FOLDERS = ("harness", "conformance", "selftest", "generators", "reference", "benchmarks")
CODE = [
    path
    for folder in CODE_FOLDERS
    for path in sorted((ROOT / folder).rglob("*.py"))
    if "grpc_stubs" not in path.parts
] + [ROOT / "conftest.py"]
OTHER = [ROOT / "suite", ROOT / "pyproject.toml", *sorted((ROOT / ".ci").glob("*"))]

# A file in the checkout, by its path.
FILE = re.compile(
    r"(?<![\w./-])((?:harness|selftest|cases|conformance|generators|reference|parity|benchmarks"
    r"|abi|docs)/[\w./-]*\w\.(?:py|pyi|yaml|yml|json|h|c|proto|md))\b"
)
# The examples the docs give of a test id or a file (cases/x.yaml::case).
EXAMPLE_STEMS = {"x", "test_x"}
# Names that look like a file of the checkout and are not one, with why.
NOT_FILES = {
    "reference/grpc_server/tl_kv_v1.proto": "the name of a descriptor the server builds in memory",
}
MODULE = re.compile(rf"\b{PACKAGE}(?:\.\w+)+")
# A module of the package by its file or by a mix of file and import name: never.
MODULE_BY_PATH = re.compile(r"(?<![\w./-])harness(?:/[\w/]+\.py\b|\.[a-z_])")
# In the docs, the bundled references and generators too (they are modules of the package).
DOCS_MODULE_BY_PATH = re.compile(r"(?<![\w./-])(?:reference|generators)/[\w/]+\.py\b")


def _lines(paths: list[Path]) -> list[tuple[str, str]]:
    """Each line as (where, text)."""
    return [
        (f"{path.relative_to(ROOT)}:{number}", line)
        for path in paths
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
    ]


def _package_dirs() -> dict[str, Path]:
    """pyproject.toml's [tool.setuptools.package-dir]: import name -> checkout folder."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    table = text.split("[tool.setuptools.package-dir]", 1)[1].split("\n[", 1)[0]
    pairs = re.findall(r'^"?([\w.]+)"?\s*=\s*"([\w/]+)"', table, re.MULTILINE)
    assert pairs, "pyproject.toml maps no package to a folder"
    return {name: ROOT / folder for name, folder in pairs}


def _module_exists(name: str, package_dirs: dict[str, Path]) -> bool:
    """Whether `name` is a module or package of the checkout (data packages included), or a
    name defined in one."""
    package = max(
        (p for p in package_dirs if name == p or name.startswith(p + ".")), key=len, default=None
    )
    if package is None:
        return False
    folder, rest = (
        package_dirs[package],
        name[len(package) + 1 :].split(".") if name != package else [],
    )
    module = package.split(".")
    for index, part in enumerate(rest):
        if (folder / part).is_dir():
            folder, module = folder / part, [*module, part]
            continue
        attributes = rest[index:]
        if (folder / f"{part}.py").is_file():
            module, attributes = [*module, part], rest[index + 1 :]
        value: object = importlib.import_module(".".join(module))
        for attribute in attributes:
            if not hasattr(value, attribute):
                return False
            value = getattr(value, attribute)
        return True
    return True


def test_every_named_file_exists() -> None:
    missing = [
        f"{where}: {name}"
        for where, line in _lines(DOCS + CODE + OTHER)
        for name in FILE.findall(line)
        if Path(name).stem not in EXAMPLE_STEMS
        and name not in NOT_FILES
        and not (ROOT / name).exists()
    ]
    assert missing == []


def test_every_named_module_exists() -> None:
    package_dirs = _package_dirs()
    missing = [
        f"{where}: {name}"
        for where, line in _lines(DOCS + CODE + OTHER)
        for name in MODULE.findall(line)
        if not _module_exists(name, package_dirs)
    ]
    assert missing == []


def test_the_check_finds_what_is_missing() -> None:
    """The checks above can fail: a module, a name in one, a file that are not there, and a
    module named by its path."""
    package_dirs = _package_dirs()
    assert _module_exists(f"{PACKAGE}.diff.NAN_POLICIES", package_dirs)
    assert _module_exists(f"{PACKAGE}.abi", package_dirs)  # a data package: no __init__.py
    assert not _module_exists(f"{PACKAGE}.cases._transfer", package_dirs)
    assert not _module_exists(f"{PACKAGE}.diff.NAN_POLICY", package_dirs)
    stale = "harness/cases/_transfer" + ".py"  # split, so that this file names no such file
    assert FILE.findall(f"(`{stale}`)") == [stale]
    assert MODULE_BY_PATH.search(f"(`{stale}`)")
    assert MODULE_BY_PATH.search("harness" + ".diff.NAN_POLICIES")
    assert not MODULE_BY_PATH.search(f"`{PACKAGE}.diff.NAN_POLICIES`, harness/requirements.yaml")


def test_a_module_is_named_by_its_import_name() -> None:
    by_path = [
        f"{where}: {line.strip()}"
        for where, line in _lines(DOCS + CODE)
        if MODULE_BY_PATH.search(line)
    ]
    by_path += [
        f"{where}: {line.strip()}"
        for where, line in _lines(DOCS)
        if DOCS_MODULE_BY_PATH.search(line)
    ]
    assert by_path == []


def _messages(path: Path) -> list[tuple[int, str]]:
    """The string constants of a module that are not docstrings: what it says to its users."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        if id(node) not in docstrings
    ]


def test_no_message_names_a_path_of_the_checkout() -> None:
    """An installed suite has no harness/ or selftest/ folder: a message naming one sends a pip
    user nowhere."""
    found = [
        f"{path.relative_to(ROOT)}:{line}: {text!r}"
        for path in sorted((ROOT / "harness").rglob("*.py"))
        if "grpc_stubs" not in path.parts
        for line, text in _messages(path)
        if re.search(r"(?<![\w./-])(?:harness|selftest)[/.]\w", text)
    ]
    assert found == []


def test_the_public_names_exist() -> None:
    for name in tlkv_conformance.__all__:
        if name != "__version__":
            importlib.import_module(f"{PACKAGE}.{name}")


def test_corpus_tests_import_only_public_names() -> None:
    """The bundled corpus tests are the example a user's own follow: they import only what the
    package states public."""
    imported = {
        f"{path.name}: {node.module}" if node.module != PACKAGE else f"{path.name}: {alias.name}"
        for path in sorted((ROOT / "conformance").glob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == PACKAGE
        for alias in node.names
    }
    private = sorted(
        entry
        for entry in imported
        if entry.split(": ")[1].removeprefix(f"{PACKAGE}.").split(".")[0]
        not in tlkv_conformance.__all__
    )
    assert private == []


def test_every_cause_id_is_documented() -> None:
    """A cause the diagnosis names (an id given to Cause or KnownMistake as written) is in
    docs/diagnosis.md, where a user reading a report, and a judge of the held-out set, find
    it."""
    declared = {
        (match.group(1), path.name)
        for path in (ROOT / "harness").rglob("*.py")
        for match in re.finditer(
            r'\b(?:Cause|KnownMistake)\(\s*"([a-z0-9][a-z0-9:-]*)"', path.read_text()
        )
    }
    assert len(declared) > 40, declared  # the pattern still finds them
    doc = (ROOT / "docs" / "diagnosis.md").read_text(encoding="utf-8")
    assert sorted(d for d in declared if f"`{d[0]}" not in doc) == []
