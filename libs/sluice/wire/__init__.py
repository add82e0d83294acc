"""Protobuf <-> domain conversions: the only place that knows both (protobuf stays at the edges)."""
