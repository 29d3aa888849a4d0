"""Hypothesis profiles, registered in one place; choose one with --hypothesis-profile.

The gate is deterministic: its profiles draw from a fixed seed (--fuzz-seed, applied to every
property test by the plugin) and read or write no example database, so the same implementation
and suite version get the same verdict on every run and machine. Random exploration is its own
profile; what it finds becomes a YAML regression case (--write-regressions), deterministic from
then on (docs/fuzzing.md).
"""

from __future__ import annotations

import copy
import hashlib
import inspect
import os
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

from hypothesis import HealthCheck, Phase, settings
from hypothesis.database import DirectoryBasedExampleDatabase

# Hypothesis internals the gate relies on, none of which has a public setting (hypothesis is
# pinned below 7): missing_internals() checks each, the plugin says once in its header which is
# missing, and selftest/test_hypothesis_internals.py fails then, and shows each takes effect.
try:
    from hypothesis.internal.conjecture import engine
except ImportError:  # pragma: no cover - a hypothesis that moved its engine
    engine = None  # type: ignore[assignment]
try:
    from hypothesis.internal.conjecture import providers
except ImportError:  # pragma: no cover - a hypothesis that moved its providers
    providers = None  # type: ignore[assignment]
# What hypothesis says when it gives up shrinking (it assumes its own five minutes): the plugin
# replaces it with the run's budget.
SLOW_SHRINK_WARNING = "WARNING: Hypothesis has spent more than five minutes"

DEFAULT_PROFILE = "gate"
# The fuzz_case fixture is meant to outlive each example: it keeps the last one drawn, which
# after a failure is the minimal example, to print as a regression case.
# An example a way in cannot observe is rejected (tlkv_conformance.fuzzing), so through gRPC
# many are.
_SUPPRESSED = [
    HealthCheck.too_slow,
    HealthCheck.function_scoped_fixture,
    HealthCheck.filter_too_much,
]

settings.register_profile(
    "gate",
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=_SUPPRESSED,
)
# The gate with more examples, for CI runs that can afford them.
settings.register_profile("ci", parent=settings.get_profile("gate"), max_examples=150)
# The gate without shrinking: for runs that need only a verdict, not a minimal example (the
# mutant self-test runs the suite against dozens of deliberately broken references).
settings.register_profile(
    "verdict",
    parent=settings.get_profile("gate"),
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)
# Random exploration: fresh examples each run, failures remembered per implementation in an
# example database outside the checkout (EXPLORING has the profiles that draw fresh examples).
settings.register_profile(
    "explore",
    max_examples=500,
    deadline=None,
    # Random also where hypothesis' own CI defaults (CI=true) would derandomize it.
    derandomize=False,
    suppress_health_check=_SUPPRESSED,
)
# Long campaigns: run with pytest-xdist, `pytest conformance/test_fuzz.py -n auto
# --hypothesis-profile=thorough`.
settings.register_profile(
    "thorough",
    parent=settings.get_profile("explore"),
    max_examples=20_000,
    suppress_health_check=[*_SUPPRESSED, HealthCheck.data_too_large],
)
EXPLORING = frozenset({"explore", "thorough"})


def bound_shrinking(seconds: float) -> None:
    """Hypothesis gives up shrinking a failing example after a time of its own (five
    minutes); a gate gives up after `seconds` (--fuzz-shrink-seconds), reporting the smallest
    example found by then. With a faulting implementation every shrink step costs a worker
    restart or a timeout: the broken engine's gate must end in about the time of a passing one.
    (Hypothesis offers no setting for this; its engine's module constant is the one knob.)"""
    if _has(engine, "MAX_SHRINKING_SECONDS"):
        engine.MAX_SHRINKING_SECONDS = max(seconds, 0.001)  # type: ignore[assignment]


def bounded_shrink_note(
    sections: list[tuple[str, str]], budget: float, cut_short: bool
) -> list[tuple[str, str]]:
    """A failing test's report sections with hypothesis's own words when it gives up shrinking
    (they assume its five minutes) replaced by the run's `budget` ending it (also when the
    recorder, not hypothesis, ended it: `cut_short`)."""
    note = (
        f"(shrinking stopped: the run's --fuzz-shrink-seconds={budget:g} were spent; the example "
        "above is the smallest found by then)"
    )
    kept = []
    for title, text in sections:
        if SLOW_SHRINK_WARNING in text:
            text, cut_short = text[: text.index(SLOW_SHRINK_WARNING)].rstrip(), True
        if text:
            kept.append((title, text))
    if not cut_short:
        return kept
    for index, (title, text) in enumerate(kept):
        if title.endswith("Hypothesis"):
            kept[index] = (title, f"{text}\n{note}")
            return kept
    return [*kept, ("Hypothesis", note)]


def _has(module: ModuleType | None, name: str) -> bool:
    return module is not None and hasattr(module, name)


def missing_internals() -> list[str]:
    """The hypothesis internals the gate relies on that this hypothesis lacks, each as what is
    missing and what the gate then loses; empty when all are there."""
    import hypothesis

    version = f"hypothesis {hypothesis.__version__}"
    missing = []
    if not _has(engine, "MAX_SHRINKING_SECONDS"):
        missing.append(
            f"{version} has no hypothesis.internal.conjecture.engine.MAX_SHRINKING_SECONDS: "
            "shrinking is not bounded by --fuzz-shrink-seconds"
        )
    elif SLOW_SHRINK_WARNING not in _source(engine):
        missing.append(
            f"{version} no longer says {SLOW_SHRINK_WARNING!r} when it stops shrinking: a "
            "report does not say that the run's budget stopped it"
        )
    if not (_has(providers, "_get_local_constants") and _has(providers, "_local_constants")):
        missing.append(
            f"{version} has no hypothesis.internal.conjecture.providers._get_local_constants: "
            "the examples drawn from a seed may depend on where the suite is installed"
        )
    return missing


def _source(module: ModuleType) -> str:
    try:
        return inspect.getsource(module)
    except (OSError, TypeError):
        return ""


def example_database_dir(identities: Iterable[str]) -> Path:
    """Where an exploring profile keeps its examples: one folder per set of implementations,
    under the user's cache (never in the checkout, where it would change the gate's verdict)."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    key = hashlib.sha256("\n".join(sorted(identities)).encode()).hexdigest()[:16]
    return cache / "tlkv-conformance" / "examples" / key


def activate(name: str, identities: Iterable[str]) -> str:
    """Load profile `name` (giving an exploring one its database); what the header says of it."""
    if name in EXPLORING:
        folder = example_database_dir(identities)
        settings.register_profile(
            f"{name}-db",
            parent=settings.get_profile(name),
            database=DirectoryBasedExampleDatabase(str(folder)),
        )
        settings.load_profile(f"{name}-db")
        return f"profile {name} (random examples; example database {folder})"
    settings.load_profile(name)
    _pin_local_constants()
    return f"profile {name} (fixed seed, no example database)"


def _pin_local_constants() -> None:
    """Hypothesis draws some values from constants it reads out of the source files it counts
    as the user's own, and which those are depends on where the suite is installed (a checkout,
    a wheel, a folder named test): the same seed would draw other examples. The gate draws from
    the seed alone. (No public setting for it; missing_internals() says when it is gone.)"""
    if not (_has(providers, "_get_local_constants") and _has(providers, "_local_constants")):
        return
    current = providers._local_constants
    empty = copy.deepcopy(current)
    if len(empty) == 0:
        providers._get_local_constants = lambda: empty
