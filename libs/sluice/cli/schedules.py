"""`sluice schedules ...`: create, update, list, get, enable, disable, delete. Every ID may be a unique
prefix of the schedule's id (the 8 characters `schedules list` shows)."""
from __future__ import annotations

import argparse
import json
from typing import Callable

from google.protobuf import duration_pb2, json_format

from sluice.cli import describe, ids, render, schedule_runs
from sluice.cli.durations import parse_seconds
from sluice.cli.output import UsageError, pairs, print_many, print_message
from sluice.client import SluiceClient
from sluice.domain.jobs import DEFAULT_RETRY_POLICY
from sluice.v1 import notifications_pb2, schedules_pb2

TRIGGER_TYPES = ("partition", "time", "data-size", "quiet-period", "elapsed", "program-status")
TRIGGER_OPTIONS = ("trigger", "dataset", "count", "filter", "min_bytes", "quiet_seconds", "seconds", "cron", "zone",
                   "upstream", "status")
CREATE_DEFAULTS = dict(trigger="partition", count=1, filter=[], min_bytes=0, quiet_seconds=0, seconds=0, zone="UTC",
                       status=[], property=[], window_zone="UTC", group="", timeout=0, timeout_policy="discard",
                       priority=0, misfire="fire-once", waiting_job="join", description="")


def register(commands) -> None:
    schedules = commands.add_parser("schedules", help="manage schedules").add_subparsers(metavar="ACTION")
    create = schedules.add_parser("create", help="create a schedule",
                                  description="One trigger kind by flags, or any schedule (AND/OR composites) from "
                                              "--file: the Schedule message as protobuf JSON.")
    create.add_argument("--file", type=argparse.FileType("r"), help="a Schedule as JSON (then no other options)")
    create.add_argument("--name")
    create.add_argument("--namespace", help="the program's namespace")
    create.add_argument("--app")
    create.add_argument("--program")
    _options(create, CREATE_DEFAULTS)
    create.set_defaults(handler=_create)
    update = schedules.add_parser("update", help="replace a schedule: options given change, the rest is kept",
                                  description="The options of create (not its name or program); what is not given "
                                              "is kept from the current schedule. Trigger options without --trigger "
                                              "change the current trigger's details; a constraint option replaces "
                                              "that kind of constraint. --file: the whole Schedule as JSON.")
    update.add_argument("id", help="the schedule's id or a unique prefix of it")
    update.add_argument("--file", type=argparse.FileType("r"), help="a Schedule as JSON (then no other options)")
    _options(update, {})
    update.add_argument("--disabled", action="store_true", help="disable it (default: keep enabled or disabled)")
    update.set_defaults(handler=_update)
    listing = schedules.add_parser("list", help="every schedule: id, name, program, trigger, enabled, generation")
    listing.add_argument("--namespace", default="")
    listing.add_argument("--app", default="")
    listing.set_defaults(handler=_list)
    for action, rpc, request, text in (
            ("get", "GetSchedule", schedules_pb2.GetScheduleRequest, "one schedule, in full (JSON)"),
            ("enable", "EnableSchedule", schedules_pb2.EnableScheduleRequest, "let the schedule's events make jobs"),
            ("disable", "DisableSchedule", schedules_pb2.DisableScheduleRequest,
             "discard its pending jobs and ignore its events until enabled"),
            ("delete", "DeleteSchedule", schedules_pb2.DeleteScheduleRequest, "delete it, discarding its pending jobs")):
        sub = schedules.add_parser(action, help=text)
        sub.add_argument("id", help="the schedule's id or a unique prefix of it")
        sub.set_defaults(handler=_by_id(action, rpc, request))
    schedule_runs.register(schedules, commands)


