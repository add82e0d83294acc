"""The Kafka adapter of the bus port (distributed mode), on aiokafka.

Decisions:
- The aiokafka clients start inside the running event loop: producer() and consumer() are
  synchronous in the port, so a producer starts at its first send, and a consumer starts joining
  its group at once when a loop is running (else at its first poll or commit). One bus serves one loop.
- create_topics uses the admin client: an existing topic is left as it is (TOPIC_ALREADY_EXISTS is
  not an error), a compacted one gets cleanup.policy=compact. It returns once every topic is in
  the broker's metadata, so a send right after it finds the topic.
- Replication: `replication_factor` replicas per topic (default 1: a single development broker) and,
  when given, the topic config min.insync.replicas (else the broker's); the dead-letter topic gets
  retention.ms=`dead_letter_retention_ms` (default -1: parked messages never expire). All three come
  from the bus URL (`?replication_factor=3&min_insync_replicas=2`). An existing topic keeps its
  settings; one with another replication factor than asked is logged as a warning (changing it is a
  partition reassignment, an operator's job).
- Producers: acks=all with idempotence, so a send returns (partition, offset) once the record is
  on every in-sync replica and a retried batch is never written twice. With fewer in-sync replicas
  than min.insync.replicas the broker refuses the write (NotEnoughReplicas, retried by aiokafka): the
  send fails or waits, it is never acknowledged by fewer replicas. The idempotent producer retries
  until the write is acknowledged (no batch expires), and a record waits for room in the producer's
  batches however long they stay full (aiokafka gives up after request_timeout_ms); a send still waiting after
  `unacknowledged_warning_after` seconds logs a warning saying so, and again each such period. Records go
  to the partition Kafka's default partitioner picks (murmur2 of the key), computed by kafka_partition,
  which caches it: the keys recur (schedule ids, datasets), and aiokafka's own murmur2 hashed each record
  again in Python; keyless records go to a random partition.
  A topic the broker does not know raises UnknownTopic at once (one metadata request that does not
  auto-create) instead of aiokafka's wait of request_timeout_ms for it to appear.
- Consumers: the classic group protocol with the range assignor (the one the in-process bus uses),
  enable_auto_commit=False, auto_offset_reset="earliest". The subscription is made after start, so
  a topic created later joins the assignment at the next metadata refresh (metadata_max_age_ms).
  Heartbeats every `heartbeat_interval_ms` let members notice a rebalance quickly. The broker holds a
  fetch at most `fetch_max_wait_ms` (100, not aiokafka's 500): aiokafka fetches a partition again only
  once its records are polled, and after a poll's records wait 100 ms unpolled it fetches the member's
  other partitions without them; when those are idle topics (a service follows several, most quiet),
  the busy partitions, once polled, waited for that idle fetch to come back empty: up to 500 ms.
- Commit errors (a partition not assigned, a group that rebalanced meanwhile) raise CommitFailed.
- Security (TLS, SASL) comes from the bus URL (`KafkaBus.from_url`, sluice.bus.kafka_security) and
  goes to every client the bus creates: producers, consumers and the admin client alike. A client that
  cannot bootstrap raises KafkaUnreachable (a ConnectionError) with the first broker's real reason (a
  refused login, a TLS failure, a listener of another protocol) instead of aiokafka's bare
  "Unable to bootstrap".
"""
from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as KafkaTopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.errors import (
    CommitFailedError,
    KafkaConnectionError,
    ConsumerStoppedError,
    IllegalStateError,
    KafkaError,
    KafkaTimeoutError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
    for_code,
)
from aiokafka.protocol.metadata import MetadataRequest

from sluice.bus.kafka_security import KafkaSecurity, KafkaUnreachable, diagnose, parse_kafka_url
from sluice.bus.port import CommitFailed, Message, Record, TopicPartition, TopicSpec, UnknownTopic, kafka_partition
from sluice.bus.topics import DEAD_LETTER

__all__ = ["KafkaBus", "KafkaConsumer", "KafkaProducer", "KafkaSecurity", "KafkaUnreachable"]

log = logging.getLogger(__name__)


