"""The one permission table: what each role may do, and for every gRPC method and HTTP route, the
permission it needs and where the request's namespace (and dataset) is found.

A request's targets come from its fields, or, for requests addressed by id (GetSchedule, GetRun,
ReleaseCommitSequence, ...), from a resolver the serving service supplies (ServiceSpec.resolvers,
by the names in RESOLVERS). Targets:
- Target(ns) / Target(ns, dataset): the permission is needed on that namespace (dataset).
- Target(ANY_NAMESPACE): a listing over every namespace; the permission is needed on "*".
- UNRESOLVED: nothing of that id exists here (or the request cannot be read): the permission is
  needed on some namespace, and the service then answers NOT_FOUND or INVALID_ARGUMENT.
ListDatasets is the one listing filtered instead: it answers the datasets the caller may read.

README.md's "Authorization" table states the same, one row per method and route; the
authorization matrix test (tests/integration/test_authorization_matrix.py) holds both to it."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Mapping

from sluice.runtime.access import ANY_NAMESPACE, Role


@dataclass(frozen=True)
class Target:
    namespace: str | None
    """A namespace, ANY_NAMESPACE, or None: not known (UNRESOLVED)."""
    dataset: str = ""
    """The dataset in it, for producer's and program's dataset-scoped grants; empty: the namespace."""
    listing: bool = False
    """A filtered listing: a dataset-scoped grant in the namespace is enough to ask."""


UNRESOLVED = Target(None)

Resolver = Callable[[Any], "list[Target] | Awaitable[list[Target]]"]
"""A service's way from a request (or an id in it) to its targets; [] or [UNRESOLVED] when unknown."""

# Resolver names: services supply them (ServiceSpec.resolvers).
SCHEDULE = "schedule"                  # a schedule id -> its program's namespace
SCHEDULE_JOBS = "schedule_jobs"        # a schedule id -> the namespace of its jobs (checker)
SCHEDULE_RUNS = "schedule_runs"        # a schedule id -> the namespace of its runs (launcher)
RUN = "run"                            # a run id -> its program's namespace
CONSUMER_STATE = "consumer_state"      # ConsumeWithState's state -> its dataset
COMMIT_SEQUENCE = "commit_sequence"    # a commit sequence id -> the datasets it publishes
LINEAGE_BODY = "lineage_body"          # POST /api/v1/lineage's body -> its job's namespace
ALERT_SCHEDULE = "alert_schedule"      # a schedule id -> its namespace as the alerts service saw it
BACKFILL = "backfill"                  # a backfill id -> its schedule's namespace (checker)
RESOLVERS = (SCHEDULE, SCHEDULE_JOBS, SCHEDULE_RUNS, RUN, CONSUMER_STATE, COMMIT_SEQUENCE, LINEAGE_BODY, ALERT_SCHEDULE, BACKFILL)


ROLE_PERMISSIONS: dict[Role, frozenset[str]] = {
    Role.READER: frozenset({"schedules.read", "jobs.read", "runs.read", "datasets.read", "commits.read",
                            "lineage.read", "metrics.read", "deadletters.read"}),
    Role.PRODUCER: frozenset({"datasets.read", "partitions.write", "notifications.publish"}),
    Role.PROGRAM: frozenset({"datasets.read", "partitions.consume"}),
}
ROLE_PERMISSIONS[Role.OPERATOR] = ROLE_PERMISSIONS[Role.READER] | {
    "schedules.write", "apps.deploy", "datasets.write", "partitions.consume", "consumers.write", "lineage.write",
    "deadletters.replay", "log.read", "runs.cancel"}
ROLE_PERMISSIONS[Role.ADMIN] = ROLE_PERMISSIONS[Role.OPERATOR] | ROLE_PERMISSIONS[Role.PRODUCER] | {
    "commits.release", "runs.launch"}
DATASET_SCOPED = (Role.PRODUCER, Role.PROGRAM)
"""Roles whose grants cover only their named datasets ("*" in datasets: all of the namespace)."""


@dataclass(frozen=True)
class Rule:
    permission: str | None
    """None: any authenticated caller (Access.WhoAmI)."""
    targets: Callable[[Any, Mapping[str, Resolver]], "list[Target] | Awaitable[list[Target]]"]
    filter: Callable[[Any, Callable[[str, str], bool]], None] | None = None
    """Drops from a response (in place) what the caller may not read: (response, may_read(ns, dataset))."""


