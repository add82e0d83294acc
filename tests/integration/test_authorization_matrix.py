"""The authorization matrix: README.md's roles x permissions table, checked against a real
`sluice standalone` (real gRPC on loopback, real HTTP). Every role calls every RPC and route, once
with its grant on the request's namespace and once with it on "*": allowed (any answer but
PERMISSION_DENIED / 403) or refused as the table says. The table must cover every RPC of every
service in protos/ and every HTTP route, so a new method without a row fails here."""
from __future__ import annotations

import base64
import json
import re
import socket
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import grpc
import pytest
from google.protobuf import json_format, message_factory

from sluice_services.localserver import LocalServer
from sluice.runtime.access import Role
from sluice.runtime.auth_policy import hash_token
from sluice.runtime.metrics import Registry
from sluice.runtime.metrics_http import metrics_app
from sluice.runtime.permissions import OPEN_ROUTES
from sluice.v1 import access_pb2, datasets_pb2, jobs_pb2, lineage_pb2, notifications_pb2, runs_pb2, schedules_pb2
from sluice.v1 import alerts_pb2, dead_letters_pb2, event_log_pb2
from sluice_services.lineage import http_api

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
ROLES = [role.value for role in Role]
PROTOS = (schedules_pb2, notifications_pb2, jobs_pb2, runs_pb2, datasets_pb2, lineage_pb2, access_pb2,
          dead_letters_pb2, event_log_pb2, alerts_pb2)
NS, DATASET = "ns", "d"
SCHEDULE = {"name": "s", "program": {"namespace": NS, "app": "a", "program": "p"},
            "trigger": {"time": {"cron": "0 * * * *", "zone": "UTC"}}}
PARTITIONS = [{"key": [{"name": "k", "value": "v"}], "location": "/nowhere/k=v", "sizeBytes": "1"}]


def readme_table() -> dict[str, dict[str, str]]:
    """{"Service.Method" or "VERB /path": {role: "yes" | "no" | "*"}} from README's Authorization table."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("### Authorization"):]
    rows = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 2 + len(ROLES) and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = {role: cell.strip("`") for role, cell in zip(ROLES, cells[2:])}
    return rows


def proto_methods() -> set[str]:
    found = set()
    for proto in (ROOT / "protos/sluice/v1").glob("*.proto"):
        for service, body in re.findall(r"service (\w+) \{(.*?)\}", proto.read_text(), re.S):
            found |= {f"{service}.{method}" for method in re.findall(r"rpc (\w+)\s*\(", body)}
    return found


def http_routes() -> set[str]:
    apps = [http_api.application(None), metrics_app(Registry())]  # type: ignore[arg-type]
    return {f"{route.method} {route.resource.canonical}" for app in apps for route in app.router.routes()
            if route.method != "HEAD" and (route.method, route.resource.canonical) not in OPEN_ROUTES}


def test_the_table_covers_every_rpc_and_route_with_a_cell_per_role():
    table = readme_table()
    assert proto_methods() <= set(table), f"RPCs without a row: {sorted(proto_methods() - set(table))}"
    assert http_routes() <= set(table), f"routes without a row: {sorted(http_routes() - set(table))}"
    assert set(table) <= proto_methods() | http_routes(), "rows naming no RPC or route"
    assert all(cell in ("yes", "no", "*") for row in table.values() for cell in row.values())


def principals() -> list[tuple[str, str, str]]:
    """(role, "ns" or "*", token): each role granted on the requests' namespace, and on every one."""
    return [(role, scope, f"token-{role}-{'star' if scope == '*' else scope}") for role in ROLES for scope in (NS, "*")]


def policy_text() -> str:
    entries = []
    for role, scope, token in principals():
        datasets = f', datasets = ["{DATASET}"]' if role in ("producer", "program") else ""
        entries.append(f'[[principal]]\nname = "{token}"\ntoken_sha256 = "{hash_token(token)}"\n'
                       f'grants = [{{ role = "{role}", namespace = "{scope}"{datasets} }}]\n')
    return "\n".join(entries)


def lineage_event() -> dict:
    return {"eventType": "START", "eventTime": "2026-11-22T09:00:00+00:00", "producer": "https://example.com/t",
            "run": {"runId": str(uuid.uuid4())}, "job": {"namespace": NS, "name": "x"},
            "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent"}


