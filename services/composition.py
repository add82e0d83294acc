"""Composition root: wires each service's handlers to a bus, an event log and a gRPC server."""
from __future__ import annotations

import asyncio
import logging
import os
import secrets
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from sluice.bus.inprocess import InProcessBus
from sluice.bus.port import Bus, Producer
from sluice.bus.topics import (
    LAUNCH_REQUESTS,
    LINEAGE,
    PARTITION_NOTIFICATIONS,
    PROGRAM_NOTIFICATIONS,
)
from sluice.clock import Clock
from sluice.domain.constraints import UNLIMITED, Capacity
from sluice.domain.errors import InvalidArgument
from sluice.eventlog.port import EventLog
from sluice.readmodels.jobs import DEFAULT_FINISHED_PER_SCHEDULE, JobsView
from sluice.runtime.metrics_scheduler import checker_metrics, launcher_metrics
from sluice.runtime.access import ANY_NAMESPACE, Grant, Principal, Role
from sluice.runtime.auth_policy import TokenAuthenticator
from sluice.runtime.consumer import Subscription
from sluice.runtime.grpc_security import GrpcSecurity
from sluice.runtime.http_auth import server_ssl_context
from sluice.runtime.grpc_server import GrpcBinding
from sluice.runtime.service import ServiceSpec
from sluice.wire.sent_jobs import SentJobs
from sluice.v1 import lineage_pb2, lineage_pb2_grpc
from sluice_services import catalogue
from sluice_services.catalogue import NAMES
from sluice_services.alerts import grpc_api as alerts_grpc
from sluice_services.alerts.service import AlertsService
from sluice_services.checker import grpc_api as checker_grpc
from sluice_services.checker.partitions import GrpcPartitionSource
from sluice_services.checker.service import GROUP as CHECKER_GROUP, CheckerService
from sluice_services.datasets import grpc_api as datasets_grpc
from sluice_services.datasets.run_credentials import RunCredentials, load_secret
from sluice_services.datasets.run_outputs import RunPublisher
from sluice_services.datasets.service import DatasetsService, adopt_relay_position
from sluice_services.launcher import grpc_api as launcher_grpc
from sluice_services.launcher import service as launcher_service
from sluice_services.launcher.lease import DEFAULT_LEASE_SECONDS, LeaseKeeper, LeaseTerms, launcher_home
from sluice_services.launcher.program_api import ProgramApi
from sluice_services.launcher.program_user import ProgramUser
from sluice_services.launcher.run_control import DEFAULT_RUN_DIR_RETENTION
from sluice_services.launcher.run_data import RunData
from sluice_services.launcher.run_data_grpc import GrpcRunData
from sluice_services.launcher.programs import (
    DirectoryCatalog,
    ProgramCatalog,
    ProgramSubmitter,
    SparkConfig,
    SparkSubmitter,
)
from sluice.datasets.files import LocalFiles
from sluice_services.launcher.service import LauncherService
from sluice_services.lineage import http_api as lineage_http
from sluice_services.lineage.export import EXPORT_GROUP, OpenLineageExport
from sluice_services.lineage.grpc_api import LineageServicer
from sluice_services.lineage.service import LineageService
from sluice_services.matcher.fused import LookupAndMatch
from sluice_services.matcher.lookup import GROUP as LOOKUP_GROUP, ScheduleLookup
from sluice_services.matcher.service import GROUP as MATCH_GROUP, MatcherService
from sluice_services.registry import grpc_api as registry_grpc
from sluice_services.registry.service import RegistryService
from sluice_services.sre import dead_letters_grpc, event_log_grpc
from sluice_services.sre.dead_letters_grpc import DeadLetterFollower
from sluice_services.resolvers import checker_resolvers, datasets_resolvers, launcher_resolvers, registry_resolvers

SERVICES = NAMES
DEFAULT_APPS_DIR = Path(__file__).resolve().parent.parent / "examples"


