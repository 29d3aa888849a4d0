"""Running fuzzer-drawn case specs, and turning a failing one into a committed regression case."""

from __future__ import annotations

import datetime
import hashlib
import itertools
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hypothesis
import pytest
import yaml

from .cases import build_generated_case
from .checks import CaseFailure, calls_to_testee
from .errors import Quarantined
from .evidence import FaultEvidence
from .exprs import BuildTarget
from .testee import Testee

SERVER_EXAMPLES = 20  # examples a property runs against a server, whose blocks stay
FULL_EXAMPLES_UP_TO = 1 << 18  # block elements up to which a property runs every example
MIN_EXAMPLES = 12
# Every try of a drawn spec (a replay too) is built with a salt of its own: against a server,
# whose blocks stay, it pushes hashes no earlier try pushed, so it meets no state one left.
_TRIES = itertools.count(1)
STATE_DEPENDENT = "answered this input differently the second time: state-dependent"


def examples_for(testee: Testee) -> int:
    """How many examples a property runs against `testee` at most: every one the profile
    draws, except against a server (every block pushed to it stays there for good) and at a
    large geometry (2 MiB blocks), where fewer examples cost as much as the profile's."""
    limit = 1 << 30
    if testee.adapter.keeps_blocks:
        limit = SERVER_EXAMPLES
    if testee.geometry is not None and testee.geometry.n_elements > FULL_EXAMPLES_UP_TO:
        scaled = 60 * FULL_EXAMPLES_UP_TO // testee.geometry.n_elements
        limit = min(limit, max(MIN_EXAMPLES, scaled))
    return limit


@dataclass
class ShrinkBudget:
    """The time the run's property tests may spend shrinking, together: it starts at the first
    failure of any of them. One property failing (a bug only the fuzzer finds) gets it all; an
    engine that fails them all (a wrong CRC everywhere) pays it once, not once per test. Each
    process has its own (an xdist worker, the main process)."""

    seconds: float
    _started: float | None = field(default=None, repr=False)

    def start(self) -> None:
        if self._started is None:
            self._started = time.monotonic()

    @property
    def remaining(self) -> float:
        if self._started is None:
            return self.seconds
        return max(0.0, self.seconds - (time.monotonic() - self._started))

    @property
    def spent(self) -> bool:
        return self.remaining <= 0.0


