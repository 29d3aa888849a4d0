"""The pytest plugin: options, the implementations under test, YAML case collection, and the
gate: SHOULD-level failures as warnings, the conformance report (harness/report.py).

Loaded by the suite's top-level conftest.py. Every option has an ini twin of the same meaning.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hypothesis
import pytest

from .adapters import AdapterSettings, open_adapter, parse_impl
from .cases import Case, CaseFileError, load_case_file
from .checks import CaseFailure, calls_to_testee
from .errors import ImplementationFault, Refused, SuiteUsageError
from .fuzzing import FuzzRecorder, case_file_text, regression_case, write_regression
from .profiles import DEFAULT_PROFILE
from .report import (
    Conformance,
    Impl,
    Phase,
    ResultLog,
    gate_exit_status,
    is_should_failure,
    is_warning,
    report_paths,
    warning_note,
)
from .requirements import level_of, unknown_ids
from .testee import Testee
from .yamlsource import YamlSourceError, load_yaml

GROUP = "tlkv"

IMPL_OPTION = "--impl"
IMPL_INI = "tlkv_impl"
IMPL_HELP = (
    "implementation under test; repeat for several: ref (the bundled Python reference, the "
    "default), py:package.module, ctypes:PATH.so[,status-profile=FILE], grpc:HOST:PORT"
)
V2_LEVEL_OPTION = "--v2-level"
V2_LEVEL_INI = "tlkv_v2_level"
V2_LEVEL_HELP = (
    "how v2 exports are compared: strict (byte-exact, the default) or tolerant (each e4m3 "
    "element within one code; header, hashes, fills, scales and CRC validity exact)"
)
TIMEOUT_OPTION = "--call-timeout"
TIMEOUT_INI = "tlkv_call_timeout"
TIMEOUT_HELP = "seconds one call into an isolated implementation may take (default 10)"
ISOLATION_OPTION = "--isolation"
ISOLATION_INI = "tlkv_isolation"
ISOLATION_HELP = (
    "worker (the default: a C library runs in a child process, so a crash or hang fails one "
    "case) or inprocess (for debugging)"
)
SANITIZER_RUNTIME_OPTION = "--sanitizer-runtime"
SANITIZER_RUNTIME_INI = "tlkv_sanitizer_runtime"
SANITIZER_RUNTIME_HELP = (
    "sanitizer runtimes to LD_PRELOAD into a ctypes worker: auto (the default: those the "
    "library names in DT_NEEDED, e.g. libasan.so.8), none, or PATH[:PATH...] (docs/ctypes.md)"
)
KNOWN_FAILURES_OPTION = "--known-failures"
KNOWN_FAILURES_INI = "tlkv_known_failures"
KNOWN_FAILURES_HELP = (
    "YAML list of known failures (case, reason, strict, optional impl glob); listed cases run "
    "as expected failures, and a stale entry fails the run"
)
REQS_OPTION = "--reqs"
REQS_INI = "tlkv_reqs"
REQS_HELP = "run only tests citing one of these requirement ids (comma-separated; repeatable)"
SKIP_REQS_OPTION = "--skip-reqs"
SKIP_REQS_INI = "tlkv_skip_reqs"
SKIP_REQS_HELP = "deselect tests citing any of these requirement ids (comma-separated; repeatable)"
PARITY_ROOT_OPTION = "--parity-root"
PARITY_ROOT_INI = "tlkv_parity_root"
PARITY_ROOT_HELP = (
    "folder whose subfolders hold golden vectors (a manifest.yaml and its blobs) for "
    "conformance/test_parity.py (default: parity, under the suite's root)"
)

CONFORMANCE_REPORT_OPTION = "--conformance-report"
CONFORMANCE_REPORT_INI = "tlkv_conformance_report"
CONFORMANCE_REPORT_HELP = (
    "write the conformance report (each requirement's verdict per implementation, the "
    "cross-implementation matrix) to PATH.md and PATH.json (docs/report.md)"
)
# pytest >= 9 owns --strict ("enables all strictness options", its ini key `strict`); the suite
# reads it as one more strictness: SHOULD-level failures fail the run instead of warning.
STRICT_OPTION = "--strict"
STRICT_INI = "tlkv_strict"
STRICT_HELP = (
    "SHOULD-level failures fail the run (exit status 1) instead of being warnings; pytest's "
    "own --strict (or its ini key strict) turns this on too"
)

WRITE_REGRESSIONS_OPTION = "--write-regressions"
WRITE_REGRESSIONS_INI = "tlkv_write_regressions"
WRITE_REGRESSIONS_HELP = (
    "write each fuzzing failure's minimal example as a YAML case into cases/regressions/ "
    "(it is printed in the failure report either way)"
)

CASE_DIR_NAME = "cases"
TESTEES = pytest.StashKey[list[Testee]]()
KNOWN = pytest.StashKey["list[KnownFailure]"]()
GATE_PLUGIN = "tlkv-gate"
SHOULD_FAILURE_PROPERTY = "should_failure"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup(GROUP, "TLKV conformance")
    group.addoption(IMPL_OPTION, action="append", dest="tlkv_impl", help=IMPL_HELP)
    parser.addini(IMPL_INI, IMPL_HELP, type="linelist", default=["ref"])
    group.addoption(
        V2_LEVEL_OPTION, dest="tlkv_v2_level", choices=("strict", "tolerant"), help=V2_LEVEL_HELP
    )
    parser.addini(V2_LEVEL_INI, V2_LEVEL_HELP, default="strict")
    group.addoption(TIMEOUT_OPTION, dest="tlkv_call_timeout", type=float, help=TIMEOUT_HELP)
    parser.addini(TIMEOUT_INI, TIMEOUT_HELP, default="10")
    group.addoption(
        ISOLATION_OPTION,
        dest="tlkv_isolation",
        choices=("worker", "inprocess"),
        help=ISOLATION_HELP,
    )
    parser.addini(ISOLATION_INI, ISOLATION_HELP, default="worker")
    group.addoption(
        SANITIZER_RUNTIME_OPTION, dest="tlkv_sanitizer_runtime", help=SANITIZER_RUNTIME_HELP
    )
    parser.addini(SANITIZER_RUNTIME_INI, SANITIZER_RUNTIME_HELP, default="auto")
    group.addoption(
        KNOWN_FAILURES_OPTION, dest="tlkv_known_failures", action="append", help=KNOWN_FAILURES_HELP
    )
    parser.addini(KNOWN_FAILURES_INI, KNOWN_FAILURES_HELP, type="paths", default=[])
    group.addoption(REQS_OPTION, dest="tlkv_reqs", action="append", help=REQS_HELP)
    parser.addini(REQS_INI, REQS_HELP, type="args", default=[])
    group.addoption(SKIP_REQS_OPTION, dest="tlkv_skip_reqs", action="append", help=SKIP_REQS_HELP)
    parser.addini(SKIP_REQS_INI, SKIP_REQS_HELP, type="args", default=[])
    group.addoption(PARITY_ROOT_OPTION, dest="tlkv_parity_root", help=PARITY_ROOT_HELP)
    parser.addini(PARITY_ROOT_INI, PARITY_ROOT_HELP, default="parity")
    group.addoption(
        CONFORMANCE_REPORT_OPTION,
        dest="tlkv_conformance_report",
        metavar="PATH",
        help=CONFORMANCE_REPORT_HELP,
    )
    parser.addini(CONFORMANCE_REPORT_INI, CONFORMANCE_REPORT_HELP, default="")
    # The command-line flag is pytest's own STRICT_OPTION (see above): only the ini twin is ours.
    parser.addini(STRICT_INI, STRICT_HELP, type="bool", default=False)

    group.addoption(
        WRITE_REGRESSIONS_OPTION,
        dest="tlkv_write_regressions",
        action="store_true",
        default=None,
        help=WRITE_REGRESSIONS_HELP,
    )
    parser.addini(WRITE_REGRESSIONS_INI, WRITE_REGRESSIONS_HELP, type="bool", default=False)


def _setting(config: pytest.Config, dest: str, ini: str) -> Any:
    value = config.getoption(dest)
    return config.getini(ini) if value is None else value


MARKERS = {
    "v1": "exercises envelope format v1",
    "v2": "exercises envelope format v2 (fp8 e4m3 with scales)",
    "hash": "the block hash",
    "writer": "exporting envelopes",
    "reader": "importing envelopes and the reader rules",
    "pool": "pool behaviour: writes, references, the hash registry",
    "transfer": "the tl.kv.v1 gRPC transfer",
    "fuzz": "property tests on drawn inputs (hypothesis; profiles in harness/profiles.py)",
    "reqs(*ids)": "the requirement ids (harness/requirements.yaml) a test checks",
}


def pytest_configure(config: pytest.Config) -> None:
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    if not config.getoption("hypothesis_profile", None):
        hypothesis.settings.load_profile(DEFAULT_PROFILE)
    try:
        v2_level = _setting(config, "tlkv_v2_level", V2_LEVEL_INI)
        if v2_level not in ("strict", "tolerant"):
            raise SuiteUsageError(f"{V2_LEVEL_INI} = {v2_level!r}: expected strict or tolerant")
        settings = AdapterSettings(
            call_timeout=float(_setting(config, "tlkv_call_timeout", TIMEOUT_INI)),
            isolation=_setting(config, "tlkv_isolation", ISOLATION_INI),
            sanitizer_runtime=_setting(config, "tlkv_sanitizer_runtime", SANITIZER_RUNTIME_INI),
        )
        config.stash[KNOWN] = _load_known_failures(config)
        config.stash[TESTEES] = _open_testees(config, settings, v2_level)
    except SuiteUsageError as exc:
        raise pytest.UsageError(str(exc)) from None
    if not _is_worker(config):
        config.pluginmanager.register(_Gate(config), GATE_PLUGIN)


def strict_should(config: pytest.Config) -> bool:
    """Whether SHOULD-level failures fail the run: tlkv_strict, or pytest's own --strict."""
    if config.getini(STRICT_INI):
        return True
    try:
        return bool(config.getini("strict"))  # pytest >= 9: --strict sets this ini key
    except ValueError:
        return bool(config.getoption("strict", False))  # pytest 8: a plain flag


