"""ingest: a Faust app turning object-store events (S3 / MinIO notifications on Kafka) into Sluice
partition notifications, published through the Notifications gRPC API. mapping (pure), bridge
(publish, retry, dead-letter), app (Faust wiring), __main__ (the command)."""
