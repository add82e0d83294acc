"""The ranges of every number and the limits of every size Sluice accepts (README, "Bounds").

Numbers: every duration, count and timestamp a request can carry has a range chosen so that any
date arithmetic Sluice does with it stays finite (datetime covers years 1 to 9999; the latest
accepted time plus the longest accepted duration, times a retry backoff, is far inside it).
Sizes: every request that ends up in a bus message is checked where it enters, so nothing
accepted is later too big for the bus (MAX_BUS_MESSAGE_BYTES, what consumers read)."""
from __future__ import annotations

import json
import re
from datetime import datetime, timezone

from sluice.domain.common import Notification, PartitionCommitted, PartitionRef
from sluice.domain.errors import InvalidArgument, ResourceExhausted

# --- numbers ---------------------------------------------------------------------------------
MAX_DURATION_SECONDS = 10 * 366 * 86_400
"""Ten years: the longest timeout, catch-up, delay, min interval, quiet period, elapsed time and
retry delay (a retry's backed-off delay is capped at it too)."""
MAX_COUNT = 1_000_000
"""Counts: partitions / program runs a trigger waits for, max running, max runs per window."""
MAX_TRIGGER_COUNT = 10_000
"""Partitions or program runs one trigger waits for (each is carried in the job's context)."""
MAX_BYTES = 2**62
"""Byte sizes (data-size triggers, partition sizes, record counts): within int64, sums stay exact."""
MAX_RETRIES = 100
MAX_CATCH_UP_FIRES = 1_000
"""FIRE_EACH after downtime runs at most this many missed times (the newest) per time trigger."""
MAX_WORKING_SET = 10_000
"""Partitions a dataset consumer hands out at once (one gRPC answer)."""
MIN_PRIORITY, MAX_PRIORITY = -1_000_000, 1_000_000
EARLIEST_TIME = datetime(1900, 1, 1, tzinfo=timezone.utc)
LATEST_TIME = datetime(3000, 1, 1, tzinfo=timezone.utc)
"""Timestamps in requests and on the bus lie in [EARLIEST_TIME, LATEST_TIME)."""
EARLIEST_SECONDS = -2_208_988_800  # EARLIEST_TIME as Unix seconds
LATEST_SECONDS = 32_503_680_000  # LATEST_TIME as Unix seconds

# --- sizes -------------------------------------------------------------------------------------
MAX_BUS_MESSAGE_BYTES = 256 * 1024
"""The largest bus message a consumer reads (runtime.consumer.MAX_MESSAGE_BYTES; larger ones are
dead-lettered unread). Every limit below keeps what it bounds well under it."""
MAX_PROPERTIES_BYTES = 64 * 1024
"""A schedule's properties: keys and values, UTF-8, summed. A schedule travels in job and
match messages with a notification beside it."""
MAX_PROPERTIES = 1_000
MAX_DESCRIPTION_BYTES = 4 * 1024
MAX_PARTITIONS_PER_REQUEST = 1_000
"""Partitions in one AddPartitions, one transaction, one partition notification."""
MAX_KEY_VALUE_BYTES = 1024
"""One partition key value (UTF-8)."""
MAX_KEYS = 32
"""Key values of one partition."""
MAX_LOCATION_BYTES = 4 * 1024
MAX_METADATA_BYTES = 16 * 1024
"""One partition's metadata: keys and values, UTF-8, summed."""
MAX_PARTITIONS_BYTES = 128 * 1024
"""All partitions of one request (keys, locations, metadata): what its notification carries."""
MAX_NOTIFICATION_BYTES = 128 * 1024
"""One encoded notification (Publish, the bus): with a schedule's properties beside it in a job or
match message, still under MAX_BUS_MESSAGE_BYTES."""
MAX_FILTER_VALUES = 1_000
"""Allowed values of one trigger filter key."""
MAX_TRIGGER_LEAVES = 256
"""Triggers in one schedule's AND/OR tree (nesting depth: triggers.validation.MAX_DEPTH)."""
MAX_CRON_BYTES = 1024
"""A cron expression: one that lists every second, minute and hour one by one is about 500 bytes; each
fire time computed parses it again."""
MAX_SCHEDULE_BYTES = 120 * 1024
"""One schedule as its protobuf Schedule (properties, trigger tree, constraints, Spark settings, all): a
match message carries it beside a notification of MAX_NOTIFICATION_BYTES, under MAX_BUS_MESSAGE_BYTES."""
JOB_FIELDS_BYTES = 4 * 1024
"""What a job message holds beside its schedule's fields and its notifications: its id, the schedule's
id again, its times and sequence (well under 1 KiB: ids and names are bounded)."""
JOB_NOTIFICATIONS_BYTES = MAX_BUS_MESSAGE_BYTES - MAX_SCHEDULE_BYTES - JOB_FIELDS_BYTES
"""The notifications one job carries (`notifications_bytes`), 132 KiB: beside a schedule of
MAX_SCHEDULE_BYTES, its job message stays under MAX_BUS_MESSAGE_BYTES. A fire whose notifications pass
it fires several jobs (sluice.domain.matching); a waiting job joins another only within it (checking).
One notification of MAX_NOTIFICATION_BYTES always fits (tests/unit/test_job_size.py), and a job always
takes at least one."""
MAX_CONSTRAINTS = 64
MAX_RUN_SECONDS = 30 * 86_400
"""A schedule's run time limit: 1 s to 30 days (0: none); a longer run is better left unlimited."""
MAX_PARTITIONS_LISTED = 1_000
"""Partitions one ListPartitions call returns (its `limit`); list pages elsewhere: sluice.paging."""


