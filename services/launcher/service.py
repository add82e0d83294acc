"""The launcher: one run per launch request, started with spark-submit, outputs published on success.
Each attempt is run by `attempts`; what the runs' events send, by `outbox_routes`."""
from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta
from pathlib import Path
from typing import Iterator

from sluice.bus.port import Record
from sluice.clock import Clock, epoch_micros
from sluice.domain import runs
from sluice.domain.lease import LeaseLost
from sluice.eventlog.codec import EventTypes, UndecodableEvent
from sluice.domain.runs import MarkLost, RequestCancel, RequestRun, Run
from sluice.eventlog.port import EventLog, RecordedEvent
from sluice.ids import UUID
from sluice.readmodels.retention import ListingKey, RetainedListing
from sluice.runtime.aggregates import AggregateStore, catch_up, execute
from sluice.domain.errors import FailedPrecondition, NotFound
from sluice.runtime.consumer import Pauses
from sluice.runtime.errors import MalformedMessage
from sluice.runtime.outbox import Outgoing
from sluice.runtime.timers import MAX_TIMER_SLEEP, run_timer_loop
from sluice.runtime.heap import collector_paused
from sluice.v1 import jobs_pb2
from sluice.wire.common import parse_bus_message
from sluice.wire.jobs import job_from_proto
from sluice_services.launcher import outbox_routes, run_control, run_logs
from sluice_services.launcher.attempts import Attempts
from sluice_services.launcher.program_api import ProgramApi
from sluice_services.launcher.programs import ProgramCatalog, ProgramFinder, ProgramSubmitter
from sluice_services.launcher.run_data import RunData
from sluice_services.launcher.lease import LeaseChange, LeaseKeeper, fenced_execute
from sluice_services.launcher.tracking import ProcessIdentity, kill_group
from sluice_services.catalogue import LAUNCHER

log = logging.getLogger(__name__)
LEASE_RETRY_SECONDS = 1.0
"""A lease step the log refused is tried again after this long (it stays due until it succeeds)."""

STREAM_PREFIX = LAUNCHER.stream_prefixes[0]
TYPES = EventTypes(runs.EVENTS)
SNAPSHOTS = LAUNCHER.snapshots
SNAPSHOT_VERSION = 4
"""The schema version of this service's snapshots (Loaded[Run | None] per run stream): bump it when
Run (or anything it holds) changes shape; a snapshot of another version is ignored and the
log folded instead."""
DEFAULT_FINISHED_RUNS_PER_SCHEDULE = 1_000
"""Ended runs the launcher keeps in memory per schedule, the newest by request time; the log keeps them all."""


class NotLeaseHolder(OSError):
    """This launcher does not hold the launcher lease (another live launcher does): it launches nothing.
    An OSError, so that the consumer treats it as infrastructure: the launch request is not consumed,
    it waits (the service not ready) and is handled once this launcher holds the lease."""