class KafkaBus:
    """The Bus port over a Kafka cluster; see the module docstring for the decisions it makes."""

    def __init__(
        self,
        bootstrap: str,
        *,
        client_id: str = "sluice",
        replication_factor: int = 1,
        min_insync_replicas: int | None = None,
        dead_letter_retention_ms: int = -1,
        heartbeat_interval_ms: int = 1000,
        session_timeout_ms: int = 10_000,
        fetch_max_wait_ms: int = 100,
        metadata_max_age_ms: int = 30_000,
        topic_ready_timeout: float = 30.0,
        unacknowledged_warning_after: float = 10.0,
        security: KafkaSecurity | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        self.security = security or KafkaSecurity()
        self.client_id = client_id
        self.replication_factor = replication_factor
        self.min_insync_replicas = min_insync_replicas
        self.dead_letter_retention_ms = dead_letter_retention_ms
        self.topic_ready_timeout = topic_ready_timeout
        self.unacknowledged_warning_after = unacknowledged_warning_after
        self._consumer_options = dict(
            heartbeat_interval_ms=heartbeat_interval_ms,
            session_timeout_ms=session_timeout_ms,
            metadata_max_age_ms=metadata_max_age_ms,
            fetch_max_wait_ms=fetch_max_wait_ms,
        )
        self._admin: AIOKafkaAdminClient | None = None
        self._producers: list[KafkaProducer] = []
        self._consumers: list[KafkaConsumer] = []
        self._closed = False

    @classmethod
    def from_url(cls, url: str, env: Mapping[str, str] | None = None, **options: object) -> KafkaBus:
        """A bus for `kafka://[USER[:PASSWORD]@]HOST:PORT[,...][?security and topic options]` (see
        sluice.bus.kafka_security); ValueError naming the option that is wrong."""
        parsed = parse_kafka_url(url, env)
        return cls(parsed.bootstrap, security=parsed.security,  # type: ignore[arg-type]
                   **{**parsed.topics.bus_options(), **options})

    async def create_topics(self, topics: Sequence[TopicSpec]) -> None:
        self._check_open()
        if not topics:
            return
        admin = await self._admin_client()
        new = [NewTopic(spec.name, spec.partitions, self.replication_factor, topic_configs=self._configs(spec) or None)
               for spec in topics]
        response = await admin.create_topics(new)
        existing = set()
        for name, code, message in ((t[0], t[1], t[2] if len(t) > 2 else None) for t in response.topic_errors):
            if code == TopicAlreadyExistsError.errno:
                existing.add(name)
            elif code != 0:
                raise for_code(code)(f"creating topic {name!r} failed: {message or 'no message'}")
        await self._wait_visible(admin, [spec.name for spec in topics], existing)

    def producer(self) -> KafkaProducer:
        self._check_open()
        producer = KafkaProducer(self)
        self._producers.append(producer)
        return producer

    def consumer(self, group_id: str, topics: Sequence[str]) -> KafkaConsumer:
        self._check_open()
        consumer = KafkaConsumer(self, group_id, tuple(topics))
        self._consumers.append(consumer)
        return consumer

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for consumer in self._consumers:
            await consumer.close()
        for producer in self._producers:
            await producer.close()
        if self._admin is not None:
            await self._admin.close()

    # -- plumbing ------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the bus is closed")

    def _configs(self, spec: TopicSpec) -> dict[str, str]:
        configs = {}
        if spec.compacted:
            configs["cleanup.policy"] = "compact"
        if self.min_insync_replicas is not None:
            configs["min.insync.replicas"] = str(self.min_insync_replicas)
        if spec.name == DEAD_LETTER:
            configs["retention.ms"] = str(self.dead_letter_retention_ms)
        return configs

    async def _admin_client(self) -> AIOKafkaAdminClient:
        if self._admin is None:
            admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap, client_id=f"{self.client_id}-admin",
                                        **self.security.client_options())
            try:
                await self._start_client(admin)
            except BaseException:
                await admin.close()
                raise
            self._admin = admin
        return self._admin

    async def _start_client(self, client: AIOKafkaProducer | AIOKafkaConsumer | AIOKafkaAdminClient) -> None:
        try:
            await client.start()
        except KafkaConnectionError as error:
            if "Unable to bootstrap" not in str(error):
                raise
            raise await diagnose(self.bootstrap, self.security) from error

    async def _wait_visible(self, admin: AIOKafkaAdminClient, names: list[str], existing: set[str]) -> None:
        """Until every broker's metadata has every topic with a leader for each partition (brokers learn
        of a new topic one after the other, and a client may ask any of them); warns of an existing topic
        whose replication factor is not the one asked for."""
        deadline = time.monotonic() + self.topic_ready_timeout
        while True:
            answers = await _metadata_of_every_broker(admin, names)
            ready = set(names)
            for described in answers:
                ready &= {
                    t["topic"] for t in described
                    if t["error_code"] == 0 and t["partitions"] and all(p["leader"] >= 0 for p in t["partitions"])
                }
            if answers and ready >= set(names):
                described = answers[0]
                for topic in described:
                    replicas = {len(p["replicas"]) for p in topic["partitions"]}
                    if topic["topic"] in existing and replicas != {self.replication_factor}:
                        log.warning("topic %s exists with %s replicas, not replication_factor=%d: Kafka keeps an "
                                    "existing topic's replicas (reassign its partitions to change them)",
                                    topic["topic"], "/".join(map(str, sorted(replicas))), self.replication_factor)
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"topics {sorted(set(names) - ready)} not ready after {self.topic_ready_timeout}s")
            await asyncio.sleep(0.05)


