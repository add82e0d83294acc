"""The fault campaign's program: appends a `start` line to the ledger named by the schedule's `ledger`
property when it starts and an `end` line when its work is done (one O_APPEND write each, with the
wall-clock time), waits `seconds` in between, then writes an empty result.json as the SDK does.

Each line names the run, its attempt, its context file (under its launcher's data dir) and the
partitions that triggered it: a run executed twice
leaves two `end` lines, an attempt started twice two `start` lines."""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from sluice.sdk.context import context_from_argv


def ledger(path: str, line: dict) -> None:
    descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(descriptor, (json.dumps({**line, "at": time.time()}) + "\n").encode())
    finally:
        os.close(descriptor)


def main() -> None:
    context = context_from_argv()
    context_path = Path(sys.argv[sys.argv.index("--sluice-context") + 1])
    raw = json.loads(context_path.read_text())
    identity = {"run_id": context.run_id, "attempt": int(raw["system"].get("attempt", 1)), "pid": os.getpid(),
                "context": str(context_path),
                "partitions": sorted(f"{p.dataset}/{p.key['n']}" for p in context.partitions())}
    ledger(context.properties["ledger"], {"what": "start", **identity})
    time.sleep(float(context.properties.get("seconds", "0")))
    ledger(context.properties["ledger"], {"what": "end", **identity})
    result_path = Path(context.system.result_path)
    partial = result_path.with_name(result_path.name + ".partial")
    partial.write_text(json.dumps({"outputs": [], "inputs": [], "consumed": [], "metrics": {}}))
    os.replace(partial, result_path)


if __name__ == "__main__":
    main()
