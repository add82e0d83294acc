"""Publishing a run's staged outputs: verify each file against the manifest, then move it in place.

A partial copy cannot pass: sizes and sha256 are checked, not mere existence. `LocalFiles` is the
MoveFiles step of commit sequences (verify + execute); `publish_outputs` the older direct path for
outputs to datasets that are not registered.

Every path is checked before a file is touched (sluice.paths): names follow the
identifier rule and key values are encoded (sluice.domain.names), manifest paths are relative and stay
inside their directory, staged and final directories (symlinks followed) lie under their roots, and
only files inside the final directory are ever deleted. A violation is a PublishError, never a move."""
from __future__ import annotations

import errno
import hashlib
import json
import os
import logging
import shutil
import stat
from pathlib import Path

from sluice.domain.commits import MoveFiles, StagedFile
from sluice.domain.common import PartitionRef
from sluice.domain.names import key_segments, relative_parts, validate_name
from sluice.domain.runs import InputPartition, OutputPartition
from sluice.domain.errors import InvalidArgument
from sluice.paths import inside


log = logging.getLogger(__name__)


class PublishError(Exception):
    pass


MAX_RESULT_BYTES = 4 * 1024 * 1024 - 64 * 1024
"""A program's result.json: what one PublishRun request carries (gRPC's 4 MiB message, less room for the rest)."""


def read_program_file(path: Path, limit: int = MAX_RESULT_BYTES, owner: int | None = None) -> bytes:
    """A file a program left in its run dir (result.json, consumed.json): its own, so hostile. Not through a
    link, never waited on (a FIFO), at most `limit` bytes, of the user `owner` if given; PublishError saying
    what is wrong, FileNotFoundError when there is none."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise
    except OSError as error:
        raise PublishError(f"the program's {path.name} cannot be read: {error.strerror}") from error
    with os.fdopen(fd, "rb") as file:
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode):
            raise PublishError(f"the program's {path.name} is not a regular file")
        if owner is not None and found.st_uid != owner:
            raise PublishError(f"{path.name} belongs to uid {found.st_uid}, not {owner}")
        if found.st_size > limit:
            raise PublishError(f"the program's {path.name} has {found.st_size:,} bytes, over the limit of {limit:,} bytes")
        data = file.read(limit + 1)
    if len(data) > limit:
        raise PublishError(f"the program's {path.name} has over {limit:,} bytes, the limit")
    return data


def read_result(result_path: Path) -> dict:
    try:
        result = json.loads(read_program_file(result_path))
    except FileNotFoundError as error:
        raise PublishError(f"the program wrote no result at {result_path}") from error
    except ValueError as error:  # not JSON, or not UTF-8
        raise PublishError(f"the program's result is not JSON: {error}") from error
    if not isinstance(result, dict):
        raise PublishError(f"the program's result must be a JSON object, got {type(result).__name__}")
    return result


def final_location(data_dir: Path, namespace: str, dataset: str, key: dict[str, str], path: str = "output") -> Path:
    """<data_dir>/<namespace>/<dataset>/<k1>=<v1>/...: names by the identifier rule, values encoded
    (InvalidArgument naming `path` otherwise); always strictly below data_dir."""
    if not isinstance(key, dict) or not key:
        raise InvalidArgument(f"{path}.key", "must map at least one key name to its value")
    return data_dir.joinpath(validate_name(f"{path}.namespace", namespace), validate_name(f"{path}.dataset", dataset),
                             *key_segments(key, f"{path}.key"))


def publish_outputs(result: dict, data_dir: Path, staging_root: Path | None = None) -> tuple[OutputPartition, ...]:
    """Outputs moved in place without a commit sequence; staged locations must lie under `staging_root`
    (default: the runs directory beside data_dir)."""
    staging_root = staging_root or data_dir.parent / "runs"
    published = []
    for index, output in enumerate(result.get("outputs", [])):
        try:
            target = final_location(data_dir, output["namespace"], output["dataset"], output["key"], f"outputs[{index}]")
            step = MoveFiles(output["staged_location"], str(target), tuple(
                StagedFile(f["path"], f["size_bytes"], f["sha256"]) for f in output.get("files", [])))
            check_paths(step, data_dir, staging_root, f"outputs[{index}]")
        except InvalidArgument as refused:
            raise PublishError(str(refused)) from refused
        staged = Path(output["staged_location"])
        if not staged.exists() and _moved(target, output.get("files", [])):
            pass  # moved by a launcher that stopped before recording the run's completion
        else:
            verify_manifest(staged, output.get("files", []))
            if target.exists():
                shutil.rmtree(target)  # a previous attempt of this run; the verified staged copy replaces it
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(staged), str(target))
            for directory, _, names in os.walk(target):
                for name in (".", *names):
                    _adopt(Path(directory, name))
        partition = PartitionRef(dict(output["key"]), str(target), int(output.get("size_bytes", 0)),
                                 int(output.get("record_count", 0)), {"format": output.get("format", "")})
        published.append(OutputPartition(output["namespace"], output["dataset"], partition))
    return tuple(published)


def inputs_of(result: dict) -> tuple[InputPartition, ...]:
    """The partitions the program says it read (its run's lineage); PublishError naming the field of one
    that is not {namespace, dataset, key, location}."""
    inputs = result.get("inputs", [])
    try:
        if not isinstance(inputs, list):
            raise InvalidArgument("inputs", f"must be a list, got {type(inputs).__name__}")
        return tuple(_input(entry, f"inputs[{index}]") for index, entry in enumerate(inputs))
    except InvalidArgument as refused:
        raise PublishError(str(refused)) from refused


def _input(entry: object, path: str) -> InputPartition:
    if not isinstance(entry, dict):
        raise InvalidArgument(path, f"must be an object with namespace, dataset, key and location, "
                                    f"got {type(entry).__name__}")
    key, location = entry.get("key"), entry.get("location", "")
    if not isinstance(key, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in key.items()):
        raise InvalidArgument(f"{path}.key", "must map key names to their values (text)")
    if not isinstance(location, str):
        raise InvalidArgument(f"{path}.location", f"must be text, got {type(location).__name__}")
    return InputPartition(validate_name(f"{path}.namespace", entry.get("namespace")),
                          validate_name(f"{path}.dataset", entry.get("dataset")), PartitionRef(dict(key), location))


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
        try:
            path = inside(staged, Path(*relative_parts("files.path", entry["path"])), "files.path")
        except InvalidArgument as refused:
            raise PublishError(str(refused)) from refused
        facts = _facts(path)
        if facts is None:
            raise PublishError(f"staged file {path} is missing or not a regular file")
        if facts[0] != entry["size_bytes"]:
            raise PublishError(f"staged file {path} has {facts[0]} bytes, manifest says {entry['size_bytes']}")
        if facts[1] != entry["sha256"]:
            raise PublishError(f"staged file {path} does not match its manifest checksum")


def _facts(path: Path) -> tuple[int, str] | None:
    """A regular file's size and sha256, read from one descriptor; None for anything else. Never through a
    link (a staged link to a file its program may not read would be published as that file), never waiting
    (a FIFO)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode):
            return None
        digest = hashlib.sha256()
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return found.st_size, digest.hexdigest()


