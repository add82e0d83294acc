"""A finished run's outputs and consumed inputs, published exactly once through one commit sequence.

    publisher = RunPublisher(data_plane, partitions_dir)
    outputs = publisher.publish(run_id, result, attempt)    # on exit code 0 (PublishError otherwise)
    published = publisher.release(run_id, consumed, reason, attempt)   # on failure: consumed partitions are retried

The sequence: the run's consumed partitions are completed on their consumers (strictly: still held
by the run), every staged output is moved to its final location (verified by its manifest), and the
outputs of registered datasets are registered as one transaction per dataset, whose commit is the
partition notification. Outputs to datasets nobody registered are moved the same way and announced
by the run's completion (OutputPartition.announced says which is which).

Both are fenced by the run's attempt (the run's access, sluice.domain.datasets.run_access): the
sequence is recorded in one append with the attempt's end, so an attempt that was released, or that a
later attempt superseded (a launcher that lost its lease to another, resuming), publishes nothing; and
releasing an attempt that published answers what it published, so the launcher records its completion.

The run's staged outputs are read from <partitions dir>/../runs/<run id>: the launcher's and the
datasets service's data dir are one (a shared volume when they run apart).
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from sluice.domain.commits import (
    CommitSequence,
    CommitStatus,
    MoveFiles,
    RecordConsumerState,
    RegisterPartitions,
    StagedFile,
    ordered,
    sequence_id_for,
)
from sluice.domain.common import PartitionRef
from sluice.domain.consumer.state import ConsumerRef, PartitionId
from sluice.domain.bounds import MAX_BYTES, check_int
from sluice.domain.datasets.specs import Partition, validate_partition
from sluice.domain.datasets.transactions import validate_partitions
from sluice.domain.names import validate_name
from sluice.domain.runs import OutputPartition
from sluice.domain.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound
from sluice.datasets.files import PublishError, check_paths, check_staged, final_location
from sluice_services.datasets.commits import RESERVE, CommitFailed
from sluice_services.datasets.service import DatasetsService

log = logging.getLogger(__name__)


class RunPublisher:
    def __init__(self, data_plane: DatasetsService, data_dir: Path) -> None:
        self._plane = data_plane
        self._data_dir = data_dir

    def publish(self, run_id: str, result: dict[str, Any], attempt: int = 0) -> tuple[OutputPartition, ...]:
        """`attempt`: the run's attempt whose result it is (0: its current one)."""
        try:
            progress = self._plane.commits.progress(sequence_id_for(run_id))
            recorded = progress is not None and progress.status is not CommitStatus.ABANDONED
            # recorded by a launcher that stopped before the run's completion: finished, not checked again
            sequence, outputs = self._sequence(run_id, result, check=not recorded)
            if recorded or sequence is None:
                self._plane.publish_access(run_id, attempt, outputs)  # refused unless it is this attempt's
            if sequence is not None:
                done = self._plane.commits.commit(
                    sequence, fence=lambda: self._plane.prepare_publish(run_id, attempt, outputs))
                if done.status is not CommitStatus.FINISHED:
                    raise FailedPrecondition(f"commit sequence {sequence.id} of run {run_id} is "
                                             f"{done.status.value}: {done.error}")
            access = self._plane.access(run_id)
            if access is not None and access.published:
                if attempt and access.attempt != attempt:  # another attempt's sequence was recorded first
                    raise FailedPrecondition(f"run {run_id}: attempt {access.attempt} published its outputs; "
                                             f"attempt {attempt} cannot")
                return access.outputs
        except (InvalidArgument, NotFound, AlreadyExists, FailedPrecondition, CommitFailed) as error:
            raise PublishError(str(error)) from error
        except (KeyError, TypeError, ValueError) as error:
            raise PublishError(f"the program's result is malformed: {error!r}") from error
        return outputs

    def release(self, run_id: str, taken: Any, reason: str, attempt: int = 0) -> tuple[OutputPartition, ...] | None:
        """The attempt (0: the current one) failed: partitions it took (`taken`: its consumed.json, a list of
        {namespace, dataset, consumer, ids}) are failed (retried, or discarded past their retries) and its
        access ends. Unless it published: then what it published (the launcher records its completion);
        or its commit sequence was recorded before attempts were fenced (it will complete them)."""
        progress = self._plane.commits.progress(sequence_id_for(run_id))
        abandoned = progress is not None and progress.status is CommitStatus.ABANDONED
        access = self._plane.close_access(run_id, reason or "released", attempt)  # ordered with any publish
        if access is not None and access.published and not abandoned:
            if attempt and access.attempt != attempt:
                raise FailedPrecondition(f"run {run_id}: attempt {access.attempt} published its outputs, "
                                         f"not attempt {attempt}")
            return access.outputs
        if progress is not None and not abandoned:
            return None
        for entry in taken if isinstance(taken, list) else []:
            try:
                ref = ConsumerRef(entry["namespace"], entry["dataset"], entry["consumer"])
                ids = [PartitionId.parse(text) for text in entry["ids"]]
                self._plane.consumers.fail(ref, run_id, ids, reason[:500])
            except (KeyError, TypeError, InvalidArgument, NotFound) as error:
                log.warning("run %s: could not release consumed partitions %r: %s", run_id, entry, error)
        return None

    def _sequence(self, run_id: str, result: dict[str, Any], check: bool = True) -> tuple[CommitSequence | None,
                                                                       tuple[OutputPartition, ...]]:
        steps: list = []
        datasets: list[str] = []
        for entry in result.get("consumed", []):
            ids = tuple(PartitionId.parse(text, "consumed.ids") for text in entry["ids"])
            steps.append(RecordConsumerState(entry["namespace"], entry["dataset"], entry["consumer"], run_id, ids))
            datasets.append(f"{entry['namespace']}.{entry['dataset']}")
        registered: dict[tuple[str, str], list[Partition]] = {}
        outputs = []
        for index, output in enumerate(result.get("outputs", [])):
            namespace = validate_name(f"outputs[{index}].namespace", output["namespace"])
            dataset = validate_name(f"outputs[{index}].dataset", output["dataset"])
            spec = self._plane.datasets.find(namespace, dataset)
            for name in ("size_bytes", "record_count"):
                check_int(f"outputs[{index}].{name}", output.get(name, 0), 0, MAX_BYTES)
            partition = Partition(dict(output["key"]), "-", output.get("size_bytes", 0),
                                  output.get("record_count", 0), {"format": output.get("format", "")})
            if spec is not None:
                partition = validate_partition(spec, partition, f"outputs[{index}]")
                final = spec.default_location(partition.key)
            else:
                final = str(final_location(self._data_dir, namespace, dataset, partition.key, f"outputs[{index}]"))
            files = tuple(StagedFile(f["path"], _file_size(f, f"outputs[{index}].files[{number}]"), f["sha256"])
                          for number, f in enumerate(output.get("files", [])))
            if not files:
                raise PublishError(f"output {output['staged_location']} has an empty manifest")
            move = MoveFiles(output["staged_location"], final, files)
            # before any file is read: the final directory inside the partitions dir, the staged one
            # inside this run's directory, the manifest's paths inside both
            check_paths(move, self._data_dir, self._data_dir.parent / "runs" / run_id, f"outputs[{index}]")
            if check:
                check_staged(move)
            steps.append(move)
            partition = Partition(partition.key, final, partition.size_bytes, partition.record_count,
                                  partition.metadata)
            if spec is not None:
                registered.setdefault((namespace, dataset), []).append(partition)
            datasets.append(f"{namespace}.{dataset}")
            outputs.append(OutputPartition(namespace, dataset, PartitionRef(
                dict(partition.key), final, partition.size_bytes, partition.record_count, dict(partition.metadata)),
                announced=spec is not None))
        for (namespace, dataset), partitions in registered.items():
            # as its RegisterPartitions step will (bounds, repeated keys): a refusal there, once the run's
            # inputs are completed and its files moved, would lose them and quarantine the dataset
            validate_partitions(self._plane.datasets.find(namespace, dataset), partitions,
                                f"outputs to {namespace}.{dataset}")
            steps.append(RegisterPartitions(namespace, dataset, RESERVE, tuple(partitions)))
        if not steps:
            return None, ()
        sequence = CommitSequence(sequence_id_for(run_id), run_id, tuple(dict.fromkeys(datasets)), ordered(tuple(steps)))
        return sequence, tuple(outputs)


def _file_size(entry: dict[str, Any], path: str) -> int:
    check_int(f"{path}.size_bytes", entry["size_bytes"], 0, MAX_BYTES)
    return entry["size_bytes"]
