"""Partitioned datasets as pure data: the dataset's definition, its typed partition keys, a partition.

    spec = DatasetSpec("experiments", "clickstream", (KeySpec("marketplace"), KeySpec("date", KeyType.DATE),
                       KeySpec("hour", KeyType.INT)), base_location="/data/experiments/clickstream")
    validate_dataset(spec)                                   # InvalidArgument("dataset.partition_keys[2].name", ...)
    partition = validate_partition(spec, Partition({"marketplace": "US", "date": "2026-11-22", "hour": "09"},
                                                   location="/data/.../hour=9", size_bytes=1024, record_count=10))
    partition.key                                            # {"marketplace": "US", "date": "2026-11-22", "hour": "9"}

Key values travel as text (the wire, the log, paths); each key's type says which texts are valid
and how values compare (`sort_value`), so a range over an INT key orders 9 before 10.
"""
from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field, replace
from datetime import date, datetime
from typing import Any, Mapping

from sluice.domain.names import key_segments, validate_name
from sluice.domain.errors import InvalidArgument

_INT = re.compile(r"[+-]?[0-9]{1,18}")


class KeyType(enum.Enum):
    """How a partition key's values are written and compared."""

    STRING = "STRING"
    """Any non-empty text without control characters; compared as text."""
    INT = "INT"
    """A whole number in decimal, stored without leading zeros ("09" becomes "9"); compared as a number."""
    DATE = "DATE"
    """A calendar date, YYYY-MM-DD; compared as a date."""

    def canonical(self, value: object, path: str) -> str:
        """The stored text of `value`, or InvalidArgument at `path` naming what was wrong."""
        if self is KeyType.INT and isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        if self is KeyType.DATE and isinstance(value, date) and not isinstance(value, datetime):
            value = value.isoformat()
        if not isinstance(value, str):
            raise InvalidArgument(path, f"must be a {self.value} written as text, got {type(value).__name__}")
        if self is KeyType.STRING:
            if not value or any(ord(c) < 32 for c in value):
                raise InvalidArgument(path, f"must be non-empty text without control characters, got {value!r}")
            return value
        if self is KeyType.INT:
            if not _INT.fullmatch(value.strip()):
                raise InvalidArgument(path, f"must be an INT (a whole number), got {value!r}")
            return str(int(value))
        try:
            parsed = date.fromisoformat(value)
        except ValueError:
            parsed = None
        if parsed is None or len(value) != 10:  # fromisoformat also takes "20261122"
            raise InvalidArgument(path, f"must be a DATE (YYYY-MM-DD), got {value!r}")
        return parsed.isoformat()

    def sort_value(self, canonical: str) -> Any:
        """A value that orders like the key: numbers for INT, text otherwise (ISO dates sort as text)."""
        return int(canonical) if self is KeyType.INT else canonical


@dataclass(frozen=True)
class KeySpec:
    name: str
    type: KeyType = KeyType.STRING


@dataclass(frozen=True)
class DatasetSpec:
    """A partitioned dataset: partitions are identified by values of `partition_keys`, in that order,
    and their files live under `base_location` (by convention <base>/<k1>=<v1>/<k2>=<v2>/...)."""

    namespace: str
    name: str
    partition_keys: tuple[KeySpec, ...]
    base_location: str
    description: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "partition_keys", tuple(self.partition_keys))

    @property
    def qualified_name(self) -> str:
        return f"{self.namespace}.{self.name}"

    def key_type(self, name: str) -> KeyType | None:
        return next((key.type for key in self.partition_keys if key.name == name), None)

    def default_location(self, key: Mapping[str, str]) -> str:
        """Where the partition with these (canonical) key values lives by convention: one directory per
        key, its value encoded (sluice.domain.names), so any value stays one segment below the base."""
        return "/".join([self.base_location.rstrip("/"),
                         *key_segments({k.name: key[k.name] for k in self.partition_keys})])


@dataclass(frozen=True)
class Partition:
    """One partition as a writer adds it: key values, where its files are, how big it is."""

    key: Mapping[str, str]
    location: str
    size_bytes: int = 0
    record_count: int = 0
    metadata: Mapping[str, str] = field(default_factory=dict)


def validate_dataset(spec: DatasetSpec, path: str = "dataset") -> DatasetSpec:
    validate_name(f"{path}.namespace", spec.namespace)
    validate_name(f"{path}.name", spec.name)
    if not spec.partition_keys:
        raise InvalidArgument(f"{path}.partition_keys", "a dataset needs at least one partition key")
    seen: set[str] = set()
    for index, key in enumerate(spec.partition_keys):
        where = f"{path}.partition_keys[{index}]"
        validate_name(f"{where}.name", key.name)
        if key.name in seen:
            raise InvalidArgument(f"{where}.name", f"partition key {key.name!r} is declared twice")
        if not isinstance(key.type, KeyType):
            raise InvalidArgument(f"{where}.type", f"must be one of {', '.join(t.value for t in KeyType)}")
        seen.add(key.name)
    if not isinstance(spec.base_location, str) or not spec.base_location.strip():
        raise InvalidArgument(f"{path}.base_location", "must not be empty")
    if "://" not in spec.base_location and not spec.base_location.startswith("/"):
        raise InvalidArgument(f"{path}.base_location", f"must be an absolute path or a URL, got {spec.base_location!r}")
    return spec


def canonical_key(spec: DatasetSpec, key: Mapping[str, object], path: str) -> dict[str, str]:
    """The key in the dataset's key order with canonical values; every key present, no other."""
    if not isinstance(key, Mapping):
        raise InvalidArgument(path, f"must map key names to values, got {type(key).__name__}")
    unknown = [name for name in key if spec.key_type(name) is None]
    if unknown:
        declared = ", ".join(k.name for k in spec.partition_keys)
        raise InvalidArgument(f"{path}.{unknown[0]}", f"is not a partition key of {spec.qualified_name} ({declared})")
    result = {}
    for key_spec in spec.partition_keys:
        if key_spec.name not in key:
            raise InvalidArgument(f"{path}.{key_spec.name}", f"missing: {spec.qualified_name} is partitioned by "
                                  f"{', '.join(k.name for k in spec.partition_keys)}")
        result[key_spec.name] = key_spec.type.canonical(key[key_spec.name], f"{path}.{key_spec.name}")
    return result


def validate_partition(spec: DatasetSpec, partition: Partition, path: str = "partition") -> Partition:
    """The partition with its key made canonical, or InvalidArgument naming the offending field."""
    key = canonical_key(spec, partition.key, f"{path}.key")
    if not isinstance(partition.location, str) or not partition.location.strip():
        raise InvalidArgument(f"{path}.location", "must not be empty")
    for name in ("size_bytes", "record_count"):
        value = getattr(partition, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise InvalidArgument(f"{path}.{name}", f"must be a whole number >= 0, got {value!r}")
    metadata = partition.metadata or {}
    for name, value in metadata.items():
        if not isinstance(name, str) or not name or not isinstance(value, str):
            raise InvalidArgument(f"{path}.metadata", f"names and values must be text, got {name!r}: {value!r}")
    return replace(partition, key=key, metadata=dict(metadata))
