"""The plugin as a user meets it: --impl, the header, planted bugs, case files, known failures."""

from __future__ import annotations

from pathlib import Path

import pytest

from selftest.support import ROOT, patched_copy

PYREF = ROOT / "reference" / "pyref.py"
SPEC_CASE = "cases/writer-v1.yaml::spec-example"


def one_error_line(output: str) -> str:
    errors = [line for line in output.splitlines() if line.startswith("ERROR")]
    assert len(errors) == 1, output
    assert "Traceback" not in output, output
    return errors[0]


@pytest.mark.parametrize(
    ("impl", "expected"),
    [
        ("nonsense", "accepted forms: ref"),
        ("java:foo", "unknown kind"),
        ("py:not a module", "not a dotted module name"),
        ("py:no_such_module_here", "cannot import no_such_module_here"),
        ("py:json", "lacks READ_VERSIONS"),
        ("grpc:localhost", "is not HOST:PORT"),
        ("ctypes:", "no library path"),
        ("ctypes:/x.so,colour=red", "unknown option"),
    ],
)
def test_bad_impl_is_one_line(run_suite, impl: str, expected: str) -> None:
    run = run_suite(f"--impl={impl}", SPEC_CASE)
    assert run.returncode == 4
    assert expected in one_error_line(run.output)


def test_header_shows_the_testee(run_suite) -> None:
    run = run_suite("-v", SPEC_CASE)  # -v undoes the runner's -q, which hides the header
    assert run.returncode == 0
    assert "tlkv: impl ref (PyModuleAdapter): reads v1,v2, writes v1,v2, pool f16" in run.output


def test_planted_crc_bug_fails_worked_example_showing_bytes(run_suite, tmp_path: Path) -> None:
    patched_copy(
        PYREF, [("crc32c.crc32c(body))", "crc32c.crc32c(body[28:]))")], tmp_path / "planted_crc.py"
    )
    run = run_suite("--impl=py:planted_crc", SPEC_CASE, pythonpath=tmp_path)
    assert run.returncode == 1
    assert run.failed == [SPEC_CASE]
    message = run.output
    assert "crc32c (bytes 56..59): expected 0x4f0b541c (1c 54 0b 4f), got" in message
    assert "54 4c 4b 56 01 00 01 00" in message  # the hex window quotes the bytes
    assert "cases/writer-v1.yaml:" in message  # and the case's YAML is shown


def test_broken_case_file_is_one_clear_error(run_suite, scratch_cases: Path) -> None:
    broken = scratch_cases / "broken.yaml"
    broken.write_text(
        "cases:\n  - id: x\n    kind: hash\n    reqs: [HASH-FNV]\n    tokens: [1, -2]\n"
    )
    run = run_suite(str(broken))
    assert run.returncode != 0
    shown = broken.relative_to(ROOT)
    assert f"{shown}:5: case 'x': -2 is less than the minimum of 0" in run.output
    assert "Traceback" not in run.output
    assert run.output.count("-2 is less than the minimum") == 1


def test_known_failures(run_suite, tmp_path: Path) -> None:
    patched_copy(
        PYREF, [("crc32c.crc32c(body))", "crc32c.crc32c(body[28:]))")], tmp_path / "planted_crc.py"
    )
    known = tmp_path / "known.yaml"
    known.write_text(f"- case: {SPEC_CASE}\n  reason: CRC over records only (ticket 12)\n")
    run = run_suite(
        "--impl=py:planted_crc", f"--known-failures={known}", SPEC_CASE, pythonpath=tmp_path
    )
    assert run.returncode == 0, run.output
    assert run.with_outcome("xfailed") == [SPEC_CASE]

    # The same list against an implementation without the bug: the strict entry now passes.
    run = run_suite(f"--known-failures={known}", SPEC_CASE)
    assert run.returncode == 1
    assert "XPASS(strict)" in run.output

    stale = tmp_path / "stale.yaml"
    stale.write_text("- case: cases/writer-v1.yaml::no-such-case\n  reason: gone\n")
    run = run_suite(f"--known-failures={stale}", "cases/writer-v1.yaml")
    assert "stale known failures" in one_error_line(run.output)
    assert "no-such-case" in run.output
