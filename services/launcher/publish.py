"""Publishing a run's staged outputs: verify each file against the manifest, then move it in place.

A partial copy cannot pass: sizes and sha256 are checked, not mere existence."""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from sluice.domain.common import PartitionRef
from sluice.domain.runs import InputPartition, OutputPartition


class PublishError(Exception):
    pass


def read_result(result_path: Path) -> dict:
    try:
        return json.loads(result_path.read_text())
    except FileNotFoundError as error:
        raise PublishError(f"the program wrote no result at {result_path}") from error
    except json.JSONDecodeError as error:
        raise PublishError(f"the program's result is not JSON: {error}") from error


def final_location(data_dir: Path, namespace: str, dataset: str, key: dict[str, str]) -> Path:
    return data_dir.joinpath(namespace, dataset, *(f"{k}={v}" for k, v in key.items()))


def publish_outputs(result: dict, data_dir: Path) -> tuple[OutputPartition, ...]:
    published = []
    for output in result.get("outputs", []):
        staged = Path(output["staged_location"])
        verify_manifest(staged, output.get("files", []))
        target = final_location(data_dir, output["namespace"], output["dataset"], output["key"])
        if target.exists():
            shutil.rmtree(target)  # a previous attempt of this run; the verified staged copy replaces it
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(staged), str(target))
        partition = PartitionRef(dict(output["key"]), str(target), int(output.get("size_bytes", 0)),
                                 int(output.get("record_count", 0)), {"format": output.get("format", "")})
        published.append(OutputPartition(output["namespace"], output["dataset"], partition))
    return tuple(published)


def inputs_of(result: dict) -> tuple[InputPartition, ...]:
    return tuple(
        InputPartition(i["namespace"], i["dataset"], PartitionRef(dict(i["key"]), i.get("location", "")))
        for i in result.get("inputs", [])
    )


def verify_manifest(staged: Path, files: list[dict]) -> None:
    if not files:
        raise PublishError(f"output {staged} has an empty manifest")
    for entry in files:
        path = staged / entry["path"]
        if not path.is_file():
            raise PublishError(f"staged file {path} is missing")
        if path.stat().st_size != entry["size_bytes"]:
            raise PublishError(f"staged file {path} has {path.stat().st_size} bytes, manifest says {entry['size_bytes']}")
        if _sha256(path) != entry["sha256"]:
            raise PublishError(f"staged file {path} does not match its manifest checksum")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