def _options(parser: argparse.ArgumentParser, defaults: dict) -> None:
    """create's options; `defaults` empty (update): every option defaults to None, i.e. not given."""
    def add(*names: str, **kwargs) -> None:
        dest = names[0].lstrip("-").replace("-", "_")
        if kwargs.get("action") not in ("store_true",):
            kwargs["default"] = defaults.get(dest)
        parser.add_argument(*names, **kwargs)

    add("--trigger", help=f"trigger type: {', '.join(TRIGGER_TYPES)} (create's default: partition)")
    add("--dataset", help="[NAMESPACE.]DATASET (partition, data-size, quiet-period)")
    add("--count", type=int, help="partitions or runs needed to fire (create's default 1)")
    add("--filter", action="append", metavar="K=V1|V2", help="allowed key values (repeat)")
    add("--min-bytes", type=int, help="data-size: bytes of new data")
    add("--quiet-seconds", type=int, help="quiet-period: seconds without new data")
    add("--seconds", type=int, help="elapsed: seconds waited")
    add("--cron", help="time: 5 or 6 field cron expression")
    add("--zone", help="time: IANA zone (create's default UTC)")
    add("--upstream", help="program-status: NAMESPACE.APP.PROGRAM")
    add("--status", action="append", help="program-status: COMPLETED|FAILED|KILLED (repeat)")
    add("--property", action="append", metavar="K=V", help="runtime argument (repeat; update: sets these keys)")
    add("--enabled", action="store_true", help="enabled (create's default: disabled; update: keeps it)")
    add("--max-concurrent", type=int, metavar="N", help="constraint: at most N runs at once")
    add("--group", help="with --max-concurrent: count the runs of every program in GROUP")
    add("--delay", type=int, metavar="SECONDS", help="constraint: launch SECONDS after the trigger")
    add("--window", metavar="HH:MM-HH:MM", help="constraint: launch only inside this daily window")
    add("--window-zone", help="IANA zone of --window and --max-runs (default UTC)")
    add("--min-interval", type=int, metavar="SECONDS", help="constraint: SECONDS at least since the program's last run started")
    add("--max-runs", metavar="N/UNIT", help="constraint: at most N runs per hour or day, e.g. 1/day")
    add("--abort-if-not-met", action="store_true",
        help="discard the job when a constraint is not met at its first check (default: wait)")
    add("--timeout", type=int, metavar="SECONDS", help="how long a triggered job may wait for its constraints (default: forever)")
    add("--timeout-policy", choices=("discard", "force-launch"), help="what a timeout does to the job (default discard)")
    add("--priority", type=int, help="higher launches first and passes the load limit")
    add("--misfire", choices=("fire-once", "fire-each", "skip"),
        help="time triggers: what to do with fire times missed while down (default fire-once)")
    add("--catch-up", type=int, metavar="SECONDS", help="with --misfire fire-each: how far back missed times still run (default 1 day)")
    add("--max-retries", type=int, metavar="N",
        help="attempts after a LOST (or, with --retry-failed, FAILED) one, at most (default 2)")
    add("--retry-delay", type=int, metavar="SECONDS", help="before the first retry (default 60)")
    add("--retry-backoff", type=float, metavar="FACTOR", help="each further retry waits FACTOR times longer (default 2; 1: constant)")
    add("--retry-failed", action="store_true", help="retry FAILED attempts too (default: LOST only)")
    add("--spark-conf", action="append", metavar="K=V",
        help="Spark setting of its runs, resources and tuning only, e.g. spark.executor.memory=2g "
             "(repeat; update: sets these keys, an empty value removes one)")
    add("--waiting-job", choices=("join", "separate"),
        help="what a fire does while an earlier job of this schedule waits for its constraints: join it, so "
             "that one run gets all the notifications (create's default), or wait as a job and run of its own")
    add("--max-run-time", metavar="DURATION",
        help="kill a run still going after DURATION (90s, 45m, 2h, 1d; at most 30 days): it ends KILLED "
             "(create's default: no limit; update: 0 removes the limit)")
    add("--description")


def summary(verb: str, schedule: schedules_pb2.Schedule) -> str:
    program = f"{schedule.program.namespace}.{schedule.program.app}.{schedule.program.program}"
    return (f"{verb} schedule {schedule.id[:8]} {schedule.name}: {program}, {describe.trigger_text(schedule.trigger)}, "
            f"{'enabled' if schedule.enabled else 'disabled'}{' (paused)' if schedule.paused else ''}, "
            f"generation {schedule.generation}")


def _show(args, verb: str, schedule: schedules_pb2.Schedule) -> int:
    if args.json:
        return print_message(args, schedule)
    print(summary(verb, schedule))
    return 0


