"""The lineage read model, maintained event by event.

Pure (no I/O). `LineageIndex.apply` merges one run event into the run facts and updates, for
the runs whose derived job changed only, the indexes the queries use: the job of every run,
the runs of every job, the children of every run, the chosen `Job` of every fully qualified
name and the dataset edges of every job. Every index is a function of the facts alone, so the
result does not depend on the arrival order; `LineageIndex.from_facts` recomputes it from
scratch, which tests compare with the incremental result.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Iterable

if TYPE_CHECKING:
    from sluice.domain.lineage import DatasetKey, RunEventRecord, RunFacts

JobKey = tuple[str, str]                 # (namespace, fully qualified name)


@dataclass(frozen=True, slots=True)
class Job:
    namespace: str
    name: str                         # fully qualified: parent names joined by '.'
    simple_name: str
    parent_job_name: str | None
    parent_job_namespace: str | None = None

    @property
    def key(self) -> JobKey:
        return (self.namespace, self.name)


def _preference(job: Job) -> tuple:
    """Runs may name one fully qualified job differently (a root 'a.b', or 'b' under 'a'): the
    least of these wins."""
    return (job.parent_job_name is None, job.parent_job_name or "", job.parent_job_namespace or "", job.simple_name)


class LineageIndex:
    def __init__(self) -> None:
        self.facts: dict[str, RunFacts] = {}
        self.job_of_run: dict[str, Job] = {}
        self.runs_of_job: dict[JobKey, set[str]] = {}
        self.children: dict[str, set[str]] = {}          # run id -> runs whose parent facet names it
        self.jobs: dict[JobKey, Job] = {}
        # datasets by their sluice.domain.lineage.dataset_key (namespace and name, unambiguously)
        self.inputs_of_job: dict[JobKey, dict[DatasetKey, int]] = {}  # dataset -> how many of its runs read it
        self.outputs_of_job: dict[JobKey, dict[DatasetKey, int]] = {}
        self.readers: dict[DatasetKey, dict[JobKey, int]] = {}         # dataset -> jobs whose runs read it
        self.writers: dict[DatasetKey, dict[JobKey, int]] = {}
        self._namings: dict[JobKey, dict[Job, int]] = {}        # every Job some run derives, by key
        self._shared: dict[Job, Job] = {}                       # one instance per distinct Job
        self.latest: dict[JobKey, tuple] = {}                   # its run started last: (started, run id)
        self._sorted_jobs: list[JobKey] | None = None
        self.version = 0                                          # events applied that changed something

    @classmethod
    def from_facts(cls, facts: Iterable[RunFacts]) -> LineageIndex:
        """Every index computed in bulk (a restart from a snapshot), equal to what `apply` maintains:
        jobs derived once per distinct (parent job, naming), the datasets counted per job."""
        index = cls()
        index.facts = facts = {f.run_id: f for f in facts}
        for f in facts.values():
            if f.parent:
                index.children.setdefault(f.parent[2], set()).add(f.run_id)
        index.job_of_run = job_of_run = index._derive_all()
        by_job: dict[int, list[str]] = {}                   # id(shared Job) -> the runs that derive it
        for run_id, job in job_of_run.items():
            runs = by_job.get(id(job))
            if runs is None:
                by_job[id(job)] = [run_id]
            else:
                runs.append(run_id)
        runs_of_job: dict[JobKey, list[str]] = {}
        for job in index._shared:
            runs = by_job[id(job)]
            index._namings.setdefault(job.key, {})[job] = len(runs)
            runs_of_job.setdefault(job.key, []).extend(runs)
        index.jobs = {key: min(by_job, key=_preference) for key, by_job in index._namings.items()}
        for key, run_ids in runs_of_job.items():
            index.runs_of_job[key] = set(run_ids)
            index.latest[key] = max([((f := facts[r]).first_start or f.first_seen or _EPOCH, r) for r in run_ids])
            for datasets, by_job, by_dataset in (([facts[r].inputs for r in run_ids], index.inputs_of_job, index.readers),
                                                 ([facts[r].outputs for r in run_ids], index.outputs_of_job, index.writers)):
                counts: dict[DatasetKey, int] = {}
                for of_run in datasets:
                    for dataset in of_run:
                        counts[dataset] = counts.get(dataset, 0) + 1
                if counts:
                    by_job[key] = counts
                    for dataset, count in counts.items():
                        by_dataset.setdefault(dataset, {})[key] = count
        return index

    def _derive_all(self) -> dict[str, Job]:
        """`derive_job` of every run, as the shared Job (`_shared` filled): each chain is walked
        once, a run below one derived without a cycle takes its parent's job (one Job made per
        distinct parent job and naming), and a chain that meets a cycle is derived run by run."""
        facts, shared, acyclic, cyclic = self.facts, self._shared, {}, {}
        made: dict[tuple, Job] = {}

        def job_of(f: RunFacts, parent_job: Job | None) -> Job:
            naming = (id(parent_job), f.job[2:] if f.job else min(f.claims), f.parent[4] if parent_job else None)
            job = made.get(naming)
            if job is None:
                job = _job_of(f, parent_job)
                job = made[naming] = shared.setdefault(job, job)
            return job

        for run_id, f in facts.items():
            if run_id in acyclic or run_id in cyclic:
                continue
            parent = f.parent
            if parent is None or parent[2] not in facts or parent[2] in acyclic:  # mostly: a parent comes first
                acyclic[run_id] = job_of(f, acyclic[parent[2]] if parent and parent[2] in facts else None)
                continue
            chain, on_chain, current, parent_job, cycle = [run_id], {run_id}, run_id, None, False
            while (parent := facts[current].parent) and (up := parent[2]) in facts:
                if up in acyclic:
                    parent_job = acyclic[up]
                    break
                if up in cyclic or up in on_chain:
                    cycle = True
                    break
                chain.append(up)
                on_chain.add(up)
                current = up
            if cycle:
                for rid in chain:
                    job = self.derive_job(rid)
                    cyclic[rid] = shared.setdefault(job, job)
                continue
            for rid in reversed(chain):
                parent_job = acyclic[rid] = job_of(facts[rid], parent_job)
        return {**acyclic, **cyclic} if cyclic else acyclic

    def sorted_job_keys(self) -> list[JobKey]:
        if self._sorted_jobs is None:
            self._sorted_jobs = sorted(self.jobs)
        return self._sorted_jobs

    # -- updates ------------------------------------------------------------------------------

    def apply(self, record: RunEventRecord, blank: type[RunFacts]) -> bool:
        """Merge one event; False when it taught nothing new (a redelivery)."""
        run_id, parent = record.run_id, record.parent
        parent_changed = False
        if parent:                                    # the parent exists, maybe only as a placeholder
            before = self.facts.get(parent.run_id)
            claim = (parent.job_namespace, parent.job_name)
            if before is None or claim not in before.claims:
                base = before or blank(parent.run_id)
                self.facts[parent.run_id] = replace(base, claims=base.claims | {claim})
                parent_changed = True
        before = self.facts.get(run_id)
        after = (before or blank(run_id)).absorb(record)
        if after == before:
            if parent_changed:
                self._rename(parent.run_id, everything_below=False)
            return parent_changed
        self.facts[run_id] = after
        old_parent = before.parent[2] if before and before.parent else None
        new_parent = after.parent[2] if after.parent else None
        if old_parent != new_parent:
            if old_parent is not None:
                self._discard(self.children, old_parent, run_id)
            self.children.setdefault(new_parent, set()).add(run_id)
        job = self.job_of_run.get(run_id)
        if job is not None:                               # what changed counts for its current job
            self._count(job.key, [d for d in after.inputs if d not in before.inputs],
                        [d for d in after.outputs if d not in before.outputs], +1)
            if _started(before) != _started(after):
                self._forget_latest(job.key, run_id)
                self._offer_latest(job.key, run_id)
        if parent_changed:
            self._rename(parent.run_id, everything_below=False)
        if job is None or _naming(before) != _naming(after):
            self._rename(run_id, everything_below=old_parent != new_parent)
        return True

    def _rename(self, start: str, everything_below: bool) -> None:
        """Re-derive the job of `start` and of its descendants: all of them when its parent
        changed (a cycle may have formed or broken below), else only below a job that changed."""
        stack, visited = [start], set()
        while stack:
            run_id = stack.pop()
            if run_id in visited:
                continue
            visited.add(run_id)
            old, new = self.job_of_run.get(run_id), self.derive_job(run_id)
            if old != new:
                self._move(run_id, old, new)
            if old != new or everything_below:
                stack.extend(self.children.get(run_id, ()))

    def derive_job(self, run_id: str) -> Job:
        """Walk up the parents; a cycle is cut at its least run id, which then counts as a root.
        Without a cycle on the way the parent's job is up to date (`_rename` goes top-down) and
        is used as it is; with one, the whole chain is derived again."""
        chain, position, current, cycle = [run_id], {run_id: 0}, run_id, False
        while (f := self.facts[current]).parent and (up := f.parent[2]) in self.facts:
            if up in position:
                cut = min(chain[position[up]:])
                del chain[position[cut] + 1:]
                cycle = True
                break
            position[up] = len(chain)
            chain.append(up)
            current = up
        if not cycle and len(chain) > 1 and chain[1] in self.job_of_run:
            return _job_of(self.facts[run_id], self.job_of_run[chain[1]])
        job = None
        for rid in reversed(chain):
            job = _job_of(self.facts[rid], job)
        return job

    def _move(self, run_id: str, old: Job | None, new: Job) -> None:
        f = self.facts[run_id]
        if old is not None:
            self._discard(self.runs_of_job, old.key, run_id)
            self._count(old.key, f.inputs, f.outputs, -1)
            self._name(old, -1)
            self._forget_latest(old.key, run_id)
        new = self._shared.setdefault(new, new)
        self.job_of_run[run_id] = new
        self.runs_of_job.setdefault(new.key, set()).add(run_id)
        self._count(new.key, f.inputs, f.outputs, +1)
        self._name(new, +1)
        self._offer_latest(new.key, run_id)

    def _offer_latest(self, key: JobKey, run_id: str) -> None:
        candidate = (_started(self.facts[run_id]), run_id)
        if key not in self.latest or candidate > self.latest[key]:
            self.latest[key] = candidate

    def _forget_latest(self, key: JobKey, run_id: str) -> None:
        """After the latest run moved or changed its start: the next one, by a scan of the job's runs."""
        if key in self.latest and self.latest[key][1] == run_id:
            del self.latest[key]
            for other in self.runs_of_job.get(key, ()):
                if other != run_id:
                    self._offer_latest(key, other)

    def _name(self, job: Job, delta: int) -> None:
        namings = self._namings.setdefault(job.key, {})
        namings[job] = namings.get(job, 0) + delta
        if namings[job] <= 0:
            del namings[job], self._shared[job]
        if not namings:
            del self._namings[job.key]
            del self.jobs[job.key]
            self._sorted_jobs = None
            return
        if job.key not in self.jobs:
            self._sorted_jobs = None
        self.jobs[job.key] = min(namings, key=_preference)

    def _count(self, key: JobKey, inputs: Iterable[DatasetKey], outputs: Iterable[DatasetKey], delta: int) -> None:
        for by_job, by_dataset, datasets in ((self.inputs_of_job, self.readers, inputs),
                                             (self.outputs_of_job, self.writers, outputs)):
            for dataset in datasets:
                _add(by_job.setdefault(key, {}), dataset, delta, by_job, key)
                _add(by_dataset.setdefault(dataset, {}), key, delta, by_dataset, dataset)

    @staticmethod
    def _discard(index: dict, key, member) -> None:
        members = index.get(key)
        if members is not None:
            members.discard(member)
            if not members:
                del index[key]


def _add(counter: dict, item, delta: int, owner: dict, owner_key) -> None:
    counter[item] = counter.get(item, 0) + delta
    if counter[item] <= 0:
        del counter[item]
        if not counter:
            del owner[owner_key]


def _started(f: RunFacts) -> datetime:
    return f.first_start or f.first_seen or _EPOCH


def _naming(f: RunFacts) -> tuple:
    """What a run's job is derived from, besides its parent's job."""
    return (f.job and f.job[2:], f.parent and f.parent[2:], None if f.job else min(f.claims))


def _job_of(f: RunFacts, parent_job: Job | None) -> Job:
    namespace, given = f.job[2:] if f.job else min(f.claims)
    if parent_job is None:
        return Job(namespace, given, given, None)
    simple = given                                            # unless the producer already qualified it
    for prefix in (parent_job.name + ".", f.parent[4] + "."):
        if given.startswith(prefix) and len(given) > len(prefix):
            simple = given[len(prefix):]
            break
    return Job(namespace, f"{parent_job.name}.{simple}", simple, parent_job.name, parent_job.namespace)



_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
