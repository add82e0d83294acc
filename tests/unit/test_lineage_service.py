"""Lineage service over a real (in-memory SQLite) event log, and its gRPC servicer."""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import grpc
import pytest
from openlineage.client.event_v2 import Job, OutputDataset, Run, RunEvent, RunState
from openlineage.client.facet_v2 import parent_run
from openlineage.client.serde import Serde

from sluice.clock import SimulatedClock
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.runtime.errors import MalformedMessage
from sluice.v1 import lineage_pb2, lineage_pb2_grpc
from sluice_services.lineage.grpc_api import LineageServicer
from sluice_services.lineage.service import EVENT_TYPE, LineageService

T0 = datetime(2026, 3, 1, 10, 0, tzinfo=timezone.utc)
NS = "sluice"
SCHEDULE = "clickstream.hourly_metrics_on_arrival"
CHILD = f"{SCHEDULE}.hourly_metrics"
S = "0195499e-1a00-7000-8000-000000000001"
P1 = "0195499e-1a00-7000-8000-000000000011"
P2 = "0195499e-1a00-7000-8000-000000000012"


def message(run_id, event_type, seconds, job_name, parent=None, outputs=()) -> bytes:
    facets = {}
    if parent:
        facets["parent"] = parent_run.ParentRunFacet(
            run=parent_run.Run(runId=parent), job=parent_run.Job(namespace=NS, name=SCHEDULE))
    return Serde.to_json(RunEvent(
        eventType=event_type,
        eventTime=(T0 + timedelta(seconds=seconds)).isoformat(),
        run=Run(runId=run_id, facets=facets),
        job=Job(namespace=NS, name=job_name),
        producer="https://github.com/example/sluice",
        outputs=[OutputDataset(namespace="s3://lake", name=n) for n in outputs],
    )).encode()


MESSAGES = [
    message(P1, RunState.START, 5, "hourly_metrics", parent=S),          # the child arrives first
    message(S, RunState.START, 0, SCHEDULE),
    message(P1, RunState.COMPLETE, 60, "hourly_metrics", parent=S, outputs=["metrics/hourly"]),
    message(P2, RunState.START, 6, "hourly_metrics", parent=S),
    message(P2, RunState.FAIL, 70, "hourly_metrics", parent=S),
    message(S, RunState.COMPLETE, 100, SCHEDULE),
]


@pytest.fixture
def log():
    log = SqliteEventLog(":memory:", clock=SimulatedClock(T0))
    yield log
    log.close()


@pytest.fixture
def service(log):
    service = LineageService(log, SimulatedClock(T0))
    for value in MESSAGES:
        service.handle_message(value)
    return service


def test_handle_message_records_each_event_in_its_run_stream(log, service):
    stream = log.read_stream(f"lineage-run-{P1}")
    assert [e.type for e in stream] == [EVENT_TYPE, EVENT_TYPE]
    assert json.loads(stream[0].data) == json.loads(MESSAGES[0])              # the event as received
    assert stream[0].metadata["event_type"] == "START"
    assert log.head_position() == len(MESSAGES)
    assert service.state.runs[P1].job_name == CHILD
    assert service.state.runs[S].state == "COMPLETE" and service.state.runs[P2].state == "FAIL"


def test_rebuild_from_the_log_gives_the_same_state(log, service):
    fresh = LineageService(log, SimulatedClock(T0))
    fresh.rebuild()
    assert fresh.state == service.state
    service.rebuild()
    assert (service.state.jobs, service.state.runs) == (fresh.state.jobs, fresh.state.runs)


def test_a_duplicate_delivery_appends_nothing(log, service):
    before = (log.head_position(), service.state)
    service.handle_message(MESSAGES[2])
    respelled = MESSAGES[2].replace(b'T10:01:00+00:00"', b'T12:01:00+02:00"')   # the same instant
    assert respelled != MESSAGES[2]
    service.handle_message(respelled)
    assert (log.head_position(), service.state) == before


def test_a_duplicate_is_recognised_by_the_log_before_any_rebuild(log, service):
    unbuilt = LineageService(log, SimulatedClock(T0))
    unbuilt.handle_message(MESSAGES[0])
    assert log.head_position() == len(MESSAGES)


