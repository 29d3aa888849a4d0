"""Verdict stability: the default gate run N times against the same implementations, in the
same checkout or each time in a fresh clone of it, must give the same verdict every time.

    python benchmarks/bench_verdict_stability.py [--runs 10] [--checkout here|clone|fresh]
                         [--target NAME ...] [--selftest-args] [-- GATE OPTIONS]

Targets (default: all of these): `ref` (the bundled Python reference), `c-ref` (the bundled C
reference, built once, through ctypes) and mutants of selftest/mutants/catalogue.yaml by id
(default: v2-quotient-in-f64, v2-amax-stale-slot, py-read-nan-tail-canonical,
crc-ieee-polynomial), each planted once. Every run is the gate as a user runs it,
`python -m tlkv_conformance run --report DIR --impl=IMPL` (no other option; with
--selftest-args, the mutant self-test's options instead), with `-p no:cacheprovider` so that
nothing is written into the checkout; the runs go round-robin over the targets, one at a time.

From each run it takes the exit status, the failing tests and, from the report's JSON, the
verdict: the gate and every requirement's verdict (and whether it gates) per implementation.
It prints per target the runs, the distinct verdicts and failing sets, for information the
distinct blames (each failing test's blamed requirements) and failure messages (a fuzz
failure's shows the smallest example found within --fuzz-shrink-seconds, so it may depend on
the machine's load), and the median wall time of a run; it exits 1 if any target got more than
one verdict or more than one set of failing tests.

Where the suite runs (--checkout):
- here (the default): this checkout, as it is, every run; whatever a run leaves in it stays for
  the next. Work in progress in the checkout changes what is tested: the checkout's state
  (commit and a digest of its uncommitted changes) is taken before each run, and a change is
  reported beside the figures.
- clone: one `git clone --local` of HEAD (uncommitted work is not in it), every run.
- fresh (or --fresh): a new clone of HEAD for each run.
A clone gets a venv of its own: the checkout venv's packages on its path (a .pth line, which is
not a site directory, so the checkout's editable install is not active there) and the clone
installed editable into it (pip --no-deps), so that `tlkv_conformance`, its plugin and its
corpus are the clone's; that is checked before the first run. The implementations (the C
build, the planted mutants) are built once from this checkout: each copy of the suite runs the
same implementation. Wall times count the gate run only.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import signal
import site
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tlkv_conformance.references.clib.build import build_library  # noqa: E402

from selftest.mutation import SUITE_ARGS, load_catalogue, planted  # noqa: E402

REFERENCES = ("ref", "c-ref")
MUTANTS = (
    "v2-quotient-in-f64",
    "v2-amax-stale-slot",
    "py-read-nan-tail-canonical",
    "crc-ieee-polynomial",
)
CHECKOUTS = {
    "here": "this checkout, every run",
    "clone": "one clone of HEAD, every run",
    "fresh": "a new clone of HEAD each run",
}
RUN_TIMEOUT = 1800  # seconds; a gate run against these targets takes well under a minute
FAILED = ("failed", "error")
# Only the clone is installed: its dependencies are the checkout venv's, seen through a .pth.
SHOWN = 6  # failed requirements named in a target's summary line
PIP_OPTIONS = ("--quiet", "--no-deps", "--no-build-isolation", "--no-input", "--no-cache-dir")


@dataclass
class Target:
    """An implementation under test, made runnable once: its --impl value, the module path its
    worker needs (a Python mutant), and the corpus paths to run (a gRPC mutant's)."""

    name: str
    impl: str
    pythonpath: Path | None = None
    paths: tuple[str, ...] = ()


@dataclass(frozen=True)
class Observation:
    """What one gate run said."""

    status: int
    verdict: str  # canonical JSON of the gate and every requirement's verdict per implementation
    failing: tuple[str, ...]  # failed or errored tests (SHOULD warnings included)
    blamed: str  # canonical JSON: each failing test's blamed requirements (the diagnosis)
    messages: str  # digest of the failing tests' messages
    seconds: float
    state: str  # the checkout's commit and uncommitted changes when the run started


@dataclass
class Tally:
    target: Target
    runs: list[Observation] = field(default_factory=list)

    def distinct(self, attribute: str) -> int:
        return len({getattr(o, attribute) for o in self.runs})

    @property
    def stable(self) -> bool:
        return self.distinct("verdict") <= 1 and self.distinct("failing") <= 1


# -- the checkouts ----------------------------------------------------------------------------


def _git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=True
    ).stdout.strip()