class LauncherService:
    def __init__(self, log: EventLog, clock: Clock, catalog: ProgramCatalog, submitter: ProgramSubmitter,
                 data_dir: Path, max_parallel: int = 2, run_data: RunData | None = None,
                 runs_history: int | None = DEFAULT_FINISHED_RUNS_PER_SCHEDULE, program_api: ProgramApi | None = None,
                 lease: LeaseKeeper | None = None,
                 run_dir_retention: timedelta = run_control.DEFAULT_RUN_DIR_RETENTION,
                 kill_grace_seconds: float = run_control.KILL_GRACE_SECONDS) -> None:
        """`runs_history`: ended runs kept per schedule (None: all); older ones are read from the log when asked for.
        `run_data`: the datasets service, which publishes a run's outputs and gives back what a failed run
        took (None: outputs are moved as files, announced by the run's completion; tests and offline tools).
        `program_api`: what programs are told to reach the Partitions API with (None: nothing).
        `lease`: the launcher lease this launcher owns runs through (None: it owns every run, unfenced,
        as a launcher alone on its log; tests and offline tools).
        `run_dir_retention`: how long the directory (context, driver logs) of an ended run is kept.
        `kill_grace_seconds`: between SIGTERM and SIGKILL of a cancelled run's program."""
        self._terminations = run_control.Terminations(kill_grace_seconds)
        self._sweeper = run_control.RunDirSweeper(self.runs_root_of(data_dir), self.get, run_dir_retention)
        self._lease = lease
        self._lease_failing = False
        self._run_data = run_data
        self._stepping_down: asyncio.Task | None = None
        self._infrastructure = Pauses("launcher's runs")
        self._log = log
        self._clock = clock
        self._finder = submitter if isinstance(submitter, ProgramFinder) else None
        self._data_dir = data_dir
        self._slots = asyncio.Semaphore(max_parallel)
        self._store: AggregateStore[Run | None] = AggregateStore(
            log, TYPES, runs.evolve, None, clock=clock, snapshot=SNAPSHOTS[0],
            snapshot_version=SNAPSHOT_VERSION, state_type=Run | None)
        self._tasks: set[asyncio.Task] = set()
        self._following: set[str] = set()
        self._processes: dict[str, ProcessIdentity] = {}
        """The program process of each run a task of this launcher started or re-attached to."""
        """Runs whose current attempt a task of this launcher starts or waits for."""
        self._kept = RetainedListing(runs_history)
        """The listing order of the runs kept in memory: every run not ended (what fire_due looks at,
        instead of every run ever), each schedule's newest ended ones."""
        self._timers_changed = asyncio.Event()
        self._attempts = Attempts(clock, catalog, submitter, data_dir, run_data, program_api, lease, self._terminations,
                                  self.get, lambda run_id, command: self._decide(run_id, command), self.attempt_dir,
                                  self._attached)  # _decide looked up per call, as before the split: tests replace it

    def recover(self) -> None:
        catch_up(self._log, self._store, STREAM_PREFIX, TYPES)
        with collector_paused():
            found = [run for run in self._store.states().values() if run is not None]
            kept = self._kept.index((listing_key(run), run.job.schedule_id, run.status.terminal) for run in found)
        for run_id in kept:
            self._store.forget(runs.stream_name(run_id))

    def resume(self) -> None:
        """Carry on with every run that has not ended: an attempt due now is started, unless the
        supervise wrapper's files show it started before the restart; then it is re-attached to
        (a live process is waited for, an ended one's exit code taken), or LOST if it vanished
        without one. Retries not due yet wait for `fire_due`. With a lease, only once this launcher
        holds it (`keep_lease` goes on trying); attempts of another home's epoch are LOST first."""
        if self._lease is None:
            self.fire_due()
            return
        try:
            acquired = self._lease.tick() is LeaseChange.ACQUIRED
        except UndecodableEvent:  # the lease stream holds an event this release cannot read: so would every try
            raise
        except Exception as error:  # the log unreachable: keep_lease tries again
            log.warning("launcher lease: %r; trying again", error)
            return
        if acquired:
            self._take_over(read_again=False)  # recovered just now, after the data dir's previous launcher ended

    # -- the lease ---------------------------------------------------------------------------------

    @property
    def holds_lease(self) -> bool:
        return self._lease is None or self._lease.holding

    async def keep_lease(self) -> None:
        """Renew the lease while holding it; stand by and take it over once it expired; step down when
        another launcher took it. Runs as long as the service does."""
        if self._lease is None:
            return
        while True:
            await self.lease_tick()
            delay = (self._lease.next_at() - self._clock.now()).total_seconds()
            if self._lease_failing:  # the step is still due: at once again, it would fail as fast as the log refuses
                delay = max(delay, LEASE_RETRY_SECONDS)
            await asyncio.sleep(max(0.0, min(delay, MAX_TIMER_SLEEP)))

    async def lease_tick(self) -> LeaseChange | None:
        """One step of `keep_lease`: renew when due, take over an expired lease, step down from a lost one."""
        try:
            change = self._lease.tick()
        except LeaseLost:
            change = LeaseChange.LOST
        except UndecodableEvent:
            raise
        except Exception as error:  # the log unreachable: tried again; the lease's expiry decides
            if not self._lease_failing:
                log.warning("launcher lease: %r; trying again every %.0f s", error, LEASE_RETRY_SECONDS)
            self._lease_failing = True
            return None
        if self._lease_failing:
            log.warning("launcher lease: the log answers again")
            self._lease_failing = False
        if change is LeaseChange.ACQUIRED:
            self._take_over(read_again=True)
        elif change is LeaseChange.LOST:
            await self.step_down()
        return change

    def _take_over(self, read_again: bool) -> None:
        """This launcher now owns the runs: read what the previous holder appended (`read_again`), then
        mark LOST every unfinished attempt owned by an epoch of another home (its processes cannot be
        seen from here; the retry policy decides what follows), and start or re-attach to the rest.
        With a datasets service, each such attempt is released there first (a task of its own): its
        launcher, resuming, can no longer publish it; one that published already completes the run."""
        if read_again:
            self.recover()
        for run in self._waiting():
            epoch = run.attempt.epoch
            if not epoch or self._lease.mine(epoch):
                continue  # this data dir's: its wrapper's files say what became of it
            home = self._lease.lease.home_of(epoch)
            reason = (f"its launcher (lease epoch {epoch}, {home or 'unknown home'}) lost the lease; "
                      f"its process cannot be seen from here")
            if self._run_data is not None:
                self._spawn(run, lost=reason)
                continue
            try:
                self._decide(run.id, MarkLost(reason))
            except LeaseLost:
                return
        self.fire_due()

    async def step_down(self) -> None:
        """Another launcher holds the lease: stop following runs (their transitions are its to record now,
        and it marks them LOST), and kill the programs this launcher started, so that a retry never
        runs beside them."""
        processes, tasks = list(self._processes.values()), list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for process in processes:
            kill_group(process)

    def fire_due(self) -> None:
        """Start (or re-attach to) every current attempt that is due and not followed yet."""
        if self._lease is not None and not self._lease.valid(self._clock.now()):
            return
        now = self._clock.now()
        for run in self._waiting():
            if run.due_at <= now:
                self._spawn(run)
        self._enforce_time_limits(now)
        self._sweeper.sweep_if_due(now)

    def next_wake_at(self) -> datetime | None:
        """The next attempt due or time limit; not the hourly sweep of run dirs, done by any pass once due."""
        wakes = [run.due_at for run in self._waiting()]
        wakes += [run.time_limit_at for run in self._unfinished() if run.time_limit_at is not None]
        return min(wakes, default=None)

    def _unfinished(self) -> list[Run]:
        found = (self.get(run_id) for _, run_id in self._kept.listing(unfinished_only=True))
        return [run for run in found if run is not None and not run.status.terminal]

    # -- cancel, time limits, run dirs --------------------------------------------------------------

    @property
    def runs_root(self) -> Path:
        return self.runs_root_of(self._data_dir)

    @staticmethod
    def runs_root_of(data_dir: Path) -> Path:
        return data_dir.parent / "runs"

    async def cancel(self, run_id: str, reason: str, requested_by: str, wait_seconds: float | None = None) -> Run:
        """Record the cancel, then kill the program (SIGTERM, SIGKILL after the grace); the run as it is once
        it ended KILLED, or after `wait_seconds` (default: the grace and 2 s more). NotFound, FailedPrecondition
        (the run ended: its status named)."""
        if self.get(run_id) is None:
            raise NotFound(f"run {run_id} does not exist")
        try:
            self._decide(run_id, RequestCancel(reason, requested_by))
        except LeaseLost as lost:
            raise FailedPrecondition(f"this launcher does not hold the launcher lease: {lost}") from lost
        self._stop(self.get(run_id))
        deadline = asyncio.get_running_loop().time() + (self._terminations.grace_seconds + 2 if wait_seconds is None
                                                        else wait_seconds)
        while not (run := self.get(run_id)).status.terminal and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)
        return run

    def _stop(self, run: Run) -> None:
        """Kill the program of a run being cancelled, if this launcher knows it: one a task follows, or (a
        run ended KILLED before its start was recorded) one its wrapper started before a restart."""
        process = self._processes.get(run.id)
        if process is None and run.status.terminal and run.id not in self._following and self._finder is not None:
            found = self._finder.find(self.attempt_dir(run))
            process = ProcessIdentity(found.pid, found.process_start) if found is not None else None
        if process is None:
            return  # a task that attaches to it later kills it (_attached)
        self._terminations.start(process)

    def _attached(self, run_id: str, process: ProcessIdentity) -> None:
        """This launcher follows the run's program now: killed at once if the run is being cancelled."""
        self._processes[run_id] = process
        self._timers_changed.set()  # its time limit may be the next thing due
        run = self.get(run_id)
        if run is not None and run.cancel is not None:
            self._stop(run)

    def _enforce_time_limits(self, now: datetime) -> None:
        for run in self._unfinished():
            if (cancel := runs.time_limit_cancel(run, now)) is None or run.id not in self._following:
                continue
            try:
                self._decide(run.id, cancel)
            except LeaseLost:
                return
            self._stop(self.get(run.id))

    async def delete_old_run_dirs(self) -> list[str]:
        """Delete the directories of runs ended longer than the retention ago; the run ids."""
        return await self._sweeper.sweep(self._clock.now())

    def _waiting(self) -> list[Run]:
        """Unfinished runs no task follows, oldest first."""
        found = (self.get(run_id) for _, run_id in self._kept.listing(unfinished_only=True) if run_id not in self._following)
        return [run for run in found if run is not None and not run.status.terminal]

    async def run_timers(self) -> None:
        await run_timer_loop(self._clock, self.fire_due, self.next_wake_at, self._timers_changed)

    def runs(self, schedule_id: str = "") -> list[Run]:
        """The runs kept in memory (of the schedule, when given), oldest first."""
        return [run for _, run in self.listing(schedule_id)]

    def listing(self, schedule_id: str = "", after: ListingKey | None = None) -> Iterator[tuple[ListingKey, Run]]:
        """(key, run) of the runs kept, oldest first (request time, then id), after `after`."""
        return ((key, self.get(key[1])) for key in self._kept.listing(schedule_id, after))

    def get(self, run_id: str) -> Run | None:
        """Any run: one the launcher let go of is read from the log, and not kept."""
        return self._store.peek(runs.stream_name(run_id)).state

    def attempt_dir(self, run: Run) -> Path:
        """Where the current attempt's files live: runs/<run id> for the first, runs/<run id>/attempt-<n> after."""
        return run_logs.attempt_dir(self.runs_root, run.id, run.attempt.number)

    async def on_launch_requested(self, record: Record) -> None:
        message = parse_bus_message(jobs_pb2.LaunchRequested, record.value)
        if not UUID.fullmatch(message.job.id):
            raise MalformedMessage(f"job.id: must be a UUID, got {message.job.id[:64]!r}")
        job = job_from_proto(message.job)
        run_id = runs.run_id_for(job.id)
        if self._lease is not None and not self._lease.valid(self._clock.now()):
            raise NotLeaseHolder(f"launcher {self._lease.owner} does not hold the launcher lease")
        try:
            requested = self._decide(run_id, RequestRun(job))
        except LeaseLost as lost:
            await self.step_down()
            raise NotLeaseHolder(str(lost)) from lost
        if requested:
            self._spawn(self.get(run_id))

    async def drain(self) -> None:
        """Wait for the runs this launcher follows and a sweep of run dirs going on (tests, orderly shutdown);
        retries not due yet are not waited for."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        await self._sweeper.finished()

    def _spawn(self, run: Run, lost: str = "") -> None:
        """Start (or re-attach to) its current attempt; or (`lost`, the reason) end it LOST."""
        self._following.add(run.id)
        task = asyncio.create_task(self._end_lost(run, lost) if lost else self._launch(run))
        self._tasks.add(task)

        def done(finished: asyncio.Task) -> None:
            self._tasks.discard(finished)
            self._following.discard(run.id)
            self._processes.pop(run.id, None)
            self._timers_changed.set()  # a retry may be due later
        task.add_done_callback(done)

    async def _launch(self, run: Run) -> None:
        async with self._slots:
            try:
                try:  # the log or the bus failing is waited out: the same steps again find where the run got to
                    await self._infrastructure.retrying(f"run {run.id}", lambda: self._attempts.execute_current(run))
                except (asyncio.CancelledError, LeaseLost):
                    raise
                except Exception as error:  # whatever went wrong, the attempt ends FAILED with the reason
                    log.exception("run %s failed to launch", run.id)
                    await self._attempts.end_failed(run, f"launcher error: {error!r}")
            except LeaseLost:
                log.warning("run %s: this launcher lost the lease; it records nothing more", run.id)
                self._stepping_down = asyncio.get_running_loop().create_task(self.step_down())


    async def _end_lost(self, run: Run, reason: str) -> None:
        """No slot: nothing is started, the attempt's end is told the datasets service and recorded."""
        try:
            try:
                await self._infrastructure.retrying(f"run {run.id}", lambda: self._attempts.end_lost(run, reason))
            except (asyncio.CancelledError, LeaseLost):
                raise
            except Exception:  # the datasets service refused: the attempt is LOST all the same
                log.exception("run %s: releasing its attempt of another home failed", run.id)
                self._decide(run.id, MarkLost(reason))
        except LeaseLost:
            log.warning("run %s: this launcher lost the lease; it records nothing more", run.id)
            self._stepping_down = asyncio.get_running_loop().create_task(self.step_down())

    def _decide(self, run_id: str, command: runs.RunCommand) -> list:
        now = self._clock.now()
        if self._lease is None:
            run, events = execute(self._store, self._log, runs.stream_name(run_id),
                                  lambda r: runs.decide(r, command, now))
        else:
            run, events = fenced_execute(self._store, self._log, self._lease, runs.stream_name(run_id),
                                         lambda r: runs.decide(r, command, now, self._lease.epoch))
        if run is not None:
            self._keep(run)
        return events

    def _keep(self, run: Run) -> None:
        """Into the listing: a new run, one another launcher wrote, or an old one read back from the log
        (a launch request sent again), which its `finish` forgets again."""
        key, schedule_id = listing_key(run), run.job.schedule_id
        if not self._kept.keeps(key, schedule_id):
            self._kept.add(key, schedule_id)
        if run.status.terminal:
            for run_id in self._kept.finish(key, schedule_id):
                self._store.forget(runs.stream_name(run_id))

    def route(self, recorded: RecordedEvent) -> list[Outgoing]:
        if not recorded.stream.startswith(STREAM_PREFIX) or recorded.type not in TYPES:
            return []
        event = TYPES.decode(recorded)
        run = self.get(event.run_id)
        return outbox_routes.outgoing(recorded, event, self.get(event.run_id), self.attempt_dir)


def listing_key(run: Run) -> ListingKey:
    """Runs are listed by request time, then id."""
    return epoch_micros(run.requested_at), run.id
