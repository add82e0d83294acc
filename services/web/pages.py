"""What each page shows, gathered from the gRPC APIs (synchronous calls: the web server runs these in
a worker thread). Each function takes the API, the user's token and the page's query, and returns the
template's context. Listings page as the APIs do (page_size, page_token); the name filter `q` is
applied to each API page, reading further pages until a console page is full, or SCAN_PAGES pages or
SCAN_SECONDS were spent (then "next" goes on searching): a search's page load stays bounded."""
from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any, Callable, Iterator, Mapping

import grpc

from sluice.runtime.access import ANY_NAMESPACE
from sluice.v1 import (
    alerts_pb2,
    datasets_pb2,
    dead_letters_pb2,
    event_log_pb2,
    jobs_pb2,
    lineage_pb2,
    runs_pb2,
    schedules_pb2,
)
from sluice_services.web import present
from sluice_services.web.actions import allowed
from sluice_services.web.api import ConsoleApi, Identity

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 500
SCAN_PAGES = 20
"""API pages one filtered console page reads at most before it offers "next" to go on searching."""
SCAN_SECONDS = 0.15
"""Nor does it read another API page once it has spent this long."""


def page_size(query: Mapping[str, str]) -> int:
    try:
        return max(1, min(MAX_PAGE_SIZE, int(query.get("page_size", DEFAULT_PAGE_SIZE))))
    except ValueError:
        return DEFAULT_PAGE_SIZE


def _scan(fetch: Callable[[str, int], tuple[list[Any], str]], query: Mapping[str, str],
          matches: Callable[[Any], bool], clock: Callable[[], float] = time.monotonic) -> tuple[list[Any], str]:
    """Items of the API's pages from `page_token` on that match, up to page_size; the token to go on."""
    size, token, found = page_size(query), query.get("page_token", ""), []
    until = clock() + SCAN_SECONDS
    for _ in range(SCAN_PAGES):
        items, next_token = fetch(token, size)
        found.extend(item for item in items if matches(item))
        token = next_token
        if not token or len(found) >= size or clock() >= until:
            break
    return found, token


def _named(q: str, *names: str) -> bool:
    return not q or any(q.lower() in name.lower() for name in names)


def schedules(api: ConsoleApi, token: str, me: Identity, query: Mapping[str, str]) -> dict[str, Any]:
    q, namespace = query.get("q", "").strip(), query.get("namespace", "").strip()

    def fetch(page_token: str, size: int) -> tuple[list[Any], str]:
        answer = api.call(token, "ScheduleRegistry", "ListSchedules", schedules_pb2.ListSchedulesRequest(
            namespace=namespace, page_size=size, page_token=page_token))
        return list(answer.schedules), answer.next_page_token

    found, next_token = _scan(fetch, query, lambda s: _named(q, s.name, present.program_name(s.program)))
    now = datetime.now(timezone.utc)
    rows = [{"schedule": s, "program": present.program_name(s.program), "trigger": present.trigger_words(s.trigger),
             "next_fire": present.next_fire_text(s, now),
             "may_write": allowed(me, "enable", s.program.namespace),
             "may_run": allowed(me, "run-now", s.program.namespace)} for s in found]
    return {"rows": rows, "next_token": next_token, "q": q, "namespace": namespace}


API_PAGE = 10_000
"""The page size asked for when the console reads every page of a listing (the APIs' most)."""


def _every_page(api: ConsoleApi, token: str, service: str, method: str,
                request: Callable[[str], Any]) -> Iterator[Any]:
    """Each answer of a paged listing, from its first page to its last (`request(page_token)` asks for one)."""
    page_token = ""
    while True:
        answer = api.call(token, service, method, request(page_token))
        yield answer
        if not (page_token := answer.next_page_token):
            return


def last_runs(api: ConsoleApi, token: str, schedule_id: str, count: int = 3) -> dict[str, Any]:
    """The newest runs of a schedule (ListRuns is oldest first: read to its last page)."""
    runs: list[runs_pb2.Run] = []
    for answer in _every_page(api, token, "Runs", "ListRuns", lambda page_token: runs_pb2.ListRunsRequest(
            schedule_id=schedule_id, page_size=API_PAGE, page_token=page_token)):
        runs = (runs + list(answer.runs))[-count:]
    now = datetime.now(timezone.utc)
    return {"runs": [_run_row(run, now) for run in reversed(runs)]}


def _run_row(run: runs_pb2.Run, now: datetime) -> dict[str, Any]:
    return {"run": run, "status": present.status_name(run.status), "program": present.program_name(run.program),
            "started": present.when(run.started_at), "duration": present.run_duration(run, now),
            "rows": present.run_rows(run), "inputs": len(run.inputs)}