def _ns(field: str, dataset: str = "") -> Callable[[Any, Mapping[str, Resolver]], list[Target]]:
    """The namespace in `field` (and the dataset in `dataset`); empty: every namespace."""
    def targets(request: Any, resolvers: Mapping[str, Resolver]) -> list[Target]:
        namespace = _get(request, field)
        return [Target(namespace or ANY_NAMESPACE, _get(request, dataset) if dataset else "")]
    return targets


def _by(*names: str, field: str = "", every_namespace_when_empty: bool = False) -> Callable:
    """The targets the first of the resolvers `names` (those this server has) that knows the
    request's `field` (the request itself without one) finds."""
    def targets(request: Any, resolvers: Mapping[str, Resolver]) -> Any:
        key = _get(request, field) if field else request
        if field and not key:
            return [Target(ANY_NAMESPACE)] if every_namespace_when_empty else [UNRESOLVED]
        found = [resolvers[name] for name in names if name in resolvers]
        if len(found) == 1 and not field:
            return found[0](key)
        for resolve in found:  # resolvers by id are synchronous
            answer = resolve(key)
            if answer != [UNRESOLVED]:
                return answer
        return [UNRESOLVED]
    return targets


def _every(request: Any, resolvers: Mapping[str, Resolver]) -> list[Target]:
    return [Target(ANY_NAMESPACE)]


def _nothing(request: Any, resolvers: Mapping[str, Resolver]) -> list[Target]:
    return []


def _schedule_write(request: Any, resolvers: Mapping[str, Resolver]) -> Any:
    """The schedule's program's namespace, and its current one when addressed by id (UpdateSchedule)."""
    named = [Target(request.schedule.program.namespace or ANY_NAMESPACE)]
    if not request.schedule.id or SCHEDULE not in resolvers:
        return named
    return _then(resolvers[SCHEDULE](request.schedule.id), lambda current: named + current)


def _deploy(request: Any, resolvers: Mapping[str, Resolver]) -> list[Target]:
    return [Target(ns or ANY_NAMESPACE) for ns in {request.namespace, *(s.program.namespace for s in request.schedules)}]


def _notification(request: Any, resolvers: Mapping[str, Resolver]) -> list[Target]:
    """A partition's dataset; a program status its namespace; a time tick every namespace."""
    n = request.notification
    kind = n.WhichOneof("payload")
    if kind == "partition_committed":
        return [Target(n.partition_committed.namespace or ANY_NAMESPACE, n.partition_committed.dataset)]
    if kind == "program_status_changed":
        return [Target(n.program_status_changed.program.namespace or ANY_NAMESPACE)]
    return [Target(ANY_NAMESPACE)] if kind == "time_tick" else [UNRESOLVED]


def _list_datasets(request: Any, resolvers: Mapping[str, Resolver]) -> list[Target]:
    return [Target(request.namespace or None, listing=True)]


def _only_readable_datasets(response: Any, may_read: Callable[[str, str], bool]) -> None:
    kept = [d for d in response.datasets if may_read(d.namespace, d.name)]
    del response.datasets[:]
    response.datasets.extend(kept)


def _lineage_node(request: Any, resolvers: Mapping[str, Resolver]) -> list[Target]:
    return [node_target(request.node_id)]


def _lineage_event(request: Any, resolvers: Mapping[str, Resolver]) -> list[Target]:
    return [lineage_event_target(request.event)]


def node_target(node_id: str) -> Target:
    """`job:<namespace>:<name>` or `dataset:<namespace>:<name>`: the namespace."""
    kind, _, rest = node_id.partition(":")
    namespace, found, _ = rest.partition(":")
    return Target(namespace) if kind in ("job", "dataset") and found and namespace else UNRESOLVED


def lineage_event_target(body: bytes) -> Target:
    """An OpenLineage run event's job namespace; UNRESOLVED when the body is not such JSON."""
    try:
        namespace = json.loads(body)["job"]["namespace"]
    except (ValueError, TypeError, KeyError, RecursionError):
        return UNRESOLVED
    return Target(namespace) if isinstance(namespace, str) and namespace else UNRESOLVED


def _then(value: Any, then: Callable[[Any], Any]) -> Any:
    if hasattr(value, "__await__"):
        async def chained() -> Any:
            return then(await value)
        return chained()
    return then(value)


def _get(request: Any, path: str) -> str:
    for part in path.split("."):
        request = getattr(request, part)
    return request


def _method(service: str, name: str) -> str:
    return f"/sluice.v1.{service}/{name}"


_SCHEDULE_ID = {"field": "schedule_id", "every_namespace_when_empty": True}
"""Listings of a schedule's jobs or runs: every schedule's when none is named."""