def _adopt(path: Path) -> None:
    """A published file becomes the service's when it runs as root: a program run as another user
    (--program-user) staged it, and must not rewrite a published partition afterwards."""
    if os.geteuid() != 0:
        return
    try:
        found = os.lstat(path)
        if (found.st_uid, found.st_gid) != (0, os.getegid()):
            os.chown(path, 0, os.getegid(), follow_symlinks=False)
        if stat.S_ISREG(found.st_mode) and found.st_mode & 0o022:
            os.chmod(path, stat.S_IMODE(found.st_mode) & ~0o022)
    except PermissionError as error:  # root squashed (NFS): the file is published, its owner kept
        log.warning("published %s keeps its owner: %s", path, error.strerror)


# -- the MoveFiles commit step: verify by manifest, execute idempotently -------------------------

def manifest_of(directory: Path) -> tuple[StagedFile, ...]:
    """Every file under `directory` with its size and sha256, paths relative to it, sorted."""
    return tuple(StagedFile(path.relative_to(directory).as_posix(), *_facts(path))
                 for path in sorted(p for p in directory.rglob("*") if p.is_file() and not p.is_symlink()))


def check_paths(step: MoveFiles, final_root: Path | None, staging_root: Path | None, path: str = "output") -> None:
    """Before any file of the step is touched: manifest paths are relative and inside their directory,
    the final directory (resolved) lies strictly below `final_root`, the staged one below `staging_root`,
    and every file of the manifest, resolved, stays inside both. InvalidArgument naming the field otherwise."""
    for name in ("final_location", "staged_location"):
        if not isinstance(getattr(step, name), str) or not os.path.isabs(getattr(step, name)):
            raise InvalidArgument(f"{path}.{name}", f"must be an absolute path, got {getattr(step, name)!r}")
    if final_root is not None:
        inside(final_root, step.final_location, f"{path}.final_location")
    _check_fits(step, f"{path}.final_location")
    if staging_root is not None:
        inside(staging_root, step.staged_location, f"{path}.staged_location")
    for index, entry in enumerate(step.files):
        where = f"{path}.files[{index}].path"
        relative = Path(*relative_parts(where, entry.path))
        inside(step.staged_location, relative, where)
        inside(step.final_location, relative, where)