@dataclass(frozen=True)
class Settings:
    data_dir: Path = Path(".sluice")
    host: str = "127.0.0.1"
    port: int = 50051
    spark: SparkConfig = field(default_factory=SparkConfig)
    apps_dir: Path = DEFAULT_APPS_DIR
    max_parallel_runs: int = 2
    event_log: str = ""
    """URL of the event log; empty: SQLite under data_dir (see sluice_services.adapters)."""
    bus: str = ""
    """URL of the bus; empty: the durable in-process bus under data_dir."""
    metrics_port: int | None = None
    """HTTP port of GET /metrics and /healthz on `host`; 0 picks a free one; None serves no metrics."""
    log_level: str = "WARNING"
    log_format: str = "text"
    """text, or json: one JSON object per line with the schedule, job and run ids (sluice.runtime.logs)."""
    capacity: Capacity = UNLIMITED
    """How many runs may go at once before normal-priority jobs wait (the checker's load limits)."""
    lineage_port: int | None = None
    """HTTP port of the lineage API (POST /api/v1/lineage, Marquez's read paths); 0: a free one; None: off."""
    lineage_token: str = field(default="", repr=False)
    """Bearer token the lineage HTTP endpoint requires of writers; empty: none."""
    openlineage_url: str = ""
    """An OpenLineage backend (its base URL) that gets every lineage event of Sluice's runs too; empty: none."""
    openlineage_api_key: str = field(default="", repr=False)
    """API key sent to that backend (Authorization: Bearer); empty: none."""
    jobs_history: int = DEFAULT_FINISHED_PER_SCHEDULE
    """Finished jobs the checker's jobs view keeps per schedule (the newest; the log keeps them all)."""
    runs_history: int = launcher_service.DEFAULT_FINISHED_RUNS_PER_SCHEDULE
    """Ended runs the launcher keeps in memory per schedule (the newest; the log keeps them all)."""
    grpc_security: GrpcSecurity = GrpcSecurity()
    """The gRPC API's bearer token and TLS certificate; by default neither."""
    program_env: tuple[str, ...] = ()
    """Environment variables programs get beyond the allowlist (sluice_services.launcher.program_env);
    a name ending in * allows a prefix."""
    program_user: str = ""
    """The launcher runs programs as this user (name or uid; the launcher then runs as root); empty: its own."""
    migrate: bool = True
    """Create or update the event log's schema at start (PostgreSQL; `sluice migrate` does it alone). False:
    a log that is not migrated stops the server (exit 2), and the server needs no DDL rights."""
    run_credential_secret: str = field(default="", repr=False)
    """The key the datasets service signs run credentials with; empty: data_dir's run-credentials.key
    (made once, 0600). Datasets services that do not share a data dir must share this."""
    run_dir_retention: timedelta = DEFAULT_RUN_DIR_RETENTION
    """The launcher: how long an ended run's directory (its context and driver logs) is kept."""
    datasets_token: str = field(default="", repr=False)
    """The launcher: its bearer token at the datasets service (an admin of every namespace there); empty:
    the --grpc-token."""
    datasets_address: str = ""
    """The launcher: host:port of the datasets service (its RunData API, and the Partitions API its programs
    are told); empty: the datasets service served in the same process (standalone)."""
    web_port: int | None = None
    """HTTP port of the web console (sluice_services.web) on `host`; 0 picks a free one; None: no console."""
    lease_seconds: float = DEFAULT_LEASE_SECONDS
    """How long the launcher lease lasts unless renewed (every third of it); another launcher on the same
    log takes the runs over only after it expired (sluice_services.launcher.lease)."""

    @property
    def partitions_dir(self) -> Path:
        return self.data_dir / "data"