def _report_base(config: pytest.Config) -> Path | None:
    """The conformance report's PATH: the option relative to where pytest was started, the
    ini key relative to the root (as --parity-root)."""
    given = config.getoption("tlkv_conformance_report")
    if given:
        return config.invocation_params.dir / given
    value = config.getini(CONFORMANCE_REPORT_INI)
    return config.rootpath / value if value else None


def _is_worker(config: pytest.Config) -> bool:
    # An xdist worker: the controller receives its reports, so it summarises and reports.
    return hasattr(config, "workerinput")


def _open_testees(config: pytest.Config, settings: AdapterSettings, v2_level: str) -> list[Testee]:
    texts = config.getoption("tlkv_impl") or config.getini(IMPL_INI)
    specs = [parse_impl(text) for text in texts]
    labels = [spec.label for spec in specs]
    if len(set(labels)) != len(labels):
        raise SuiteUsageError(f"--impl given twice: {', '.join(labels)}")
    testees: list[Testee] = []
    try:
        for spec in specs:
            adapter = open_adapter(spec, settings)
            try:
                info = adapter.info()
            except (ImplementationFault, Refused) as exc:
                adapter.close()
                raise SuiteUsageError(
                    f"--impl {spec.label}: describing itself failed: {exc}"
                ) from None
            testees.append(Testee(spec, adapter, info, v2_level))
    except BaseException:
        for testee in testees:
            testee.adapter.close()
        raise
    return testees


