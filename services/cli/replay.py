"""`sluice replay SERVICE --until POSITION`: a service's state rebuilt offline from the log as it
was at a position, by the service's own recovery on a read-only view of the log; `--diff` shows
what changed between that position and the head."""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from sluice.clock import SystemClock
from sluice.eventlog.port import EventLog
from sluice.eventlog.truncated import LogUntil
from sluice_services.catalogue import NAMES
from sluice_services.cli.offline import OperatorError, add_sources, offline, open_log


def add_command(commands: argparse._SubParsersAction) -> None:
    replay = commands.add_parser("replay", help="a service's state rebuilt from the log up to a position (offline)")
    replay.add_argument("service", choices=NAMES)
    replay.add_argument("--until", type=int, metavar="POSITION", help="the last position to fold (default: the head)")
    replay.add_argument("--diff", action="store_true", help="show what differs between --until and the head")
    add_sources(replay)
    replay.set_defaults(handler=offline(_replay), server_mode=True)


def _replay(settings, args) -> int:
    log = open_log(settings)
    try:
        head = log.head_position()
        until = head if args.until is None else args.until
        if not 0 <= until <= head:
            raise OperatorError(f"--until: position {until} is outside the log (0 to {head})")
        state = service_state(args.service, LogUntil(log, until))
        report: Any = diff(state, service_state(args.service, log)) if args.diff else state
    finally:
        log.close()
    print(json.dumps(report, indent=2, sort_keys=True) if args.json else _text(args.service, until, report, args.diff))
    return 0


def service_state(service: str, log: EventLog) -> dict[str, Any]:
    """What the service knows after recovering from `log`, as plain data keyed by entity id."""
    clock = SystemClock()
    match service:
        case "registry":
            from sluice_services.registry.service import RegistryService

            registry = RegistryService(log, clock)
            registry.recover()
            return {s.id: {"name": s.name, "program": s.program.qualified(), "generation": s.generation,
                           "enabled": s.enabled} for s in registry.list()}
        case "matcher":
            from sluice_services.matcher.service import MatcherService

            matcher = MatcherService(log, clock)
            matcher.recover()
            return {schedule_id: {"schedule": state.schedule.name if state.schedule else None,
                                  "pending_job": state.pending.job_id if state.pending else None,
                                  "notifications": len(state.pending.trigger.notifications) if state.pending else 0,
                                  "jobs_created": state.jobs_created}
                    for schedule_id, state in matcher.states().items()}
        case "checker":
            from sluice_services.checker.service import CheckerService

            checker = CheckerService(log, clock)
            checker.recover()
            state = checker.state
            return {**{f"job {job_id}": {"schedule": queued.job.schedule_id, "checked": queued.checked}
                       for job_id, queued in sorted(state.queue.items())},
                    **{f"running {program.qualified()}": state.world.running(program) for program in state.world.runs}}
        case "datasets":
            from sluice_services.datasets.service import DatasetsService

            datasets = DatasetsService(log, clock)
            datasets.recover()
            return {**{f"dataset {spec.namespace}.{spec.name}": {
                           "transactions": datasets.datasets.next_position(spec.namespace, spec.name)}
                       for spec in datasets.datasets.list("")},
                    **{f"commit {p.sequence.id}": {"run": p.sequence.run_id, "status": p.status.value}
                       for p in datasets.commits.sequences()}}
        case "launcher":
            from sluice_services.launcher.programs import DirectoryCatalog, SparkSubmitter
            from sluice_services.launcher.service import LauncherService

            launcher = LauncherService(log, clock, DirectoryCatalog(Path(".")), SparkSubmitter(), Path("."),
                                       runs_history=None)  # every run, not only those a service keeps
            launcher.recover()
            return {run.id: {"job": run.job.id, "program": run.job.program.qualified(), "status": run.status.value}
                    for run in launcher.runs()}
        case "lineage":
            from sluice_services.lineage.service import LineageService

            lineage = LineageService(log, clock)
            lineage.rebuild()
            return {run_id: {"job": f"{run.job_namespace}:{run.job_name}", "state": run.state}
                    for run_id, run in lineage.state.runs.items()}
        case "alerts":
            from sluice_services.alerts.service import AlertsService

            alerts = AlertsService(log, clock)
            alerts.recover()
            state = alerts.state
            return {**{f"policy {schedule_id}": {"sla": type(w.policy.sla).__name__ if w.policy.sla else None,
                                                 "next_deadline": w.next_deadline.isoformat() if w.next_deadline else None,
                                                 "jobs_watched": len(w.jobs)}
                       for schedule_id, w in state.watches.items()},
                    **{f"delivery {d.id}": {"schedule": d.schedule_id, "attempts": d.attempts}
                       for d in state.deliveries.values()},
                    "sla_misses": len(state.misses)}
    raise ValueError(f"unknown service {service!r}")


def diff(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """Entities added, removed or changed from `before` (at --until) to `after` (at the head)."""
    return {key: {"at_until": before.get(key), "at_head": after.get(key)}
            for key in sorted(before.keys() | after.keys()) if before.get(key) != after.get(key)}


def _text(service: str, until: int, report: dict[str, Any], is_diff: bool) -> str:
    title = f"{service}: {'changes from position ' + str(until) + ' to the head' if is_diff else 'state at position ' + str(until)}"
    lines = [title, ""] + [f"{key}  {json.dumps(value, sort_keys=True)}" for key, value in sorted(report.items())]
    return "\n".join(lines if report else [title, "", "(nothing)"])
