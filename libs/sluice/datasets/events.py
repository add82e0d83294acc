"""Encoding and decoding the events that carry many partitions, by hand.

The generic codec (sluice.eventlog.codec) walks type hints for every value; a transaction of a thousand
partitions, or a consumer discovering them, would spend most of its time there. These functions
write the same JSON the generic codec writes (so either can read what the other wrote) for the
event types that carry partitions, and defer to it for every other type.
"""
from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Callable

from sluice.eventlog.codec import DECODING_ERRORS, EventTypes, UndecodableEvent, encode
from sluice.domain.consumer.aggregate import (
    PartitionsCompleted,
    PartitionsDiscarded,
    PartitionsDiscovered,
    PartitionsFailed,
    PartitionsReturned,
    PartitionsTaken,
)
from sluice.domain.consumer.scan import DiscoveredPartition
from sluice.domain.consumer.state import PartitionId
from sluice.domain.datasets.specs import Partition
from sluice.domain.datasets.transactions import PartitionsCommitted
from sluice.eventlog.port import NewEvent, RecordedEvent


def _partition_out(p: Partition) -> dict[str, Any]:
    return {"key": dict(p.key), "location": p.location, "size_bytes": p.size_bytes,
            "record_count": p.record_count, "metadata": dict(p.metadata)}


def _partition_in(d: dict[str, Any]) -> Partition:
    return Partition(d["key"], d["location"], d.get("size_bytes", 0), d.get("record_count", 0), d.get("metadata", {}))


def _ids_out(ids: tuple[PartitionId, ...]) -> list[dict[str, int]]:
    return [{"position": i.position, "index": i.index} for i in ids]


def _ids_in(items: list[dict[str, int]]) -> tuple[PartitionId, ...]:
    return tuple(PartitionId(i["position"], i["index"]) for i in items)


def _when(text: str) -> datetime:
    return datetime.fromisoformat(text)


_ENCODERS: dict[type, Callable[[Any], dict[str, Any]]] = {
    PartitionsCommitted: lambda e: {"namespace": e.namespace, "dataset": e.dataset, "position": e.position,
                                    "partitions": [_partition_out(p) for p in e.partitions],
                                    "at": e.at.isoformat()},
    PartitionsDiscovered: lambda e: {"high_water_mark": e.high_water_mark, "in_flight": list(e.in_flight),
                                     "partitions": [{"id": {"position": p.id.position, "index": p.id.index},
                                                     "partition": _partition_out(p.partition),
                                                     "committed_at": p.committed_at.isoformat()}
                                                    for p in e.partitions],
                                     "at": e.at.isoformat()},
    PartitionsTaken: lambda e: {"taker": e.taker, "partitions": _ids_out(e.partitions), "at": e.at.isoformat()},
    PartitionsCompleted: lambda e: {"taker": e.taker, "partitions": _ids_out(e.partitions), "at": e.at.isoformat()},
    PartitionsReturned: lambda e: {"taker": e.taker, "partitions": _ids_out(e.partitions), "at": e.at.isoformat()},
}

_DECODERS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "PartitionsCommitted": lambda d: PartitionsCommitted(d["namespace"], d["dataset"], d["position"],
                                                         tuple(_partition_in(p) for p in d["partitions"]),
                                                         _when(d["at"])),
    "PartitionsDiscovered": lambda d: PartitionsDiscovered(
        d["high_water_mark"], tuple(d["in_flight"]),
        tuple(DiscoveredPartition(PartitionId(p["id"]["position"], p["id"]["index"]), _partition_in(p["partition"]),
                                  _when(p["committed_at"])) for p in d["partitions"]),
        _when(d["at"])),
    "PartitionsTaken": lambda d: PartitionsTaken(d["taker"], _ids_in(d["partitions"]), _when(d["at"])),
    "PartitionsCompleted": lambda d: PartitionsCompleted(d["taker"], _ids_in(d["partitions"]), _when(d["at"])),
    "PartitionsReturned": lambda d: PartitionsReturned(d["taker"], _ids_in(d["partitions"]), _when(d["at"])),
    "PartitionsFailed": lambda d: PartitionsFailed(d["taker"], _ids_in(d["partitions"]), d["reason"], _when(d["at"])),
    "PartitionsDiscarded": lambda d: PartitionsDiscarded(_ids_in(d["partitions"]), d["reason"], _when(d["at"])),
}


def encode_event(event: Any, event_id: str) -> NewEvent:
    encoder = _ENCODERS.get(type(event))
    if encoder is None:
        return encode(event, event_id)
    data = json.dumps(encoder(event), separators=(",", ":")).encode()
    return NewEvent(id=event_id, type=type(event).__name__, data=data, metadata={})


def decode_event(types: EventTypes, recorded: RecordedEvent) -> Any:
    decoder = _DECODERS.get(recorded.type)
    if decoder is None or recorded.type not in types:
        return types.decode(recorded)
    try:
        return decoder(json.loads(recorded.data))
    except DECODING_ERRORS as error:
        raise UndecodableEvent(recorded, error) from error