def pytest_unconfigure(config: pytest.Config) -> None:
    for testee in config.stash.get(TESTEES, []):
        testee.adapter.close()


def testees_of(config: pytest.Config) -> list[Testee]:
    return config.stash[TESTEES]


def pytest_report_header(config: pytest.Config) -> list[str]:
    lines = [
        f"tlkv: impl {t.label} ({type(t.adapter).__name__}): {t.info.describe()}"
        for t in config.stash.get(TESTEES, [])
    ]
    known = config.stash.get(KNOWN, [])
    lines.append(
        f"tlkv: v2 level {_setting(config, 'tlkv_v2_level', V2_LEVEL_INI)}, isolation "
        f"{_setting(config, 'tlkv_isolation', ISOLATION_INI)}, call timeout "
        f"{_setting(config, 'tlkv_call_timeout', TIMEOUT_INI)} s, sanitizer runtime "
        f"{_setting(config, 'tlkv_sanitizer_runtime', SANITIZER_RUNTIME_INI)}, known failures "
        f"{len(known) or 'none'}"
    )
    base = _report_base(config)
    report = ", ".join(str(p) for p in report_paths(base)) if base else "none"
    should = "fail the run (--strict)" if strict_should(config) else "are warnings (exit 0)"
    lines.append(f"tlkv: SHOULD-level failures {should}; conformance report {report}")
    identities: dict[str, list[str]] = {}
    for testee in config.stash.get(TESTEES, []):
        identities.setdefault(testee.identity, []).append(testee.label)
    lines += [
        f"tlkv: one implementation ({identity}) through {', '.join(labels)}"
        for identity, labels in identities.items()
        if len(labels) > 1
    ]
    return lines