GRPC_RULES: dict[str, Rule] = {
    # ScheduleRegistry (registry)
    _method("ScheduleRegistry", "DeployApp"): Rule("apps.deploy", _deploy),
    _method("ScheduleRegistry", "CreateSchedule"): Rule("schedules.write", _schedule_write),
    _method("ScheduleRegistry", "UpdateSchedule"): Rule("schedules.write", _schedule_write),
    _method("ScheduleRegistry", "GetSchedule"): Rule("schedules.read", _by(SCHEDULE, field="id")),
    _method("ScheduleRegistry", "ListSchedules"): Rule("schedules.read", _ns("namespace")),
    _method("ScheduleRegistry", "DeleteSchedule"): Rule("schedules.write", _by(SCHEDULE, field="id")),
    _method("ScheduleRegistry", "EnableSchedule"): Rule("schedules.write", _by(SCHEDULE, field="id")),
    _method("ScheduleRegistry", "DisableSchedule"): Rule("schedules.write", _by(SCHEDULE, field="id")),
    _method("ScheduleRegistry", "GetApp"): Rule("schedules.read", _ns("namespace")),
    _method("ScheduleRegistry", "ListApps"): Rule("schedules.read", _ns("namespace")),
    _method("ScheduleRegistry", "DeleteApp"): Rule("apps.deploy", _ns("namespace")),
    _method("ScheduleRegistry", "PauseApp"): Rule("schedules.write", _ns("namespace")),
    _method("ScheduleRegistry", "ResumeApp"): Rule("schedules.write", _ns("namespace")),
    # Notifications (registry)
    _method("Notifications", "Publish"): Rule("notifications.publish", _notification),
    # Jobs (checker)
    _method("Jobs", "ListJobs"): Rule("jobs.read", _by(SCHEDULE, SCHEDULE_JOBS, **_SCHEDULE_ID)),
    _method("Jobs", "RunSchedule"): Rule("schedules.write", _by(SCHEDULE, SCHEDULE_JOBS, field="schedule_id")),
    _method("Jobs", "StartBackfill"): Rule("schedules.write", _by(SCHEDULE, SCHEDULE_JOBS, field="schedule_id")),
    _method("Jobs", "GetBackfill"): Rule("jobs.read", _by(BACKFILL, field="id")),
    _method("Jobs", "ListBackfills"): Rule("jobs.read", _by(SCHEDULE, SCHEDULE_JOBS, **_SCHEDULE_ID)),
    _method("Jobs", "CancelBackfill"): Rule("schedules.write", _by(BACKFILL, field="id")),
    # Runs (launcher)
    _method("Runs", "ListRuns"): Rule("runs.read", _by(SCHEDULE, SCHEDULE_RUNS, **_SCHEDULE_ID)),
    _method("Runs", "GetRun"): Rule("runs.read", _by(RUN, field="id")),
    _method("Runs", "CancelRun"): Rule("runs.cancel", _by(RUN, field="id")),
    _method("Runs", "StreamRunLog"): Rule("runs.read", _by(RUN, field="id")),
    # Partitions (datasets)
    _method("Partitions", "CreateDataset"): Rule("datasets.write", _ns("dataset.namespace", "dataset.name")),
    _method("Partitions", "GetDataset"): Rule("datasets.read", _ns("namespace", "name")),
    _method("Partitions", "ListDatasets"): Rule("datasets.read", _list_datasets, _only_readable_datasets),
    _method("Partitions", "AddPartitions"): Rule("partitions.write", _ns("namespace", "dataset")),
    _method("Partitions", "BeginTransaction"): Rule("partitions.write", _ns("namespace", "dataset")),
    _method("Partitions", "CommitTransaction"): Rule("partitions.write", _ns("namespace", "dataset")),
    _method("Partitions", "AbortTransaction"): Rule("partitions.write", _ns("namespace", "dataset")),
    _method("Partitions", "ListPartitions"): Rule("datasets.read", _ns("namespace", "dataset")),
    _method("Partitions", "Consume"): Rule("partitions.consume", _ns("namespace", "dataset")),
    _method("Partitions", "FinishPartitions"): Rule("consumers.write", _ns("namespace", "dataset")),
    _method("Partitions", "GetConsumer"): Rule("datasets.read", _ns("namespace", "dataset")),
    _method("Partitions", "ConsumeWithState"): Rule("consumers.write", _by(CONSUMER_STATE, field="consumer_state")),
    _method("Partitions", "ListCommitSequences"): Rule("commits.read", _every),
    _method("Partitions", "ReleaseCommitSequence"): Rule("commits.release", _by(COMMIT_SEQUENCE, field="id")),
    # RunData (datasets): the launcher's, an admin of every namespace (its --grpc-token)
    _method("RunData", "OpenRun"): Rule("runs.launch", _every),
    _method("RunData", "PublishRun"): Rule("runs.launch", _every),
    _method("RunData", "ReleaseRun"): Rule("runs.launch", _every),
    # Lineage (lineage)
    _method("Lineage", "ListJobs"): Rule("lineage.read", _ns("namespace")),
    _method("Lineage", "ListRuns"): Rule("lineage.read", _ns("job_namespace")),
    _method("Lineage", "RecordEvent"): Rule("lineage.write", _lineage_event),
    _method("Lineage", "GetJob"): Rule("lineage.read", _ns("namespace")),
    _method("Lineage", "GetLineage"): Rule("lineage.read", _lineage_node),
    # DeadLetters and EventLog (registry): the bus and the log are every namespace's
    _method("DeadLetters", "ListDeadLetters"): Rule("deadletters.read", _every),
    _method("DeadLetters", "ReplayDeadLetter"): Rule("deadletters.replay", _every),
    _method("EventLog", "ListStreams"): Rule("log.read", _every),
    _method("EventLog", "ReadStream"): Rule("log.read", _every),
    # Alerts (alerts): a policy is part of its schedule's configuration
    _method("Alerts", "SetAlertPolicy"): Rule("schedules.write", _by(SCHEDULE, ALERT_SCHEDULE, field="policy.schedule_id")),
    _method("Alerts", "GetAlertPolicy"): Rule("schedules.read", _by(SCHEDULE, ALERT_SCHEDULE, field="schedule_id")),
    _method("Alerts", "ListAlertPolicies"): Rule("schedules.read", _every),
    _method("Alerts", "DeleteAlertPolicy"): Rule("schedules.write", _by(SCHEDULE, ALERT_SCHEDULE, field="schedule_id")),
    _method("Alerts", "ListSlaMisses"): Rule("schedules.read", _by(SCHEDULE, ALERT_SCHEDULE, **_SCHEDULE_ID)),
    # Access (every server)
    _method("Access", "WhoAmI"): Rule(None, _nothing),
}


