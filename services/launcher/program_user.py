"""The user a launcher runs its programs as (`--program-user`), when not its own.

A program is hostile: run as the launcher's user it could read the run-credential key and the event
log, and signal the launcher. As another user it reaches its own attempt's directory (handed over to
it, `hand_over`) and what other users may read. The supervise wrapper stays the launcher's user and
drops to this one in the program's process, before exec."""
from __future__ import annotations

import os
import pwd
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ProgramUser:
    name: str
    uid: int
    gid: int

    @classmethod
    def named(cls, name: str) -> ProgramUser:
        """The user by name (or uid); ValueError naming what is wrong, also when this process may not switch to it."""
        try:
            entry = pwd.getpwuid(int(name)) if name.isdigit() else pwd.getpwnam(name)
        except (KeyError, ValueError, OverflowError):
            raise ValueError(f"no such user {name!r}") from None
        if os.geteuid() != 0 and entry.pw_uid != os.geteuid():
            raise ValueError(f"running programs as {entry.pw_name} needs the launcher to run as root "
                             f"(it runs as uid {os.geteuid()})")
        return cls(entry.pw_name, entry.pw_uid, entry.pw_gid)

    def wrapper_arguments(self) -> list[str]:
        return ["--as", f"{self.uid}:{self.gid}"]

    def environment(self, attempt_dir: Path) -> dict[str, str]:
        """Its home is the attempt's directory: the one place it may write that is its own."""
        return {"HOME": str(attempt_dir), "USER": self.name, "LOGNAME": self.name}

    def hand_over(self, attempt_dir: Path, context_path: Path) -> None:
        """The attempt's directory (the program writes its result, sidecars and staged outputs there)
        and its context to this user. Neither is a link: the launcher made both (private_dir,
        write_context)."""
        for path in (attempt_dir, context_path):
            os.chown(path, self.uid, self.gid, follow_symlinks=False)