# -- Python tests: the testee fixture and requirement markers -----------------------------


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "testee" in metafunc.fixturenames:
        testees = testees_of(metafunc.config)
        metafunc.parametrize("testee", testees, ids=[t.label for t in testees], scope="session")


def pytest_itemcollected(item: pytest.Item) -> None:
    item.user_properties.extend(_roles(item))
    marker = item.get_closest_marker("reqs")
    if marker is None:
        return
    unknown = unknown_ids(marker.args)
    if unknown:
        raise pytest.UsageError(f"{item.nodeid}: unknown requirement ids {', '.join(unknown)}")
    _record_requirements(item, marker.args, level_of(marker.args))


def _roles(item: pytest.Item) -> list[tuple[str, str]]:
    """Which --impl the test runs against, as JUnit properties and for the report: ("impl",
    label), or ("producer", label) and ("consumer", label) for a matrix test."""
    if isinstance(item, CaseItem):
        return [("impl", item.testee.label)]
    callspec = getattr(item, "callspec", None)
    params = callspec.params if callspec is not None else {}
    roles = {"testee": "impl", "producer": "producer", "consumer": "consumer"}
    return [
        (roles[name], value.label)
        for name, value in params.items()
        if name in roles and isinstance(value, Testee)
    ]


def _record_requirements(item: pytest.Item, reqs: tuple[str, ...], level: str) -> None:
    item.stash[REQS] = (reqs, level)
    item.user_properties.extend(("requirement", r) for r in reqs)
    item.user_properties.append(("level", level))


REQS = pytest.StashKey[tuple[tuple[str, ...], str]]()


# -- YAML cases -------------------------------------------------------------------------------


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if file_path.suffix in (".yaml", ".yml") and CASE_DIR_NAME in file_path.parts[:-1]:
        return CaseFile.from_parent(parent, path=file_path)
    return None


class CaseFile(pytest.File):
    """A YAML case file: one item per case and implementation under test."""

    def collect(self) -> Iterator[CaseItem]:
        loaded = load_case_file(self.path, self.config.rootpath)
        testees = testees_of(self.config)
        for case in loaded.cases:
            for testee in testees:
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
        _record_requirements(self, case.reqs, case.level)

    def setup(self) -> None:
        reason = self.case.skip_reason(self.testee)
        if reason:
            pytest.skip(reason)

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
            f"{self.config.rootpath and _rel(origin.file, self.config.rootpath)}:{origin.line}:"
        )
        source = "\n".join(f"    {line}" for line in origin.source.splitlines())
        return f"{header}\n{source}\n\n{excinfo.value}"

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, self.case.origin.line - 1, f"case {self.case.id}"


@pytest.fixture
def fuzz_case(request: pytest.FixtureRequest) -> FuzzRecorder:
    """Runs a drawn case spec against the testee; a failing one becomes a regression case."""
    marker = request.node.get_closest_marker("reqs")
    return FuzzRecorder(request.config.rootpath, tuple(marker.args) if marker else ())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    # A skipped case points at its YAML line, not at the plugin line that raised the skip.
    if report.skipped and isinstance(item, CaseItem) and isinstance(report.longrepr, tuple):
        report.longrepr = (str(item.path), item.case.origin.line, report.longrepr[2])
    recorder = getattr(item, "funcargs", {}).get("fuzz_case")
    if report.failed and call.when == "call" and isinstance(recorder, FuzzRecorder):
        failure = str(call.excinfo.value) if call.excinfo else ""
        _report_regression(item, report, recorder, failure)
    if report.failed or report.skipped:
        # The message alone, for the conformance report; an attribute, so that it travels
        # with the report from an xdist worker.
        report.tlkv_detail = _detail(report, call)
    if report.failed and call.when == "call":
        _note_should_failure(item, report)
    return report


