"""The `hash` and `hash-sequence` kinds: block_hash against the oracle."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ... import oracle
from ...adapters import Capability
from ...checks import (
    CaseFailure,
)
from ...errors import ImplementationFault
from ...evidence import FaultEvidence, HashEvidence
from ...testee import Testee
from .._sources import (
    CaseDataError,
    tokens_of,
)
from ._base import (
    Case,
    FileContext,
    needs,
)

# -- hashing ----------------------------------------------------------------------------------


def _hash(testee: Testee, parent: int, tokens: Sequence[int]) -> int:
    """block_hash of the testee; a fault fails the case with the input it faulted on (the
    diagnosis probes the hash for the integer type it packs token ids as)."""
    try:
        return testee.adapter.block_hash(parent, list(tokens))
    except ImplementationFault as fault:
        evidence = FaultEvidence.of(fault, (parent, tuple(tokens)))
        raise CaseFailure(f"implementation fault: {fault}", evidence) from None


def _quote_input(parent: int, tokens: list[int]) -> str:
    data = oracle.hash_input(parent, tokens)
    shown = data[:48].hex(" ") + (" ..." if len(data) > 48 else "")
    return f"{len(data)} bytes hashed: {shown}"


@dataclass(frozen=True, eq=False, kw_only=True)
class HashCase(Case):
    kind = "hash"
    markers = ("hash",)

    parent: int
    tokens: tuple[int, ...]
    expected: int

    @classmethod
    def build(cls, raw: Mapping[str, Any], common: dict[str, Any], ctx: FileContext) -> list[Case]:
        parent, tokens = raw.get("parent", 0), tokens_of(raw["tokens"])
        computed = oracle.block_hash(parent, tokens)
        if "expect" in raw and raw["expect"] != computed:
            raise CaseDataError(f"expect is {raw['expect']:#x}, the oracle computes {computed:#x}")
        return [cls(**common, parent=parent, tokens=tuple(tokens), expected=computed)]

    def skip_reason(self, testee: Testee) -> str | None:
        return needs(testee, Capability.HASH)

    def run(self, testee: Testee) -> None:
        got = _hash(testee, self.parent, self.tokens)
        if got != self.expected:
            raise CaseFailure(
                f"block_hash(parent {self.parent:#x}, {len(self.tokens)} tokens) = {got:#018x}, "
                f"expected {self.expected:#018x}\n{_quote_input(self.parent, list(self.tokens))}",
                HashEvidence(self.parent, self.tokens, self.expected, got),
            )


@dataclass(frozen=True, eq=False, kw_only=True)
class HashSequenceCase(Case):
    kind = "hash-sequence"
    markers = ("hash",)

    block_tokens: int
    tokens: tuple[int, ...]
    expected: tuple[int, ...]

    @classmethod
    def build(cls, raw: Mapping[str, Any], common: dict[str, Any], ctx: FileContext) -> list[Case]:
        tokens, block_tokens = tokens_of(raw["tokens"]), raw["block_tokens"]
        full = [h for h in oracle.sequence_hashes(tokens, block_tokens) if h != oracle.NO_HASH]
        if "expect" in raw and list(raw["expect"]) != full:
            raise CaseDataError(
                "expect differs from the oracle's hashes: " + ", ".join(f"{h:#x}" for h in full)
            )
        if not full:
            raise CaseDataError("the sequence has no full block, so nothing to hash")
        return [
            cls(**common, block_tokens=block_tokens, tokens=tuple(tokens), expected=tuple(full))
        ]

    def skip_reason(self, testee: Testee) -> str | None:
        return needs(testee, Capability.HASH)

    def run(self, testee: Testee) -> None:
        parent = oracle.NO_HASH
        b = self.block_tokens
        for index, expected in enumerate(self.expected):
            block = list(self.tokens[index * b : (index + 1) * b])
            got = _hash(testee, parent, block)
            if got != expected:
                raise CaseFailure(
                    f"block {index} of {len(self.expected)} (B = {b}): hash {got:#018x}, expected "
                    f"{expected:#018x} (parent {parent:#x})\n{_quote_input(parent, block)}",
                    HashEvidence(parent, tuple(block), expected, got),
                )
            parent = got