def grpc_requests(schedule_id: str) -> dict[str, dict]:
    """One request per RPC, aimed at namespace `ns` (dataset `d`) where it names one."""
    on_dataset = {"namespace": NS, "dataset": DATASET}
    return {
        "ScheduleRegistry.DeployApp": {"namespace": NS, "app": "other"},
        "ScheduleRegistry.CreateSchedule": {"schedule": {**SCHEDULE, "name": "s2"}},
        "ScheduleRegistry.UpdateSchedule": {"schedule": SCHEDULE},
        "ScheduleRegistry.GetSchedule": {"id": schedule_id},
        "ScheduleRegistry.ListSchedules": {"namespace": NS},
        "ScheduleRegistry.DeleteSchedule": {"id": "no-such-schedule"},
        "ScheduleRegistry.EnableSchedule": {"id": schedule_id},
        "ScheduleRegistry.DisableSchedule": {"id": schedule_id},
        "ScheduleRegistry.GetApp": {"namespace": NS, "app": "no-such-app"},
        "ScheduleRegistry.ListApps": {"namespace": NS},
        "ScheduleRegistry.DeleteApp": {"namespace": NS, "app": "no-such-app"},
        "ScheduleRegistry.PauseApp": {"namespace": NS, "app": "paused-app"},
        "ScheduleRegistry.ResumeApp": {"namespace": NS, "app": "paused-app"},
        "Notifications.Publish": {"notification": {"id": str(uuid.uuid4()), "time": "2026-11-22T09:00:00Z",
                                                   "partitionCommitted": {**on_dataset, "partitions": PARTITIONS}}},
        "Jobs.ListJobs": {"scheduleId": schedule_id},
        "Jobs.RunSchedule": {"scheduleId": schedule_id, "requestId": "matrix"},
        "Jobs.StartBackfill": {"scheduleId": schedule_id, "start": "2026-11-01T00:00:00Z",
                               "end": "2026-11-01T01:00:00Z", "requestId": "matrix"},
        "Jobs.GetBackfill": {"id": "no-such-backfill"},
        "Jobs.ListBackfills": {"scheduleId": schedule_id},
        "Jobs.CancelBackfill": {"id": "no-such-backfill"},
        "Runs.ListRuns": {"scheduleId": schedule_id},
        "Runs.GetRun": {"id": "no-such-run"},
        "Runs.CancelRun": {"id": "no-such-run", "reason": "matrix"},
        "Runs.StreamRunLog": {"id": "no-such-run"},
        "Partitions.CreateDataset": {"dataset": {"namespace": NS, "name": DATASET, "baseLocation": "/nowhere",
                                                 "partitionKeys": [{"name": "k", "type": "KEY_TYPE_STRING"}]}},
        "Partitions.GetDataset": {"namespace": NS, "name": DATASET},
        "Partitions.ListDatasets": {"namespace": NS},
        "Partitions.AddPartitions": {**on_dataset, "partitions": PARTITIONS},
        "Partitions.BeginTransaction": {**on_dataset, "owner": "t"},
        "Partitions.CommitTransaction": {**on_dataset, "position": "999"},
        "Partitions.AbortTransaction": {**on_dataset, "position": "999", "reason": "t"},
        "Partitions.ListPartitions": on_dataset,
        "Partitions.Consume": {**on_dataset, "consumer": "c", "taker": "t", "limit": 1},
        "Partitions.FinishPartitions": {**on_dataset, "consumer": "c", "taker": "t", "ids": ["x"]},
        "Partitions.GetConsumer": {**on_dataset, "consumer": "c"},
        "Partitions.ConsumeWithState": {"consumerState": base64.b64encode(b"not a state").decode(), "taker": "t"},
        "Partitions.ListCommitSequences": {},
        "Partitions.ReleaseCommitSequence": {"id": "no-such-sequence"},
        "RunData.OpenRun": {"runId": "run-matrix", "grants": [{"namespace": NS, "datasets": ["*"]}]},
        "RunData.PublishRun": {"runId": "no-such-run", "resultJson": "{}"},
        "RunData.ReleaseRun": {"runId": "no-such-run", "reason": "matrix"},
        "Lineage.ListJobs": {"namespace": NS},
        "Lineage.ListRuns": {"jobNamespace": NS},
        "Lineage.RecordEvent": {"event": base64.b64encode(json.dumps(lineage_event()).encode()).decode()},
        "Lineage.GetJob": {"namespace": NS, "name": "x"},
        "Lineage.GetLineage": {"nodeId": f"job:{NS}:x"},
        "DeadLetters.ListDeadLetters": {},
        "DeadLetters.ReplayDeadLetter": {"id": "0/999999"},
        "EventLog.ListStreams": {"prefix": "schedule-"},
        "EventLog.ReadStream": {"stream": "no-such-stream"},
        "Alerts.SetAlertPolicy": {"policy": {"scheduleId": schedule_id, "webhooks": ["https://example.com/hook"]}},
        "Alerts.GetAlertPolicy": {"scheduleId": schedule_id},
        "Alerts.ListAlertPolicies": {},
        "Alerts.DeleteAlertPolicy": {"scheduleId": schedule_id},
        "Alerts.ListSlaMisses": {"scheduleId": schedule_id},
        "Access.WhoAmI": {},
    }