def jobs(api: ConsoleApi, token: str, me: Identity, query: Mapping[str, str]) -> dict[str, Any]:
    q, pending = query.get("q", "").strip(), query.get("all", "") != "1"
    schedule_id = query.get("schedule", "").strip()

    def fetch(page_token: str, size: int) -> tuple[list[Any], str]:
        answer = api.call(token, "Jobs", "ListJobs", jobs_pb2.ListJobsRequest(
            schedule_id=schedule_id, pending_only=pending, page_size=size, page_token=page_token))
        return list(answer.jobs), answer.next_page_token

    found, next_token = _scan(fetch, query, lambda j: _named(q, j.context.schedule_name, present.program_name(j.program)))
    rows = [{"job": j, "state": present.job_state(j.state), "program": present.program_name(j.program),
             "waits_on": ", ".join(j.waiting_on) or j.reason or _waiting_words(j),
             "next_check": present.when(j.next_check), "created": present.when(j.created_at)} for j in found]
    return {"rows": rows, "next_token": next_token, "q": q, "pending": pending, "schedule": schedule_id}


def _waiting_words(job: jobs_pb2.Job) -> str:
    if job.state == jobs_pb2.PENDING_TRIGGER:
        so_far = ", ".join(f"{m.partitions} partition{'s' if m.partitions != 1 else ''} of {m.namespace}.{m.dataset}"
                           for m in job.partitions_matched)
        return f"its trigger ({so_far} so far)" if so_far else "its trigger"
    if job.state == jobs_pb2.PENDING_LAUNCH:
        return "the launcher"
    return ""


def runs(api: ConsoleApi, token: str, me: Identity, query: Mapping[str, str]) -> dict[str, Any]:
    q, schedule_id = query.get("q", "").strip(), query.get("schedule", "").strip()

    def fetch(page_token: str, size: int) -> tuple[list[Any], str]:
        answer = api.call(token, "Runs", "ListRuns", runs_pb2.ListRunsRequest(
            schedule_id=schedule_id, page_size=size, page_token=page_token))
        return list(answer.runs), answer.next_page_token

    found, next_token = _scan(fetch, query, lambda r: _named(q, present.program_name(r.program), r.id))
    now = datetime.now(timezone.utc)
    return {"rows": [_run_row(run, now) for run in found], "next_token": next_token, "q": q, "schedule": schedule_id}


def run(api: ConsoleApi, token: str, me: Identity, run_id: str) -> dict[str, Any]:
    found = api.call(token, "Runs", "GetRun", runs_pb2.GetRunRequest(id=run_id))
    row = _run_row(found, datetime.now(timezone.utc))
    row["input_partitions"] = [{"key": present.key_text(p.key), "location": p.location, "records": p.record_count,
                                "bytes": p.size_bytes} for p in found.inputs]
    row["outputs"] = [{"dataset": f"{o.namespace}.{o.dataset}", "key": present.key_text(o.partition.key),
                       "records": o.partition.record_count} for o in found.outputs]
    row["attempts"] = [{"number": a.number, "status": present.status_name(a.status), "started": present.when(a.started_at),
                        "ended": present.when(a.ended_at), "error": a.error,
                        "spark_application_id": a.spark_application_id} for a in found.attempts]
    row["spark_application_id"] = found.spark_application_id
    row["spark_ui"] = present.link_target(found.spark_ui_url)
    row["going"] = not found.ended_at.seconds
    row["may_cancel"] = allowed(me, "cancel", found.program.namespace)
    row["log"] = run_log(api, token, run_id, {}, found)
    return row


LOG_TAIL_BYTES = 64 * 1024
"""The most of a run's log one page (or one poll of it) shows: the end of it."""
LOG_TAIL_LINES = 1_000
"""The lines the first view of a run's log asks for (StreamRunLog's tail_lines), not the whole log."""
MAX_LOG_OFFSET = 2**63 - 1
"""StreamRunLogRequest.from_offset is an int64: a larger `from` in the URL is read as its end."""


