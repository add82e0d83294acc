"""Paths built from input are resolved (symlinks followed) and must lie under their root before any
file there is read, moved or deleted.

    entry = inside(apps_dir, apps_dir / app / f"{program}.py", "program.app")   # InvalidArgument if not
    inside(data_dir, final, "outputs[0].key", below=True)                       # strictly below: not the root

Names and key values are checked and encoded before they become paths (sluice.domain.names); this is
the second line: whatever a path says, its real location decides.
"""
from __future__ import annotations

import os
from pathlib import Path

from sluice.domain.errors import InvalidArgument


def inside(root: Path | str, path: Path | str, field: str, *, below: bool = True) -> Path:
    """`path` resolved, if it lies under `root` resolved (strictly below it unless `below` is False);
    otherwise InvalidArgument naming `field`. Relative paths are taken relative to `root`."""
    real_root = Path(os.path.realpath(root))
    real = Path(os.path.realpath(Path(root, path)))
    if real == real_root and not below:
        return real
    if real == real_root or real_root not in real.parents:
        raise InvalidArgument(field, f"{str(path)[:300]!r} resolves to {str(real)[:300]!r}, outside "
                                     f"{str(real_root)!r}")
    return real
