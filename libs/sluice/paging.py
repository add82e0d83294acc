"""Paged listings of the gRPC API (AIP-158 style): page_size, an opaque page_token, next_page_token.

A token holds the sort key of the last item sent, so a page is neither skipped nor repeated when
items are added or change before it."""
from __future__ import annotations

import base64
import binascii
import json
from bisect import bisect_right
from typing import Any, Callable, Iterable, Iterator, Sequence, TypeVar

from google.protobuf.message import Message

from sluice.domain.errors import InvalidArgument

T = TypeVar("T")
K = TypeVar("K")

DEFAULT_PAGE_SIZE = 1_000
MAX_PAGE_SIZE = 10_000


def page_size(requested: int) -> int:
    """The size of a page for a requested page_size: 0 is the default, more than the maximum is the
    maximum; ValueError when negative."""
    if requested < 0:
        raise ValueError(f"must be 0 (the default, {DEFAULT_PAGE_SIZE}) or more, got {requested}")
    return min(requested or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)


def after_key(ordered: Sequence[T], key: Callable[[T], K], after: K | None) -> Iterator[tuple[K, T]]:
    """(key, item) of the items of `ordered` (sorted by `key`) whose key is above `after`: a key names
    a position even when its item has since gone or moved, so a page is neither skipped nor repeated
    by a change before it."""
    start = 0 if after is None else bisect_right(ordered, after, key=key)
    return ((key(ordered[index]), ordered[index]) for index in range(start, len(ordered)))  # no copy of the tail


MAX_PAGE_BYTES = 2 * 1024 * 1024
"""Half of gRPC's default 4 MB message limit: one job's trigger context, or one run's inputs, can
carry many partitions."""
_ENTRY_OVERHEAD, _TOKEN_ROOM = 6, 256
"""A repeated entry's tag and length; the next_page_token field."""


def fill_page(candidates: Iterable[tuple[K, T]], size: int, to_message: Callable[[T], Message],
              max_bytes: int = MAX_PAGE_BYTES) -> tuple[list[Message], K | None]:
    """The messages of the first `size` (key, item) candidates, in order, stopping before their
    encoded size passes `max_bytes` (a page holds at least one); the key to start the next page
    after, or None when no candidate is left."""
    messages: list[Message] = []
    total, last = _TOKEN_ROOM, None
    for key, item in candidates:
        if len(messages) == size:
            return messages, last
        message = to_message(item)
        total += message.ByteSize() + _ENTRY_OVERHEAD
        if messages and total > max_bytes:
            return messages, last
        messages.append(message)
        last = key
    return messages, None


def paging(request: Any, listing: str, valid_key: Callable[[tuple], bool]) -> tuple[int, tuple | None]:
    """The request's page size and the key its page starts after (None: the first page);
    InvalidArgument naming the field. `listing` names the RPC whose tokens are accepted."""
    try:
        size = page_size(request.page_size)
    except ValueError as error:
        raise InvalidArgument("page_size", str(error)) from None
    if not request.page_token:
        return size, None
    try:
        token = json.loads(base64.urlsafe_b64decode(request.page_token.encode("ascii")))
        if not (isinstance(token, list) and len(token) == 2 and token[0] == listing and isinstance(token[1], list)):
            raise ValueError
        after = tuple(token[1])
        if not valid_key(after):
            raise ValueError
    except (ValueError, TypeError, UnicodeError, binascii.Error, RecursionError):
        raise InvalidArgument("page_token", f"not a next_page_token of {listing}") from None
    return size, after


def is_time_and_id(key: tuple) -> bool:
    """A (microseconds since the epoch, id) key: how jobs and runs are listed."""
    return len(key) == 2 and type(key[0]) is int and isinstance(key[1], str)


def next_page_token(listing: str, last: tuple | None) -> str:
    """The next page's token: opaque to clients, the key of the last item sent ("" after the last page)."""
    if last is None:
        return ""
    return base64.urlsafe_b64encode(json.dumps([listing, list(last)], separators=(",", ":")).encode()).decode("ascii")
