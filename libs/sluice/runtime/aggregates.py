"""Load an aggregate by folding its stream, decide, append with the expected version."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Generic, Sequence, TypeVar

from sluice.domain.codec import EventTypes, encode
from sluice.eventlog.port import NO_STREAM, Checkpoint, EventLog, StreamAppend, WrongExpectedVersion
from sluice.ids import derived_id

S = TypeVar("S")

MAX_CONFLICT_RETRIES = 5


@dataclass(frozen=True)
class Loaded(Generic[S]):
    state: S
    version: int


class AggregateStore(Generic[S]):
    """Keeps the folded state of the streams it wrote or read, so a hot aggregate is not re-read.

    Event ids are derived from (stream, version): a replayed or retried append produces the same
    ids, and the outbox publishes each event under that id for consumers to deduplicate."""

    def __init__(self, log: EventLog, types: EventTypes, evolve: Callable[[S, Any], S], initial: S) -> None:
        self._log = log
        self._types = types
        self._evolve = evolve
        self._initial = initial
        self._cache: dict[str, Loaded[S]] = {}

    def load(self, stream: str) -> Loaded[S]:
        cached = self._cache.get(stream)
        if cached is None:
            cached = self._fold(stream, Loaded(self._initial, NO_STREAM))
            self._cache[stream] = cached
        return cached

    def states(self) -> dict[str, S]:
        return {stream: loaded.state for stream, loaded in self._cache.items()}

    def observe(self, stream: str, version: int, event: Any) -> None:
        """Fold an event read elsewhere (a catch-up at start) into the cache."""
        current = self._cache.get(stream, Loaded(self._initial, NO_STREAM))
        if version == current.version + 1:
            self._cache[stream] = Loaded(self._evolve(current.state, event), version)

    def prepare(self, stream: str, events: Sequence[Any]) -> StreamAppend:
        loaded = self.load(stream)
        new_events = [encode(e, derived_id(stream, str(loaded.version + 1 + i))) for i, e in enumerate(events)]
        return StreamAppend(stream, new_events, loaded.version)

    def commit(self, stream: str, events: Sequence[Any], new_version: int) -> S:
        loaded = self.load(stream)
        state = loaded.state
        for event in events:
            state = self._evolve(state, event)
        self._cache[stream] = Loaded(state, new_version)
        return state

    def forget(self, stream: str) -> None:
        self._cache.pop(stream, None)

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
    checkpoints (written only when there is something to append)."""
    for _ in range(MAX_CONFLICT_RETRIES):
        decided = {stream: events for stream in streams if (events := list(decide(stream, store.load(stream).state)))}
        if not decided:
            return {}
        appends = [store.prepare(stream, events) for stream, events in decided.items()]
        try:
            versions = log.append_batch(appends, checkpoints=checkpoints)
        except WrongExpectedVersion as conflict:
            store.forget(conflict.stream)
            continue
        for (stream, events), version in zip(decided.items(), versions):
            store.commit(stream, events, version)
        return decided
    raise RuntimeError(f"streams {list(streams)[:3]}...: gave up after {MAX_CONFLICT_RETRIES} concurrent-write conflicts")


def catch_up(log: EventLog, store: AggregateStore[Any], stream_prefix: str, types: EventTypes,
             on_event: Callable[[Any], None] = lambda event: None, batch: int = 10_000) -> None:
    """Fold every stream with the prefix into the store's cache (service recovery)."""
    after = 0
    while records := log.read_all(after, batch):
        for recorded in records:
            if recorded.stream.startswith(stream_prefix) and recorded.type in types:
                event = types.decode(recorded)
                store.observe(recorded.stream, recorded.version, event)
                on_event(event)
        after = records[-1].position
