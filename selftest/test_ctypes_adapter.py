"""The ctypes adapter (`--impl=ctypes:PATH.so`): the C reference through it, crashes, hangs,
sanitizer reports, status profiles and usage errors.

Most tests run the conformance suite in a child process, as a user would, over the case corpus
(cases/) and selftest/faulty/cases (cases the test libraries of selftest/faulty recognise); the
outcomes are compared case by case with those of the default reference build. The Python tests
of conformance/ are run once, side by side with the Python reference.
"""

from __future__ import annotations

import os
import pickle
import re
import shlex
import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from tlkv_conformance import oracle
from tlkv_conformance.adapters import AdapterSettings, parse_impl
from tlkv_conformance.adapters._ctypes_adapter import (
    CtypesAdapter,
    load_status_profile,
    sanitizer_environment,
    sanitizer_runtimes,
)
from tlkv_conformance.adapters._ffi import LibrarySession
from tlkv_conformance.adapters._worker import SHARED_MIN, SharedBuffer
from tlkv_conformance.adapters._worker_channel import WorkerChannel, sanitizer_report
from tlkv_conformance.errors import ImplementationFault, Quarantined, Refused, SuiteUsageError

from selftest.support import DIRECTED_CASES, FAULTY_CASES, outcomes_by_case, patched_copy

ROOT = Path(__file__).resolve().parent.parent
FAULTY = ROOT / "selftest" / "faulty"
ADAPTER_CASES = FAULTY_CASES
CASE_FILE = f"{ADAPTER_CASES}/ctypes-adapter.yaml"
# The YAML case corpus. The Python tests of conformance/ (property tests among them) are run
# once, in test_python_conformance_tests_agree_with_ref, not in every run here.
SUITE = ("cases",)
# A library faulting on the cases of selftest/faulty/cases alone (a crash, a hang, a heap
# overflow, its own status numbers) is run over the directed cases only: the ~1,900 generated
# ones of cases/exhaustive.yaml are more imports of the same kinds, through the same calls,
# and the bundled builds run them all above.
DIRECTED = DIRECTED_CASES
TRIGGER_SEGV = 0xDEAD00000000000B  # selftest/faulty/fault_import.h
TRIGGER_HANG = 0xDEAD00000000000C


def node(case_id: str) -> str:
    return f"{CASE_FILE}::{case_id}"


