"""An aggregate store's events get time-ordered ids: in the order appended, even while the clock stands still."""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from sluice.clock import SimulatedClock
from sluice.eventlog.codec import EventTypes
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.runtime.aggregates import AggregateStore, execute, execute_batch


@dataclass(frozen=True)
class Counted:
    n: int


def test_event_ids_sort_in_the_order_the_events_were_appended_and_carry_the_clocks_time():
    clock = SimulatedClock(datetime(2026, 11, 27, 12, 30, tzinfo=timezone.utc))
    log = SqliteEventLog(":memory:", clock=clock)
    store: AggregateStore[int] = AggregateStore(log, EventTypes([Counted]), lambda state, event: state + 1, 0,
                                                clock=clock)
    for n in range(50):  # one instant: the ids differ by their counter, not their time
        execute(store, log, f"counter-{n % 7}", lambda state, n=n: [Counted(n), Counted(n)])
    execute_batch(store, log, [f"counter-{n}" for n in range(7)], lambda stream, state: [Counted(-1)])
    clock.advance(timedelta(milliseconds=1))
    execute(store, log, "counter-0", lambda state: [Counted(100)])

    ids = [event.id for event in log.read_all(limit=1000)]
    assert len(ids) == 108 and len(set(ids)) == 108
    assert ids == sorted(ids)
    assert all(uuid.UUID(i).version == 7 for i in ids)
    assert uuid.UUID(ids[0]).int >> 80 == int(clock.now().timestamp() * 1000) - 1
    assert uuid.UUID(ids[-1]).int >> 80 == int(clock.now().timestamp() * 1000)
