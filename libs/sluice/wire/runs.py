from __future__ import annotations

from sluice.domain.runs import Run
from sluice.v1 import notifications_pb2, runs_pb2 as pb
from sluice.wire.common import partition_to_proto, program_to_proto, timestamp_to_proto


def run_to_proto(run: Run) -> pb.Run:
    return pb.Run(
        id=run.id,
        job_id=run.job.id,
        schedule_id=run.job.schedule_id,
        program=program_to_proto(run.job.program),
        status=notifications_pb2.RunStatus.Value(run.status.value),
        started_at=timestamp_to_proto(run.started_at or run.requested_at),
        ended_at=timestamp_to_proto(run.ended_at),
        error=run.error,
        outputs=[pb.OutputPartition(namespace=o.namespace, dataset=o.dataset, partition=partition_to_proto(o.partition))
                 for o in run.outputs],
        inputs=[partition_to_proto(i.partition) for i in run.inputs],
        attempts=[pb.RunAttempt(number=a.number, status=notifications_pb2.RunStatus.Value(a.status.value),
                                due_at=timestamp_to_proto(a.due_at), started_at=timestamp_to_proto(a.started_at),
                                ended_at=timestamp_to_proto(a.ended_at), error=a.error, pid=a.pid or 0,
                                spark_application_id=a.spark_application_id, spark_ui_url=a.spark_ui_url)
                  for a in run.attempts],
        spark_application_id=run.spark_application_id,
        spark_ui_url=next((a.spark_ui_url for a in reversed(run.attempts) if a.spark_application_id), ""),
    )
