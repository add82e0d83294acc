"""What `sluice replay` and `sluice rebuild` say when folding the log fails on an event this release
cannot read (corrupt, cut short, or written by a later release): the event's stream, version and position,
as the codec names it (UndecodableEvent); for the decoders beside the codec's (lineage's run events), the
first such event, found by decoding every event of the log with its service's event types."""
from __future__ import annotations

import json
from contextlib import contextmanager
from typing import Callable, Iterator

from sluice.eventlog.batched import MalformedBatch, expand_all
from sluice.eventlog.codec import DECODING_ERRORS, UndecodableEvent
from sluice.eventlog.port import EventLog, RecordedEvent
from sluice_services.cli.offline import OperatorError

READ_BATCH = 5000
CANNOT_READ = "the event log holds an event this release cannot read"


@contextmanager
def named_unreadable(log: EventLog) -> Iterator[None]:
    """A failure inside of the kinds decoding raises becomes one line naming the log's first unreadable
    event, when it has one (any other failure is raised as it is)."""
    try:
        yield
    except UndecodableEvent as error:
        raise OperatorError(f"{CANNOT_READ}: {error}") from None
    except DECODING_ERRORS:  # an infrastructure failure (the log unreachable) is none of them: no read of the log
        where = first_unreadable(log)
        if where is None:
            raise
        raise OperatorError(f"{CANNOT_READ}: {where}") from None


def first_unreadable(log: EventLog) -> str | None:
    """"stream S version V at position P: TYPE: why" of the first event a service's event types cannot
    decode (a record that is not the batch its type says names itself); None when every one decodes."""
    decoders = _decoders()
    after = 0
    while records := log.read_all(after, READ_BATCH):
        try:
            events = expand_all(records)
        except MalformedBatch as error:
            return str(error)
        for event in events:
            decode = decoders(event.type)
            if decode is None:
                continue
            try:
                decode(event)
            except UndecodableEvent as error:
                return str(error)
            except DECODING_ERRORS as error:
                return str(UndecodableEvent(event, error))
        after = records[-1].position
    return None


def _decoders() -> Callable[[str], Callable[[RecordedEvent], object] | None]:
    """The decoder of an event type (None: a type no service reads)."""
    from sluice.datasets import consumers, store
    from sluice.readmodels import jobs
    from sluice_services.alerts import service as alerts
    from sluice_services.checker import service as checker
    from sluice_services.datasets import commits, service as datasets
    from sluice_services.launcher import lease, service as launcher
    from sluice_services.lineage import service as lineage
    from sluice_services.matcher import service as matcher
    from sluice_services.registry import service as registry

    types = (registry.TYPES, registry.APP_TYPES, matcher.TYPES, checker.TYPES, jobs.TYPES, launcher.TYPES, lease.TYPES,
             datasets.ACCESS_TYPES, commits.TYPES, store.TYPES, consumers.TYPES, consumers.SNAPSHOT_TYPES, alerts.TYPES)

    def lineage_event(recorded: RecordedEvent) -> object:
        return lineage.parse_run_event(json.loads(recorded.data))

    def decoder(type_name: str) -> Callable[[RecordedEvent], object] | None:
        if type_name == lineage.EVENT_TYPE:
            return lineage_event
        return next((known.decode for known in types if type_name in known), None)
    return decoder
