from sluice.eventlog.port import (
    ANY_VERSION,
    NO_STREAM,
    Checkpoint,
    CheckpointMoved,
    DuplicateEventId,
    EventLog,
    EventLogNotMigrated,
    EventLogUnavailable,
    NewEvent,
    RecordedEvent,
    StreamAppend,
    WrongExpectedVersion,
)

__all__ = [
    "ANY_VERSION",
    "NO_STREAM",
    "Checkpoint",
    "CheckpointMoved",
    "DuplicateEventId",
    "EventLog",
    "EventLogNotMigrated",
    "EventLogUnavailable",
    "NewEvent",
    "RecordedEvent",
    "StreamAppend",
    "WrongExpectedVersion",
]
