"""The fault campaign of issue 25 (`make fault-test`, `python -m tests.faults`): the services as separate
processes over a 3-broker Kafka cluster and PostgreSQL, under a steady load, through seeded faults."""