@dataclass
class FuzzRecorder:
    """Runs each drawn spec as a case and remembers the last one: after a failure, hypothesis
    replays the minimal failing example last, so that is the one reported.

    Shrinking is bounded: once the run's `budget` is spent (or at once, for a failure that does
    not depend on the example), a spec never tried is not run against the testee any more (it
    counts as passing, so hypothesis stops shrinking), and a spec that failed before fails again
    with its recorded failure without calling the testee. A broken implementation (a crash, a
    hang, a wrong CRC everywhere) so ends its property tests in seconds, reporting the smallest
    failing example found in that time; `cut_short` says a smaller one may exist.
    """

    root: Path
    reqs: tuple[str, ...] = ()
    budget: ShrinkBudget = field(default_factory=lambda: ShrinkBudget(3.0))
    last: dict[str, Any] | None = field(default=None, repr=False)
    cut_short: bool = field(default=False, repr=False)
    unobservable: set[str] = field(default_factory=set, repr=False)  # why examples were rejected
    state_dependent: CaseFailure | None = field(default=None, repr=False)
    _failed: bool = field(default=False, repr=False)
    _settled: bool = field(default=False, repr=False)  # failing whatever the example
    _ran: int = field(default=0, repr=False)
    _failures: dict[str, Exception] = field(default_factory=dict, repr=False)
    _passed: set[str] = field(default_factory=set, repr=False)  # specs tried that passed

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        # Hypothesis shows a failing example's arguments, this fixture among them.
        printer.text("fuzz_case")

    def check(self, spec: dict[str, Any], testee: Testee) -> None:
        spec = {"id": "fuzz", "reqs": list(self.reqs), **spec}
        self.last = spec
        key = json.dumps(spec, sort_keys=True, default=repr)
        if key in self._failures:
            raise self._failures[key]
        if self._failed and (self._settled or self.budget.spent):
            self.cut_short = self.cut_short or not self._settled
            return  # not tried: shrinking is over
        self._ran += 1
        if self._ran > examples_for(testee) and not self._failed:
            return  # enough examples at this geometry: the rest pass untried
        try:
            unobservable = self._try(spec, testee)
        except Exception as exc:
            first_failure = not self._failed
            self._failed = True
            self.budget.start()
            # A quarantined call fails whatever the example (docs/ctypes.md): nothing to shrink.
            self._settled = self._settled or _call_not_made(exc)
            if key in self._passed:
                exc = self._differed("passed", exc, testee)
            elif first_failure and not isinstance(getattr(exc, "evidence", None), FaultEvidence):
                exc = self._replayed(spec, testee, exc)
            self._failures[key] = exc
            raise exc from None
        if unobservable is None:
            self._passed.add(key)
        else:
            # This example cannot be observed through this way in; others may be.
            self.unobservable.add(unobservable)
            hypothesis.reject()

    def _try(self, spec: dict[str, Any], testee: Testee) -> str | None:
        """Run the spec's cases; why it cannot be observed this way, or None when it ran."""
        # The strategies draw only specs the schema admits: no validation per example.
        target = testee.build_target(BuildTarget()).salted(f"fuzz try {next(_TRIES)}")
        for case in build_generated_case(spec, self.root, target=target, validate=False):
            unobservable = case.skip_reason(testee)
            if unobservable is not None:
                return unobservable
            try:
                with calls_to_testee():
                    case.run(testee)
            except pytest.skip.Exception as skipped:
                return str(skipped.msg)
        return None

    def _replayed(self, spec: dict[str, Any], testee: Testee, failure: Exception) -> Exception:
        """The first failure of a test, tried once more (with fresh hashes) before anything is
        shrunk: a failure that does not come again is the testee's state, not the input's, and
        is reported as such rather than as hypothesis's flaky replay. (Crashes and hangs are
        not tried again: they are faults whatever comes of a second try.)"""
        try:
            unobservable = self._try(spec, testee)
        except Exception:
            return failure
        second = "passed" if unobservable is None else f"not observable: {unobservable}"
        return self._differed(failure, second, testee)

    def _differed(self, first: object, second: object, testee: Testee) -> CaseFailure:
        """The failure of an input the testee answered one way, then another (its hashes were
        fresh both times): in plain words, with both answers."""
        who = "server" if testee.adapter.keeps_blocks else "implementation"
        failure = CaseFailure(
            f"the {who} {STATE_DEPENDENT}\n  first answer: {_answer(first)}\n"
            f"  second answer: {_answer(second)}",
            getattr(second, "evidence", None) or getattr(first, "evidence", None),
        )
        self.state_dependent = self.state_dependent or failure
        self._settled = True  # what the testee answers next says nothing of the example
        return failure

    def flaky(self, error: BaseException, testee: Testee) -> CaseFailure:
        """What hypothesis found unreliable (an example failing once and passing when replayed,
        or the other way round), as the testee's state-dependent answer."""
        if self.state_dependent is not None:
            return self.state_dependent
        inner = getattr(error, "exceptions", ())
        return self._differed(inner[0] if inner else error, "passed", testee)


def _answer(answer: object) -> str:
    text = str(answer).strip()
    return text.splitlines()[0] if text else type(answer).__name__


def _call_not_made(failure: Exception) -> bool:
    """A failure because the testee's operation is quarantined, not because of the example."""
    evidence = getattr(failure, "evidence", None)
    return isinstance(failure, Quarantined) or (
        isinstance(evidence, FaultEvidence) and evidence.quarantined
    )


def regression_case(
    spec: dict[str, Any], test: str, testee: str, failure: str, blamed: Sequence[str] = ()
) -> dict[str, Any]:
    """The YAML case for a failing spec: its id is a digest of its content, so writing the same
    regression twice changes nothing. It cites the requirements the failure is `blamed` on
    (docs/diagnosis.md), when known, rather than all the property cites."""
    body = {k: v for k, v in spec.items() if k != "id"}
    digest = hashlib.sha256(yaml.safe_dump(body, sort_keys=True).encode()).hexdigest()[:10]
    if blamed:
        body["reqs"] = list(blamed)
    first_line = failure.strip().splitlines()[0] if failure.strip() else "failed"
    today = datetime.date.today().isoformat()
    return {
        "id": f"fuzz-{digest}",
        **{k: v for k, v in body.items() if k in ("kind", "reqs")},
        "doc": f"Found by {test} against {testee} on {today}: {first_line}",
        **{k: v for k, v in body.items() if k not in ("kind", "reqs")},
    }


def case_file_text(case: dict[str, Any]) -> str:
    document = {"title": "A regression found by fuzzing", "cases": [case]}
    return yaml.safe_dump(document, sort_keys=False, default_flow_style=None, width=100)


def write_regression(folder: Path, case: dict[str, Any]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{case['id']}.yaml"
    path.write_text(case_file_text(case), encoding="utf-8")
    return path