def _parse_file(args) -> schedules_pb2.Schedule:
    try:
        return json_format.Parse(args.file.read(), schedules_pb2.Schedule())
    except json_format.ParseError as error:
        raise UsageError(f"--file: not a Schedule: {error}") from error


def _create(client: SluiceClient, args) -> int:
    if args.file:
        return _show(args, "created", client.create_schedule(_parse_file(args)))
    for option in ("name", "namespace", "app", "program"):
        if not getattr(args, option):
            raise UsageError(f"--{option} is required (or --file)")
    schedule = schedules_pb2.Schedule(
        name=args.name, program=notifications_pb2.ProgramRef(namespace=args.namespace, app=args.app, program=args.program),
        properties=pairs(args.property, "--property"), trigger=_trigger(args, args.namespace), enabled=args.enabled,
        description=args.description, constraints=_constraints(args), priority=args.priority,
        timeout=duration_pb2.Duration(seconds=args.timeout), timeout_policy=_timeout_policy(args.timeout_policy),
        misfire_policy=_misfire(args.misfire),
        catch_up=duration_pb2.Duration(seconds=args.catch_up) if args.catch_up is not None else None,
        waiting_job_policy=_waiting_job(args.waiting_job),
        retry_policy=_retry_policy(args, None), spark_conf=pairs(args.spark_conf or [], "--spark-conf"),
        max_run_seconds=_max_run_seconds(args.max_run_time) or 0)
    return _show(args, "created", client.create_schedule(schedule))


def _update(client: SluiceClient, args) -> int:
    schedule_id = ids.schedule_id(client, args.id)
    current = client.schedules.GetSchedule(schedules_pb2.GetScheduleRequest(id=schedule_id), timeout=10)
    if args.file:
        schedule = _parse_file(args)
        if not schedule.name:
            schedule.name = current.name
        if not schedule.HasField("program"):
            schedule.program.CopyFrom(current.program)
    else:
        schedule = _merged(current, args)
    schedule.id = schedule_id
    updated = client.schedules.UpdateSchedule(schedules_pb2.UpdateScheduleRequest(schedule=schedule), timeout=10)
    return _show(args, "updated", updated)


def _merged(current: schedules_pb2.Schedule, args) -> schedules_pb2.Schedule:
    if args.enabled and args.disabled:
        raise UsageError("--enabled and --disabled: give one")
    schedule = schedules_pb2.Schedule()
    schedule.CopyFrom(current)
    schedule.ClearField("generation")
    if any(getattr(args, option) is not None for option in TRIGGER_OPTIONS):
        schedule.trigger.CopyFrom(_trigger(_with_current_trigger(args, current.trigger), current.program.namespace))
    if args.property:
        schedule.properties.update(pairs(args.property, "--property"))
    for key, value in pairs(args.spark_conf or [], "--spark-conf").items():
        if value:
            schedule.spark_conf[key] = value
        else:
            schedule.spark_conf.pop(key, None)
    if args.enabled or args.disabled:
        schedule.enabled = args.enabled
    given = _constraints(args)
    if given or args.abort_if_not_met:
        kinds = {c.WhichOneof("kind") for c in given}
        kept = [c for c in current.constraints if c.WhichOneof("kind") not in kinds]
        if args.abort_if_not_met:
            for constraint in kept:
                constraint.on_not_met = schedules_pb2.NOT_MET_ABORT
        del schedule.constraints[:]
        schedule.constraints.extend([*kept, *given])
    if args.description is not None:
        schedule.description = args.description
    if args.priority is not None:
        schedule.priority = args.priority
    if args.timeout is not None:
        schedule.timeout.CopyFrom(duration_pb2.Duration(seconds=args.timeout))
    if args.timeout_policy is not None:
        schedule.timeout_policy = _timeout_policy(args.timeout_policy)
    if args.misfire is not None:
        schedule.misfire_policy = _misfire(args.misfire)
    if args.catch_up is not None:
        schedule.catch_up.CopyFrom(duration_pb2.Duration(seconds=args.catch_up))
    if args.waiting_job is not None:
        schedule.waiting_job_policy = _waiting_job(args.waiting_job)
    if args.max_run_time is not None:
        schedule.max_run_seconds = _max_run_seconds(args.max_run_time)
    retry = _retry_policy(args, current.retry_policy if current.HasField("retry_policy") else None)
    if retry is not None:
        schedule.retry_policy.CopyFrom(retry)
    return schedule


