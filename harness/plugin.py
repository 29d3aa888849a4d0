"""The pytest plugin, loaded by every pytest in the environment through its pytest11 entry
point (`tlkv`) and inert unless a run asks for conformance (--impl, or the ini key tlkv_impl).

It opens the implementations under test, collects the corpus (the bundled one, wherever pytest
was started, plus the user's case folders), judges each test's phases once (a TestOutcome,
tlkv_conformance.outcome: its diagnosis, the known-failures list's decisions, the SHOULD
level), fixes the fuzzing seed, and hands every report, its outcome on it, to the gate
(tlkv_conformance.gate).
Options live in tlkv_conformance.options.
"""

from __future__ import annotations

import platform
import time
from pathlib import Path
from typing import Any

import hypothesis
import hypothesis.errors
import numpy as np
import pytest

from . import corpus, options, profiles
from .adapters import open_adapter, parse_impl
from .checks import not_applicable
from .errors import ImplementationFault, Refused, SuiteUsageError
from .exit_status import EXIT_INTERNAL
from .fuzzing import FuzzRecorder, ShrinkBudget
from .gate import Gate, ReportPathError
from .identity import record_identity
from .items import CaseFileCollector, CaseItem
from .judging import judge_phase
from .known import load_known_failures, stale_test_entries
from .oracle import MAX_CHUNK_PAYLOAD
from .outcome import REPORT_ATTRIBUTE, TestOutcome
from .report import Impl, report_paths
from .requirements import REQUIREMENTS_FILE, unknown_ids
from .runstate import (
    ACTIVE,
    KNOWN,
    KNOWN_WRITTEN_BY,
    PROFILE,
    SETTINGS,
    SHRINKING,
    STARTED,
    TESTED,
    TESTEES,
    adapter_settings_of,
    is_active,
    settings_of,
    testees_of,
    user_case_dirs,
)
from .testee import Testee

CASE_DIR_NAME = "cases"
GATE_PLUGIN = "tlkv-gate"
CORPUS_FOLDERS = (corpus.CASES, corpus.CONFORMANCE)

MARKERS = {
    "v1": "exercises envelope format v1",
    "v2": "exercises envelope format v2 (fp8 e4m3 with scales)",
    "hash": "the block hash",
    "writer": "exporting envelopes",
    "reader": "importing envelopes and the reader rules",
    "pool": "pool behaviour: writes, references, the hash registry",
    "transfer": "the tl.kv.v1 gRPC transfer",
    "prefill": "the prefill side of tl.kv.v1: a prefill client under test (cases/prefill.yaml)",
    "fuzz": "property tests on drawn inputs (hypothesis; --hypothesis-profile, docs/fuzzing.md)",
    "reqs(*ids)": f"the requirement ids ({REQUIREMENTS_FILE}) a test checks",
}


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add_options(parser)


def _is_worker(config: pytest.Config) -> bool:
    # An xdist worker: the controller receives its reports, so it summarises and reports.
    return hasattr(config, "workerinput")


def pytest_configure(config: pytest.Config) -> None:
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    config.stash[ACTIVE] = bool(options.value(config, options.IMPL))
    if not is_active(config):
        return
    config.stash[STARTED] = time.monotonic()
    try:
        run = options.RunSettings.read(config)
        config.stash[SETTINGS] = run
        _choose_corpus(config)
        known = load_known_failures(options.value(config, options.KNOWN_FAILURES))
        config.stash[KNOWN], config.stash[KNOWN_WRITTEN_BY] = known.entries, known.written_by
        config.stash[TESTEES] = _open_testees(config, run)
    except SuiteUsageError as exc:
        raise pytest.UsageError(str(exc)) from None
    profile = config.getoption("hypothesis_profile", None) or profiles.DEFAULT_PROFILE
    config.stash[PROFILE] = profiles.activate(profile, [t.identity for t in testees_of(config)])
    profiles.bound_shrinking(run.fuzz_shrink_seconds)
    config.stash[SHRINKING] = ShrinkBudget(run.fuzz_shrink_seconds)
    if _is_worker(config):
        return
    written = options.value(config, options.WRITE_KNOWN_FAILURES)
    try:
        gate = Gate(
            config,
            lambda: [_report_impl(t) for t in testees_of(config)],
            _recorded_settings(config, run),
            config.stash[KNOWN],
            config.stash[KNOWN_WRITTEN_BY],
            run.report,
            run.run_deadline,
            config.invocation_params.dir / written if written else None,
        )
    except ReportPathError as exc:
        _close_testees(config)
        pytest.exit(f"--conformance-report {run.report}: {exc}", returncode=EXIT_INTERNAL)
    config.pluginmanager.register(gate, GATE_PLUGIN)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """Every xdist worker builds its cases with the run's one hash salt, the one the report
    states (a case runs in one worker, and its file and id keep it apart from the others)."""
    if is_active(node.config):
        node.workerinput[options.HASH_SALT.ini] = settings_of(node.config).salt_text


