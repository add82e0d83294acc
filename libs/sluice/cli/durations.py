"""DURATION options of the CLI: `90`, `90s`, `45m`, `2h`, `1d`, or units combined (`1h30m`)."""
from __future__ import annotations

import re

from sluice.cli.output import UsageError

_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86_400}
_PART = re.compile(r"(\d+)([smhd])")


def parse_seconds(text: str, option: str) -> int:
    """Whole seconds of `text`; a bare number is seconds. UsageError naming `option` otherwise."""
    given = text.strip().lower()
    if given.isdigit():
        return int(given)
    parts = _PART.findall(given)
    if not given or "".join(f"{number}{unit}" for number, unit in parts) != given:
        raise UsageError(f"{option}: expected a duration such as 90s, 45m, 2h, 1d or 1h30m, got {text!r}")
    return sum(int(number) * _UNIT_SECONDS[unit] for number, unit in parts)