_KINDS = {"partition": "partition", "time": "time", "data_size": "data-size", "quiet_period": "quiet-period",
          "elapsed": "elapsed", "program_status": "program-status"}


_USES = {"partition": ("dataset", "count", "filter"), "time": ("cron", "zone"),
         "data-size": ("dataset", "min_bytes", "filter"), "quiet-period": ("dataset", "quiet_seconds", "filter"),
         "elapsed": ("seconds",), "program-status": ("upstream", "count", "status")}


def _with_current_trigger(args, current: schedules_pb2.Trigger) -> argparse.Namespace:
    """update's trigger options completed from the current trigger (when --trigger keeps its kind) or
    from create's defaults."""
    kind = current.WhichOneof("kind")
    if args.trigger is None and kind in ("and", "or"):
        raise UsageError("the schedule's trigger is an AND/OR composite: give --trigger with its options, or --file")
    same = args.trigger is None or args.trigger == _KINDS.get(kind)
    value = getattr(current, kind) if same and kind else None
    known = {"trigger": _KINDS.get(kind)}
    if value is not None:
        if hasattr(value, "dataset"):
            known["dataset"] = f"{value.namespace}.{value.dataset}"
            known["filter"] = [f"{k}={'|'.join(v.values)}" for k, v in value.filter.items()]
        for option, field in (("count", "count"), ("min_bytes", "min_bytes"), ("quiet_seconds", "quiet_seconds"),
                              ("seconds", "seconds"), ("cron", "cron"), ("zone", "zone")):
            if hasattr(value, field):
                known[option] = getattr(value, field)
        if kind == "program_status":
            known["upstream"] = f"{value.namespace}.{value.app}.{value.program}"
            known["status"] = [notifications_pb2.RunStatus.Name(s) for s in value.statuses]
    chosen = args.trigger or _KINDS.get(kind)
    stray = [option for option in TRIGGER_OPTIONS[1:]
             if getattr(args, option) is not None and option not in _USES.get(chosen, ())]
    if stray:
        raise UsageError(f"--{stray[0].replace('_', '-')}: not an option of the {chosen} trigger "
                         f"(the schedule's trigger is {describe.trigger_text(current)}; give --trigger to change it)")
    merged = argparse.Namespace(**vars(args))
    for option in TRIGGER_OPTIONS:
        if getattr(args, option) is None:
            setattr(merged, option, known.get(option, CREATE_DEFAULTS.get(option)))
    return merged


def _max_run_seconds(text: str | None) -> int | None:
    """None when not given; the range (1 s to 30 days) is the server's to check, naming the field."""
    return None if text is None else parse_seconds(text, "--max-run-time")


def _timeout_policy(text: str) -> int:
    return schedules_pb2.TimeoutPolicy.Value("TIMEOUT_" + text.upper().replace("-", "_"))


def _waiting_job(text: str) -> int:
    return schedules_pb2.WaitingJobPolicy.Value("WAITING_JOB_" + text.upper())


def _misfire(text: str) -> int:
    return schedules_pb2.MisfirePolicy.Value("MISFIRE_" + text.upper().replace("-", "_"))


def _retry_policy(args, current: schedules_pb2.RetryPolicy | None) -> schedules_pb2.RetryPolicy | None:
    """None (the server's default, or the current policy) unless a retry flag is given; unset ones keep
    the current policy's values, else the defaults."""
    if args.max_retries is None and args.retry_delay is None and args.retry_backoff is None and not args.retry_failed:
        return None
    base = current or schedules_pb2.RetryPolicy(max_retries=DEFAULT_RETRY_POLICY.max_retries)
    policy = schedules_pb2.RetryPolicy()
    policy.CopyFrom(base)
    if args.max_retries is not None:
        policy.max_retries = args.max_retries
    if args.retry_delay is not None:
        policy.delay.CopyFrom(duration_pb2.Duration(seconds=args.retry_delay))
    if args.retry_backoff is not None:
        policy.backoff = args.retry_backoff
    if args.retry_failed:
        policy.retry_failed = True
    return policy


