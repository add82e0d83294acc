"""The `sluice` command line's client commands (they talk to a running server over gRPC).

The server-side commands (`standalone`, `serve`, `log`, `dlq`, `replay`, `rebuild`) need the services
and live with them: sluice_services.cli builds on `build_parser` and is the `sluice` console script."""
from __future__ import annotations

import argparse
import json
import sys
import uuid
from typing import Callable

import grpc
from google.protobuf import duration_pb2, json_format

from sluice.cli import auth as auth_cli
from sluice.cli import datasets as datasets_cli
from sluice.cli import render
from sluice.cli.output import UsageError, pairs, print_many, print_message
from sluice.client import SluiceClient, default_server
from sluice.domain.common import PartitionRef
from sluice.domain.jobs import DEFAULT_RETRY_POLICY
from sluice.v1 import jobs_pb2, notifications_pb2, schedules_pb2

AddCommands = Callable[[argparse._SubParsersAction], None]
"""Adds subcommands to the `sluice` parser's COMMAND list."""


def main(argv: list[str] | None = None) -> int:
    """The client commands alone; `sluice` itself is sluice_services.cli.main."""
    return run(build_parser(), argv)


def run(parser: argparse.ArgumentParser, argv: list[str] | None = None) -> int:
    """Parse and run a command: one with `server_mode` set runs as `handler(args)`; any other gets a
    client connected to --server, as `handler(client, args)`."""
    args = parser.parse_args(argv)
    if not hasattr(args, "handler"):
        parser.print_help()
        return 2
    if getattr(args, "server_mode", False):
        return args.handler(args)
    try:
        client = SluiceClient(args.server, token=args.token, tls=args.tls, tls_ca=args.tls_ca,
                              client_cert=args.client_cert, client_key=args.client_key)
    except OSError as error:
        print(f"sluice: error: cannot read {error.filename}: {error.strerror}", file=sys.stderr)
        return 2
    try:
        with client:
            return args.handler(client, args) or 0
    except UsageError as error:
        print(f"sluice: error: {_one_line(str(error))}", file=sys.stderr)
        return 2
    except grpc.RpcError as error:
        if error.code() == grpc.StatusCode.UNAVAILABLE:
            print(f"sluice: error: cannot reach Sluice at {args.server} (is `sluice standalone` running?)", file=sys.stderr)
            return 3
        print(f"sluice: error: {error.code().name}: {_one_line(error.details() or '')}", file=sys.stderr)
        return 1


def _one_line(text: str) -> str:
    return " ".join(text.split())


