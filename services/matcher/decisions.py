"""One batch of the matcher's decisions: many commands over many schedules, one append.

Each schedule's state is taken from the aggregate store once, advanced in memory command after
command (`matching.step`: decide and the resulting state at once), and its events are gathered
into one StreamAppend per schedule. Nothing reaches the store before the append succeeded."""
from __future__ import annotations

from datetime import datetime

from sluice.domain import matching
from sluice.domain.matching import MatcherState
from sluice.eventlog.codec import encode
from sluice.eventlog.port import StreamAppend
from sluice.ids import time_ordered_ids
from sluice.runtime.aggregates import AggregateStore


class Decisions:
    def __init__(self, store: AggregateStore[MatcherState], now: datetime) -> None:
        self._store = store
        self.now = now
        self._states: dict[str, MatcherState] = {}
        self._events: dict[str, list] = {}

    def state(self, schedule_id: str) -> MatcherState:
        state = self._states.get(schedule_id)
        if state is None:
            state = self._states[schedule_id] = self._store.load(matching.stream_name(schedule_id)).state
        return state

    def decide(self, schedule_id: str, command: matching.MatcherCommand) -> None:
        state = self.state(schedule_id)
        events, after = matching.step(state, command, self.now)
        if not events:
            return
        self._states[schedule_id] = after
        self._events.setdefault(schedule_id, []).extend(events)

    def __bool__(self) -> bool:
        return bool(self._events)

    def appends(self) -> list[StreamAppend]:
        """One StreamAppend per schedule at its expected version. Event ids are time-ordered
        (`time_ordered_id`): the log's index of ids grows at its right edge, where ids derived from
        (stream, version) alone landed on random pages and made each append slower as the log grew.
        The expected version refuses a second append of the same decision, whatever its ids."""
        appends, event_id, load = [], time_ordered_ids(self.now), self._store.load
        for schedule_id, events in self._events.items():
            stream = matching.stream_name(schedule_id)
            version = load(stream).version
            if len(events) == 1:  # the usual decision
                encoded = [encode(events[0], event_id(stream, str(version + 1)))]
            else:
                encoded = [encode(event, event_id(stream, str(version + offset)))
                           for offset, event in enumerate(events, start=1)]
            appends.append(StreamAppend(stream, encoded, version))
        return appends

    def commit(self, versions: list[int]) -> list[tuple[str, MatcherState]]:
        """The append succeeded with these versions: the store takes the new states; which changed."""
        changed, states, put = [], self._states, self._store.put
        for schedule_id, version in zip(self._events, versions):
            state = states[schedule_id]
            put(matching.stream_name(schedule_id), state, version)
            changed.append((schedule_id, state))
        return changed