async def _metadata_of_every_broker(admin: AIOKafkaAdminClient, names: list[str]) -> list[list[dict]]:
    """The topics' metadata as each broker the cluster lists sees it; a broker that does not answer
    (one just gone) is left out: it catches up with the controller when it is back."""
    client = admin._client
    await client.force_metadata_update()
    request = MetadataRequest(names, allow_auto_topic_creation=False)
    answers = []
    for broker in sorted(client.cluster.brokers(), key=lambda b: b.nodeId):
        try:
            response = await client.send(broker.nodeId, request)
        except KafkaError:
            continue
        answers.append(response.to_object()["topics"])
    return answers


class KafkaProducer:
    def __init__(self, bus: KafkaBus) -> None:
        self._bus = bus
        self._starting: asyncio.Task[AIOKafkaProducer] | None = None
        self._closed = False

    async def send(
        self, topic: str, value: bytes, *, key: bytes | None = None, headers: Sequence[tuple[str, bytes]] = ()
    ) -> tuple[int, int]:
        return (await self.send_batch([Message(topic, value, key, headers)]))[0]

    async def send_batch(self, messages: Sequence[Message]) -> list[tuple[int, int]]:
        """The records of a partition that has no batch queued in the producer go to it as one batch of
        their own (aiokafka's `create_batch`: one future and one acknowledgement callback per batch, where
        `send` makes and resolves them per record). The others (a lone record, a partition with a batch
        queued, what did not fit the batch) are appended with `send`, after it, to the queued batches:
        aiokafka's `send_batch` would first wait for a queued batch to drain, a round trip per batch, and
        gives up with KafkaTimeoutError when many senders wait, so concurrent sends must share batches.
        Then every record is awaited: they share the broker round trips, and idempotence keeps each
        partition's order."""
        if self._closed:
            raise RuntimeError("the producer is closed")
        producer = await self._started()
        choosers = {topic: await self._partition_chooser(producer, topic) for topic in {m.topic for m in messages}}
        by_partition: dict[tuple[str, int], list[int]] = {}
        for index, message in enumerate(messages):
            by_partition.setdefault((message.topic, choosers[message.topic](message.key)), []).append(index)
        waiting: list[tuple[asyncio.Future, list[int], int]] = []
        """(delivered, the records' indexes in `messages`, partition): the first record's metadata; the
        others' offsets follow it."""
        try:
            for (topic, partition), indexes in by_partition.items():
                if len(indexes) > 1 and not _queued(producer, topic, partition):
                    builder, fitting = producer.create_batch(), 0
                    for index in indexes:
                        message = messages[index]
                        if builder.append(timestamp=None, key=message.key, value=message.value,
                                          headers=_headers(message)) is None:
                            break
                        fitting += 1
                    # nothing queued for the partition: aiokafka queues the batch at once, without waiting
                    delivered = await producer.send_batch(builder, topic, partition=partition)
                    waiting.append((delivered, indexes[:fitting], partition))
                    indexes = indexes[fitting:]
                for index in indexes:
                    waiting.append((await self._queue(producer, topic, partition, messages[index]), [index], partition))
        except BaseException:
            for delivered, _, _ in waiting:  # queued records are sent all the same; nobody waits for them now
                delivered.cancel()
            raise
        acknowledged = asyncio.gather(*(delivered for delivered, _, _ in waiting))
        try:
            await self._acknowledged(acknowledged, messages)
        except asyncio.CancelledError:
            acknowledged.cancel()
            raise
        sent: list[tuple[int, int]] = [(-1, -1)] * len(messages)
        for (_, indexes, partition), metadata in zip(waiting, acknowledged.result()):
            for offset, index in enumerate(indexes):
                sent[index] = (partition, metadata.offset + offset)
        return sent

    @staticmethod
    async def _partition_chooser(producer: AIOKafkaProducer, topic: str) -> Callable[[bytes | None], int]:
        """The partition of a record of `topic` by its key, as `send` would pick it (`_partition_of`)."""
        cluster = producer.client.cluster
        if cluster.partitions_for_topic(topic) is None:
            await _require_topic(producer, topic)
        every = list(await producer.partitions_for(topic))
        available = list(cluster.available_partitions_for_topic(topic) or ())
        return lambda key: _partition_of(key, every, available)

    async def _queue(self, producer: AIOKafkaProducer, topic: str, partition: int, message: Message) -> asyncio.Future:
        """`send` into the partition's queued batches, again while it gives up: aiokafka raises KafkaTimeoutError
        when the partition's batches stayed full for request_timeout_ms (a send waiting behind many others for
        the batches to drain, on a slow broker or an overloaded machine), and nothing of the record was queued
        then. A warning each `unacknowledged_warning_after` seconds it waits."""
        started = warned = time.monotonic()
        while True:
            try:
                return await producer.send(topic, message.value, key=message.key, partition=partition,
                                           headers=_headers(message))
            except KafkaTimeoutError:
                if time.monotonic() - warned >= self._bus.unacknowledged_warning_after:
                    warned = time.monotonic()
                    log.warning("a record to %s[%d] waited %.0f s for room in the producer's batches (the broker "
                                "slow or unreachable?); still waiting, nothing was dropped", topic, partition,
                                warned - started)

    async def _acknowledged(self, acknowledged: asyncio.Future[list], messages: Sequence[Message]) -> None:
        """Until every record is acknowledged; a warning each `unacknowledged_warning_after` seconds it is not."""
        started = time.monotonic()
        while True:
            await asyncio.wait([acknowledged], timeout=self._bus.unacknowledged_warning_after)
            if acknowledged.done():
                return
            log.warning("%d record(s) to %s not acknowledged after %.0f s: acks=all waits for every in-sync replica "
                        "and a broker refuses writes while fewer than min.insync.replicas are in sync (brokers "
                        "down?); still retrying, nothing was acknowledged or dropped", len(messages),
                        ", ".join(sorted({m.topic for m in messages})), time.monotonic() - started)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._starting is not None:
            try:
                producer = await self._starting
            except Exception:
                return
            await producer.stop()

    async def _started(self) -> AIOKafkaProducer:
        if self._starting is None:
            self._starting = asyncio.ensure_future(self._start())
        return await asyncio.shield(self._starting)

    async def _start(self) -> AIOKafkaProducer:
        producer = AIOKafkaProducer(
            bootstrap_servers=self._bus.bootstrap, client_id=self._bus.client_id,
            acks="all", enable_idempotence=True, partitioner=_partition_of,
            **self._bus.security.client_options(),
        )
        try:
            await self._bus._start_client(producer)
        except BaseException:
            await producer.stop()
            raise
        return producer