def check_seconds(path: str, value: object, minimum: int = 0, maximum: int = MAX_DURATION_SECONDS) -> None:
    check_int(path, value, minimum, maximum, unit=" seconds")


def check_int(path: str, value: object, minimum: int, maximum: int, unit: str = "") -> None:
    """InvalidArgument naming the field and the range unless `value` is a whole number in it."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidArgument(path, f"must be a whole number, got {value!r}")
    if value < minimum:
        raise InvalidArgument(path, f"must be at least {minimum} (range {minimum} to {maximum}{unit}), got {value}")
    if value > maximum:
        raise InvalidArgument(path, f"must be at most {maximum} (range {minimum} to {maximum}{unit}), got {value}")


def check_time(path: str, when: datetime) -> None:
    if not EARLIEST_TIME <= when < LATEST_TIME:
        raise InvalidArgument(path, f"must lie in [{EARLIEST_TIME:%Y-%m-%d}, {LATEST_TIME:%Y-%m-%d}), got {when}")


def check_timestamp_seconds(path: str, seconds: int, nanos: int) -> None:
    """A protobuf Timestamp's fields, before any datetime is built from them."""
    if not EARLIEST_SECONDS <= seconds < LATEST_SECONDS:
        raise InvalidArgument(path, f"must lie in [{EARLIEST_TIME:%Y-%m-%d}, {LATEST_TIME:%Y-%m-%d}) "
                                    f"(Unix seconds {EARLIEST_SECONDS} to {LATEST_SECONDS}), got seconds={seconds}")
    if not 0 <= nanos <= 999_999_999:
        raise InvalidArgument(path, f"nanos must be between 0 and 999999999, got {nanos}")


def utf8_size(text: str) -> int:
    """Bytes of `text` in UTF-8; a lone surrogate (not encodable) is refused by the caller's parser."""
    return len(text.encode("utf-8", "surrogatepass"))


def check_size(path: str, size: int, limit: int, what: str = "bytes") -> None:
    """RESOURCE_EXHAUSTED naming the field and the limit when `size` exceeds it."""
    if size > limit:
        raise ResourceExhausted(path, f"{size} {what} exceeds the limit of {limit} {what}")


def check_text(path: str, value: str, limit: int) -> None:
    """A string that must be valid Unicode text (no lone surrogate) of at most `limit` UTF-8 bytes."""
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidArgument(path, "must be valid Unicode text (holds a lone surrogate)") from None
    check_size(path, size, limit)


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def lone_surrogate_error(raw: bytes, parsed: object) -> str | None:
    """Why JSON text `raw` (parsed as `parsed`) is not valid Unicode, or None: a `\\ud800` escape
    without its pair parses to a string that no UTF-8 encoder takes (raw UTF-8 bytes of a
    surrogate fail decoding already). Only text holding such an escape is walked."""
    if not _SURROGATE_ESCAPE.search(raw):
        return None
    try:
        json.dumps(parsed, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as error:
        return f"not valid Unicode text: a lone surrogate {error.object[error.start:error.end]!r}"
    return None


# --- a job's notifications, as the protobuf encoding of its context would hold them --------------
_TIMESTAMP_BYTES = 2 + 11 + 6
"""A Timestamp field: tag and length, seconds (a negative one is 10 bytes), nanos."""
_INT64_BYTES = 11


def notifications_bytes(notifications: tuple[Notification, ...]) -> int:
    """At least the bytes `notifications` take in a job message (TriggerContext.notifications, each
    with its tag and length), from the domain objects: each string's UTF-8 length, every varint at
    its longest. Exact for the strings, a few bytes over per number."""
    return sum(map(notification_bytes, notifications))


def notification_bytes(notification: Notification) -> int:
    """notifications_bytes of one notification."""
    payload = notification.payload
    if isinstance(payload, PartitionCommitted):
        body = _text(payload.namespace) + _text(payload.dataset) + sum(map(_partition_bytes, payload.partitions))
    else:
        program = payload.program
        body = (_nested(_text(program.namespace) + _text(program.app) + _text(program.program))
                + _text(payload.run_id) + 2 + _text(payload.schedule_id) + _text(payload.job_id))
    return _nested(_text(notification.id) + _TIMESTAMP_BYTES + _nested(body))


def _partition_bytes(partition: PartitionRef) -> int:
    pairs = sum(_nested(_text(name) + _text(value)) for mapping in (partition.key, partition.metadata)
                for name, value in mapping.items())
    return _nested(pairs + _text(partition.location) + 2 * _INT64_BYTES)


def _text(value: str) -> int:
    """A string field: tag, length, UTF-8 bytes."""
    return _nested(len(value) if value.isascii() else utf8_size(value))


def _nested(size: int) -> int:
    """A length-delimited field of `size` bytes: a one-byte tag (field numbers below 16), the length."""
    return 1 + size + (1 if size < 1 << 7 else 2 if size < 1 << 14 else 3 if size < 1 << 21 else 5)
