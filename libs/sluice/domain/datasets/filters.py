"""Which partitions a query or a consumer wants: conditions on key values and on metadata.

    where = PartitionFilter(keys=(KeyCondition("marketplace", one_of=("US", "UK")),
                                  KeyCondition("hour", lower="8", upper="12")),       # 8 <= hour < 12
                            metadata=(MetadataCondition("quality", one_of=("ok",)),))
    where = validate_filter(spec, where)          # canonical values; InvalidArgument names the field
    where.matches(spec, partition.key, partition.metadata)

Ranges are half-open, [lower, upper), as CDAP's partition filters, and compare by the key's type.
All conditions must hold; an empty filter matches every partition.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from sluice.domain.datasets.specs import DatasetSpec, KeyType
from sluice.domain.errors import InvalidArgument


@dataclass(frozen=True)
class KeyCondition:
    """The key `name` has one of `one_of` (when given) and lies in [lower, upper) (each bound optional)."""

    name: str
    one_of: tuple[str, ...] = ()
    lower: str | None = None
    upper: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "one_of", tuple(self.one_of))


@dataclass(frozen=True)
class MetadataCondition:
    """The metadata entry `name` is present and is one of `one_of` (any value when empty)."""

    name: str
    one_of: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "one_of", tuple(self.one_of))


@dataclass(frozen=True)
class PartitionFilter:
    keys: tuple[KeyCondition, ...] = ()
    metadata: tuple[MetadataCondition, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "keys", tuple(self.keys))
        object.__setattr__(self, "metadata", tuple(self.metadata))

    @property
    def empty(self) -> bool:
        return not self.keys and not self.metadata

    def matches(self, spec: DatasetSpec, key: Mapping[str, str], metadata: Mapping[str, str]) -> bool:
        return (all(_key_matches(condition, spec.key_type(condition.name) or KeyType.STRING, key.get(condition.name))
                    for condition in self.keys)
                and all(_metadata_matches(condition, metadata) for condition in self.metadata))


MATCH_ALL = PartitionFilter()


def _key_matches(condition: KeyCondition, key_type: KeyType, value: str | None) -> bool:
    if value is None:
        return False
    if condition.one_of and value not in condition.one_of:
        return False
    ordered = key_type.sort_value(value)
    if condition.lower is not None and ordered < key_type.sort_value(condition.lower):
        return False
    return condition.upper is None or ordered < key_type.sort_value(condition.upper)


def _metadata_matches(condition: MetadataCondition, metadata: Mapping[str, str]) -> bool:
    value = metadata.get(condition.name)
    return value is not None and (not condition.one_of or value in condition.one_of)


def validate_filter(spec: DatasetSpec, where: PartitionFilter, path: str = "where") -> PartitionFilter:
    """The filter with canonical key values, or InvalidArgument naming the offending condition."""
    keys = []
    for index, condition in enumerate(where.keys):
        here = f"{path}.keys[{index}]"
        key_type = spec.key_type(condition.name)
        if key_type is None:
            raise InvalidArgument(f"{here}.name", f"{condition.name!r} is not a partition key of {spec.qualified_name} "
                                  f"({', '.join(k.name for k in spec.partition_keys)})")
        one_of = tuple(key_type.canonical(v, f"{here}.one_of[{i}]") for i, v in enumerate(condition.one_of))
        lower = None if condition.lower is None else key_type.canonical(condition.lower, f"{here}.lower")
        upper = None if condition.upper is None else key_type.canonical(condition.upper, f"{here}.upper")
        if lower is not None and upper is not None and key_type.sort_value(lower) >= key_type.sort_value(upper):
            raise InvalidArgument(f"{here}.upper", f"must be greater than lower ({lower!r}), got {upper!r}")
        keys.append(KeyCondition(condition.name, one_of, lower, upper))
    for index, condition in enumerate(where.metadata):
        if not isinstance(condition.name, str) or not condition.name:
            raise InvalidArgument(f"{path}.metadata[{index}].name", "must not be empty")
        for position, value in enumerate(condition.one_of):
            if not isinstance(value, str):
                raise InvalidArgument(f"{path}.metadata[{index}].one_of[{position}]", f"must be text, got {value!r}")
    return PartitionFilter(tuple(keys), where.metadata)
