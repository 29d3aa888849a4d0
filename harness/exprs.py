"""Case data that depends on the geometry under test: geometries stated as data, and integers
written as small expressions over it (docs/cases.md, "Geometry").

A case file is written once and runs at whatever geometry the implementation serves. Where it
says `geometry: testee` the case takes the geometry under test: the implementation's own when it
serves one (`--impl ...,geometry=BxLxHkvxD`, or a gRPC server's pool), else the file's default
(`geometry:` at the top of the file, [4, 2, 2, 8] when absent). `{testee: {n_layers: L+1}}`
derives one from it. An integer field may be an expression over the symbols of that geometry:
`B`, `L`, `Hkv`, `D`, and in a mutation also `R` (the envelope's record size) and `wrap(n)` (a
block count that 32-bit arithmetic wraps to the real length of n records).

A case that cannot mean anything at some geometry (a derived geometry equal to the testee's, a
fill of B - 1 when B is 1, an exact 4 MiB envelope) is not applicable there: it is skipped with
the reason, never passed.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from . import oracle

DEFAULT_GEOMETRY = oracle.Geometry(4, 2, 2, 8)
TESTEE = "testee"
U32_LIMIT = 1 << 32


class NotApplicable(Exception):
    """The case means nothing at this geometry; the message says why."""


@dataclass(frozen=True)
class BuildTarget:
    """What a case is built for: the geometry under test, and a salt that makes the case's
    block hashes its run's own (for a server that keeps blocks from earlier runs)."""

    geometry: oracle.Geometry = DEFAULT_GEOMETRY
    salt: int = 0

    def salted(self, name: str) -> BuildTarget:
        """This target with its salt mixed with `name` (unsalted stays unsalted)."""
        if not self.salt:
            return self
        return BuildTarget(self.geometry, oracle.fnv1a64(name.encode(), self.salt) or 1)


def geometry_symbols(geometry: oracle.Geometry) -> dict[str, int]:
    return {
        "B": geometry.block_tokens,
        "L": geometry.n_layers,
        "Hkv": geometry.n_kv_heads,
        "D": geometry.head_dim,
    }


def wrapping_count(n_blocks: int, record_size: int) -> int:
    """A u32 block count c != n with 28 + c * R + 4 equal to the real length modulo 2^32: what a
    reader computing the length in 32 bits would accept. NotApplicable when none exists."""
    twos = (record_size & -record_size).bit_length() - 1
    step = U32_LIMIT >> min(32, twos)
    count = n_blocks + step
    if count >= U32_LIMIT:
        raise NotApplicable(
            f"no u32 block count wraps to {n_blocks} records of {record_size} bytes"
        )
    return count


_BINARY: dict[type, Callable[[int, int], int]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
}


BUILTINS: Mapping[str, Callable[..., int]] = {"max": max, "min": min}


def evaluate(
    raw: Any, symbols: Mapping[str, int], functions: Mapping[str, Callable[..., int]] = BUILTINS
) -> int:
    """An integer field: an int as it is, or a string expression over `symbols` (+ - * / //,
    parentheses, max, min and the functions given). `/` must divide exactly."""
    functions = {**BUILTINS, **functions}
    if isinstance(raw, bool):
        raise ValueError(f"{raw!r} is not an integer")
    if isinstance(raw, int):
        return raw
    if not isinstance(raw, str):
        raise ValueError(f"{raw!r} is neither an integer nor an expression")
    try:
        tree = ast.parse(raw.strip(), mode="eval")
    except SyntaxError:
        raise ValueError(f"{raw!r} is not an expression over {', '.join(symbols)}") from None

    def value(node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in symbols:
                raise ValueError(f"{raw!r}: unknown name {node.id} (known: {', '.join(symbols)})")
            return symbols[node.id]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -value(node.operand)
        if isinstance(node, ast.BinOp):
            left, right = value(node.left), value(node.right)
            if isinstance(node.op, ast.Div):
                if right == 0 or left % right:
                    raise NotApplicable(f"{raw} is not a whole number here ({left} / {right})")
                return left // right
            if type(node.op) in _BINARY:
                return _BINARY[type(node.op)](left, right)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in functions
            and node.args
            and not node.keywords
        ):
            return int(functions[node.func.id](*(value(a) for a in node.args)))
        raise ValueError(f"{raw!r}: only integers, {', '.join(symbols)}, + - * / // allowed")

    return value(tree.body)


def resolve_geometry(raw: Any, target: oracle.Geometry) -> oracle.Geometry:
    """A case's geometry: fixed ([B, L, Hkv, D] or a mapping), `testee`, or `{testee: {FIELD:
    EXPR}}` (the geometry under test with fields replaced). NotApplicable when a derived
    geometry is impossible here."""
    if raw is None or raw == TESTEE:
        return target
    if isinstance(raw, Mapping) and TESTEE in raw:
        fields = target.as_dict()
        symbols = geometry_symbols(target)
        for name, expression in (raw[TESTEE] or {}).items():
            fields[name] = evaluate(expression, symbols)
        try:
            return oracle.Geometry(**fields)
        except ValueError as exc:
            raise NotApplicable(f"the derived geometry is impossible here: {exc}") from None
    if isinstance(raw, Mapping):
        return oracle.Geometry(**raw)
    return oracle.Geometry(*raw)


def is_fixed(raw: Any) -> bool:
    """Whether a geometry is written out (the case means something at that geometry only)."""
    return raw is not None and raw != TESTEE and not (isinstance(raw, Mapping) and TESTEE in raw)