def registry_spec(log: EventLog, clock: Clock, producer: Producer, bus: Bus | None = None) -> ServiceSpec:
    """With `bus`, the registry also serves the SREs' DeadLetters and EventLog APIs."""
    registry = RegistryService(log, clock)
    spec = ServiceSpec("registry", route=registry.route, route_prefixes=catalogue.REGISTRY.stream_prefixes,
                       grpc=registry_grpc.bindings(registry, producer), recover=registry.recover,
                       resolvers=registry_resolvers(registry))
    if bus is not None:
        follower = DeadLetterFollower(bus)
        spec.grpc += dead_letters_grpc.bindings(follower, log, producer) + event_log_grpc.bindings(log)
        spec.background.append(follower.follow)
    return spec


def matcher_spec(log: EventLog, clock: Clock, producer: Producer, *, one_member: bool = False,
                 sent_jobs: SentJobs | None = None) -> ServiceSpec:
    """Two stages: the lookup re-keys notifications by schedule id (MATCHES); the matcher proper
    consumes them with the schedule changes, one member per schedule's partition. `one_member`: this
    process holds the groups' only member (the in-process bus), which decides on the notifications as
    it looks them up (`fused.LookupAndMatch`), in the lookup's group. `sent_jobs`: shared with this
    process's consumers of the jobs it fires."""
    lookup = ScheduleLookup(log, producer)
    matcher = MatcherService(log, clock, sent_jobs)
    if one_member:
        fused = LookupAndMatch(lookup, matcher).handler()
        look_up = Subscription(LOOKUP_GROUP, {PARTITION_NOTIFICATIONS: fused, PROGRAM_NOTIFICATIONS: fused},
                               deferred_durability=True)
    else:
        look_up = Subscription(LOOKUP_GROUP, {
            PARTITION_NOTIFICATIONS: lookup.handler(),
            PROGRAM_NOTIFICATIONS: lookup.handler(),
        })
    match = Subscription(MATCH_GROUP, matcher.handlers(), on_assignment=matcher.on_assignment,
                         deferred_durability=True)

    def recover() -> None:
        lookup.recover()
        matcher.recover()

    return ServiceSpec("matcher", [look_up, match], route=matcher.route,
                       route_prefixes=catalogue.MATCHER.stream_prefixes, recover=recover,
                       background=[matcher.run_timers, lookup.follow])


def checker_spec(log: EventLog, clock: Clock, capacity: Capacity = UNLIMITED,
                 jobs_history: int = DEFAULT_FINISHED_PER_SCHEDULE, *,
                 partitions: GrpcPartitionSource | None = None, sent_jobs: SentJobs | None = None) -> ServiceSpec:
    """`partitions`: where a partition-trigger backfill lists partitions (the datasets service's gRPC API).
    `sent_jobs`: the jobs a matcher of this process fires (`matcher_spec`)."""
    partitions = partitions or GrpcPartitionSource(None)
    checker = CheckerService(log, clock, capacity, sent_jobs)
    jobs_view = JobsView(finished_per_schedule=jobs_history)
    subscription = Subscription(CHECKER_GROUP, checker.handlers(), deferred_durability=True)
    def recover() -> None:
        checker.recover()
        jobs_view.recover(log)  # complete up to the head before the gRPC server answers a ListJobs

    return ServiceSpec("checker", [subscription], route=checker.route, route_prefixes=catalogue.CHECKER.stream_prefixes,
                       grpc=checker_grpc.bindings(jobs_view, checker, partitions),
                       recover=recover, on_listening=partitions.on_listening,
                       background=[lambda: jobs_view.follow(log), checker.run_timers],
                       resolvers=checker_resolvers(jobs_view, checker),
                       instrument=lambda metrics: checker_metrics(metrics, jobs_view, checker))


def _partition_source(settings: Settings, *, datasets_here: bool) -> GrpcPartitionSource:
    """The datasets service at settings.datasets_address, else this process's own server when it serves it."""
    source = GrpcPartitionSource(settings.datasets_address or None, tls_ca=settings.grpc_security.tls_cert)
    return source.in_process(settings.host) if datasets_here and not settings.datasets_address else source


