"""The run context a launched program receives (context.json), parsed into frozen dataclasses.

The launcher runs `spark-submit ... <entry_point.py> --sluice-context <abs path to context.json>`.
Pure stdlib on purpose: the launcher and the tests use it without importing pyspark.

Every problem is reported as a ContextError naming the offending field by its path in the
document, e.g. `notifications[0].partitions[1].location: missing`.
"""
from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any

CONTEXT_FLAG = "--sluice-context"
PARTITION_COMMITTED = "partition_committed"
_MISSING = object()


class ApiError(RuntimeError):
    """A call the Partitions API refused or could not answer; the message names the call and the
    server's reason (sluice.sdk.api raises it; here, where
    both sluice.sdk.partitions and sluice.sdk.api can import it)."""


class ContextError(ValueError):
    """The context is missing, unreadable or malformed; the message names what is wrong."""


@dataclass(frozen=True)
class PartitionRef:
    """One partition that triggered the run (from a partition_committed notification)."""
    namespace: str
    dataset: str
    key: Mapping[str, str]          # read-only, in the order the producer gave
    location: str
    size_bytes: int
    record_count: int
    metadata: Mapping[str, str]


@dataclass(frozen=True)
class Notification:
    id: str
    time: datetime
    type: str
    namespace: str | None            # set for partition_committed
    dataset: str | None
    partitions: tuple[PartitionRef, ...]


@dataclass(frozen=True)
class ScheduleRef:
    id: str
    name: str
    generation: int


@dataclass(frozen=True)
class ProgramRef:
    namespace: str
    app: str
    program: str

    @property
    def qualified_name(self) -> str:
        return f"{self.namespace}.{self.app}.{self.program}"


@dataclass(frozen=True)
class ApiAccess:
    """How the program reaches Sluice's Partitions API (datasets, partition consumers): the datasets
    service's gRPC address, the run's own credential (valid until the run ends) and, when the server speaks TLS,
    the certificate file to trust."""
    address: str
    token: str
    tls_ca: str | None = None

    def __repr__(self) -> str:   # never the token
        return f"ApiAccess(address={self.address!r}, token='***', tls_ca={self.tls_ca!r})"


@dataclass(frozen=True)
class SystemPaths:
    data_dir: str
    staging_dir: str
    result_path: str
    api: ApiAccess | None = None     # None: launched without datasets (or by hand): no consumers


@dataclass(frozen=True)
class Lineage:
    run_id: str
    job_namespace: str
    job_name: str
    parent_run_id: str | None
    parent_job_name: str | None


@dataclass(frozen=True)
class ProgramContext:
    run_id: str
    job_id: str
    schedule: ScheduleRef | None     # None for a run not started by a schedule
    program: ProgramRef
    properties: Mapping[str, str]    # the user's runtime arguments only (read-only)
    logical_time: datetime | None    # timezone-aware
    system: SystemPaths
    notifications: tuple[Notification, ...]
    lineage: Lineage | None

    @property
    def app_name(self) -> str:
        """The name a Spark application of this run should carry."""
        return self.lineage.job_name if self.lineage else self.program.qualified_name

    def partitions(self, dataset: str | None = None, namespace: str | None = None) -> tuple[PartitionRef, ...]:
        """The triggering partitions, optionally only those of `dataset` (and `namespace`).

        A partition committed again in a later notification (same dataset and key) appears
        once, with the later location, so a program never reads it twice."""
        latest: dict[tuple, PartitionRef] = {}
        for n in self.notifications:
            for p in n.partitions:
                if dataset is not None and p.dataset != dataset:
                    continue
                if namespace is not None and p.namespace != namespace:
                    continue
                ident = (p.namespace, p.dataset, tuple(sorted(p.key.items())))
                latest.pop(ident, None)
                latest[ident] = p
        return tuple(latest.values())


