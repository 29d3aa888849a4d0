"""Signatures of mistakes in the block hash: a parametrised model of how an engine computes H.

H(parent, toks) is FNV-1a-64 over le_u64(parent) ‖ le_u32(toks...), a computed 0 replaced by 1.
An engine's mistake changes one parameter of that computation: how a token id or the parent is
encoded (width, extension, byte order, place), which tokens are hashed and in which order, the
FNV variant (prime, order of xor and multiply, width of the state), the offset basis, how the
result is returned, or the zero rule. The model computes each variant again, and keeps those
that give exactly the implementation's hash. The parameters tried, each value with the mistakes
it is, are in tlkv_conformance.diagnosis._hash_models.

The offset basis is not guessed but recovered: with an odd prime the FNV step is invertible
(h = (h ^ b) * P has h ^ b = h * P^-1 mod 2^w), so running the variant backwards over its input
from the implementation's hash gives the basis it must have started from. A variant fits when
that basis is the spec's, or one an engine plausibly typed instead (a hex digit or two changed,
a digit dropped, the 32-bit FNV basis); never any basis at all, which would fit every hash.
Among the fits, those with the fewest mistakes are named (a parent of 0 is the same bytes in
either byte order, so a second mistake there explains nothing more); several with as few give
"one of" them, followed by each alone for diagnose_run to settle on the run's other failures.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from .. import oracle
from ._byte_models import operand_causes
from ._causes import Cause
from ._hash_models import (
    FNV_VARIANTS,
    PARENT_CODES,
    PRIME_TYPOS,
    TOKEN_CODES,
    TOKEN_SPANS,
    U32,
    U64,
    Fnv,
    Mistake,
    ParentCode,
    TokenCode,
    TokenSpan,
    typo,
)
from ._signatures import one_of

MAX_MISTAKES = 2  # a hash explained by more mistakes at once is explained by none
ALL_ONES = (U64, U32)


# -- the offset basis ----------------------------------------------------------------------------


def _basis_mistakes(basis: int, fnv: Fnv) -> tuple[Mistake, ...] | None:
    """The mistake a recovered offset basis shows: none when it is the spec's (for this
    state's width), None when no plausible engine starts from it."""
    right = oracle.FNV64_OFFSET_BASIS & fnv.mask
    if basis == right:
        return ()
    named = {0x811C9DC5: "the 32-bit FNV offset basis", 0: "0, no offset basis"}
    how = named.get(basis) or (typo(basis, right) if fnv.bits == 64 else None)
    if how is None:
        return None
    return (
        Mistake(
            f"hash-offset-basis:{basis:#x}",
            f"the FNV-1a offset basis is {basis:#x}, not {right:#x} ({how})",
            "HASH-FNV",
        ),
    )


# -- the zero rule -------------------------------------------------------------------------------


def _zero_replacement(parent: int, tokens: Sequence[int], actual: int) -> Cause | None:
    """A block whose FNV-1a is 0 hashed as another constant than 1 (0 itself: no zero rule)."""
    if oracle.fnv1a64(oracle.hash_input(parent, tokens)) != 0:
        return None
    if actual == 0:
        return Cause(
            "hash-no-zero-rule",
            "a computed hash of 0 not replaced by 1",
            ("HASH-ZERO",),
            "FNV-1a of the input is 0; the implementation returned it as it was",
        )
    if actual in ALL_ONES or actual == oracle.FNV64_OFFSET_BASIS or actual < 0x100:
        return Cause(
            f"hash-zero-replaced:{actual:#x}",
            f"a computed hash of 0 replaced by {actual:#x}, not 1",
            ("HASH-ZERO",),
            f"FNV-1a of the input is 0; the implementation returned {actual:#018x}",
        )
    return None


# -- what is returned ---------------------------------------------------------------------------

RESULT_32_BIT = Mistake(
    "hash-result-32-bit", "the hash returned in 32 bits (its low half)", "HASH-FNV"
)
LOW_BIT_SET = Mistake(
    "hash-low-bit-set",
    "every hash returned with its low bit set (h | 1), not only a 0 replaced by 1",
    "HASH-ZERO",
)
BYTE_SWAPPED = Mistake(
    "hash-result-byte-swapped", "the hash returned with its bytes swapped", "HASH-FNV"
)


@dataclass(frozen=True)
class ResultForm:
    """The FNV result kept to its low `bits` and, `signed`, sign-extended back to 64 bits (a
    hash stored in a signed column, a JavaScript number, an int32_t): applied to the spec's
    computation, before the zero rule (`(h & mask) or 1`)."""

    bits: int
    signed: bool = False

    def of(self, raw: int) -> int:
        kept = raw & ((1 << self.bits) - 1)
        if self.signed and kept >> (self.bits - 1):
            kept = (kept - (1 << self.bits)) & U64
        return kept or 1

    @property
    def mistake(self) -> Mistake:
        if self.signed:
            return Mistake(
                f"hash-result-sign-extended:{self.bits}-bit",
                f"the hash returned as its low {self.bits} bits sign-extended to 64 (held in "
                f"an int{self.bits}_t on the way)",
                "HASH-FNV",
            )
        return Mistake(
            f"hash-result-masked:{self.bits}-bit",
            f"the hash returned masked to its low {self.bits} bits (its top "
            + (f"{64 - self.bits} bits" if self.bits < 63 else "bit")
            + " cleared)",
            "HASH-FNV",
        )


