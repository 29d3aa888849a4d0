"""Hypothesis profiles, registered in one place; choose one with --hypothesis-profile."""

from __future__ import annotations

from hypothesis import HealthCheck, Phase, settings

DEFAULT_PROFILE = "dev"
# The fuzz_case fixture is meant to outlive each example: it keeps the last one drawn, which
# after a failure is the minimal example, to print as a regression case.
_SUPPRESSED = [HealthCheck.too_slow, HealthCheck.function_scoped_fixture]

settings.register_profile(
    "dev",
    max_examples=60,
    deadline=None,
    suppress_health_check=_SUPPRESSED,
)
# Bounded and derandomized: the same examples on every run and every machine, no database.
settings.register_profile(
    "ci",
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=True,
    suppress_health_check=_SUPPRESSED,
)
# Long campaigns: run with pytest-xdist, `pytest conformance/test_fuzz.py -n auto
# --hypothesis-profile=thorough`.
settings.register_profile(
    "thorough",
    max_examples=20_000,
    deadline=None,
    suppress_health_check=[*_SUPPRESSED, HealthCheck.data_too_large],
)

# The ci profile without shrinking: for runs that need only a verdict, not a minimal example
# (the mutant self-test runs the suite against dozens of deliberately broken references).
settings.register_profile(
    "verdict",
    parent=settings.get_profile("ci"),
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)