def _path_namespace(request: Any, resolvers: Mapping[str, Resolver]) -> list[Target]:
    return [Target(request.match_info.get("namespace") or ANY_NAMESPACE)]


def _query_node(request: Any, resolvers: Mapping[str, Resolver]) -> list[Target]:
    return [node_target(request.query.get("nodeId", ""))]


HTTP_RULES: dict[tuple[str, str], Rule] = {
    ("POST", "/api/v1/lineage"): Rule("lineage.write", _by(LINEAGE_BODY)),
    ("GET", "/api/v1/namespaces/{namespace}/jobs"): Rule("lineage.read", _path_namespace),
    ("GET", "/api/v1/namespaces/{namespace}/jobs/{job}"): Rule("lineage.read", _path_namespace),
    ("GET", "/api/v1/namespaces/{namespace}/jobs/{job}/runs"): Rule("lineage.read", _path_namespace),
    ("GET", "/api/v1/lineage"): Rule("lineage.read", _query_node),
    ("GET", "/api/v1/namespaces"): Rule("lineage.read", _every),
    ("GET", "/api/v1/namespaces/{namespace}"): Rule("lineage.read", _path_namespace),
    ("GET", "/api/v1/namespaces/{namespace}/datasets"): Rule("lineage.read", _path_namespace),
    ("GET", "/api/v1/namespaces/{namespace}/datasets/{dataset}"): Rule("lineage.read", _path_namespace),
    ("GET", "/api/v1/namespaces/{namespace}/datasets/{dataset}/versions"): Rule("lineage.read", _path_namespace),
    ("GET", "/api/v1/jobs/runs/{run}"): Rule("lineage.read", _every),
    ("GET", "/api/v1/jobs/runs/{run}/facets"): Rule("lineage.read", _every),
    ("GET", "/api/v1/search"): Rule("lineage.read", _every),
    ("GET", "/api/v1/events/lineage"): Rule("lineage.read", _every),
    ("GET", "/metrics"): Rule("metrics.read", _every),
}
OPEN_ROUTES = frozenset({("GET", "/healthz"), ("GET", "/readyz")})
"""Answered to anyone: probes need no secret, and they say only "ok" or why not."""


def permitted(role: Role, permission: str | None) -> bool:
    return permission is None or permission in ROLE_PERMISSIONS[role]
