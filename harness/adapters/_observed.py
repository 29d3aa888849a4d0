"""What an implementation fault was, as observed: an exception of a given type, a crash by a
signal, an exit with a status, a hang, a status breach (an answer outside the contract's
statuses, `*n_out` left non-zero after a refusal), a broken worker channel; with the operation
it happened in. Read from the one-line messages the ways in write when they raise
ImplementationFault (the worker channel, the C and Python sessions, the gRPC client), so that a
probable cause is titled with what was seen, never "a crash or hang" for all of them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# How _worker_channel.py says that the worker exited with _worker.CHANNEL_BROKEN_STATUS (its
# pipes failed under it: the implementation closed or replaced descriptors it did not open).
CHANNEL_BROKEN = "broke the worker's channel to the suite (closed its pipes)"


@dataclass(frozen=True)
class ObservedFault:
    """`kind`: exception, crash, exit, hang, status, channel, answer, quarantined or fault;
    `operation`: the call it happened in ("" when the message does not say); `what`: what it
    did, as a present-tense phrase ("raises ValueError", "crashes with SIGSEGV")."""

    kind: str
    operation: str
    what: str

    @property
    def title(self) -> str:
        return f"{self.operation} {self.what}" if self.operation else f"an operation {self.what}"


_OP = r"(?P<op>[\w.()]+)"
# In the order tried: the first that matches the message's first line says what it was.
_FORMS: tuple[tuple[str, re.Pattern[str], str], ...] = (
    ("quarantined", re.compile(rf"^not called in {_OP}"), "was not called (quarantined)"),
    ("fault", re.compile(r"^pool lost when the worker (?P<how>.+)"), "lost its pool ({how})"),
    ("hang", re.compile(rf"timed out after [\d.]+ s in {_OP}"), "hangs"),
    ("crash", re.compile(rf"crashed with (?P<signal>[\w ]+) in {_OP}"), "crashes with {signal}"),
    (
        "channel",
        re.compile(rf"{re.escape(CHANNEL_BROKEN)} in {_OP}"),
        "breaks the worker's channel (closes descriptors it did not open)",
    ),
    (
        "exit",
        re.compile(rf"exited with status (?P<status>-?\d+) in {_OP}"),
        "exits with status {status}",
    ),
    (
        "status",
        re.compile(rf"^{_OP} refused with (?P<code>\w+) but left \*n_out = (?P<n>\d+)"),
        "refuses with {code} but leaves *n_out = {n} (0 is due after any failure)",
    ),
    (
        "status",
        re.compile(rf"^{_OP} succeeded with \*n_out = (?P<n>\d+), more than max_blocks"),
        "answers *n_out = {n}, more than max_blocks",
    ),
    (
        "status",
        re.compile(rf"^{_OP} returned status (?P<status>-?\d+), which is none of"),
        "answers status {status}, which the contract does not define",
    ),
    (
        "status",
        re.compile(rf"^{_OP} raised KvError with code (?P<code>.+?), not one of"),
        "raises KvError with code {code}, which the contract does not define",
    ),
    (
        "status",
        re.compile(rf"^{_OP} on \S+ failed with (?P<code>\w+)"),
        "fails with status {code}",
    ),
    ("exception", re.compile(rf"^raised (?P<type>SystemExit\(.*?\)) in {_OP}"), "raises {type}"),
    ("exception", re.compile(rf"^{_OP} raised (?P<type>[\w.]+)"), "raises {type}"),
    ("answer", re.compile(rf"^{_OP} returned (?P<value>.+?), expected"), "answers {value}"),
)


def observed_fault(message: str) -> ObservedFault:
    """What the fault `message` (an ImplementationFault's, or a failure's detail) shows."""
    line = message.splitlines()[0] if message else ""
    line = line.removeprefix("implementation fault: ")
    for kind, form, what in _FORMS:
        found = form.search(line)
        if found:
            fields = found.groupdict()
            return ObservedFault(kind, fields.pop("op", "") or "", what.format(**fields))
    return ObservedFault("fault", "", "faults")