def build_parser(first: AddCommands | None = None, last: AddCommands | None = None) -> argparse.ArgumentParser:
    """The parser of the client commands; `first` and `last` add commands before and after them (the
    services' server and offline commands)."""
    parser = argparse.ArgumentParser(prog="sluice", description="Event-driven scheduler for data pipelines.")
    parser.add_argument("--server", default=default_server(), help="gRPC address (env SLUICE_SERVER; default %(default)s)")
    parser.add_argument("--token", default=None,
                        help="bearer token of a server started with --grpc-token (env SLUICE_TOKEN)")
    parser.add_argument("--tls", action="store_true", help="speak TLS to the server, trusting the system's CAs")
    parser.add_argument("--tls-ca", metavar="PEM", default=None,
                        help="speak TLS, trusting this CA certificate (env SLUICE_TLS_CA)")
    parser.add_argument("--client-cert", metavar="PEM", default=None,
                        help="mutual TLS: this client's certificate, with --client-key (env SLUICE_CLIENT_CERT)")
    parser.add_argument("--client-key", metavar="PEM", default=None,
                        help="the client certificate's private key (env SLUICE_CLIENT_KEY)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    commands = parser.add_subparsers(metavar="COMMAND")
    if first is not None:
        first(commands)
    _schedule_commands(commands)
    apps = commands.add_parser("apps", help="deploy apps").add_subparsers(metavar="ACTION")
    deploy = apps.add_parser("deploy", help="deploy an app with its programs and schedules",
                             description="FILE holds a DeployAppRequest as JSON: namespace, app, programs, schedules.")
    deploy.add_argument("file", type=argparse.FileType("r"))
    deploy.add_argument("--no-update-schedules", dest="update_schedules", action="store_false",
                        help="leave existing schedules alone (only schedules of removed programs are deleted)")
    deploy.set_defaults(handler=_deploy_app)
    notify = commands.add_parser("notify", help="publish a notification").add_subparsers(metavar="KIND")
    partition = notify.add_parser("partition", help="a transaction committed partitions of a dataset")
    partition.add_argument("--namespace", required=True)
    partition.add_argument("--dataset", required=True)
    partition.add_argument("--key", action="append", default=[], metavar="K=V", help="partition key value (repeat)")
    partition.add_argument("--location", required=True, help="path or URI of the partition's files")
    partition.add_argument("--size-bytes", type=int, default=0)
    partition.add_argument("--record-count", type=int, default=0)
    partition.add_argument("--metadata", action="append", default=[], metavar="K=V")
    partition.add_argument("--id", default=None, help="notification id (default: a new UUID)")
    partition.set_defaults(handler=_notify_partition)

    jobs = commands.add_parser("jobs", help="inspect jobs").add_subparsers(metavar="ACTION")
    jobs_list = jobs.add_parser("list")
    jobs_list.add_argument("--schedule", default="", help="only this schedule id")
    jobs_list.add_argument("--pending", action="store_true", help="only jobs not launched or discarded yet")
    jobs_list.set_defaults(handler=_list_jobs)
    jobs_history = jobs.add_parser("history", help="every transition of a schedule's jobs, with its cause")
    jobs_history.add_argument("--schedule", required=True)
    jobs_history.set_defaults(handler=_job_history)
    runs = commands.add_parser("runs", help="inspect runs").add_subparsers(metavar="ACTION")
    runs_list = runs.add_parser("list")
    runs_list.add_argument("--schedule", default="")
    runs_list.set_defaults(handler=_list_runs)
    runs_get = runs.add_parser("get")
    runs_get.add_argument("id")
    runs_get.set_defaults(handler=lambda c, a: print_message(a, c.get_run(a.id)))
    lineage = commands.add_parser("lineage", help="inspect lineage").add_subparsers(metavar="ACTION")
    lineage_show = lineage.add_parser("show", help="the job tree with runs")
    lineage_show.add_argument("job", nargs="?", default="",
                              help="only this job (fully qualified or simple name) and the jobs under it")
    lineage_show.add_argument("--namespace", default="")
    lineage_show.set_defaults(handler=_show_lineage)
    datasets_cli.register(commands)
    auth_cli.register(commands)
    if last is not None:
        last(commands)
    return parser


def _schedule_commands(commands) -> None:
    schedules = commands.add_parser("schedules", help="manage schedules").add_subparsers(metavar="ACTION")
    create = schedules.add_parser("create", help="create a schedule",
                                  description="One trigger kind by flags, or any schedule (AND/OR composites) from "
                                              "--file: the Schedule message as protobuf JSON.")
    create.add_argument("--file", type=argparse.FileType("r"), help="a Schedule as JSON (then no other options)")
    create.add_argument("--name")
    create.add_argument("--namespace", help="the program's namespace")
    create.add_argument("--app")
    create.add_argument("--program")
    create.add_argument("--trigger", default="partition", help=f"trigger type: {', '.join(TRIGGER_TYPES)}")
    create.add_argument("--dataset", help="[NAMESPACE.]DATASET (partition, data-size, quiet-period)")
    create.add_argument("--count", type=int, default=1, help="partitions or runs needed to fire (default 1)")
    create.add_argument("--filter", action="append", default=[], metavar="K=V1|V2", help="allowed key values (repeat)")
    create.add_argument("--min-bytes", type=int, default=0, help="data-size: bytes of new data")
    create.add_argument("--quiet-seconds", type=int, default=0, help="quiet-period: seconds without new data")
    create.add_argument("--seconds", type=int, default=0, help="elapsed: seconds waited")
    create.add_argument("--cron", help="time: 5 or 6 field cron expression")
    create.add_argument("--zone", default="UTC", help="time: IANA zone (default UTC)")
    create.add_argument("--upstream", help="program-status: NAMESPACE.APP.PROGRAM")
    create.add_argument("--status", action="append", default=[], help="program-status: COMPLETED|FAILED|KILLED (repeat)")
    create.add_argument("--property", action="append", default=[], metavar="K=V", help="runtime argument (repeat)")
    create.add_argument("--enabled", action="store_true", help="start enabled (default: disabled)")
    create.add_argument("--max-concurrent", type=int, metavar="N", help="constraint: at most N runs at once")
    create.add_argument("--group", default="", help="with --max-concurrent: count the runs of every program in GROUP")
    create.add_argument("--delay", type=int, metavar="SECONDS", help="constraint: launch SECONDS after the trigger")
    create.add_argument("--window", metavar="HH:MM-HH:MM", help="constraint: launch only inside this daily window")
    create.add_argument("--window-zone", default="UTC", help="IANA zone of --window and --max-runs (default UTC)")
    create.add_argument("--min-interval", type=int, metavar="SECONDS",
                        help="constraint: SECONDS at least since the program's last run started")
    create.add_argument("--max-runs", metavar="N/UNIT", help="constraint: at most N runs per hour or day, e.g. 1/day")
    create.add_argument("--abort-if-not-met", action="store_true",
                        help="discard the job when a constraint is not met at its first check (default: wait)")
    create.add_argument("--timeout", type=int, default=0, metavar="SECONDS",
                        help="how long a triggered job may wait for its constraints (default: forever)")
    create.add_argument("--timeout-policy", choices=("discard", "force-launch"), default="discard",
                        help="what a timeout does to the job (default discard)")
    create.add_argument("--priority", type=int, default=0, help="higher launches first and passes the load limit")
    create.add_argument("--misfire", choices=("fire-once", "fire-each", "skip"), default="fire-once",
                        help="time triggers: what to do with fire times missed while down (default fire-once)")
    create.add_argument("--catch-up", type=int, metavar="SECONDS",
                        help="with --misfire fire-each: how far back missed times still run (default 1 day)")
    create.add_argument("--max-retries", type=int, metavar="N",
                        help="attempts after a LOST (or, with --retry-failed, FAILED) one, at most (default 2)")
    create.add_argument("--retry-delay", type=int, metavar="SECONDS", help="before the first retry (default 60)")
    create.add_argument("--retry-backoff", type=float, metavar="FACTOR",
                        help="each further retry waits FACTOR times longer (default 2; 1: constant)")
    create.add_argument("--retry-failed", action="store_true", help="retry FAILED attempts too (default: LOST only)")
    create.add_argument("--description", default="")
    create.set_defaults(handler=_create_schedule)
    listing = schedules.add_parser("list")
    listing.add_argument("--namespace", default="")
    listing.add_argument("--app", default="")
    listing.set_defaults(handler=_list_schedules)
    for action, rpc, request in (("get", "GetSchedule", schedules_pb2.GetScheduleRequest),
                                 ("delete", "DeleteSchedule", schedules_pb2.DeleteScheduleRequest),
                                 ("enable", "EnableSchedule", schedules_pb2.EnableScheduleRequest),
                                 ("disable", "DisableSchedule", schedules_pb2.DisableScheduleRequest)):
        sub = schedules.add_parser(action)
        sub.add_argument("id")
        sub.set_defaults(handler=_by_id(rpc, request))


def _retry_policy(args) -> schedules_pb2.RetryPolicy | None:
    """None (the server's default) unless a retry flag is given; unset ones keep their defaults."""
    if args.max_retries is None and args.retry_delay is None and args.retry_backoff is None and not args.retry_failed:
        return None
    return schedules_pb2.RetryPolicy(
        max_retries=DEFAULT_RETRY_POLICY.max_retries if args.max_retries is None else args.max_retries,
        delay=None if args.retry_delay is None else duration_pb2.Duration(seconds=args.retry_delay),
        backoff=args.retry_backoff or 0.0, retry_failed=args.retry_failed)


def _by_id(rpc: str, request_type) -> Callable:
    def handler(client: SluiceClient, args) -> int:
        response = getattr(client.schedules, rpc)(request_type(id=args.id), timeout=10)
        if rpc == "DeleteSchedule":
            print(json.dumps({"deleted": args.id}) if args.json else f"deleted {args.id}")
            return 0
        return print_message(args, response)
    return handler


TRIGGER_TYPES = ("partition", "time", "data-size", "quiet-period", "elapsed", "program-status")


def _create_schedule(client: SluiceClient, args) -> int:
    if args.file:
        try:
            schedule = json_format.Parse(args.file.read(), schedules_pb2.Schedule())
        except json_format.ParseError as error:
            raise UsageError(f"--file: not a Schedule: {error}") from error
        return print_message(args, client.create_schedule(schedule))
    for option in ("name", "namespace", "app", "program"):
        if not getattr(args, option):
            raise UsageError(f"--{option} is required (or --file)")
    schedule = schedules_pb2.Schedule(
        name=args.name, program=notifications_pb2.ProgramRef(namespace=args.namespace, app=args.app, program=args.program),
        properties=pairs(args.property, "--property"), trigger=_trigger(args), enabled=args.enabled,
        description=args.description, constraints=_constraints(args), priority=args.priority,
        timeout=duration_pb2.Duration(seconds=args.timeout),
        timeout_policy=schedules_pb2.TimeoutPolicy.Value("TIMEOUT_" + args.timeout_policy.upper().replace("-", "_")),
        misfire_policy=schedules_pb2.MisfirePolicy.Value("MISFIRE_" + args.misfire.upper().replace("-", "_")),
        catch_up=duration_pb2.Duration(seconds=args.catch_up) if args.catch_up is not None else None,
        retry_policy=_retry_policy(args))
    return print_message(args, client.create_schedule(schedule))


def _trigger(args) -> schedules_pb2.Trigger:
    kind = args.trigger
    if kind not in TRIGGER_TYPES:
        raise UsageError(f"--trigger: unknown trigger type {kind!r} (supported: {', '.join(TRIGGER_TYPES)})")
    if kind == "time":
        return schedules_pb2.Trigger(time=schedules_pb2.TimeTrigger(cron=args.cron or "", zone=args.zone))
    if kind == "elapsed":
        return schedules_pb2.Trigger(elapsed=schedules_pb2.ElapsedTrigger(seconds=args.seconds))
    if kind == "program-status":
        parts = (args.upstream or "").split(".")
        if len(parts) != 3:
            raise UsageError(f"--upstream: expected NAMESPACE.APP.PROGRAM, got {args.upstream!r}")
        namespace, app, program = parts
        return schedules_pb2.Trigger(program_status=schedules_pb2.ProgramStatusTrigger(
            namespace=namespace, app=app, program=program, count=args.count,
            statuses=[notifications_pb2.RunStatus.Value(s) for s in _statuses(args.status)]))
    dataset_ns, _, dataset = (args.dataset or "").rpartition(".")
    where = dict(namespace=dataset_ns or args.namespace, dataset=dataset, filter=_filters(args.filter))
    if kind == "data-size":
        return schedules_pb2.Trigger(data_size=schedules_pb2.DataSizeTrigger(min_bytes=args.min_bytes, **where))
    if kind == "quiet-period":
        return schedules_pb2.Trigger(quiet_period=schedules_pb2.QuietPeriodTrigger(quiet_seconds=args.quiet_seconds,
                                                                                    **where))
    return schedules_pb2.Trigger(partition=schedules_pb2.PartitionTrigger(count=args.count, **where))


def _constraints(args) -> list[schedules_pb2.Constraint]:
    """Out-of-range numbers are left for the server to reject with the field's name."""
    on_not_met = schedules_pb2.NOT_MET_ABORT if args.abort_if_not_met else schedules_pb2.NOT_MET_WAIT
    found = []
    if args.max_concurrent is not None:
        found.append(schedules_pb2.Constraint(concurrency=schedules_pb2.ConcurrencyConstraint(
            max_running=args.max_concurrent, group=args.group)))
    if args.delay is not None:
        found.append(schedules_pb2.Constraint(delay=schedules_pb2.DelayConstraint(seconds=args.delay)))
    if args.window:
        start, separator, end = args.window.partition("-")
        if not separator:
            raise UsageError(f"--window: expected HH:MM-HH:MM, got {args.window!r}")
        found.append(schedules_pb2.Constraint(time_window=schedules_pb2.TimeWindowConstraint(
            start=start, end=end, zone=args.window_zone)))
    if args.min_interval is not None:
        found.append(schedules_pb2.Constraint(min_since_last_run=schedules_pb2.MinSinceLastRunConstraint(
            min_seconds=args.min_interval)))
    if args.max_runs:
        count, separator, unit = args.max_runs.partition("/")
        if not separator or not count.strip().lstrip("-").isdigit():
            raise UsageError(f"--max-runs: expected N/hour or N/day, got {args.max_runs!r}")
        found.append(schedules_pb2.Constraint(max_runs_per_window=schedules_pb2.MaxRunsPerWindowConstraint(
            max_runs=int(count), unit=unit, zone=args.window_zone)))
    for constraint in found:
        constraint.on_not_met = on_not_met
    return found


def _statuses(values: list[str]) -> list[str]:
    unknown = [v for v in values if v not in ("COMPLETED", "FAILED", "KILLED")]
    if unknown:
        raise UsageError(f"--status: unknown status {unknown[0]!r} (COMPLETED, FAILED or KILLED)")
    return values or ["COMPLETED"]


def _filters(values: list[str]) -> dict[str, schedules_pb2.AllowedValues]:
    return {key: schedules_pb2.AllowedValues(values=allowed.split("|"))
            for key, allowed in pairs(values, "--filter").items()}


def _deploy_app(client: SluiceClient, args) -> int:
    try:
        request = json_format.Parse(args.file.read(), schedules_pb2.DeployAppRequest())
    except json_format.ParseError as error:
        raise UsageError(f"{args.file.name}: not a DeployAppRequest: {error}") from error
    if not args.update_schedules:
        request.update_schedules = False
    response = client.schedules.DeployApp(request, timeout=30)
    if args.json:
        return print_message(args, response)
    print(f"deployed {request.namespace}.{request.app}: created {len(response.created)}, "
          f"updated {len(response.updated)}, deleted {len(response.deleted)} schedule(s)")
    return 0


def _list_schedules(client: SluiceClient, args) -> int:
    found = client.list_schedules(args.namespace, args.app)
    rows = [(s.id[:8], s.name, f"{s.program.namespace}.{s.program.app}.{s.program.program}", _trigger_text(s.trigger),
             "yes" if s.enabled else "no", s.generation) for s in found]
    return print_many(args, found, render.table(("ID", "NAME", "PROGRAM", "TRIGGER", "ENABLED", "GEN"), rows))


def _notify_partition(client: SluiceClient, args) -> int:
    partition = PartitionRef(pairs(args.key, "--key"), args.location, args.size_bytes, args.record_count,
                             pairs(args.metadata, "--metadata"))
    notification_id = client.publish_partitions(args.namespace, args.dataset, [partition], args.id or str(uuid.uuid4()))
    print(json.dumps({"id": notification_id}) if args.json else f"published notification {notification_id}")
    return 0


def _list_jobs(client: SluiceClient, args) -> int:
    found = client.list_jobs(args.schedule, args.pending)
    rows = [(j.id[:8], j.schedule_id[:8], _job_state(j), render.when(j.created_at), render.when(j.updated_at),
             render.when(j.next_check), j.reason or "-") for j in found]
    return print_many(args, found, render.table(
        ("JOB", "SCHEDULE", "STATE", "CREATED", "UPDATED", "NEXT CHECK", "WAITING ON / REASON"), rows))


def _job_history(client: SluiceClient, args) -> int:
    found = client.list_jobs(args.schedule)
    rows = [(j.id[:8], render.when(t.at), _job_state_name(t.state), t.cause) for j in found for t in j.history]
    return print_many(args, found, render.table(("JOB", "AT", "STATE", "CAUSE"), rows))


def _list_runs(client: SluiceClient, args) -> int:
    found = client.list_runs(args.schedule)
    rows = [(r.id[:8], r.job_id[:8], f"{r.program.app}.{r.program.program}",
             notifications_pb2.RunStatus.Name(r.status), render.when(r.started_at), render.duration(r.started_at, r.ended_at),
             sum(o.partition.record_count for o in r.outputs), (r.error or "-")[:60]) for r in found]
    return print_many(args, found, render.table(("RUN", "JOB", "PROGRAM", "STATUS", "STARTED", "DURATION", "ROWS OUT", "ERROR"), rows))


def _show_lineage(client: SluiceClient, args) -> int:
    jobs = client.lineage_jobs(args.namespace)
    if args.job:
        jobs = render.lineage_subtree(jobs, args.job)
        if not jobs:
            where = f" namespace {args.namespace}" if args.namespace else ""
            print(f"sluice: error: no job {args.job!r} in lineage{where}", file=sys.stderr)
            return 1
        runs = [run for job in jobs for run in client.lineage_runs(job.namespace, job.name)]
    else:
        runs = client.lineage_runs()
    if args.json:
        print(json.dumps({"jobs": [json_format.MessageToDict(j) for j in jobs],
                          "runs": [json_format.MessageToDict(r) for r in runs]}, indent=2))
    else:
        print(render.lineage_tree(jobs, runs) or "no lineage recorded")
    return 0


def _job_state(job) -> str:
    return _job_state_name(job.state)


def _job_state_name(state: int) -> str:
    return jobs_pb2.JobState.Name(state)


def _trigger_text(trigger: schedules_pb2.Trigger) -> str:
    kind = trigger.WhichOneof("kind")
    value = getattr(trigger, kind) if kind else None
    match kind:
        case "partition":
            return f"partition {value.namespace}.{value.dataset} x{value.count}"
        case "time":
            return f"time '{value.cron}' {value.zone}"
        case "data_size":
            return f"data-size {value.namespace}.{value.dataset} >= {value.min_bytes} B"
        case "quiet_period":
            return f"quiet {value.namespace}.{value.dataset} {value.quiet_seconds}s"
        case "elapsed":
            return f"elapsed {value.seconds}s"
        case "program_status":
            return f"status {value.namespace}.{value.app}.{value.program} x{value.count}"
        case "and" | "or":
            children = value.all_of if kind == "and" else value.any_of
            return f" {kind.upper()} ".join(f"({_trigger_text(t)})" for t in children)
    return "?"




if __name__ == "__main__":
    sys.exit(main())
