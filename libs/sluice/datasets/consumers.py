"""Partition consumers on the event log: load (snapshot + tail), decide, append with the expected version.

    consumers = ConsumerStore(log, datasets, clock)
    items = consumers.consume(ref, taker="run-7", limit=100, where=..., config=ConsumerConfig(...))
    consumers.complete(ref, "run-7", [item.id for item in items])     # or fail(...) / untake(...)

Each consumer is one stream; concurrent takers (processes, threads) race on its version and the
loser decides again on the winner's state, so no partition is handed to two takers. Every
SNAPSHOT_EVERY events the state is also written, as compact bytes, to the consumer's snapshot
stream: loading reads the last snapshot and the events after it, never the whole history.
"""
from __future__ import annotations

import base64
import logging
import threading
from dataclasses import dataclass, replace
from typing import Sequence

from sluice.clock import Clock
from sluice.eventlog.codec import EventTypes, encode
from sluice.domain.consumer import aggregate
from sluice.domain.consumer.aggregate import Complete, Configure, Consume, CreateConsumer, Fail, PartitionsTaken, Untake
from sluice.domain.consumer.scan import IndexView, scan
from sluice.domain.consumer.serialization import ConsumerStateError, state_from_bytes, state_to_bytes
from sluice.domain.consumer.state import (
    ConsumerConfig,
    ConsumerRef,
    ConsumerState,
    PartitionId,
    WorkItem,
    consumer_stream,
    snapshot_stream,
    validate_ref,
)
from sluice.domain.datasets.filters import MATCH_ALL, PartitionFilter, validate_filter
from sluice.domain.datasets.specs import DatasetSpec
from sluice.datasets.events import decode_event
from sluice.datasets.store import DatasetStore, events_for
from sluice.eventlog.port import (
    ANY_VERSION,
    NO_STREAM,
    DuplicateEventId,
    EventLog,
    StreamAppend,
)
from sluice.ids import derived_id
from sluice.domain.errors import InvalidArgument, NotFound
from sluice.runtime.unit_of_work import reload_nothing, retry_on_conflict

log = logging.getLogger(__name__)

TYPES = EventTypes(aggregate.EVENTS)
SNAPSHOT_EVERY = 256
"""Snapshot once the events after the last snapshot name this many partitions (each event counts one
too): loading never folds more than about this much, however long the consumer's history."""
MAX_CONFLICTS = 1000


@dataclass(frozen=True)
class ConsumerSnapshotted:
    """The consumer's state after `version` of its stream, as state_to_bytes, base64."""

    version: int
    state: str


SNAPSHOT_TYPES = EventTypes((ConsumerSnapshotted,))


@dataclass(frozen=True)
class _Loaded:
    state: ConsumerState | None
    version: int
    unsnapshotted: int = 0
    """The work of folding the events after the last snapshot (events + partitions they name)."""


