"""The Spark application's lineage: a child run of the program's run.

The program's run (its run id and job come from context.json's "lineage") is the parent; the
Spark application the SDK starts is one run of the job `<program job>.spark`, with the parent
run facet, the processing engine and the job type facets. Its START (when the SparkSession is
created) and its COMPLETE or FAIL (when the program stops it, with the datasets read and
written) are written by the openlineage-python client's file transport, one JSON line each,
to `openlineage.jsonl` beside result.json. The launcher forwards that file's events onto the
lineage topic when the run ends (services/launcher/lineage_events.py), so a program needs no
network access to the lineage service, and a run that dies leaves its START to be closed there.
"""
from __future__ import annotations

import sys
from collections.abc import Iterable
from datetime import datetime, timezone
from importlib.metadata import version
from pathlib import Path

from openlineage.client import OpenLineageClient
from openlineage.client.event_v2 import InputDataset, Job, OutputDataset, Run, RunEvent, RunState
from openlineage.client.facet_v2 import RunFacet, job_type_job, parent_run, processing_engine_run
from openlineage.client.transport.file import FileConfig, FileTransport
from openlineage.client.uuid import generate_new_uuid

from .context import Lineage

EVENTS_FILE = "openlineage.jsonl"
SPARK_JOB = "spark"
PRODUCER = "https://github.com/sluice/sluice/sdk"


def events_path(result_path: str | Path) -> Path:
    """Where a run's own OpenLineage events go: beside its result.json, in the attempt's directory."""
    return Path(result_path).parent / EVENTS_FILE


def spark_job_name(program_job_name: str) -> str:
    return f"{program_job_name}.{SPARK_JOB}"


class SparkApplicationLineage:
    """START and end of one Spark application run, written through the client's file transport."""

    def __init__(self, lineage: Lineage, path: Path) -> None:
        self._lineage = lineage
        self._client = OpenLineageClient(transport=FileTransport(FileConfig(log_file_path=str(path), append=True)))
        self.run_id = str(generate_new_uuid())
        self._engine: processing_engine_run.ProcessingEngineRunFacet | None = None
        self.ended = False

    def started(self, spark_version: str, application_id: str) -> None:
        self._engine = processing_engine_run.ProcessingEngineRunFacet(
            version=spark_version, name="spark", openlineageAdapterVersion=version("openlineage-python"))
        application = RunFacet(producer=PRODUCER).with_additional_properties(applicationId=application_id)
        self._emit(RunState.START, {"sluice_sparkApplication": application}, (), ())

    def finished(self, succeeded: bool, inputs: Iterable[tuple[str, str]], outputs: Iterable[tuple[str, str]]) -> None:
        """COMPLETE or FAIL with the (namespace, dataset) pairs it read and wrote; once."""
        if not self.ended:
            self.ended = True
            self._emit(RunState.COMPLETE if succeeded else RunState.FAIL, {}, inputs, outputs)

    def _emit(self, state: RunState, facets: dict, inputs: Iterable[tuple[str, str]],
              outputs: Iterable[tuple[str, str]]) -> None:
        """Lineage observes the run and never decides it: an event that cannot be built or written is
        reported on stderr and the program carries on."""
        try:
            self._emit_event(state, facets, inputs, outputs)
        except Exception as error:
            print(f"sluice: lineage event {state.value} of the Spark application not recorded: {error!r}",
                  file=sys.stderr)

    def _emit_event(self, state: RunState, facets: dict, inputs: Iterable[tuple[str, str]],
                    outputs: Iterable[tuple[str, str]]) -> None:
        lineage = self._lineage
        root = None
        if lineage.parent_run_id and lineage.parent_job_name:      # the schedule's run heads the hierarchy
            root = parent_run.Root(run=parent_run.RootRun(runId=lineage.parent_run_id),
                                   job=parent_run.RootJob(namespace=lineage.job_namespace, name=lineage.parent_job_name))
        parent = parent_run.ParentRunFacet(run=parent_run.Run(runId=lineage.run_id),
                                           job=parent_run.Job(namespace=lineage.job_namespace, name=lineage.job_name),
                                           root=root)
        run_facets = {"parent": parent, **facets}
        if self._engine is not None:
            run_facets["processing_engine"] = self._engine
        job_facets = {"jobType": job_type_job.JobTypeJobFacet(processingType="BATCH", integration="SPARK",
                                                              jobType="APPLICATION")}
        self._client.emit(RunEvent(
            eventType=state, eventTime=datetime.now(timezone.utc).isoformat(), producer=PRODUCER,
            run=Run(runId=self.run_id, facets=run_facets),
            job=Job(namespace=lineage.job_namespace, name=spark_job_name(lineage.job_name), facets=job_facets),
            inputs=[InputDataset(namespace=ns, name=name) for ns, name in sorted(set(inputs))],
            outputs=[OutputDataset(namespace=ns, name=name) for ns, name in sorted(set(outputs))]))

