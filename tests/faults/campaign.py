"""The fault campaign: the stack under a steady load, seeded faults one after another, then the oracle.

Oracle (from the publisher's accepted notifications and the programs' ledger of real process starts):
- lost: an accepted notification whose run never completed: no `end` line for its partition (other
  than one its host's death voided) of a run the launcher recorded COMPLETED;
- duplicate: executions beyond one per expected run: `end` lines beyond one per partition, plus an
  attempt of a run started more than once. Not counted: an attempt killed with its host and retried,
  nor one that ended on a host that died before its launcher recorded the end (the launcher taking
  over finds it LOST and runs it again, as designed); the latter are counted and printed apart;
- valid_dead_lettered: records on the dead-letter topic (every message of the campaign is valid);
- recovery of a fault: from its clearing until launches flow again (the first program start after it);
  printed beside it, until the first program start of a notification accepted after it (the backlog
  the fault left has gone through).
A service process that ended on its own, a fault not recovered from, or a run of no accepted
notification is a problem too: reported, and the campaign fails."""
from __future__ import annotations

import asyncio
import json
import random
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from aiokafka import AIOKafkaConsumer, TopicPartition

from sluice.bus.topics import DEAD_LETTER
from sluice.client import SluiceClient
from sluice.eventlog.postgres import PostgresEventLog
from sluice.v1 import notifications_pb2 as npb
from sluice_services.streams import schedule_recorded
from tests.faults import load
from tests.faults.kinds import KINDS, Applied, Timing
from tests.faults.stack import Stack

ENDED = (npb.COMPLETED, npb.FAILED, npb.KILLED, npb.LOST)
RECOVERY_TIMEOUT = 180.0


@dataclass
class Outcome:
    seed: int
    applied: list[Applied] = field(default_factory=list)
    recoveries: list[float | None] = field(default_factory=list)
    catch_ups: list[float | None] = field(default_factory=list)
    accepted: int = 0
    lost: list[str] = field(default_factory=list)
    duplicate: list[str] = field(default_factory=list)
    dead_letters: list[str] = field(default_factory=list)
    rerun_after_host_death: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def max_recovery_s(self) -> float:
        return max((r for r in self.recoveries if r is not None), default=0.0)

    @property
    def max_catch_up_s(self) -> float:
        return max((r for r in self.catch_ups if r is not None), default=0.0)

    @property
    def failed(self) -> bool:
        return bool(self.lost or self.duplicate or self.dead_letters or self.problems)

    def line(self) -> str:
        return (f"fault-test: faults={len(self.applied)} lost={len(self.lost)} duplicate={len(self.duplicate)} "
                f"valid_dead_lettered={len(self.dead_letters)} max_recovery_s={self.max_recovery_s:.1f}")


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def plan(rng: random.Random, rounds: int, kinds: list[str]) -> list[str]:
    """Each kind `rounds` times, in a seeded random order."""
    order = [kind for kind in kinds for _ in range(rounds)]
    rng.shuffle(order)
    return order


