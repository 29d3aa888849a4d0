"""The plugin's options: one group, each option with a constant for its name and help and an ini
twin of the same meaning, read and checked once into `RunSettings` (shown in the report header
and recorded in the report, so a run can be repeated from its report alone).
"""

from __future__ import annotations

import math
import secrets
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pytest

from .errors import SuiteUsageError

GROUP = "tlkv"
GROUP_TITLE = "TLKV conformance"


@dataclass(frozen=True)
class Option:
    """A command-line option and its ini twin."""

    flag: str
    ini: str
    help: str
    ini_type: str | None = None  # pytest's ini types: "linelist", "paths", "args", "bool"
    default: Any = None
    kwargs: tuple[tuple[str, Any], ...] = ()

    @property
    def dest(self) -> str:
        return "tlkv_" + self.flag.lstrip("-").replace("-", "_")


IMPL = Option(
    "--impl",
    "tlkv_impl",
    "implementation under test; repeat for several: ref (the bundled Python reference), "
    "py:package.module, ctypes:PATH.so[,status-profile=FILE], grpc:HOST:PORT[,shared], and a "
    "prefill client of tl.kv.v1 as prefill-py:package.module or prefill-exec:COMMAND (a harness "
    "process speaking JSON lines); any of them with ,geometry=BxLxHkvxD when it serves one pool "
    "geometry, and ,name=NAME",
    "linelist",
    [],
    (("action", "append"),),
)
V2_LEVEL = Option(
    "--v2-level",
    "tlkv_v2_level",
    "how v2 exports are compared: strict (byte-exact, the default) or tolerant (each e4m3 "
    "element at most one step from its code, finite and of the same sign: never NaN for a "
    "number; header, hashes, fills, scales and CRC validity exact)",
    None,
    "strict",
    (("choices", ("strict", "tolerant")),),
)
CALL_TIMEOUT = Option(
    "--call-timeout",
    "tlkv_call_timeout",
    "seconds one call into an isolated implementation may take (default 10)",
    None,
    "10",
)
ISOLATION = Option(
    "--isolation",
    "tlkv_isolation",
    "worker (the default: the implementation runs in a child process, so a crash, an exit or a "
    "hang fails one case) or inprocess (for debugging; not a gate)",
    None,
    "worker",
    (("choices", ("worker", "inprocess")),),
)
WORKER_MEMORY = Option(
    "--worker-memory",
    "tlkv_worker_memory",
    "address-space limit of the worker process in MiB (default 8192; 0: none; never applied "
    "under a sanitizer)",
    None,
    "8192",
)
SANITIZER_RUNTIME = Option(
    "--sanitizer-runtime",
    "tlkv_sanitizer_runtime",
    "sanitizer runtimes to LD_PRELOAD into a ctypes worker: auto (the default: those the "
    "library names in DT_NEEDED, e.g. libasan.so.8), none, or PATH[:PATH...] (docs/ctypes.md)",
    None,
    "auto",
)
KNOWN_FAILURES = Option(
    "--known-failures",
    "tlkv_known_failures",
    "YAML list of known failures (a case or test, or a requirement id: the failures blamed on "
    "it; with reason, strict, impl, tests); covered failures are expected failures, and a "
    "stale entry fails the run",
    "paths",
    [],
    (("action", "append"),),
)
WRITE_KNOWN_FAILURES = Option(
    "--write-known-failures",
    "tlkv_write_known_failures",
    "write this run's failures as a known-failures file that covers them (one entry per "
    "blamed requirement, with the tests it covers, and the build it came from)",
    None,
    "",
)
REQS = Option(
    "--reqs",
    "tlkv_reqs",
    "run only tests citing one of these requirement ids (comma-separated; repeatable)",
    "args",
    [],
    (("action", "append"),),
)
SKIP_REQS = Option(
    "--skip-reqs",
    "tlkv_skip_reqs",
    "deselect tests citing any of these requirement ids (comma-separated; repeatable)",
    "args",
    [],
    (("action", "append"),),
)
PARITY_ROOT = Option(
    "--parity-root",
    "tlkv_parity_root",
    "a folder whose subfolders hold golden vectors (a manifest.yaml and its blobs), replayed "
    "beside the bundled ones (repeatable)",
    "paths",
    [],
    (("action", "append"),),
)
CASES = Option(
    "--cases",
    "tlkv_cases",
    "a folder of your own YAML case files, run beside the bundled corpus (repeatable; "
    "docs/cases.md)",
    "paths",
    [],
    (("action", "append"),),
)
CONFORMANCE_REPORT = Option(
    "--conformance-report",
    "tlkv_conformance_report",
    "write the conformance report (each requirement's verdict per implementation, the "
    "diagnosis, the cross-implementation matrix) to PATH.md, PATH.json and PATH.html "
    "(docs/report.md)",
    None,
    "",
    (("metavar", "PATH"),),
)
WRITE_REGRESSIONS = Option(
    "--write-regressions",
    "tlkv_write_regressions",
    "write each fuzzing failure's minimal example as a YAML case (into cases/regressions/ of a "
    "checkout, else the first --cases folder); it is printed in the failure report either way",
    "bool",
    False,
    (("action", "store_true"), ("default", None)),
)
FUZZ_SEED = Option(
    "--fuzz-seed",
    "tlkv_fuzz_seed",
    "the seed of every property test (default 0): the gate draws the same examples on every "
    "run; the explore and thorough profiles draw fresh ones",
    None,
    "0",
)
FUZZ_SHRINK = Option(
    "--fuzz-shrink-seconds",
    "tlkv_fuzz_shrink_seconds",
    "how long the run's property tests may spend shrinking failing examples, in all, from "
    "the first failure on; each then reports the smallest found by then (default 3)",
    None,
    "3",
)
HASH_SALT = Option(
    "--hash-salt",
    "tlkv_hash_salt",
    "the salt of the block hashes a run pushes to an implementation that keeps blocks (a gRPC "
    "server), e.g. 0x1f2e3d4c5b6a7988: by default a random one per run, so that no block an "
    "earlier run left is met; the report states it, give a failed run's to replay it",
    None,
    "",
)
RUN_DEADLINE = Option(
    "--run-deadline",
    "tlkv_run_deadline",
    "seconds the whole run may take; past it the run stops, reports itself incomplete and "
    "exits non-zero (default: none)",
    None,
    "",
)
# pytest >= 9 owns --strict ("enables all strictness options", its ini key `strict`); the suite
# reads it as one more strictness: SHOULD-level failures fail the run instead of warning.
STRICT_INI = "tlkv_strict"
STRICT_HELP = (
    "SHOULD-level failures fail the run (exit status 1) instead of being warnings; pytest's "
    "own --strict (or its ini key strict) turns this on too"
)

