"""What the fuzz suite aims at, enumerated from the code so a new one is covered without an edit:
every gRPC method of the generated descriptors (sluice/v1/*_pb2.py), every route of the lineage HTTP
application and of the metrics application (their aiohttp routers), every topic of ALL_TOPICS.
Templates are known-good requests (filled with the warm-up's real names and ids) that the fuzzer
changes one field of; a method without one starts from the empty message."""
from __future__ import annotations

import importlib
import json
import pkgutil
import re
from dataclasses import dataclass
from typing import Any

from google.protobuf import descriptor as _d
from google.protobuf import message as _message

import sluice.v1
from sluice.bus import topics as bus_topics
from sluice.v1 import datasets_pb2 as dpb
from sluice.v1 import jobs_pb2, lineage_pb2, runs_pb2
from sluice.v1 import notifications_pb2 as npb
from sluice.v1 import schedules_pb2 as spb
from tests.fuzz.inputs import _event, now_seconds


@dataclass(frozen=True)
class GrpcMethod:
    service: str          # full name
    name: str
    input: _d.Descriptor

    @property
    def path(self) -> str:
        return f"/{self.service}/{self.name}"

    @property
    def label(self) -> str:
        return f"{self.service.rsplit('.', 1)[-1]}.{self.name}"


@dataclass(frozen=True)
class HttpRoute:
    app: str              # "lineage" or "metrics"
    method: str
    path: str             # with {variables}

    @property
    def label(self) -> str:
        return f"{self.method} {self.path}"

    @property
    def variables(self) -> list[str]:
        return re.findall(r"\{(\w+)[^}]*\}", self.path)


@dataclass(frozen=True)
class Topic:
    name: str
    message: _d.Descriptor | None   # None: JSON (lineage) or any bytes (dead letters)

    @property
    def label(self) -> str:
        return self.name


def pb2_modules() -> list[Any]:
    return [importlib.import_module(f"sluice.v1.{m.name}") for m in pkgutil.iter_modules(sluice.v1.__path__)
            if m.name.endswith("_pb2")]


def grpc_methods() -> list[GrpcMethod]:
    found = []
    for module in pb2_modules():
        for service in module.DESCRIPTOR.services_by_name.values():
            for method in service.methods:
                if method.client_streaming or method.server_streaming:
                    continue
                found.append(GrpcMethod(service.full_name, method.name, method.input_type))
    return sorted(found, key=lambda m: m.path)


def http_routes() -> list[HttpRoute]:
    from sluice.runtime.metrics import Registry
    from sluice.runtime.metrics_http import metrics_app
    from sluice_services.lineage import http_api

    found = []
    for app_name, app in (("lineage", http_api.application(None)), ("metrics", metrics_app(Registry()))):
        for route in app.router.routes():
            if route.method == "HEAD":
                continue
            info = route.resource.get_info()
            found.append(HttpRoute(app_name, route.method, info.get("formatter") or info.get("path")))
    return sorted(set(found), key=lambda r: (r.app, r.path, r.method))


def _message_named(name: str) -> _d.Descriptor | None:
    for module in pb2_modules():
        if name in module.DESCRIPTOR.message_types_by_name:
            return module.DESCRIPTOR.message_types_by_name[name]
    return None


def bus_topics_() -> list[Topic]:
    """ALL_TOPICS, each with the message type topics.py's table names for it."""
    documented = {}
    for line in (bus_topics.__doc__ or "").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0].startswith("sluice."):
            documented[cells[0]] = cells[1]
    return [Topic(spec.name, _message_named(documented.get(spec.name, ""))) for spec in bus_topics.ALL_TOPICS]


# -- known-good requests ------------------------------------------------------------------------

@dataclass
class Known:
    namespace: str = "fuzz"
    app: str = "app1"
    program: str = "prog"
    dataset: str = "events"
    schedule_id: str = ""
    job_id: str = ""
    run_id: str = ""
    lineage_job: str = "job"
    sequence_id: str = ""