def run_log(api: ConsoleApi, token: str, run_id: str, query: Mapping[str, str],
            found: runs_pb2.Run | None = None) -> dict[str, Any]:
    """The current attempt's log to its end as of now (StreamRunLog without follow): from offset `from`,
    or with no `from` (the first view) its last LOG_TAIL_LINES lines; at most its last LOG_TAIL_BYTES
    kept. The offset to go on from, and whether the run is going."""
    first = not query.get("from")
    try:
        start = min(max(0, int(query.get("from") or 0)), MAX_LOG_OFFSET)
    except ValueError:
        start = 0
    if found is None:
        found = api.call(token, "Runs", "GetRun", runs_pb2.GetRunRequest(id=run_id))
    request = runs_pb2.StreamRunLogRequest(id=run_id, tail_lines=LOG_TAIL_LINES) if first else \
        runs_pb2.StreamRunLogRequest(id=run_id, from_offset=start)
    began, text, end, note = None, b"", start, ""
    try:
        for chunk in api.stream(token, "Runs", "StreamRunLog", request):
            began = chunk.offset if began is None else began  # a tail's: where the server found its first line
            text = (text + chunk.data)[-LOG_TAIL_BYTES:]
            end = chunk.offset + len(chunk.data)
    except grpc.RpcError as error:
        if error.code() not in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT,
                                grpc.StatusCode.FAILED_PRECONDITION):
            raise
        note = error.details() or ""
    began = start if began is None else began
    cut = (first and began > 0) or end - began > len(text)
    return {"run_id": run_id, "text": text.decode("utf-8", errors="replace"), "next": end, "cut": cut,
            "going": not found.ended_at.seconds, "note": note, "first": first}


def dead_letters(api: ConsoleApi, token: str, me: Identity, query: Mapping[str, str]) -> dict[str, Any]:
    topic, reason = query.get("topic", "").strip(), query.get("q", "").strip()
    answer = api.call(token, "DeadLetters", "ListDeadLetters", dead_letters_pb2.ListDeadLettersRequest(
        topic=topic, reason=reason, page_size=page_size(query), page_token=query.get("page_token", "")))
    rows = [{"letter": letter, "value": present.bytes_text(letter.value), "key": present.bytes_text(letter.key)}
            for letter in answer.dead_letters]
    return {"rows": rows, "next_token": answer.next_page_token, "q": reason, "topic": topic,
            "may_replay": allowed(me, "replay", ANY_NAMESPACE)}


def streams(api: ConsoleApi, token: str, me: Identity, query: Mapping[str, str]) -> dict[str, Any]:
    prefix = query.get("q", "").strip()
    answer = api.call(token, "EventLog", "ListStreams", event_log_pb2.ListStreamsRequest(
        prefix=prefix, page_size=page_size(query), page_token=query.get("page_token", "")))
    return {"rows": list(answer.streams), "next_token": answer.next_page_token, "q": prefix}


def stream(api: ConsoleApi, token: str, name: str, query: Mapping[str, str]) -> dict[str, Any]:
    try:
        start = min(max(0, int(query.get("from") or 0)), MAX_LOG_OFFSET)
    except ValueError:
        start = 0
    answer = api.call(token, "EventLog", "ReadStream", event_log_pb2.ReadStreamRequest(
        stream=name, from_version=start, page_size=page_size(query)))
    rows = [{"event": e, "recorded": present.when(e.recorded_at), "data": present.bytes_text(e.data),
             "metadata": ", ".join(f"{k}={v}" for k, v in sorted(e.metadata.items()))} for e in answer.events]
    return {"name": name, "rows": rows, "next_version": answer.next_version, "start": start}


def datasets(api: ConsoleApi, token: str, me: Identity, query: Mapping[str, str]) -> dict[str, Any]:
    q, namespace = query.get("q", "").strip(), query.get("namespace", "").strip()
    answer = api.call(token, "Partitions", "ListDatasets", datasets_pb2.ListDatasetsRequest(namespace=namespace))
    matching = [d for d in answer.datasets if _named(q, f"{d.namespace}.{d.name}")]
    size = page_size(query)
    try:
        start = max(0, int(query.get("page_token") or 0))
    except ValueError:
        start = 0
    shown = matching[start:start + size]
    return {"rows": shown, "next_token": str(start + size) if start + size < len(matching) else "", "q": q,
            "namespace": namespace, "quarantines": quarantines(api, token, me)}


def quarantines(api: ConsoleApi, token: str, me: Identity, dataset: str = "") -> dict[str, Any]:
    """Quarantined commit sequences (ListCommitSequences needs commits.read on every namespace)."""
    try:
        answer = api.call(token, "Partitions", "ListCommitSequences",
                          datasets_pb2.ListCommitSequencesRequest(unfinished_only=True))
    except grpc.RpcError as error:
        if error.code() == grpc.StatusCode.PERMISSION_DENIED:
            return {"rows": [], "refused": error.details()}
        raise
    rows = [{"sequence": s, "may_release": all(me.may("commits.release", name.split(".", 1)[0]) for name in s.datasets)}
            for s in answer.sequences if s.status == "QUARANTINED" and (not dataset or dataset in s.datasets)]
    return {"rows": rows, "refused": ""}


