"""A run's status and output notifications take their ids from the run event's place in its stream,
not from the event's id: run events' ids are time-ordered, so two histories of the same runs (the
crash sweep's oracle and a run with crashes) give the same event different ids, and the matcher,
which matches and remembers notifications by id, must see the same notifications in both."""
from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from sluice.domain import runs
from sluice.domain.common import PartitionRef, ProgramRef, RunStatus
from sluice.domain.jobs import Job, TriggerContext
from sluice.domain.runs import OutputPartition, Run
from sluice.eventlog.port import RecordedEvent
from sluice.v1 import notifications_pb2
from sluice_services.launcher.outbox_routes import outgoing

T0 = datetime(2026, 11, 27, tzinfo=timezone.utc)
PROGRAM = ProgramRef("ns", "app", "p")
RUN_ID = "1b4e28ba-2fa1-51d2-883f-0016d3cca427"
RUN = Run(RUN_ID, Job("6c1f0a52-9d8e-5b7a-8c3d-2e4f6a8b0c1d", "schedule-1", 1, PROGRAM, TriggerContext("schedule-1", "s"), T0), RunStatus.COMPLETED, T0)
COMPLETED = runs.RunCompleted(RUN_ID, (OutputPartition("ns", "out", PartitionRef({"d": "1"}, "/out/1")),), (), T0)


def notification_ids(event_id: str, version: int = 3) -> list[str]:
    recorded = RecordedEvent(event_id, f"run-{RUN_ID}", version, 42, "RunCompleted", b"{}", {}, T0)
    return [notifications_pb2.Notification.FromString(message.value).id
            for message in outgoing(recorded, COMPLETED, RUN, lambda run: Path("/tmp"))
            if message.topic != "sluice.lineage"]


def test_the_same_run_event_under_another_id_sends_the_same_notifications():
    first, second = notification_ids("0190a1b2-0000-7000-8000-000000000001"), notification_ids("0190a1b2-0000-7000-8000-000000000002")
    assert len(first) == 2 and first == second  # the status and the output partition
    assert notification_ids("0190a1b2-0000-7000-8000-000000000001", version=4) != first and len(set(first)) == 2
