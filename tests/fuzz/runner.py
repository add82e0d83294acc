"""The fuzz run: warm up a real `sluice standalone`, send hypothesis-drawn inputs to every gRPC method,
HTTP route and bus topic, classify each outcome, then check the server is still whole.

  refused   a gRPC status other than UNKNOWN/INTERNAL, an HTTP 4xx, a bus message dead-lettered as
            malformed/oversized
  accepted  OK, 2xx/3xx, a bus message consumed by every group without a dead letter
  crash     UNKNOWN/INTERNAL, HTTP 5xx, a reset or silent connection, no answer in time, the process
            exiting, a bus message dead-lettered because the handler or parser raised (a traceback in
            the server's log) or left unconsumed, a default client refusing an answer over 4 MiB
  crash_loop  the process died (or stopped answering health checks) during the run
"""
from __future__ import annotations

import asyncio
import json
import re
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.parse
import uuid
import warnings
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import grpc
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from sluice.v1 import jobs_pb2, runs_pb2
from sluice.v1 import notifications_pb2 as npb
from sluice.v1 import schedules_pb2 as spb
from tests.fuzz import inputs as fi
from tests.fuzz.server import CHECK_APP, CHECK_NAMESPACE, CHECK_PROGRAM, FuzzServer
from tests.fuzz.targets import GrpcMethod, HttpRoute, Known, Topic, bus_topics_, grpc_methods, http_routes, templates

CALL_TIMEOUT = 30.0
CONSUME_TIMEOUT = 60.0
BATCH = 8
TRACEBACK_LINE = re.compile(r'File "(/[^"]*/(?:libs|services)/[^"]+)", line (\d+), in (\S+)')


@dataclass
class Crash:
    target: str
    input: str
    detail: str
    where: str = ""


@dataclass
class Tally:
    inputs: int = 0
    counts: Counter = field(default_factory=Counter)
    crashes: list[Crash] = field(default_factory=list)
    crash_loops: list[Crash] = field(default_factory=list)
    per_target: Counter = field(default_factory=Counter)

    def add(self, target: str, kind: str, text: str, detail: str = "", where: str = "") -> None:
        self.inputs += 1
        self.counts[kind] += 1
        self.per_target[target] += 1
        if kind == "crash":
            self.crashes.append(Crash(target, text, detail, where))


def _settings(examples: int):
    return settings(max_examples=examples, deadline=None, database=None, phases=[Phase.generate],
                    suppress_health_check=list(HealthCheck), derandomize=False, print_blob=False)


def draw_all(strategy: st.SearchStrategy, examples: int, seed: int) -> list:
    """`examples` values of the strategy, the same for the same seed."""
    drawn: list = []
    warnings.filterwarnings("ignore", module="hypothesis")

    @hypothesis_seed(seed)
    @_settings(examples)
    @given(strategy)
    def collect(value) -> None:
        drawn.append(value)

    collect()
    return drawn[:examples]


def _where(stderr: str) -> str:
    """The innermost product-code frame of the last traceback in the server's log."""
    frames = TRACEBACK_LINE.findall(stderr)
    if not frames:
        last = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', stderr)
        return f"{last[-1][0]}:{last[-1][1]} in {last[-1][2]} (no product frame)" if last else ""
    path, line, function = frames[-1]
    rel = path.split("/work/main/")[-1] if "/work/main/" in path else path
    return f"{rel}:{line} in {function}"


