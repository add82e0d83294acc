"""`sluice apps deploy`, `sluice jobs ...` and `sluice runs ...`. A schedule or run ID may be a unique
prefix of it (the 8 characters the tables show)."""
from __future__ import annotations

import argparse

from google.protobuf import json_format

from sluice.cli import describe, ids, render, run_control
from sluice.cli.output import UsageError, print_many, print_message
from sluice.cli import apps as apps_cli
from sluice.client import SluiceClient
from sluice.v1 import jobs_pb2, notifications_pb2, schedules_pb2


def register(commands) -> None:
    apps = commands.add_parser("apps", help="deploy, list, pause and delete apps").add_subparsers(metavar="ACTION")
    deploy = apps.add_parser("deploy", help="deploy an app with its programs and schedules",
                             description="FILE holds a DeployAppRequest as JSON: namespace, app, programs, schedules. "
                                         "A deployment that would delete schedules it does not name is refused with "
                                         "their names unless --prune (or --yes) is given.")
    deploy.add_argument("file", type=argparse.FileType("r"))
    deploy.add_argument("--no-update-schedules", dest="update_schedules", action="store_false",
                        help="leave existing schedules alone (only schedules of programs the app no longer has are "
                             "deleted; a first deployment creates the app's schedules that do not exist yet)")
    deploy.add_argument("--prune", "--yes", dest="prune", action="store_true",
                        help="allow deleting the app's schedules the file does not name")
    deploy.set_defaults(handler=_deploy_app)
    apps_cli.register(apps)

    jobs = commands.add_parser("jobs", help="inspect jobs").add_subparsers(metavar="ACTION")
    jobs_list = jobs.add_parser("list", help="jobs, with what each pending one waits for and its next check")
    jobs_list.add_argument("--schedule", default="", help="only this schedule's (id or unique prefix)")
    jobs_list.add_argument("--pending", action="store_true", help="only jobs not launched or discarded yet")
    jobs_list.set_defaults(handler=_list_jobs)
    jobs_history = jobs.add_parser("history", help="every transition of a schedule's jobs, with its cause")
    jobs_history.add_argument("--schedule", required=True, help="the schedule's id or a unique prefix of it")
    jobs_history.set_defaults(handler=_job_history)

    runs = commands.add_parser("runs", help="inspect runs").add_subparsers(metavar="ACTION")
    runs_list = runs.add_parser("list", help="runs: status, duration, rows written, the error's first line")
    runs_list.add_argument("--schedule", default="", help="only this schedule's (id or unique prefix)")
    runs_list.set_defaults(handler=_list_runs)
    runs_get = runs.add_parser("get", help="one run in full (JSON): inputs, outputs, attempts")
    runs_get.add_argument("id", help="the run's id or a unique prefix of it")
    runs_get.set_defaults(handler=_get_run)
    run_control.register(runs)


def _deploy_app(client: SluiceClient, args) -> int:
    try:
        request = json_format.Parse(args.file.read(), schedules_pb2.DeployAppRequest())
    except json_format.ParseError as error:
        raise UsageError(f"{args.file.name}: not a DeployAppRequest: {error}") from error
    if not args.update_schedules:
        request.update_schedules = False
    if args.prune:
        request.prune = True
    response = client.schedules.DeployApp(request, timeout=30)
    if args.json:
        return print_message(args, response)
    deleted = f": {', '.join(response.deleted)}" if response.deleted else ""
    print(f"deployed {request.namespace}.{request.app}: created {len(response.created)}, "
          f"updated {len(response.updated)}, deleted {len(response.deleted)} schedule(s){deleted}")
    return 0


def _schedule_filter(client: SluiceClient, given: str) -> str:
    return ids.schedule_id(client, given, with_history=True) if given else ""


def _list_jobs(client: SluiceClient, args) -> int:
    found = client.list_jobs(_schedule_filter(client, args.schedule), args.pending)
    triggers = {}
    if not args.json and any(j.state == jobs_pb2.PENDING_TRIGGER for j in found):
        triggers = {s.id: s.trigger for s in client.list_schedules()}
    rows = [(j.id[:8], j.schedule_id[:8], jobs_pb2.JobState.Name(j.state), render.when(j.created_at),
             render.when(j.updated_at), render.when(j.next_check), _waiting(j, triggers)) for j in found]
    return print_many(args, found, render.table(
        ("JOB", "SCHEDULE", "STATE", "CREATED", "UPDATED", "NEXT CHECK", "WAITING ON / REASON"), rows))


def _waiting(job: jobs_pb2.Job, triggers: dict) -> str:
    if job.state == jobs_pb2.PENDING_TRIGGER and not job.reason:
        trigger = triggers.get(job.schedule_id)
        if trigger is None:
            return "trigger (schedule deleted)"
        partitions = {(m.namespace, m.dataset): m.partitions for m in job.partitions_matched}
        return "trigger: " + describe.waiting_for(trigger, job.created_at, job.updated_at, job.notifications_matched,
                                                  partitions)
    return job.reason or "-"


def _job_history(client: SluiceClient, args) -> int:
    found = client.list_jobs(_schedule_filter(client, args.schedule))
    rows = [(j.id[:8], render.when(t.at), jobs_pb2.JobState.Name(t.state), t.cause) for j in found for t in j.history]
    return print_many(args, found, render.table(("JOB", "AT", "STATE", "CAUSE"), rows))


def _list_runs(client: SluiceClient, args) -> int:
    found = client.list_runs(_schedule_filter(client, args.schedule))
    rows = [(r.id[:8], r.job_id[:8], f"{r.program.app}.{r.program.program}",
             notifications_pb2.RunStatus.Name(r.status), render.when(r.started_at),
             render.duration(r.started_at, r.ended_at), sum(o.partition.record_count for o in r.outputs),
             r.spark_application_id or "-", _error_cell(r.error)) for r in found]
    return print_many(args, found, render.table(
        ("RUN", "JOB", "PROGRAM", "STATUS", "STARTED", "DURATION", "ROWS OUT", "SPARK APP", "ERROR"), rows))


def _error_cell(error: str, width: int = 80) -> str:
    """The error's first part with the exception line leading: `exit code 1: ValueError: bad input`."""
    if not error:
        return "-"
    lead = describe.error_lead(error).split(" | ")[0]
    return lead if len(lead) <= width else lead[:width - 3] + "..."


def _get_run(client: SluiceClient, args) -> int:
    run = client.get_run(ids.run_id(client, args.id))
    if run.error:
        run.error = describe.error_lead(run.error)
    return print_message(args, run)

