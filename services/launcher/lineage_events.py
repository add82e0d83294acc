"""OpenLineage run events for Sluice's runs, built with the openlineage-python client's model.

The schedule's run (runId = job id) is the parent; the program's run carries the parent run facet;
the program's Spark application is the program run's child: the SDK writes its events to
openlineage.jsonl in the attempt's directory (sluice.sdk.lineage) and they are forwarded from
there when the run ends, each attempt's; a Spark run left without an end (its process died) is
closed as ABORT at the program run's end time."""
from __future__ import annotations

import json
import logging
from datetime import datetime
from pathlib import Path

from openlineage.client.event_v2 import InputDataset, Job, OutputDataset, Run, RunEvent, RunState
from openlineage.client.facet_v2 import parent_run
from openlineage.client.generated.base_subset_dataset import (
    InputSubsetInputDatasetFacet,
    OutputSubsetOutputDatasetFacet,
    Partition,
    PartitionSubsetCondition,
)
from openlineage.client.serde import Serde

from sluice.datasets.files import PublishError, read_program_file
from sluice.domain.bounds import MAX_BUS_MESSAGE_BYTES
from sluice.domain.runs import Run as SluiceRun
from sluice.sdk.lineage import EVENTS_FILE
from sluice_services.launcher.context_file import program_job_name, schedule_job_name

PRODUCER = "https://github.com/sluice/sluice/launcher"
MAX_EVENTS_FILE_BYTES = 16 * 1024 * 1024
"""An attempt's openlineage.jsonl read when its run ends (on the launcher's loop, by its outbox route)."""
log = logging.getLogger(__name__)


def run_started(run: SluiceRun, at: datetime) -> list[bytes]:
    return [_schedule_event(run, RunState.START, at), _program_event(run, RunState.START, at)]


def run_ended(run: SluiceRun, state: RunState, at: datetime, attempt_dir: Path | None = None) -> list[bytes]:
    spark = spark_events(attempt_dir, at) if attempt_dir is not None else []
    return [*spark, _program_event(run, state, at), _schedule_event(run, state, at)]


def spark_events(attempt_dir: Path, at: datetime) -> list[bytes]:
    """The Spark runs' events the SDK wrote in every attempt's directory of this run, as written
    (a line a crash cut short is skipped), then an end for each Spark run that has none."""
    run_dir = attempt_dir.parent if attempt_dir.name.startswith("attempt-") else attempt_dir
    found: list[bytes] = []
    first: dict[str, dict] = {}               # by Spark run id: its first event
    ended: set[str] = set()
    for path in [run_dir / EVENTS_FILE, *sorted(run_dir.glob(f"attempt-*/{EVENTS_FILE}"))]:
        try:
            lines = read_program_file(path, MAX_EVENTS_FILE_BYTES).splitlines()
        except FileNotFoundError:
            continue
        except PublishError as refused:  # the program's own file: a FIFO, a link or too large is left out
            log.warning("lineage events of %s left out: %s", path.parent, refused)
            continue
        for line in lines:
            try:
                event = json.loads(line)
                run_id = event["run"]["runId"]
            except (ValueError, TypeError, KeyError):
                continue
            found.append(line)
            first.setdefault(run_id, event)
            if event.get("eventType") in ("COMPLETE", "FAIL", "ABORT"):
                ended.add(run_id)
    return found + [_aborted(event, at) for run_id, event in first.items() if run_id not in ended]


def _aborted(start: dict, at: datetime) -> bytes:
    facets = {}
    parent = (start["run"].get("facets") or {}).get("parent")
    if parent:
        facets["parent"] = parent_run.ParentRunFacet(
            run=parent_run.Run(runId=parent["run"]["runId"]),
            job=parent_run.Job(namespace=parent["job"]["namespace"], name=parent["job"]["name"]))
    event = RunEvent(eventType=RunState.ABORT, eventTime=at.isoformat(), producer=PRODUCER,
                     run=Run(runId=start["run"]["runId"], facets=facets),
                     job=Job(namespace=start["job"]["namespace"], name=start["job"]["name"]))
    return Serde.to_json(event).encode()


def _schedule_event(run: SluiceRun, state: RunState, at: datetime) -> bytes:
    job = run.job
    event = RunEvent(eventType=state, eventTime=at.isoformat(), producer=PRODUCER,
                     run=Run(runId=job.id), job=Job(namespace=job.program.namespace, name=schedule_job_name(job)))
    return Serde.to_json(event).encode()


def _program_event(run: SluiceRun, state: RunState, at: datetime) -> bytes:
    job = run.job
    parent = parent_run.ParentRunFacet(
        run=parent_run.Run(runId=job.id),
        job=parent_run.Job(namespace=job.program.namespace, name=schedule_job_name(job)),
    )
    read, written = _by_dataset(run.inputs), _by_dataset(run.outputs)
    for subsets in (True, False):
        inputs = [InputDataset(namespace=namespace, name=name, inputFacets={
            "subset": InputSubsetInputDatasetFacet(inputCondition=_partitions(keys))} if subsets else None)
            for (namespace, name), keys in read.items()]
        outputs = [OutputDataset(namespace=namespace, name=name, outputFacets={
            "subset": OutputSubsetOutputDatasetFacet(outputCondition=_partitions(keys))} if subsets else None)
            for (namespace, name), keys in written.items()]
        event = Serde.to_json(RunEvent(eventType=state, eventTime=at.isoformat(), producer=PRODUCER,
                                       run=Run(runId=run.id, facets={"parent": parent}),
                                       job=Job(namespace=job.program.namespace, name=program_job_name(job)),
                                       inputs=inputs, outputs=outputs)).encode()
        if len(event) <= MAX_BUS_MESSAGE_BYTES:
            break
        # thousands of partitions: the datasets alone (the outbox would dead-letter the event, and the run's
        # lineage be lost); the partitions stay in the run's events and its listing
    return event


def _by_dataset(partitions) -> dict[tuple[str, str], list[dict[str, str]]]:
    """Each dataset once, with the keys of its partitions the run read or wrote (its subset facet)."""
    found: dict[tuple[str, str], dict[tuple[tuple[str, str], ...], dict[str, str]]] = {}
    for p in partitions:
        key = dict(p.partition.key)
        found.setdefault((p.namespace, p.dataset), {}).setdefault(tuple(key.items()), key)
    return {dataset: list(keys.values()) for dataset, keys in found.items()}


def _partitions(keys: list[dict[str, str]]) -> PartitionSubsetCondition:
    return PartitionSubsetCondition(partitions=[Partition(dimensions=key) for key in keys])
