"""Load an aggregate by folding its stream, decide, append with the expected version."""
from __future__ import annotations

import asyncio
import logging
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Callable, Collection, Generic, Mapping, Sequence, TypeVar

from sluice.clock import Clock
from sluice.eventlog.batched import BATCH_TYPE, expand, paged
from sluice.eventlog.codec import EventTypes, encode
from sluice.eventlog.port import (NO_STREAM, Checkpoint, CheckpointMoved, EventLog, RecordedEvent, StreamAppend,
                                  WrongExpectedVersion)
from sluice.ids import time_ordered_ids
from sluice.runtime import snapshots
from sluice.runtime.map_snapshots import SNAPSHOT_WRITER, MapSnapshots, PendingSave
from sluice.runtime.snapshots import Schema
from sluice.runtime.unit_of_work import MAX_CONFLICT_RETRIES, retry_on_conflict  # noqa: F401 (re-exported)

S = TypeVar("S")

READ_BATCH = 10_000
BATCH_RECORDS_READ = 500
"""Records read at once from batch streams (a catch-up, a batch stream's tail): each holds up to BATCH_BYTES
of its writer's events, so a read holds at most ~500 such records in memory."""
BACKGROUND_SNAPSHOT_STREAMS = 2_000
"""From this many entries to pack (streams, or what `size` counts in them) a snapshot is written off
the event loop, where packing that many would hold it too long. (Lower, a snapshot still being
packed showed in the memory per schedule. Figures: docs/decisions.md, benchmark figures.)"""

log = logging.getLogger(__name__)



@dataclass(frozen=True)
class Loaded(Generic[S]):
    state: S
    version: int


