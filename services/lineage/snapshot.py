"""The lineage snapshot's shape: every run's RunFacts as columns of integers, not a record per run.

Decoded by the codec, a record per run (a dataclass, its optional tuples, its sets of pairs) cost
~11 us a run in Python calls. Here each column of integers is one `bytes` (little-endian 32-bit
integers: the codec checks one value, not each integer, and `array` reads them), and `run_facts`
rebuilds the RunFacts from the columns with comprehensions, zips and slices.
Strings other than run ids (namespaces, job names, dataset keys, event types, dimensions) and
datetimes are written once, in `strings` and `times`, and everywhere else referred to by index:
they come back shared, as the events' interned strings were.

Per run, in `run_ids`' order: `job` (4 integers: its time, rank, namespace, name), `parent` (4: time,
rank, namespace, name; the run id in `parent_runs`, "" when none), `terminal` and `progress` (3:
time, rank, type), `moments` (3: first_start, first_seen, last_seen); a time of -1 is None (the tuple
is None). `claims`, `inputs`, `outputs`, `partitions` and `seen` are flat, with a count per run in
`counts` (5 per run, in that order): a claim is 2 strings, an input or output 1, an event seen its
type and time, a partition its dataset and its count of dimensions in `dimensions` (2 strings each).
"""
from __future__ import annotations

import sys
from array import array
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import datetime
from itertools import accumulate, repeat
from sys import intern
from types import SimpleNamespace

from sluice.domain.lineage import RunFacts


@dataclass(frozen=True)
class LineageColumns:
    strings: list[str]
    times: list[datetime]
    run_ids: list[str]
    parent_runs: list[str]
    job: bytes
    parent: bytes
    terminal: bytes
    progress: bytes
    moments: bytes
    counts: bytes
    claims: bytes
    inputs: bytes
    outputs: bytes
    partitions: bytes
    dimensions: bytes
    seen: bytes


INT_COLUMNS = ("job", "parent", "terminal", "progress", "moments", "counts", "claims", "inputs", "outputs",
               "partitions", "dimensions", "seen")
_INT32 = "i"
assert array(_INT32).itemsize == 4


def pack_ints(values: list[int]) -> bytes:
    """Little-endian 32-bit integers (OverflowError beyond: the snapshot is not saved, see Snapshots.save)."""
    packed = array(_INT32, values)
    if sys.byteorder == "big":
        packed.byteswap()
    return packed.tobytes()


def unpack_ints(data: bytes) -> list[int]:
    if len(data) % 4:
        raise ColumnsUnusable("a column of integers cut inside one")
    unpacked = array(_INT32)
    unpacked.frombytes(data)
    if sys.byteorder == "big":
        unpacked.byteswap()
    return unpacked.tolist()


class ColumnsUnusable(ValueError):
    """Columns that describe no runs (damaged, or made by other code): fold the log instead."""


def columns(facts: Mapping[str, RunFacts]) -> LineageColumns:
    strings: dict[str, int] = {}
    times: dict[tuple, int] = {}
    time_list: list[datetime] = []

    def s(text: str) -> int:
        found = strings.get(text)
        if found is None:
            found = strings[text] = len(strings)
        return found

    def t(when: datetime | None) -> int:
        if when is None:
            return -1
        key = (when, when.tzinfo, when.fold)  # equal datetimes of other zones stay apart
        found = times.get(key)
        if found is None:
            found = times[key] = len(time_list)
            time_list.append(when)
        return found

    c = SimpleNamespace(parent_runs=[], **{name: [] for name in INT_COLUMNS})
    for f in facts.values():
        for column, chosen, width in ((c.job, f.job, 4), (c.parent, f.parent, 4), (c.terminal, f.terminal, 3),
                                      (c.progress, f.progress, 3)):
            if chosen is None:
                column.extend([-1] + [0] * (width - 1))
            else:
                column.extend([t(chosen[0]), chosen[1], *[s(text) for text in chosen[-(width - 2):]]])
        c.parent_runs.append(f.parent[2] if f.parent else "")
        c.moments.extend([t(f.first_start), t(f.first_seen), t(f.last_seen)])
        c.counts.extend([len(f.claims), len(f.inputs), len(f.outputs), len(f.partitions), len(f.seen)])
        for namespace, name in f.claims:
            c.claims.extend([s(namespace), s(name)])
        c.inputs.extend([s(dataset) for dataset in f.inputs])
        c.outputs.extend([s(dataset) for dataset in f.outputs])
        for dataset, dimensions in f.partitions:
            c.partitions.extend([s(dataset), len(dimensions)])
            for key, value in dimensions:
                c.dimensions.extend([s(key), s(value)])
        for event_type, when in f.seen:
            c.seen.extend([s(event_type), t(when)])
    return LineageColumns(list(strings), time_list, [f.run_id for f in facts.values()], c.parent_runs,
                          **{name: pack_ints(getattr(c, name)) for name in INT_COLUMNS})