def run(root: Path, seed: int, rounds: int, timing: Timing = Timing(), *, kinds: list[str] | None = None,
        interval: float = 1.0, lease_seconds: int = 6, disk_mb: int = 64, drain_timeout: float = 300.0,
        gap: tuple[float, float] = (2.0, 5.0)) -> Outcome:
    """Each of `kinds` (default all) `rounds` times in the seed's order, `gap` seconds apart (drawn), each
    once launches flowed again after the previous one; a notification every `interval` s meanwhile."""
    rng = random.Random(seed)
    outcome = Outcome(seed)
    order = plan(rng, rounds, kinds or list(KINDS))
    say(f"seed {seed}: {len(order)} faults: {', '.join(order)}; stack under {root}")
    with Stack(root, lease_seconds=lease_seconds, disk_mb=disk_mb) as stack:
        say(f"stack up: PostgreSQL :{stack.postgres.port}, Kafka {stack.kafka.bootstrap}, "
            + ", ".join(f"{name} {service.address}" for name, service in stack.services.items()))
        with SluiceClient(stack.address("registry"), timeout=30) as registry:
            schedule_id = load.deploy(registry, stack.ledger)
        observed = _wait(lambda: _matcher_observed(stack, schedule_id), 120)
        if not observed:
            outcome.problems.append("the matcher did not observe the schedule within 120 s")
            return outcome
        publisher = load.Publisher(stack.address("registry"), interval)
        publisher.start()
        started = time.time()
        if _wait(lambda: _launched_since(stack, publisher, started, True), 120) is None:
            outcome.problems.append("no launch within 120 s of the load starting")
        for index, kind in enumerate(order, 1):
            time.sleep(rng.uniform(*gap))
            applied = KINDS[kind](stack, rng, timing)
            recovery = _wait(lambda: _launched_since(stack, publisher, applied.cleared, False), RECOVERY_TIMEOUT, 0.1)
            caught_up = _wait(lambda: _launched_since(stack, publisher, applied.cleared, True), RECOVERY_TIMEOUT, 0.1)
            outcome.applied.append(applied)
            outcome.recoveries.append(recovery)
            outcome.catch_ups.append(caught_up)
            shown = [f"{r:.1f} s" if r is not None else f"NOT within {RECOVERY_TIMEOUT:.0f} s" for r in (recovery, caught_up)]
            say(f"fault {index}/{len(order)} {kind} ({applied.detail}): launches flow again after {shown[0]}, "
                f"a notification accepted after the fault cleared launched after {shown[1]}")
            if recovery is None or caught_up is None:
                outcome.problems.append(f"{kind} ({applied.detail}): launches did not flow again (for notifications "
                                        f"accepted after it) within {RECOVERY_TIMEOUT:.0f} s")
            for name, code in stack.exited().items():
                outcome.problems.append(f"{name} exited with {code} during or after {kind}; started again")
                say(f"{name} exited with {code}; starting it again")
                stack.start_service(name)
        publisher.stop()
        accepted = publisher.snapshot()
        outcome.accepted = len(accepted)
        say(f"load stopped: {len(accepted)} notifications accepted ({publisher.refusals} publish attempts refused "
            f"or timed out); draining")
        if not _wait(lambda: _drained(stack, accepted), drain_timeout, 2.0):
            outcome.problems.append(f"not drained {drain_timeout:.0f} s after the load stopped")
        time.sleep(5.0)  # a late duplicate would show now
        _judge(outcome, stack, accepted)
        outcome.dead_letters = asyncio.run(_dead_letters(stack.kafka.bootstrap))
    return outcome