def checkout_state() -> str:
    """The checkout's commit and a digest of its uncommitted changes: other work going on in
    the same checkout changes what a same-checkout run tests, and the benchmark says so."""
    diff = _git("diff", "HEAD") + "\n" + _git("status", "--porcelain", "--untracked-files=all")
    return f"{_git('rev-parse', '--short', 'HEAD')}+{hashlib.sha256(diff.encode()).hexdigest()[:8]}"


@contextlib.contextmanager
def cloned_checkout(scratch: Path, number: int) -> Iterator[tuple[Path, str]]:
    """A clone of the checkout's HEAD with a venv of its own; yields (clone, its python), and
    on the way out says what the runs left in it."""
    home = scratch / f"clone-{number}"
    clone, venv = home / "checkout", home / "venv"
    try:
        _git("clone", "--quiet", "--local", str(ROOT), str(clone), cwd=scratch)
        # --without-pip: the checkout venv's pip comes with its other packages, through the .pth
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        python = str(venv / "bin" / "python")
        packages = subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        # A plain path in a .pth is not a site directory: the checkout's editable finder (a .pth
        # of its own there) is not installed, so `tlkv_conformance` can only be the clone's.
        deps = "\n".join(site.getsitepackages())
        Path(packages, "checkout-venv-packages.pth").write_text(deps + "\n", encoding="utf-8")
        install = subprocess.run(
            [python, "-m", "pip", "install", *PIP_OPTIONS, "-e", str(clone)],
            cwd=clone,
            capture_output=True,
            text=True,
        )
        if install.returncode != 0:
            sys.exit(f"pip install -e {clone} failed:\n{install.stdout}{install.stderr}")
        _check_imports_clone(python, clone)
        yield clone, python
        left = _git("status", "--porcelain", "--ignored", cwd=clone).splitlines()
        print(f"left in clone {number}: {', '.join(left) or 'nothing'}", flush=True)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _check_imports_clone(python: str, clone: Path) -> None:
    """The suite that runs in the clone must be the clone's: the package, its plugin (what
    pytest loads through the entry point) and its corpus."""
    probe = (
        "import importlib.util, tlkv_conformance, tlkv_conformance.corpus as c; "
        "print(tlkv_conformance.__file__); "
        "print(importlib.util.find_spec('tlkv_conformance.plugin').origin); print(c.cases_dir())"
    )
    out = subprocess.run(
        [python, "-c", probe], cwd=clone, capture_output=True, text=True, check=True
    ).stdout.split()
    foreign = [path for path in out if not Path(path).resolve().is_relative_to(clone.resolve())]
    if foreign:
        sys.exit(f"the clone {clone} imports the suite from elsewhere: {foreign}")


# -- one gate run ---------------------------------------------------------------------------