class ConsumerStore:
    def __init__(self, log: EventLog, datasets: DatasetStore, clock: Clock, snapshot_every: int = SNAPSHOT_EVERY) -> None:
        self._log = log
        self._datasets = datasets
        self._clock = clock
        self._snapshot_every = snapshot_every
        self._cache: dict[ConsumerRef, _Loaded] = {}
        self._lock = threading.Lock()

    # -- reading -------------------------------------------------------------------------------

    def state(self, ref: ConsumerRef) -> ConsumerState:
        validate_ref(ref)
        loaded = self._load(ref)
        if loaded.state is None:
            raise NotFound(f"consumer {ref} does not exist")
        return loaded.state

    def find(self, ref: ConsumerRef) -> ConsumerState | None:
        return self._load(validate_ref(ref)).state

    # -- commands ------------------------------------------------------------------------------

    def create(self, ref: ConsumerRef, config: ConsumerConfig = ConsumerConfig()) -> ConsumerState:
        """Create the consumer, or give it this configuration if it exists."""
        spec = self._datasets.get(ref.namespace, ref.dataset)
        config = _with_valid_filter(spec, config)
        self._execute(ref, lambda state: self._configured(ref, state, config))
        return self.state(ref)

    def consume(self, ref: ConsumerRef, taker: str, limit: int, where: PartitionFilter = MATCH_ALL,
                own_position: int | None = None, config: ConsumerConfig | None = None) -> list[WorkItem]:
        """Take up to `limit` partitions for `taker` (creating the consumer with `config` if it does
        not exist; a different `config` reconfigures it). The partitions are IN_PROGRESS until
        completed, failed, returned, or timed out."""
        validate_ref(ref)
        spec = self._datasets.get(ref.namespace, ref.dataset)
        where = validate_filter(spec, where)
        if config is not None:
            config = _with_valid_filter(spec, config)
        command = Consume(taker, limit, where, own_position)
        view = IndexView(self._datasets.next_position(ref.namespace, ref.dataset))   # read before any lookup

        def decide(state: ConsumerState | None) -> list:
            nonlocal view
            events = self._configured(ref, state, config) if config is not None or state is None else []
            current = aggregate.fold(state, events)
            view = self._complete_view(current, spec, view, own_position)
            return events + aggregate.decide(current, command, self._clock.now(), spec, view)

        events = self._execute(ref, decide)
        taken = {i for e in events if isinstance(e, PartitionsTaken) for i in e.partitions}
        if not taken:
            return []
        return [item for item in self.state(ref).working_set if item.id in taken]

    def complete(self, ref: ConsumerRef, taker: str, partitions: Sequence[PartitionId],
                 strict: bool = False) -> list[PartitionId]:
        """Complete what `taker` holds (or what is AVAILABLE); the ids completed by this call."""
        events = self._existing(ref, Complete(taker, tuple(partitions), strict))
        return [i for event in events for i in event.partitions]

    def fail(self, ref: ConsumerRef, taker: str, partitions: Sequence[PartitionId], reason: str = "") -> None:
        self._existing(ref, Fail(taker, tuple(partitions), reason))

    def untake(self, ref: ConsumerRef, taker: str, partitions: Sequence[PartitionId]) -> None:
        self._existing(ref, Untake(taker, tuple(partitions)))

    def prepare(self, ref: ConsumerRef, command: aggregate.ConsumerCommand) -> StreamAppend | None:
        """The append that applies `command` to the consumer as it is now, for a caller that appends it
        together with its own events (a commit step and its marker); None when it changes nothing.
        Appending it conflicts (WrongExpectedVersion) if the consumer changed meanwhile."""
        validate_ref(ref)
        loaded = self._load(ref)
        if loaded.state is None:
            raise NotFound(f"consumer {ref} does not exist")
        events = aggregate.decide(loaded.state, command, self._clock.now())
        stream = consumer_stream(ref)
        return StreamAppend(stream, events_for(stream, loaded.version + 1, events), loaded.version) if events else None

    def consume_with_state(self, state_bytes: bytes, taker: str, limit: int,
                           where: PartitionFilter = MATCH_ALL) -> tuple[list[WorkItem], bytes]:
        """Seed 003's stateless form: the caller keeps the state (as bytes) and passes it back in.

        Nothing is written; a damaged state is InvalidArgument("consumer_state", ...)."""
        try:
            state = state_from_bytes(state_bytes)
        except ConsumerStateError as error:
            raise InvalidArgument("consumer_state", str(error)) from None
        spec = self._datasets.get(state.consumer.namespace, state.consumer.dataset)
        where = validate_filter(spec, where)
        view = self._complete_view(state, spec, IndexView(self._datasets.next_position(spec.namespace, spec.name)),
                                   None)
        events = aggregate.decide(state, Consume(taker, limit, where), self._clock.now(), spec, view)
        after = aggregate.fold(state, events)
        taken = {i for e in events if isinstance(e, PartitionsTaken) for i in e.partitions}
        return [item for item in after.working_set if item.id in taken], state_to_bytes(after)

    # -- plumbing ------------------------------------------------------------------------------

    def _configured(self, ref: ConsumerRef, state: ConsumerState | None, config: ConsumerConfig | None) -> list:
        if state is None:
            return aggregate.decide(None, CreateConsumer(ref, config or ConsumerConfig()), self._clock.now())
        return aggregate.decide(state, Configure(config), self._clock.now()) if config is not None else []

    def _existing(self, ref: ConsumerRef, command: aggregate.ConsumerCommand) -> list:
        validate_ref(ref)

        def decide(state: ConsumerState | None) -> list:
            if state is None:
                raise NotFound(f"consumer {ref} does not exist")
            return aggregate.decide(state, command, self._clock.now())

        return self._execute(ref, decide)

    def _complete_view(self, state: ConsumerState, spec: DatasetSpec, view: IndexView, own_position: int | None) -> IndexView:
        """Look up what the scan needs, page by page (a stale view is safe: OPEN stays in flight)."""
        while wanted := [p for p in scan(state, spec, view, own_position).wanted if p not in view.transactions]:
            view = view.including(self._datasets.transactions(spec.namespace, spec.name, wanted))
        return view

    def _execute(self, ref: ConsumerRef, decide) -> list:
        stream = consumer_stream(ref)

        def attempt() -> list:  # each attempt loads the consumer afresh (the log's tail after the cache)
            loaded = self._load(ref)
            events = decide(loaded.state)
            if not events:
                return []
            version = self._log.append(stream, events_for(stream, loaded.version + 1, events), loaded.version)
            state = aggregate.fold(loaded.state, events)
            unsnapshotted = loaded.unsnapshotted + sum(_weight(event) for event in events)
            if unsnapshotted >= self._snapshot_every:
                self._snapshot(ref, state, version)
                unsnapshotted = 0
            self._remember(ref, _Loaded(state, version, unsnapshotted))
            return events

        return retry_on_conflict(attempt, reload_nothing, attempts=MAX_CONFLICTS, what=f"consumer {ref}")

    def _load(self, ref: ConsumerRef) -> _Loaded:
        with self._lock:
            loaded = self._cache.get(ref)
        if loaded is None:
            loaded = self._from_snapshot(ref)
        state, version, unsnapshotted = loaded.state, loaded.version, loaded.unsnapshotted
        for recorded in self._log.read_stream(consumer_stream(ref), version + 1):
            event = decode_event(TYPES, recorded)
            state, version = aggregate.evolve(state, event), recorded.version
            unsnapshotted += _weight(event)
        loaded = _Loaded(state, version, unsnapshotted)
        self._remember(ref, loaded)
        return loaded

    def _remember(self, ref: ConsumerRef, loaded: _Loaded) -> None:
        with self._lock:
            current = self._cache.get(ref)
            if current is None or current.version < loaded.version:
                self._cache[ref] = loaded

    def _from_snapshot(self, ref: ConsumerRef) -> _Loaded:
        stream = snapshot_stream(ref)
        last = self._log.stream_version(stream)
        if last == NO_STREAM:
            return _Loaded(None, NO_STREAM)
        try:
            snapshot = SNAPSHOT_TYPES.decode(self._log.read_stream(stream, last)[0])
            return _Loaded(state_from_bytes(base64.b64decode(snapshot.state)), snapshot.version)
        except (ConsumerStateError, ValueError) as error:  # the log holds the truth: fold it instead
            log.warning("consumer %s: snapshot at version %s of %s is unreadable (%s); reading the whole stream",
                        ref, last, stream, error)
            return _Loaded(None, NO_STREAM)

    def _snapshot(self, ref: ConsumerRef, state: ConsumerState, version: int) -> None:
        snapshot = ConsumerSnapshotted(version, base64.b64encode(state_to_bytes(state)).decode())
        event = encode(snapshot, derived_id(consumer_stream(ref), "snapshot", str(version)))
        try:
            self._log.append(snapshot_stream(ref), [event], ANY_VERSION)
        except DuplicateEventId:
            pass  # another writer snapshotted the same version


def _weight(event: object) -> int:
    return 1 + len(getattr(event, "partitions", ()))


def _with_valid_filter(spec: DatasetSpec, config: ConsumerConfig) -> ConsumerConfig:
    return replace(config, where=validate_filter(spec, config.where, "config.where"))
