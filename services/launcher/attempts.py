"""One attempt of a run, from its start (or re-attaching to it after a launcher restart) to its end
recorded: its program started with the run's context, waited for, and its outputs published (or what it
consumed released) once it ended. The launcher (`sluice_services.launcher.service`) decides when."""
from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Callable

from sluice.clock import Clock
from sluice.datasets.files import PublishError, inputs_of, publish_outputs, read_program_file, read_result
from sluice.domain import runs
from sluice.domain.common import RunStatus
from sluice.domain.errors import FailedPrecondition, InvalidArgument
from sluice.domain.lease import LeaseLost
from sluice.domain.runs import MarkCompleted, MarkFailed, MarkLost, MarkSparkApplication, MarkStarted, Run
from sluice.sdk.partitions import CONSUMED_FILE
from sluice_services.launcher import run_control, spark_application
from sluice_services.launcher.context_file import LeftByAProgram, build_context, private_dir, write_context
from sluice_services.launcher.lease import LeaseKeeper
from sluice_services.launcher.program_api import ProgramApi
from sluice_services.launcher.programs import ProgramCatalog, ProgramFinder, ProgramProcess, ProgramSubmitter
from sluice_services.launcher.run_data import RunData
from sluice_services.launcher.run_logs import DRIVER_LOG, lead_then_tail
from sluice_services.launcher.tracking import ProcessIdentity, kill_group

log = logging.getLogger(__name__)

WRAPPER_STARTING_POLL = 0.02


