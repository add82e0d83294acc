"""gRPC edge of the alerts service: alert policies per schedule and the SLA misses (for the console too)."""
from __future__ import annotations

from sluice.domain.alerts.policy import AlertOn, AlertPolicy, CompleteBy, CompleteWithin, redacted
from sluice.domain.alerts.watch import SlaMiss, Watch
from sluice.domain.errors import InvalidArgument
from sluice.paging import after_key, fill_page, next_page_token, paging
from sluice.runtime.grpc_server import GrpcBinding, grpc_errors
from sluice.runtime.permissions import ALERT_SCHEDULE, UNRESOLVED, Resolver, Target
from sluice.v1 import alerts_pb2, alerts_pb2_grpc
from sluice.wire.common import timestamp_to_proto
from sluice_services.alerts.service import AlertsService

LIST_POLICIES = "Alerts.ListAlertPolicies"
LIST_MISSES = "Alerts.ListSlaMisses"


class AlertsServicer(alerts_pb2_grpc.AlertsServicer):
    def __init__(self, alerts: AlertsService) -> None:
        self._alerts = alerts

    @grpc_errors
    async def SetAlertPolicy(self, request, context):
        if not request.HasField("policy"):
            raise InvalidArgument("policy", "is required")
        return policy_to_proto(self._alerts.set_policy(policy_from_proto(request.policy)))

    @grpc_errors
    async def GetAlertPolicy(self, request, context):
        return policy_to_proto(self._alerts.get(_require_id(request.schedule_id)))

    @grpc_errors
    async def DeleteAlertPolicy(self, request, context):
        self._alerts.delete(_require_id(request.schedule_id))
        return alerts_pb2.DeleteAlertPolicyResponse()

    @grpc_errors
    async def ListAlertPolicies(self, request, context):
        size, after = paging(request, LIST_POLICIES, lambda key: len(key) == 1 and isinstance(key[0], str))
        watches = sorted(self._alerts.state.watches.values(), key=lambda w: w.policy.schedule_id)
        page, last = fill_page(after_key(watches, lambda w: (w.policy.schedule_id,), after), size, policy_to_proto)
        return alerts_pb2.ListAlertPoliciesResponse(policies=page, next_page_token=next_page_token(LIST_POLICIES, last))

    @grpc_errors
    async def ListSlaMisses(self, request, context):
        """Newest deadline first: keyed by the negated deadline (microseconds), then schedule and job."""
        size, after = paging(request, LIST_MISSES, _is_miss_key)
        misses = sorted((m for m in self._alerts.state.misses
                         if not request.schedule_id or m.schedule_id == request.schedule_id), key=_miss_key)
        page, last = fill_page(after_key(misses, _miss_key, after), size, miss_to_proto)
        return alerts_pb2.ListSlaMissesResponse(misses=page, next_page_token=next_page_token(LIST_MISSES, last))


def policy_from_proto(message: alerts_pb2.AlertPolicy) -> AlertPolicy:
    kind = message.sla.WhichOneof("kind") if message.HasField("sla") else None
    sla: CompleteBy | CompleteWithin | None = None
    if kind == "complete_by":
        sla = CompleteBy(message.sla.complete_by.time_of_day, message.sla.complete_by.zone)
    elif kind == "within_minutes":
        sla = CompleteWithin(message.sla.within_minutes)
    on = []
    for index, value in enumerate(message.on):
        if value == alerts_pb2.FAILURE:
            on.append(AlertOn.FAILURE)
        elif value == alerts_pb2.SLA_MISS:
            on.append(AlertOn.SLA_MISS)
        else:
            raise InvalidArgument(f"policy.on[{index}]", "must be FAILURE or SLA_MISS")
    return AlertPolicy(message.schedule_id, sla, tuple(message.webhooks),
                       tuple(dict.fromkeys(on)) or (AlertOn.FAILURE, AlertOn.SLA_MISS))


def policy_to_proto(found: Watch) -> alerts_pb2.AlertPolicy:
    policy = found.policy
    message = alerts_pb2.AlertPolicy(schedule_id=policy.schedule_id, webhooks=[redacted(url) for url in policy.webhooks],
                                     on=[alerts_pb2.AlertOn.Value(kind.value) for kind in policy.on])
    match policy.sla:
        case CompleteBy(time_of_day, zone):
            message.sla.complete_by.time_of_day = time_of_day
            message.sla.complete_by.zone = zone
        case CompleteWithin(minutes):
            message.sla.within_minutes = minutes
    if found.next_deadline is not None:
        message.next_deadline.CopyFrom(timestamp_to_proto(found.next_deadline))
    return message


def miss_to_proto(miss: SlaMiss) -> alerts_pb2.SlaMiss:
    return alerts_pb2.SlaMiss(schedule_id=miss.schedule_id, deadline=timestamp_to_proto(miss.deadline),
                              job_id=miss.job_id, kind=miss.kind, recorded_at=timestamp_to_proto(miss.at))


def _miss_key(miss: SlaMiss) -> tuple[int, str, str]:
    return -int(miss.deadline.timestamp() * 1_000_000), miss.schedule_id, miss.job_id


def _is_miss_key(key: tuple) -> bool:
    return len(key) == 3 and isinstance(key[0], int) and isinstance(key[1], str) and isinstance(key[2], str)


def _require_id(schedule_id: str) -> str:
    if not schedule_id:
        raise InvalidArgument("schedule_id", "must not be empty")
    return schedule_id


def bindings(alerts: AlertsService) -> list[GrpcBinding]:
    return [GrpcBinding(alerts_pb2.DESCRIPTOR.services_by_name["Alerts"].full_name,
                        alerts_pb2_grpc.add_AlertsServicer_to_server, AlertsServicer(alerts))]


def resolvers(alerts: AlertsService) -> dict[str, Resolver]:
    """A schedule id -> its namespace as the schedules topic told this service (the registry's resolver, in
    the same process, knows it first)."""
    def schedule(schedule_id: str) -> list[Target]:
        namespace = alerts.namespace_of(schedule_id)
        return [Target(namespace)] if namespace else [UNRESOLVED]
    return {ALERT_SCHEDULE: schedule}
