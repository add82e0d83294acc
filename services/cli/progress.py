"""Progress of long offline work (`sluice rebuild`, `log stats`, `dlq list`): a tqdm bar on stderr, shown
only when stdout and stderr are both terminals and --json is not given, so what a pipe, a file or a
script reads is exactly what it read without it."""
from __future__ import annotations

import shutil
import sys
from contextlib import contextmanager
from typing import Any, Iterator, Sequence

from sluice.eventlog.port import EventLog, RecordedEvent


def shown(args: Any) -> bool:
    return not getattr(args, "json", False) and sys.stdout.isatty() and sys.stderr.isatty()


class Progress:
    """What a command reports; nothing is drawn unless a bar is shown."""

    def __init__(self, bar: Any = None) -> None:
        self._bar = bar

    def advance(self, count: int = 1) -> None:
        if self._bar is not None:
            self._bar.update(count)

    def reach(self, done: int) -> None:
        """Set the amount done (a log position), moving back too when a second pass starts over."""
        if self._bar is not None and done != self._bar.n:
            self._bar.update(done - self._bar.n)

    def describe(self, text: str) -> None:
        if self._bar is not None:
            self._bar.set_description_str(text)


@contextmanager
def progress(args: Any, description: str, total: int | None = None, unit: str = "it") -> Iterator[Progress]:
    """A bar of `total` `unit`s (a counter when None), erased when the work ends."""
    if not shown(args):
        yield Progress()
        return
    from tqdm import tqdm

    # a terminal that reports no width (0 columns: a fresh pty) would get an empty bar: 80 then
    width = shutil.get_terminal_size((80, 24)).columns
    with tqdm(total=total, desc=description, unit=unit, file=sys.stderr, leave=False, ncols=width,
              mininterval=0.2) as bar:
        yield Progress(bar)


class ReadProgress:
    """An event log that reports the position each full read (`read_all`) reaches: the folds of a
    rebuild happen inside the services' recovery, which reads the log through it."""

    def __init__(self, log: EventLog, progress: Progress) -> None:
        self._log = log
        self._progress = progress

    def read_all(self, after: int = 0, limit: int = 1000, prefixes: Sequence[str] = ()) -> list[RecordedEvent]:
        events = self._log.read_all(after, limit, prefixes)
        if events:
            self._progress.reach(events[-1].position)
        return events

    def __getattr__(self, name: str) -> Any:
        return getattr(self._log, name)