class Attempts:
    """Runs a run's current attempt to its end. `decide` records a run's transition (the launcher's,
    fenced by its lease), `attached` tells the launcher which process an attempt's program is."""

    def __init__(self, clock: Clock, catalog: ProgramCatalog, submitter: ProgramSubmitter, data_dir: Path,
                 run_data: RunData | None, program_api: ProgramApi | None, lease: LeaseKeeper | None,
                 terminations: run_control.Terminations, get: Callable[[str], Run | None],
                 decide: Callable[[str, runs.RunCommand], list], attempt_dir: Callable[[Run], Path],
                 attached: Callable[[str, ProcessIdentity], None]) -> None:
        self._clock = clock
        self._catalog = catalog
        self._submitter = submitter
        self._finder = submitter if isinstance(submitter, ProgramFinder) else None
        self._data_dir = data_dir
        self._run_data = run_data
        self._program_api = program_api
        self._lease = lease
        self._terminations = terminations
        self._get = get
        self._decide = decide
        self._attempt_dir = attempt_dir
        self._attached = attached

    async def execute_current(self, run: Run) -> None:
        current = self._get(run.id) or run
        if not current.status.terminal:
            await self._execute(current)

    async def end_lost(self, run: Run, reason: str) -> None:
        """The current attempt of a launcher that lost the lease (its process cannot be seen from here) is
        LOST; its end is told the datasets service first, so that its launcher, resuming, cannot publish
        it any more; or, if it published already, the run COMPLETED with what it published."""
        current = self._get(run.id) or run
        if not current.status.terminal and current.attempt.number == run.attempt.number:
            await self._lost(current, self._attempt_dir(current), reason)

    async def end_failed(self, run: Run, error: str) -> None:
        """The launcher's own error ended the attempt `run` was launched for: FAILED with `error`, what it took
        released first as on every other failure (or COMPLETED, if it had published). A release that fails
        too is logged and not tried again: the run fails all the same, with `error`."""
        current = self._get(run.id) or run
        if not current.status.terminal and current.attempt.number == run.attempt.number:  # not one that ended
            try:
                if await self._released(current, self._attempt_dir(current), error):
                    return
            except (asyncio.CancelledError, LeaseLost):
                raise
            except Exception:
                log.exception("run %s, attempt %d: releasing what it took failed", run.id, run.attempt.number)
        self._decide(run.id, MarkFailed(error))

    async def _execute(self, run: Run) -> None:
        attempt_dir = self._attempt_dir(run)
        found = await self._find(run, attempt_dir)
        if found is not None:  # started before the launcher restarted
            self._attached(run.id, ProcessIdentity(found.pid, found.process_start))
            if run.status is RunStatus.STARTING:  # ... and it stopped before recording that
                self._decide(run.id, MarkStarted(found.pid, found.process_start))
            exit_code = await self._wait(run.id, attempt_dir, found)
        elif run.status is RunStatus.RUNNING:
            exit_code = None  # nothing to find it by
        else:
            process = await self._start(run, attempt_dir)
            if process is None:
                return
            self._attached(run.id, ProcessIdentity(process.pid, process.process_start))
            exit_code = await self._wait(run.id, attempt_dir, process)
        cancel = (self._get(run.id) or run).cancel
        if cancel is not None:  # whatever its exit, the run ends KILLED (its outputs are not published)
            await self._failed(run, attempt_dir, f"killed: {cancel.reason}")
        elif exit_code is None:
            await self._lost(run, attempt_dir, "the launcher restarted while the run was going" if found is None
                             else f"its process {found.pid} ended without an exit status")
        elif exit_code != 0:
            await self._failed(run, attempt_dir,
                               f"exit code {exit_code}: {lead_then_tail(attempt_dir / DRIVER_LOG)}")
        else:
            await self._publish(run, attempt_dir)

    async def _wait(self, run_id: str, attempt_dir: Path, process: ProgramProcess) -> int | None:
        """The program's exit code; meanwhile the Spark application its driver reports is recorded."""
        ended = asyncio.ensure_future(process.wait())
        watching = asyncio.ensure_future(spark_application.watch(
            attempt_dir, lambda application_id, ui_url: self._spark_application(run_id, application_id, ui_url), ended))
        try:
            exit_code = await ended
            await watching
            return exit_code
        finally:
            watching.cancel()

    def _spark_application(self, run_id: str, application_id: str, ui_url: str) -> None:
        try:
            self._decide(run_id, MarkSparkApplication(application_id, ui_url))
        except Exception as error:  # observed, never decisive: the run goes on and ends as its program does
            log.warning("run %s: Spark application %s not recorded: %r", run_id, application_id, error)

    async def _find(self, run: Run, attempt_dir: Path) -> ProgramProcess | None:
        if self._finder is None:
            return None
        recorded = ProcessIdentity(run.attempt.pid or 0, run.attempt.process_start)
        while (found := self._finder.find(attempt_dir)) is None and run.status is RunStatus.RUNNING \
                and recorded.process_start and recorded.alive():
            await asyncio.sleep(WRAPPER_STARTING_POLL)  # recorded started, its wrapper has not claimed yet
        return found

    async def _start(self, run: Run, attempt_dir: Path) -> ProgramProcess | None:
        """Start the attempt; None if its program's entry point is missing (the run FAILED naming it)."""
        try:
            entry_point = self._catalog.entry_point(run.job.program)
        except InvalidArgument as refused:  # a name outside the identifier rule, a file outside the apps dir
            self._decide(run.id, MarkFailed(f"program {run.job.program.qualified()!r} refused: {refused}",
                                            retryable=False))
            return None
        if entry_point is None:
            expected = getattr(self._catalog, "expected", None)
            where = f": no file {expected(run.job.program)}" if expected else ""
            self._decide(run.id, MarkFailed(f"program {run.job.program.qualified()} has no entry point{where}",
                                            retryable=False))
            return None
        try:
            private_dir(self._data_dir.parent / "runs" / run.id)
            private_dir(attempt_dir)
            context_path = attempt_dir / "context.json"
            context = build_context(run.id, run.job, self._data_dir, attempt_dir, run.attempt.number)
            context["system"].update(await self._program_api.context_for(run) if self._program_api else {})
            write_context(context_path, context)
            if self._lease is not None and not self._lease.valid(self._clock.now()):
                raise LeaseLost(f"the lease of {self._lease.owner} expired before run {run.id} could start")
            process = await self._submitter.submit(entry_point, context_path, attempt_dir / DRIVER_LOG,
                                                   dict(run.job.spark_conf))
        except InvalidArgument as refused:  # a schedule's Spark setting the launcher will not pass on
            self._decide(run.id, MarkFailed(f"Spark settings refused: {refused}", retryable=False))
            return None
        except LeftByAProgram as left:  # by an earlier attempt's program, which owned the directory
            self._decide(run.id, MarkFailed(f"the attempt's directory was tampered with: {left}", retryable=False))
            return None
        try:
            started = self._decide(run.id, MarkStarted(process.pid, process.process_start))
        except LeaseLost:  # the new owner takes the attempt for LOST and retries it: this copy must not run
            kill_group(ProcessIdentity(process.pid, process.process_start))
            raise
        if not started and (self._get(run.id) or run).status.terminal:  # cancelled while it was being started
            await run_control.terminate(ProcessIdentity(process.pid, process.process_start), self._terminations.grace_seconds)
            return None
        return process

    async def _publish(self, run: Run, attempt_dir: Path) -> None:
        try:
            result = read_result(attempt_dir / "result.json")
            said_read = inputs_of(result)  # before anything is published: a malformed result publishes nothing
            outputs = (await self._run_data.publish(run.id, result, run.attempt.number) if self._run_data
                       else publish_outputs(result, self._data_dir))
        except (PublishError, KeyError) as error:
            await self._failed(run, attempt_dir, f"publishing outputs failed: {error}", retryable=False)
            return
        self._decide(run.id, MarkCompleted(outputs, said_read or _triggering_inputs(run)))

    async def _lost(self, run: Run, attempt_dir: Path, reason: str) -> None:
        if not await self._released(run, attempt_dir, reason):
            self._decide(run.id, MarkLost(reason))

    async def _failed(self, run: Run, run_dir: Path, error: str, retryable: bool = True) -> None:
        if not await self._released(run, run_dir, error):  # partitions it consumed are retried
            self._decide(run.id, MarkFailed(error, retryable))

    async def _released(self, run: Run, run_dir: Path, reason: str) -> bool:
        """Release what the attempt took; False. True when the datasets service answers that the attempt
        published its outputs already (a launcher stopped, or lost its lease, before recording it): the
        run's completion is recorded instead of its failure."""
        if self._run_data is None:
            return False
        try:
            taken = json.loads(read_program_file(run_dir / CONSUMED_FILE))
        except (OSError, ValueError, PublishError):
            taken = []  # it took nothing (or died before saying so: the consumer's timeout hands them out again)
        try:
            published = await self._run_data.release(run.id, taken, reason, run.attempt.number)
        except FailedPrecondition as refused:  # another attempt published: this one's end is recorded as it was
            log.warning("run %s, attempt %d: %s", run.id, run.attempt.number, refused)
            return False
        if published is None:
            return False
        self._decide(run.id, MarkCompleted(published, _triggering_inputs(run)))
        return True


def _triggering_inputs(run: Run) -> tuple[runs.InputPartition, ...]:
    return tuple(runs.InputPartition(ns, ds, p) for ns, ds, p in run.job.context.partitions())