def _report_impl(testee: Testee) -> Impl:
    """The implementation under test, as the report names it."""
    return Impl(testee.label, testee.identity, testee.describe(), testee.fingerprint())


def _recorded_settings(config: pytest.Config, run: options.RunSettings) -> dict[str, Any]:
    """What the report records to repeat the run: options, fuzzing, the implementations."""
    return {
        **run.as_json(),
        "hypothesis": {
            "profile": config.stash.get(PROFILE, ""),
            "version": hypothesis.__version__,
        },
        "implementations": [t.spec.text for t in testees_of(config)],
        # what the run was asked to show (the gate counts only these: Conformance.not_shown)
        "reqs": sorted(_req_ids(config, options.REQS)),
        "skip_reqs": sorted(_req_ids(config, options.SKIP_REQS)),
        "args": list(config.invocation_params.args),
        # where relative paths in `args` start, and what else chooses the examples drawn
        "invocation_dir": str(config.invocation_params.dir),
        "suite": "checkout" if corpus.is_checkout() else "installed",
        "python": platform.python_version(),
        "numpy": np.__version__,
    }


def _choose_corpus(config: pytest.Config) -> None:
    """Without paths on the command line, a conformance run collects the bundled corpus (and
    the user's case folders), wherever pytest was started."""
    extra = user_case_dirs(config)
    for folder in extra:
        if not folder.is_dir():
            raise SuiteUsageError(f"{options.CASES.flag} {folder}: no such folder")
    if config.args_source != pytest.Config.ArgsSource.ARGS:
        # The corpus root itself, so test ids read cases/x.yaml::case wherever pytest started
        # (pytest names a test outside its rootdir relative to the path it was given);
        # pytest_ignore_collect keeps to its cases/ and conformance/.
        config.args[:] = [str(corpus.corpus_root())]
    config.args.extend(str(folder) for folder in extra if str(folder) not in config.args)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Of the corpus root, collect only cases/ and conformance/ (in a checkout it also holds
    the suite's own tests, the references, the docs)."""
    if not is_active(config) or collection_path.parent != corpus.corpus_root():
        return None
    if str(corpus.corpus_root()) not in config.args:
        return None
    return collection_path.name not in CORPUS_FOLDERS or None


def _open_testees(config: pytest.Config, run: options.RunSettings) -> list[Testee]:
    texts = options.value(config, options.IMPL)
    specs = [parse_impl(text) for text in texts]
    labels = [spec.label for spec in specs]
    if len(set(labels)) != len(labels):
        raise SuiteUsageError(f"--impl given twice: {', '.join(labels)}")
    adapter_settings = adapter_settings_of(config)
    testees: list[Testee] = []
    try:
        for spec in specs:
            adapter = open_adapter(spec, adapter_settings)
            try:
                info = adapter.info()
            except (ImplementationFault, Refused) as exc:
                adapter.close()
                hint = (
                    ""
                    if spec.geometry is not None
                    else "; if it serves one pool geometry only, add ,geometry=BxLxHkvxD to --impl"
                )
                raise SuiteUsageError(
                    f"--impl {spec.label}: describing itself failed: {exc}{hint}"
                ) from None
            testees.append(Testee(spec, adapter, info, run.v2_level, run.hash_salt))
    except BaseException:
        for testee in testees:
            testee.adapter.close()
        raise
    return testees


def _close_testees(config: pytest.Config) -> None:
    for testee in config.stash.get(TESTEES, []):
        testee.adapter.close()
    config.stash[TESTEES] = []


def pytest_unconfigure(config: pytest.Config) -> None:
    _close_testees(config)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """A hypothesis internal the gate relies on that is missing, said once per run."""
    if not is_active(config):
        return
    for missing in profiles.missing_internals():
        terminalreporter.write_line(f"tlkv: WARNING: {missing}", yellow=True, bold=True)


def pytest_report_header(config: pytest.Config) -> list[str]:
    if not is_active(config):
        return []
    run = settings_of(config)
    lines = [
        f"tlkv: impl {t.label} ({type(t.adapter).__name__}): {t.info.describe()}"
        + (f", geometry {t.geometry} only" if t.geometry else "")
        for t in testees_of(config)
    ]
    # tl.kv.v1 moves one block per chunk of at most 4 MiB: at a large geometry that limit is
    # the transport's, not the server's, so it is said once here rather than in every skip.
    chunk = MAX_CHUNK_PAYLOAD
    for t in testees_of(config):
        g = t.geometry
        if t.adapter.status_domain != "grpc" or g is None or g.envelope_size(1, 1) <= chunk:
            continue
        v1, v2 = g.envelope_size(1, 1), g.envelope_size(1, 2)
        if 2 in t.info.read_versions and v2 <= chunk:
            then = "v1 transfer cases are skipped, v2 used where it fits"
        else:
            why = f"v2 is {v2:,} bytes" if v2 > chunk else "the server does not read v2"
            then = f"{why}, so cases that move a block over gRPC are skipped"
        lines.append(
            f"tlkv: a one-block v1 envelope of {g} is {v1:,} bytes, over the 4 MiB gRPC "
            f"chunk: {then}"
        )
    known = config.stash.get(KNOWN, [])
    lines.append(f"tlkv: {run.describe()}, known failures {len(known) or 'none'}")
    lines.append(
        f"tlkv: fuzzing {config.stash.get(PROFILE, '')}, seed {run.fuzz_seed}, shrinking at "
        f"most {run.fuzz_shrink_seconds:g} s in all after the first failure"
    )
    report = ", ".join(str(p) for p in report_paths(run.report)) if run.report else "none"
    should = "fail the run (--strict)" if run.strict else "are warnings (exit 0)"
    lines.append(f"tlkv: SHOULD-level failures {should}; conformance report {report}")
    identities: dict[str, list[str]] = {}
    for testee in testees_of(config):
        identities.setdefault(testee.identity, []).append(testee.label)
    lines += [
        f"tlkv: one implementation ({identity}) through {', '.join(labels)}"
        for identity, labels in identities.items()
        if len(labels) > 1
    ]
    return lines


# -- collection: YAML cases, the testee fixture, requirement markers ---------------------------


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if not is_active(parent.config) or file_path.suffix not in (".yaml", ".yml"):
        return None
    resolved = file_path.resolve()
    roots = [corpus.cases_dir(), *user_case_dirs(parent.config)]
    if any(resolved.is_relative_to(r) for r in roots) or CASE_DIR_NAME in file_path.parts[:-1]:
        return CaseFileCollector.from_parent(parent, path=file_path)
    return None


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "testee" in metafunc.fixturenames:
        testees = testees_of(metafunc.config)
        metafunc.parametrize("testee", testees, ids=[t.label for t in testees], scope="session")


def pytest_itemcollected(item: pytest.Item) -> None:
    """What the test is (TestIdentity), in the item's stash for its outcomes, and as JUnit
    properties (tlkv_conformance.identity)."""
    if is_active(item.config):
        record_identity(item)


def _req_ids(config: pytest.Config, option: options.Option) -> set[str]:
    values = options.value(config, option)
    ids = {part.strip() for value in values for part in value.split(",") if part.strip()}
    unknown = unknown_ids(sorted(ids))
    if unknown:
        raise pytest.UsageError(
            f"unknown requirement ids {', '.join(unknown)} in --reqs/--skip-reqs"
        )
    return ids


# A wrapper: the selection before every other plugin's, the order after theirs (pytest's own
# regrouping by parametrized fixture included, which a run of fewer files would do otherwise).
@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> Any:
    if not is_active(config):
        return (yield)
    _check_known_failures(config, items)  # first: a stale entry is judged on the full list
    _select_by_requirement(config, items)
    _fix_fuzzing_seed(config, items)
    collected = {id(item): position for position, item in enumerate(items)}
    result = yield
    _directed_tests_first(items, collected)
    return result


def _select_by_requirement(config: pytest.Config, items: list[pytest.Item]) -> None:
    wanted = _req_ids(config, options.REQS)
    unwanted = _req_ids(config, options.SKIP_REQS)
    if not wanted and not unwanted:
        return
    keep, drop = [], []
    for item in items:
        cited = set(item.stash[TESTED].reqs)
        chosen = (not wanted or cited & wanted) and not cited & unwanted
        (keep if chosen else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def _check_known_failures(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test entry naming a case that is gone stops the run. Which failures the list covers
    is decided as each test fails (tlkv_conformance.judging), on its blame."""
    known = config.stash.get(KNOWN, [])
    if not known:
        return
    stale = stale_test_entries(known, (item.stash[TESTED] for item in items))
    if stale:
        raise pytest.UsageError(
            "stale known failures (no such case any more): "
            + "; ".join(f"{e.source}: {e.target}" for e in stale)
        )


def _fix_fuzzing_seed(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every property test draws from the run's seed, unless the profile explores."""
    profile = hypothesis.settings.get_current_profile_name().removesuffix("-db")
    if profile in profiles.EXPLORING:
        return
    seed = settings_of(config).fuzz_seed
    seen: set[int] = set()
    for item in items:
        function = getattr(item, "obj", None)
        if function is None or id(function) in seen or not hypothesis.is_hypothesis_test(function):
            continue
        seen.add(id(function))
        hypothesis.seed(seed)(function)


def _directed_tests_first(items: list[pytest.Item], collected: dict[int, int]) -> None:
    """Directed cases and tests run first, then the generated cases (`expand`: thousands of
    prefixes and bit flips), then the property tests: a broken hash or writer fails in its own
    case within seconds, with -x too, before the costly tests that could only fail after it.
    Within each stage, in the order collected (files, then cases): a run of some files runs
    them in the order the whole run does."""

    def stage(item: pytest.Item) -> int:
        if isinstance(item, CaseItem):
            return 1 if item.case.generated else 0
        function = getattr(item, "obj", None)
        return 2 if function is not None and hypothesis.is_hypothesis_test(function) else 0

    items.sort(key=lambda item: (stage(item), collected.get(id(item), len(collected))))


# -- running --------------------------------------------------------------------------------


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
    """Past the run's deadline, nothing more runs: the run stops, incomplete
    (tlkv_conformance.gate)."""
    if not is_active(item.config):
        return None
    deadline = settings_of(item.config).run_deadline
    if deadline is not None and time.monotonic() - item.config.stash[STARTED] > deadline:
        item.session.shouldstop = f"the run deadline of {deadline:g} s passed"
        return True
    return None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    """A property test none of whose examples this way in can observe is skipped, with why;
    one whose testee answered an example differently when it was replayed fails saying so, in
    plain words and with both answers (not hypothesis's Flaky traceback)."""
    try:
        return (yield)
    except hypothesis.errors.Unsatisfiable:
        recorder = getattr(item, "funcargs", {}).get("fuzz_case")
        if isinstance(recorder, FuzzRecorder) and recorder.unobservable:
            not_applicable("; ".join(sorted(recorder.unobservable)[:3]))
        raise
    except (hypothesis.errors.FlakyFailure, hypothesis.errors.FlakyReplay) as flaky:
        recorder = getattr(item, "funcargs", {}).get("fuzz_case")
        testee = getattr(item, "funcargs", {}).get("testee")
        if isinstance(recorder, FuzzRecorder) and isinstance(testee, Testee):
            raise recorder.flaky(flaky, testee) from None
        raise
    except Exception as error:
        # Several distinct failures (an exception group), one of them the testee's state
        # showing: the others may be its consequences, so that is the one reported.
        recorder = getattr(item, "funcargs", {}).get("fuzz_case")
        several = isinstance(getattr(error, "exceptions", None), tuple)
        if several and isinstance(recorder, FuzzRecorder) and recorder.state_dependent:
            raise recorder.state_dependent from None
        raise


@pytest.fixture
def fuzz_case(request: pytest.FixtureRequest) -> FuzzRecorder:
    """Runs a drawn case spec against the testee; a failing one becomes a regression case."""
    marker = request.node.get_closest_marker("reqs")
    budget = request.config.stash[SHRINKING]
    # Hypothesis's own shrinking deadline, read when this test starts shrinking: what is left
    # of the run's (once spent, hypothesis stops at once instead of running examples untried).
    profiles.bound_shrinking(budget.remaining)
    return FuzzRecorder(corpus.corpus_root(), tuple(marker.args) if marker else (), budget)


# tryfirst: the outermost wrapper, so that what it changes comes after hypothesis's section.
@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Each phase judged once: its TestOutcome (tlkv_conformance.outcome), carried on the
    report in one attribute, and the report told what it decided (tlkv_conformance.judging)."""
    report = yield
    if is_active(item.config):
        judge_phase(item, report, call)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_report_to_serializable(report: Any) -> Any:
    """A report leaving an xdist worker: its outcome as JSON."""
    data = yield
    if isinstance(data, dict) and isinstance(data.get(REPORT_ATTRIBUTE), TestOutcome):
        data[REPORT_ATTRIBUTE] = data[REPORT_ATTRIBUTE].as_json()
    return data


@pytest.hookimpl(wrapper=True)
def pytest_report_from_serializable(data: Any) -> Any:
    """A report from an xdist worker: its outcome as the worker judged it."""
    report = yield
    judged = getattr(report, REPORT_ATTRIBUTE, None)
    if isinstance(judged, dict):
        setattr(report, REPORT_ATTRIBUTE, TestOutcome.from_json(judged))
    return report