OPTIONS = (
    IMPL,
    V2_LEVEL,
    CALL_TIMEOUT,
    ISOLATION,
    WORKER_MEMORY,
    SANITIZER_RUNTIME,
    KNOWN_FAILURES,
    WRITE_KNOWN_FAILURES,
    REQS,
    SKIP_REQS,
    PARITY_ROOT,
    CASES,
    CONFORMANCE_REPORT,
    WRITE_REGRESSIONS,
    FUZZ_SEED,
    FUZZ_SHRINK,
    HASH_SALT,
    RUN_DEADLINE,
)


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup(GROUP, GROUP_TITLE)
    for option in OPTIONS:
        kwargs = dict(option.kwargs)
        group.addoption(option.flag, dest=option.dest, help=option.help, **kwargs)
        ini_kwargs: dict[str, Any] = {"default": option.default}
        if option.ini_type:
            ini_kwargs["type"] = option.ini_type
        parser.addini(option.ini, option.help, **ini_kwargs)
    # The command-line flag is pytest's own --strict (see above): only the ini twin is ours.
    parser.addini(STRICT_INI, STRICT_HELP, type="bool", default=False)


def value(config: pytest.Config, option: Option) -> Any:
    """The option's value: the command line's, else the ini key's (paths relative to where
    pytest was started for the command line, to the ini file for the ini key)."""
    given = config.getoption(option.dest)
    if given is None or given == []:
        return config.getini(option.ini)
    if option.ini_type == "paths":
        return [config.invocation_params.dir / p for p in given]
    return given


def _number(option: Option, text: Any, *, integer: bool = False, allow_zero: bool = False) -> float:
    try:
        number = int(text) if integer else float(text)
    except (TypeError, ValueError):
        raise SuiteUsageError(f"{option.flag} {text!r}: not a number") from None
    if not math.isfinite(number) or number < 0 or (number == 0 and not allow_zero):
        wanted = "a finite number of at least 0" if allow_zero else "a finite positive number"
        raise SuiteUsageError(f"{option.flag} {text!r}: expected {wanted}")
    return number


# One call into an implementation longer than this is a hang, not a setting: a day.
MAX_CALL_TIMEOUT = 86_400.0


