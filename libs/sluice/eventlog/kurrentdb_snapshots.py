"""Snapshots on KurrentDB: one hidden stream per name, `<prefix>@snapshot-<name>`, whose last event is
the snapshot (SnapshotSaved: the bytes as data, position and schema in the metadata) or the mark
that it was deleted (SnapshotDeleted). Hidden ("@") streams stay out of read_all and subscriptions.
Only the last event is ever read; old snapshots can be scavenged with the stream's $maxCount."""
from __future__ import annotations

import json
import uuid

from kurrentdbclient import NewEvent as KurrentNewEvent
from kurrentdbclient import NewEvents, StreamState
from kurrentdbclient import RecordedEvent as KurrentRecordedEvent

from sluice.eventlog.kurrentdb_codec import INTERNAL
from sluice.eventlog.snapshots import Snapshot

SNAPSHOT_STREAM = INTERNAL + "snapshot-"
SNAPSHOT_SAVED = "SnapshotSaved"
SNAPSHOT_DELETED = "SnapshotDeleted"


def snapshot_stream(prefix: str, name: str) -> str:
    return f"{prefix}{SNAPSHOT_STREAM}{name}"


def saved(prefix: str, snapshot: Snapshot, event_uuid: uuid.UUID) -> NewEvents:
    metadata = json.dumps({"position": str(snapshot.position), "schema": snapshot.schema}).encode()
    event = KurrentNewEvent(type=SNAPSHOT_SAVED, data=bytes(snapshot.data), metadata=metadata,
                            content_type="application/octet-stream", id=event_uuid)
    return NewEvents(snapshot_stream(prefix, snapshot.name), [event], StreamState.ANY)


def deleted(prefix: str, name: str, event_uuid: uuid.UUID) -> NewEvents:
    event = KurrentNewEvent(type=SNAPSHOT_DELETED, data=b"{}", id=event_uuid)
    return NewEvents(snapshot_stream(prefix, name), [event], StreamState.ANY)


def snapshot_of(name: str, last: KurrentRecordedEvent | None) -> Snapshot | None:
    if last is None or last.type != SNAPSHOT_SAVED:
        return None
    metadata = json.loads(last.metadata)
    return Snapshot(name, int(metadata["position"]), str(metadata["schema"]), bytes(last.data))
