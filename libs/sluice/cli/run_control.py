"""`sluice runs cancel` and `sluice runs logs`."""
from __future__ import annotations

import sys

from sluice.cli import ids
from sluice.cli.output import UsageError, print_message
from sluice.client import SluiceClient
from sluice.v1 import notifications_pb2, runs_pb2

CANCEL_TIMEOUT_SECONDS = 30
INT32_MAX = 2**31 - 1


def register(runs) -> None:
    """Adds `cancel` and `logs` to the `runs` group's actions."""
    cancel = runs.add_parser("cancel", help="stop a run: its program's processes killed, the run ends KILLED",
                             description="The launcher records the cancel, sends the program's process group "
                                         "SIGTERM and SIGKILL after a grace; a run not started yet ends at once. "
                                         "Prints the run's status once it ended (or as it is after a few seconds).")
    cancel.add_argument("id", help="the run's id or a unique prefix of it")
    cancel.add_argument("--reason", default="", help="why, kept in the run's error (at most 1,000 characters)")
    cancel.set_defaults(handler=_cancel)
    logs = runs.add_parser("logs", help="an attempt's driver log (stdout and stderr); -f follows it",
                           description="Prints the attempt's log as written; with -f goes on printing what the "
                                       "program writes until the attempt ends. A run on a Spark cluster first "
                                       "gets a line on stderr naming its application and that application's status.")
    logs.add_argument("id", help="the run's id or a unique prefix of it")
    logs.add_argument("-f", "--follow", action="store_true", help="print lines as they are written, until the attempt ends")
    logs.add_argument("--attempt", type=int, default=0, metavar="N", help="that attempt's log (default: the current one)")
    logs.add_argument("--tail", type=int, default=None, metavar="N",
                      help="only its last N lines (then what is written next, with -f; default: the whole log)")
    logs.set_defaults(handler=_logs)


def _cancel(client: SluiceClient, args) -> int:
    request = runs_pb2.CancelRunRequest(id=ids.run_id(client, args.id), reason=args.reason)
    run = client.runs.CancelRun(request, timeout=CANCEL_TIMEOUT_SECONDS)
    if args.json:
        return print_message(args, run)
    status = notifications_pb2.RunStatus.Name(run.status)
    if status == "KILLED":
        print(f"run {run.id[:8]} KILLED: {run.error}")
    else:
        print(f"run {run.id[:8]} is being cancelled (still {status}): its program is being killed")
    return 0


def _logs(client: SluiceClient, args) -> int:
    if args.attempt < 0:
        raise UsageError(f"--attempt: must be 1 or more, got {args.attempt}")
    if args.tail is not None and args.tail < 1:
        raise UsageError(f"--tail: must be 1 or more (leave it out for the whole log), got {args.tail}")
    if args.tail is not None and args.tail > INT32_MAX:
        raise UsageError(f"--tail: far too many lines, got {args.tail}")
    run_id = ids.run_id(client, args.id)
    run = client.get_run(run_id)
    if run.spark_application_id:
        print(spark_application_line(run), file=sys.stderr, flush=True)
    request = runs_pb2.StreamRunLogRequest(id=run_id, attempt=args.attempt, follow=args.follow, tail_lines=args.tail or 0)
    out = sys.stdout.buffer
    try:
        for chunk in client.runs.StreamRunLog(request, timeout=None if args.follow else 60):
            out.write(chunk.data)
            out.flush()
    except KeyboardInterrupt:
        return 130
    return 0


def spark_application_line(run: runs_pb2.Run) -> str:
    """The run's Spark application and its status: running with the attempt that drives it (client mode:
    the driver is the attempt's spark-submit), ended when that attempt did."""
    attempt = next((a for a in reversed(run.attempts) if a.spark_application_id == run.spark_application_id), None)
    going = attempt is not None and attempt.status == notifications_pb2.RUNNING
    status = "RUNNING" if going else f"ended ({notifications_pb2.RunStatus.Name(attempt.status if attempt else run.status)})"
    ui = f", driver UI {run.spark_ui_url}" if run.spark_ui_url and going else ""
    return f"spark application {run.spark_application_id}: {status}{ui}"