def _by_id(action: str, rpc: str, request_type) -> Callable:
    def handler(client: SluiceClient, args) -> int:
        schedule_id = ids.schedule_id(client, args.id)
        response = getattr(client.schedules, rpc)(request_type(id=schedule_id), timeout=10)
        if action == "delete":
            print(json.dumps({"deleted": schedule_id}) if args.json else f"deleted {schedule_id}")
            return 0
        if action == "get":
            return print_message(args, response)
        return _show(args, f"{action}d", response)
    return handler


def _trigger(args, namespace: str) -> schedules_pb2.Trigger:
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
        upstream_ns, app, program = parts
        return schedules_pb2.Trigger(program_status=schedules_pb2.ProgramStatusTrigger(
            namespace=upstream_ns, app=app, program=program, count=args.count,
            statuses=[notifications_pb2.RunStatus.Value(s) for s in _statuses(args.status)]))
    dataset_ns, _, dataset = (args.dataset or "").rpartition(".")
    where = dict(namespace=dataset_ns or namespace, dataset=dataset, filter=_filters(args.filter))
    if kind == "data-size":
        return schedules_pb2.Trigger(data_size=schedules_pb2.DataSizeTrigger(min_bytes=args.min_bytes, **where))
    if kind == "quiet-period":
        return schedules_pb2.Trigger(quiet_period=schedules_pb2.QuietPeriodTrigger(quiet_seconds=args.quiet_seconds,
                                                                                    **where))
    return schedules_pb2.Trigger(partition=schedules_pb2.PartitionTrigger(count=args.count, **where))


def _constraints(args) -> list[schedules_pb2.Constraint]:
    """The constraints the options give. Out-of-range numbers are left for the server to reject with
    the field's name."""
    on_not_met = schedules_pb2.NOT_MET_ABORT if args.abort_if_not_met else schedules_pb2.NOT_MET_WAIT
    zone = args.window_zone or "UTC"
    found = []
    if args.max_concurrent is not None:
        found.append(schedules_pb2.Constraint(concurrency=schedules_pb2.ConcurrencyConstraint(
            max_running=args.max_concurrent, group=args.group or "")))
    if args.delay is not None:
        found.append(schedules_pb2.Constraint(delay=schedules_pb2.DelayConstraint(seconds=args.delay)))
    if args.window:
        start, separator, end = args.window.partition("-")
        if not separator:
            raise UsageError(f"--window: expected HH:MM-HH:MM, got {args.window!r}")
        found.append(schedules_pb2.Constraint(time_window=schedules_pb2.TimeWindowConstraint(
            start=start, end=end, zone=zone)))
    if args.min_interval is not None:
        found.append(schedules_pb2.Constraint(min_since_last_run=schedules_pb2.MinSinceLastRunConstraint(
            min_seconds=args.min_interval)))
    if args.max_runs:
        count, separator, unit = args.max_runs.partition("/")
        if not separator or not count.strip().lstrip("-").isdigit():
            raise UsageError(f"--max-runs: expected N/hour or N/day, got {args.max_runs!r}")
        found.append(schedules_pb2.Constraint(max_runs_per_window=schedules_pb2.MaxRunsPerWindowConstraint(
            max_runs=int(count), unit=unit, zone=zone)))
    for constraint in found:
        constraint.on_not_met = on_not_met
    return found


def _statuses(values: list[str] | None) -> list[str]:
    values = values or []
    unknown = [v for v in values if v not in ("COMPLETED", "FAILED", "KILLED")]
    if unknown:
        raise UsageError(f"--status: unknown status {unknown[0]!r} (COMPLETED, FAILED or KILLED)")
    return values or ["COMPLETED"]


def _filters(values: list[str] | None) -> dict[str, schedules_pb2.AllowedValues]:
    return {key: schedules_pb2.AllowedValues(values=allowed.split("|"))
            for key, allowed in pairs(values or [], "--filter").items()}


def _list(client: SluiceClient, args) -> int:
    found = client.list_schedules(args.namespace, args.app)
    rows = [(s.id[:8], s.name, f"{s.program.namespace}.{s.program.app}.{s.program.program}",
             describe.trigger_text(s.trigger), ("yes" if s.enabled else "no") + (" (paused)" if s.paused else ""),
             s.generation) for s in found]
    return print_many(args, found, render.table(("ID", "NAME", "PROGRAM", "TRIGGER", "ENABLED", "GEN"), rows))

