"""The run's verdict: the gate, the conformance report, and everything that keeps them honest.

Exit status 0 means the run completed and every MUST held, nothing less. So the gate:
- exits EXIT_NOT_SHOWN (6) from a run without failures that did not show every MUST requirement
  that applies (report.Conformance.not_shown): nothing refuted is not conformant;
- counts SHOULD-level failures as warnings (TestOutcome.warning: the plugin reports them as
  passed, with the failure attached, so they neither fail the run nor stop `-x`/`--maxfail`);
- marks a run that did not finish (SIGINT, SIGTERM, a deadline, `-x`, tests that never ran)
  incomplete: its report says so, no implementation shows PASS, its exit status is not 0;
- writes the report atomically, with a run id, under a lock that keeps concurrent runs from
  replacing each other's report;
- leaves a completion marker for `tlkv-conformance run`, which trusts a status 0 only from a
  run that wrote it (an implementation calling exit(0) in-process cannot fake a verdict).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
import os
import signal
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .exit_status import COMPLETION_ENV, EXIT_INTERNAL, EXIT_NOT_SHOWN
from .known import (
    FailedTest,
    KnownFailure,
    WrittenBy,
    failed_test,
    known_failures_text,
    stale_entries,
)
from .outcome import REPORT_ATTRIBUTE, TestIdentity, TestOutcome
from .report import Conformance, Impl, ResultLog, RunInfo, report_paths
from .report_files import write_reports
from .report_text import closing_lines, terminal_lines

WARNING_CATEGORY = "SHOULD-warning"


class ReportPathError(Exception):
    """The report cannot be written where it was asked for: one line, EXIT_INTERNAL."""


class ReportLock:
    """PATH.lock beside the report, held for the run: a second run writing the same report
    while this one lives is refused (one line), a lock left by a dead run is taken over."""

    def __init__(self, base: Path, run_id: str) -> None:
        self.path = base.with_name(base.name + ".lock")
        self.run_id = run_id
        self.held = False

    def acquire(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ReportPathError(
                f"cannot create the report's folder {self.path.parent}: {exc.strerror}"
            ) from None
        for _ in range(2):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                owner = self._owner()
                if owner is not None:
                    raise pytest.UsageError(
                        f"another run (pid {owner[0]}, run {owner[1]}) is writing the report "
                        f"{self.path.with_suffix('')}: give each run its own --conformance-report"
                    ) from None
                self.path.unlink(missing_ok=True)  # left by a run that died
                continue
            except OSError as exc:
                raise ReportPathError(
                    f"cannot write in {self.path.parent}: {exc.strerror}"
                ) from None
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(f"{os.getpid()} {self.run_id}\n")
            self.held = True
            return

    def _owner(self) -> tuple[int, str] | None:
        try:
            pid_text, run_id = self.path.read_text(encoding="utf-8").split()[:2]
            pid = int(pid_text)
            os.kill(pid, 0)
        except (OSError, ValueError):
            return None
        return pid, run_id

    def release(self) -> None:
        if self.held:
            self.path.unlink(missing_ok=True)
            self.held = False


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def outcome_of(report: pytest.TestReport) -> TestOutcome:
    """The plugin's judgement of a reported phase (`tlkv_conformance.outcome`); for a report
    the plugin did not make (a crashed xdist worker's), what pytest says of it."""
    judged = getattr(report, REPORT_ATTRIBUTE, None)
    if isinstance(judged, TestOutcome):
        return judged
    return TestOutcome(
        TestIdentity(report.nodeid, report.nodeid), report.when or "", report.outcome
    )


class Gate:
    """The run's gate and report, in the process that sees every report (not an xdist
    worker)."""

    def __init__(
        self,
        config: pytest.Config,
        impls: Callable[[], list[Impl]],
        run_settings: dict[str, Any],
        known: list[KnownFailure],
        known_written_by: list[WrittenBy],
        report_base: Path | None,
        deadline: float | None,
        write_known: Path | None,
    ) -> None:
        from . import __version__

        self.config = config
        self.impls = impls
        self.known = known
        self.known_written_by = known_written_by
        self.report_base = report_base
        self.write_known = write_known
        self.run_id = uuid.uuid4().hex[:12]
        self.started = _now()
        self.started_at = time.monotonic()
        self.deadline = deadline
        self.info = RunInfo(
            run_id=self.run_id,
            started=self.started,
            suite_version=__version__,
            settings=run_settings,
        )
        self.log = ResultLog(strict=bool(run_settings.get("strict")))
        self.conformance: Conformance | None = None
        self.written: list[Path] = []
        self.warnings: list[pytest.TestReport] = []
        # per entry: (covered | stale | cited-passed, test), as the plugin decided them
        self.known_outcomes: dict[KnownFailure, list[tuple[str, str]]] = {}
        self.failed_tests: list[FailedTest] = []  # what --write-known-failures covers
        self.stale_lines: list[str] = []
        self._known_by_source = {entry.source: entry for entry in known}
        self.lock = ReportLock(report_base, self.run_id) if report_base else None
        if self.lock:
            self.lock.acquire()
        self._previous_sigterm: Any = None
        if sys.platform != "win32":
            try:
                self._previous_sigterm = signal.signal(signal.SIGTERM, _interrupt)
            except ValueError:  # not the main thread: leave signals alone
                self._previous_sigterm = None

    # -- what the run reports ----------------------------------------------------------------

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        outcome = outcome_of(report)
        self.log.add(outcome)
        if outcome.warning:
            self.warnings.append(report)
        for source, decision, test in outcome.known:
            entry = self._known_by_source.get(source)
            if entry:
                self.known_outcomes.setdefault(entry, []).append((decision, test))
        failure = failed_test(outcome)
        if failure is not None:
            self.failed_tests.append(failure)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.log.add_collection_error(report.nodeid, str(report.longrepr))

    @pytest.hookimpl(tryfirst=True)
    def pytest_report_teststatus(
        self, report: pytest.TestReport
    ) -> tuple[str, str, tuple[str, dict[str, bool]]] | None:
        judged = getattr(report, REPORT_ATTRIBUTE, None)
        if isinstance(judged, TestOutcome) and judged.warning:
            return WARNING_CATEGORY, "W", ("WARNING (SHOULD)", {"yellow": True})
        return None

    # -- the verdict --------------------------------------------------------------------------

    def past_deadline(self) -> bool:
        return self.deadline is not None and time.monotonic() - self.started_at > self.deadline

    def _incomplete_reason(self, session: pytest.Session, ran: int) -> str:
        status = session.exitstatus
        if status == pytest.ExitCode.INTERRUPTED:
            return str(session.shouldstop) if session.shouldstop else "interrupted"
        if session.shouldstop or session.shouldfail:
            return f"stopped early: {session.shouldstop or session.shouldfail}"
        collected = session.testscollected
        if ran < collected:
            return f"{collected - ran} of {collected} tests did not run"
        return ""

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.config.option.collectonly:
            return  # nothing ran, nothing to judge
        results = self.log.results()
        reason = self._incomplete_reason(session, len(results))
        status = int(session.exitstatus)
        if reason and status == 0:
            status = int(pytest.ExitCode.INTERRUPTED)
        stale = stale_entries(self.known, self.known_outcomes)
        for entry, passed in stale:
            more = f" and {len(passed) - 3} more" if len(passed) > 3 else ""
            line = (
                f"stale known failure {entry.shown()} (XPASS(strict)): {', '.join(passed[:3])}"
                f"{more} passed; the bug is fixed, remove the entry"
            )
            self.stale_lines.append(line)
            self.log.add_collection_error("", line)
        if stale and status == 0:
            status = int(pytest.ExitCode.TESTS_FAILED)
        info = dataclasses.replace(
            self.info, complete=not reason, incomplete_reason=reason, finished=_now()
        )
        self.conformance = Conformance.build(self.impls(), self.log, status, info)
        if status == 0 and self.conformance.not_shown:
            status = self.conformance.exit_status = EXIT_NOT_SHOWN
        if self.report_base is not None:
            try:
                self.written = write_reports(self.conformance, self.report_base)
            except OSError as exc:
                print(
                    f"ERROR: cannot write the conformance report {self.report_base}: "
                    f"{exc.strerror or exc}",
                    file=sys.stderr,
                )
                status = EXIT_INTERNAL
        if self.write_known is not None:
            self._write_known_failures()
        if status != session.exitstatus:
            session.exitstatus = _exit_code(status)
            self.conformance.exit_status = status
        _write_completion(self.run_id, status, not reason)

    def _write_known_failures(self) -> None:
        from . import __version__

        assert self.write_known is not None
        builds = {impl.label: impl.fingerprint or impl.identity for impl in self.impls()}
        text = known_failures_text(self.failed_tests, __version__, builds)
        self.write_known.parent.mkdir(parents=True, exist_ok=True)
        self.write_known.write_text(text, encoding="utf-8")

    def _known_list_differences(self) -> list[str]:
        """A list written from another build or suite version: said, not failed (its stale
        or missing entries fail the run on their own)."""
        from . import __version__

        builds = {impl.label: impl.fingerprint or impl.identity for impl in self.impls()}
        return [
            line
            for written_by in self.known_written_by
            for line in written_by.differences(__version__, builds)
        ]

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        for line in self._known_list_differences():
            terminalreporter.write_line(f"WARNING: {line}", yellow=True)
        for line in self.stale_lines:
            terminalreporter.write_line(f"ERROR: {line}", red=True, bold=True)
        if self.warnings:
            terminalreporter.section("SHOULD-level warnings", sep="_", yellow=True)
            for report in self.warnings:
                terminalreporter.write_sep("_", report.nodeid, yellow=True)
                terminalreporter.write_line(str(report.longrepr))
        if self.conformance is None or not self.conformance.conformance_tests:
            return
        terminalreporter.section("TLKV conformance")
        for line in terminal_lines(self.conformance):
            terminalreporter.write_line(line)
        for line in closing_lines(self.conformance, self.written):
            terminalreporter.write_line(line, yellow=True, bold=True)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.lock:
            self.lock.release()
        if self._previous_sigterm is not None:
            signal.signal(signal.SIGTERM, self._previous_sigterm)


def _exit_code(status: int) -> int:
    """pytest's own name for a status it knows; the suite's own (EXIT_NOT_SHOWN) as it is."""
    try:
        return pytest.ExitCode(status)
    except ValueError:
        return status


def _interrupt(signum: int, frame: Any) -> None:
    """SIGTERM as Ctrl-C: pytest stops, the gate writes the report marked incomplete."""
    raise KeyboardInterrupt(f"received {signal.Signals(signum).name}")


def _write_completion(run_id: str, status: int, complete: bool) -> None:
    """For `tlkv-conformance run`: this run reached its verdict (see cli.run_pytest)."""
    path = os.environ.get(COMPLETION_ENV)
    if not path:
        return
    data = {"run_id": run_id, "exit_status": status, "complete": complete}
    # Unwritten, the runner says the run ended without its verdict.
    with contextlib.suppress(OSError):
        Path(path).write_text(json.dumps(data), encoding="utf-8")


__all__ = ["Gate", "ReportPathError", "outcome_of", "report_paths"]