class AggregateStore(Generic[S]):
    """Keeps the folded state of the streams it wrote or read, so a hot aggregate is not re-read.

    Event ids are time-ordered (`sluice.ids.time_ordered_ids` of the clock's time and (stream,
    version)): the log's index of ids grows at its right edge, where ids derived from (stream,
    version) alone landed on random pages (each append of a busy log dirtied a page per event). The
    expected version refuses a second append of the same decision, whatever its ids; the outbox
    publishes each event under its id for consumers to deduplicate.

    With a `snapshot` name the store saves its streams' states (each with its version) after every
    `snapshot_every` (default snapshots.SNAPSHOT_EVERY) events it appended or caught up with, or as
    many as the store holds entries if more: its streams, or with `size` the sum of size(state)
    over them (a store of one big state, like the checker's, counts what is in it). Snapshots are
    incremental (sluice.runtime.map_snapshots): a base of every stream and a delta of the streams
    changed since it. `restore` (at the start of `catch_up`) starts from the last snapshot:
    recovery folds only the log after it. A store that followed a prefix (`catch_up`) first reads
    the log up to its head, so its snapshot holds every event of the prefix up to that position;
    one that did not (a single stream, like the checker's queue) saves position 0, and each
    stream's tail is read from its version on first load. A snapshot holds `state_type` (default: the
    initial state's type) at `snapshot_version`: the owner's constant, bumped when that type changes shape.

    Streams starting with `batch_prefix` hold batches (sluice.eventlog.batched): their events belong to
    the virtual streams they name, and the store keeps such a stream's own version as an entry of the
    initial state (what the writer's next append expects; in snapshots too, `states` leaves it out). A
    virtual stream's events all go to one batch stream: each batch stream is folded on its own."""

    def __init__(self, log: EventLog, types: EventTypes, evolve: Callable[[S, Any], S], initial: S, *,
                 clock: Clock, snapshot: str | None = None, snapshot_version: int = 0, state_type: Any = None,
                 snapshot_every: int | None = None, size: Callable[[S], int] | None = None,
                 batch_prefix: str | None = None) -> None:
        self._log = log
        self._clock = clock
        self._types = types
        self._evolve = evolve
        self._initial = initial
        self._cache: dict[str, Loaded[S]] = {}
        self._restored: dict[str, Loaded[S]] = {}
        """States from the snapshot whose streams were not read since: their tails may be missing."""
        self._snapshots = MapSnapshots(log, snapshot, Schema(
            dict[str, Loaded[state_type or type(initial)]], snapshot_version)) if snapshot else None
        self._snapshot_every = snapshot_every or snapshots.SNAPSHOT_EVERY
        self._size = size
        self._batch_prefix = batch_prefix
        self._changed: set[str] | _Untracked = self._snapshots.changed if self._snapshots else _Untracked()
        """Streams whose state was set or dropped since the snapshot's base: what its delta holds."""
        self._unsnapshotted = 0
        self._writing: Future | None = None
        """A snapshot being written in the worker thread: done as soon as it is, loop or no loop."""
        self._saving: asyncio.Future | None = None
        self._caught_up: tuple[int, dict[str, Loaded[S]]] | None = None
        """(head, streams folded up to it) by the last snapshot written in the background."""
        self._prefix: str | None = None
        self._position: int | None = None
        """With a prefix: every event of the prefix's streams up to here is in the cache."""

    @property
    def has_batches(self) -> bool:
        return self._batch_prefix is not None

    def is_batch(self, stream: str) -> bool:
        return self._batch_prefix is not None and stream.startswith(self._batch_prefix)

    def load(self, stream: str) -> Loaded[S]:
        cached = self._cache.get(stream)
        if cached is None and self.is_batch(stream):
            return self.follow_batch(stream)
        if cached is None:
            start = self._restored.pop(stream, None)
            cached = self._fold(stream, start or Loaded(self._initial, NO_STREAM))
            self._cache[stream] = cached
            if start is None or cached.version != start.version:
                self._changed.add(stream)
        return cached

    def peek(self, stream: str) -> Loaded[S]:
        """The stream's state as `load` has it, but one not in memory is read without being kept:
        a look at what the service let go of (`forget`) does not bring it back."""
        cached = self._cache.get(stream)
        if cached is not None:
            return cached
        return self._fold(stream, self._restored.get(stream) or Loaded(self._initial, NO_STREAM))

    def states(self) -> dict[str, S]:
        return {stream: loaded.state for stream, loaded in {**self._restored, **self._cache}.items()
                if not self.is_batch(stream)}

    def observe(self, stream: str, version: int, event: Any) -> None:
        """Fold an event read elsewhere (a catch-up at start) into the cache."""
        current = self._cache.get(stream)
        if current is None:
            current = self._restored.pop(stream, None)
            if current is None:
                current = Loaded(self._initial, NO_STREAM)
            else:
                self._cache[stream] = current
        if self.is_batch(stream):
            if version > current.version:
                self._keep(stream, Loaded(self._initial, version))
        elif version == current.version + 1:
            self._keep(stream, Loaded(self._evolve(current.state, event), version))

    def observe_batch(self, recorded: RecordedEvent, on_event: Callable[[Any], None] = lambda event: None) -> int:
        """Fold a batch read elsewhere (a catch-up at start): each of its events into its virtual
        stream, and the batch stream's version; how many events it folded."""
        events = expand(recorded)
        for event in events:
            decoded = self._types.decode(event)  # a type it does not know is UndecodableEvent: see catch_up
            self.observe(event.stream, event.version, decoded)
            on_event(decoded)
        self.observe(recorded.stream, recorded.version, None)
        return len(events)

    def follow_batch(self, stream: str) -> Loaded[S]:
        """Read a batch stream on from the version the store has (another writer appended: a conflict,
        a first load) and fold its events in; the batch stream's entry."""
        known = self._cache.get(stream) or self._restored.get(stream)
        _, moved = self._batch_tail(stream, NO_STREAM if known is None else known.version, self._restored, self._cache)
        self._keep_newer(moved)
        return self._cache[stream]

    def _batch_tail(self, stream: str, after_version: int, states: Mapping[str, Loaded[S]],
                    moved: Mapping[str, Loaded[S]]) -> tuple[int, dict[str, Loaded[S]]]:
        """The batch stream's records after `after_version` folded onto the virtual streams' states
        (`moved`'s, else `states`'), taking the cache's where it is further already (this store's own
        appends); the batch stream's last version and every entry that moved, its own included."""
        found: dict[str, Loaded[S]] = {}
        version = after_version
        for recorded in paged(self._log, stream, after_version + 1, BATCH_RECORDS_READ):
            for event in expand(recorded):
                current = found.get(event.stream) or moved.get(event.stream) or states.get(event.stream)
                current = current or Loaded(self._initial, NO_STREAM)
                if current.version >= event.version:
                    continue
                live = self._cache.get(event.stream)  # one dict read, also from the snapshot thread
                if live is not None and live.version >= event.version:
                    found[event.stream] = live
                elif event.version == current.version + 1:  # a type it does not know is UndecodableEvent
                    found[event.stream] = Loaded(self._evolve(current.state, self._types.decode(event)), event.version)
            version = recorded.version
        found[stream] = Loaded(self._initial, version)
        return version, found

    # -- snapshots -----------------------------------------------------------------------------

    def restore(self) -> int:
        """Forget every state and start again from the last usable snapshot; the position after which
        the log must be read (0 without a snapshot)."""
        self._cache.clear()
        self._restored = {}
        self._unsnapshotted = 0
        loaded = self._snapshots.load() if self._snapshots else None
        if loaded is None:
            return 0
        position, streams = loaded
        if not isinstance(streams, dict) or not all(isinstance(v, Loaded) for v in streams.values()):
            log.warning("snapshot %s holds no stream states: folding the whole log", self._snapshots.name)
            self._snapshots.rebase()
            return 0
        self._restored = streams
        return position

    def followed(self, prefix: str, position: int, folded: int, read: int = 0) -> None:
        """catch_up read the prefix's streams up to `position`: `read` events after the snapshot, of
        which it folded `folded`. A long read is worth a snapshot even when few were folded (a
        store of rarely written streams would otherwise read the same tail at every start)."""
        for stream, loaded in self._restored.items():
            self._cache.setdefault(stream, loaded)
        self._restored = {}
        self._prefix, self._position = prefix, position
        self._unsnapshotted += folded
        if self._snapshots is not None and read >= self._snapshot_every:
            self.snapshot()
        self.snapshot_if_due()

    def snapshot(self) -> None:
        """Save the states (with a prefix, up to the log's head). Many streams are brought to the
        head, packed and written in a worker thread while the event loop goes on: the states are
        immutable, so the copy taken here stays the snapshot's (packing many schedules' states, and
        finding which of them moved, blocked the matcher's loop: docs/decisions.md). A snapshot
        still being written holds off the next."""
        if self._snapshots is None or not self._snapshots.enabled:
            return
        if self._writing is not None and not self._writing.done():
            return
        self._adopt_caught_up()
        states = {**self._restored, **self._cache}
        loop = _running_loop()
        background = loop is not None and self._entries(states.values()) >= BACKGROUND_SNAPSHOT_STREAMS
        if self._prefix is not None and not background:  # up to the head here (another writer's streams too)
            self._take(*self._moved_since(self._position, states))
            states = {**self._restored, **self._cache}
        pending = self._snapshots.prepare(self._position or 0, states)
        self._unsnapshotted = 0
        if not background:
            self._snapshots.write(pending)
            return
        # Submitted at once and checked with the thread's own future: a to_thread task starts,
        # and an asyncio future completes, only when the loop next runs, so a handler that does
        # not yield (a long burst of work) held that snapshot and every later one off.
        self._writing = SNAPSHOT_WRITER.submit(self._write_caught_up, pending, states, self._position,
                                               snapshots.LoopPacer(loop))
        self._saving = asyncio.wrap_future(self._writing, loop=loop)
        self._saving.add_done_callback(self._saved)

    def _write_caught_up(self, pending: PendingSave, states: dict[str, Loaded[S]], after: int | None,
                         pace: Callable[[], None]) -> int:
        """On the snapshot thread: with a prefix, the streams that moved after `after` are brought up
        to the head in the snapshot (`_moved_since`); the loop takes them at the next snapshot
        (`_adopt_caught_up`). Then write. Of the events counted since the snapshot was taken, how
        many it holds (0 when not written)."""
        caught_up = 0
        if after is not None:
            caught_up = self._unsnapshotted  # read before the head: every event it counts is at or below it
            head, moved = self._caught_up = self._moved_since(after, states)
            pending = pending.with_entries(moved, max(pending.position, head))
        return caught_up if self._snapshots.write(pending, pace) else 0

    def _moved_since(self, after: int, states: dict[str, Loaded[S]]) -> tuple[int, dict[str, Loaded[S]]]:
        """The log's head, and every stream of the prefix that moved after `after` past its version in
        `states`, brought up to date: this store's own appends from its cache, another writer's
        events (or a forgotten stream) folded from the log."""
        head = self._log.head_position()  # every event up to it is committed: read short, the prefix's are all here
        moved = {}
        # mostly this store's own appends, already in the cache: which streams moved, not their events
        for stream, version in self._log.stream_versions(after, (self._prefix,)).items():
            start = states.get(stream, Loaded(self._initial, NO_STREAM))
            if start.version >= version:
                continue
            if self.is_batch(stream):
                moved.update(self._batch_tail(stream, start.version, states, moved)[1])
                continue
            live = self._cache.get(stream)  # one dict read, also from the snapshot thread
            moved[stream] = live if live is not None and live.version >= version else self._fold(stream, start)
        return head, moved

    def _adopt_caught_up(self) -> None:
        """What the last background snapshot read (`_write_caught_up`), into the cache."""
        caught_up, self._caught_up = self._caught_up, None
        if caught_up is not None:
            self._take(*caught_up)

    def _take(self, head: int, moved: dict[str, Loaded[S]]) -> None:
        """Streams read further than the cache holds them, and the head they were read up to: every
        event of the prefix up to it is now in the cache."""
        self._keep_newer(moved)
        self._position = max(self._position or 0, head)

    def _keep_newer(self, moved: dict[str, Loaded[S]]) -> None:
        for stream, loaded in moved.items():
            cached = self._cache.get(stream)
            if cached is None or cached.version < loaded.version:
                self._restored.pop(stream, None)
                self._keep(stream, loaded)

    def _entries(self, states: Collection[Loaded[S]]) -> int:
        """What packing these states costs, in entries: one per stream, or what `size` counts."""
        if self._size is None:
            return len(states)
        return sum(self._size(loaded.state) for loaded in states)

    def _saved(self, saving: asyncio.Future) -> None:
        latest = self._saving is saving
        if latest:
            self._saving = None
        if saving.cancelled():
            return
        if saving.exception() is not None:  # save() logs its own failures
            log.warning("snapshot %s not saved: %r", self._snapshots.name, saving.exception())
        elif latest:  # the events it caught up with are in it: the next is due after as many new ones
            self._unsnapshotted = max(0, self._unsnapshotted - saving.result())

    def snapshot_if_due(self) -> None:
        """Snapshot when `snapshot_every` events (or as many as the store holds entries, if more)
        were appended or caught up with since the last one (called between decisions: never while
        an append's events are half committed to the cache)."""
        if (self._snapshots is not None and self._unsnapshotted >= self._snapshot_every
                and self._unsnapshotted >= self._entries(self._cache.values())):
            self.snapshot()

    def prepare(self, stream: str, events: Sequence[Any]) -> StreamAppend:
        loaded = self.load(stream)
        event_id = time_ordered_ids(self._clock.now())
        new_events = [encode(e, event_id(stream, str(loaded.version + 1 + i))) for i, e in enumerate(events)]
        return StreamAppend(stream, new_events, loaded.version)

    def commit(self, stream: str, events: Sequence[Any], new_version: int) -> S:
        state = self._evolve_each(self.load(stream).state, events)
        self._keep(stream, Loaded(state, new_version))
        self._unsnapshotted += len(events)
        return state

    def _evolve_each(self, state: S, events: Sequence[Any]) -> S:
        for event in events:
            state = self._evolve(state, event)
        return state

    def put(self, stream: str, state: S, version: int) -> None:
        """The state after an append whose events the caller folded already (no second evolve)."""
        before = self._cache.get(stream)
        self._unsnapshotted += version - (before.version if before is not None else NO_STREAM)
        self._keep(stream, Loaded(state, version))
        # Safe here, unlike in commit: a stream of the same append that is read again from the log
        # before its own put gets the very state put() then sets.
        self.snapshot_if_due()

    def _keep(self, stream: str, loaded: Loaded[S]) -> None:
        """Cache a stream's new state and note that it changed since the snapshot's base. The first
        change re-inserts the key, so that the cache and the changed set hold one string object:
        callers pass a new one each time (two cost ~90 B per stream changed since the base)."""
        if stream not in self._changed:
            self._cache.pop(stream, None)
            self._changed.add(stream)
        self._cache[stream] = loaded

    def forget(self, stream: str) -> None:
        if self._cache.pop(stream, None) is not None:
            self._changed.add(stream)

    def _fold(self, stream: str, start: Loaded[S]) -> Loaded[S]:
        state, version = start.state, start.version
        for recorded in self._log.read_stream(stream, version + 1):
            state = self._evolve(state, self._types.decode(recorded))
            version = recorded.version
        return Loaded(state, version)


