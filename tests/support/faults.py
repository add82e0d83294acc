"""Fault injection at I/O boundaries: wrappers of the ports that raise `Crash` at a chosen crossing.

Every wrapped call is a named boundary crossed twice, before and after the real call
(`checker.log.append:after` is "the checker's append committed, nothing after it happened").
A `FaultPlan` counts crossings per boundary name and raises `Crash` at the armed (boundary, Nth
crossing) points. `Crash` is a BaseException, like a kill: no `except Exception` in a service
(retry loops, dead-lettering) can swallow it, so the crash reaches the driver, which discards
the service's objects and rebuilds them from the log."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from sluice.bus.port import Consumer, Message, Producer, Record, TopicPartition
from sluice.eventlog.port import Checkpoint, EventLog, NewEvent, RecordedEvent, StreamAppend


class Crash(BaseException):
    """The process died at `point`: nothing after it ran."""

    def __init__(self, point: CrashPoint) -> None:
        super().__init__(f"crash at {point}")
        self.point = point


@dataclass(frozen=True, order=True)
class CrashPoint:
    boundary: str
    crossing: int
    """1-based: the Nth time the boundary is crossed in the run."""

    def __str__(self) -> str:
        return f"{self.boundary}@{self.crossing}"

    @classmethod
    def parse(cls, text: str) -> CrashPoint:
        boundary, _, crossing = text.rpartition("@")
        if not boundary or not crossing.isdigit() or int(crossing) < 1:
            raise ValueError(f"crash point {text!r}: expected BOUNDARY@N with N >= 1")
        return cls(boundary, int(crossing))


class FaultPlan:
    """Counts boundary crossings; raises Crash at the armed points (none: only counts)."""

    def __init__(self, points: Sequence[CrashPoint] = ()) -> None:
        self.armed = frozenset(points)
        self.crossings: Counter[str] = Counter()
        self.fired: list[CrashPoint] = []
        self._total = 0
        self._appends = 0

    @property
    def total(self) -> int:
        """Crossings of every boundary so far."""
        return self._total

    @property
    def appends(self) -> int:
        """Appends to the log committed so far (crossings of every `*.log.append:after`)."""
        return self._appends

    def cross(self, boundary: str) -> None:
        self._total += 1
        if boundary.endswith(".log.append:after"):
            self._appends += 1
        self.crossings[boundary] += 1
        point = CrashPoint(boundary, self.crossings[boundary])
        if point in self.armed:
            self.fired.append(point)
            raise Crash(point)

    def around(self, boundary: str, call, *args, **kwargs):
        self.cross(f"{boundary}:before")
        result = call(*args, **kwargs)
        self.cross(f"{boundary}:after")
        return result

    async def around_async(self, boundary: str, call, *args, **kwargs):
        self.cross(f"{boundary}:before")
        result = await call(*args, **kwargs)
        self.cross(f"{boundary}:after")
        return result


class FaultyEventLog:
    """The EventLog port of one service: writes are boundaries (`<service>.log.append`,
    `<service>.log.checkpoint`); reads pass through."""

    def __init__(self, log: EventLog, plan: FaultPlan, service: str) -> None:
        self._log = log
        self._plan = plan
        self._service = service

    def append(self, stream: str, events: Sequence[NewEvent], expected_version: int, *,
               checkpoints: Sequence[Checkpoint] = ()) -> int:
        return self._plan.around(f"{self._service}.log.append", self._log.append, stream, events, expected_version,
                                 checkpoints=checkpoints)

    def append_batch(self, appends: Sequence[StreamAppend], *, checkpoints: Sequence[Checkpoint] = ()) -> list[int]:
        return self._plan.around(f"{self._service}.log.append", self._log.append_batch, appends,
                                 checkpoints=checkpoints)

    def save_checkpoint(self, checkpoint: Checkpoint) -> None:
        self._plan.around(f"{self._service}.log.checkpoint", self._log.save_checkpoint, checkpoint)

    def read_stream(self, stream: str, from_version: int = 0, limit: int | None = None) -> list[RecordedEvent]:
        return self._log.read_stream(stream, from_version, limit)

    def stream_version(self, stream: str) -> int:
        return self._log.stream_version(stream)

    def read_all(self, after: int = 0, limit: int = 1000, prefixes: Sequence[str] = ()) -> list[RecordedEvent]:
        return self._log.read_all(after, limit, prefixes)

    def read_all_to_head(self, after: int = 0, limit: int = 1000,
                         prefixes: Sequence[str] = ()) -> tuple[list[RecordedEvent], int]:
        return self._log.read_all_to_head(after, limit, prefixes)

    def stream_versions(self, after: int = 0, prefixes: Sequence[str] = ()) -> dict[str, int]:
        return self._log.stream_versions(after, prefixes)

    def head_position(self) -> int:
        return self._log.head_position()

    def read_checkpoint(self, name: str) -> int | None:
        return self._log.read_checkpoint(name)

    def read_checkpoints(self, names: Iterable[str]) -> dict[str, int]:
        return self._log.read_checkpoints(names)

    def subscribe(self, after: int = 0, prefixes: Sequence[str] = ()):
        return self._log.subscribe(after, prefixes)

    def subscribe_batches(self, after: int = 0, prefixes: Sequence[str] = ()):
        return self._log.subscribe_batches(after, prefixes)

    def close(self) -> None:
        """The log outlives the service: a crashed service does not close it."""

    def __getattr__(self, name: str) -> Any:  # adapter extras (snapshots, stats) pass through
        return getattr(self._log, name)


class FaultyProducer:
    """A service's producer: each send is the boundary `<service>.bus.send`."""

    def __init__(self, producer: Producer, plan: FaultPlan, service: str) -> None:
        self._producer = producer
        self._plan = plan
        self._service = service

    async def send(self, topic: str, value: bytes, *, key: bytes | None = None,
                   headers: Sequence[tuple[str, bytes]] = ()) -> tuple[int, int]:
        return await self._plan.around_async(f"{self._service}.bus.send", self._producer.send, topic, value,
                                             key=key, headers=headers)

    async def send_batch(self, messages: Sequence[Message]) -> list[tuple[int, int]]:
        return await self._plan.around_async(f"{self._service}.bus.send", self._producer.send_batch, messages)

    async def close(self) -> None:
        await self._producer.close()


