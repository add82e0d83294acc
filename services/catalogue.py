"""The one list of Sluice's services, read by composition (which services `build` wires), configuration
(the [services.<name>] sections), `serve`/`standalone`, `replay` and `rebuild`.

Light on purpose: it imports no service, so `sluice --help` and a client command load none. A service's
streams, event types and snapshots stay the constants of its own module (`STREAM_PREFIX`, `SNAPSHOTS`),
named here by `module`."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Service:
    name: str
    """`sluice serve NAME`, `python -m sluice_services.NAME`, the [services.NAME] config section."""
    module: str
    """Where its service class, STREAM_PREFIX and SNAPSHOTS live."""
    aggregate_snapshots: bool
    """Its state is aggregate stores whose snapshots `sluice rebuild NAME` drops and writes again (the
    lineage service keeps one snapshot of its own and is rebuilt by its `rebuild`)."""


CATALOGUE = (
    Service("registry", "sluice_services.registry.service", aggregate_snapshots=True),
    Service("matcher", "sluice_services.matcher.service", aggregate_snapshots=True),
    Service("checker", "sluice_services.checker.service", aggregate_snapshots=True),
    Service("launcher", "sluice_services.launcher.service", aggregate_snapshots=True),
    Service("lineage", "sluice_services.lineage.service", aggregate_snapshots=False),
)
NAMES = tuple(service.name for service in CATALOGUE)
"""Every service, in the order `standalone` starts them."""
WITH_AGGREGATE_SNAPSHOTS = tuple(service.name for service in CATALOGUE if service.aggregate_snapshots)
STANDALONE = "standalone"
SECTIONS = (*NAMES, STANDALONE)
"""The processes a configuration is read for: each service alone, or all in one."""
