from sluice.bus.port import (
    Bus,
    CommitFailed,
    Consumer,
    Message,
    Producer,
    Record,
    TopicPartition,
    TopicSpec,
    UnknownTopic,
    kafka_partition,
)

__all__ = [
    "Bus",
    "CommitFailed",
    "Consumer",
    "Message",
    "Producer",
    "Record",
    "TopicPartition",
    "TopicSpec",
    "UnknownTopic",
    "kafka_partition",
]
