"""Which items a long-lived listing keeps, and their listing order: the jobs view's jobs, the
launcher's runs.

Items belong to an owner (their schedule) and are listed by key, (time in microseconds, id). Every
unfinished item is kept; of the finished ones, each owner's newest `finished_per_owner` by key.
The same items stay whatever order they finished in, so a listing rebuilt from the log or from a
snapshot holds the same ones."""
from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from typing import Iterable, Iterator

ListingKey = tuple[int, str]
"""(time in microseconds since the epoch, id): items are listed oldest first."""


class RetainedListing:
    def __init__(self, finished_per_owner: int | None) -> None:
        """`finished_per_owner`: None keeps every finished item."""
        self._finished_per_owner = finished_per_owner
        self.clear()

    def clear(self) -> None:
        self._order: list[ListingKey] = []
        """Every kept item's key, sorted, and the keys of the `_gone` ones forgotten since it was last
        compacted: no O(all items) delete at each."""
        self._gone: set[str] = set()
        self._by_owner: dict[str, list[ListingKey]] = {}
        self._unfinished: dict[ListingKey, str] = {}
        """Unfinished items' keys -> their owner."""
        self._finished: dict[str, list[ListingKey]] = {}
        """Each owner's finished items' keys, sorted: the oldest go beyond finished_per_owner."""

    def index(self, items: Iterable[tuple[ListingKey, str, bool]]) -> list[str]:
        """Start again from (key, owner, finished) of every item; the ids of those not kept."""
        self.clear()
        forgotten = []
        for key, owner, finished in sorted(items):
            self._order.append(key)
            self._by_owner.setdefault(owner, []).append(key)
            if finished:
                self._finished.setdefault(owner, []).append(key)
            else:
                self._unfinished[key] = owner
        for owner in list(self._finished):
            forgotten += self._forget_oldest_finished(owner)
        return forgotten

    def add(self, key: ListingKey, owner: str) -> None:
        """An item not finished: a new one, or one forgotten and read back (its old key leaves the order)."""
        if key[1] in self._gone:
            self._gone.discard(key[1])
            self._order.remove(key)
        insort(self._order, key)  # mostly an append: items come in about the order of their times
        insort(self._by_owner.setdefault(owner, []), key)
        self._unfinished[key] = owner

    def finish(self, key: ListingKey, owner: str) -> list[str]:
        """The item finished; the ids of the owner's finished items no longer kept (maybe its own)."""
        if self._unfinished.pop(key, None) is None:
            return []
        insort(self._finished.setdefault(owner, []), key)
        return self._forget_oldest_finished(owner)

    def keeps(self, key: ListingKey, owner: str) -> bool:
        if key in self._unfinished:
            return True
        listed = self._by_owner.get(owner, [])
        index = bisect_left(listed, key)
        return index < len(listed) and listed[index] == key

    def listing(self, owner: str = "", after: ListingKey | None = None,
                unfinished_only: bool = False) -> Iterator[ListingKey]:
        """The kept keys (the owner's, when given; only unfinished ones with `unfinished_only`) in
        order, after `after`. A page costs its own items; unfinished items are few (pending jobs,
        runs going), so `unfinished_only` sorts them at each call."""
        if unfinished_only:
            keys = sorted(key for key, of in self._unfinished.items() if not owner or of == owner)
        else:
            keys = self._by_owner.get(owner, []) if owner else self._order
        start = 0 if after is None else bisect_right(keys, after)
        gone = self._gone
        return (keys[index] for index in range(start, len(keys)) if keys[index][1] not in gone)  # no copy of the tail

    def _forget_oldest_finished(self, owner: str) -> list[str]:
        finished = self._finished[owner]
        excess = 0 if self._finished_per_owner is None else len(finished) - self._finished_per_owner
        if excess <= 0:
            return []
        listed = self._by_owner[owner]
        for key in finished[:excess]:
            del listed[bisect_left(listed, key)]
        forgotten = [key[1] for key in finished[:excess]]
        del finished[:excess]
        self._gone.update(forgotten)
        if len(self._gone) > len(self._order) // 2:
            self._order = [key for key in self._order if key[1] not in self._gone]
            self._gone = set()
        return forgotten
