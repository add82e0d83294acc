"""RetainedListing: every unfinished item and each owner's newest finished ones are kept, the same
ones whatever order they finished in; the listing is in key order, overall and per owner."""
from __future__ import annotations

import itertools

from sluice.readmodels.retention import RetainedListing


def key(n: int) -> tuple[int, str]:
    return n * 1_000_000, f"item-{n:02d}"


def test_each_owner_keeps_its_newest_finished_items_whatever_order_they_finished_in():
    kept_sets = set()
    for order in itertools.permutations(range(5)):
        listing = RetainedListing(2)
        for n in range(5):
            listing.add(key(n), "a")
        listing.add(key(5), "b")
        forgotten = [item for n in order for item in listing.finish(key(n), "a")]
        assert sorted(forgotten) == ["item-00", "item-01", "item-02"]
        kept_sets.add(tuple(listing.listing()))
    assert kept_sets == {(key(3), key(4), key(5))}


def test_unfinished_items_stay_and_are_listed_on_their_own():
    listing = RetainedListing(1)
    for n in range(4):
        listing.add(key(n), "a" if n % 2 else "b")
    assert listing.finish(key(0), "b") == [] and listing.finish(key(2), "b") == ["item-00"]
    assert list(listing.listing()) == [key(1), key(2), key(3)]
    assert list(listing.listing("b")) == [key(2)]
    assert list(listing.listing(unfinished_only=True)) == [key(1), key(3)]
    assert list(listing.listing("a", after=key(1))) == [key(3)]
    assert listing.keeps(key(2), "b") and listing.keeps(key(1), "a") and not listing.keeps(key(0), "b")
    assert listing.finish(key(0), "b") == []  # not unfinished (any more): nothing to do


def test_index_starts_again_and_forgets_beyond_the_bound_and_none_keeps_all():
    items = [(key(n), "a", n < 4) for n in range(6)]
    listing = RetainedListing(2)
    assert sorted(listing.index(reversed(items))) == ["item-00", "item-01"]
    assert list(listing.listing()) == [key(2), key(3), key(4), key(5)]
    everything = RetainedListing(None)
    assert everything.index(items) == [] and len(list(everything.listing())) == 6


def test_the_overall_order_stays_right_across_compactions():
    listing = RetainedListing(3)
    for n in range(60):
        listing.add(key(n), f"owner-{n % 4}")
    for n in range(60):
        listing.finish(key(n), f"owner-{n % 4}")
    assert list(listing.listing()) == [key(n) for n in range(48, 60)]
    assert list(listing.listing(after=key(50))) == [key(n) for n in range(51, 60)]


def test_an_item_forgotten_and_added_again_is_listed_once():
    listing = RetainedListing(1)
    for n in range(3):
        listing.add(key(n), "a")
        listing.finish(key(n), "a")
    listing.add(key(0), "a")  # read back from the log
    assert list(listing.listing(unfinished_only=True)) == [key(0)]
    assert list(listing.listing()) == [key(0), key(2)]
    assert listing.finish(key(0), "a") == ["item-00"]
    assert list(listing.listing()) == [key(2)]