def _wait(probe, timeout: float, interval: float = 0.5):
    """The probe's first non-None result within `timeout` s, else None."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = probe()
        if result is not None and result is not False:
            return result
        time.sleep(interval)
    return None


def _matcher_observed(stack: Stack, schedule_id: str) -> bool:
    log = PostgresEventLog(stack.event_log_url)
    try:
        return schedule_recorded(log, schedule_id)
    finally:
        log.close()


def ledger_lines(stack: Stack) -> list[dict]:
    if not stack.ledger.exists():
        return []
    return [json.loads(line) for line in stack.ledger.read_text().splitlines() if line.strip()]


def _launched_since(stack: Stack, publisher: load.Publisher, moment: float, fresh_only: bool) -> float | None:
    """Seconds from `moment` to the first program start after it (`fresh_only`: of a notification accepted
    at or after it, so after the backlog the fault left had gone through)."""
    fresh = publisher.accepted_since(moment) if fresh_only else None
    starts = [line["at"] for line in ledger_lines(stack) if line["what"] == "start" and line["at"] >= moment
              and (fresh is None or fresh.intersection(line["partitions"]))]
    return min(starts) - moment if starts else None


def _drained(stack: Stack, accepted: dict[str, float]) -> bool:
    ended = {partition for line in ledger_lines(stack) if line["what"] == "end" for partition in line["partitions"]}
    if not set(accepted) <= ended:
        return False
    try:
        with SluiceClient(stack.address("launcher"), timeout=10) as launcher:
            runs = launcher.list_runs()
    except grpc.RpcError:
        return False
    return len(runs) >= len(accepted) and all(run.status in ENDED for run in runs)


def _judge(outcome: Outcome, stack: Stack, accepted: dict[str, float]) -> None:
    lines = ledger_lines(stack)
    try:
        with SluiceClient(stack.address("launcher"), timeout=10) as launcher:
            runs = {run.id: run for run in launcher.list_runs()}
    except grpc.RpcError as error:
        outcome.problems.append(f"the launcher did not list its runs: {error.code()}")
        runs = {}
    ends: dict[str, list[dict]] = {}
    for line in lines:
        if line["what"] == "end":
            for partition in line["partitions"]:
                ends.setdefault(partition, []).append(line)
    starts = Counter((line["run_id"], line["attempt"]) for line in lines if line["what"] == "start")
    duplicate = [f"run {run} attempt {attempt} started {n} times" for (run, attempt), n in starts.items() if n > 1]
    completed = set()
    for partition, executions in sorted(ends.items()):
        counted = [line for line in executions if not _ended_with_its_host(line, runs, stack)]
        for line in executions:
            if line not in counted:
                death = stack.host_deaths[_host(line)]
                say(f"{partition}: run {line['run_id'][:8]} attempt {line['attempt']} ended {death - line['at']:.2f} s "
                    f"before its host {_host(line)} died, unrecorded; run again")
        if any((run := runs.get(line["run_id"])) is not None and run.status == npb.COMPLETED for line in counted):
            completed.add(partition)
        outcome.rerun_after_host_death += len(executions) - len(counted)
        if len(counted) > 1:
            duplicate.append(f"{partition} ran to its end {len(counted)} times: "
                             + ", ".join(f"run {line['run_id'][:8]} attempt {line['attempt']}" for line in counted))
    outcome.duplicate = duplicate
    outcome.lost = sorted(set(accepted) - completed)
    unexpected = sorted(set(ends) - set(accepted))
    if unexpected:
        outcome.problems.append(f"{len(unexpected)} runs of no accepted notification, e.g. {unexpected[:5]}")
    statuses = Counter(npb.RunStatus.Name(run.status) for run in runs.values())
    retried = sum(1 for line in lines if line["what"] == "start" and line["attempt"] > 1)
    say(f"runs: {dict(statuses)}; retried attempts started: {retried}; program starts: {sum(starts.values())}; "
        f"executions that ended but whose host died before its launcher recorded it (run again, not counted "
        f"duplicate): {outcome.rerun_after_host_death}")


def _ended_with_its_host(line: dict, runs: dict, stack: Stack) -> bool:
    """An execution that ended on a launcher host that then died before recording its end: the launcher
    taking over finds it LOST (its result is on the dead host) and runs it again, by design (issue 25:
    runs whose host died are marked LOST and retried by policy)."""
    host = _host(line)
    run = runs.get(line["run_id"])
    if host not in stack.host_deaths or run is None or len(run.attempts) < line["attempt"]:
        return False
    return run.attempts[line["attempt"] - 1].status == npb.LOST


def _host(line: dict) -> str:
    """The launcher data dir an execution ran under (its context file is in <data dir>/runs/...)."""
    parts = Path(line["context"]).parts
    return parts[parts.index("runs") - 1] if "runs" in parts else ""


async def _dead_letters(bootstrap: str) -> list[str]:
    """Every record on the dead-letter topic, read from the beginning to its end offsets (no group)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
    await consumer.start()
    try:
        partitions = (await consumer.topics()) and consumer.partitions_for_topic(DEAD_LETTER)
        if not partitions:
            return []
        assigned = [TopicPartition(DEAD_LETTER, p) for p in sorted(partitions)]
        consumer.assign(assigned)
        await consumer.seek_to_beginning(*assigned)
        ends = await consumer.end_offsets(assigned)
        found: list[str] = []
        deadline = time.monotonic() + 60
        while any(await consumer.position(tp) < ends[tp] for tp in assigned) and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=1000)).values():
                for record in records:
                    headers = {name: value.decode(errors="replace") for name, value in record.headers}
                    found.append(f"{headers.get('source-topic', '?')}: {headers.get('reason', '?')[:160]}")
        return found
    finally:
        await consumer.stop()