def _queued(producer: AIOKafkaProducer, topic: str, partition: int) -> bool:
    """Whether the producer holds a batch of the partition not yet sent (its accumulator's queue)."""
    return bool(producer._message_accumulator._batches.get(KafkaTopicPartition(topic, partition)))


def _headers(message: Message) -> list[tuple[str, bytes]] | None:
    return [(name, bytes(value)) for name, value in message.headers] if message.headers else None


def _partition_of(key: bytes | None, all_partitions: list[int], available: list[int]) -> int:
    """aiokafka's DefaultPartitioner, with murmur2 of the key cached (kafka_partition)."""
    if key is None:
        return random.choice(available or all_partitions)
    return all_partitions[kafka_partition(bytes(key), len(all_partitions))]


async def _require_topic(producer: AIOKafkaProducer, topic: str) -> None:
    """UnknownTopic when the broker does not know `topic` (asking it does not create it)."""
    client = producer.client
    response = await client.send(client.get_random_node(), MetadataRequest([topic], allow_auto_topic_creation=False))
    for entry in response.to_object()["topics"]:
        if entry["topic"] == topic and entry["error_code"] == UnknownTopicOrPartitionError.errno:
            raise UnknownTopic(f"topic {topic!r} does not exist; create it with create_topics first")


class KafkaConsumer:
    """One member of a consumer group; the group coordinator assigns its partitions."""

    def __init__(self, bus: KafkaBus, group_id: str, topics: tuple[str, ...]) -> None:
        self._bus = bus
        self.group_id = group_id
        self.topics = topics
        self._starting: asyncio.Task[AIOKafkaConsumer] | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._closed = False
        self._polled: dict[TopicPartition, int] = {}
        """The next offset after the last record polled, by partition (lag)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop yet: joins at the first poll or commit
        self._start_soon()

    def assignment(self) -> set[TopicPartition]:
        if self._consumer is None or self._closed:
            return set()
        return {TopicPartition(tp.topic, tp.partition) for tp in self._consumer.assignment()}

    def lag(self) -> dict[TopicPartition, int]:
        """Records after the last one polled in each assigned partition, by the high watermark the
        last fetch brought; partitions nothing was polled from yet are left out."""
        if self._consumer is None or self._closed:
            return {}
        found = {}
        for tp in self._consumer.assignment():
            end, polled = self._consumer.highwater(tp), self._polled.get(TopicPartition(tp.topic, tp.partition))
            if end is not None and polled is not None:
                found[TopicPartition(tp.topic, tp.partition)] = max(0, end - polled)
        return found

    async def poll(self, timeout: float = 1.0, max_records: int = 500) -> list[Record]:
        if self._closed:
            raise RuntimeError(f"consumer of group {self.group_id!r} is closed")
        deadline = time.monotonic() + timeout
        starting = self._start_soon()
        if not starting.done():
            await asyncio.wait([starting], timeout=timeout)
            if not starting.done():
                return []
        consumer = starting.result()
        if max_records <= 0:
            return []
        remaining_ms = max(int((deadline - time.monotonic()) * 1000), 0)
        try:
            batches = await consumer.getmany(timeout_ms=remaining_ms, max_records=max_records)
        except ConsumerStoppedError:
            if self._closed:
                return []  # closed while this poll waited
            raise
        for records in batches.values():
            if records:
                self._polled[TopicPartition(records[-1].topic, records[-1].partition)] = records[-1].offset + 1
        return [
            Record(r.topic, r.partition, r.offset, r.key, r.value,
                   tuple((name, bytes(value or b"")) for name, value in r.headers), r.timestamp)
            for records in batches.values() for r in records
        ]

    async def commit(self, offsets: Mapping[TopicPartition, int] | None = None) -> None:
        if self._closed:
            raise CommitFailed(f"the consumer has left group {self.group_id!r}")
        consumer = await asyncio.shield(self._start_soon())
        assigned = self.assignment()
        if offsets is None:
            if not assigned:
                return  # nothing polled, nothing to commit
            explicit = None
        else:
            foreign = sorted(set(offsets) - assigned)
            if foreign:
                raise CommitFailed(
                    f"this member of group {self.group_id!r} is not assigned {foreign}"
                    f" (assigned: {sorted(assigned)}); the group may have rebalanced"
                )
            if not offsets:
                return
            explicit = {KafkaTopicPartition(tp.topic, tp.partition): offset for tp, offset in offsets.items()}
        try:
            await consumer.commit(explicit)
        except (CommitFailedError, IllegalStateError) as error:
            raise CommitFailed(f"commit in group {self.group_id!r} failed: {error}") from error

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._starting is None:
            return
        try:
            consumer = await self._starting
        except Exception:
            return
        await consumer.stop()  # leaves the group: its partitions go to the remaining members

    def _start_soon(self) -> asyncio.Task[AIOKafkaConsumer]:
        if self._starting is None:
            self._starting = asyncio.ensure_future(self._start())
        return self._starting

    async def _start(self) -> AIOKafkaConsumer:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self._bus.bootstrap, client_id=self._bus.client_id, group_id=self.group_id,
            enable_auto_commit=False, auto_offset_reset="earliest",
            partition_assignment_strategy=(RangePartitionAssignor,), **self._bus._consumer_options,
            **self._bus.security.client_options(),
        )
        try:
            await self._bus._start_client(consumer)
        except BaseException:
            await consumer.stop()
            raise
        consumer.subscribe(list(self.topics))  # after start: a missing topic does not block the join
        self._consumer = consumer
        return consumer
