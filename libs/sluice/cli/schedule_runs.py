"""`sluice schedules run`, `sluice schedules backfill` and the `sluice backfills` group (sluice.v1.Jobs)."""
from __future__ import annotations

from datetime import datetime

import grpc

from sluice.cli import ids
from sluice.cli.output import UsageError, pairs, print_many, print_message
from sluice.client import SluiceClient
from sluice.v1 import jobs_pb2, runs_pb2
from sluice.wire.common import timestamp_to_proto


def register(schedules, commands) -> None:
    """Adds `run` and `backfill` to the `schedules` group's actions, and the `backfills` group."""
    run = schedules.add_parser("run", help="run the schedule now: one manual job through its constraints",
                               description="Makes a job of the schedule's program that waits for the schedule's "
                                           "run constraints like a fired one; --ignore-constraints skips the timing "
                                           "ones (delay, time window, min-since-last-run, max-runs-per-window), "
                                           "never concurrency. Prints the job's id.")
    run.add_argument("id", help="the schedule's id or a unique prefix of it")
    run.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                     help="a property over the schedule's own (repeatable)")
    run.add_argument("--logical-time", metavar="TIME", help="the job's logical time, ISO 8601 with a zone (default: now)")
    run.add_argument("--ignore-constraints", action="store_true", help="skip the timing constraints")
    run.add_argument("--request-id", default="", help="an id of your own: the same id again makes no second job")
    run.set_defaults(handler=_run)
    backfill = schedules.add_parser(
        "backfill", help="one job per fire time in [--from, --to), or per existing partition in --keys ranges",
        description="A time trigger: one job per fire time in [--from, --to), with that logical time. With --keys, "
                    "the partition trigger: one job per existing partition of its dataset that the trigger admits "
                    "and whose keys lie in the ranges (--from/--to then bound the commit times, optional). The "
                    "jobs wait for the schedule's constraints (e.g. at most N at once by its concurrency). At most "
                    "10,000 jobs. Follow it with `sluice backfills get ID`, stop it with `sluice backfills cancel ID`.")
    backfill.add_argument("id", help="the schedule's id or a unique prefix of it")
    backfill.add_argument("--from", dest="start", metavar="T1", help="ISO 8601 with a zone (included)")
    backfill.add_argument("--to", dest="end", metavar="T2", help="ISO 8601 with a zone (excluded)")
    backfill.add_argument("--keys", action="append", default=[], metavar="KEY=LOW..HIGH",
                          help="a partition key's range, LOW included, HIGH excluded; either may be empty (repeatable)")
    backfill.add_argument("--request-id", default="", help="an id of your own: the same id again starts nothing new")
    backfill.set_defaults(handler=_backfill)

    group = commands.add_parser("backfills", help="backfills: progress, cancel").add_subparsers(metavar="ACTION")
    listing = group.add_parser("list", help="every backfill (of a schedule): done / running / waiting")
    listing.add_argument("--schedule", default="", help="the schedule's id or a unique prefix of it")
    listing.set_defaults(handler=_list)
    get = group.add_parser("get", help="a backfill's progress")
    get.add_argument("id", help="the backfill's id")
    get.set_defaults(handler=_get)
    cancel = group.add_parser("cancel", help="discard the backfill's waiting jobs; --running: cancel its runs too",
                              description="Its jobs still waiting are discarded; runs already going are left to "
                                          "end, or with --running cancelled (Runs.CancelRun: they end KILLED).")
    cancel.add_argument("id", help="the backfill's id")
    cancel.add_argument("--running", action="store_true", help="also cancel the runs it has going")
    cancel.set_defaults(handler=_cancel)


def progress(backfill: jobs_pb2.Backfill) -> str:
    cancelled = " (cancelled)" if backfill.HasField("cancelled_at") else ""
    return (f"backfill {backfill.id} of schedule {backfill.schedule_id}{cancelled}: {backfill.total} jobs: "
            f"{backfill.done} done ({backfill.failed} failed), {backfill.running} running, {backfill.waiting} waiting, "
            f"{backfill.discarded} discarded")


def _run(client: SluiceClient, args) -> int:
    request = jobs_pb2.RunScheduleRequest(schedule_id=ids.schedule_id(client, args.id),
                                          properties=pairs(args.property, "--property"),
                                          ignore_constraints=args.ignore_constraints, request_id=args.request_id)
    if args.logical_time is not None:
        request.logical_time.CopyFrom(_time(args.logical_time, "--logical-time"))
    response = client.jobs.RunSchedule(request, timeout=10)
    if args.json:
        return print_message(args, response)
    print(f"job {response.job_id}")
    return 0


def _backfill(client: SluiceClient, args) -> int:
    request = jobs_pb2.StartBackfillRequest(schedule_id=ids.schedule_id(client, args.id), request_id=args.request_id,
                                            keys=[_key_range(text) for text in args.keys])
    if not args.keys and (args.start is None or args.end is None):
        raise UsageError("--from and --to are needed (or --keys for a partition trigger's backfill)")
    if args.start is not None:
        request.start.CopyFrom(_time(args.start, "--from"))
    if args.end is not None:
        request.end.CopyFrom(_time(args.end, "--to"))
    backfill = client.jobs.StartBackfill(request, timeout=60)
    return print_message(args, backfill) if args.json else _print(backfill)


def _list(client: SluiceClient, args) -> int:
    schedule_id = ids.schedule_id(client, args.schedule, with_history=True) if args.schedule else ""
    found = client.list_backfills(schedule_id)
    return print_many(args, found, "\n".join(progress(b) for b in found) or "no backfills")


def _get(client: SluiceClient, args) -> int:
    backfill = client.jobs.GetBackfill(jobs_pb2.GetBackfillRequest(id=args.id), timeout=10)
    return print_message(args, backfill) if args.json else _print(backfill)


def _cancel(client: SluiceClient, args) -> int:
    backfill = client.jobs.CancelBackfill(jobs_pb2.CancelBackfillRequest(id=args.id), timeout=10)
    if args.running:
        for run_id in backfill.running_runs:
            try:
                client.runs.CancelRun(runs_pb2.CancelRunRequest(id=run_id, reason=f"backfill {backfill.id} cancelled"),
                                      timeout=30)
            except grpc.RpcError as refused:
                if refused.code() != grpc.StatusCode.FAILED_PRECONDITION:  # it ended meanwhile
                    raise
        if backfill.running_runs:
            backfill = client.jobs.GetBackfill(jobs_pb2.GetBackfillRequest(id=backfill.id), timeout=10)
    return print_message(args, backfill) if args.json else _print(backfill)


def _print(backfill: jobs_pb2.Backfill) -> int:
    print(progress(backfill))
    return 0


def _key_range(text: str) -> jobs_pb2.KeyRange:
    name, equals, span = text.partition("=")
    lower, dots, upper = span.partition("..")
    if not name or not equals or not dots:
        raise UsageError(f"--keys: expected KEY=LOW..HIGH, got {text!r}")
    return jobs_pb2.KeyRange(name=name, lower=lower, upper=upper)


def _time(text: str, option: str):
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"{option}: not an ISO 8601 time: {text!r}") from None
    if when.tzinfo is None:
        raise UsageError(f"{option}: give a zone, e.g. {text}Z or {text}+01:00")
    return timestamp_to_proto(when)