NAME_MAX = 255
PATH_MAX = 4096
"""Bytes of a file name and of a whole path (Linux): a partition directory past them cannot be made."""


def _check_fits(step: MoveFiles, field: str) -> None:
    """The final directory and its files can be made: a key value may be longer than a directory name."""
    for segment in Path(step.final_location).parts[1:]:
        if len(os.fsencode(segment)) > NAME_MAX:
            raise InvalidArgument(field, f"its directory {segment[:60]!r}... has {len(os.fsencode(segment))} bytes, "
                                         f"over the {NAME_MAX} a file name may have (a key value too long?)")
    longest = max((len(os.fsencode(entry.path)) for entry in step.files), default=0)
    if len(os.fsencode(step.final_location)) + 1 + longest >= PATH_MAX:
        raise InvalidArgument(field, f"its files' paths would be over the {PATH_MAX} bytes a path may have")


def check_staged(step: MoveFiles) -> None:
    """Before a sequence is recorded: every staged file is intact (PublishError otherwise)."""
    for entry in step.files:
        if not _intact(Path(step.staged_location) / entry.path, entry):
            raise PublishError(f"staged file {Path(step.staged_location) / entry.path} is missing or does not match "
                               "its manifest (size and sha256)")


class LocalFiles:
    """MoveFiles on a local (or mounted) filesystem. With roots, a step whose final directory is not
    strictly below `final_root` (the partitions dir) or whose staged one is not below `staging_root`
    (the runs dir) is refused (PublishError) before anything is read, moved or deleted; without them
    the manifest's paths are still checked, and deletions never leave the final directory."""

    _final_root: Path | None = None
    _staging_root: Path | None = None

    def __init__(self, final_root: Path | None = None, staging_root: Path | None = None) -> None:
        self._final_root = final_root
        self._staging_root = staging_root

    def check(self, step: MoveFiles) -> None:
        try:
            check_paths(step, self._final_root, self._staging_root, "move")
        except InvalidArgument as refused:
            raise PublishError(f"refused to move files: {refused}") from refused

    def verify(self, step: MoveFiles) -> bool:
        """Done when the final location holds exactly the manifest's files, each matching its size and
        sha256: existence is not enough, and files of an earlier write of the partition are gone."""
        self.check(step)
        return (all(_intact(Path(step.final_location) / entry.path, entry) for entry in step.files)
                and not _extra_files(step))

    def execute(self, step: MoveFiles) -> None:
        self.check(step)
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
        """After the sequence finished: what is left of the staging directory goes (with a staging
        root, only when it lies below it)."""
        try:
            if self._staging_root is not None:
                inside(self._staging_root, step.staged_location, "move.staged_location")
        except InvalidArgument as refused:
            log.warning("not removing staged files: %s", refused)
            return
        shutil.rmtree(step.staged_location, ignore_errors=True)


def _extra_files(step: MoveFiles) -> list[Path]:
    """Files under the final directory that the manifest does not list: not following symlinked
    directories, and only what lies inside the final directory itself (a symlink goes, not its target)."""
    final = Path(step.final_location)
    listed = {entry.path for entry in step.files}
    extra = []
    for directory, _, names in os.walk(final) if final.is_dir() else ():
        for name in names:
            path = Path(directory, name)
            if path.relative_to(final).as_posix() not in listed and (path.is_symlink() or path.is_file()):
                extra.append(path)
    return extra


def _intact(path: Path, entry: StagedFile) -> bool:
    return _facts(path) == (entry.size_bytes, entry.sha256)


def _move(staged: Path, final: Path) -> None:
    """A rename where possible (atomic); across filesystems a copy to a temporary name, flushed, then
    renamed: a reader of `final` never sees a partial file."""
    try:
        os.replace(staged, final)
        _adopt(final)
        return
    except OSError as error:
        if error.errno != errno.EXDEV:
            raise
    temporary = final.with_name(f".{final.name}.sluice-partial")
    shutil.copyfile(staged, temporary)
    with open(temporary, "rb+") as handle:
        os.fsync(handle.fileno())
    os.replace(temporary, final)