class Fuzz:
    def __init__(self, root: Path, examples: int, seed: int, log: Callable[[str], None] = print) -> None:
        self.server = FuzzServer(root)
        self.examples, self.seed, self.log = examples, seed, log
        self.tally = Tally()
        self.known = Known()
        self.verdict: list[str] = []

    # -- server life ------------------------------------------------------------------------

    def _stderr_mark(self) -> int:
        path = self.server.stderr_path
        return path.stat().st_size if path.exists() else 0

    def _stderr_from(self, mark: int) -> str:
        return self.server.stderr_path.read_bytes()[mark:].decode(errors="replace")

    def _check_alive(self, target: str, text: str) -> bool:
        """False (and a crash loop recorded, and a fresh server started) if the server died."""
        if self.server.alive() and self.server.healthy():
            return True
        code = self.server.exit_code()
        tail = self.server.stderr_tail(40)
        where = _where(tail)
        last = [line for line in tail.splitlines() if line.strip()][-1:] or ["(no stderr)"]
        detail = f"server {'exited with ' + str(code) if code is not None else 'stopped answering health checks'}: {last[0][:200]}"
        self.server.kill()
        try:  # does it crash-loop on what it stored? a restart on the same data dir
            self.server.start(timeout=60)
            time.sleep(5)
            looped = not (self.server.alive() and self.server.healthy())
        except Exception as error:  # noqa: BLE001
            looped, detail = True, detail + f"; restart failed: {error}"
        detail += "; restarted on the same data: " + ("dies again (crash loop)" if looped else "recovers")
        self.tally.crash_loops.append(Crash(target, text, detail, where))
        self.tally.crashes.append(Crash(target, text, detail, where))
        self.tally.counts["crash"] += 1
        self.server.kill()
        self.server.fresh()
        self.warm_up()
        return False

    # -- warm-up: a normal flow, and the real ids the templates use --------------------------

    def fire_normal(self, label: str, timeout: float = 120.0) -> tuple[bool, str]:
        """A fresh schedule on the stand-in program, one partition notification: a run must follow."""
        with grpc.insecure_channel(self.server.address) as channel:
            registry = spb_stub(channel)
            name = f"check_{label}_{uuid.uuid4().hex[:6]}"
            dataset = f"ds_{uuid.uuid4().hex[:6]}"
            created = registry.CreateSchedule(spb.CreateScheduleRequest(schedule=spb.Schedule(
                name=name, enabled=True,
                program=npb.ProgramRef(namespace=CHECK_NAMESPACE, app=CHECK_APP, program=CHECK_PROGRAM),
                trigger=spb.Trigger(partition=spb.PartitionTrigger(namespace=CHECK_NAMESPACE, dataset=dataset,
                                                                   count=1)))), timeout=CALL_TIMEOUT)
            time.sleep(1.0)  # the matcher learns the schedule from the bus
            notification = npb.Notification(id=f"n-{uuid.uuid4()}", partition_committed=npb.PartitionCommitted(
                namespace=CHECK_NAMESPACE, dataset=dataset, partitions=[npb.PartitionRef(
                    key=[npb.KeyValue(name="hour", value="09")], location="/tmp/fuzzcheck/09", size_bytes=1)]))
            notification.time.seconds = fi.now_seconds()
            from sluice.v1 import notifications_pb2_grpc, runs_pb2_grpc, jobs_pb2_grpc
            notifications_pb2_grpc.NotificationsStub(channel).Publish(
                npb.PublishNotificationRequest(notification=notification), timeout=CALL_TIMEOUT)
            runs, jobs = runs_pb2_grpc.RunsStub(channel), jobs_pb2_grpc.JobsStub(channel)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                found = runs.ListRuns(runs_pb2.ListRunsRequest(schedule_id=created.id), timeout=CALL_TIMEOUT).runs
                done = [r for r in found if npb.RunStatus.Name(r.status) in ("COMPLETED", "FAILED", "KILLED", "LOST")]
                if done:
                    job_list = jobs.ListJobs(jobs_pb2.ListJobsRequest(schedule_id=created.id), timeout=CALL_TIMEOUT).jobs
                    self.known.schedule_id, self.known.run_id = created.id, done[0].id
                    self.known.job_id = job_list[0].id if job_list else ""
                    status = npb.RunStatus.Name(done[0].status)
                    return status == "COMPLETED", f"schedule {created.id}: run {done[0].id} {status}"
                time.sleep(0.5)
            job_list = jobs.ListJobs(jobs_pb2.ListJobsRequest(schedule_id=created.id), timeout=CALL_TIMEOUT).jobs
            return False, (f"schedule {created.id}: no run within {timeout:.0f} s; jobs: "
                           f"{[(j.id, jobs_pb2.JobState.Name(j.state) if hasattr(jobs_pb2, 'JobState') else j.state) for j in job_list]}")

    def warm_up(self) -> None:
        ok, text = self.fire_normal("warmup")
        if not ok:
            raise RuntimeError(f"the normal flow does not work before any fuzzing: {text}")
        fi.POOLS.strings = [self.known.schedule_id, self.known.run_id, self.known.job_id, CHECK_NAMESPACE,
                            CHECK_APP, CHECK_PROGRAM, "fuzz", "app1", "prog", "events"]

    # -- gRPC ------------------------------------------------------------------------------

    def grpc_strategy(self, method: GrpcMethod) -> st.SearchStrategy[tuple[bytes, str]]:
        template = templates(self.known).get(method.path) or method.input._concrete_class()
        valid = fi.messages(method.input)
        options = [
            valid.map(lambda m: (fi.encode(m), "valid-shaped " + fi.describe(m))),
            fi.one_field_changed(template).map(lambda mp: (fi.encode(mp[0]), f"{mp[1]}= in " + fi.describe(mp[0]))),
            st.one_of(valid, st.just(template)).flatmap(
                lambda m: fi.mutated(fi.encode(m)).map(lambda r: (r[0], f"{r[1]} of " + fi.describe(m, 80)))),
            fi.random_bytes().map(lambda b: (b, "random " + fi.describe_bytes(b))),
            st.tuples(st.sampled_from(fi.OVERSIZED), st.sampled_from(_string_paths(template) or [None])).map(
                lambda args: _oversized(template, *args)),
        ]
        trigger_path = _trigger_path(template)
        if trigger_path:
            options.append(st.sampled_from((50, 99, 100, 101, 1000)).map(
                lambda depth: _deep(template, trigger_path, depth)))
        return st.one_of(options)

    def fuzz_grpc(self, method: GrpcMethod, examples: int) -> None:
        drawn = draw_all(self.grpc_strategy(method), examples, self.seed)
        for data, text in drawn:
            self.send_grpc(method, data, text)

    def send_grpc(self, method: GrpcMethod, data: bytes, text: str) -> None:
        mark = self._stderr_mark()
        try:
            with grpc.insecure_channel(self.server.address, options=[("grpc.max_send_message_length", -1)]) as channel:
                channel.unary_unary(method.path)(data, timeout=CALL_TIMEOUT)
            self.tally.add(method.label, "accepted", text)
            return
        except grpc.RpcError as error:
            code, details = error.code(), (error.details() or "")
        status = f"{code.name}: {details[:200]}"
        if code in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL):
            self.tally.add(method.label, "crash", text, status, _where(self._stderr_from(mark)))
        elif code == grpc.StatusCode.DEADLINE_EXCEEDED:
            self.tally.add(method.label, "crash", text, f"no answer within {CALL_TIMEOUT:.0f} s")
        elif code == grpc.StatusCode.UNAVAILABLE and not (self.server.alive() and self.server.healthy()):
            self.tally.add(method.label, "crash", text, status)
        elif (code == grpc.StatusCode.RESOURCE_EXHAUSTED and "larger than max" in details
              and len(data) < 4 * fi.MiB):
            self.tally.add(method.label, "crash", text, f"the answer is too large for a default client: {status}")
        else:
            self.tally.add(method.label, "refused", text, status)
        self._check_alive(method.label, text)

    # -- HTTP ------------------------------------------------------------------------------

    def http_strategy(self, route: HttpRoute) -> st.SearchStrategy[tuple]:
        segment = st.tuples(fi.strings(), st.sampled_from(("quoted", "raw", "double")))
        query = st.dictionaries(st.sampled_from(("nodeId", "depth", "limit", "page_token", "x", "nodeId\x00")),
                                st.one_of(fi.strings(), st.sampled_from(("-1", "0", "20", "21", "99999999999999999999",
                                                                         "1e3", "٣", "0x10", " 5", "job:fuzz:job",
                                                                         f"job:{self.known.namespace}:job"))),
                                max_size=3)
        body = fi.lineage_bodies() if route.method == "POST" else st.one_of(
            st.just(fi.Body(b"", "")), fi.lineage_bodies())
        truncated = st.sampled_from((False, False, False, True))
        extra = st.lists(st.sampled_from((("Content-Type", "application/json"), ("Content-Type", "text/plain"),
                                          ("Authorization", "Bearer \u00e9"), ("Content-Encoding", "br"),
                                          ("Accept", "*/*"), ("Transfer-Encoding", "chunked"))), max_size=2)
        return st.tuples(st.lists(segment, min_size=len(route.variables), max_size=len(route.variables)),
                         query, body, truncated, extra)

    def fuzz_http(self, route: HttpRoute, examples: int) -> None:
        address = self.server.lineage_address if route.app == "lineage" else self.server.metrics_address
        for segments, query, body, truncated, extra in draw_all(self.http_strategy(route), examples, self.seed):
            path = route.path
            for name, (value, how) in zip(route.variables, segments):
                path = re.sub(r"\{" + name + r"[^}]*\}", _path_segment(value, how).replace("\\", "\\\\"), path, count=1)
            target = path + ("?" + "&".join(f"{_q(k)}={_q(v)}" for k, v in query.items()) if query else "")
            text = f"{target[:160]} body={body.label}:{fi.describe_bytes(body.data, 24)}" + (" truncated" if truncated else "")
            if extra:
                text += f" headers={extra}"
            self.send_http(route, address, target, body, truncated, extra, text)

    def send_http(self, route: HttpRoute, address: str, target: str, body: fi.Body, truncated: bool,
                  extra: list, text: str) -> None:
        mark = self._stderr_mark()
        host, port = address.rsplit(":", 1)
        headers = dict(body.headers)
        if route.method == "POST":  # the lineage API takes application/json only; `extra` may name another type
            headers = {"Content-Type": "application/json", **headers}
        for name, value in extra:
            if name != "Transfer-Encoding":
                headers[name] = value
        declared = len(body.data) + (100 if truncated else 0)
        head = f"{route.method} {target} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\nContent-Length: {declared}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        response, error = b"", None
        try:
            with socket.create_connection((host, int(port)), timeout=CALL_TIMEOUT) as sock:
                try:
                    sock.sendall(head.encode("utf-8", "surrogateescape") + body.data)
                    if truncated:
                        sock.shutdown(socket.SHUT_WR)
                except OSError as send_error:  # the server may answer and close before the body is sent
                    error = send_error
                try:
                    while chunk := sock.recv(65536):
                        response += chunk
                except OSError as read_error:
                    error = error or read_error
        except OSError as connect_error:
            error = connect_error
        match = re.match(rb"HTTP/1\.[01] (\d{3})", response)
        if match:
            status = int(match.group(1))
            line = response.split(b"\r\n", 1)[0].decode(errors="replace")
            reason = _json_error(response)
            if status >= 500:
                self.tally.add(route.label, "crash", text, f"{line} {reason}", _where(self._stderr_from(mark)))
            elif status >= 400:
                self.tally.add(route.label, "refused", text, f"{line} {reason}")
            else:
                self.tally.add(route.label, "accepted", text, line)
        elif truncated or len(body.data) > 1024 * 1024:
            # a request the client never finished, or a body over the limit: closing is an answer
            self.tally.add(route.label, "refused", text, f"connection closed without a status ({error!r})")
        else:
            self.tally.add(route.label, "crash", text, f"no HTTP status: {error!r} {response[:80]!r}",
                           _where(self._stderr_from(mark)))
        self._check_alive(route.label, text)

    # -- bus -------------------------------------------------------------------------------

    def bus_strategy(self, topic: Topic) -> st.SearchStrategy[tuple[bytes | None, bytes, str]]:
        key = st.one_of(st.none(), st.sampled_from((b"partition:fuzz.events", b"program:fuzz.app1.prog.COMPLETED",
                                                    self.known.schedule_id.encode(), b"")), st.binary(max_size=16))
        if topic.message is not None:
            template = templates(self.known).get(topic.message.full_name) or topic.message._concrete_class()
            valid = fi.messages(topic.message)
            value = st.one_of(
                valid.map(lambda m: (fi.encode(m), "valid-shaped " + fi.describe(m))),
                fi.one_field_changed(template).map(lambda mp: (fi.encode(mp[0]), f"{mp[1]}= in " + fi.describe(mp[0]))),
                st.one_of(valid, st.just(template)).flatmap(
                    lambda m: fi.mutated(fi.encode(m)).map(lambda r: (r[0], f"{r[1]} of " + fi.describe(m, 80)))),
                fi.random_bytes().map(lambda b: (b, "random " + fi.describe_bytes(b))),
                st.sampled_from(fi.OVERSIZED[:2]).map(lambda n: (fi.encode(template) + b"\x7a" + fi._varint(n) + b"x" * n,
                                                              f"{fi.describe(template, 60)} + unknown field of {n} bytes")),
            )
        else:
            value = st.one_of(fi.lineage_bodies().map(lambda b: (b.data, f"{b.label}:{fi.describe_bytes(b.data, 24)}")),
                              fi.random_bytes().map(lambda b: (b, "random " + fi.describe_bytes(b))))
        return st.tuples(key, value).map(lambda kv: (kv[0], kv[1][0], kv[1][1]))

    def fuzz_bus(self, topic: Topic, examples: int) -> None:
        drawn = draw_all(self.bus_strategy(topic), examples, self.seed)
        for start in range(0, len(drawn), BATCH):
            self.publish_batch(topic, drawn[start:start + BATCH])

    def publish_batch(self, topic: Topic, batch: list) -> None:
        from sluice.bus.inprocess import InProcessBus
        from sluice.bus.port import Message

        mark = self._stderr_mark()
        dead_start = self._dead_letter_end()

        async def send() -> list[tuple[int, int]]:
            bus = InProcessBus(self.server.data_dir / "bus.db")
            try:
                return await bus.producer().send_batch([Message(topic.name, value, key) for key, value, _ in batch])
            finally:
                await bus.close()

        placed = asyncio.run(send())
        groups = self._groups(topic.name)
        ends: dict[int, int] = {}
        for partition, offset in placed:
            ends[partition] = max(ends.get(partition, -1), offset)
        deadline = time.monotonic() + CONSUME_TIMEOUT
        pending = dict.fromkeys(groups)
        while pending and time.monotonic() < deadline and self.server.alive():
            for group in list(pending):
                if all(self._committed(group, topic.name, p) > o for p, o in ends.items()):
                    pending.pop(group)
            time.sleep(0.3)
        texts = [f"key={key!r:.40} {text}" for key, _, text in batch]
        if not self.server.alive():
            for text in texts:
                self.tally.inputs += 1
                self.tally.per_target[topic.label] += 1
            self._check_alive(topic.label, " | ".join(texts)[:600])
            return
        time.sleep(0.5)
        letters = self._dead_letters(dead_start, topic.name)
        stderr = self._stderr_from(mark)
        for (partition, offset), text in zip(placed, texts):
            reasons = letters.get((partition, offset), [])
            bad = [r for r in reasons if r.startswith("handler failed") or r.startswith("malformed: unparsable")]
            if bad:
                self.tally.add(topic.label, "crash", text, f"dead-lettered after an exception: {bad[0][:200]}",
                               _where(stderr))
            elif reasons:
                self.tally.add(topic.label, "refused", text, reasons[0][:200])
            elif pending:
                self.tally.add(topic.label, "crash", text,
                               f"not consumed within {CONSUME_TIMEOUT:.0f} s by {sorted(pending)}", _where(stderr))
            else:
                self.tally.add(topic.label, "accepted", text, "consumed" if groups else "no consumer group")
        self._check_alive(topic.label, " | ".join(texts)[:600])
        if topic.name == "sluice.dead-letter":
            listed = self.dlq_list()
            if listed.returncode != 0:
                self.tally.add(topic.label, "crash", "after: " + " | ".join(texts)[:300],
                               f"`sluice dlq list` failed: {listed.stderr.strip()[-300:]}")

    def _bus_db(self) -> sqlite3.Connection:
        return sqlite3.connect(f"file:{self.server.data_dir / 'bus.db'}?mode=ro", uri=True, timeout=30)

    def _groups(self, topic: str) -> list[str]:
        with self._bus_db() as db:
            return sorted(g for (g,) in db.execute("SELECT DISTINCT group_id FROM offsets WHERE topic = ?", (topic,))
                          if not g.startswith("sluice-dlq-"))

    def _committed(self, group: str, topic: str, partition: int) -> int:
        with self._bus_db() as db:
            row = db.execute('SELECT next_offset FROM offsets WHERE group_id = ? AND topic = ? AND "partition" = ?',
                             (group, topic, partition)).fetchone()
        return row[0] if row else 0

    def _dead_letter_end(self) -> int:
        with self._bus_db() as db:
            return db.execute("SELECT COALESCE(MAX(\"offset\") + 1, 0) FROM records WHERE topic = 'sluice.dead-letter'"
                              ).fetchone()[0]

    def _dead_letters(self, start: int, topic: str) -> dict[tuple[int, int], list[str]]:
        found: dict[tuple[int, int], list[str]] = defaultdict(list)
        with self._bus_db() as db:
            rows = db.execute("SELECT headers FROM records WHERE topic = 'sluice.dead-letter' AND \"offset\" >= ?",
                              (start,)).fetchall()
        for (text,) in rows:
            headers = {name: bytes.fromhex(value).decode(errors="replace") for name, value in json.loads(text)}
            if headers.get("source-topic") == topic:
                found[(int(headers.get("source-partition", -1)), int(headers.get("source-offset", -1)))].append(
                    headers.get("reason", ""))
        return found

    def dlq_list(self) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "sluice_services.cli", "--json", "dlq", "list", "--data-dir",
                               str(self.server.data_dir)], capture_output=True, text=True, timeout=120)

    # -- the whole run ----------------------------------------------------------------------

    def run(self, only: str = "") -> int:
        started = time.monotonic()
        self.server.start()
        try:
            self.warm_up()
            targets: list[tuple[str, Callable[[], None]]] = []
            for method in grpc_methods():
                targets.append((method.label, lambda m=method: self.fuzz_grpc(m, self.examples)))
            for route in http_routes():
                targets.append((route.label, lambda r=route: self.fuzz_http(r, self.examples)))
            for topic in bus_topics_():
                targets.append((topic.label, lambda t=topic: self.fuzz_bus(t, self.examples)))
            for label, fuzz in targets:
                if only and not re.search(only, label):
                    continue
                before = len(self.tally.crashes)
                t0 = time.monotonic()
                fuzz()
                self.log(f"  {label}: {self.tally.per_target[label]} inputs, "
                         f"{len(self.tally.crashes) - before} crashes ({time.monotonic() - t0:.1f} s)")
            self.final_checks()
        finally:
            self.server.stop()
        self.report(time.monotonic() - started)
        crashes, loops = len(self.tally.crashes), len(self.tally.crash_loops)
        return 1 if crashes or loops or any(v.startswith("FAIL") for v in self.verdict) else 0

    def final_checks(self) -> None:
        alive = self.server.alive()
        health = self.server.grpc_health() if alive else {}
        healthz = self.server.healthz() if alive else "server not running"
        not_serving = {k: v for k, v in health.items() if v != "SERVING"}
        self.verdict.append(("ok" if alive and not not_serving and health else "FAIL")
                            + f": gRPC health of every service after the run: {not_serving or 'all SERVING'}")
        self.verdict.append(("ok" if healthz.startswith("200") else "FAIL") + f": /healthz after the run: {healthz}")
        if not alive:
            self.tally.crash_loops.append(Crash("(final)", "-", "server not running at the end"))
            return
        try:
            fired, text = self.fire_normal("after")
        except grpc.RpcError as error:
            fired, text = False, f"{error.code().name}: {error.details()}"
        self.verdict.append(("ok" if fired else "FAIL") + f": a normal partition notification still fires: {text}")
        try:
            with grpc.insecure_channel(self.server.address) as channel:
                listed = spb_stub(channel).ListSchedules(spb.ListSchedulesRequest(), timeout=CALL_TIMEOUT)
            self.verdict.append(f"ok: ListSchedules answers a default client ({len(listed.schedules)} schedules)")
        except grpc.RpcError as error:
            self.verdict.append(f"FAIL: ListSchedules after the run: {error.code().name}: {error.details()[:200]}")
        listed = self.dlq_list()
        count = len(json.loads(listed.stdout)) if listed.returncode == 0 else -1
        self.verdict.append(("ok" if listed.returncode == 0 else "FAIL")
                            + f": `sluice dlq list` reads the dead letters ({count} of them)"
                            + ("" if listed.returncode == 0 else f": {listed.stderr.strip()[-200:]}"))
        if not self.server.healthy():
            self.tally.crash_loops.append(Crash("(final)", "-", "server unhealthy at the end"))

    def report(self, seconds: float) -> None:
        by_signature: dict[tuple[str, str, str], list[Crash]] = defaultdict(list)
        for crash in self.tally.crashes:
            signature = re.sub(r"'sluice\.v1\.\w+'", "'<type>'", crash.detail)
            signature = re.sub(r"\d+", "N", signature)[:120]
            by_signature[(crash.target, signature, crash.where)].append(crash)
        for (target, _, where), crashes in sorted(by_signature.items()):
            for crash in crashes[:3]:
                self.log(f"CRASH {target}: {fi._short(crash.input, 300)}\n      -> {crash.detail}"
                         + (f"\n      at {where}" if where else ""))
            if len(crashes) > 3:
                self.log(f"      ... and {len(crashes) - 3} more inputs of {target} with this outcome")
        for loop in self.tally.crash_loops:
            self.log(f"CRASH_LOOP {loop.target}: {fi._short(loop.input, 300)}\n      -> {loop.detail}"
                     + (f"\n      at {loop.where}" if loop.where else ""))
        for line in self.verdict:
            self.log(f"verdict {line}")
        failed_verdicts = sum(1 for v in self.verdict if v.startswith("FAIL"))
        self.log(f"fuzz: seed={self.seed} examples/target={self.examples} {seconds:.0f} s,"
                 f" {len(self.tally.per_target)} targets, {failed_verdicts} failed after-run checks,"
                 f" server stderr: {self.server.root}")
        c = self.tally.counts
        self.log(f"fuzz: inputs={self.tally.inputs} refused={c['refused']} accepted={c['accepted']} "
                 f"crashes={len(self.tally.crashes)} crash_loops={len(self.tally.crash_loops)}")


