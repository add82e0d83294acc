"""Value objects shared by the scheduler's aggregates."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Mapping


@dataclass(frozen=True, slots=True)
class ProgramRef:
    namespace: str
    app: str
    program: str

    def qualified(self) -> str:
        return f"{self.namespace}.{self.app}.{self.program}"


@dataclass(frozen=True, slots=True)
class PartitionRef:
    key: Mapping[str, str]
    location: str
    size_bytes: int = 0
    record_count: int = 0
    metadata: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PartitionCommitted:
    namespace: str
    dataset: str
    partitions: tuple[PartitionRef, ...]


class RunStatus(enum.Enum):
    STARTING = "STARTING"
    """spark-submit was started; the application has not reported running yet."""
    RUNNING = "RUNNING"
    """The program is executing."""
    COMPLETED = "COMPLETED"
    """The program exited successfully and its outputs were published."""
    FAILED = "FAILED"
    """The program exited with an error, or its outputs could not be published."""
    KILLED = "KILLED"
    """The run was stopped on request."""
    LOST = "LOST"
    """The program's process vanished without an exit status (killed with its wrapper, the machine
    restarted), and the schedule's retry policy left no further attempt."""

    @property
    def terminal(self) -> bool:
        return self in (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.KILLED, RunStatus.LOST)


@dataclass(frozen=True, slots=True)
class ProgramStatusChanged:
    program: ProgramRef
    run_id: str
    status: RunStatus
    schedule_id: str = ""
    job_id: str = ""


@dataclass(frozen=True, slots=True)
class Notification:
    """A message on the bus: something happened that may trigger schedules."""

    id: str
    time: datetime
    payload: PartitionCommitted | ProgramStatusChanged

    def event_key(self) -> str:
        payload = self.payload
        if isinstance(payload, PartitionCommitted):
            return f"partition:{payload.namespace}.{payload.dataset}"
        program = payload.program
        return f"program:{program.namespace}.{program.app}.{program.program}.{payload.status.value}"
