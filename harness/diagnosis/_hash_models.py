"""The parameters of the block hash's model (tlkv_conformance.diagnosis._hash_signatures): how
an engine may write a token id or the parent, which tokens it hashes, its FNV variant; each value
with the mistakes it is (none for the spec's)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from .. import oracle

U64 = (1 << 64) - 1
U32 = (1 << 32) - 1


@dataclass(frozen=True)
class Mistake:
    """One parameter of the computation that differs from the spec's."""

    id: str
    title: str
    req: str


# -- the parameters ------------------------------------------------------------------------------


@dataclass(frozen=True)
class TokenCode:
    """How a token id is written into the hashed bytes: its value kept to `value_bits` (an
    int16_t or uint16_t on the way), then `width` bytes, sign- or zero-extended, little-endian
    (the byte order is a parameter of its own)."""

    value_bits: int = 32
    width: int = 4
    signed: bool = False

    def encode(self, token: int) -> bytes:
        value = token & ((1 << self.value_bits) - 1)
        if self.signed and value >> (self.value_bits - 1):
            value -= 1 << self.value_bits
        return (value & ((1 << (8 * self.width)) - 1)).to_bytes(self.width, "little")

    def mistakes(self) -> list[Mistake]:
        """Its mistakes: the value cut to 16 bits, and the width or extension (an id held as
        int16_t and widened to 8 bytes is two mistakes; written as 2 bytes, one)."""
        if self == TokenCode():
            return []
        if (self.value_bits, self.width, self.signed) == (16, 4, False):
            return [
                Mistake(
                    "hash-token-16-bit",
                    "token ids truncated to 16 bits before hashing",
                    "HASH-INPUT",
                )
            ]
        found = []
        kind = "int" if self.signed else "uint"
        if self.value_bits != 8 * self.width and self.width != 4:
            extended = ", sign-extended" if self.signed else ", zero-extended"
            found.append(
                Mistake(
                    f"hash-token-width:{kind}{self.value_bits}-in-{self.width}",
                    f"token ids hashed as {self.width}-byte integers{extended}, not 4-byte",
                    "HASH-INPUT",
                )
            )
        if self.value_bits == 16 and self.width != 2:
            found.append(
                Mistake(
                    f"hash-token-held-in:{kind}16",
                    f"token ids held as {kind}16_t before hashing (cut to 16 bits"
                    + (", sign-extended)" if self.signed else ")"),
                    "HASH-INPUT",
                )
            )
        if self.width < 4:
            found.append(
                Mistake(
                    f"hash-token-width:uint{8 * self.width}-in-{self.width}",
                    f"token ids hashed as {self.width}-byte integers, not 4-byte",
                    "HASH-INPUT",
                )
            )
        return found


TOKEN_CODES = (
    *(
        TokenCode(bits, width, signed)
        for bits, width, signed in itertools.product((32, 16), (4, 8, 2), (False, True))
        if 8 * width >= bits and not (signed and 8 * width == bits)
    ),
    TokenCode(8, 1),
)


@dataclass(frozen=True)
class TokenSpan:
    """Which of the block's tokens are hashed, in which order: those from `first` to the end
    less `dropped`, `reversed` or not; `name` and `title` say the mistake ("" for the spec's)."""

    first: int = 0
    dropped: int = 0
    reversed: bool = False
    name: str = ""
    title: str = ""

    def of(self, tokens: Sequence[int]) -> Sequence[int]:
        hashed = tokens[self.first : len(tokens) - self.dropped]
        return hashed[::-1] if self.reversed else hashed

    def mistakes(self) -> list[Mistake]:
        return [Mistake(f"hash-token-{self.name}", self.title, "HASH-INPUT")] if self.name else []


TOKEN_SPANS = (
    TokenSpan(),
    TokenSpan(
        0,
        1,
        False,
        "skipped:last",
        "the block's last token not hashed (the token loop stops one early)",
    ),
    TokenSpan(
        1,
        0,
        False,
        "skipped:first",
        "the block's first token not hashed (the token loop starts at 1)",
    ),
    TokenSpan(0, 0, True, "order-reversed", "the block's tokens hashed last to first"),
)


@dataclass(frozen=True)
class ParentCode:
    """How the parent hash is written: its value (`as-is`, `low32`, `zero` = not chained,
    `one-if-zero` = the zero rule applied to it), `width` bytes in either byte order, before or
    after the tokens (`place`; `absent`, or `state`: the FNV state the tokens are hashed on
    from, in place of the offset basis)."""

    value: str = "as-is"
    width: int = 8
    place: str = "before"
    big_endian: bool = False

    def encode(self, parent: int) -> bytes:
        value = {
            "as-is": parent,
            "low32": parent & U32,
            "zero": 0,
            "one-if-zero": parent or 1,
        }[self.value]
        order = "big" if self.big_endian else "little"
        return (value & ((1 << (8 * self.width)) - 1)).to_bytes(self.width, order)

    def mistakes(self) -> list[Mistake]:
        found = []
        if self.place == "absent":
            return [
                Mistake(
                    "hash-parent-absent",
                    "the parent hash not hashed at all (only the tokens)",
                    "HASH-CHAIN",
                )
            ]
        if self.place == "state":
            return [
                Mistake(
                    "hash-parent-as-state",
                    "the tokens hashed on from the parent as the FNV state (the parent not "
                    "hashed, no offset basis)",
                    "HASH-CHAIN",
                )
            ]
        if self.value == "zero":
            found.append(
                Mistake(
                    "hash-parent-ignored",
                    "the parent hash not chained in (every block hashed as block 0)",
                    "HASH-CHAIN",
                )
            )
        elif self.value == "low32":
            found.append(
                Mistake("hash-parent-32-bit", "the parent hash truncated to 32 bits", "HASH-INPUT")
            )
        elif self.value == "one-if-zero":
            found.append(
                Mistake(
                    "hash-parent-zero-as-one",
                    "a parent of 0 hashed as 1 (the zero rule applied to the parent)",
                    "HASH-INPUT",
                )
            )
        if self.width != 8:
            found.append(
                Mistake(
                    f"hash-parent-width:{self.width}",
                    f"the parent hash written as {self.width} bytes, not 8",
                    "HASH-INPUT",
                )
            )
        if self.big_endian:
            found.append(
                Mistake("hash-parent-big-endian", "the parent hash hashed big-endian", "HASH-INPUT")
            )
        if self.place == "after":
            found.append(
                Mistake(
                    "hash-parent-after-tokens",
                    "the parent hashed after the tokens instead of before them",
                    "HASH-INPUT",
                )
            )
        return found