def spb_stub(channel):
    from sluice.v1 import schedules_pb2_grpc
    return schedules_pb2_grpc.ScheduleRegistryStub(channel)


def _q(text: str) -> str:
    return urllib.parse.quote(text.replace(fi.SURROGATE_MARK, "\udcff"), safe="", errors="surrogateescape") \
        .replace("%ED%A0%80", "%ED%A0%80")


def _path_segment(value: str, how: str) -> str:
    marked = value.replace(fi.SURROGATE_MARK, "%ED%A0%80").replace(fi.BAD_UTF8_MARK, "%FF")
    if how == "raw" and all(33 <= ord(c) < 127 and c not in "?# " for c in marked):
        return marked
    quoted = urllib.parse.quote(value, safe="").replace("%EE%80%80", "%ED%A0%80").replace("%EE%80%81", "%FF")
    return quoted.replace("%", "%25") if how == "double" else quoted


def _json_error(response: bytes) -> str:
    body = response.split(b"\r\n\r\n", 1)[-1]
    try:
        return str(json.loads(body).get("error", ""))[:160]
    except (ValueError, AttributeError):
        return body[:80].decode(errors="replace")


def _string_paths(template) -> list[tuple[str, ...]]:
    from google.protobuf import descriptor as _d
    paths = []

    def walk(message, prefix):
        for fd in message.DESCRIPTOR.fields:
            if fd.is_repeated:
                continue
            if fd.type == _d.FieldDescriptor.TYPE_STRING:
                paths.append(prefix + (fd.name,))
            elif fd.message_type is not None and message.HasField(fd.name):
                walk(getattr(message, fd.name), prefix + (fd.name,))
    walk(template, ())
    map_fields = [fd.name for fd in template.DESCRIPTOR.fields if fd.message_type is not None
                  and fd.message_type.GetOptions().map_entry]
    return paths + [("map:" + name,) for name in map_fields]