@pytest.mark.parametrize(
    "value, reason",
    [
        (b"\xff\xfe not utf-8", "not UTF-8"),
        (b"{not json", "not JSON"),
        (b"[" * 100_000, "nested too deeply"),
        (b"[1, 2]", "event"),
        (json.dumps({**json.loads(MESSAGES[1]), "run": {"runId": "nope"}}).encode(), "run.runId"),
        (json.dumps({**json.loads(MESSAGES[1]), "job": {"namespace": NS, "name": ""}}).encode(), "job.name"),
        (json.dumps({**json.loads(MESSAGES[1]), "eventTime": "soon"}).encode(), "eventTime"),
    ],
)
def test_a_malformed_message_raises_and_appends_nothing(log, service, value, reason):
    before = (log.head_position(), service.state)
    with pytest.raises(MalformedMessage, match=reason):
        service.handle_message(value)
    assert (log.head_position(), service.state) == before


async def test_servicer_lists_jobs_and_runs(service):
    servicer = LineageServicer(service)

    jobs = await servicer.ListJobs(lineage_pb2.ListLineageJobsRequest(), None)
    assert list(jobs.jobs) == [
        lineage_pb2.LineageJob(namespace=NS, name=SCHEDULE, simple_name=SCHEDULE),
        lineage_pb2.LineageJob(namespace=NS, name=CHILD, simple_name="hourly_metrics", parent_job_name=SCHEDULE),
    ]
    assert not (await servicer.ListJobs(lineage_pb2.ListLineageJobsRequest(namespace="other"), None)).jobs

    runs = await servicer.ListRuns(lineage_pb2.ListLineageRunsRequest(job_namespace=NS, job_name=CHILD), None)
    assert [(r.run_id, r.state, r.parent_run_id) for r in runs.runs] == [(P1, "COMPLETE", S), (P2, "FAIL", S)]
    p1 = runs.runs[0]
    assert p1.job_name == CHILD and list(p1.outputs) == ["s3://lake/metrics/hourly"] and not p1.inputs
    assert p1.started_at.ToDatetime(tzinfo=timezone.utc) == T0 + timedelta(seconds=5)
    assert p1.ended_at.ToDatetime(tzinfo=timezone.utc) == T0 + timedelta(seconds=60)

    children = await servicer.ListRuns(lineage_pb2.ListLineageRunsRequest(parent_run_id=S), None)
    assert [r.run_id for r in children.runs] == [P1, P2]
    unknown = await servicer.ListRuns(lineage_pb2.ListLineageRunsRequest(job_namespace=NS, job_name="nope"), None)
    assert not unknown.runs


async def test_placeholder_parent_run_has_no_timestamps(log):
    service = LineageService(log, SimulatedClock(T0))
    service.handle_message(MESSAGES[0])
    runs = await LineageServicer(service).ListRuns(lineage_pb2.ListLineageRunsRequest(job_name=SCHEDULE), None)
    (placeholder,) = runs.runs
    assert placeholder.run_id == S and placeholder.state == "UNKNOWN"
    assert not placeholder.HasField("started_at") and not placeholder.HasField("ended_at")


