"""Seed 004's seven user stories, through the datasets service's Partitions gRPC service on loopback, as a
client outside any program would use it (a worker, a script): datasets on a SQLite log, the
outbox publishing to the in-process bus. Plus bad input: each a clear error, nothing changed."""
from __future__ import annotations

import asyncio
import json
from datetime import timedelta

import grpc
import pytest

from sluice.bus.inprocess import InProcessBus
from sluice.bus.topics import PARTITION_NOTIFICATIONS
from sluice.clock import SimulatedClock
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.runtime.service import ServiceSpec, run_services
from sluice.v1 import datasets_pb2 as pb
from sluice.v1 import datasets_pb2_grpc
from sluice.v1 import notifications_pb2 as npb
from sluice.wire.common import timestamp_to_proto
from sluice_services.datasets import grpc_api as datasets_grpc
from sluice_services.datasets.service import DatasetsService

pytestmark = pytest.mark.integration

NS, DS = "experiments", "clickstream"


class Client:
    def __init__(self, stub: datasets_pb2_grpc.PartitionsStub, clock: SimulatedClock, log: SqliteEventLog,
                 bus: InProcessBus) -> None:
        self.stub, self.clock, self.log, self.bus = stub, clock, log, bus

    async def add(self, *hours: int, marketplace: str = "US", **metadata: str) -> int:
        response = await self.stub.AddPartitions(pb.AddPartitionsRequest(
            namespace=NS, dataset=DS, partitions=[partition(marketplace, h, **metadata) for h in hours], owner="test"))
        return response.position

    async def consume(self, taker: str, limit: int = 100, consumer: str = "hourly", **fields) -> list[str]:
        response = await self.stub.Consume(pb.ConsumeRequest(namespace=NS, dataset=DS, consumer=consumer, taker=taker,
                                                             limit=limit, **fields))
        return [f"{p.partition.key[0].value}/{p.partition.key[2].value}" for p in response.partitions]

    async def consume_ids(self, taker: str, limit: int = 100, consumer: str = "hourly", **fields) -> list[str]:
        response = await self.stub.Consume(pb.ConsumeRequest(namespace=NS, dataset=DS, consumer=consumer, taker=taker,
                                                             limit=limit, **fields))
        return [p.id for p in response.partitions]

    async def finish(self, taker: str, ids: list[str], outcome=pb.FINISH_COMPLETE, consumer: str = "hourly"):
        return await self.stub.FinishPartitions(pb.FinishPartitionsRequest(
            namespace=NS, dataset=DS, consumer=consumer, taker=taker, ids=ids, outcome=outcome))


def partition(marketplace: str, hour: int, **metadata: str) -> npb.PartitionRef:
    return npb.PartitionRef(key=[npb.KeyValue(name="marketplace", value=marketplace),
                                 npb.KeyValue(name="date", value="2026-11-22"),
                                 npb.KeyValue(name="hour", value=str(hour))],
                            location=f"/data/{marketplace}/{hour}", size_bytes=1000 * hour, record_count=hour,
                            metadata=metadata)


@pytest.fixture
async def client(tmp_path):
    clock = SimulatedClock()
    log = SqliteEventLog(tmp_path / "events.db", clock=clock)
    bus = InProcessBus()
    service = DatasetsService(log, clock)
    spec = ServiceSpec("datasets", route=service.route, grpc=datasets_grpc.bindings(service), recover=service.recover)
    ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    stop = asyncio.Event()
    task = asyncio.create_task(run_services([spec], bus, log, on_ready=ready.set_result, stop=stop))
    port = await asyncio.wait_for(ready, 10)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    stub = datasets_pb2_grpc.PartitionsStub(channel)
    await stub.CreateDataset(pb.CreateDatasetRequest(dataset=pb.Dataset(
        namespace=NS, name=DS, base_location="/data", description="clicks by marketplace and local hour",
        partition_keys=[pb.PartitionKey(name="marketplace", type=pb.KEY_TYPE_STRING),
                        pb.PartitionKey(name="date", type=pb.KEY_TYPE_DATE),
                        pb.PartitionKey(name="hour", type=pb.KEY_TYPE_INT)])))
    yield Client(stub, clock, log, bus)
    await channel.close()
    stop.set()
    await task
    log.close()


