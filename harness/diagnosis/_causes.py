"""What a diagnosis says: a probable cause with its evidence, and a test's attribution."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Cause:
    """A known mistake whose signature the differences match.

    `id` names the mistake (stable: the mutant catalogue and reports refer to it), `reqs` the
    requirements it breaks, `evidence` what in this failure matches it, and `explains` the
    symptoms it also accounts for in other tests of the same run (the Symptoms below)."""

    id: str
    title: str
    reqs: tuple[str, ...]
    evidence: str = ""
    explains: frozenset[str] = frozenset()
    # causes that, when the run shows them too, account for this failure better (a limit
    # answered before a rule the reader does not check at all)
    yields_to: frozenset[str] = frozenset()
    # a "one of" whose members the run's other failures show as often as each other (and more
    # than this one of): the run settles on the first, not on the one of (the others would
    # also fail where no failure is: a hash's mask before the basis it mimics)
    first_on_ties: bool = False

    def yields_to_cause(self, cause_id: str) -> bool:
        """Whether `cause_id` accounts for this failure better: one of `yields_to`, or of a
        family there given by its ids' prefix and "*" ("crc-*": every CRC mistake)."""
        return any(
            cause_id == y or (y.endswith("*") and cause_id.startswith(y[:-1]))
            for y in self.yields_to
        )

    def cited(self) -> str:
        """The requirements it breaks, as shown after its title (none: an operation that fails
        whatever the input)."""
        return f" [{', '.join(self.reqs)}]" if self.reqs else ""

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "title": self.title,
            "requirements": list(self.reqs),
            "evidence": self.evidence,
            "explains": sorted(self.explains),
            "yields_to": sorted(self.yields_to),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Cause:
        return cls(
            data["id"],
            data["title"],
            tuple(data["requirements"]),
            data.get("evidence", ""),
            frozenset(data.get("explains", ())),
            frozenset(data.get("yields_to", ())),
        )


# Symptoms: what a failure shows when its own evidence cannot say why (a valid envelope refused
# with EFORMAT, an export whose only difference is its CRC). A cause found elsewhere in the run
# that explains the symptom makes such a failure its consequence.
VALID_REFUSED = "valid-refused:{code}"
REFUSED_INSTEAD = "refused:{code}"
CRC_ONLY = "crc-only"
FAULT = "fault"  # a crash, hang or quarantine outside a case that expected one

# Every refusal a broken CRC (or a reader that misreads the envelope's length or magic) gives:
# the reader rules' format error.
FORMAT_ERRORS = frozenset(
    s.format(code=c) for s in (VALID_REFUSED, REFUSED_INSTEAD) for c in ("EFORMAT", "DATA_LOSS")
)


@dataclass(frozen=True)
class Attribution:
    """What a failed test is blamed on: its probable causes (most specific first), the
    requirements whose own bytes or fields differ, and its symptom."""

    causes: tuple[Cause, ...] = ()
    blamed: tuple[str, ...] = ()
    symptom: str = ""
    note: str = ""  # why nothing more precise could be said
    # the run's cause (id) that accounts for this failure better than its own evidence
    # (diagnose_run), whose requirements are then blamed
    consequence: str = ""

    @property
    def cause(self) -> Cause | None:
        return self.causes[0] if self.causes else None

    def headline(self) -> str:
        """One line for the top of the failure: the probable cause, or what is blamed."""
        if self.cause is not None:
            evidence = f": {self.cause.evidence}" if self.cause.evidence else ""
            return f"probable cause: {self.cause.title}{self.cause.cited()}{evidence}"
        if self.blamed:
            return f"blamed on {', '.join(self.blamed)} (no known mistake matches the difference)"
        return ""


@dataclass
class Finding:
    """One cause across a run: the tests whose own evidence shows it, and those it explains."""

    cause: Cause
    shown_by: list[str] = field(default_factory=list)
    explains: list[str] = field(default_factory=list)

    @property
    def tests(self) -> int:
        return len(self.shown_by) + len(self.explains)