async def test_servicer_over_a_real_grpc_server(service):
    server = grpc.aio.server()
    lineage_pb2_grpc.add_LineageServicer_to_server(LineageServicer(service), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = lineage_pb2_grpc.LineageStub(channel)
            jobs = await stub.ListJobs(lineage_pb2.ListLineageJobsRequest(namespace=NS), timeout=5)
            runs = await stub.ListRuns(lineage_pb2.ListLineageRunsRequest(parent_run_id=S), timeout=5)
    finally:
        await server.stop(None)
    assert [j.name for j in jobs.jobs] == [SCHEDULE, CHILD]
    assert [(r.run_id, r.state) for r in runs.runs] == [(P1, "COMPLETE"), (P2, "FAIL")]


def test_the_hourly_clickstream_runs_of_three_marketplaces_are_one_job_graph_with_their_partitions(log, service):
    """Seed 002's experiment-metrics example: one schedule runs the program once per marketplace;
    lineage shows one job hierarchy, each run with the partitions it read and wrote."""
    from datetime import datetime, timedelta, timezone

    from openlineage.client.event_v2 import RunState

    from sluice.domain.common import PartitionRef, ProgramRef, RunStatus
    from sluice.domain.jobs import Job, TriggerContext
    from sluice.domain.runs import InputPartition, OutputPartition, Run
    from sluice_services.launcher import lineage_events

    t0 = datetime(2026, 11, 22, 9, tzinfo=timezone.utc)
    program = ProgramRef("experiments", "clickstream", "hourly_metrics")
    for index, marketplace in enumerate(("US", "UK", "JP")):
        key = {"marketplace": marketplace, "date": "2026-11-22", "hour": "9"}
        job = Job(f"00000000-0000-4000-8000-00000000000{index}", "s", 1, program,
                  TriggerContext("s", "hourly_metrics_on_arrival"), t0)
        run = Run(f"10000000-0000-4000-8000-00000000000{index}", job, RunStatus.COMPLETED, t0,
                  inputs=(InputPartition("experiments", "clickstream", PartitionRef(key, f"/in/{marketplace}")),),
                  outputs=(OutputPartition("experiments", "hourly_metrics", PartitionRef(key, f"/out/{marketplace}")),))
        for message in [*lineage_events.run_ended(run, RunState.COMPLETE, t0 + timedelta(minutes=5 + index)),
                        *lineage_events.run_started(run, t0 + timedelta(minutes=index))]:  # end before start
            service.handle_message(message)
    jobs = service.state.jobs
    assert sorted(name for namespace, name in jobs if namespace == "experiments") == ["clickstream.hourly_metrics_on_arrival",
                                                "clickstream.hourly_metrics_on_arrival.hourly_metrics"]
    program_runs = [r for r in service.state.runs.values()
                    if r.job_namespace == "experiments" and r.job_name.endswith(".hourly_metrics")]
    assert len(program_runs) == 3 and {r.state for r in program_runs} == {"COMPLETE"}
    assert {r.parent_run_id for r in program_runs} == {f"00000000-0000-4000-8000-00000000000{i}" for i in range(3)}
    from sluice.domain.lineage import dataset_key

    clickstream, hourly = dataset_key("experiments", "clickstream"), dataset_key("experiments", "hourly_metrics")
    assert sorted(p for r in program_runs for p in r.partitions if p[0] == clickstream) == [
        (clickstream, (("date", "2026-11-22"), ("hour", "9"), ("marketplace", m))) for m in ("JP", "UK", "US")]
    assert all(any(p[0] == hourly for p in r.partitions) for r in program_runs)


def test_recovery_from_a_snapshot_folds_only_the_log_after_it(log, service):
    assert service.save_snapshot()
    snapshot_position = log.read_snapshot("lineage").position
    later = json.loads(MESSAGES[0])
    later["run"]["runId"] = "01000000-0000-7000-8000-0000000000aa"
    service.handle_message(json.dumps(later).encode())      # recorded after the snapshot
    recovered = LineageService(log, SimulatedClock(T0))
    recovered.recover()
    assert recovered.state == service.state
    assert later["run"]["runId"] in recovered.state.runs
    assert log.read_snapshot("lineage").position == snapshot_position   # a short tail writes no new one
    rebuilt = LineageService(log, SimulatedClock(T0))
    rebuilt.rebuild()
    assert rebuilt.state == recovered.state
    assert log.read_snapshot("lineage").position == log.head_position()


def test_a_snapshot_whose_columns_disagree_is_ignored_and_the_log_folded(log, service):
    import dataclasses

    from sluice.runtime.snapshots import Schema, Snapshots
    from sluice_services.lineage.service import SNAPSHOT_VERSION
    from sluice_services.lineage.snapshot import LineageColumns, columns

    saved = columns(service.state.facts)
    damaged = dataclasses.replace(saved, counts=saved.counts[:-4])   # one integer fewer than 5 per run
    assert Snapshots(log, "lineage", Schema(LineageColumns, SNAPSHOT_VERSION)).save(log.head_position(), damaged)
    recovered = LineageService(log, SimulatedClock(T0))
    recovered.recover()
    assert recovered.state == service.state


def test_a_snapshot_is_written_every_snapshot_every_events(log, monkeypatch):
    from sluice_services.lineage import service as lineage_service

    monkeypatch.setattr(lineage_service, "SNAPSHOT_EVERY", 2)
    service = LineageService(log, SimulatedClock(T0))
    service.handle_message(MESSAGES[0])
    assert log.read_snapshot("lineage") is None
    for value in MESSAGES[1:]:
        service.handle_message(value)
    snapshot = log.read_snapshot("lineage")
    assert snapshot is not None and snapshot.position > 0


def test_a_recovery_that_read_past_many_other_events_snapshots_where_it_reached(log, monkeypatch):
    from sluice.eventlog.port import ANY_VERSION, NewEvent
    from sluice_services.lineage import service as lineage_service

    monkeypatch.setattr(lineage_service, "LONG_READ", 3)
    monkeypatch.setattr(lineage_service, "_READ_BATCH", 2)
    for number in range(5):  # other services' events only: none is lineage's
        log.append(f"run-{number}", [NewEvent(f"other-{number}", "RunRequested", b"{}")], ANY_VERSION)
    service = LineageService(log, SimulatedClock(T0))
    service.recover()
    assert log.read_snapshot("lineage").position == log.head_position()
    service.handle_message(MESSAGES[0])
    recovered = LineageService(log, SimulatedClock(T0))
    recovered.recover()
    assert recovered.state == service.state and recovered.state.runs