def execute(
    store: AggregateStore[S],
    log: EventLog,
    stream: str,
    decide: Callable[[S], Sequence[Any]],
    *,
    checkpoints: Sequence[Checkpoint] = (),
) -> tuple[S, list[Any]]:
    """decide against the current state and append; on a concurrent writer, reload and decide again."""
    decided = execute_batch(store, log, [stream], lambda _, state: decide(state), checkpoints=checkpoints)
    return store.load(stream).state, decided.get(stream, [])


def execute_batch(
    store: AggregateStore[S],
    log: EventLog,
    streams: Sequence[str],
    decide: Callable[[str, S], Sequence[Any]],
    *,
    checkpoints: Sequence[Checkpoint] = (),
) -> dict[str, list[Any]]:
    """decide for several streams and append every resulting event in one transaction, with the
    checkpoints (written only when there is something to append); on a concurrent writer, reload
    and decide again (sluice.runtime.unit_of_work's policy). CheckpointMoved is raised: the same
    checkpoints cannot succeed again, the caller reads them and decides again."""
    return retry_on_conflict(lambda: attempt_batch(store, log, streams, decide, checkpoints=checkpoints),
                             lambda conflict: forget_conflicting(store, conflict),
                             what=f"streams {list(streams)[:3]}...")


def attempt_batch(
    store: AggregateStore[S],
    log: EventLog,
    streams: Sequence[str],
    decide: Callable[[str, S], Sequence[Any]],
    *,
    checkpoints: Sequence[Checkpoint] = (),
) -> dict[str, list[Any]]:
    """One attempt of `execute_batch`: raises WrongExpectedVersion having changed nothing."""
    decided = {stream: events for stream in streams if (events := list(decide(stream, store.load(stream).state)))}
    if not decided:
        return {}
    appends = [store.prepare(stream, events) for stream, events in decided.items()]
    versions = log.append_batch(appends, checkpoints=checkpoints)
    for (stream, events), version in zip(decided.items(), versions):
        store.commit(stream, events, version)
    store.snapshot_if_due()
    return decided


