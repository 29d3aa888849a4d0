"""The suite's exit statuses, defined once at the bottom of its layers, and how the command
learns that a run gave its verdict (docs/report.md says what each status means)."""

from __future__ import annotations

# The run gave no verdict: a report that cannot be written, a process that claimed success
# without writing its verdict (pytest's own INTERNAL_ERROR is the same number).
EXIT_INTERNAL = 3
# The run completed without a failure but did not show every MUST requirement that applies
# (Conformance.not_shown; docs/report.md, "What a run must show").
EXIT_NOT_SHOWN = 6
# `tlkv-conformance vectors`: a case file it cannot read; a folder or option it cannot use.
EXIT_BROKEN_CASE_FILE = 2
EXIT_USAGE = 4

# The gate writes its verdict to the file this variable names at the very end of a run, and
# `tlkv-conformance run` trusts a status 0 only from a run that wrote it.
COMPLETION_ENV = "TLKV_COMPLETION_FILE"