def _detail(report: pytest.TestReport, call: pytest.CallInfo[None]) -> str:
    parts = [str(report.wasxfail)] if hasattr(report, "wasxfail") else []
    excinfo = call.excinfo
    if excinfo is not None and not isinstance(excinfo.value, pytest.skip.Exception):
        value = excinfo.value
        parts.append(str(value) if isinstance(value, CaseFailure) else excinfo.exconly())
    elif isinstance(report.longrepr, tuple):  # a skip: (path, line, "Skipped: reason")
        parts.append(str(report.longrepr[2]).removeprefix("Skipped: "))
    elif report.longrepr is not None and not parts:  # e.g. "[XPASS(strict)] reason"
        parts.append(str(report.longrepr))
    return "\n".join(parts)


def _note_should_failure(item: pytest.Item, report: pytest.TestReport) -> None:
    """Say in the failure itself, and in a JUnit property, that a SHOULD requirement failed and
    what that means for the run."""
    reqs, level = item.stash.get(REQS, ((), ""))
    if not is_should_failure(level, "call", item.get_closest_marker("xfail") is not None):
        return
    note = warning_note(reqs, strict_should(item.config))
    if isinstance(report.longrepr, str):
        report.longrepr = f"{report.longrepr}\n\n{note}"
    elif hasattr(report.longrepr, "addsection"):
        report.longrepr.addsection("SHOULD-level failure", note)
    # JUnit takes a test's properties from its teardown report, made after this one.
    item.user_properties.append((SHOULD_FAILURE_PROPERTY, note))


def _report_regression(
    item: pytest.Item, report: pytest.TestReport, recorder: FuzzRecorder, failure: str
) -> None:
    if recorder.last is None:
        return
    testee = item.funcargs.get("testee")  # type: ignore[attr-defined]
    label = testee.label if isinstance(testee, Testee) else "?"
    case = regression_case(recorder.last, item.nodeid, label, failure)
    text = case_file_text(case)
    if _setting(item.config, "tlkv_write_regressions", WRITE_REGRESSIONS_INI):
        path = write_regression(item.config.rootpath, case)
        text = f"# written to {_rel(path, item.config.rootpath)}\n{text}"
    report.sections.append(("regression case (commit it to cases/regressions/)", text))


