"""The consumer loop: one handler per topic; errors in two kinds (issue 25).

- Deterministic: MalformedMessage and the domain's refusals (InvalidArgument, NotFound,
  FailedPrecondition, AlreadyExists): the record goes to the dead-letter topic with the reason, at once.
- Infrastructure (`sluice.runtime.errors.is_infrastructure`: the event log or the bus unreachable, a
  disk full or read-only, a database locked, a timeout): the loop pauses on that record and handles it
  again after a capped exponential backoff (`Backoff`), for as long as it takes, with the service not
  ready meanwhile (`Health`: gRPC NOT_SERVING, /readyz 503); its offset is not committed until it is
  handled, so the loop resumes exactly where it was. Valid work is never parked.
- Anything else is a bug in our code: retried MAX_ATTEMPTS times, then dead-lettered with reason
  "handler failed: ...", so that one poison record does not stall its partition for ever.
"""
from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Mapping, TypeVar

from sluice.bus.port import Bus, CommitFailed, Consumer, Producer, Record, TopicPartition
from sluice.bus.topics import DEAD_LETTER
from sluice.domain.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound
from sluice.eventlog.deferred import deferring
from sluice.runtime.errors import Backoff, MalformedMessage, is_infrastructure
from sluice.runtime.health import Health
from sluice.runtime.metrics import Registry
from sluice.runtime.metrics_scheduler import Reading

log = logging.getLogger(__name__)

Handler = Callable[[Record], Awaitable[None]]
T = TypeVar("T")

MAX_ATTEMPTS = 5
"""Tries of a record whose handler fails with a bug (neither deterministic nor infrastructure)."""
DETERMINISTIC = (MalformedMessage, InvalidArgument, NotFound, FailedPrecondition, AlreadyExists)
"""Errors that handling the record again would raise again: dead-lettered at once, with the reason."""
BACKOFF = Backoff(first=0.1, cap=3.0)
"""Waits between tries while the log or the bus is down: the cap bounds how long work stays stopped after
the dependency is back (a try costs one connection attempt or request)."""
COMMIT_EVERY = 1.0
"""Seconds between a running service's offset commits (ConsumerLoop's `commit_every`)."""
MAX_MESSAGE_BYTES = 256 * 1024
"""Larger messages are dead-lettered unread: no notification or command of Sluice's is near it."""


@dataclass(frozen=True)
class BatchHandler:
    """Handles a poll's records of one topic together (one decision, one append): `parse` turns a
    record into a command or raises MalformedMessage (that record goes to the dead-letter topic),
    `apply` takes every parsed (record, command) of the poll in order."""

    parse: Callable[[Record], Any]
    apply: Callable[[list[tuple[Record, Any]]], Awaitable[None]]


@dataclass(frozen=True)
class Subscription:
    group: str
    handlers: Mapping[str, Handler | BatchHandler]  # topic -> handler
    max_message_bytes: int = MAX_MESSAGE_BYTES
    on_assignment: Callable[[set[TopicPartition]], None] | None = None
    """Called with the member's partitions whenever the group assigns it others (a rebalance)."""
    deferred_durability: bool = False
    """The handlers' only effects are their appends (and what they keep in memory): a poll's appends may
    then commit without waiting for their fsync, and the loop waits for one fsync of them all before it
    commits the poll's offsets or polls again (`sluice.eventlog.deferred`). Not for a handler that starts
    a run or calls out after appending."""


MALFORMED, REFUSED, HANDLER_FAILED = "malformed", "refused", "handler_failed"