def load_context(path: str | Path) -> ProgramContext:
    """Read and validate a context.json file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise ContextError(f"cannot read context file {path}: {e.strerror or e}") from e
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ContextError(f"context file {path} is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from e
    return parse_context(data)


def context_from_argv(argv: Sequence[str] | None = None) -> ProgramContext:
    """Find `--sluice-context PATH` (or `--sluice-context=PATH`) in argv (default sys.argv[1:]) and load it."""
    args = list(sys.argv[1:] if argv is None else argv)
    for i, arg in enumerate(args):
        if arg == CONTEXT_FLAG:
            if i + 1 >= len(args) or args[i + 1].startswith("--"):
                raise ContextError(f"{CONTEXT_FLAG} needs a path to context.json")
            return load_context(args[i + 1])
        if arg.startswith(CONTEXT_FLAG + "="):
            value = arg[len(CONTEXT_FLAG) + 1:]
            if not value:
                raise ContextError(f"{CONTEXT_FLAG} needs a path to context.json")
            return load_context(value)
    raise ContextError(f"missing {CONTEXT_FLAG} PATH argument (this program is meant to be launched by Sluice)")


def parse_context(data: Any) -> ProgramContext:
    """Validate an already-decoded context document."""
    _expect(data, dict, "context")
    schedule = _get(data, "schedule", "", dict, optional=True)
    lineage = _get(data, "lineage", "", dict, optional=True)
    system = _get(data, "system", "", dict)
    raw_time = _get(system, "logical_time", "system.", str, optional=True)
    api = _get(system, "api", "system.", dict, optional=True)
    return ProgramContext(
        run_id=_get(data, "run_id", "", str),
        job_id=_get(data, "job_id", "", str),
        schedule=None if schedule is None else ScheduleRef(
            id=_get(schedule, "id", "schedule.", str),
            name=_get(schedule, "name", "schedule.", str),
            generation=_get(schedule, "generation", "schedule.", int),
        ),
        program=_program(_get(data, "program", "", dict)),
        properties=_str_map(_or_empty(data.get("properties")), "properties"),
        logical_time=None if raw_time is None else _timestamp(raw_time, "system.logical_time"),
        system=SystemPaths(
            data_dir=_get(system, "data_dir", "system.", str),
            staging_dir=_get(system, "staging_dir", "system.", str),
            result_path=_get(system, "result_path", "system.", str),
            api=None if api is None else ApiAccess(
                address=_get(api, "address", "system.api.", str),
                token=_get(api, "token", "system.api.", str),
                tls_ca=_get(api, "tls_ca", "system.api.", str, optional=True),
            ),
        ),
        notifications=tuple(
            _notification(n, f"notifications[{i}]")
            for i, n in enumerate(_get(data, "notifications", "", list))
        ),
        lineage=None if lineage is None else Lineage(
            run_id=_get(lineage, "run_id", "lineage.", str),
            job_namespace=_get(lineage, "job_namespace", "lineage.", str),
            job_name=_get(lineage, "job_name", "lineage.", str),
            parent_run_id=_get(lineage, "parent_run_id", "lineage.", str, optional=True),
            parent_job_name=_get(lineage, "parent_job_name", "lineage.", str, optional=True),
        ),
    )


def _program(d: dict) -> ProgramRef:
    return ProgramRef(*(_get(d, f, "program.", str) for f in ("namespace", "app", "program")))


def _notification(n: Any, path: str) -> Notification:
    _expect(n, dict, path)
    kind = _get(n, "type", path + ".", str)
    namespace = dataset = None
    partitions: tuple[PartitionRef, ...] = ()
    if kind == PARTITION_COMMITTED:
        namespace = _get(n, "namespace", path + ".", str)
        dataset = _get(n, "dataset", path + ".", str)
        partitions = tuple(
            _partition(p, namespace, dataset, f"{path}.partitions[{j}]")
            for j, p in enumerate(_get(n, "partitions", path + ".", list))
        )
    return Notification(
        id=_get(n, "id", path + ".", str),
        time=_timestamp(_get(n, "time", path + ".", str), path + ".time"),
        type=kind, namespace=namespace, dataset=dataset, partitions=partitions,
    )


def _partition(p: Any, namespace: str, dataset: str, path: str) -> PartitionRef:
    _expect(p, dict, path)
    key = _str_map(_get(p, "key", path + ".", dict), path + ".key")
    if not key:
        raise ContextError(f"{path}.key: must not be empty")
    return PartitionRef(
        namespace=namespace, dataset=dataset, key=key,
        location=_get(p, "location", path + ".", str),
        size_bytes=_get(p, "size_bytes", path + ".", int),
        record_count=_get(p, "record_count", path + ".", int),
        metadata=_str_map(_or_empty(p.get("metadata")), path + ".metadata"),
    )


def _get(d: dict, name: str, prefix: str, kind: type, optional: bool = False) -> Any:
    value = d.get(name, _MISSING)
    if value is _MISSING or value is None or (optional and value == ""):
        if optional:
            return None
        raise ContextError(f"{prefix}{name}: missing" if value is _MISSING else f"{prefix}{name}: must not be null")
    _expect(value, kind, prefix + name)
    if kind is str and not value:
        raise ContextError(f"{prefix}{name}: must not be empty")
    return value


def _expect(value: Any, kind: type, path: str) -> None:
    # bool is an int in Python, never a valid count or generation here.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        names = {dict: "an object", list: "a list", str: "a string", int: "an integer"}
        raise ContextError(f"{path}: must be {names.get(kind, kind.__name__)}, got {type(value).__name__}")


def _or_empty(value: Any) -> Any:
    return {} if value is None else value


def _str_map(value: Any, path: str) -> Mapping[str, str]:
    _expect(value, dict, path)
    for k, v in value.items():
        _expect(v, str, f"{path}.{k}")
    return MappingProxyType(dict(value))


def _timestamp(value: str, path: str) -> datetime:
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise ContextError(f"{path}: not an ISO-8601 timestamp: {value!r}") from None
    if when.tzinfo is None or when.utcoffset() is None:
        raise ContextError(f"{path}: timestamp needs a time zone offset: {value!r}")
    return when