@pytest.fixture(scope="session")
def faulty_library(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """Build (once per session) a test library of selftest/faulty: segv, hang, overflow, ..."""
    from tlkv_conformance.references.clib.build import build_library

    built: dict[tuple[str, bool], Path] = {}

    def get(name: str, sanitize: bool = False) -> Path:
        if (name, sanitize) not in built:
            out = tmp_path_factory.mktemp(f"faulty-{name}")
            built[name, sanitize] = build_library(
                out, sanitize=sanitize, source=FAULTY / f"{name}.c"
            )
        return built[name, sanitize]

    return get


def assert_only_failed(run, label: str, expected: dict[str, str], reference: dict[str, str]):
    """Exactly the cases of `expected` failed, each message naming its cause; every other case
    ran with the reference's outcome."""
    assert run.returncode == 1, run.output[-4000:]
    assert run.failed == sorted(expected), run.output[-4000:]
    for nodeid, cause in expected.items():
        assert cause in run.messages[nodeid], run.messages[nodeid]
    outcomes = outcomes_by_case(run, label)
    differing = {
        n: (outcomes.get(n), o)
        for n, o in reference.items()
        if outcomes.get(n) != o and n not in expected
    }
    assert not differing, f"outcome differs from the reference's: {differing}"


# -- the reference builds ---------------------------------------------------------------------


def test_default_build_passes_the_corpus(run_suite, reference_outcomes):
    outcomes = reference_outcomes(*SUITE, ADAPTER_CASES)
    assert "failed" not in outcomes.values()
    assert list(outcomes.values()).count("passed") > 10
    assert outcomes[node("export-v2")] == "passed"
    assert outcomes[node("v1-only-refuses-v2")] == "skipped"


@pytest.mark.slow
def test_f32_and_v1only_builds_pass_the_corpus(run_suite, reference_library, reference_outcomes):
    libs = {v: reference_library(v) for v in ("f32", "v1only")}
    labels = {v: f"ctypes:{lib}" for v, lib in libs.items()}
    run = run_suite(*(f"--impl={label}" for label in labels.values()), *SUITE, ADAPTER_CASES)
    assert run.returncode == 0, run.output[-4000:]
    assert not run.failed
    f32, v1only = (outcomes_by_case(run, labels[v]) for v in ("f32", "v1only"))
    assert f32 == reference_outcomes(*SUITE, ADAPTER_CASES)
    # The v1-only build refuses v2 with EFORMAT and skips every v2 writing case.
    assert v1only[node("v1-only-refuses-v2")] == "passed"
    assert v1only[node("export-v2")] == "skipped"
    collected = run_suite("--collect-only", "-m", "v2 and writer", *SUITE, ADAPTER_CASES)
    v2_writers = [line for line in collected.output.splitlines() if "::" in line]
    assert node("export-v2") in v2_writers
    not_skipped = [n for n in v2_writers if v1only.get(n) != "skipped"]
    assert not not_skipped


def test_python_conformance_tests_agree_with_ref(run_suite, reference_library):
    if not (ROOT / "conformance").is_dir():
        pytest.skip("no conformance/ tests in this tree")
    label = f"ctypes:{reference_library('default')}"
    # A fixed seed: the property tests draw the same examples for both implementations.
    run = run_suite("--impl=ref", f"--impl={label}", "--hypothesis-seed=0", "conformance")
    ours, python_reference = outcomes_by_case(run, label), outcomes_by_case(run, "ref")
    assert run.returncode == 0, run.output[-4000:]
    # Both pass (agreeing on a failure would prove nothing), and agree test for test.
    for outcomes in (ours, python_reference):
        assert "passed" in outcomes.values(), run.output[-4000:]
        assert "failed" not in outcomes.values(), run.output[-4000:]
    assert ours == python_reference, run.output[-4000:]


def test_inprocess_passes_the_corpus(run_suite, reference_library, reference_outcomes):
    label = f"ctypes:{reference_library('default')}"
    run = run_suite(f"--impl={label}", "--isolation=inprocess", *SUITE, ADAPTER_CASES)
    assert run.returncode == 0, run.output[-4000:]
    assert outcomes_by_case(run, label) == reference_outcomes(*SUITE, ADAPTER_CASES)


# -- crashes and hangs ------------------------------------------------------------------------


def test_a_segfault_fails_only_its_case(run_suite, reference_outcomes, faulty_library):
    label = f"ctypes:{faulty_library('segv')}"
    run = run_suite(f"--impl={label}", *DIRECTED, ADAPTER_CASES)
    expected = {node("crash-import"): "implementation fault: crashed with SIGSEGV in tl_kv_import"}
    assert_only_failed(run, label, expected, reference_outcomes(*DIRECTED, ADAPTER_CASES))


def test_a_hang_times_out_only_its_case(run_suite, reference_outcomes, faulty_library):
    label = f"ctypes:{faulty_library('hang')}"
    run = run_suite(f"--impl={label}", "--call-timeout=1", *DIRECTED, ADAPTER_CASES)
    expected = {node("hang-import"): "implementation fault: timed out after 1 s in tl_kv_import"}
    assert_only_failed(run, label, expected, reference_outcomes(*DIRECTED, ADAPTER_CASES))


def _crash_envelope() -> bytes:
    geometry = oracle.Geometry(2, 1, 1, 2)
    values = np.ones(geometry.values_shape, dtype=np.float32)
    return oracle.encode(geometry, [oracle.Block(TRIGGER_SEGV, 2, values)], 1)


def test_pools_of_a_crashed_worker_are_lost(faulty_library):
    spec = parse_impl(f"ctypes:{faulty_library('segv')}")
    adapter = CtypesAdapter(spec, AdapterSettings())
    geometry = oracle.Geometry(2, 1, 1, 2)
    values = np.zeros(geometry.values_shape, dtype=np.float32)
    try:
        survivor = adapter.open_pool(geometry, 4)
        survivor.write(0, 1, values)
        victim = adapter.open_pool(geometry, 4)
        with pytest.raises(ImplementationFault, match=r"^crashed with SIGSEGV in tl_kv_import$"):
            victim.import_envelope(_crash_envelope(), 4)
        victim.close()
        with pytest.raises(ImplementationFault, match="pool lost when the worker crashed"):
            survivor.free_blocks()
        survivor.close()  # nothing left to destroy: no second fault
        with adapter.open_pool(geometry, 4) as fresh:  # a new worker
            assert fresh.free_blocks() == 4
            assert fresh.write(0, 1, values) == 0
        assert adapter.block_hash(0, [1, 2]) == 0xA91AB0C1027B9366
    finally:
        adapter.close()


def _batch_channel(library: Path, call_timeout: float = 10.0) -> WorkerChannel:
    channel = WorkerChannel(LibrarySession, (str(library), load_status_profile(None)), call_timeout)
    channel.open()
    return channel


@pytest.mark.parametrize(
    ("kind", "fault"),
    [
        ("segv", r"^crashed with SIGSEGV in tl_kv_import$"),
        ("hang", r"timed out .* in tl_kv_import"),
    ],
)
def test_a_batch_answers_each_call_as_alone_and_ends_at_its_fault(faulty_library, kind, fault):
    """Calls made as one request (PoolHandle.query's round trip) are answered one by one: a
    refusal is that call's answer and the next ones are still made; a crash or a hang is the
    call whose answer did not come, named as if it were made alone, and ends the batch."""
    geometry = oracle.Geometry(2, 1, 1, 2)
    channel = _batch_channel(faulty_library(kind), call_timeout=2.0)
    try:
        pool = channel.call("pool_create", (2, 1, 1, 2), 4)
        crash = _crash_envelope() if kind == "segv" else _hang_envelope()
        answers = channel.batch(
            [
                ("free_blocks", (pool,)),
                ("find", (pool, 12345)),
                ("write", (pool, 0, 1, bytes(4 * geometry.n_elements))),
                ("import_envelope", (pool, crash, 4)),
                ("free_blocks", (pool,)),
            ]
        )
        assert len(answers) == 4, answers  # the call after the fault is not made
        assert answers[0] == 4
        assert isinstance(answers[1], Refused)
        assert (answers[1].code, answers[1].call) == ("ENOTFOUND", "tl_kv_pool_find")
        assert answers[2] == 0
        assert isinstance(answers[3], ImplementationFault)
        assert re.search(fault, str(answers[3])), answers[3]
        assert channel.generation == 1  # the worker is gone with its pools
        if kind == "hang":  # hung twice, an operation is not called again: not made, said so
            for hangs in (2, 3):
                pool = channel.call("pool_create", (2, 1, 1, 2), 4)
                later = channel.batch(
                    [
                        ("free_blocks", (pool,)),
                        ("import_envelope", (pool, crash, 4)),
                        ("free_blocks", (pool,)),
                    ]
                )
                assert len(later) == 2, later
                assert later[0] == 4
                assert isinstance(later[1], Quarantined) == (hangs == 3), later
            assert channel.generation == 2  # the third batch made no call that could hang
    finally:
        channel.close()


def test_a_batchs_large_answers_each_keep_their_own_bytes(reference_library):
    """Large answers of one batch cross in shared memory one after another: each is its
    own block's bytes, not the last one's."""
    geometry = oracle.Geometry(16, 4, 2, 64)  # a block of 16 * 4 * 2 * 2 * 64 floats: 128 KiB
    assert 4 * geometry.n_elements >= SHARED_MIN
    channel = _batch_channel(reference_library("f32"))
    try:
        pool = channel.call("pool_create", (16, 4, 2, 64), 3)
        written = [np.full(geometry.n_elements, k + 1, dtype="<f4") for k in range(3)]
        blocks = [channel.call("write", pool, 0, 16, w.tobytes()) for w in written]
        answers = channel.batch([("read", (pool, block)) for block in blocks])
        assert [a[2] for a in answers] == [w.tobytes() for w in written]
    finally:
        channel.close()


def _hang_envelope() -> bytes:
    geometry = oracle.Geometry(2, 1, 1, 2)
    values = np.ones(geometry.values_shape, dtype=np.float32)
    return oracle.encode(geometry, [oracle.Block(TRIGGER_HANG, 2, values)], 1)


@pytest.mark.parametrize("isolation", ["worker", "inprocess"])
def test_statuses_become_refusals_naming_the_function(reference_library, isolation):
    spec = parse_impl(f"ctypes:{reference_library('default')}")
    adapter = CtypesAdapter(spec, AdapterSettings(isolation=isolation))
    try:
        assert adapter.info().describe() == "reads v1,v2, writes v1,v2, pool f16"
        with pytest.raises(Refused) as refused:
            adapter.open_pool(oracle.Geometry(2, 1, 1, 2), 0)
        assert (refused.value.code, refused.value.call) == ("EINVAL", "tl_kv_pool_create")
        with adapter.open_pool(oracle.Geometry(2, 1, 1, 2), 1) as pool:
            with pytest.raises(Refused) as refused:
                pool.find(12345)
            assert (refused.value.code, refused.value.call) == ("ENOTFOUND", "tl_kv_pool_find")
            with pytest.raises(Refused) as refused:
                pool.import_envelope(b"TLKV" + bytes(28), 1)
            assert (refused.value.code, refused.value.call) == ("EFORMAT", "tl_kv_import")
            assert pool.export([], 1) == oracle.encode(pool.geometry, [], 1)
    finally:
        adapter.close()


# -- sanitizers -------------------------------------------------------------------------------


def test_sanitized_reference_runs_clean(run_suite, reference_library, reference_outcomes):
    lib = reference_library("default", sanitize=True)
    assert sanitizer_runtimes(lib)[0].startswith("libasan")
    label = f"ctypes:{lib}"
    run = run_suite(f"--impl={label}", *SUITE, ADAPTER_CASES)
    assert run.returncode == 0, run.output[-4000:]
    assert outcomes_by_case(run, label) == reference_outcomes(*SUITE, ADAPTER_CASES)


def test_a_heap_overflow_fails_its_case_with_the_report(
    run_suite, reference_outcomes, faulty_library
):
    label = f"ctypes:{faulty_library('overflow', sanitize=True)}"
    run = run_suite(f"--impl={label}", *DIRECTED, ADAPTER_CASES)
    overflow = node("overflow-import")
    expected = {overflow: "crashed with SIGABRT in tl_kv_import: AddressSanitizer: heap-buffer"}
    assert_only_failed(run, label, expected, reference_outcomes(*DIRECTED, ADAPTER_CASES))
    message = run.messages[overflow]
    assert "ERROR: AddressSanitizer: heap-buffer-overflow" in message
    assert "0 bytes to the right of 60-byte region" in message  # the envelope, exactly sized
    assert "in tl_kv_import" in message
    assert "overflow.c" in message


def test_inprocess_refuses_a_library_needing_a_runtime_it_lacks(reference_library):
    spec = parse_impl(f"ctypes:{reference_library('default', sanitize=True)}")
    with pytest.raises(SuiteUsageError, match="--isolation=worker"):
        CtypesAdapter(spec, AdapterSettings(isolation="inprocess"))


@pytest.fixture(scope="session")
def library_without_runtime(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The reference compiled with -fsanitize=address but linked without it (as clang links a
    shared library): __asan_* references, and no runtime in DT_NEEDED."""
    out = tmp_path_factory.mktemp("noruntime")
    source = ROOT / "reference" / "clib" / "tl_kv_ref.c"
    cc = shlex.split(os.environ.get("CC") or "cc")
    compile_ = ["-std=c11", "-fPIC", "-O1", "-fsanitize=address", "-I", str(ROOT / "abi")]
    subprocess.run([*cc, *compile_, "-c", str(source), "-o", str(out / "ref.o")], check=True)
    subprocess.run([*cc, "-shared", str(out / "ref.o"), "-o", str(out / "lib.so")], check=True)
    return out / "lib.so"


def test_a_runtime_the_library_does_not_name_must_be_given(run_suite, library_without_runtime):
    lib = library_without_runtime
    run = run_suite(f"--impl=ctypes:{lib}", "cases/hash.yaml")
    assert run.returncode == 4
    assert "names no runtime" in run.output
    assert "--sanitizer-runtime=PATH" in run.output
    cc = shlex.split(os.environ.get("CC") or "cc")
    asan = subprocess.run(
        [*cc, "-print-file-name=libasan.so"], capture_output=True, text=True, check=True
    ).stdout.strip()
    run = run_suite(f"--impl=ctypes:{lib}", f"--sanitizer-runtime={asan}", "cases/hash.yaml")
    assert run.returncode == 0, run.output[-4000:]
    assert run.passed


def test_sanitizer_environment_keeps_the_options_it_relies_on():
    env = sanitizer_environment(
        ["libasan.so.8", "libubsan.so.1"],
        {"LD_PRELOAD": "libfoo.so", "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0"},
    )
    assert env["LD_PRELOAD"] == "libasan.so.8:libubsan.so.1:libfoo.so"
    # The user's options win over the defaults, the adapter's over the user's.
    assert env["ASAN_OPTIONS"].index("detect_leaks=1") > env["ASAN_OPTIONS"].index("detect_leaks=0")
    assert env["ASAN_OPTIONS"].endswith("abort_on_error=1:halt_on_error=1:log_path=stderr")
    assert "halt_on_error=1" in env["UBSAN_OPTIONS"]
    assert env["PYTHONMALLOC"] == "malloc"


def test_sanitizer_report_is_cut_to_the_library_frames():
    output = (
        "noise from an earlier call\n"
        "=================================================================\n"
        "==7==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x1\n"
        "READ of size 1 at 0x1 thread T0\n"
        "    #0 0x1 in tl_kv_import lib.c:3\n"
        "    #1 0x2 in ffi_call (/lib/libffi.so.8+0x6b0c)\n"
        "    #2 0x3 in _PyEval_EvalFrameDefault Python/ceval.c:4769\n"
        "SUMMARY: AddressSanitizer: heap-buffer-overflow lib.c:3 in tl_kv_import\n"
        "Shadow bytes around the buggy address:\n"
    )
    headline, text = sanitizer_report(output)
    assert headline == "AddressSanitizer: heap-buffer-overflow"
    assert text.startswith("=====")
    assert "tl_kv_import lib.c:3" in text
    assert "ffi_call" in text
    assert "_PyEval" not in text
    assert "Shadow bytes" not in text
    assert "noise" not in text
    assert sanitizer_report("just some output\n") is None


def test_large_buffers_cross_in_shared_memory_wherever_they_are_nested():
    """A worker call's large buffers go through the shared memory, however deep in its
    arguments (a list of chunks, each a tuple); token lists and small bytes pass as they are."""
    box = SharedBuffer.create()
    if box is None:
        pytest.skip("no memfd on this system: every buffer goes through the pipe")
    try:
        large, other = bytes(range(256)) * (SHARED_MIN // 256), b"\x07" * SHARED_MIN
        tokens = list(range(64))
        args = (3, tokens, b"small", [(0, large), (1, [other])])
        shaped, end = box.put(args)
        assert end == len(large) + len(other)  # where a batch's next reply would go
        assert len(pickle.dumps(shaped)) < 1000  # neither large buffer is in the message
        assert shaped[1] is tokens  # passed as it is, not rebuilt
        assert box.take(shaped) == args
    finally:
        box.close()


# -- status profiles --------------------------------------------------------------------------


def test_a_status_profile_maps_other_numbers(run_suite, reference_outcomes, faulty_library):
    lib = faulty_library("statuses")
    label = f"ctypes:{lib},status-profile={FAULTY / 'statuses.yaml'}"
    run = run_suite(f"--impl={label}", *DIRECTED, ADAPTER_CASES)
    assert run.returncode == 0, run.output[-4000:]
    assert outcomes_by_case(run, label) == reference_outcomes(*DIRECTED, ADAPTER_CASES)


def test_without_the_profile_other_numbers_are_faults(run_suite, faulty_library):
    run = run_suite(f"--impl=ctypes:{faulty_library('statuses')}", ADAPTER_CASES)
    assert run.returncode == 1
    message = run.messages[node("status-einval")]
    assert "implementation fault: tl_kv_pool_write returned status -22, which is none of" in message


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("EFORMAT: -22\nEBADTHING: 3\n", "unknown status 'EBADTHING'"),
        ("EFORMAT: -1\n", "EINVAL and EFORMAT are both -1"),
        ("- EFORMAT\n", "expected a mapping of status names"),
        ("EFORMAT: minus three\n", "EFORMAT is 'minus three', expected a C int"),
        ("EFORMAT: [\n", "codes.yaml:2: invalid YAML"),
    ],
)
def test_bad_status_profiles_are_usage_errors(tmp_path, text, problem):
    profile = tmp_path / "codes.yaml"
    profile.write_text(text)
    with pytest.raises(SuiteUsageError, match=re.escape(problem)):
        load_status_profile(str(profile))


def test_status_profile_names_may_carry_the_tl_prefix(tmp_path):
    profile = tmp_path / "codes.yaml"
    profile.write_text("TL_EFORMAT: -74\nOK: 1\n")
    statuses = load_status_profile(str(profile))
    assert statuses["EFORMAT"] == -74
    assert statuses["OK"] == 1
    assert statuses["EINVAL"] == -1


# -- optional symbols -------------------------------------------------------------------------

RETAIN_CASES = ("several-references", "a-retained-block-outlives-a-released-one")


def test_retain_is_optional(run_suite, reference_library, tmp_path):
    """A library without tl_kv_pool_retain loads and passes; the cases of several references
    are skipped with the reason, and run where the symbol is exported."""
    from tlkv_conformance.references.clib.build import build_library

    source = patched_copy(
        ROOT / "reference" / "clib" / "tl_kv_ref.c",
        [("int tl_kv_pool_retain(", "int tl_kv_pool_retain_left_out(")],
        tmp_path / "no_retain.c",
    )
    library = build_library(tmp_path, source=source)
    without = run_suite(f"--impl=ctypes:{library}", "cases/pool.yaml")
    assert without.returncode == 0, without.output
    skipped = {node.split("::")[-1] for node in without.with_outcome("skipped")}
    assert set(RETAIN_CASES) <= skipped, without.output
    assert "takes no second reference to a block (retain: optional" in without.output
    with_retain = run_suite(f"--impl=ctypes:{reference_library('default')}", "cases/pool.yaml")
    assert {f"cases/pool.yaml::{case}" for case in RETAIN_CASES} <= set(with_retain.passed)


# -- usage errors -----------------------------------------------------------------------------


def _usage_cases() -> list[tuple[str, str]]:
    return [
        ("missing-symbol", "does not export tl_kv_import (the symbols of abi/tl_kv.h)"),
        ("no-such-file", "no library at"),
        ("not-a-library", "cannot load"),
        ("bad-profile", "unknown status 'EWHATEVER'"),
    ]


@pytest.mark.parametrize(("kind", "problem"), _usage_cases())
def test_usage_errors_are_one_line(run_suite, faulty_library, reference_library, tmp_path, kind,
                                   problem):  # fmt: skip
    if kind == "missing-symbol":
        impl = f"ctypes:{faulty_library('missing')}"
    elif kind == "no-such-file":
        impl = f"ctypes:{tmp_path / 'absent.so'}"
    elif kind == "not-a-library":
        text = tmp_path / "text.so"
        text.write_text("not an ELF file\n")
        impl = f"ctypes:{text}"
    else:
        profile = tmp_path / "codes.yaml"
        profile.write_text("EWHATEVER: 3\n")
        impl = f"ctypes:{reference_library('default')},status-profile={profile}"
    run = run_suite(f"--impl={impl}", ADAPTER_CASES)
    assert run.returncode == 4, run.output
    errors = [line for line in run.output.splitlines() if line.startswith("ERROR:")]
    assert len(errors) == 1, run.output
    assert errors[0].startswith(f"ERROR: --impl {impl}: ")
    assert problem in errors[0]
    assert "Traceback" not in run.output