def gate_run(
    target: Target,
    root: Path,
    python: str,
    scratch: Path,
    report_dir: Path,
    extra: Sequence[str],
    state: str,
) -> Observation:
    command = [
        python,
        "-m",
        "tlkv_conformance",
        "run",
        f"--report={report_dir}",
        f"--impl={target.impl}",
        "-p",
        "no:cacheprovider",
        "-q",
        *extra,
        *target.paths,
    ]
    env = {**os.environ}
    if target.pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(target.pythonpath), env.get("PYTHONPATH")])
        )
    start = time.perf_counter()
    run = subprocess.run(
        command, cwd=root, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT
    )
    seconds = time.perf_counter() - start
    try:
        report = json.loads((report_dir / "report.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        # No verdict is a verdict too (a checkout broken by work in progress, say): recorded,
        # and the benchmark goes on.
        lines = (run.stdout + run.stderr).strip().splitlines()
        last = lines[-1] if lines else ""
        print(f"{target.name}: no report (exit status {run.returncode}): {last}", flush=True)
        return Observation(
            run.returncode, f"no report: {last}", ("no report",), "", "", seconds, state
        )
    failed = sorted(
        (t for t in report["tests"] if t["outcome"] in FAILED), key=lambda t: t["nodeid"]
    )

    # Test ids and labels hold the implementation's path (in this benchmark's scratch folder),
    # messages also the suite's: made neutral, they compare between benchmarks and checkouts.
    def neutral(text: str) -> str:
        return text.replace(str(root), "<root>").replace(str(scratch), "<scratch>")

    verdict = {
        "gate": report["gate"],
        "complete": report["complete"],
        "exit_status": report["exit_status"],
        "implementations": {i["label"]: i["gate"] for i in report["implementations"]},
        "requirements": {
            r["id"]: {label: [c["verdict"], c["gating"]] for label, c in r["results"].items()}
            for r in report["requirements"]
        },
    }
    messages = neutral("\n".join(f"{t['nodeid']}\n{t['message']}" for t in failed))
    return Observation(
        status=run.returncode,
        verdict=neutral(json.dumps(verdict, sort_keys=True)),
        failing=tuple(neutral(t["nodeid"]) for t in failed),
        blamed=neutral(
            json.dumps({t["nodeid"]: t.get("blamed", []) for t in failed}, sort_keys=True)
        ),
        messages=hashlib.sha256(messages.encode()).hexdigest()[:12],
        seconds=seconds,
        state=state,
    )


# -- the targets ------------------------------------------------------------------------------


@contextlib.contextmanager
def targets(names: Sequence[str], scratch: Path) -> Iterator[list[Target]]:
    """Each named target made runnable (built, planted, served) for the whole benchmark."""
    catalogue = {m.id: m for m in load_catalogue()}
    unknown = [n for n in names if n not in REFERENCES and n not in catalogue]
    if unknown:
        sys.exit(f"unknown target(s) {', '.join(unknown)}: ref, c-ref or a mutant id")
    with contextlib.ExitStack() as stack:
        made = []
        for name in names:
            if name == "ref":
                made.append(Target(name, "ref"))
            elif name == "c-ref":
                made.append(Target(name, f"ctypes:{build_library(scratch / 'c-ref')}"))
            else:
                workdir = scratch / name
                workdir.mkdir()
                mutant = catalogue[name]
                impl, pythonpath = stack.enter_context(planted(mutant, workdir))
                made.append(Target(name, impl, pythonpath, mutant.suite))
        yield made


# -- main -------------------------------------------------------------------------------------


def _summary(tally: Tally) -> str:
    statuses = Counter(o.status for o in tally.runs)
    if tally.runs[0].verdict.startswith("no report"):
        return f"exit {dict(statuses)}, run 1: {tally.runs[0].verdict}"
    first = json.loads(tally.runs[0].verdict)
    failed_reqs = sorted(
        rid
        for rid, cells in first["requirements"].items()
        if any(verdict == "failed" for verdict, _ in cells.values())
    )
    return (
        f"exit {dict(statuses)}, gate {first['gate']}, {len(tally.runs[0].failing)} failing tests, "
        f"{len(failed_reqs)} failed requirements{': ' if failed_reqs else ''}"
        + ", ".join(failed_reqs[:SHOWN])
        + (", ..." if len(failed_reqs) > SHOWN else "")
    )


def _differences(tally: Tally) -> list[str]:
    """What differs between the runs of an unstable target."""
    lines = []
    base = tally.runs[0]
    for number, other in enumerate(tally.runs[1:], 2):
        if other.failing != base.failing:
            gone = sorted(set(base.failing) - set(other.failing))
            new = sorted(set(other.failing) - set(base.failing))
            lines.append(f"    run {number} vs run 1: failing now {new}, no longer {gone}")
        if other.blamed != base.blamed and base.blamed and other.blamed:
            a, b = json.loads(base.blamed), json.loads(other.blamed)
            changed = {test: (a.get(test), b[test]) for test in b if a.get(test) != b[test]}
            lines.append(f"    run {number} vs run 1: blame (run 1, run {number}) {changed}")
        if other.verdict != base.verdict and "no report" in (base.verdict + other.verdict):
            lines.append(f"    run {number} vs run 1: {base.verdict[:60]} -> {other.verdict[:60]}")
        elif other.verdict != base.verdict:
            a, b = json.loads(base.verdict), json.loads(other.verdict)
            changed = [
                rid
                for rid in a["requirements"]
                if a["requirements"][rid] != b["requirements"].get(rid)
            ]
            lines.append(
                f"    run {number} vs run 1: gate {a['gate']} -> {b['gate']}, "
                f"requirements {changed}"
            )
    if lines and len({o.state for o in tally.runs}) > 1:
        states = ", ".join(f"run {n}: {o.state}" for n, o in enumerate(tally.runs, 1))
        lines.append(f"    checkout state of each run (work in progress changes it): {states}")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Run the default gate N times against the same implementations and report "
        "any verdict or set of failing tests that differs between runs (docs/fuzzing.md)."
    )
    parser.add_argument("--runs", type=int, default=10, help="gate runs per target (default 10)")
    parser.add_argument(
        "--checkout",
        choices=CHECKOUTS,
        default="here",
        help="here: this checkout (the default); clone: one clone of HEAD for every run; "
        "fresh: a new clone of HEAD for each run",
    )
    parser.add_argument(
        "--fresh", dest="checkout", action="store_const", const="fresh", help="--checkout=fresh"
    )
    parser.add_argument(
        "--target",
        action="append",
        help=f"ref, c-ref or a mutant id (repeatable; default: {', '.join(REFERENCES + MUTANTS)})",
    )
    parser.add_argument(
        "--selftest-args",
        action="store_true",
        help=f"run with the mutant self-test's options ({' '.join(SUITE_ARGS)}) instead of none",
    )
    parser.add_argument("pytest_args", nargs="*", help="more gate options, after --")
    args = parser.parse_args(argv)
    # Stopped with SIGTERM, it still removes its clones, venvs and builds on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    extra = [*(SUITE_ARGS if args.selftest_args else ()), *args.pytest_args]
    names = args.target or [*REFERENCES, *MUTANTS]
    state = checkout_state()
    print(
        f"checkout {state} ({CHECKOUTS[args.checkout]}); {args.runs} runs per target; "
        f"gate options {' '.join(extra) or 'none'}"
    )
    if args.checkout != "here" and _git("status", "--porcelain"):
        print("note: the checkout has uncommitted changes; the clones run HEAD without them")
    with tempfile.TemporaryDirectory(prefix="bench-verdict-") as scratch_text:
        scratch = Path(scratch_text)
        with targets(names, scratch) as made:
            tallies = [Tally(t) for t in made]
            with contextlib.ExitStack() as once:
                if args.checkout == "clone":
                    root, python = once.enter_context(cloned_checkout(scratch, 1))
                for number in range(1, args.runs + 1):
                    with contextlib.ExitStack() as each:
                        if args.checkout == "fresh":
                            root, python = each.enter_context(cloned_checkout(scratch, number))
                        if args.checkout == "here":
                            root, python, state = ROOT, sys.executable, checkout_state()
                        else:
                            state = f"{_git('rev-parse', '--short', 'HEAD', cwd=root)} (clone)"
                        for tally in tallies:
                            report_dir = scratch / "reports" / f"{tally.target.name}-{number}"
                            seen = gate_run(
                                tally.target, root, python, scratch, report_dir, extra, state
                            )
                            tally.runs.append(seen)
                            print(
                                f"run {number:2d} {tally.target.name:28s} exit {seen.status} "
                                f"{len(seen.failing):3d} failing  verdict "
                                f"{_digest(seen.verdict)}  {seen.seconds:6.1f} s",
                                flush=True,
                            )
    print()
    header = f"{'target':28s} {'runs':>4s} {'verdicts':>8s} {'failing sets':>12s} "
    print(header + f"{'blame':>5s} {'messages':>8s} {'median s':>8s}  verdict")
    for tally in tallies:
        print(
            f"{tally.target.name:28s} {len(tally.runs):4d} {tally.distinct('verdict'):8d} "
            f"{tally.distinct('failing'):12d} {tally.distinct('blamed'):5d} "
            f"{tally.distinct('messages'):8d} "
            f"{statistics.median(o.seconds for o in tally.runs):8.1f}  {_summary(tally)}"
        )
        for line in _differences(tally):
            print(line)
    states = Counter(o.state for o in tallies[0].runs)
    if len(states) > 1:
        print(
            "note: the checkout changed during the benchmark (other work in it; runs per state): "
            f"{dict(states)}"
        )
    unstable = [t.target.name for t in tallies if not t.stable]
    print(
        f"unstable: {', '.join(unstable)}"
        if unstable
        else "every target: one verdict, one failing set"
    )
    return 1 if unstable else 0


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:8]


if __name__ == "__main__":
    sys.exit(main())
