"""`sluice alerts set|get|list|delete|misses`: a schedule's SLA and failure webhooks (the Alerts API).
A schedule id may be a unique prefix of it."""
from __future__ import annotations

import re

from sluice.cli import ids, render
from sluice.cli.output import UsageError, print_many, print_message
from sluice.client import SluiceClient
from sluice.v1 import alerts_pb2, alerts_pb2_grpc

_WITHIN = re.compile(r"([0-9]{1,6})([mh]?)")
_ON = {"failure": alerts_pb2.FAILURE, "sla": alerts_pb2.SLA_MISS, "sla_miss": alerts_pb2.SLA_MISS}
FULL_ID_LENGTH = 36
TIMEOUT = 10.0


def register(commands) -> None:
    alerts = commands.add_parser("alerts", help="SLAs and failure webhooks per schedule").add_subparsers(metavar="ACTION")
    set_ = alerts.add_parser("set", help="set a schedule's alert policy (replaces the one it had)",
                             description="An SLA is a COMPLETED run each local day by --sla-by HH:MM in --zone, or "
                                         "within --sla-within (90m, 2h) of each job's trigger. Webhooks get "
                                         "Slack-compatible JSON, retried with backoff until they answer 2xx.")
    set_.add_argument("schedule", metavar="SCHEDULE", help="the schedule's id or a unique prefix of it")
    sla = set_.add_mutually_exclusive_group()
    sla.add_argument("--sla-by", metavar="HH:MM", help="a run completed each local day by this time (needs --zone)")
    sla.add_argument("--sla-within", metavar="DURATION", help="a run completed within this long of each trigger: 90m, 2h")
    set_.add_argument("--zone", metavar="ZONE", help="the IANA time zone of --sla-by, e.g. Europe/Berlin")
    set_.add_argument("--webhook", metavar="URL", action="append", required=True,
                      help="an http(s) URL to POST alerts to (repeat for several)")
    set_.add_argument("--on", metavar="KINDS", default="failure,sla",
                      help="what to alert on: failure, sla, or failure,sla (the default)")
    set_.set_defaults(handler=_set)
    get = alerts.add_parser("get", help="a schedule's alert policy (webhooks shown without their path)")
    get.add_argument("schedule", metavar="SCHEDULE")
    get.set_defaults(handler=_get)
    listing = alerts.add_parser("list", help="every schedule's alert policy")
    listing.set_defaults(handler=_list)
    delete = alerts.add_parser("delete", help="remove a schedule's alert policy")
    delete.add_argument("schedule", metavar="SCHEDULE")
    delete.set_defaults(handler=_delete)
    misses = alerts.add_parser("misses", help="SLA misses, newest deadline first")
    misses.add_argument("--schedule", default="", help="only this schedule's (id or unique prefix)")
    misses.set_defaults(handler=_misses)


def _stub(client: SluiceClient) -> alerts_pb2_grpc.AlertsStub:
    return alerts_pb2_grpc.AlertsStub(client.channel)


def _schedule(client: SluiceClient, given: str) -> str:
    """A full id as given (the alerts service may run without the registry beside it); else a prefix."""
    given = given.strip()
    return given if len(given) >= FULL_ID_LENGTH else ids.schedule_id(client, given)


def parse_within(text: str) -> int:
    """Minutes of `90m`, `2h` or `45` (minutes)."""
    match = _WITHIN.fullmatch(text.strip())
    if match is None:
        raise UsageError(f"--sla-within: expected minutes or hours such as 90m or 2h, got {text[:40]!r}")
    return int(match.group(1)) * (60 if match.group(2) == "h" else 1)


def parse_on(text: str) -> list[int]:
    kinds = [part.strip().lower() for part in text.split(",") if part.strip()]
    unknown = [kind for kind in kinds if kind not in _ON]
    if unknown or not kinds:
        raise UsageError(f"--on: expected failure, sla or failure,sla, got {text[:40]!r}")
    return list(dict.fromkeys(_ON[kind] for kind in kinds))


def _set(client: SluiceClient, args) -> int:
    if args.sla_by and not args.zone:
        raise UsageError("--zone: required with --sla-by (an IANA zone such as Europe/Berlin)")
    if args.zone and not args.sla_by:
        raise UsageError("--zone: only with --sla-by")
    policy = alerts_pb2.AlertPolicy(schedule_id=_schedule(client, args.schedule), webhooks=args.webhook,
                                    on=parse_on(args.on))
    if args.sla_by:
        policy.sla.complete_by.time_of_day, policy.sla.complete_by.zone = args.sla_by, args.zone
    elif args.sla_within:
        policy.sla.within_minutes = parse_within(args.sla_within)
    answer = _stub(client).SetAlertPolicy(alerts_pb2.SetAlertPolicyRequest(policy=policy), timeout=TIMEOUT)
    if args.json:
        return print_message(args, answer)
    print(f"alert policy of schedule {answer.schedule_id} set: {_describe(answer)}")
    return 0


def _get(client: SluiceClient, args) -> int:
    answer = _stub(client).GetAlertPolicy(alerts_pb2.GetAlertPolicyRequest(schedule_id=_schedule(client, args.schedule)),
                                          timeout=TIMEOUT)
    return print_message(args, answer)


def _list(client: SluiceClient, args) -> int:
    policies, token = [], ""
    while True:
        page = _stub(client).ListAlertPolicies(alerts_pb2.ListAlertPoliciesRequest(page_token=token),
                                               timeout=TIMEOUT)
        policies += page.policies
        token = page.next_page_token
        if not token:
            break
    rows = [(p.schedule_id[:8], _sla_text(p), ",".join(alerts_pb2.AlertOn.Name(k).lower() for k in p.on),
             render.when(p.next_deadline), " ".join(p.webhooks)) for p in policies]
    return print_many(args, policies, render.table(("SCHEDULE", "SLA", "ON", "NEXT DEADLINE", "WEBHOOKS"), rows))


def _delete(client: SluiceClient, args) -> int:
    schedule_id = _schedule(client, args.schedule)
    _stub(client).DeleteAlertPolicy(alerts_pb2.DeleteAlertPolicyRequest(schedule_id=schedule_id),
                                    timeout=TIMEOUT)
    print(f"alert policy of schedule {schedule_id} deleted")
    return 0


def _misses(client: SluiceClient, args) -> int:
    schedule_id = _schedule(client, args.schedule) if args.schedule else ""
    misses, token = [], ""
    while True:
        page = _stub(client).ListSlaMisses(alerts_pb2.ListSlaMissesRequest(schedule_id=schedule_id, page_token=token),
                                           timeout=TIMEOUT)
        misses += page.misses
        token = page.next_page_token
        if not token:
            break
    rows = [(m.schedule_id[:8], m.kind, render.when(m.deadline), m.job_id[:8] or "-", render.when(m.recorded_at))
            for m in misses]
    return print_many(args, misses, render.table(("SCHEDULE", "SLA", "DEADLINE", "JOB", "RECORDED"), rows))


def _sla_text(policy: alerts_pb2.AlertPolicy) -> str:
    kind = policy.sla.WhichOneof("kind")
    if kind == "complete_by":
        return f"by {policy.sla.complete_by.time_of_day} {policy.sla.complete_by.zone}"
    if kind == "within_minutes":
        return f"within {policy.sla.within_minutes}m"
    return "-"


def _describe(policy: alerts_pb2.AlertPolicy) -> str:
    on = ",".join(alerts_pb2.AlertOn.Name(k).lower() for k in policy.on)
    return f"SLA {_sla_text(policy)}, on {on}, {len(policy.webhooks)} webhook(s)"
