#!/usr/bin/env python3
"""A stand-in for spark-submit running a program, for launcher tests without Spark: called with
spark-submit's arguments, it reads the run's context.json (after --sluice-context) and behaves as
its job's properties say:

  starts_log   a file it appends "<run id> <attempt> <pid>" to when it starts
  gate         a file it waits for before going on (the test decides when the program ends)
  fail_attempts  attempts up to this number exit 1 (default 0)

Otherwise it stages one output partition (web.counts, hour=1) with its manifest, writes
result.json and exits 0."""
from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    context = json.loads(Path(argv[argv.index("--sluice-context") + 1]).read_text())
    properties, system = context["properties"], context["system"]
    attempt = int(system.get("attempt", 1))
    if "starts_log" in properties:
        with open(properties["starts_log"], "a") as starts:
            starts.write(f"{context['run_id']} {attempt} {os.getpid()}\n")
    if "gate" in properties:
        while not Path(properties["gate"]).exists():
            time.sleep(0.01)
    if attempt <= int(properties.get("fail_attempts", "0")):
        print(f"attempt {attempt} fails as told", file=sys.stderr)
        return 1
    staged = Path(system["staging_dir"]) / "counts"
    staged.mkdir(parents=True)
    data = json.dumps({"run_id": context["run_id"], "attempt": attempt}).encode() + b"\n"
    (staged / "part-0.json").write_bytes(data)
    output = {"namespace": "web", "dataset": "counts", "key": {"hour": "1"}, "staged_location": str(staged),
              "format": "json", "size_bytes": len(data), "record_count": 1,
              "files": [{"path": "part-0.json", "size_bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}]}
    Path(system["result_path"]).write_text(json.dumps({"outputs": [output], "inputs": []}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
