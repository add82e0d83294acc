"""deploy/prometheus's alert rules and deploy/grafana's dashboard hold together with what Sluice
exports: both parse (YAML, JSON), every rule alerts with a severity and a summary, and every metric
selector in their expressions names a series a real standalone's /metrics serves, its label matchers
labels that series has (and, for `=`, a value it takes). promtool (Debian's prometheus package,
`make promtool`) accepts the rules and, as recording rules, every dashboard query."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from sluice.client import SluiceClient
from sluice_services.localserver import LocalServer
from tests.integration.test_metrics_endpoint import get

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "deploy" / "prometheus" / "sluice-alerts.yml"
DASHBOARD = REPO / "deploy" / "grafana" / "sluice-dashboard.json"
PROMETHEUS_OWN = {"up": {"job", "instance"}}
"""Series Prometheus makes itself, and the labels it adds to every scraped one."""
SCRAPE_LABELS = {"job", "instance"}
KEYWORDS = {"and", "or", "unless", "bool", "on", "ignoring", "group_left", "group_right", "offset", "by", "without"}
_SELECTOR = re.compile(r'([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\{[^}]*\})?')
_MATCHER = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')


def selectors(expr: str) -> list[tuple[str, list[tuple[str, str, str]]]]:
    """(metric name, [(label, operator, value)]) of every vector selector in a PromQL expression."""
    assert expr.count("(") == expr.count(")"), f"unbalanced parentheses: {expr}"
    bare = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", " ", expr)   # grouping labels are not metrics
    bare = re.sub(r"\[[^\]]*\]", " ", bare)                                 # range durations
    found = []
    for match in _SELECTOR.finditer(bare):
        name, matchers = match[1], match[2] or ""
        following = bare[match.end():].lstrip()
        if name in KEYWORDS or following.startswith("(") or bare[match.start() - 1:match.start()].isdigit():
            continue
        found.append((name, _MATCHER.findall(matchers)))
    return found


def exported(data_dir: Path) -> dict[str, dict[str, set[str]]]:
    """Sample name -> {label: values seen}, from a real standalone's /metrics after one gRPC call."""
    with LocalServer(data_dir, args=["--metrics-port", "0"]) as server, \
            SluiceClient(server.address) as client:
        client.list_schedules()
        deadline = time.monotonic() + 30
        while True:
            text = get(server.metrics_address, "/metrics")[2]
            if "sluice_consumer_lag_records{" in text or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    series: dict[str, dict[str, set[str]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = series.setdefault(sample.name, {})
            for label, value in sample.labels.items():
                labels.setdefault(label, set()).add(value)
    return series


@pytest.fixture(scope="module")
def series(tmp_path_factory) -> dict[str, dict[str, set[str]]]:
    return exported(tmp_path_factory.mktemp("monitoring") / "sluice")


def rule_expressions() -> list[tuple[str, str]]:
    rules = yaml.safe_load(RULES.read_text())
    found = []
    for group in rules["groups"]:
        assert group["name"] and group["rules"]
        for rule in group["rules"]:
            assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule
            assert rule["alert"].startswith("Sluice") and rule["labels"]["severity"] in ("warning", "critical")
            assert rule["annotations"]["summary"]
            assert re.fullmatch(r"\d+[smh]", rule.get("for", "0m")), rule
            found.append((rule["alert"], rule["expr"]))
    return found


def dashboard_expressions() -> list[tuple[str, str]]:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "sluice-scheduler" and dashboard["panels"]
    assert len({panel["id"] for panel in dashboard["panels"]}) == len(dashboard["panels"])
    found = []
    for panel in dashboard["panels"]:
        assert panel["title"] and panel["targets"] and {"h", "w", "x", "y"} <= set(panel["gridPos"])
        found += [(panel["title"], target["expr"]) for target in panel["targets"]]
    return found


def unknown_names(expressions: list[tuple[str, str]], series: dict[str, dict[str, set[str]]]) -> list[str]:
    problems = []
    for where, expr in expressions:
        for name, matchers in selectors(expr):
            labels = series.get(name) if name not in PROMETHEUS_OWN else {k: set() for k in PROMETHEUS_OWN[name]}
            if labels is None:
                problems.append(f"{where}: {name} is not a series Sluice exports")
                continue
            for label, operator, value in matchers:
                if label not in labels and label not in SCRAPE_LABELS:
                    problems.append(f"{where}: {name} has no label {label!r} (it has {sorted(labels)})")
                elif operator == "=" and label in labels and labels[label] and value not in labels[label]:
                    problems.append(f"{where}: {name}'s {label} is never {value!r} ({sorted(labels[label])})")
    return problems


def test_the_selector_reader_finds_metrics_not_functions_groupings_or_ranges():
    expr = ('histogram_quantile(0.95, sum by (le, service) (rate(sluice_timer_lag_seconds_bucket{service="checker"}'
            '[5m]))) > 30 and on (service) up == 0')
    assert selectors(expr) == [("sluice_timer_lag_seconds_bucket", [("service", "=", "checker")]), ("up", [])]


def test_every_alert_rule_names_only_what_sluice_exports(series):
    expressions = rule_expressions()
    assert {"SluiceRunsFailing", "SluiceDeadLetters", "SluiceConsumerLagging", "SluiceOutboxBehind",
            "SluiceTimersLate"} <= {alert for alert, _ in expressions}
    assert unknown_names(expressions, series) == []


def test_every_dashboard_panel_names_only_what_sluice_exports(series):
    expressions = dashboard_expressions()
    named = {name for _, expr in expressions for name, _ in selectors(expr)}
    for family in ("sluice_jobs", "sluice_checker_queue_depth", "sluice_timer_lag_seconds_bucket",
                   "sluice_notification_to_launch_seconds_bucket", "sluice_launches_total", "sluice_runs",
                   "sluice_run_duration_seconds_bucket", "sluice_consumer_lag_records", "sluice_outbox_lag_seconds",
                   "sluice_consumer_dead_lettered_total", "sluice_eventlog_append_seconds_bucket"):
        assert family in named, f"no panel shows {family}"
    assert unknown_names(expressions, series) == []


def test_a_misnamed_metric_or_label_is_caught(series):
    assert unknown_names([("x", "rate(sluice_no_such_total[5m])")], series) == \
        ["x: sluice_no_such_total is not a series Sluice exports"]
    assert unknown_names([("y", 'sluice_jobs{phase="LAUNCHED"}')], series)[0].startswith("y: sluice_jobs has no label 'phase'")
    assert unknown_names([("z", 'sluice_jobs{state="RUNNING"}')], series)[0].startswith("z: sluice_jobs's state is never")


def promtool() -> str:
    """promtool's path (`make promtool` installs it, `make test` too); outside CI a run without it skips."""
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("promtool is missing: `make promtool` (Debian's prometheus package) installs it")
        pytest.skip("promtool (Debian's prometheus package) not installed: `make promtool`")
    return found


def test_promtool_accepts_the_rules_and_every_dashboard_query(tmp_path):
    checked = subprocess.run([promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    recorded = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"sluice_dashboard:query_{i}", "expr": expr} for i, (_, expr) in enumerate(dashboard_expressions())]}]}
    (tmp_path / "dashboard.yml").write_text(yaml.safe_dump(recorded))
    checked = subprocess.run([promtool(), "check", "rules", str(tmp_path / "dashboard.yml")],
                             capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