def dataset(api: ConsoleApi, token: str, me: Identity, namespace: str, name: str,
            query: Mapping[str, str]) -> dict[str, Any]:
    found = api.call(token, "Partitions", "GetDataset", datasets_pb2.GetDatasetRequest(namespace=namespace, name=name))
    size = page_size(query)
    answer = api.call(token, "Partitions", "ListPartitions", datasets_pb2.ListPartitionsRequest(
        namespace=namespace, dataset=name, after=query.get("page_token", ""), limit=size))
    partitions = [{"id": p.id, "key": present.key_text(p.partition.key), "location": p.partition.location,
                   "records": p.partition.record_count, "bytes": p.partition.size_bytes,
                   "committed": present.when(p.committed_at)} for p in answer.partitions]
    return {"dataset": found, "partitions": partitions, "next_token": answer.next_after,
            "consumers": consumers(api, token, namespace, name),
            "quarantines": quarantines(api, token, me, f"{namespace}.{name}")}


def consumers(api: ConsoleApi, token: str, namespace: str, name: str) -> dict[str, Any]:
    """The jobs whose runs read the dataset, from its lineage (no API lists partition consumers by dataset)."""
    try:
        graph = api.call(token, "Lineage", "GetLineage", lineage_pb2.GetLineageRequest(
            node_id=f"dataset:{namespace}:{name}", depth=1))
    except grpc.RpcError as error:
        if error.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.PERMISSION_DENIED):
            return {"jobs": [], "note": error.details() if error.code() != grpc.StatusCode.NOT_FOUND else ""}
        raise
    me_id = f"dataset:{namespace}:{name}"
    readers = {edge.destination for edge in graph.edges if edge.origin == me_id}
    nodes = {node.id: node for node in graph.nodes}
    return {"jobs": sorted(present.node_label(nodes[r]) for r in readers if r in nodes), "note": ""}


def lineage(api: ConsoleApi, token: str, me: Identity, query: Mapping[str, str]) -> dict[str, Any]:
    q, namespace = query.get("q", "").strip(), query.get("namespace", "").strip()

    def fetch(page_token: str, size: int) -> tuple[list[Any], str]:
        answer = api.call(token, "Lineage", "ListJobs", lineage_pb2.ListLineageJobsRequest(
            namespace=namespace, page_size=size, page_token=page_token))
        return list(answer.jobs), answer.next_page_token

    found, next_token = _scan(fetch, query, lambda j: _named(q, j.name))
    node = query.get("node", "") or (f"job:{found[0].namespace}:{found[0].name}" if found else "")
    graph, note = None, ""
    if node:
        try:
            depth = max(0, min(100, int(query.get("depth", 20))))
        except ValueError:
            depth = 20
        try:
            answer = api.call(token, "Lineage", "GetLineage", lineage_pb2.GetLineageRequest(node_id=node, depth=depth))
            graph = present.layout(answer.nodes, answer.edges, focus=node)
        except grpc.RpcError as error:
            if error.code() != grpc.StatusCode.NOT_FOUND:
                raise
            note = error.details()
    return {"jobs": found, "next_token": next_token, "q": q, "namespace": namespace, "node": node, "graph": graph,
            "note": note, "box": {"w": present.NODE_WIDTH, "h": present.NODE_HEIGHT}}


def sla_misses(api: ConsoleApi, token: str, me: Identity, query: Mapping[str, str]) -> dict[str, Any]:
    schedule_id = query.get("schedule", "").strip()
    answer = api.call(token, "Alerts", "ListSlaMisses", alerts_pb2.ListSlaMissesRequest(
        schedule_id=schedule_id, page_size=page_size(query), page_token=query.get("page_token", "")))
    rows = [{"miss": m, "deadline": present.when(m.deadline), "recorded": present.when(m.recorded_at)}
            for m in answer.misses]
    return {"rows": rows, "next_token": answer.next_page_token, "schedule": schedule_id}


def backfills(api: ConsoleApi, token: str, me: Identity, query: Mapping[str, str]) -> dict[str, Any]:
    """Every backfill (every page of ListBackfills, oldest first: the console pages them, newest first)."""
    schedule_id = query.get("schedule", "").strip()
    found = [backfill for answer in _every_page(api, token, "Jobs", "ListBackfills", lambda page_token:
             jobs_pb2.ListBackfillsRequest(schedule_id=schedule_id, page_size=API_PAGE, page_token=page_token))
             for backfill in answer.backfills]
    newest_first = list(reversed(found))
    size = page_size(query)
    try:
        start = max(0, int(query.get("page_token") or 0))
    except ValueError:
        start = 0
    rows = [{"backfill": b, "range": f"{present.when(b.start) or '…'} to {present.when(b.end) or '…'}",
             "requested": present.when(b.requested_at), "cancelled": present.when(b.cancelled_at)}
            for b in newest_first[start:start + size]]
    return {"rows": rows, "next_token": str(start + size) if start + size < len(newest_first) else "",
            "schedule": schedule_id}