def datasets_spec(log: EventLog, clock: Clock, settings: Settings, *, launcher_token: str = "") -> ServiceSpec:
    """`launcher_token`: the bearer token of a launcher in this process (standalone), an admin of every
    namespace here, so that it publishes whatever authorization the server asks of others."""
    # outputs are moved only below the partitions dir, from staged directories only below the runs dir
    datasets = DatasetsService(log, clock, files=LocalFiles(settings.partitions_dir, settings.data_dir / "runs"))
    credentials = RunCredentials(load_secret(settings.data_dir, settings.run_credential_secret), datasets.access)

    def recover() -> None:
        adopt_relay_position(log)
        datasets.recover()  # unfinished commit sequences are redone before any new work

    return ServiceSpec(catalogue.DATASETS.name, route=datasets.route, route_prefixes=catalogue.DATASETS.stream_prefixes,
                       grpc=datasets_grpc.bindings(datasets, RunPublisher(datasets, settings.partitions_dir),
                                                   credentials),
                       recover=recover, resolvers=datasets_resolvers(datasets),
                       authenticators=[credentials, *([_in_process_launcher(launcher_token)] if launcher_token else [])])


def _in_process_launcher(token: str) -> TokenAuthenticator:
    return TokenAuthenticator(token, Principal("launcher:in-process", (Grant(Role.ADMIN, ANY_NAMESPACE),)))


def program_user(settings: Settings) -> ProgramUser | None:
    """Who the launcher runs programs as, when not itself."""
    user = ProgramUser.named(settings.program_user) if settings.program_user else None
    return None if user is None or user.uid == os.geteuid() else user


def launcher_spec(log: EventLog, clock: Clock, settings: Settings, *, catalog: ProgramCatalog | None = None,
                  submitter: ProgramSubmitter | None = None, run_data: RunData | None = None,
                  datasets_in_process: str = "") -> ServiceSpec:
    """`catalog` and `submitter` default to the apps dir and spark-submit, `run_data` to the datasets
    service's gRPC API at settings.datasets_address with settings.datasets_token (`datasets_in_process`:
    the token of the datasets service in this process, at its own gRPC server: standalone); tests inject
    fakes of the ports."""
    on_listening = None
    if run_data is None:
        security = settings.grpc_security
        token = datasets_in_process or settings.datasets_token or security.token
        grpc_run_data = GrpcRunData(settings.datasets_address or None, token=token, tls_ca=security.tls_cert)
        if not settings.datasets_address:
            if not datasets_in_process:
                raise InvalidArgument("datasets_address", "the launcher needs the datasets service's address: give "
                                                          "--datasets-address HOST:PORT (env SLUICE_DATASETS_ADDRESS)")
            on_listening = grpc_run_data.in_process(settings.host)
        run_data = grpc_run_data
    program_api = ProgramApi(run_data, settings.grpc_security.tls_cert)
    launcher = LauncherService(log, clock, catalog or DirectoryCatalog(settings.apps_dir),
                               submitter or SparkSubmitter(settings.spark, program_env=settings.program_env,
                                                           program_user=program_user(settings)),
                               settings.partitions_dir, settings.max_parallel_runs, run_data, settings.runs_history,
                               program_api, LeaseKeeper(log, clock, launcher_home(settings.data_dir),
                                                        LeaseTerms(settings.lease_seconds)),
                               run_dir_retention=settings.run_dir_retention)
    subscription = Subscription("launcher", {LAUNCH_REQUESTS: launcher.on_launch_requested})
    return ServiceSpec(catalogue.LAUNCHER.name, [subscription],
                       route=launcher.route, route_prefixes=catalogue.LAUNCHER.stream_prefixes,
                       grpc=launcher_grpc.bindings(launcher), recover=launcher.recover,
                       resolvers=launcher_resolvers(launcher),
                       start=launcher.resume, background=[launcher.run_timers, launcher.keep_lease],
                       on_listening=on_listening, instrument=lambda metrics: launcher_metrics(metrics, log, launcher))