class Pauses:
    """How a consumer waits out an infrastructure failure: the same call again after `backoff`'s delay,
    for as long as it fails that way, with `health` told that `name` is down meanwhile (the service is
    not ready) and up again once the call went through. `sleep` is injected so tests do not sleep."""

    def __init__(self, name: str, health: Health | None = None, backoff: Backoff = BACKOFF,
                 sleep: Callable[[float], Awaitable[object]] = asyncio.sleep) -> None:
        self.name = name
        self._health = health
        self._backoff = backoff
        self.sleep = sleep
        self.waits = 0
        """Backoff waits so far (tests, logs)."""

    async def retrying(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        """`await call()`, again and again while it fails with an infrastructure error; other errors
        are raised (the caller's to judge)."""
        failures = 0
        while True:
            try:
                result = await call()
            except asyncio.CancelledError:
                raise
            except Exception as error:
                if not is_infrastructure(error):
                    raise
                failures += 1
                delay = self._backoff.delay(failures)
                if failures == 1 or delay >= self._backoff.cap and failures % 10 == 0:
                    log.warning("%s: %s failed (%s failures so far), paused; again in %.1f s: %r", self.name, what,
                                failures, delay, error)
                if self._health is not None:
                    await self._health.dependency(self.name, f"{type(error).__name__}: {error}"[:300])
                self.waits += 1
                await self.sleep(delay)
                continue
            if failures:
                log.warning("%s: %s went through after %s failures; resumed", self.name, what, failures)
                if self._health is not None:
                    await self._health.dependency(self.name, None)
            return result


class ConsumerMetrics:
    """Messages handled, handling time and dead-lettered messages per topic and consumer group."""

    def __init__(self, registry: Registry) -> None:
        self._registry = registry
        self.handled = registry.counter(
            "sluice_consumer_messages_total", "Bus messages handled (dead-lettered ones included).", ("topic", "group"))
        self.seconds = registry.histogram(
            "sluice_consumer_handling_seconds", "Time to handle one bus message, retries included.", ("topic", "group"))
        self.dead_lettered = registry.counter(
            "sluice_consumer_dead_lettered_total", "Bus messages sent to the dead-letter topic, by reason class.",
            ("topic", "group", "reason"))
        self._series: dict[tuple[str, str], tuple[Any, Any]] = {}

    def start(self, subscription: Subscription) -> None:
        """Every series this subscription can produce, at zero: a rate over a missing series is no rate."""
        for topic in subscription.handlers:
            self.handled.labels(topic, subscription.group)
            self.seconds.labels(topic, subscription.group)
            for reason in (MALFORMED, REFUSED, HANDLER_FAILED):
                self.dead_lettered.labels(topic, subscription.group, reason)

    def watch_lag(self, consumer: Consumer, group: str) -> None:
        """Its lag per topic and partition, read at scrape time (a consumer without `lag`, a test's, has none)."""
        lag = getattr(consumer, "lag", None)
        if lag is not None:
            self._registry.register(Reading(
                "sluice_consumer_lag_records", "Records after the consumer's position, by topic and partition.",
                ("topic", "partition", "group"),
                lambda: {(tp.topic, str(tp.partition), group): float(n) for tp, n in lag().items()}))

    def record(self, topic: str, group: str, seconds: float, dead_letter_reason: str | None, count: int = 1) -> None:
        """`count` messages handled in `seconds` each (dead-lettered for `dead_letter_reason`, if given)."""
        series = self._series.get((topic, group))
        if series is None:  # labels() per record was a few percent of embedded mode's CPU
            series = self._series[topic, group] = (self.handled.labels(topic, group), self.seconds.labels(topic, group))
        handled, handling_seconds = series
        handled.inc(count)
        _observe_times(handling_seconds, seconds, count)
        if dead_letter_reason:
            self.dead_lettered.labels(topic, group, dead_letter_reason).inc()


def _observe_times(histogram: Any, seconds: float, count: int) -> None:
    """`count` observations of `seconds` in a histogram's child: its sum and one bucket raised once, as
    `observe` would raise them `count` times (a batch's records share their mean handling time, and
    observing them one by one was most of the metrics' share of a busy loop). A prometheus_client
    without these attributes is observed the plain way."""
    total, buckets, bounds = (getattr(histogram, name, None) for name in ("_sum", "_buckets", "_upper_bounds"))
    if count == 1 or total is None or buckets is None or bounds is None:
        for _ in range(count):
            histogram.observe(seconds)
        return
    total.inc(seconds * count)
    for bucket, bound in zip(buckets, bounds):
        if seconds <= bound:
            bucket.inc(count)
            break


async def consume(bus: Bus, subscription: Subscription, dead_letter: Producer, poll_timeout: float = 0.2,
                  metrics: Registry | None = None, health: Health | None = None) -> None:
    """Step a member of `subscription.group` for ever; a poll or a commit that fails for the bus's sake
    is tried again (`Pauses`), with `health` not ready meanwhile."""
    consumer = bus.consumer(subscription.group, list(subscription.handlers))
    loop = ConsumerLoop(consumer, subscription, dead_letter, metrics, commit_every=COMMIT_EVERY, health=health)
    try:
        while True:
            await loop.pauses.retrying("polling", lambda: loop.step(poll_timeout))
    finally:
        try:
            await loop.settle()
        finally:
            await consumer.close()


class ConsumerLoop:
    """One group member's loop, a poll at a time: `consume` steps it forever; the crash harness
    (tests/crash) steps it in a chosen order, the scenario tests' pump (tests/support/pump.py) in a fixed one.

    Offsets are committed after each poll (awaited) unless `commit_every` is set: then the offsets
    of handled records are committed in the background while the next polls are handled, at most
    once per `commit_every` seconds (one commit at a time, in order). A commit is a round trip to
    the group coordinator and a write for the broker; awaited after every
    poll, it held back each record behind it. Nothing is lost by committing later: only handled
    records are committed, and handlers skip a redelivered record by the positions they record in
    the event log (what a crash redelivers is at most `commit_every` seconds of records)."""

    def __init__(self, consumer: Consumer, subscription: Subscription, dead_letter: Producer,
                 metrics: Registry | None = None, *, commit_every: float | None = None,
                 monotonic: Callable[[], float] = time.monotonic, health: Health | None = None,
                 backoff: Backoff = BACKOFF, sleep: Callable[[float], Awaitable[object]] = asyncio.sleep) -> None:
        self.consumer = consumer
        self.pauses = Pauses(f"{subscription.group}'s log or bus", health, backoff, sleep)
        """Infrastructure failures are waited out here (see the module docstring)."""
        self._subscription = subscription
        self._dead_letter = dead_letter
        self._instruments = ConsumerMetrics(metrics or Registry())
        self._instruments.start(subscription)
        self._instruments.watch_lag(consumer, subscription.group)
        self._assigned: set[TopicPartition] | None = None
        self._commit_every = commit_every
        self._monotonic = monotonic
        self._handled: dict[TopicPartition, int] = {}
        """Next offsets of handled records not committed yet (with `commit_every`)."""
        self._committed_at = -math.inf
        self._committing: asyncio.Task[None] | None = None

    async def step(self, poll_timeout: float) -> int:
        """Poll once, handle what came in order, commit it (or have it committed); how many records were handled."""
        subscription, consumer = self._subscription, self.consumer
        records = await consumer.poll(timeout=poll_timeout)
        if subscription.on_assignment is not None and consumer.assignment() != self._assigned:
            self._assigned = consumer.assignment()
            subscription.on_assignment(self._assigned)
        with deferring(subscription.deferred_durability) as appends:
            for run in _runs_by_topic(records):
                handler = subscription.handlers[run[0].topic]
                if isinstance(handler, BatchHandler) and len(run) > 1:
                    await _handle_batch(run, handler, subscription, self._dead_letter, self._instruments, self.pauses)
                    continue
                for record in run:
                    started = time.perf_counter()
                    reason = await _handle(record, subscription, self._dead_letter, self.pauses)
                    self._instruments.record(record.topic, subscription.group, time.perf_counter() - started, reason)
        await appends.durable()  # meanwhile the loop runs the other services; nothing of this poll left yet
        if self._commit_every is None:
            if records:
                await self._commit(None)
            return len(records)
        for partition, offset in _next_offsets(records).items():
            self._handled[partition] = max(self._handled.get(partition, 0), offset)
        if self._handled and self._monotonic() - self._committed_at >= self._commit_every:
            await self._commit_handled()
        return len(records)

    async def settle(self) -> None:
        """Commit what was handled and not committed yet, and wait until it is."""
        if self._handled:
            await self._commit_handled()
        committing, self._committing = self._committing, None
        if committing is not None:
            await committing

    async def _commit_handled(self) -> None:
        """Start committing the handled records' offsets, after the commit under way. Partitions the
        group moved to another member since are left out: their new owner reads those records again."""
        if self._committing is not None:
            await self._committing
        assigned = self.consumer.assignment()
        offsets = {partition: offset for partition, offset in self._handled.items() if partition in assigned}
        self._handled = {}
        self._committed_at = self._monotonic()
        self._committing = asyncio.ensure_future(self._commit(offsets)) if offsets else None

    async def _commit(self, offsets: dict[TopicPartition, int] | None) -> None:
        try:
            await self.consumer.commit(offsets)
        except CommitFailed as error:  # the group rebalanced meanwhile: the partitions' new owner
            log.warning("%s; their new owner reads these records again", error)  # skips what the log has


def _next_offsets(records: list[Record]) -> dict[TopicPartition, int]:
    """The next offset to read of each partition the records came from."""
    offsets: dict[tuple[str, int], int] = {}  # a TopicPartition per record was a few percent of a busy loop
    for record in records:
        partition = (record.topic, record.partition)
        offsets[partition] = max(offsets.get(partition, 0), record.offset + 1)
    return {TopicPartition(topic, partition): offset for (topic, partition), offset in offsets.items()}


def _runs_by_topic(records: list[Record]) -> list[list[Record]]:
    """Consecutive records of one topic, in poll order."""
    runs: list[list[Record]] = []
    for record in records:
        if runs and runs[-1][0].topic == record.topic:
            runs[-1].append(record)
        else:
            runs.append([record])
    return runs


async def _handle_batch(records: list[Record], handler: BatchHandler, subscription: Subscription,
                        dead_letter: Producer, instruments: ConsumerMetrics, pauses: Pauses) -> None:
    """Parse each record (dead-lettering what is malformed), apply the rest at once; if that fails with
    a bug or a refusal, record by record, so one bad record cannot hold back the others. An
    infrastructure failure is waited out (`pauses`) and the same parse or apply tried again."""
    started = time.perf_counter()
    parsed = []
    for record in records:
        if len(record.value) > subscription.max_message_bytes:
            instruments.record(record.topic, subscription.group, 0.0,
                               await _handle(record, subscription, dead_letter, pauses))
            continue
        try:
            parsed.append((record, await _parse(handler, record, pauses)))
        except (MalformedMessage, InvalidArgument) as error:
            await _dead_letter(pauses, dead_letter, record, subscription.group, f"malformed: {error}")
            instruments.record(record.topic, subscription.group, 0.0, MALFORMED)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # parsing reads only the record: its error is the record's, never retried
            log.exception("%s: parsing %s@%s/%s failed", subscription.group, record.topic, record.partition,
                          record.offset)
            await _dead_letter(pauses, dead_letter, record, subscription.group, f"malformed: unparsable: {error!r}")
            instruments.record(record.topic, subscription.group, 0.0, MALFORMED)
    try:
        await pauses.retrying(f"handling {len(parsed)} records of {records[0].topic}", lambda: handler.apply(parsed))
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("%s: handling %d records of %s together failed; one by one now", subscription.group,
                      len(parsed), records[0].topic)
        for record, _ in parsed:
            reason = await _handle(record, subscription, dead_letter, pauses)
            instruments.record(record.topic, subscription.group, 0.0, reason)
        return
    if parsed:
        seconds = (time.perf_counter() - started) / len(parsed)
        instruments.record(records[0].topic, subscription.group, seconds, None, len(parsed))


async def _handle(record: Record, subscription: Subscription, dead_letter: Producer, pauses: Pauses) -> str | None:
    """Handle one record; the reason class when it went to the dead-letter topic, else None. An
    infrastructure failure never ends here: `pauses` tries the record again until it is handled."""
    group, handler = subscription.group, _one_by_one(subscription.handlers[record.topic])
    if len(record.value) > subscription.max_message_bytes:
        await _dead_letter(pauses, dead_letter, record, group,
                           f"oversized: {len(record.value)} bytes > {subscription.max_message_bytes}")
        return MALFORMED
    where = f"handling {record.topic}@{record.partition}/{record.offset}"
    for attempt in range(1, MAX_ATTEMPTS + 1):
        try:
            await pauses.retrying(where, lambda: handler(record))
            return None
        except (MalformedMessage, InvalidArgument) as error:
            await _dead_letter(pauses, dead_letter, record, group, f"malformed: {error}")
            return MALFORMED
        except DETERMINISTIC as error:  # a refusal: the same again would be refused again
            await _dead_letter(pauses, dead_letter, record, group, f"refused: {type(error).__name__}: {error}")
            return REFUSED
        except asyncio.CancelledError:
            raise
        except Exception as error:  # a bug in our code: a few tries, then parked rather than stalling the partition
            log.exception("%s: %s failed (attempt %s)", group, where, attempt)
            if attempt == MAX_ATTEMPTS:
                await _dead_letter(pauses, dead_letter, record, group, f"handler failed: {error!r}")
                return HANDLER_FAILED
            await pauses.sleep(0.05 * 2**attempt)
    return None


async def _parse(handler: BatchHandler, record: Record, pauses: Pauses) -> Any:
    """`handler.parse(record)`, called directly: `pauses.retrying` per record was a few percent of a busy
    loop. If it fails for the infrastructure's sake (a parser that reads the log), that failure is handed
    to `pauses`, which waits it out as if it had made the call."""
    try:
        return handler.parse(record)
    except Exception as error:
        if not is_infrastructure(error):
            raise
        failed: Exception | None = error

    async def call() -> Any:
        nonlocal failed
        if failed is not None:
            error, failed = failed, None
            raise error
        return handler.parse(record)
    return await pauses.retrying("parsing", call)


async def _dead_letter(pauses: Pauses, producer: Producer, record: Record, group: str, reason: str) -> None:
    """`send_to_dead_letter`, waiting out a bus that is down."""
    await pauses.retrying("sending to the dead-letter topic",
                          lambda: send_to_dead_letter(producer, record, group, reason))


def _one_by_one(handler: Handler | BatchHandler) -> Handler:
    if not isinstance(handler, BatchHandler):
        return handler

    async def handle(record: Record) -> None:
        try:
            command = handler.parse(record)
        except (MalformedMessage, InvalidArgument, asyncio.CancelledError):
            raise
        except Exception as error:  # the record's own error: dead-lettered at once, not retried
            if is_infrastructure(error):  # the log it read failed, not the record: waited out by the caller
                raise
            raise MalformedMessage(f"unparsable: {error!r}") from error
        await handler.apply([(record, command)])
    return handle


REPLAYED_FOR_HEADER = "sluice-replayed-for"
"""On a dead letter published again to its source topic (`sluice dlq replay`): the consumer group that
dead-lettered it. That group never handled it, whatever positions it recorded since: a consumer that tells
redeliveries by recorded positions takes it as new; every other group sees a redelivery."""


async def send_to_dead_letter(producer: Producer, record: Record, group: str, reason: str) -> None:
    log.warning("%s: %s@%s/%s to the dead-letter topic: %s", group, record.topic, record.partition, record.offset,
                reason)
    headers = [
        ("reason", reason.encode()),
        ("source-topic", record.topic.encode()),
        ("source-partition", str(record.partition).encode()),
        ("source-offset", str(record.offset).encode()),
        ("consumer-group", group.encode()),
        *record.headers,
    ]
    await producer.send(DEAD_LETTER, record.value, key=record.key, headers=headers)
