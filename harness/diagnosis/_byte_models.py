"""Signatures of an FNV step fed the wrong operand: the block hash's input bytes are the spec's,
but what each step XORs into the state is not the byte as an unsigned 8-bit value. A parametrised
model of that operand: each byte sign-extended (walked through a signed `char`, then widened to
64 or to 32 bits), masked to 7 bits, or the input taken a word at a time (2, 4 or 8 bytes
little-endian, or each of the input's integers whole: the parent's 64 bits, each token's 32),
one multiply per word. Every variant is computed again with the spec's basis, prime and zero
rule, and named only where it gives exactly the implementation's hash; a variant that changes
nothing on this input (no byte of 0x80 or more to sign-extend) cannot give a wrong hash, so it
is never named for one. The block hash's other parameters are _hash_signatures'; this model is
tried where none of them fits."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from .. import oracle
from ._causes import Cause
from ._signatures import one_of

U64 = (1 << 64) - 1
OPERAND = "hash-xor-operand:"  # the id prefix of the causes below
PARENT_BYTES, TOKEN_BYTES = 8, 4  # the hash input: le_u64(parent), then le_u32 of each token


@dataclass(frozen=True)
class _Operand:
    """What one FNV step XORs in: `words` cuts the hashed bytes into the values XORed (None
    when this input cannot be cut so), each followed by one multiply."""

    name: str
    title: str
    words: Callable[[bytes, int], Sequence[int] | None]


def _bytes_as(transform: Callable[[int], int]) -> Callable[[bytes, int], Sequence[int]]:
    return lambda data, n_tokens: [transform(byte) for byte in data]


def _sign_extended(bits: int) -> Callable[[int], int]:
    high = ((1 << bits) - 1) ^ 0xFF
    return lambda byte: byte | high if byte & 0x80 else byte


def _words_of(width: int) -> Callable[[bytes, int], Sequence[int] | None]:
    def words(data: bytes, n_tokens: int) -> Sequence[int] | None:
        if len(data) % width:
            return None
        return [
            int.from_bytes(data[at : at + width], "little") for at in range(0, len(data), width)
        ]

    return words


def _integers(data: bytes, n_tokens: int) -> Sequence[int] | None:
    """The parent's 8 bytes as one word, then each token's 4 (the spec's input layout)."""
    if len(data) != PARENT_BYTES + TOKEN_BYTES * n_tokens:
        return None
    widths = [PARENT_BYTES] + [TOKEN_BYTES] * n_tokens
    out, at = [], 0
    for width in widths:
        out.append(int.from_bytes(data[at : at + width], "little"))
        at += width
    return out


OPERANDS = (
    _Operand(
        "sign-extended-64",
        "each hashed byte of 0x80 or more sign-extended to 64 bits before the FNV XOR (read "
        "through a signed char), flipping the state's high 56 bits too",
        _bytes_as(_sign_extended(64)),
    ),
    _Operand(
        "sign-extended-32",
        "each hashed byte of 0x80 or more sign-extended to 32 bits before the FNV XOR (a "
        "signed char widened to a 32-bit int, then zero-extended)",
        _bytes_as(_sign_extended(32)),
    ),
    _Operand(
        "masked-7-bit",
        "each hashed byte masked to its low 7 bits before the FNV XOR (its high bit dropped)",
        _bytes_as(lambda byte: byte & 0x7F),
    ),
    *(
        _Operand(
            f"words-{width}",
            f"the hashed bytes XORed {width} at a time as little-endian {8 * width}-bit words, "
            "one FNV multiply per word, not byte by byte",
            _words_of(width),
        )
        for width in (2, 4, 8)
    ),
    _Operand(
        "integers",
        "each input integer XORed whole (the parent's 64 bits, then each token's 32 bits), "
        "one FNV multiply per integer, not byte by byte",
        _integers,
    ),
)


def _fnv_over(words: Sequence[int]) -> int:
    h = oracle.FNV64_OFFSET_BASIS
    for word in words:
        h = ((h ^ word) * oracle.FNV64_PRIME) & U64
    return h or 1  # the zero rule (HASH-ZERO)


def _fits(parent: int, tokens: Sequence[int], actual: int) -> Iterator[_Operand]:
    data = oracle.hash_input(parent, tokens)
    for operand in OPERANDS:
        words = operand.words(data, len(tokens))
        if words is not None and _fnv_over(words) == actual:
            yield operand


def operand_causes(parent: int, tokens: Sequence[int], expected: int, actual: int) -> list[Cause]:
    """The FNV operands that give `actual` for block_hash(parent, tokens): one alone, or "one
    of" several that give the same hash here, then each of them; [] when none does."""
    if actual == expected:
        return []
    named = [
        Cause(
            OPERAND + operand.name,
            operand.title,
            ("HASH-FNV",),
            f"{actual:#018x} is what that computation gives",
        )
        for operand in _fits(parent, tokens, actual)
    ]
    return [one_of(named), *named] if len(named) > 1 else named
