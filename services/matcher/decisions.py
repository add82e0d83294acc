"""One batch of the matcher's decisions: many commands over many schedules, one append.

Each schedule's state is taken from the aggregate store once, advanced in memory command after
command (`matching.step`: decide and the resulting state at once), and its events are gathered
into one StreamAppend per schedule. Nothing reaches the store before the append succeeded."""
from __future__ import annotations

from datetime import datetime

from sluice.domain import matching
from sluice.domain.matching import MatcherState
from sluice.eventlog.port import StreamAppend
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
        return [self._store.prepare(matching.stream_name(schedule_id), events)
                for schedule_id, events in self._events.items()]

    def commit(self, versions: list[int]) -> list[tuple[str, MatcherState]]:
        """The append succeeded with these versions: the store takes the new states; which changed."""
        changed = []
        for schedule_id, version in zip(self._events, versions):
            state = self._states[schedule_id]
            self._store.put(matching.stream_name(schedule_id), state, version)
            changed.append((schedule_id, state))
        return changed
