"""The suite's layers, stated once as import-linter contracts in pyproject.toml, hold; and those
contracts do fail when a lower layer imports a higher one, the plugin is imported, a private
module is imported from outside its package, or two modules import each other (each planted in
a copy of the package)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from selftest.support import ROOT

PACKAGE = "tlkv_conformance"
# The copy's name: another than the installed package's, which its import finder would find first.
COPY = "planted"
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
LAYERS = "Each layer imports only from the layers below it"
NO_PLUGIN = "Nothing imports the plugin"
PRIVATE = "A private module (_name) is imported only from within its package"
ACYCLIC = "No import circle among the modules of one package"
CONTRACTS = (LAYERS, NO_PLUGIN, PRIVATE, ACYCLIC)


def _lint(config: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-logo", "--no-cache", str(config)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _verdicts(output: str) -> dict[str, str]:
    """Each contract's KEPT or BROKEN, as lint-imports's summary says it."""
    found = {}
    for name in CONTRACTS:
        match = re.search(rf"^{re.escape(name)}.*? (KEPT|BROKEN)\b", output, re.MULTILINE)
        found[name] = match.group(1) if match else "not checked"
    return found


def test_the_layers_hold() -> None:
    run = _lint(ROOT / "pyproject.toml", ROOT)
    assert _verdicts(run.stdout) == dict.fromkeys(CONTRACTS, "KEPT"), run.stdout + run.stderr
    assert run.returncode == 0, run.stdout + run.stderr


def _contracts_for_copy() -> str:
    """pyproject.toml's import-linter sections, naming the copy instead of the package."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    sections = re.split(r"^(?=\[)", text, flags=re.MULTILINE)
    ours = [s for s in sections if re.match(r"\[\[?tool\.importlinter[\].]", s)]
    assert ours, "pyproject.toml states no [tool.importlinter] contracts"
    return "".join(ours).replace(PACKAGE, COPY)


def _planted_copy(tmp_path: Path, module: str | None, line: str) -> Path:
    """The package's Python files as the package `planted`, with `line` added to `module`."""
    root = tmp_path / "copy"

    def not_python(folder: str, names: list[str]) -> set[str]:
        return {
            n
            for n in names
            if n.endswith(".pyc") or not (Path(folder, n).is_dir() or n.endswith(".py"))
        }

    shutil.copytree(ROOT / "harness", root / COPY, ignore=not_python)
    if module is not None:
        path = root / COPY / module
        path.write_text(path.read_text(encoding="utf-8") + f"\n{line}\n", encoding="utf-8")
    (root / "contracts.toml").write_text(_contracts_for_copy(), encoding="utf-8")
    return root


# (module the import is planted in, the import, the contracts it breaks)
PLANTED = {
    "nothing planted": (None, "", ()),
    # Up a layer, and no circle: the exit statuses import a renderer.
    "the bottom imports a renderer": ("exit_status.py", "from . import report_json", (LAYERS,)),
    # Up a layer, closing a circle (the report's model reaches the oracle).
    "the oracle imports the report": (
        "oracle/__init__.py",
        "from .. import report",
        (LAYERS, ACYCLIC),
    ),
    "an adapter imports a case kind": (
        "adapters/_base.py",
        "from ..cases.kinds import transfer",
        (LAYERS, ACYCLIC),
    ),
    "diagnosis imports the gate": (
        "diagnosis/_causes.py",
        "from .. import gate",
        (LAYERS, ACYCLIC),
    ),
    # The diagnosis is entered where a test is judged, never from a check or a case kind.
    "a check imports the diagnosis": ("checks.py", "from .diagnosis import attribute", (LAYERS,)),
    # Within one layer, where either may import the other, but not both.
    "the report's model imports the known failures": (
        "report.py",
        "from . import known",
        (ACYCLIC,),
    ),
    "the command's entry imports the plugin": ("__main__.py", "from . import plugin", (NO_PLUGIN,)),
    "the gate imports an adapter's private module": (
        "gate.py",
        "from .adapters._spec import parse_impl",
        (PRIVATE,),
    ),
}


@pytest.mark.parametrize(("module", "line", "broken"), PLANTED.values(), ids=PLANTED.keys())
def test_a_planted_import_breaks_its_contract(
    tmp_path: Path, module: str | None, line: str, broken: tuple[str, ...]
) -> None:
    """The same contracts on a copy of the package: kept as it is, broken by one import
    against them (and only the contract it is against), which the output names."""
    copy = _planted_copy(tmp_path, module, line)
    run = _lint(copy / "contracts.toml", copy)
    expected = {name: "BROKEN" if name in broken else "KEPT" for name in CONTRACTS}
    assert _verdicts(run.stdout) == expected, run.stdout + run.stderr
    assert (run.returncode != 0) == bool(broken), run.stdout + run.stderr
    if module is not None:
        importer = (
            f"{COPY}.{module.removesuffix('.py').removesuffix('/__init__').replace('/', '.')}"
        )
        # named in full, or (a circle) relative to its package
        assert importer in run.stdout or importer.removeprefix(COPY) in run.stdout, run.stdout


def test_the_run_state_is_kept_in_one_module() -> None:
    """The stash keys a run's state is kept under are defined once, in the run-state module
    (which the plugin writes and items and corpus tests read)."""
    package = ROOT / "harness"
    defining = sorted(
        ".".join([PACKAGE, *path.relative_to(package).with_suffix("").parts])
        for path in package.rglob("*.py")
        if "StashKey[" in path.read_text(encoding="utf-8")
    )
    assert defining == [f"{PACKAGE}.runstate"]


# Generated from the service's .proto (grpc_tools.protoc), not written here.
GENERATED_STUBS = {"kv_pb2.py", "kv_pb2_grpc.py"}
MODULE_LINES = 500


def test_no_module_is_over_500_lines() -> None:
    """A module grows past what a reader holds in mind: split it where its contents divide
    (issue 23), before it goes over."""
    long = {
        str(path.relative_to(ROOT)): n
        for path in sorted((ROOT / "harness").rglob("*.py"))
        if path.name not in GENERATED_STUBS
        and (n := len(path.read_text(encoding="utf-8").splitlines())) > MODULE_LINES
    }
    assert not long, f"modules over {MODULE_LINES} lines: {long}"
