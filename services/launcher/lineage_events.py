"""OpenLineage run events for Sluice's runs, built with the openlineage-python client's model.

The schedule's run (runId = job id) is the parent; the program's run carries the parent run facet."""
from __future__ import annotations

from datetime import datetime

from openlineage.client.event_v2 import InputDataset, Job, OutputDataset, Run, RunEvent, RunState
from openlineage.client.facet_v2 import parent_run
from openlineage.client.generated.base_subset_dataset import (
    InputSubsetInputDatasetFacet,
    OutputSubsetOutputDatasetFacet,
    Partition,
    PartitionSubsetCondition,
)
from openlineage.client.serde import Serde

from sluice.domain.runs import Run as SluiceRun
from sluice_services.launcher.context_file import program_job_name, schedule_job_name

PRODUCER = "https://github.com/sluice/sluice/launcher"


def run_started(run: SluiceRun, at: datetime) -> list[bytes]:
    return [_schedule_event(run, RunState.START, at), _program_event(run, RunState.START, at)]


def run_ended(run: SluiceRun, state: RunState, at: datetime) -> list[bytes]:
    return [_program_event(run, state, at), _schedule_event(run, state, at)]


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
    inputs = [InputDataset(namespace=namespace, name=name, inputFacets={
        "subset": InputSubsetInputDatasetFacet(inputCondition=_partitions(keys))})
        for (namespace, name), keys in _by_dataset(run.inputs).items()]
    outputs = [OutputDataset(namespace=namespace, name=name, outputFacets={
        "subset": OutputSubsetOutputDatasetFacet(outputCondition=_partitions(keys))})
        for (namespace, name), keys in _by_dataset(run.outputs).items()]
    event = RunEvent(eventType=state, eventTime=at.isoformat(), producer=PRODUCER,
                     run=Run(runId=run.id, facets={"parent": parent}),
                     job=Job(namespace=job.program.namespace, name=program_job_name(job)),
                     inputs=inputs, outputs=outputs)
    return Serde.to_json(event).encode()


def _by_dataset(partitions) -> dict[tuple[str, str], list[dict[str, str]]]:
    """Each dataset once, with the keys of its partitions the run read or wrote (its subset facet)."""
    found: dict[tuple[str, str], list[dict[str, str]]] = {}
    for p in partitions:
        keys = found.setdefault((p.namespace, p.dataset), [])
        if dict(p.partition.key) not in keys:
            keys.append(dict(p.partition.key))
    return found


def _partitions(keys: list[dict[str, str]]) -> PartitionSubsetCondition:
    return PartitionSubsetCondition(partitions=[Partition(dimensions=key) for key in keys])