PARENT_CODES = (
    *(
        ParentCode(value, width, place, big_endian)
        for value, width, place, big_endian in itertools.product(
            ("as-is", "low32", "zero", "one-if-zero"), (8, 4), ("before", "after"), (False, True)
        )
        if not (value == "low32" and width == 4)  # the same bytes as the 4-byte parent
    ),
    ParentCode(place="absent"),
    ParentCode(place="state"),
)

PRIMES = {
    oracle.FNV64_PRIME: "",
    0x01000193: "the 32-bit FNV prime",
    0x10000001B3: "a zero dropped",
    0x1000000001B3: "a zero added",
}


def typo(value: int, right: int, most: int = 2) -> str | None:
    """How `value` reads as `right` mistyped (which hex digits, counted from the left as it is
    written), or None when it does not: up to `most` digits changed, two swapped, one dropped."""
    written = f"{right:x}"
    got = f"{value:0{len(written)}x}"
    if len(got) == len(written):
        differ = [i for i in range(len(got)) if written[i] != got[i]]
        a, b = [*differ, 0, 0][:2]
        if len(differ) == 2 and b == a + 1 and (written[a], written[b]) == (got[b], got[a]):
            return f"hex digits {a + 1} and {b + 1} swapped"
        if 1 <= len(differ) <= most:
            places = " and ".join(f"{i + 1} ({got[i]} for {written[i]})" for i in differ)
            return f"hex digit{'s' if len(differ) > 1 else ''} {places} mistyped"
    for i in range(len(written)):
        if value == int(written[:i] + written[i + 1 :], 16):
            return f"hex digit {i + 1} ({written[i]}) dropped"
    return None


def _one_typo_from(right: int) -> set[int]:
    """Every value `right` becomes with one hex digit changed, two neighbours swapped or one
    dropped, as it is written."""
    written = f"{right:x}"
    texts = {written[:i] + written[i + 1 :] for i in range(len(written))}
    texts |= {written[:i] + d + written[i + 1 :] for i in range(len(written)) for d in HEX}
    texts |= {
        written[:i] + written[i + 1] + written[i] + written[i + 2 :]
        for i in range(len(written) - 1)
    }
    return {int(text, 16) for text in texts} - {right}


HEX = "0123456789abcdef"
# The prime mistyped otherwise: the odd ones (the FNV step can be run backwards with them),
# each tried as the only mistake.
PRIME_TYPOS = {
    prime: typo(prime, oracle.FNV64_PRIME, 1)
    for prime in sorted(_one_typo_from(oracle.FNV64_PRIME))
    if prime & 1 and prime not in PRIMES
}


@dataclass(frozen=True)
class Fnv:
    """The FNV variant: xor then multiply (FNV-1a) or the reverse (FNV-1), its prime, and the
    width of its state (a 32-bit variable keeps the low half)."""

    xor_first: bool = True
    prime: int = oracle.FNV64_PRIME
    bits: int = 64

    @property
    def mask(self) -> int:
        return (1 << self.bits) - 1

    def run(self, data: bytes, h: int) -> int:
        p, mask = self.prime, self.mask
        if self.xor_first:
            for byte in data:
                h = ((h ^ byte) * p) & mask
        else:
            for byte in data:
                h = ((h * p) & mask) ^ byte
        return h

    def basis_for(self, data: bytes, h: int) -> int:
        """The state the variant must have started from to end at `h` after `data`."""
        inverse, mask = pow(self.prime, -1, 1 << self.bits), self.mask
        if self.xor_first:
            for byte in reversed(data):
                h = ((h * inverse) & mask) ^ byte
        else:
            for byte in reversed(data):
                h = ((h ^ byte) * inverse) & mask
        return h

    def mistakes(self) -> list[Mistake]:
        found = []
        if not self.xor_first:
            found.append(
                Mistake(
                    "hash-fnv1-not-fnv1a",
                    "FNV-1 (multiply, then xor) instead of FNV-1a",
                    "HASH-FNV",
                )
            )
        if self.prime != oracle.FNV64_PRIME:
            prime = f"{self.prime:#010x}"  # the 32-bit prime as it is written, 0x01000193
            how = PRIMES.get(self.prime) or PRIME_TYPOS[self.prime]
            found.append(
                Mistake(
                    f"hash-fnv-prime:{prime}",
                    f"the FNV prime is {prime} ({how}), not {oracle.FNV64_PRIME:#x}",
                    "HASH-FNV",
                )
            )
        if self.bits != 64:
            found.append(
                Mistake(
                    "hash-state-32-bit",
                    "the FNV state held in 32 bits (the hash is its low half)",
                    "HASH-FNV",
                )
            )
        return found


FNV_VARIANTS = tuple(
    Fnv(xor_first, prime, bits)
    for xor_first, prime, bits in itertools.product((True, False), PRIMES, (64, 32))
)