def _rel(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


# -- known failures ---------------------------------------------------------------------------


@dataclass(frozen=True)
class KnownFailure:
    case: str
    reason: str
    strict: bool
    impl: str
    source: str  # file:line, for messages

    def matches(self, item: pytest.Item, label: str) -> bool:
        base = item.nodeid.split("[", 1)[0]
        return self.case in (item.nodeid, base) and fnmatch.fnmatchcase(label, self.impl)


def _load_known_failures(config: pytest.Config) -> list[KnownFailure]:
    paths = config.getoption("tlkv_known_failures") or config.getini(KNOWN_FAILURES_INI)
    known = []
    for path in map(Path, paths):
        try:
            entries = load_yaml(path)
        except YamlSourceError as exc:
            raise SuiteUsageError(str(exc)) from None
        if not isinstance(entries, list):
            raise SuiteUsageError(f"{path}: a known-failures file is a YAML list of entries")
        for entry in entries:
            where = f"{path}:{getattr(entry, 'line', 0)}"
            if not isinstance(entry, dict) or not {"case", "reason"} <= set(entry):
                raise SuiteUsageError(f"{where}: an entry needs 'case' and 'reason'")
            extra = set(entry) - {"case", "reason", "strict", "impl"}
            if extra:
                raise SuiteUsageError(f"{where}: unknown keys {', '.join(sorted(extra))}")
            known.append(
                KnownFailure(
                    str(entry["case"]),
                    str(entry["reason"]),
                    bool(entry.get("strict", True)),
                    str(entry.get("impl", "*")),
                    where,
                )
            )
    return known


def _item_label(item: pytest.Item) -> str:
    if isinstance(item, CaseItem):
        return item.testee.label
    callspec = getattr(item, "callspec", None)
    testee = callspec.params.get("testee") if callspec else None
    return testee.label if isinstance(testee, Testee) else ""


def _req_ids(config: pytest.Config, dest: str, ini: str) -> set[str]:
    values = config.getoption(dest) or config.getini(ini)
    ids = {part.strip() for value in values for part in value.split(",") if part.strip()}
    unknown = unknown_ids(sorted(ids))
    if unknown:
        raise pytest.UsageError(
            f"unknown requirement ids {', '.join(unknown)} in --reqs/--skip-reqs"
        )
    return ids


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    _mark_known_failures(config, items)  # first: a stale entry is judged on the full list
    _select_by_requirement(config, items)


def _select_by_requirement(config: pytest.Config, items: list[pytest.Item]) -> None:
    wanted = _req_ids(config, "tlkv_reqs", REQS_INI)
    unwanted = _req_ids(config, "tlkv_skip_reqs", SKIP_REQS_INI)
    if not wanted and not unwanted:
        return
    keep, drop = [], []
    for item in items:
        cited = set(item.stash[REQS][0]) if REQS in item.stash else set()
        chosen = (not wanted or cited & wanted) and not cited & unwanted
        (keep if chosen else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def _mark_known_failures(config: pytest.Config, items: list[pytest.Item]) -> None:
    known = config.stash.get(KNOWN, [])
    if not known:
        return
    used: set[KnownFailure] = set()
    for item in items:
        label = _item_label(item)
        for entry in known:
            if entry.matches(item, label):
                used.add(entry)
                item.add_marker(
                    pytest.mark.xfail(reason=f"known failure: {entry.reason}", strict=entry.strict)
                )
    collected_files = {item.nodeid.split("::", 1)[0] for item in items}
    stale = [e for e in known if e not in used and e.case.split("::", 1)[0] in collected_files]
    if stale:
        raise pytest.UsageError(
            "stale known failures (no such case any more): "
            + "; ".join(f"{e.source}: {e.case}" for e in stale)
        )


# -- the gate and the conformance report --------------------------------------------------------


def _phase(report: pytest.TestReport) -> Phase:
    return Phase(
        nodeid=report.nodeid,
        when=report.when or "",
        outcome=report.outcome,
        properties=tuple((str(k), str(v)) for k, v in report.user_properties),
        wasxfail=hasattr(report, "wasxfail"),
        xfail_marked="xfail" in report.keywords,
        detail=getattr(report, "tlkv_detail", "") or "",
    )


class _Gate:
    """The run's gate and report, in the process that sees every report (not an xdist
    worker): collects each phase, forgives SHOULD-level warnings in the exit status, writes
    the conformance report and summarises it in the terminal."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.log = ResultLog(strict=strict_should(config))
        self.conformance: Conformance | None = None
        self.written: list[Path] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.log.add(_phase(report))

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.log.add_collection_error(report.nodeid, str(report.longrepr))

    @pytest.hookimpl(tryfirst=True)
    def pytest_report_teststatus(
        self, report: pytest.TestReport
    ) -> tuple[str, str, tuple[str, dict[str, bool]]] | None:
        # Still a failure (so its details are shown with the others), named for what it is.
        if getattr(report, "when", None) == "call" and report.failed and self._warning(report):
            return "failed", "W", ("FAILED (SHOULD, warning)", {"yellow": True})
        return None

    def _warning(self, report: pytest.TestReport) -> bool:
        level = next((str(v) for k, v in report.user_properties if k == "level"), None)
        return is_warning(level, "call", "xfail" in report.keywords, self.log.strict)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        stopped = bool(session.shouldfail or session.shouldstop)
        status = gate_exit_status(
            int(session.exitstatus), session.testsfailed, self.log.warnings, stopped
        )
        if status != session.exitstatus:
            session.exitstatus = pytest.ExitCode(status)
        testees = self.config.stash.get(TESTEES, [])
        impls = [Impl(t.label, t.identity, t.info.describe()) for t in testees]
        self.conformance = Conformance.build(impls, self.log, status)
        base = _report_base(self.config)
        if base is not None:
            self.written = self.conformance.write(base)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        # Only for runs of conformance tests (not, say, of the suite's own tests).
        if self.conformance is None or not self.conformance.conformance_tests:
            return
        terminalreporter.section("TLKV conformance")
        for line in self.conformance.terminal_lines():
            terminalreporter.write_line(line)
        for line in self.conformance.closing_lines(self.written):
            terminalreporter.write_line(line, yellow=True, bold=True)