def schedule(known: Known, name: str = "s1") -> spb.Schedule:
    return spb.Schedule(name=name, program=npb.ProgramRef(namespace=known.namespace, app=known.app,
                                                          program=known.program),
                        properties={"p": "v"}, enabled=True,
                        trigger=spb.Trigger(partition=spb.PartitionTrigger(namespace=known.namespace,
                                                                           dataset=known.dataset, count=1)))


def partition(known: Known) -> npb.PartitionRef:
    return npb.PartitionRef(key=[npb.KeyValue(name="region", value="eu"), npb.KeyValue(name="hour", value="09")],
                            location="/tmp/fuzz/eu/09", size_bytes=10, record_count=1, metadata={"m": "1"})


def notification(known: Known) -> npb.Notification:
    n = npb.Notification(id="fuzz-n1", partition_committed=npb.PartitionCommitted(
        namespace=known.namespace, dataset=known.dataset, partitions=[partition(known)]))
    n.time.seconds = now_seconds()
    return n


def lineage_event(known: Known) -> bytes:
    return json.dumps(_event("0176a8c2-fe01-7439-87e6-56a1a1b4e6f5", known.namespace, known.lineage_job,
                             inputs=("in",), outputs=("out",))).encode()


def templates(known: Known) -> dict[str, _message.Message]:
    """Full method or message name -> a valid instance."""
    k = known
    ds = dpb.Dataset(namespace=k.namespace, name=k.dataset, base_location="/tmp/fuzz/events",
                     partition_keys=[dpb.PartitionKey(name="region", type=dpb.KEY_TYPE_STRING),
                                     dpb.PartitionKey(name="hour", type=dpb.KEY_TYPE_INT)])
    job = jobs_pb2.Job(id=k.job_id or "job-1", schedule_id=k.schedule_id or "s-1") if "id" in jobs_pb2.Job.DESCRIPTOR.fields_by_name else jobs_pb2.Job()
    return {
        "/sluice.v1.ScheduleRegistry/CreateSchedule": spb.CreateScheduleRequest(schedule=schedule(k, "fuzz_new")),
        "/sluice.v1.ScheduleRegistry/UpdateSchedule": spb.UpdateScheduleRequest(schedule=schedule(k)),
        "/sluice.v1.ScheduleRegistry/DeployApp": spb.DeployAppRequest(
            namespace=k.namespace, app=k.app, programs=[spb.ProgramSpec(name=k.program, entry_point="prog.py")],
            schedules=[schedule(k)]),
        "/sluice.v1.ScheduleRegistry/GetSchedule": spb.GetScheduleRequest(id=k.schedule_id),
        "/sluice.v1.ScheduleRegistry/ListSchedules": spb.ListSchedulesRequest(namespace=k.namespace, app=k.app),
        "/sluice.v1.ScheduleRegistry/DeleteSchedule": spb.DeleteScheduleRequest(id=k.schedule_id),
        "/sluice.v1.ScheduleRegistry/EnableSchedule": spb.EnableScheduleRequest(id=k.schedule_id),
        "/sluice.v1.ScheduleRegistry/DisableSchedule": spb.DisableScheduleRequest(id=k.schedule_id),
        "/sluice.v1.ScheduleRegistry/GetApp": spb.GetAppRequest(namespace=k.namespace, app=k.app),
        "/sluice.v1.ScheduleRegistry/ListApps": spb.ListAppsRequest(namespace=k.namespace, page_size=10),
        # another namespace: a pause of the fuzzed one would stop the job the final check expects
        "/sluice.v1.ScheduleRegistry/PauseApp": spb.PauseAppRequest(namespace="fuzz_paused", app=k.app),
        "/sluice.v1.ScheduleRegistry/ResumeApp": spb.PauseAppRequest(namespace="fuzz_paused", app=k.app),
        "/sluice.v1.ScheduleRegistry/DeleteApp": spb.DeleteAppRequest(namespace="fuzz_paused", app=k.app),
        "/sluice.v1.Notifications/Publish": npb.PublishNotificationRequest(notification=notification(k)),
        "/sluice.v1.Jobs/ListJobs": jobs_pb2.ListJobsRequest(schedule_id=k.schedule_id),
        "/sluice.v1.Runs/ListRuns": runs_pb2.ListRunsRequest(schedule_id=k.schedule_id, page_size=10),
        "/sluice.v1.Runs/GetRun": runs_pb2.GetRunRequest(id=k.run_id),
        "/sluice.v1.Partitions/CreateDataset": dpb.CreateDatasetRequest(dataset=ds),
        "/sluice.v1.Partitions/GetDataset": dpb.GetDatasetRequest(namespace=k.namespace, name=k.dataset),
        "/sluice.v1.Partitions/ListDatasets": dpb.ListDatasetsRequest(namespace=k.namespace),
        "/sluice.v1.Partitions/AddPartitions": dpb.AddPartitionsRequest(namespace=k.namespace, dataset=k.dataset,
                                                                         partitions=[partition(k)], owner="fuzz"),
        "/sluice.v1.Partitions/BeginTransaction": dpb.BeginTransactionRequest(namespace=k.namespace,
                                                                               dataset=k.dataset, owner="fuzz"),
        "/sluice.v1.Partitions/CommitTransaction": dpb.CommitTransactionRequest(
            namespace=k.namespace, dataset=k.dataset, position=1, partitions=[partition(k)]),
        "/sluice.v1.Partitions/AbortTransaction": dpb.AbortTransactionRequest(namespace=k.namespace,
                                                                               dataset=k.dataset, position=1),
        "/sluice.v1.Partitions/ListPartitions": dpb.ListPartitionsRequest(namespace=k.namespace, dataset=k.dataset,
                                                                           limit=10),
        "/sluice.v1.Partitions/Consume": dpb.ConsumeRequest(namespace=k.namespace, dataset=k.dataset,
                                                            consumer="c1", taker="t1", limit=5),
        "/sluice.v1.Partitions/FinishPartitions": dpb.FinishPartitionsRequest(
            namespace=k.namespace, dataset=k.dataset, consumer="c1", taker="t1", ids=["1.0"],
            outcome=dpb.FINISH_COMPLETE),
        "/sluice.v1.Partitions/GetConsumer": dpb.GetConsumerRequest(namespace=k.namespace, dataset=k.dataset,
                                                                    consumer="c1"),
        "/sluice.v1.Partitions/ConsumeWithState": dpb.ConsumeWithStateRequest(taker="t1", limit=5),
        "/sluice.v1.Partitions/ListCommitSequences": dpb.ListCommitSequencesRequest(),
        "/sluice.v1.Partitions/ReleaseCommitSequence": dpb.ReleaseCommitSequenceRequest(id=k.sequence_id or "x"),
        "/sluice.v1.Lineage/RecordEvent": lineage_pb2.RecordLineageEventRequest(event=lineage_event(k)),
        "/sluice.v1.Lineage/GetJob": lineage_pb2.GetLineageJobRequest(namespace=k.namespace, name=k.lineage_job),
        "/sluice.v1.Lineage/GetLineage": lineage_pb2.GetLineageRequest(node_id=f"job:{k.namespace}:{k.lineage_job}",
                                                                       depth=5),
        "/sluice.v1.Lineage/ListJobs": lineage_pb2.ListLineageJobsRequest(namespace=k.namespace, page_size=10),
        "/sluice.v1.Lineage/ListRuns": lineage_pb2.ListLineageRunsRequest(),
        # bus messages
        "sluice.v1.Notification": notification(k),
        "sluice.v1.ScheduleChanged": spb.ScheduleChanged(schedule_id=k.schedule_id or "s-1",
                                                         schedule=schedule(k)),
        "sluice.v1.JobTriggered": jobs_pb2.JobTriggered(job=job),
        "sluice.v1.LaunchRequested": jobs_pb2.LaunchRequested(job=job),
    }
