"""`sluice rebuild PROJECTION`: drop a projection's snapshots and fold it again from the whole log,
offline, then save fresh snapshots. PROJECTION is `jobs` (the jobs read model), `lineage`, a
service (`registry`, `matcher`, `checker`, `launcher`: its aggregate stores' snapshots), `datasets`
(the datasets and unfinished commit sequences, written by the datasets service's recovery, which
redoes those sequences as `sluice serve datasets` does at start) or `snapshots` (every service and
the jobs view).

The configuration is read as the process that hosts the projection reads it (`sluice serve NAME`:
the checker hosts the jobs view; `sluice standalone` for `snapshots`), or as `--service` says: the
histories it keeps (`jobs_history`, `runs_history`) are what its snapshots hold."""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from sluice.cli import render
from sluice.clock import SystemClock
from sluice.eventlog.port import EventLog
from sluice_services.catalogue import DATASETS, SECTIONS, WITH_AGGREGATE_SNAPSHOTS
from sluice_services.cli.offline import add_sources, offline, open_log
from sluice_services.cli.progress import ReadProgress, progress

if TYPE_CHECKING:
    from sluice_services.composition import Settings

SERVICES = WITH_AGGREGATE_SNAPSHOTS
PROJECTIONS = ("jobs", "lineage", *SERVICES, DATASETS.name, "snapshots")
HOSTS = {"jobs": "checker", "snapshots": "standalone"}
"""The process whose configuration a projection is rebuilt with, where it is not the projection's own name."""


@dataclass(frozen=True)
class Rebuilt:
    projection: str
    snapshots: tuple[str, ...]
    """The snapshots written (none for a projection that keeps none)."""
    position: int
    entities: int
    seconds: float


def add_command(commands: argparse._SubParsersAction) -> None:
    rebuild = commands.add_parser("rebuild", help="drop a projection's snapshots and rebuild it from the log (offline)")
    rebuild.add_argument("projection", metavar="PROJECTION", help=", ".join(PROJECTIONS))
    rebuild.add_argument("--service", metavar="NAME",
                         help="read the configuration as `sluice serve NAME` does (standalone: as `sluice standalone`);"
                              " default: the projection's service (the checker's for jobs), standalone for snapshots")
    add_sources(rebuild)
    rebuild.set_defaults(handler=offline(_rebuild), server_mode=True)


def _rebuild(settings, args) -> int:
    from sluice_services.config import load_settings

    if args.projection not in PROJECTIONS:
        print(f"sluice: error: PROJECTION: unknown projection {args.projection!r} (one of {', '.join(PROJECTIONS)})",
              file=sys.stderr)
        return 2
    if args.service is not None and args.service not in SECTIONS:
        print(f"sluice: error: --service: unknown service {args.service!r} (one of {', '.join(SECTIONS)})",
              file=sys.stderr)
        return 2
    settings = load_settings(args, args.service or HOSTS.get(args.projection, args.projection))
    log = open_log(settings)
    try:
        names = [*SERVICES, DATASETS.name, "jobs"] if args.projection == "snapshots" else [args.projection]
        results = []
        with progress(args, "rebuilding", log.head_position(), unit="position") as folding:
            for name in names:
                folding.describe(f"rebuilding {name}")
                results.append(rebuild(name, ReadProgress(log, folding), settings))
    finally:
        log.close()
    if args.json:
        print(json.dumps([vars(result) | {"snapshots": list(result.snapshots)} for result in results], indent=2))
    else:
        rows = [(r.projection, r.position, r.entities, f"{r.seconds:.2f}", ", ".join(r.snapshots) or "-")
                for r in results]
        print(render.table(("PROJECTION", "POSITION", "ENTITIES", "SECONDS", "SNAPSHOTS WRITTEN"), rows))
    return 0


def rebuild(projection: str, log: EventLog, settings: "Settings | None" = None) -> Rebuilt:
    """Drop the projection's snapshots, fold the whole log, save new snapshots (keeping the
    histories the settings ask the jobs view and the launcher for; by default the defaults)."""
    from sluice.readmodels import jobs as jobs_model
    from sluice.runtime.aggregates import AggregateStore
    from sluice.runtime.map_snapshots import delete_map_snapshot
    from sluice_services.composition import Settings

    settings = settings or Settings()

    started = time.perf_counter()
    position = log.head_position()
    if projection == "jobs":
        view = jobs_model.JobsView(finished_per_schedule=settings.jobs_history)
        store = jobs_model.snapshots_of(log)
        store.delete()
        view.recover(log)
        view.snapshot(store)
        return Rebuilt("jobs", (jobs_model.SNAPSHOT,), view.position, len(view.list()), time.perf_counter() - started)
    if projection == "lineage":
        from sluice_services.lineage.service import SNAPSHOT as LINEAGE_SNAPSHOT, LineageService

        lineage = LineageService(log, SystemClock())
        lineage.rebuild()
        return Rebuilt("lineage", (LINEAGE_SNAPSHOT,), position, len(lineage.state.runs), time.perf_counter() - started)
    if projection == DATASETS.name:
        return _rebuild_datasets(log, settings, position, started)
    service, names, entities = _service(projection, log, settings)
    for name in names:
        delete_map_snapshot(log, name)
    service.recover()
    count = entities(service)  # loads what recovery leaves to the first use (the checker's queue)
    for value in vars(service).values():
        if isinstance(value, AggregateStore):
            value.snapshot()
    written = tuple(name for name in names if log.read_snapshot(name) is not None)
    return Rebuilt(projection, written, position, count, time.perf_counter() - started)


def _rebuild_datasets(log: EventLog, settings: "Settings", position: int, started: float) -> Rebuilt:
    from sluice.datasets.files import LocalFiles
    from sluice_services.datasets.service import DatasetsService

    for name in DATASETS.snapshots:
        log.delete_snapshot(name)
    # the files the server's recovery may move: staged outputs below the runs dir, into the partitions dir
    files = LocalFiles(settings.partitions_dir, settings.data_dir / "runs")
    datasets = DatasetsService(log, SystemClock(), files=files)
    datasets.recover(save_snapshot=True)
    written = tuple(name for name in DATASETS.snapshots if log.read_snapshot(name) is not None)
    return Rebuilt(DATASETS.name, written, position, len(datasets.datasets.list()), time.perf_counter() - started)


def _service(name: str, log: EventLog, settings: "Settings") -> tuple[Any, tuple[str, ...], Callable[[Any], int]]:
    clock = SystemClock()
    match name:
        case "registry":
            from sluice_services.registry import service as registry

            return registry.RegistryService(log, clock), registry.SNAPSHOTS, lambda s: len(s.list())
        case "matcher":
            from sluice_services.matcher import service as matcher

            return matcher.MatcherService(log, clock), matcher.SNAPSHOTS, lambda s: len(s.states())
        case "checker":
            from sluice_services.checker import service as checker

            return checker.CheckerService(log, clock), checker.SNAPSHOTS, lambda s: len(s.state.queue)
        case "launcher":
            from sluice_services.launcher import service as launcher
            from sluice_services.launcher.programs import DirectoryCatalog, SparkSubmitter

            return (launcher.LauncherService(log, clock, DirectoryCatalog(Path(".")), SparkSubmitter(), Path("."),
                                             runs_history=settings.runs_history),
                    launcher.SNAPSHOTS, lambda s: len(s.runs()))
        case "alerts":
            from sluice_services.alerts import service as alerts

            return alerts.AlertsService(log, clock), alerts.SNAPSHOTS, lambda s: len(s.state.watches)
    raise ValueError(f"unknown projection {name!r}")
