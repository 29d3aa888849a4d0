"""Mutants of the bundled references, and the conformance suite run against each of them.

`load_catalogue()` reads selftest/mutants/catalogue.yaml (or, given its path, the held-out set
selftest/mutants/held-out.yaml); `run_mutant()` plants one mutant's bug in a copy of its
reference, builds or serves it, runs the suite against it and says which cases caught it.
`python -m selftest.mutation matrix` runs every mutant through the whole suite and writes the
kill matrix of mutants against requirements (docs/kill-matrix.md); `python -m selftest.mutation
held-out` measures the diagnosis on the held-out set (docs/held-out.md).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml
from tlkv_conformance.diagnosis import ONE_OF
from tlkv_conformance.references.clib.build import build_library
from tlkv_conformance.requirements import requirements

from selftest.support import (
    ROOT,
    SuiteRun,
    patched_copy,
    pool_flags,
    run_conformance,
    start_reference_server,
)

CATALOGUE = Path(__file__).with_name("mutants") / "catalogue.yaml"
# Mistakes written without reading the diagnosis, never used to tune it (docs/held-out.md).
HELD_OUT = Path(__file__).with_name("mutants") / "held-out.yaml"
TARGETS = {
    "c": ROOT / "reference" / "clib" / "tl_kv_ref.c",
    "py": ROOT / "reference" / "pyref.py",
    "grpc": ROOT / "reference" / "grpc_server" / "_service.py",
    "prefill": ROOT / "reference" / "prefill_client.py",
}
GRPC_SERVICE = "grpc_server/_service.py"
# Every mutant run: SHOULD failures count, a hang is cut short, fuzzing is bounded and stable
# and stops at the first failing example (a verdict is all a mutant run needs). The run that
# shows a mutant of SHOULDs alone passing with warnings leaves --strict out.
STRICT = "--strict"
SUITE_ARGS = (STRICT, "--call-timeout=3", "--hypothesis-profile=verdict")
EXPECTATIONS = ("caught", "warnings")
DEFAULT_SERVER = {"geometry": [4, 2, 2, 8], "capacity": 20000, "flags": []}
# A gRPC server's single pool has one geometry: its mutants run the cases written for it.
# The name a patched copy of the references is served under (its own, so that the bundled
# tlkv_conformance.references cannot be picked instead).
MUTANT_PACKAGE = "mutant_references"
GRPC_SUITE = ("cases/transfer.yaml", "cases/reader-v1.yaml", "cases/reader-v2.yaml")
# The whole suite in the plugin's two stages: the directed tests run first, then the generated
# cases and property tests (tlkv_conformance.plugin, _directed_tests_first). Run to the first
# failure, the whole suite is these two runs in turn, the second only when the first passes: the
# same first failure, without collecting the ~1,900 generated cases for a mutant a directed case
# catches (selftest/test_mutants.py checks the split against the plugin's order).
GENERATED_STAGE = ("cases/exhaustive.yaml", "conformance/test_fuzz.py")
DIRECTED_STAGE = ("cases", "conformance", *(f"--ignore={path}" for path in GENERATED_STAGE))


@dataclass(frozen=True)
class Mutant:
    """One realistic bug planted in one bundled reference."""

    id: str
    family: str
    side: str
    target: str
    description: str
    patch: tuple[tuple[str, str], ...]
    variant: str = "default"
    sanitize: bool = False
    rule: str | None = None
    # caught: the run fails; warnings: SHOULDs alone broken, so a run without --strict passes
    # with SHOULD warnings diagnosed as `cause` (and a --strict run is caught as any other)
    expect: str = "caught"
    server: dict = field(default_factory=dict, hash=False, compare=False)
    # for grpc and prefill mutants: the file under reference/ the patch applies to (by default
    # the service, the client)
    file: str = ""
    # pytest arguments choosing what to run (default: everything; gRPC: GRPC_SUITE)
    args: tuple[str, ...] = ()
    # the requirement(s) the bug breaks (none: a robustness bug of an operation, whose
    # failures are blamed on none), and the diagnosis ids that name it (the first is its own;
    # others name the same mistake as seen from another side)
    reqs: tuple[str, ...] = ()
    cause: tuple[str, ...] = ()
    # held-out mutants: the diagnosis ids a judge accepts as naming the mistake (empty: none
    # does, so no cause is the honest answer); they have no `cause`, the catalogue's tuning data
    accept: tuple[str, ...] = ()
    # why the first failure's diagnosis cannot name it, or its blame cannot be the mutated
    # requirements alone (known gaps, kept as data with their reason; empty: it must)
    diagnosis_gap: str = ""
    blame_gap: str = ""

    @property
    def suite(self) -> tuple[str, ...]:
        return self.args or self.whole_suite

    @property
    def whole_suite(self) -> tuple[str, ...]:
        """What a user's gate runs against it, whatever `args` narrows its runs to: every case
        (a gRPC server: the cases that fit its pool, GRPC_SUITE)."""
        return GRPC_SUITE if self.target == "grpc" else ()


def load_catalogue(path: Path = CATALOGUE) -> list[Mutant]:
    entries = yaml.safe_load(path.read_text(encoding="utf-8"))
    mutants = []
    for entry in entries:
        patch = tuple((p["old"], p["new"]) for p in entry.pop("patch"))
        args = tuple(entry.pop("args", ()))
        reqs = tuple(entry.pop("reqs", ()))
        cause, accept = (_ids(entry.pop(key, None)) for key in ("cause", "accept"))
        mutant = Mutant(patch=patch, args=args, reqs=reqs, cause=cause, accept=accept, **entry)
        if mutant.expect not in EXPECTATIONS:
            raise ValueError(f"{mutant.id}: expect {mutant.expect!r}, not one of {EXPECTATIONS}")
        mutants.append(mutant)
    return mutants


def _ids(value: str | list[str] | None) -> tuple[str, ...]:
    """A YAML field of diagnosis ids: one id, a list, or empty."""
    if not value:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


def chosen_mutants(only: Sequence[str] | None, family: str | None) -> list[Mutant]:
    """The catalogue's mutants a benchmark's --only IDS and --family F choose (all without);
    ValueError naming what chooses none."""
    mutants = load_catalogue()
    if only:
        unknown = sorted(set(only) - {m.id for m in mutants})
        if unknown:
            raise ValueError(f"no such mutant: {', '.join(unknown)}")
        mutants = [m for m in mutants if m.id in only]
    if family:
        mutants = [m for m in mutants if m.family == family]
    if not mutants:
        raise ValueError("no mutant chosen")
    return mutants


class MutantError(RuntimeError):
    """The mutant could not be built or run: a fault of the catalogue, not a survivor."""


@dataclass
class Outcome:
    mutant: Mutant
    run: SuiteRun
    report: dict[str, Any] | None = None  # the JSON conformance report, when one was written
    first_failure_only: bool = False  # a held-out gate run cut to its first failure

    @property
    def killed(self) -> bool:
        return self.run.returncode == 1 and bool(self.run.failed)

    @property
    def killers(self) -> list[str]:
        return self.run.failed

    @property
    def blamed(self) -> set[str]:
        """The requirements the run's failures are blamed on (the report's failing ones; with
        a report, after the run-level diagnosis made some failures consequences)."""
        if self.report is not None:
            return {
                r
                for test in self.report["tests"]
                if test["outcome"] in ("failed", "error")
                for r in test["blamed"]
            }
        return {r for node in self.killers for r in self.run.blamed.get(node, ())}

    @property
    def blame_is_precise(self) -> bool:
        """Every failure is blamed on requirements the mutant breaks, and on some; on none for
        a mutant breaking none (an operation's fault: a hang, a broken worker channel)."""
        if not self.mutant.reqs:
            return not self.blamed
        return bool(self.blamed) and self.blamed <= set(self.mutant.reqs)

    @property
    def first_diagnosis(self) -> str:
        """The probable cause named first: the report's first "start here" cause, or without a
        report the first failure's (its id); '' when there is none."""
        if self.report is not None:
            found = self.report.get("start_here") or []
            return found[0]["id"] if found else ""
        return self.run.diagnoses.get(self.killers[0], "") if self.killers else ""

    @property
    def first_title(self) -> str:
        """The report's title of the first probable cause; '' without a report or a cause."""
        found = (self.report or {}).get("start_here") or []
        return found[0].get("title", "") if found else ""

    @property
    def named(self) -> bool:
        """The first failure's diagnosis names the planted mistake."""
        return names(self.first_diagnosis, self.mutant.cause)


def names(cause: str, ids: Sequence[str]) -> bool:
    """The diagnosis `cause` names a mistake the ids `ids` name: it is one of them, or "one of"
    known mistakes that give the same bytes on the run's evidence, one of which is (the
    evidence cannot tell them apart, and the report says so)."""
    members = cause.removeprefix(ONE_OF).split("+") if cause.startswith(ONE_OF) else [cause]
    return any(member in ids for member in members)


def one_geometry_patch(geometry: str) -> tuple[str, str]:
    """A patch making the C reference's tl_kv_pool_create refuse every geometry but one, as a
    shim over an engine that serves one model does."""
    b, layers, heads, dim = (int(v) for v in geometry.split("x"))
    return (
        "    if (block_tokens == 0 || n_layers == 0 || n_kv_heads == 0 || head_dim == 0 ||\n",
        f"    if (block_tokens != {b} || n_layers != {layers} || n_kv_heads != {heads} ||\n"
        f"        head_dim != {dim})\n"
        "        return NULL;\n"
        "    if (block_tokens == 0 || n_layers == 0 || n_kv_heads == 0 || head_dim == 0 ||\n",
    )


@contextlib.contextmanager
def planted(
    mutant: Mutant, workdir: Path, geometry: str | None = None
) -> Iterator[tuple[str, Path | None]]:
    """The mutant made runnable: yields (--impl value, module path for the suite's child).
    With `geometry` (a C mutant), the library serves pools of that geometry only."""
    if mutant.target == "c":
        patches = list(mutant.patch) + ([one_geometry_patch(geometry)] if geometry else [])
        source = patched_copy(TARGETS["c"], patches, workdir / f"{_name(mutant)}.c")
        try:
            # Unoptimised: the bug is in the source, not in what the optimiser makes of it,
            # and -O0 builds in a third of -O2's time (on every one of the ~130 C mutants).
            library = build_library(
                workdir,
                variant=mutant.variant,
                sanitize=mutant.sanitize,
                source=source,
                optimise=False,
            )
        except Exception as exc:
            raise MutantError(f"{mutant.id}: does not build: {exc}") from exc
        yield f"ctypes:{library}" + (f",geometry={geometry}" if geometry else ""), None
    elif mutant.target == "py":
        patched_copy(TARGETS["py"], list(mutant.patch), workdir / f"{_name(mutant)}.py")
        yield f"py:{_name(mutant)}", workdir
    elif mutant.target == "grpc":
        package = _patched_references(mutant, workdir / "server", mutant.file or GRPC_SERVICE)
        config = {**DEFAULT_SERVER, **mutant.server}
        try:
            server = start_reference_server(
                [
                    *pool_flags(config["geometry"], config["capacity"]),
                    # the copy's engine, so that a mutant of it is the one served
                    f"--backend=py:{MUTANT_PACKAGE}.pyref",
                    *config["flags"],
                ],
                package=MUTANT_PACKAGE,
                package_root=package,
            )
        except Exception as exc:
            raise MutantError(f"{mutant.id}: the server does not start: {exc}") from exc
        try:
            yield server.impl, None
        finally:
            server.stop()
    elif mutant.target == "prefill":
        # The client imports the references beside it: a patched copy of the whole package.
        client = TARGETS["prefill"].name
        package = _patched_references(mutant, workdir / "client", mutant.file or client)
        yield f"prefill-py:{MUTANT_PACKAGE}.{Path(client).stem}", package
    else:
        raise MutantError(f"{mutant.id}: unknown target {mutant.target!r}")


def _patched_references(mutant: Mutant, package: Path, file: str) -> Path:
    """A copy of the bundled references as the package MUTANT_PACKAGE under `package` (its own
    name, so that the installed one cannot be picked instead), with the mutant's patch applied
    to `file` (a path under reference/); `package` is the folder to put on the module path."""
    shutil.copytree(
        ROOT / "reference",
        package / MUTANT_PACKAGE,
        ignore=shutil.ignore_patterns("clib", "__pycache__"),
    )
    patched_copy(ROOT / "reference" / file, list(mutant.patch), package / MUTANT_PACKAGE / file)
    return package


def reference_of(mutant: Mutant) -> Mutant:
    """The mutant without its bug: the reference it was planted in, built, served and run
    exactly as the mutant is."""
    return replace(mutant, id=f"reference-{group_of(mutant)}", patch=())


def group_of(mutant: Mutant) -> str:
    """Which passing gate a mutant's is compared with (mutants sharing one share it)."""
    parts = [mutant.target, mutant.variant]
    if mutant.sanitize:
        parts.append("asan")
    if mutant.server:
        parts.append("x".join(str(v) for v in mutant.server.get("geometry", [])) or "server")
    if mutant.args:  # e.g. ("cases/transfer.yaml", "-k", "4-mib") -> transfer.4-mib
        parts.append(".".join(Path(a).stem for a in mutant.args if not a.startswith("-")))
    return "-".join(parts)


def _name(mutant: Mutant) -> str:
    return "mutant_" + mutant.id.replace("-", "_")


def run_mutant(
    mutant: Mutant,
    workdir: Path,
    extra: Sequence[str] = (),
    first_failure: bool = True,
    paths: Sequence[str] | None = None,
    geometry: str | None = None,
    strict: bool = True,
    staged: bool = True,
    forked: bool = True,
) -> Outcome:
    """Run the conformance suite (`paths`, default: the mutant's) against the mutant (a C
    one, with `geometry`, serving pools of that geometry only); `strict`: with --strict.
    `staged` and `forked` (the whole suite run in its two stages, each run forked from the
    zygote: support.run_conformance) are turned off only to measure what they save
    (benchmarks/bench_selftest.py)."""
    suite = mutant.suite if paths is None else tuple(paths)
    # The whole suite to its first failure: its directed stage, then (if that passes) the rest.
    staging = staged and first_failure and not suite
    stages = [DIRECTED_STAGE, GENERATED_STAGE] if staging else [suite]
    with planted(mutant, workdir, geometry) as (impl, pythonpath):
        for stage in stages:
            args = [
                f"--impl={impl}",
                *(a for a in SUITE_ARGS if strict or a != STRICT),
                *(["-x"] if first_failure else []),
                *extra,
                *stage,
            ]
            run = run_conformance(args, workdir, pythonpath=pythonpath, forked=forked)
            if run.returncode != 0:
                break
    if run.returncode not in (0, 1):
        tail = "\n".join(run.output.strip().splitlines()[-15:])
        raise MutantError(f"{mutant.id}: the suite did not run (exit {run.returncode}):\n{tail}")
    return Outcome(mutant, run)


# -- the kill matrix ----------------------------------------------------------------------------


def kill_matrix(outcomes: Sequence[Outcome]) -> str:
    """Markdown: which requirements' cases kill which mutants, and which kill none."""
    table = requirements()
    kills: dict[str, set[str]] = {req: set() for req in table}
    lines = [
        "# Kill matrix",
        "",
        "Generated by `python -m selftest.mutation matrix`: every mutant of",
        "selftest/mutants/catalogue.yaml against the whole conformance suite.",
        "",
        *diagnosis_figures(outcomes),
        "",
        "## Mutants",
        "",
        "Blamed: the requirements the report fails (every failure blamed on the requirements",
        "whose own bytes or fields differ, a consequence on its cause's). Diagnosis: the report's",
        "first probable cause; *names it* when that is the planted mistake.",
        "",
        "| mutant | family | killed | mutated | blamed | diagnosis | names it "
        "| requirements whose cases failed |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for outcome in outcomes:
        cited = sorted(
            {r for node in outcome.killers for r in outcome.run.requirements.get(node, [])}
        )
        for req in cited:
            kills.setdefault(req, set()).add(outcome.mutant.id)
        verdict = f"yes ({len(outcome.killers)} cases)" if outcome.killed else "**SURVIVED**"
        blamed = ", ".join(sorted(outcome.blamed)) or "-"
        if outcome.killed and not outcome.blame_is_precise:
            blamed = f"**{blamed}**"
        lines.append(
            f"| {outcome.mutant.id} | {outcome.mutant.family} | {verdict} | "
            f"{', '.join(outcome.mutant.reqs)} | {blamed} | {outcome.first_diagnosis or '-'} | "
            f"{'yes' if outcome.named else '**no**'} | {', '.join(cited) or '-'} |"
        )
    lines += [
        "",
        "## Requirements",
        "",
        "| requirement | level | mutants killed |",
        "|---|---|---|",
    ]
    for req_id, req in table.items():
        killed = sorted(kills.get(req_id, ()))
        lines.append(f"| {req_id} | {req.level} | {len(killed)}: {', '.join(killed) or '-'} |")
    idle = [r for r in table if not kills.get(r)]
    lines += ["", "## Requirements whose cases kill no mutant", ""]
    lines += [f"- {r} ({table[r].level})" for r in idle] or ["- none"]
    return "\n".join(lines) + "\n"


BLAME_TARGET, NAMING_TARGET = 0.9, 0.8


def diagnosis_figures(outcomes: Sequence[Outcome]) -> list[str]:
    """The two figures of the diagnosis over the catalogue, as Markdown lines."""
    killed = [o for o in outcomes if o.killed]
    precise = sum(o.blame_is_precise for o in killed)
    named = sum(o.named for o in killed)
    total = max(len(killed), 1)
    return [
        f"- Blame: the failures of {precise} of {len(killed)} killed mutants "
        f"({precise / total:.0%}) are blamed only on the requirements the mutant breaks "
        f"(target {BLAME_TARGET:.0%}).",
        f"- Diagnosis: the first probable cause names the planted mistake for {named} of "
        f"{len(killed)} ({named / total:.0%}; target {NAMING_TARGET:.0%}).",
    ]


def run_reported(
    mutant: Mutant,
    workdir: Path,
    first_failure: bool = False,
    paths: Sequence[str] | None = None,
) -> Outcome:
    """run_mutant with a conformance report, read into the outcome (its probable causes)."""
    report = workdir / "report"
    outcome = run_mutant(
        mutant,
        workdir,
        extra=[f"--conformance-report={report}"],
        first_failure=first_failure,
        paths=paths,
    )
    json_report = report.with_name("report.json")
    if json_report.exists():
        outcome.report = json.loads(json_report.read_text(encoding="utf-8"))
    return outcome


def _run_one(
    mutant: Mutant, first_failure: bool = False, paths: Sequence[str] | None = None
) -> Outcome:
    with tempfile.TemporaryDirectory(prefix="mutant-") as workdir:
        return run_reported(mutant, Path(workdir), first_failure, paths)


# -- the held-out set ---------------------------------------------------------------------------

VERDICTS = ("right", "none", "wrong")
# A test parametrized by the implementation names the run's temporary library in its id.
TEMPORARY_IMPL = re.compile(r"\[ctypes:[^]]*\]")


def held_out_verdict(outcome: Outcome) -> str:
    """The verdict on the first probable cause of a held-out mutant's run."""
    return verdict_of(outcome.first_diagnosis, outcome.mutant.accept)


def verdict_of(cause: str, accept: Sequence[str]) -> str:
    """right: the first probable cause (`cause`) is one the judge accepts for the mistake, or
    "one of" several, one of them accepted; none: there is no probable cause (the report says no
    known mistake matches); wrong: a cause the judge does not accept, a wrong name (an empty
    `accept`: no cause names the mistake)."""
    if not cause:
        return "none"
    return "right" if names(cause, accept) else "wrong"


def held_out_figures(outcomes: Sequence[Outcome]) -> list[str]:
    """The diagnosis's figures on the held-out set, as Markdown lines."""
    caught = [o for o in outcomes if o.killed]
    counts = {v: sum(held_out_verdict(o) == v for o in caught) for v in VERDICTS}
    lines = [f"- Caught: {len(caught)} of {len(outcomes)}.", verdict_figures(counts)]
    cut = [o.mutant.id for o in outcomes if o.first_failure_only]
    if cut:
        lines.append(
            f"- Run to the first failure only (a sanitizer build, or a whole suite that did not "
            f"end in 600 s): {', '.join(cut)}."
        )
    return lines


def verdict_figures(counts: dict[str, int]) -> str:
    """The Markdown line of the held-out figures, from the count of each verdict."""
    total = max(sum(counts.values()), 1)
    return (
        "- First probable cause of the caught ones: "
        + "; ".join(f"{v} {counts[v]} ({counts[v] / total:.0%})" for v in VERDICTS)
        + "."
    )


def held_out_report(outcomes: Sequence[Outcome]) -> str:
    """docs/held-out.md: per held-out mutant, its first failure and probable cause, and the
    figures."""
    lines = [
        "# The diagnosis on the held-out set",
        "",
        "Generated by `python -m selftest.mutation held-out` (refresh: run it again; `--only ID`",
        "runs one mutant and writes nothing). selftest/mutants/held-out.yaml holds mistakes",
        "written from the format and the contract without reading the diagnosis, kept apart",
        "from the catalogue its signatures were tuned on (selftest/test_held_out.py checks the",
        "two are disjoint). Each mutant runs the whole suite as a user's gate does (every case,",
        "not to the first failure; a gRPC server the cases that fit its pool) with a",
        "conformance report; the probable cause is the report's first *start here* cause.",
        "",
        "Verdict: *right* when the cause is in the mutant's `accept` list (filled by a judge",
        "before any run, the rule in the set's header) or is *one of* known mistakes that give",
        "the same bytes, one of them accepted; *none* when there is no probable cause",
        "(no known mistake matches), *wrong* when it is another cause: a wrong name (also any",
        "cause where `accept` is empty, no cause naming that mistake yet).",
        "",
        *held_out_figures(outcomes),
        "",
        "| mutant | family | caught | first failure | probable cause | title | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for o in outcomes:
        first = f"`{TEMPORARY_IMPL.sub('[ctypes:...]', o.killers[0])}`" if o.killers else "-"
        verdict = held_out_verdict(o) if o.killed else "-"
        title = o.first_title.replace("|", "\\|") or "-"
        lines.append(
            f"| {o.mutant.id} | {o.mutant.family} | {'yes' if o.killed else '**no**'} | "
            f"{first} | {o.first_diagnosis or '-'} | {title} | {verdict} |"
        )
    return "\n".join(lines) + "\n"


def _gate_run(mutant: Mutant) -> Outcome:
    """The whole suite against the mutant, as a user's gate runs it; for a sanitizer build, and
    for a run that does not end in time, to its first failure (the suite's; marked)."""
    if not mutant.sanitize:
        with contextlib.suppress(subprocess.TimeoutExpired):
            return _run_one(mutant, paths=mutant.whole_suite)
    outcome = _run_one(mutant, first_failure=True, paths=mutant.whole_suite)
    outcome.first_failure_only = True
    return outcome


def held_out(only: Sequence[str], out: Path, jobs: int) -> int:
    """Run the whole suite against each held-out mutant (those in `only`, else all), print each
    and the figures, and with all of them write `out`; 1 when one is not caught."""
    mutants = load_catalogue(HELD_OUT)
    unknown = sorted(set(only) - {m.id for m in mutants})
    if unknown:
        print(f"no held-out mutant {', '.join(unknown)}", file=sys.stderr)
        return 2
    chosen = [m for m in mutants if not only or m.id in only]
    outcomes = []
    with ThreadPoolExecutor(jobs) as pool:
        try:
            for o in pool.map(_gate_run, chosen):
                outcomes.append(o)
                first = o.killers[0] if o.killers else "-"
                verdict = held_out_verdict(o) if o.killed else "NOT CAUGHT"
                cause = f"{o.first_diagnosis or '-'}: {o.first_title}"
                cut = " (first failure only)" if o.first_failure_only else ""
                print(f"{o.mutant.id}: {verdict}; {first}{cut}; {cause}", flush=True)
        except MutantError as exc:
            pool.shutdown(cancel_futures=True)
            print(str(exc).splitlines()[0], file=sys.stderr)
            return 2
    for line in held_out_figures(outcomes):
        print(line.removeprefix("- "))
    if not only:
        out.write_text(held_out_report(outcomes), encoding="utf-8")
        print(f"wrote {out}")
    return 0 if all(o.killed for o in outcomes) else 1


FUZZ_TESTS = "conformance/test_fuzz.py"


def _fuzz_only(mutant: Mutant) -> Outcome:
    with tempfile.TemporaryDirectory(prefix="mutant-") as workdir:
        return run_mutant(mutant, Path(workdir), paths=[FUZZ_TESTS])


def fuzz_figure(jobs: int) -> int:
    """How many reader-side mutants fuzzing alone (no hand-written case) catches."""
    mutants = [m for m in load_catalogue() if m.side == "reader" and m.target != "grpc"]
    with ThreadPoolExecutor(jobs) as pool:
        outcomes = list(pool.map(_fuzz_only, mutants))
    for outcome in outcomes:
        verdict = "caught  " if outcome.killed else "missed  "
        print(f"{verdict}{outcome.mutant.id}")
    caught = sum(o.killed for o in outcomes)
    share = caught / len(outcomes)
    print(
        f"fuzzing alone ({FUZZ_TESTS}, hypothesis profile 'verdict'): caught {caught} of "
        f"{len(outcomes)} reader-side mutants, {share:.0%} (target: 80%)"
    )
    return 0 if share >= 0.8 else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m selftest.mutation")
    sub = parser.add_subparsers(dest="command", required=True)
    matrix = sub.add_parser("matrix", help="run every mutant through the whole suite")
    matrix.add_argument("--out", type=Path, default=ROOT / "docs" / "kill-matrix.md")
    matrix.add_argument("--jobs", type=int, default=2)
    figure = sub.add_parser("fuzz-figure", help="reader-side mutants caught by fuzzing alone")
    figure.add_argument("--jobs", type=int, default=2)
    held = sub.add_parser("held-out", help="the diagnosis's figures on the held-out set")
    held.add_argument("--only", action="append", default=[], metavar="ID")
    held.add_argument("--out", type=Path, default=ROOT / "docs" / "held-out.md")
    held.add_argument("--jobs", type=int, default=1)
    args = parser.parse_args(argv)
    if args.command == "fuzz-figure":
        return fuzz_figure(args.jobs)
    if args.command == "held-out":
        return held_out(args.only, args.out, args.jobs)
    mutants = load_catalogue()
    with ThreadPoolExecutor(args.jobs) as pool:
        outcomes = list(pool.map(_run_one, mutants))
    args.out.write_text(kill_matrix(outcomes), encoding="utf-8")
    for line in diagnosis_figures(outcomes):
        print(line.removeprefix("- "))
    survivors = [o.mutant.id for o in outcomes if not o.killed]
    print(f"{len(outcomes) - len(survivors)} of {len(outcomes)} mutants killed; wrote {args.out}")
    for survivor in survivors:
        print(f"survivor: {survivor}", file=sys.stderr)
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