def http_requests() -> dict[str, tuple[str, bytes | None]]:
    return {
        "POST /api/v1/lineage": ("/api/v1/lineage", json.dumps(lineage_event()).encode()),
        "GET /api/v1/namespaces/{namespace}/jobs": (f"/api/v1/namespaces/{NS}/jobs", None),
        "GET /api/v1/namespaces/{namespace}/jobs/{job}": (f"/api/v1/namespaces/{NS}/jobs/x", None),
        "GET /api/v1/namespaces/{namespace}/jobs/{job}/runs": (f"/api/v1/namespaces/{NS}/jobs/x/runs", None),
        "GET /api/v1/lineage": (f"/api/v1/lineage?nodeId=job:{NS}:x", None),
        "GET /metrics": ("/metrics", None),
    }


def call(channel: grpc.Channel, name: str, fields: dict, token: str) -> grpc.StatusCode:
    service, method = name.split(".")
    proto = next(p for p in PROTOS if service in p.DESCRIPTOR.services_by_name)
    descriptor = proto.DESCRIPTOR.services_by_name[service].methods_by_name[method]
    request = json_format.ParseDict(fields, message_factory.GetMessageClass(descriptor.input_type)())
    rpc = channel.unary_unary(f"/sluice.v1.{service}/{method}", request_serializer=lambda m: m.SerializeToString(),
                              response_deserializer=lambda raw: raw)
    try:
        rpc(request, metadata=(("authorization", f"Bearer {token}"),), timeout=20)
    except grpc.RpcError as error:
        return error.code()
    return grpc.StatusCode.OK


def fetch(base: str, path: str, body: bytes | None, token: str) -> int:
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    request = urllib.request.Request(base + path, data=body, method="POST" if body else "GET", headers=headers)

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None
    try:
        with urllib.request.build_opener(NoRedirect).open(request, timeout=20) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def expected(cell: str, scope: str) -> bool:
    return cell == "yes" or (cell == "*" and scope == "*")


def test_every_role_against_every_rpc_and_route_as_the_readme_says(tmp_path):
    table = readme_table()
    policy = tmp_path / "policy.toml"
    policy.write_text(policy_text())
    lineage_port = free_port()
    env = {"SLUICE_AUTH_POLICY": str(policy), "SLUICE_LINEAGE_PORT": str(lineage_port)}
    with LocalServer(tmp_path / "data", args=("--metrics-port", "0"), env=env) as server, \
            grpc.insecure_channel(server.address) as channel:
        admin = "token-admin-star"
        assert call(channel, "Partitions.CreateDataset", grpc_requests("")["Partitions.CreateDataset"],
                    admin) == grpc.StatusCode.OK
        created = schedules_pb2_grpc_stub(channel).CreateSchedule(
            json_format.ParseDict({"schedule": SCHEDULE}, schedules_pb2.CreateScheduleRequest()),
            metadata=(("authorization", f"Bearer {admin}"),), timeout=20)
        requests = grpc_requests(created.id)
        assert set(requests) == proto_methods()
        wrong = []
        for role, scope, token in principals():
            for name, fields in requests.items():
                code = call(channel, name, fields, token)
                assert code != grpc.StatusCode.UNAUTHENTICATED, (name, token)
                if (code != grpc.StatusCode.PERMISSION_DENIED) != expected(table[name][role], scope):
                    wrong.append(f"{name} as {role} on {scope}: {code.name}, README says {table[name][role]}")
            for name, (path, body) in http_requests().items():
                base = f"http://{server.metrics_address}" if path == "/metrics" else f"http://127.0.0.1:{lineage_port}"
                status = fetch(base, path, body, token)
                assert status != 401, (name, token)
                if (status != 403) != expected(table[name][role], scope):
                    wrong.append(f"{name} as {role} on {scope}: {status}, README says {table[name][role]}")
        assert not wrong, "\n".join(wrong)


def schedules_pb2_grpc_stub(channel: grpc.Channel):
    from sluice.v1 import schedules_pb2_grpc
    return schedules_pb2_grpc.ScheduleRegistryStub(channel)
