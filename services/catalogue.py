"""The one list of Sluice's services: per service its name (`sluice serve NAME`, `python -m
sluice_services.NAME`, the [services.NAME] config section), the streams its outbox routes to the bus,
the snapshots `sluice rebuild` drops and writes again, and its spec factory in composition.py. Read by
composition, configuration (services/config.py), `serve`/`standalone`, `replay` and `rebuild`; the
services' own modules take their STREAM_PREFIX and SNAPSHOTS from here.

Light on purpose: it imports no service, so `sluice --help` and a client command load none. A
service's event types stay with its aggregate (each service module's TYPES)."""
from __future__ import annotations

from dataclasses import dataclass

from sluice.domain.checking import QUEUE_STREAM


@dataclass(frozen=True)
class Service:
    name: str
    module: str
    """Where its service class lives."""
    stream_prefixes: tuple[str, ...]
    """The streams it writes whose events its outbox routes to the bus (composition's route_prefixes)."""
    snapshots: tuple[str, ...]
    """The snapshots `sluice rebuild NAME` drops and writes again."""
    spec: str
    """The composition.py function that builds its ServiceSpec."""
    aggregate_snapshots: bool
    """Its snapshots are aggregate stores' (rebuilt by recovering the service); the lineage service keeps
    one snapshot of its own and is rebuilt by its `rebuild`, the datasets service one its recovery writes."""


REGISTRY = Service("registry", "sluice_services.registry.service", ("schedule-",),
                   ("registry-schedules", "registry-apps"), "registry_spec", aggregate_snapshots=True)
MATCHER = Service("matcher", "sluice_services.matcher.service", ("matcher-",), ("matcher",), "matcher_spec",
                  aggregate_snapshots=True)
CHECKER = Service("checker", "sluice_services.checker.service", (QUEUE_STREAM,), ("checker",), "checker_spec",
                  aggregate_snapshots=True)
LAUNCHER = Service("launcher", "sluice_services.launcher.service", ("run-",), ("launcher-runs",),
                   "launcher_spec", aggregate_snapshots=True)
DATASETS = Service("datasets", "sluice_services.datasets.service", ("transaction-",), ("launcher-datasets",),
                   "datasets_spec", aggregate_snapshots=False)
"""Its snapshot (the datasets and the unfinished commit sequences) keeps the name it had inside the
launcher, so that a log's existing one still serves; it is written again by recovery after a long read."""
LINEAGE = Service("lineage", "sluice_services.lineage.service", (), ("lineage",), "lineage_spec",
                  aggregate_snapshots=False)

ALERTS = Service("alerts", "sluice_services.alerts.service", (), ("alerts",), "alerts_spec", aggregate_snapshots=True)
"""SLA and failure alerts: one stream (`alerts`) and its snapshot; it publishes nothing on the bus."""

NOTIFYING_RELAYS = (LAUNCHER.name, DATASETS.name)
"""The services whose outbox relays publish notifications (a run's status, an output's partitions): the
relay names the matcher records positions of (matcher/lookup.outbox_position)."""

CATALOGUE = (REGISTRY, MATCHER, CHECKER, DATASETS, LAUNCHER, LINEAGE, ALERTS)
BY_NAME = {service.name: service for service in CATALOGUE}
NAMES = tuple(service.name for service in CATALOGUE)
"""Every service, in the order `standalone` starts them."""
WITH_AGGREGATE_SNAPSHOTS = tuple(service.name for service in CATALOGUE if service.aggregate_snapshots)
STANDALONE = "standalone"
SECTIONS = (*NAMES, STANDALONE)
"""The processes a configuration is read for: each service alone, or all in one."""
