"""The console's actions: each one gRPC call, behind the same authorization as any client's (the
permission shown and used to enable a button is the one sluice.runtime.permissions gives the method)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from sluice.runtime.permissions import GRPC_RULES
from sluice.v1 import datasets_pb2, dead_letters_pb2, jobs_pb2, runs_pb2, schedules_pb2


@dataclass(frozen=True)
class Action:
    title: str
    verb: str
    service: str
    method: str
    request: Callable[[str], Any]
    """The request, from the id in the action's URL."""


def permission_of(action: Action) -> str:
    return GRPC_RULES[f"/sluice.v1.{action.service}/{action.method}"].permission or ""


ACTIONS = {
    # name -> the gRPC call it makes, building its request from the id in the URL
    "enable": Action("Enable schedule", "Enable", "ScheduleRegistry", "EnableSchedule",
                     lambda i: schedules_pb2.EnableScheduleRequest(id=i)),
    "disable": Action("Disable schedule", "Disable", "ScheduleRegistry", "DisableSchedule",
                      lambda i: schedules_pb2.DisableScheduleRequest(id=i)),
    "release": Action("Release quarantined commit sequence", "Release", "Partitions", "ReleaseCommitSequence",
                      lambda i: datasets_pb2.ReleaseCommitSequenceRequest(id=i)),
    "run-now": Action("Run schedule now", "Run now", "Jobs", "RunSchedule",
                      lambda i: jobs_pb2.RunScheduleRequest(schedule_id=i)),
    "cancel": Action("Cancel run", "Cancel run", "Runs", "CancelRun",
                     lambda i: runs_pb2.CancelRunRequest(id=i, reason="cancelled from the console")),
    "replay": Action("Replay dead letter", "Replay", "DeadLetters", "ReplayDeadLetter",
                     lambda i: dead_letters_pb2.ReplayDeadLetterRequest(id=i)),
}


def allowed(me: Any, name: str, namespace: str) -> bool:
    """Whether `me` (an api.Identity) holds the permission of action `name` on `namespace` ("*": every one)."""
    return me.may(permission_of(ACTIONS[name]), namespace)