def lineage_spec(log: EventLog, clock: Clock, settings: Settings = Settings()) -> ServiceSpec:
    lineage = LineageService(log, clock)

    async def serve_http() -> None:
        """The OpenLineage HTTP endpoint and the Marquez-compatible read API."""
        security = settings.grpc_security  # the policy's and the server token's principals, the same TLS
        runner = await lineage_http.serve(lineage, settings.host, settings.lineage_port, settings.lineage_token,
                                          authorizer=security.authorizer(),
                                          ssl_context=server_ssl_context(security))
        scheme = "https" if security.tls_cert is not None else "http"
        logging.getLogger(__name__).warning("lineage HTTP API on %s://%s:%s/api/v1/", scheme, settings.host,
                                            lineage_http.bound_port(runner))
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    async def on_lineage_event(record) -> None:
        lineage.handle_message(record.value)

    binding = GrpcBinding(lineage_pb2.DESCRIPTOR.services_by_name["Lineage"].full_name,
                          lineage_pb2_grpc.add_LineageServicer_to_server, LineageServicer(lineage))
    subscriptions = [Subscription("lineage", {LINEAGE: on_lineage_event})]
    if settings.openlineage_url:
        export = OpenLineageExport(settings.openlineage_url, settings.openlineage_api_key)
        subscriptions.append(Subscription(EXPORT_GROUP, {LINEAGE: export.on_lineage_event}))
    return ServiceSpec("lineage", subscriptions, grpc=[binding],
                       recover=lineage.recover, background=[serve_http] if settings.lineage_port is not None else [])


def alerts_spec(log: EventLog, clock: Clock, sent_jobs: SentJobs | None = None) -> ServiceSpec:
    """SLA deadlines on the clock (timers), webhook deliveries from the log (its outbox of requests).
    `sent_jobs`: the jobs a matcher of this process fires (`matcher_spec`)."""
    alerts = AlertsService(log, clock, sent_jobs=sent_jobs)
    return ServiceSpec("alerts", [Subscription("alerts", alerts.handlers())], grpc=alerts_grpc.bindings(alerts),
                       recover=alerts.recover, background=[alerts.run_timers, alerts.run_deliveries],
                       resolvers=alerts_grpc.resolvers(alerts), instrument=alerts.instrument)


def build(names: tuple[str, ...], log: EventLog, bus: Bus, clock: Clock, settings: Settings,
          producer: Producer) -> list[ServiceSpec]:
    in_process = secrets.token_urlsafe(32) if {"datasets", "launcher"} <= set(names) else ""
    sent_jobs = sent_jobs_for(names)
    factories = {
        "registry": lambda: registry_spec(log, clock, producer, bus),
        "matcher": lambda: matcher_spec(log, clock, producer, one_member=isinstance(bus, InProcessBus),
                                        sent_jobs=sent_jobs),
        "checker": lambda: checker_spec(log, clock, settings.capacity, settings.jobs_history,
                                        partitions=_partition_source(settings, datasets_here="datasets" in names),
                                        sent_jobs=sent_jobs),
        "datasets": lambda: datasets_spec(log, clock, settings, launcher_token=in_process),
        "launcher": lambda: launcher_spec(log, clock, settings, datasets_in_process=in_process),
        "lineage": lambda: lineage_spec(log, clock, settings),
        "alerts": lambda: alerts_spec(log, clock, sent_jobs),
    }
    assert factories.keys() == set(catalogue.NAMES)
    return [factories[name]() for name in names]


def sent_jobs_for(names: tuple[str, ...]) -> SentJobs | None:
    """What a process of these services shares between a matcher and the consumers of its jobs
    (sluice.wire.sent_jobs): None without both."""
    readers = len({"checker", "alerts"} & set(names))
    return SentJobs(readers) if "matcher" in names and readers else None
