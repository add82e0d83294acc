"""The kill test's program: appends one line per execution to the ledger named by the schedule's
`ledger` property (one O_APPEND write, so concurrent runs never interleave), waits `seconds`,
then writes an empty result.json the way the SDK does (atomically, after the work).

A run executed twice leaves two lines: the test counts executions, not only run records."""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from sluice.sdk.context import context_from_argv


def main() -> None:
    context = context_from_argv()
    raw = json.loads(Path(sys.argv[sys.argv.index("--sluice-context") + 1]).read_text())
    upstream_runs = sorted(n["run_id"] for n in raw["notifications"] if n["type"] == "program_status_changed")
    partitions = sorted(f"{p.dataset}/{p.key['n']}" for p in context.partitions())
    line = json.dumps({"schedule": context.schedule.name if context.schedule else "", "job_id": context.job_id,
                       "run_id": context.run_id, "partitions": partitions, "upstream_runs": upstream_runs,
                       "pid": os.getpid()})
    descriptor = os.open(context.properties["ledger"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(descriptor, (line + "\n").encode())
    finally:
        os.close(descriptor)
    time.sleep(float(context.properties.get("seconds", "0")))
    result_path = Path(context.system.result_path)
    partial = result_path.with_name(result_path.name + ".partial")
    partial.write_text(json.dumps({"outputs": [], "inputs": [], "consumed": [], "metrics": {"executions": 1}}))
    os.replace(partial, result_path)


if __name__ == "__main__":
    main()
