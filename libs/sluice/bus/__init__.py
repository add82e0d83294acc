from sluice.bus.port import Bus, Consumer, Producer, Record, TopicPartition, TopicSpec, kafka_partition

__all__ = ["Bus", "Consumer", "Producer", "Record", "TopicPartition", "TopicSpec", "kafka_partition"]
