"""What signatures share: naming together the known mistakes that give the same bytes (the
block hash's model: _hash_signatures; the CRC-32C trailer's: _crc_signatures)."""

from __future__ import annotations

from collections.abc import Sequence

from ._causes import Cause

# The id of known mistakes named together: "one-of:" and their ids joined by "+".
ONE_OF = "one-of:"


def one_of(causes: Sequence[Cause], first_on_ties: bool = False) -> Cause:
    """The known mistakes that give exactly the bytes the implementation gave, each checked on
    this run's evidence, named together when the evidence cannot tell them apart (one alone:
    that one). The evidence is the first's; the report says "one of: A; B", never A alone.
    `first_on_ties`: where the run's other failures show them as often as each other, and more
    than this one of, the run settles on the first (Cause)."""
    if len(causes) == 1:
        return causes[0]
    return Cause(
        ONE_OF + "+".join(c.id for c in causes),
        "one of: " + "; ".join(c.title for c in causes),
        tuple(dict.fromkeys(r for c in causes for r in c.reqs)),
        f"{causes[0].evidence} (each of these mistakes gives exactly these bytes)",
        frozenset().union(*(c.explains for c in causes)),
        first_on_ties=first_on_ties,
    )
