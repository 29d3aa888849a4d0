"""The hypothesis internals the gate relies on (tlkv_conformance.profiles) are there, are said once
when missing, and take effect: the same seed draws the same examples whatever source files a
process has loaded, and shrinking stops at the run's budget, saying so in the words the plugin
looks for."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.reporting import with_reporter
from tlkv_conformance import profiles


def test_every_internal_is_there() -> None:
    """Fails when a hypothesis release renames one: the gate would silently lose it."""
    assert profiles.missing_internals() == []


# -- said once when missing ---------------------------------------------------------------------

# Run at the start of the suite's process: this hypothesis without the internals.
_WITHOUT_INTERNALS = """
from hypothesis.internal.conjecture import engine, providers
del engine.MAX_SHRINKING_SECONDS
del providers._get_local_constants
"""


def test_a_missing_internal_is_said_once(run_suite, tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(_WITHOUT_INTERNALS, encoding="utf-8")
    # A fresh interpreter: sitecustomize runs as one starts, before hypothesis is imported.
    run = run_suite("--impl=ref", "cases/hash.yaml", pythonpath=site, forked=False)
    assert run.returncode == 0, run.output[-3000:]  # the run goes on without them
    for name in ("engine.MAX_SHRINKING_SECONDS", "providers._get_local_constants"):
        said = [line for line in run.output.splitlines() if name in line]
        assert len(said) == 1, run.output[-3000:]
        assert said[0].startswith("tlkv: WARNING: hypothesis "), said


# -- the seed alone chooses the examples ------------------------------------------------------

_LOCAL_MODULE = """
VALUES = [31415926, 27182818, 16180339, 14142135, 17320508, 22360679, 26457513, 28284271]
NAMES = ["tlkv-constant-one", "tlkv-constant-two", "tlkv-constant-three"]
RATIOS = [0.314159, 2.718281, 1.618033]
"""
_DRAW = """
import json
import sys

from hypothesis import given, seed, settings, strategies as st

if sys.argv[1] == "gate":
    from tlkv_conformance import profiles

    profiles.activate("gate", [])
if sys.argv[2] == "with":
    import user_constants  # noqa: F401  (a source file of the user's own, as in a checkout)

drawn = []


@seed(0)
@settings(max_examples=100, database=None)
@given(st.integers(), st.text(max_size=24), st.floats())
def collect(i, s, f):
    drawn.append([i, s, repr(f)])


collect()
print(json.dumps(drawn))
"""


def _drawn(folder: Path, pin: str, module: str) -> list:
    result = subprocess.run(
        [sys.executable, str(folder / "draw.py"), pin, module],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(result.stdout)


def test_the_same_seed_draws_the_same_examples_in_any_process(tmp_path: Path) -> None:
    """Two processes, one of which has loaded a source file of its own with constants (as a
    checkout has, and an installed wheel does not): the gate's profile draws the same
    examples in both; hypothesis alone (no profile, so no pin) does not: the pin does it."""
    (tmp_path / "user_constants.py").write_text(_LOCAL_MODULE, encoding="utf-8")
    (tmp_path / "draw.py").write_text(_DRAW, encoding="utf-8")
    assert _drawn(tmp_path, "gate", "without") == _drawn(tmp_path, "gate", "with")
    assert _drawn(tmp_path, "plain", "without") != _drawn(tmp_path, "plain", "with")


# -- shrinking stops at the budget ------------------------------------------------------------

STEP_SECONDS = 0.01  # what each example costs once the first has failed
# A property whose minimal example takes hypothesis about 260 examples to reach (measured with
# hypothesis 6.170): shrinking it in full costs well over 2 s of steps.
FULL_SHRINK_STEPS = 200


def _shrink_calls(budget: float) -> tuple[int, list[str]]:
    """How many examples a failing property runs after its first failure when shrinking may
    take `budget` seconds, and what hypothesis reported."""
    failed: list[float] = []
    calls_after = 0

    @settings(
        database=None,
        derandomize=True,
        deadline=None,
        max_examples=50,
        suppress_health_check=list(HealthCheck),
    )
    @given(st.lists(st.integers(0, 10**6), min_size=20, max_size=40))
    def fails_on_ten_distinct(values: list[int]) -> None:
        nonlocal calls_after
        if failed:
            calls_after += 1
            time.sleep(STEP_SECONDS)
        if len(set(values)) >= 10:
            failed.append(time.monotonic())
            raise AssertionError("ten distinct values")

    said: list[str] = []
    profiles.bound_shrinking(budget)
    with with_reporter(said.append), pytest.raises(AssertionError):
        fails_on_ten_distinct()
    return calls_after, said


def test_shrinking_stops_at_the_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """With a 0.05 s budget hypothesis stops shrinking after a few steps instead of about
    FULL_SHRINK_STEPS, and says so in the words the plugin replaces with the run's budget
    (its own deadline, five minutes, cannot have passed)."""
    monkeypatch.setattr(profiles.engine, "MAX_SHRINKING_SECONDS", 300)  # restored afterwards
    bounded, said = _shrink_calls(0.05)
    assert bounded < FULL_SHRINK_STEPS / 4, bounded
    assert any(profiles.SLOW_SHRINK_WARNING in text for text in said), said
    section = ("Captured stdout call: Hypothesis", "\n".join(said))
    [(_, shown)] = profiles.bounded_shrink_note([section], 0.05, False)
    assert profiles.SLOW_SHRINK_WARNING not in shown
    assert "shrinking stopped: the run's --fuzz-shrink-seconds=0.05 were spent" in shown
