"""One process per service per data dir: an exclusive `fcntl.flock` on `<data-dir>/<service>.lock`,
held for the process's lifetime (the kernel drops it when the process ends, however it ends, so a
kill -9 leaves no stale lock). `sluice standalone` takes the lock of each service it runs, so a
second standalone, or a `sluice serve launcher` beside one, on the same data dir refuses to start.

The launcher relies on it: a launcher holding its data dir's lock knows that the previous holder of
the launcher lease with the same home (host and data dir) has ended (sluice.domain.lease)."""
from __future__ import annotations

import fcntl
import os
from pathlib import Path


class DataDirLocked(Exception):
    """Another process runs this service on this data dir."""


class DirLock:
    def __init__(self, path: Path, descriptor: int) -> None:
        self.path = path
        self._descriptor = descriptor

    def release(self) -> None:
        if self._descriptor >= 0:
            os.close(self._descriptor)  # closing the only descriptor drops the flock
            self._descriptor = -1


def lock_service(data_dir: Path, service: str) -> DirLock:
    """The exclusive lock of `service` on `data_dir` (made if missing), or DataDirLocked naming the holder."""
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / f"{service}.lock"
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(descriptor, 64, 0).decode(errors="replace").strip() or "another process"
        os.close(descriptor)
        raise DataDirLocked(f"{service} already runs on data dir {data_dir} (pid {holder}; {path} is locked)") from None
    os.ftruncate(descriptor, 0)
    os.pwrite(descriptor, f"{os.getpid()}\n".encode(), 0)
    return DirLock(path, descriptor)


def lock_services(data_dir: Path, services: tuple[str, ...]) -> list[DirLock]:
    """Every service's lock, or none (DataDirLocked)."""
    held: list[DirLock] = []
    try:
        for service in services:
            held.append(lock_service(data_dir, service))
    except DataDirLocked:
        for lock in held:
            lock.release()
        raise
    return held