async def test_story_1_a_workflow_processes_the_new_partitions_each_run(client: Client):
    await client.add(1, 2)
    late = await client.stub.BeginTransaction(pb.BeginTransactionRequest(namespace=NS, dataset=DS, owner="slow"))
    await client.add(3)
    first = await client.consume_ids("run-1")
    assert len(first) == 3
    await client.finish("run-1", first)
    await client.stub.CommitTransaction(pb.CommitTransactionRequest(namespace=NS, dataset=DS, position=late.position,
                                                                    partitions=[partition("US", 0)]))
    await client.add(4)
    assert await client.consume("run-2") == ["US/0", "US/4"]   # the late commit is not skipped
    assert await client.consume("run-3") == []


async def test_one_notification_per_transaction_through_the_outbox(client: Client):
    await client.add(1, 2, 3)
    await client.add(4)
    consumer = client.bus.consumer("probe", [PARTITION_NOTIFICATIONS])
    records = []
    for _ in range(50):
        records += await consumer.poll(timeout=0.2)
        if len(records) >= 2:
            break
    assert [r.key for r in records] == [b"partition:experiments.clickstream"] * 2
    notification = npb.Notification.FromString(records[0].value)
    assert [p.key[2].value for p in notification.partition_committed.partitions] == ["1", "2", "3"]


async def test_story_2_a_limit_per_run(client: Client):
    await client.add(*range(1, 8))
    assert await client.consume("run-1", limit=3) == ["US/1", "US/2", "US/3"]
    assert await client.consume("run-2", limit=3) == ["US/4", "US/5", "US/6"]


async def test_story_3_a_partition_filter(client: Client):
    await client.add(8, 9, 10, marketplace="US")
    await client.add(8, 9, 10, marketplace="JP", quality="ok")
    only_jp = pb.ConsumerConfig(where=pb.PartitionFilter(keys=[pb.KeyCondition(name="marketplace", one_of=["JP"])]))
    assert await client.consume("run-1", config=only_jp, limit=1) == ["JP/8"]
    morning = pb.PartitionFilter(keys=[pb.KeyCondition(name="hour", lower="9", upper="10")],
                                 metadata=[pb.MetadataCondition(name="quality", one_of=["ok"])])
    assert await client.consume("run-2", where=morning) == ["JP/9"]     # this call takes only these
    assert await client.consume("run-3") == ["JP/10"]                   # the US ones are left out entirely


async def test_story_4_several_instances_each_take_their_own_partitions(client: Client):
    await client.add(*range(12))
    taken = await asyncio.gather(*(client.consume_ids(f"instance-{n}", limit=3) for n in range(4)))
    flat = [i for ids in taken for i in ids]
    assert sorted(flat) == sorted(set(flat)) and len(flat) == 12


async def test_story_5_failed_partitions_are_retried_a_configured_number_of_times(client: Client):
    await client.add(1)
    config = pb.ConsumerConfig(max_retries=2)
    for attempt in range(3):
        ids = await client.consume_ids(f"run-{attempt}", config=config)
        assert len(ids) == 1
        await client.finish(f"run-{attempt}", ids, pb.FINISH_FAIL)
    assert await client.consume_ids("run-9") == []
    state = json.loads((await client.stub.GetConsumer(pb.GetConsumerRequest(namespace=NS, dataset=DS,
                                                                            consumer="hourly"))).json)
    assert state["history"][-1]["outcome"] == "DISCARDED" and state["working_set"] == []


async def test_story_5_a_partition_in_progress_too_long_counts_as_failed(client: Client):
    await client.add(1)
    config = pb.ConsumerConfig(timeout_seconds=60, max_retries=1)
    assert await client.consume("stuck", config=config) == ["US/1"]
    client.clock.advance(timedelta(seconds=61))
    response = await client.stub.Consume(pb.ConsumeRequest(namespace=NS, dataset=DS, consumer="hourly",
                                                           taker="rescuer", limit=5))
    assert [p.failures for p in response.partitions] == [1]


async def test_story_6_start_and_end_in_time(client: Client):
    for hour in range(5):
        await client.add(hour)
        client.clock.advance(timedelta(hours=1))
    start = client.clock.now() - timedelta(hours=4)   # the second partition's commit time
    config = pb.ConsumerConfig(start=timestamp_to_proto(start), end=timestamp_to_proto(start + timedelta(hours=2)))
    assert await client.consume("run-1", config=config) == ["US/1", "US/2"]


