"""Publishing a run's staged outputs: verify each file against the manifest, then move it in place.

A partial copy cannot pass: sizes and sha256 are checked, not mere existence. `LocalFiles` is the
MoveFiles step of commit sequences (verify + execute); `publish_outputs` the older direct path for
outputs to datasets that are not registered."""
from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
from pathlib import Path

from sluice.domain.commits import MoveFiles, StagedFile
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
        target = final_location(data_dir, output["namespace"], output["dataset"], output["key"])
        if not staged.exists() and _moved(target, output.get("files", [])):
            pass  # moved by a launcher that stopped before recording the run's completion
        else:
            verify_manifest(staged, output.get("files", []))
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


def _moved(target: Path, files: list[dict]) -> bool:
    try:
        verify_manifest(target, files)
    except PublishError:
        return False
    return True


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


# -- the MoveFiles commit step: verify by manifest, execute idempotently -------------------------

def manifest_of(directory: Path) -> tuple[StagedFile, ...]:
    """Every file under `directory` with its size and sha256, paths relative to it, sorted."""
    return tuple(StagedFile(path.relative_to(directory).as_posix(), path.stat().st_size, _sha256(path))
                 for path in sorted(p for p in directory.rglob("*") if p.is_file()))


def check_staged(step: MoveFiles) -> None:
    """Before a sequence is recorded: every staged file is intact (PublishError otherwise)."""
    for entry in step.files:
        if not _intact(Path(step.staged_location) / entry.path, entry):
            raise PublishError(f"staged file {Path(step.staged_location) / entry.path} is missing or does not match "
                               "its manifest (size and sha256)")


class LocalFiles:
    """MoveFiles on a local (or mounted) filesystem."""

    def verify(self, step: MoveFiles) -> bool:
        """Done when the final location holds exactly the manifest's files, each matching its size and
        sha256: existence is not enough, and files of an earlier write of the partition are gone."""
        return (all(_intact(Path(step.final_location) / entry.path, entry) for entry in step.files)
                and not _extra_files(step))

    def execute(self, step: MoveFiles) -> None:
        for entry in step.files:
            final = Path(step.final_location) / entry.path
            if _intact(final, entry):
                continue
            staged = Path(step.staged_location) / entry.path
            if not _intact(staged, entry):
                raise PublishError(f"neither {staged} nor {final} matches the manifest; the output is lost")
            final.parent.mkdir(parents=True, exist_ok=True)
            _move(staged, final)
        for extra in _extra_files(step):  # a rewrite of the partition replaces it whole
            extra.unlink()

    def clean_up(self, step: MoveFiles) -> None:
        """After the sequence finished: what is left of the staging directory goes."""
        shutil.rmtree(step.staged_location, ignore_errors=True)


def _extra_files(step: MoveFiles) -> list[Path]:
    final = Path(step.final_location)
    listed = {entry.path for entry in step.files}
    return [p for p in final.rglob("*") if p.is_file() and p.relative_to(final).as_posix() not in listed] \
        if final.is_dir() else []


def _intact(path: Path, entry: StagedFile) -> bool:
    try:
        return path.is_file() and path.stat().st_size == entry.size_bytes and _sha256(path) == entry.sha256
    except OSError:
        return False


def _move(staged: Path, final: Path) -> None:
    """A rename where possible (atomic); across filesystems a copy to a temporary name, flushed, then
    renamed: a reader of `final` never sees a partial file."""
    try:
        os.replace(staged, final)
        return
    except OSError as error:
        if error.errno != errno.EXDEV:
            raise
    temporary = final.with_name(f".{final.name}.sluice-partial")
    shutil.copyfile(staged, temporary)
    with open(temporary, "rb+") as handle:
        os.fsync(handle.fileno())
    os.replace(temporary, final)
