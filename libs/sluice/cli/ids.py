"""Ids as the tables show them: any unique prefix of an id (the tables print 8 characters) stands for
it. Resolved on the client through the listing APIs (every page); an ambiguous prefix is refused with
its candidates, an unknown one is NOT_FOUND -- never an empty success."""
from __future__ import annotations

from typing import Iterable

from sluice.cli.output import Refused, UsageError
from sluice.client import SluiceClient

SHOWN_CANDIDATES = 10


def resolve(kind: str, given: str, candidates: Iterable[tuple[str, str]]) -> str | None:
    """The id among `candidates` ((id, label) pairs) that `given` is, or is the only one to start with;
    None when none does; Refused (INVALID_ARGUMENT, with the candidates) when several do."""
    given = given.strip()
    if not given:
        raise UsageError(f"{kind} id: must not be empty")
    matches: dict[str, str] = {}
    for candidate, label in candidates:
        if candidate == given:
            return candidate
        if candidate.startswith(given):
            matches.setdefault(candidate, label)
    if len(matches) > 1:
        shown = [f"  {candidate}  {label}".rstrip() for candidate, label in sorted(matches.items())]
        more = len(shown) - SHOWN_CANDIDATES
        shown = shown[:SHOWN_CANDIDATES] + ([f"  ... and {more} more"] if more > 0 else [])
        raise Refused("INVALID_ARGUMENT", f"{kind} id prefix {given!r} is ambiguous: {len(matches)} {kind}s match "
                      "(give more characters)", shown)
    return next(iter(matches), None)


def not_found(kind: str, given: str) -> Refused:
    return Refused("NOT_FOUND", f"no {kind} with id or id prefix {given!r}")


def schedule_id(client: SluiceClient, given: str, *, with_history: bool = False) -> str:
    """A schedule's full id. `with_history`: also the ids of deleted schedules whose jobs or runs are
    still listed (jobs history, runs list of a deleted schedule)."""
    found = resolve("schedule", given, ((s.id, f"{s.program.namespace}.{s.program.app} {s.name}")
                                       for s in client.list_schedules()))
    if found is None and with_history:
        seen = {job.schedule_id: "(deleted)" for job in client.list_jobs()}
        seen.update({run.schedule_id: "(deleted)" for run in client.list_runs()})
        found = resolve("schedule", given, ((i, label) for i, label in seen.items() if i))
    if found is None:
        raise not_found("schedule", given)
    return found


def run_id(client: SluiceClient, given: str) -> str:
    """A run's full id: a full-length id goes to GetRun as it is (it finds runs no listing keeps)."""
    if len(given.strip()) >= 36:
        return given.strip()
    found = resolve("run", given, ((r.id, f"{r.program.app}.{r.program.program}") for r in client.list_runs()))
    if found is None:
        raise not_found("run", given)
    return found