async def test_story_7_query_partitions_outside_of_any_program(client: Client):
    await client.add(6, 7, 8, marketplace="US")
    client.clock.advance(timedelta(minutes=30))
    await client.add(9, 10, marketplace="JP")
    described = await client.stub.GetDataset(pb.GetDatasetRequest(namespace=NS, name=DS))
    assert described.next_position == 2 and [k.name for k in described.partition_keys] == ["marketplace", "date",
                                                                                            "hour"]
    hours = pb.PartitionFilter(keys=[pb.KeyCondition(name="hour", lower="7", upper="10")])
    found = await client.stub.ListPartitions(pb.ListPartitionsRequest(namespace=NS, dataset=DS, where=hours))
    assert [p.id for p in found.partitions] == ["0.1", "0.2", "1.0"]
    recent = await client.stub.ListPartitions(pb.ListPartitionsRequest(
        namespace=NS, dataset=DS, committed_after=timestamp_to_proto(client.clock.now())))
    assert [p.partition.key[0].value for p in recent.partitions] == ["JP", "JP"]
    page = await client.stub.ListPartitions(pb.ListPartitionsRequest(namespace=NS, dataset=DS, limit=4))
    rest = await client.stub.ListPartitions(pb.ListPartitionsRequest(namespace=NS, dataset=DS, after=page.next_after))
    assert len(page.partitions) == 4 and [p.id for p in rest.partitions] == ["1.1"] and rest.next_after == ""
    # a worker that keeps its own consumer state (seed 003's stateless consumer), starting from a copy
    await client.consume_ids("seed", consumer="worker", limit=1)
    kept = (await client.stub.GetConsumer(pb.GetConsumerRequest(namespace=NS, dataset=DS, consumer="worker"))).state
    head = client.log.head_position()
    response = await client.stub.ConsumeWithState(pb.ConsumeWithStateRequest(consumer_state=kept, taker="w", limit=10))
    assert len(response.partitions) == 4 and response.consumer_state != kept
    assert client.log.head_position() == head   # nothing stored: the worker keeps the state


@pytest.mark.parametrize("call, code, text", [
    (lambda s: s.GetDataset(pb.GetDatasetRequest(namespace=NS, name="nope")), grpc.StatusCode.NOT_FOUND,
     "dataset experiments.nope does not exist"),
    (lambda s: s.Consume(pb.ConsumeRequest(namespace=NS, dataset="nope", consumer="c", taker="t", limit=1)),
     grpc.StatusCode.NOT_FOUND, "dataset experiments.nope does not exist"),
    (lambda s: s.AddPartitions(pb.AddPartitionsRequest(namespace=NS, dataset=DS, partitions=[npb.PartitionRef(
        key=[npb.KeyValue(name="marketplace", value="US"), npb.KeyValue(name="date", value="2026-11-22")],
        location="/x")])), grpc.StatusCode.INVALID_ARGUMENT, "partitions[0].key.hour: missing"),
    (lambda s: s.AddPartitions(pb.AddPartitionsRequest(namespace=NS, dataset=DS, partitions=[npb.PartitionRef(
        key=[npb.KeyValue(name="marketplace", value="US"), npb.KeyValue(name="date", value="2026-11-22"),
             npb.KeyValue(name="hour", value="noon")], location="/x")])),
     grpc.StatusCode.INVALID_ARGUMENT, "partitions[0].key.hour: must be an INT"),
    (lambda s: s.Consume(pb.ConsumeRequest(namespace=NS, dataset=DS, consumer="c", taker="t", limit=0)),
     grpc.StatusCode.INVALID_ARGUMENT, "limit: must be at least 1"),
    (lambda s: s.ConsumeWithState(pb.ConsumeWithStateRequest(consumer_state=b"SLCS\x01garbage", taker="t", limit=1)),
     grpc.StatusCode.INVALID_ARGUMENT, "consumer_state: consumer state: corrupt"),
    (lambda s: s.CreateDataset(pb.CreateDatasetRequest(dataset=pb.Dataset(
        namespace=NS, name="bad", base_location="/b", partition_keys=[pb.PartitionKey(name="hour")]))),
     grpc.StatusCode.INVALID_ARGUMENT, "dataset.partition_keys[0].type"),
    (lambda s: s.FinishPartitions(pb.FinishPartitionsRequest(namespace=NS, dataset=DS, consumer="hourly", taker="t",
                                                             ids=["seven"], outcome=pb.FINISH_COMPLETE)),
     grpc.StatusCode.INVALID_ARGUMENT, "ids[0]: a partition id is POSITION.INDEX"),
])
async def test_bad_input_is_one_clear_error_and_changes_nothing(client: Client, call, code, text):
    await client.add(1)
    head = client.log.head_position()
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await call(client.stub)
    assert error.value.code() == code and text in error.value.details(), error.value.details()
    assert client.log.head_position() == head
