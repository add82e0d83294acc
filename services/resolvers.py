"""Where the namespace of a request addressed by id is found, per service (ServiceSpec.resolvers):
the authorization interceptor asks these for GetSchedule, GetRun, ListJobs of a schedule,
ReleaseCommitSequence... (sluice.runtime.permissions names them). An id nothing here knows is
UNRESOLVED: the caller then needs the permission on some namespace, and the service answers NOT_FOUND."""
from __future__ import annotations

from sluice.domain.consumer.serialization import ConsumerStateError, state_from_bytes
from sluice.readmodels.jobs import JobsView
from sluice.runtime.access import ANY_NAMESPACE
from sluice.domain.errors import InvalidArgument, NotFound
from sluice.runtime.permissions import (
    BACKFILL,
    COMMIT_SEQUENCE,
    CONSUMER_STATE,
    RUN,
    SCHEDULE,
    SCHEDULE_JOBS,
    SCHEDULE_RUNS,
    UNRESOLVED,
    Resolver,
    Target,
)
from sluice_services.checker.service import CheckerService
from sluice_services.datasets.service import DatasetsService
from sluice_services.launcher.service import LauncherService
from sluice_services.registry.service import RegistryService


def registry_resolvers(registry: RegistryService) -> dict[str, Resolver]:
    def schedule(schedule_id: str) -> list[Target]:
        try:
            return [Target(registry.get(schedule_id).program.namespace)]
        except (NotFound, InvalidArgument):
            return [UNRESOLVED]
    return {SCHEDULE: schedule}


def checker_resolvers(jobs: JobsView, checker: CheckerService) -> dict[str, Resolver]:
    def schedule_jobs(schedule_id: str) -> list[Target]:
        """The namespace of the schedule as the checker knows it, else of its first fired job; every
        namespace when none fired yet (the view does not know where a job waiting for its trigger belongs)."""
        known = checker.definition(schedule_id)
        if known is not None:
            return [Target(known.program.namespace)]
        seen = False
        for _, view in jobs.listing(schedule_id):
            seen = True
            job = view.job
            if job is not None:
                return [Target(job.program.namespace)]
        return [Target(ANY_NAMESPACE)] if seen else [UNRESOLVED]
    def backfill(backfill_id: str) -> list[Target]:
        found = checker.state.requested.backfills.get(backfill_id)
        known = checker.definition(found.schedule_id) if found is not None else None
        return [Target(known.program.namespace)] if known is not None else [UNRESOLVED]

    return {SCHEDULE_JOBS: schedule_jobs, BACKFILL: backfill}


def launcher_resolvers(launcher: LauncherService) -> dict[str, Resolver]:
    def run(run_id: str) -> list[Target]:
        found = launcher.get(run_id)
        return [Target(found.job.program.namespace)] if found is not None else [UNRESOLVED]

    def schedule_runs(schedule_id: str) -> list[Target]:
        for _, found in launcher.listing(schedule_id):
            return [Target(found.job.program.namespace)]
        return [UNRESOLVED]

    return {RUN: run, SCHEDULE_RUNS: schedule_runs}


def datasets_resolvers(data_plane: DatasetsService) -> dict[str, Resolver]:
    def consumer_state(state: bytes) -> list[Target]:
        try:
            consumer = state_from_bytes(state).consumer
        except ConsumerStateError:
            return [UNRESOLVED]
        return [Target(consumer.namespace, consumer.dataset)]

    def commit_sequence(sequence_id: str) -> list[Target]:
        progress = data_plane.commits.progress(sequence_id)
        if progress is None:
            return [UNRESOLVED]
        return [Target(*name.split(".", 1)) if "." in name else Target(ANY_NAMESPACE)
                for name in progress.sequence.datasets] or [Target(ANY_NAMESPACE)]

    return {CONSUMER_STATE: consumer_state, COMMIT_SEQUENCE: commit_sequence}
