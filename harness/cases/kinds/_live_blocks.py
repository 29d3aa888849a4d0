"""The blocks a pool case holds (written or imported, not released since), by label, in the
order they were stored: what two of the pool's mistakes are read from when a step fails."""

from __future__ import annotations

from ...evidence import KnownMistake


class LiveBlocks:
    """Each held block's id and hash by (pool, label); the first write answered with a block
    another label of that pool holds, of the same hash."""

    def __init__(self) -> None:
        self._held: dict[tuple[str, str], tuple[int, int]] = {}
        self._shared: tuple[str, str, int] | None = None

    def stored(self, pool: str, label: str, block: int, block_hash: int, written: bool) -> None:
        """`label` (may be empty) holds `block` of `block_hash`; `written`: by a write."""
        if written and self._shared is None:
            holder = next(
                (
                    other
                    for (in_pool, other), held in self._held.items()
                    if in_pool == pool and held == (block, block_hash)
                ),
                None,
            )
            if holder is not None:
                self._shared = (holder, label or "a block", block)
        if label:
            self._held.pop((pool, label), None)  # stored again: the latest
            self._held[(pool, label)] = (block, block_hash)

    def released(self, pool: str, label: str) -> None:
        self._held.pop((pool, label), None)

    def written_twice(self) -> KnownMistake | None:
        """A write answered with a block already held, of its hash (a prefix cache's lookup in
        the write path): the pool took one block where two were due."""
        if self._shared is None:
            return None
        first, second, block = self._shared
        return KnownMistake(
            "write-answers-a-held-block",
            "a write answered with a block already held (of the same hash: a reference more), "
            "not a block of its own",
            ("POOL-REFS",),
            f"{first} and the write of {second}, of one hash, are both block {block}",
        )

    def taken_over(
        self, pool: str, block_hash: int, expect: str, found: int
    ) -> KnownMistake | None:
        """find answered a block stored after the expected one with the same hash, both held:
        the later block took the registration over (an insert-or-assign, registry[h] = b)."""
        labels = [label for in_pool, label in self._held if in_pool == pool]
        if expect not in labels:
            return None
        later = [
            label
            for label in labels[labels.index(expect) + 1 :]
            if self._held[(pool, label)] == (found, block_hash)
        ]
        if not later:
            return None
        return KnownMistake(
            "registry-taken-over-by-duplicate",
            "a hash registered again by a later block of the same hash: the registration taken "
            "over (an insert-or-assign), so find answers the later block",
            ("POOL-FIND",),
            f"find answered {later[0]} (block {found}), stored after {expect} with its hash",
        )