class FaultyConsumer:
    """A group member: committing the consumed offsets is the boundary `<service>.bus.commit:<group>`."""

    def __init__(self, consumer: Consumer, plan: FaultPlan, service: str, group: str) -> None:
        self._consumer = consumer
        self._plan = plan
        self._boundary = f"{service}.bus.commit:{group}"

    async def poll(self, timeout: float = 1.0, max_records: int = 500) -> list[Record]:
        return await self._consumer.poll(timeout, max_records)

    async def commit(self, offsets: Mapping[TopicPartition, int] | None = None) -> None:
        await self._plan.around_async(self._boundary, self._consumer.commit, offsets)

    def assignment(self) -> set[TopicPartition]:
        return self._consumer.assignment()

    async def close(self) -> None:
        await self._consumer.close()


class FaultySubmitter:
    """The launcher's ProgramSubmitter: `launcher.program.submit` is the boundary between a launch
    request and the launch (before) and inside the launch, the program started but not recorded
    (after); `launcher.program.wait` is the launcher dying while the program runs (before) or just
    after it ended, before its end is recorded (after)."""

    def __init__(self, submitter: Any, plan: FaultPlan) -> None:
        self._submitter = submitter
        self._plan = plan
        if hasattr(submitter, "find"):  # a ProgramFinder stays one (the launcher checks with isinstance)
            self.find = self._find

    def _find(self, attempt_dir: Path) -> _FaultyProcess | None:
        found = self._submitter.find(attempt_dir)
        return None if found is None else _FaultyProcess(found, self._plan)

    async def submit(self, entry_point: Path, context_path: Path, log_path: Path,
                     spark_conf: dict[str, str] | None = None) -> _FaultyProcess:
        process = await self._plan.around_async("launcher.program.submit", self._submitter.submit, entry_point,
                                                context_path, log_path)
        return _FaultyProcess(process, self._plan)


class _FaultyProcess:
    def __init__(self, process: Any, plan: FaultPlan) -> None:
        self._process = process
        self._plan = plan

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def process_start(self) -> int:
        return self._process.process_start

    async def wait(self) -> int:
        return await self._plan.around_async("launcher.program.wait", self._process.wait)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._process, name)
