"""What the launcher's run events send through the outbox: the program's status notifications, the
partitions a completed run published, and the run's OpenLineage events."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from openlineage.client.event_v2 import RunState

from sluice.bus.topics import LINEAGE, PARTITION_NOTIFICATIONS, PROGRAM_NOTIFICATIONS
from sluice.domain import runs
from sluice.domain.common import Notification, PartitionCommitted, ProgramStatusChanged, RunStatus
from sluice.domain.runs import Run
from sluice.eventlog.port import RecordedEvent
from sluice.ids import derived_id
from sluice.runtime.outbox import Outgoing
from sluice.wire.common import notification_to_proto
from sluice_services.launcher import lineage_events


def outgoing(recorded: RecordedEvent, event: runs.RunEvent, run: Run,
             attempt_dir: Callable[[Run], Path]) -> list[Outgoing]:
    """The messages `event` (decoded from `recorded`) sends; `run` is its run as the launcher has it."""
    match event:
        case runs.RunStarted(_, _, at, attempt):
            if any(a.started_at is not None for a in run.attempts[:attempt - 1]):
                return []  # a retry: the run was reported RUNNING by an earlier attempt and still is
            return [*_status(run, RunStatus.RUNNING, recorded), *_lineage(run, lineage_events.run_started(run, at))]
        case runs.RunCompleted(_, outputs, _, at):
            return [*_status(run, RunStatus.COMPLETED, recorded), *_outputs(outputs, recorded),
                    *_lineage(run, lineage_events.run_ended(run, RunState.COMPLETE, at, attempt_dir(run)))]
        case runs.RunFailed(_, _, at):
            return [*_status(run, RunStatus.FAILED, recorded),
                    *_lineage(run, lineage_events.run_ended(run, RunState.FAIL, at, attempt_dir(run)))]
        case runs.RunLost(_, _, at):
            return [*_status(run, RunStatus.LOST, recorded),
                    *_lineage(run, lineage_events.run_ended(run, RunState.ABORT, at, attempt_dir(run)))]
        case runs.RunKilled(_, _, _, at):
            return [*_status(run, RunStatus.KILLED, recorded),
                    *_lineage(run, lineage_events.run_ended(run, RunState.ABORT, at, attempt_dir(run)))]
    return []


def _status(run: Run, status: RunStatus, recorded: RecordedEvent) -> list[Outgoing]:
    payload = ProgramStatusChanged(run.job.program, run.id, status, run.job.schedule_id, run.job.id)
    notification = Notification(_notification_id(recorded, "status"), recorded.recorded_at, payload)
    return [Outgoing(PROGRAM_NOTIFICATIONS, notification.event_key(),
                     notification_to_proto(notification).SerializeToString())]


def _outputs(outputs: tuple[runs.OutputPartition, ...], recorded: RecordedEvent) -> list[Outgoing]:
    messages = []
    for index, output in enumerate(outputs):
        if output.announced:
            continue  # its dataset's transaction announced it
        payload = PartitionCommitted(output.namespace, output.dataset, (output.partition,))
        notification = Notification(_notification_id(recorded, "output", str(index)), recorded.recorded_at, payload)
        messages.append(Outgoing(PARTITION_NOTIFICATIONS, notification.event_key(),
                                 notification_to_proto(notification).SerializeToString()))
    return messages


def _notification_id(recorded: RecordedEvent, *parts: str) -> str:
    """From the event's place in its run's stream, not its id: run events' ids are time-ordered (they
    differ between two histories of the same runs), a notification's id is what its consumers match."""
    return derived_id(recorded.stream, str(recorded.version), *parts)


def _lineage(run: Run, events: list[bytes]) -> list[Outgoing]:
    return [Outgoing(LINEAGE, run.id, event) for event in events]