# The low 32 bits alone are hash-result-32-bit (RESULT_32_BIT, tried first).
RESULT_FORMS = (ResultForm(63), ResultForm(62), ResultForm(53), ResultForm(48), ResultForm(31))
RESULT_FORMS += (ResultForm(32, signed=True),)


def _raw_hashes(actual: int) -> list[tuple[int, tuple[Mistake, ...]]]:
    """The FNV results the implementation may have computed before returning `actual`, each
    with the mistake of returning it that way (none: as the spec says)."""
    raws: list[tuple[int, tuple[Mistake, ...]]] = [(actual, ())]
    if actual == 1:  # the zero rule at work on a raw 0
        raws.append((0, ()))
    if actual & 1:
        raws.append((actual ^ 1, (LOW_BIT_SET,)))
    raws.append((int.from_bytes(actual.to_bytes(8, "little"), "big"), (BYTE_SWAPPED,)))
    return raws


# -- the search ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Variant:
    tokens: TokenCode
    big_endian: bool
    span: TokenSpan
    parent: ParentCode
    fnv: Fnv
    mistakes: tuple[Mistake, ...]

    def data(self, parent: int, tokens: Sequence[int]) -> bytes:
        encoded = [self.tokens.encode(t) for t in self.span.of(tokens)]
        if self.big_endian:
            encoded = [e[::-1] for e in encoded]
        body = b"".join(encoded)
        if self.parent.place in ("absent", "state"):
            return body
        head = self.parent.encode(parent)
        return head + body if self.parent.place == "before" else body + head


def _variants() -> tuple[_Variant, ...]:
    # A mistyped prime only alone: with a second mistake, too many computations to try.
    out = [
        _Variant(TokenCode(), False, TokenSpan(), ParentCode(), fnv, tuple(fnv.mistakes()))
        for fnv in (Fnv(prime=prime) for prime in PRIME_TYPOS)
    ]
    for code, big_endian, span, parent, fnv in itertools.product(
        TOKEN_CODES, (False, True), TOKEN_SPANS, PARENT_CODES, FNV_VARIANTS
    ):
        mistakes = code.mistakes()
        if big_endian:
            mistakes.append(
                Mistake("hash-token-big-endian", "token ids hashed big-endian", "HASH-INPUT")
            )
        mistakes += span.mistakes() + parent.mistakes() + fnv.mistakes()
        if len(mistakes) <= MAX_MISTAKES:
            out.append(_Variant(code, big_endian, span, parent, fnv, tuple(mistakes)))
    return tuple(out)


VARIANTS = _variants()


def _cause(mistakes: Sequence[Mistake], actual: int) -> Cause:
    if len(mistakes) == 1:
        only = mistakes[0]
        return Cause(
            only.id, only.title, (only.req,), f"{actual:#018x} is what that computation gives"
        )
    return Cause(
        "&".join(m.id for m in mistakes),
        "; and ".join(m.title for m in mistakes),
        tuple(dict.fromkeys(m.req for m in mistakes)),
        f"{actual:#018x} is what those mistakes together give",
    )


def hash_causes(parent: int, tokens: Sequence[int], expected: int, actual: int) -> list[Cause]:
    """The mistakes in computing H that give `actual` for block_hash(parent, tokens), fewest
    first: one alone, or "one of" those that give the same hash here, then each of them."""
    if actual == expected:
        return []
    zero = _zero_replacement(parent, tokens, actual)
    if zero is not None:
        return [zero]
    if actual == oracle.fnv1a64(oracle.hash_input(parent, tokens)) & U32:
        return [_cause([RESULT_32_BIT], actual)]
    raws = _raw_hashes(actual)
    # A hash returned otherwise than computed is tried with the spec's computation alone.
    computed_as_returned = [(raw, returned) for raw, returned in raws if not returned]
    # Each result form is the spec's computation kept to fewer bits: a wrong offset basis that
    # differs only in the bits cleared gives the same hash, so both are named ("one of"), the
    # form first (a run whose every failing hash fits it is settled on it).
    raw = oracle.fnv1a64(oracle.hash_input(parent, tokens))
    fits = [(form.mistake,) for form in RESULT_FORMS if form.of(raw) == actual]
    for variant in VARIANTS:
        if actual > variant.fnv.mask:
            continue
        data = variant.data(parent, tokens)
        for raw, returned in computed_as_returned if variant.mistakes else raws:
            start = variant.fnv.basis_for(data, raw)
            if variant.parent.place == "state":
                basis = () if start == parent & variant.fnv.mask else None
            else:
                basis = _basis_mistakes(start, variant.fnv)
            if basis is None or (basis and variant.fnv.prime in PRIME_TYPOS):
                continue
            mistakes = variant.mistakes + basis + returned
            if mistakes and len(mistakes) <= MAX_MISTAKES:
                fits.append(mistakes)
    if not fits:  # the input's bytes right, the FNV step fed another operand?
        return operand_causes(parent, tokens, expected, actual)
    fewest = min(len(m) for m in fits)
    named = [_cause(m, actual) for m in dict.fromkeys(m for m in fits if len(m) == fewest)]
    return [one_of(named, first_on_ties=True), *named] if len(named) > 1 else named