def _oversized(template, size: int, path) -> tuple[bytes, str]:
    message = type(template)()
    message.CopyFrom(template)
    if path is None:
        return fi.encode(message) + b"\xfa\x3e" + fi._varint(size) + b"x" * size, \
            f"{fi.describe(template, 60)} + unknown field of {size} bytes"
    target = message
    for name in path[:-1]:
        target = getattr(target, name)
    last = path[-1]
    if last.startswith("map:"):
        getattr(target, last[4:])["big"] = "x" * size
    else:
        setattr(target, last, "x" * size)
    return fi.encode(message), f"{'.'.join(path)}={size} bytes in {fi.describe(template, 60)}"


def _trigger_path(template) -> tuple | None:
    """The path to the first Trigger in the template: names, and (name, 0) for repeated fields."""
    def walk(message, prefix):
        if message.DESCRIPTOR.full_name == "sluice.v1.Trigger":
            return prefix
        for fd, value in message.ListFields():
            if fd.message_type is None or fd.message_type.GetOptions().map_entry:
                continue
            if fd.is_repeated:
                if len(value):
                    found = walk(value[0], prefix + ((fd.name, 0),))
                    if found is not None:
                        return found
            else:
                found = walk(value, prefix + (fd.name,))
                if found is not None:
                    return found
        return None
    return walk(template, ())


def _deep(template, path: tuple, depth: int) -> tuple[bytes, str]:
    message = type(template)()
    message.CopyFrom(template)
    target = message
    for step in path:
        target = getattr(target, step[0])[step[1]] if isinstance(step, tuple) else getattr(target, step)
    leaf = spb.Trigger()
    leaf.CopyFrom(target)
    target.Clear()
    current = target
    for i in range(depth):
        current = getattr(current, "and" if i % 2 == 0 else "or")
        current = (current.all_of if i % 2 == 0 else current.any_of).add()
    current.CopyFrom(leaf)
    return fi.encode(message), f"trigger nested {depth} deep in {fi.describe(template, 60)}"