@dataclass(frozen=True)
class RunSettings:
    """Every option of the run, checked."""

    v2_level: str
    call_timeout: float
    isolation: str
    worker_memory_mib: int
    sanitizer_runtime: str
    strict: bool
    fuzz_seed: int
    fuzz_shrink_seconds: float
    run_deadline: float | None
    report: Path | None
    hash_salt: int  # never 0: unsalted hashes are the corpus's own

    @classmethod
    def read(cls, config: pytest.Config) -> RunSettings:
        v2_level = value(config, V2_LEVEL)
        if v2_level not in ("strict", "tolerant"):
            raise SuiteUsageError(f"{V2_LEVEL.ini} = {v2_level!r}: expected strict or tolerant")
        isolation = value(config, ISOLATION)
        if isolation not in ("worker", "inprocess"):
            raise SuiteUsageError(f"{ISOLATION.ini} = {isolation!r}: expected worker or inprocess")
        timeout = _number(CALL_TIMEOUT, value(config, CALL_TIMEOUT))
        if timeout > MAX_CALL_TIMEOUT:
            raise SuiteUsageError(
                f"{CALL_TIMEOUT.flag} {timeout:g}: at most {MAX_CALL_TIMEOUT:g} s (a day)"
            )
        deadline_text = value(config, RUN_DEADLINE)
        deadline = _number(RUN_DEADLINE, deadline_text) if deadline_text not in ("", None) else None
        seed = int(_number(FUZZ_SEED, value(config, FUZZ_SEED), integer=True, allow_zero=True))
        shrink = _number(FUZZ_SHRINK, value(config, FUZZ_SHRINK), allow_zero=True)
        memory = int(
            _number(WORKER_MEMORY, value(config, WORKER_MEMORY), integer=True, allow_zero=True)
        )
        return cls(
            v2_level=v2_level,
            call_timeout=timeout,
            isolation=isolation,
            worker_memory_mib=memory,
            sanitizer_runtime=str(value(config, SANITIZER_RUNTIME)),
            strict=strict_should(config),
            fuzz_seed=seed,
            fuzz_shrink_seconds=shrink,
            run_deadline=deadline,
            report=report_base(config),
            hash_salt=_hash_salt(config),
        )

    def describe(self) -> str:
        deadline = f"{self.run_deadline:g} s" if self.run_deadline else "none"
        return (
            f"v2 level {self.v2_level}, isolation {self.isolation}"
            + (" (not a gate: a testee can end the run)" if self.isolation == "inprocess" else "")
            + f", call timeout {self.call_timeout:g} s, worker memory "
            f"{self.worker_memory_mib or 'unlimited'} MiB, sanitizer runtime "
            f"{self.sanitizer_runtime}, run deadline {deadline}, hash salt {self.salt_text}"
        )

    @property
    def salt_text(self) -> str:
        """The hash salt as --hash-salt takes it."""
        return f"{self.hash_salt:#018x}"

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["report"] = str(self.report) if self.report else None
        data["hash_salt"] = self.salt_text
        return data


def _hash_salt(config: pytest.Config) -> int:
    """The run's hash salt: the one the xdist controller chose for its workers, else the
    option's, else a fresh random one (odd: never 0)."""
    text = getattr(config, "workerinput", {}).get(HASH_SALT.ini) or value(config, HASH_SALT)
    if not text:
        return secrets.randbits(64) | 1
    try:
        salt = int(str(text), 0)
    except ValueError:
        salt = 0
    if not 0 < salt < 1 << 64:
        raise SuiteUsageError(
            f"{HASH_SALT.flag} {text!r}: expected a non-zero 64-bit number, e.g. 0x1f2e3d4c5b6a7988"
        )
    return salt


def strict_should(config: pytest.Config) -> bool:
    """Whether SHOULD-level failures fail the run: tlkv_strict, or pytest's own --strict."""
    if config.getini(STRICT_INI):
        return True
    try:
        return bool(config.getini("strict"))  # pytest >= 9: --strict sets this ini key
    except ValueError:
        return bool(config.getoption("strict", False))  # pytest 8: a plain flag


def report_base(config: pytest.Config) -> Path | None:
    """The conformance report's PATH: the option relative to where pytest was started, the
    ini key relative to the root."""
    given = config.getoption(CONFORMANCE_REPORT.dest)
    if given:
        return config.invocation_params.dir / given
    configured = config.getini(CONFORMANCE_REPORT.ini)
    return config.rootpath / configured if configured else None