def forget_conflicting(store: AggregateStore[Any], conflict: WrongExpectedVersion) -> None:
    """A store's reload after a conflict: its stale stream is read again at the next load. A moved
    checkpoint is raised (no reload makes the same checkpoints succeed)."""
    if isinstance(conflict, CheckpointMoved):
        raise conflict
    store.forget(conflict.stream)


def catch_up(log: EventLog, store: AggregateStore[Any], stream_prefix: str, types: EventTypes,
             on_event: Callable[[Any], None] = lambda event: None, batch: int = READ_BATCH) -> None:
    """Fold every stream with the prefix into the store's cache (service recovery): from the store's
    last snapshot on, if it keeps snapshots (then `on_event` sees only the events after it). Only
    the prefix's streams are read (filtered by the log: the other services' events are never
    fetched), up to at least the head as it was when the read began. Every stream of the prefix is the
    store's: an event of a type this release does not know on one (a newer release's, rolled back) is
    UndecodableEvent, where skipping it left the state rebuilt silently behind the log."""
    restored = after = store.restore()
    if store.has_batches:
        batch = min(batch, BATCH_RECORDS_READ)
    head = log.head_position()  # every event up to it is committed: read past it, the store is complete up to it
    folded = 0
    while records := log.read_all(after, batch, (stream_prefix,)):
        for recorded in records:
            if recorded.type == BATCH_TYPE and store.is_batch(recorded.stream):
                folded += store.observe_batch(recorded, on_event)
            else:
                event = types.decode(recorded)
                store.observe(recorded.stream, recorded.version, event)
                on_event(event)
                folded += 1
        after = records[-1].position
    after = max(after, head)
    store.followed(stream_prefix, after, folded, after - restored)


class _Untracked:
    """The changed streams of a store that keeps no snapshots: not worth remembering."""

    def __contains__(self, stream: str) -> bool:
        return True

    def add(self, stream: str) -> None:
        pass


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