def run_facts(c: LineageColumns) -> list[RunFacts]:
    """The RunFacts the columns describe; ColumnsUnusable if they describe none. The codec checked
    the types; here the lengths (zip and slices would cut silently) and the indexes (IndexError):
    a negative index picks an entry from the end, so whatever the columns say is runs of the
    declared types, as any other snapshot's values."""
    try:
        return _run_facts(c)
    except IndexError as error:
        raise ColumnsUnusable(f"an index out of range: {error}") from error


def _run_facts(columns: LineageColumns) -> list[RunFacts]:
    c = SimpleNamespace(strings=columns.strings, times=columns.times, run_ids=columns.run_ids,
                        parent_runs=columns.parent_runs,
                        **{name: unpack_ints(getattr(columns, name)) for name in INT_COLUMNS})
    runs = len(c.run_ids)
    _check(len(c.parent_runs) == runs and len(c.counts) == 5 * runs and len(c.job) == len(c.parent) == 4 * runs
           and len(c.terminal) == len(c.progress) == len(c.moments) == 3 * runs, "columns of different lengths")
    counts = [c.counts[k::5] for k in range(5)]
    _check(min(c.counts, default=0) >= 0 and min(c.partitions[1::2], default=0) >= 0, "a negative count")
    for column, width, count in ((c.claims, 2, counts[0]), (c.inputs, 1, counts[1]), (c.outputs, 1, counts[2]),
                                 (c.partitions, 2, counts[3]), (c.seen, 2, counts[4]),
                                 (c.dimensions, 2, c.partitions[1::2])):
        _check(len(column) == width * sum(count), "counts that disagree with their column")
    s, t = [intern(text) for text in c.strings], c.times

    it = iter(c.job)
    jobs = [None if a < 0 else (t[a], b, s[x], s[y]) for a, b, x, y in zip(it, it, it, it)]
    it = iter(c.parent)
    parents = [None if a < 0 else (t[a], b, run, s[x], s[y]) for (a, b, x, y), run in zip(zip(it, it, it, it), c.parent_runs)]
    it = iter(c.terminal)
    terminals = [None if a < 0 else (t[a], b, s[x]) for a, b, x in zip(it, it, it)]
    it = iter(c.progress)
    progresses = [None if a < 0 else (t[a], b, s[x]) for a, b, x in zip(it, it, it)]
    moments = [None if a < 0 else t[a] for a in c.moments]
    it = iter(c.claims)
    claims = _split([(s[a], s[b]) for a, b in zip(it, it)], counts[0], frozenset)
    inputs = _split([s[a] for a in c.inputs], counts[1], tuple)
    outputs = _split([s[a] for a in c.outputs], counts[2], tuple)
    it = iter(c.dimensions)
    dimensions = _split([(s[a], s[b]) for a, b in zip(it, it)], c.partitions[1::2], tuple)
    partitions = _split([(s[a], d) for a, d in zip(c.partitions[0::2], dimensions)], counts[3], tuple)
    it = iter(c.seen)
    seen = _split([(s[a], t[b]) for a, b in zip(it, it)], counts[4], tuple)
    return _built(RunFacts, dict(
        run_id=c.run_ids, job=jobs, claims=claims, parent=parents, terminal=terminals, progress=progresses,
        first_start=moments[0::3], first_seen=moments[1::3], last_seen=moments[2::3], inputs=inputs, outputs=outputs,
        partitions=partitions, seen=seen))


def _built(cls: type, values: dict[str, list]) -> list:
    """Instances of a slotted dataclass with these field values, set through its slots as the
    codec sets them (no __init__: a frozen one's sets each field through object.__setattr__, which
    took 0.3 of 0.45 s for 50,000 runs)."""
    if list(values) != [f.name for f in fields(cls)]:
        raise TypeError(f"the columns build {list(values)}, {cls.__name__} has {[f.name for f in fields(cls)]}")
    made = list(map(object.__new__, repeat(cls, len(values["run_id"]))))
    for name, column in values.items():
        deque(map(getattr(cls, name).__set__, made, column), maxlen=0)
    return made


def _split(items: list, counts: list[int], build: type) -> list:
    """`items` cut into consecutive runs of `counts` items, each built into a `build`."""
    ends = list(accumulate(counts))
    return [build(items[start:end]) for start, end in zip([0, *ends], ends)]


def _check(holds: bool, what: str) -> None:
    if not holds:
        raise ColumnsUnusable(what)
