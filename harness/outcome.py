"""One test's outcome as the plugin judged it, one record per reported phase (`TestOutcome`): the
test (`TestIdentity`: its case, requirement ids and level, implementations), what it showed,
its blame and probable causes, its evidence as the report draws it, what the known-failures
list decided, and whether it fails the run. Made once where the test is judged (the plugin's
pytest_runtest_makereport) and read unchanged by the gate, the result log, the known-failures
writer, JUnit and the reports; `as_json` / `from_json` carry it from an xdist worker.

The SHOULD level is applied here, in `TestOutcome.warning`, and nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .diagnosis import Cause

REPORT_ATTRIBUTE = "tlkv_outcome"  # the one attribute the suite adds to pytest's report


@dataclass(frozen=True)
class TestIdentity:
    """A collected test as the report names it, fixed at collection."""

    __test__ = False  # not a test class, whatever its name suggests to pytest

    nodeid: str
    key: str  # its corpus id (cases/x.yaml::case), the same wherever it ran
    roles: tuple[tuple[str, str], ...] = ()  # (impl | producer | consumer, --impl label)
    reqs: tuple[str, ...] = ()  # the requirement ids it cites
    level: str = ""  # MUST or SHOULD; "" for a test citing no requirement

    @property
    def impl(self) -> str:
        """The --impl it ran against, '' for a matrix test (producer, consumer)."""
        return dict(self.roles).get("impl", "")

    def as_json(self) -> dict[str, Any]:
        return {
            "nodeid": self.nodeid,
            "key": self.key,
            "roles": [list(role) for role in self.roles],
            "reqs": list(self.reqs),
            "level": self.level,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TestIdentity:
        return cls(
            data["nodeid"],
            data["key"],
            tuple((str(role), str(label)) for role, label in data["roles"]),
            tuple(data["reqs"]),
            data["level"],
        )


@dataclass(frozen=True)
class TestOutcome:
    """One phase (setup, call, teardown) of one test, judged."""

    __test__ = False

    test: TestIdentity
    when: str
    # What pytest reported for the phase before the suite's own decisions (the known-failures
    # list, the SHOULD level): passed, failed or skipped (pytest's xfail already applied).
    outcome: str
    wasxfail: bool = False  # an expected failure (pytest's xfail, a covering known failure)
    xfail_marked: bool = False  # the test carries an xfail marker
    strict: bool = False  # the run's --strict: a SHOULD-level failure fails it
    detail: str = ""  # the failure message or the skip reason
    blamed: tuple[str, ...] = ()  # a failure's requirements whose own bytes or fields differ
    causes: tuple[Cause, ...] = ()  # its probable causes (tlkv_conformance.diagnosis)
    symptom: str = ""  # what it shows when its evidence cannot say why (a valid envelope refused)
    # a skip saying the test means nothing for this implementation (checks.not_applicable)
    not_applicable: bool = False
    view: dict[str, Any] | None = None  # what the HTML report shows of it (failure_view)
    # the known-failures list's decisions on it: (entry source, covered | stale | cited-passed,
    # the test's key), tlkv_conformance.known
    known: tuple[tuple[str, str, str], ...] = ()

    @property
    def failed(self) -> bool:
        return self.outcome == "failed"

    @property
    def should_failure(self) -> bool:
        """A SHOULD requirement failing: the test's own check (its call) failed at SHOULD, and
        the failure was not expected (a covered known failure, an xfail marker: a surprise pass
        is the marker's failure, not the requirement's)."""
        return (
            self.failed
            and self.when == "call"
            and self.test.level == "SHOULD"
            and not self.wasxfail
            and not self.xfail_marked
        )

    @property
    def warning(self) -> bool:
        """The SHOULD level, applied: a SHOULD requirement failing is a warning, neither failing
        the run nor stopping -x, unless --strict."""
        return self.should_failure and not self.strict

    @property
    def reported(self) -> str:
        """The outcome pytest counts: a covered known failure is an expected failure (skipped,
        with wasxfail), a warning passed, anything else as it was."""
        if self.failed and self.wasxfail:
            return "skipped"
        return "passed" if self.warning else self.outcome

    def as_json(self) -> dict[str, Any]:
        return {
            "test": self.test.as_json(),
            "when": self.when,
            "outcome": self.outcome,
            "wasxfail": self.wasxfail,
            "xfail_marked": self.xfail_marked,
            "strict": self.strict,
            "detail": self.detail,
            "blamed": list(self.blamed),
            "causes": [cause.as_json() for cause in self.causes],
            "symptom": self.symptom,
            "not_applicable": self.not_applicable,
            "view": self.view,
            "known": [list(decision) for decision in self.known],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TestOutcome:
        return cls(
            test=TestIdentity.from_json(data["test"]),
            when=data["when"],
            outcome=data["outcome"],
            wasxfail=data["wasxfail"],
            xfail_marked=data["xfail_marked"],
            strict=data["strict"],
            detail=data["detail"],
            blamed=tuple(data["blamed"]),
            causes=tuple(Cause.from_json(cause) for cause in data["causes"]),
            symptom=data["symptom"],
            not_applicable=data["not_applicable"],
            view=data["view"],
            known=tuple((str(s), str(d), str(k)) for s, d, k in data["known"]),
        )


__all__ = ["REPORT_ATTRIBUTE", "TestIdentity", "TestOutcome"]
