"""Records tests/replay/recorded.jsonl: a scheduler history on the simulated clock (schedules of
several trigger kinds with constraints, notifications, run ends, an update, a disable and a
delete), one event per line as the log holds it. Run it again only to change the recording:
`.venv/bin/python -m tests.replay.record`."""
from __future__ import annotations

import asyncio
import json
import tempfile
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

from sluice.domain.common import ProgramRef, RunStatus
from sluice.domain.constraints import ConcurrencyConstraint, DelayConstraint
from sluice.domain.schedules import Schedule
from sluice.domain.triggers import AndTrigger, OrTrigger, PartitionTrigger, ProgramStatusTrigger, TimeTrigger
from tests.scenarios.conftest import T0
from tests.support.simulated import SimulatedScheduler

RECORDING = Path(__file__).with_name("recorded.jsonl")
A, B = ProgramRef("ns", "app", "a"), ProgramRef("ns", "app", "b")


async def history(scheduler: SimulatedScheduler) -> None:
    await scheduler.deploy("ns", "app", ("a", "b"))
    every_two = await scheduler.create(Schedule("", "every_two", A, PartitionTrigger("ns", "feed", 2), {"v": "1"},
                                                enabled=True, constraints=(ConcurrencyConstraint(1),)))
    await scheduler.create(Schedule("", "hourly", B, TimeTrigger("0 * * * *"), enabled=True,
                                    constraints=(DelayConstraint(300),)))
    await scheduler.create(Schedule("", "join", B, AndTrigger((PartitionTrigger("ns", "feed"),
                                                               PartitionTrigger("ns", "side"))), enabled=True))
    after_a = await scheduler.create(Schedule("", "after_a", B, OrTrigger((
        ProgramStatusTrigger("ns", "app", "a", ("COMPLETED",)), TimeTrigger("30 2 * * *"))), enabled=True))
    for hour in range(6):
        await scheduler.partitions("ns", "feed", {"hour": f"{hour:02d}"})
        if hour % 2:
            await scheduler.partitions("ns", "side", {"hour": f"{hour:02d}"})
        await scheduler.advance(timedelta(minutes=25))
        for launch in list(scheduler.launches):
            if launch.job.program == A and launch.at <= scheduler.clock.now() - timedelta(minutes=20):
                await scheduler.finish(launch, RunStatus.COMPLETED if hour % 3 else RunStatus.FAILED)
    await scheduler.update(replace(every_two, trigger=PartitionTrigger("ns", "feed", 1), properties={"v": "2"}))
    await scheduler.partitions("ns", "feed", {"hour": "07"})
    scheduler.registry.disable(after_a.id)
    await scheduler.pump()
    await scheduler.delete(Schedule("", "join", B, PartitionTrigger("ns", "x")))
    await scheduler.advance(timedelta(hours=3))


def record() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        scheduler = SimulatedScheduler(Path(tmp), T0)
        asyncio.run(history(scheduler))
        lines = [json.dumps({"id": e.id, "stream": e.stream, "version": e.version, "position": e.position,
                             "type": e.type, "data": json.loads(e.data), "metadata": dict(e.metadata),
                             "recorded_at": e.recorded_at.isoformat()}, sort_keys=True)
                 for e in scheduler.log.read_all(0, 1_000_000)]
        scheduler.close()
    RECORDING.write_text("\n".join(lines) + "\n")
    return len(lines)


if __name__ == "__main__":
    print(f"recorded {record()} events into {RECORDING}")
