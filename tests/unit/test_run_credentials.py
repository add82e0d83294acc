"""Per-run program credentials (issue 23, least privilege): a token per run, issued and verified by
the datasets service with its own secret, valid for the datasets the launcher opened the run's access
with until the run ends (published or released); the run's environment is an allowlist; URLs are
printed with their password masked."""
from __future__ import annotations

import asyncio
import hashlib
import hmac
import os
import stat
from datetime import datetime, timezone
from pathlib import Path

import pytest

from sluice.domain.common import Notification, PartitionCommitted, PartitionRef, ProgramRef, RunStatus
from sluice.domain.datasets import run_access
from sluice.domain.datasets.run_access import AccessGrant, RunAccess
from sluice.domain.errors import InvalidArgument
from sluice.domain.jobs import Job, TriggerContext
from sluice.domain.runs import Run
from sluice.runtime.access import Grant, Principal, Role
from sluice.runtime.secrets import mask_text, mask_url
from sluice_services.datasets.run_credentials import SECRET_FILE, RunCredentials, load_secret
from sluice_services.launcher.program_api import ProgramApi, program_host
from sluice_services.launcher.program_env import program_environment
from sluice_services.launcher.run_data import run_grants

T0 = datetime(2026, 11, 22, 10, tzinfo=timezone.utc)
SECRET = b"k" * 32
GRANTS = (AccessGrant("experiments", ("*",)), AccessGrant("shop", ("orders",)))


def a_run(run_id: str = "run-1", status: RunStatus = RunStatus.RUNNING, namespace: str = "experiments") -> Run:
    arrivals = (
        Notification("n-1", T0, PartitionCommitted("experiments", "clickstream", (PartitionRef({"h": "1"}, "/x"),))),
        Notification("n-2", T0, PartitionCommitted("shop", "orders", (PartitionRef({"h": "1"}, "/y"),))),
    )
    job = Job("job-1", "schedule-1", 1, ProgramRef(namespace, "clickstream", "hourly_metrics"),
              TriggerContext("schedule-1", "hourly", notifications=arrivals), T0)
    return Run(run_id, job, status, T0)


def opened(run_id: str = "run-1", grants: tuple[AccessGrant, ...] = GRANTS, is_open: bool = True,
           attempt: int = 0) -> RunAccess:
    return RunAccess(run_id, grants, is_open, attempt)


def credentials(*accesses: RunAccess, secret: bytes = SECRET, **kwargs) -> RunCredentials:
    return RunCredentials(secret, {access.run_id: access for access in accesses}.get, **kwargs)


def test_a_runs_grants_are_its_namespace_and_the_datasets_that_triggered_it_elsewhere():
    """PROGRAM on every dataset of its own namespace, and on the other namespaces' datasets that
    triggered it (those only)."""
    assert run_grants(a_run()) == GRANTS
    assert run_grants(a_run(namespace="shop")) == (AccessGrant("shop", ("*",)), AccessGrant("experiments", ("clickstream",)))


def test_a_valid_token_is_its_runs_principal_with_the_grants_its_access_was_opened_with():
    issuer = credentials(opened())
    token = issuer.issue("run-1")
    assert token.startswith("sluice-run.run-1.0.")
    assert issuer.authenticate(token, None) == Principal("run:run-1", (
        Grant(Role.PROGRAM, "experiments", frozenset({"*"})),
        Grant(Role.PROGRAM, "shop", frozenset({"orders"})),
    ))
    assert issuer.authenticate(f"Bearer {token}", None) is not None


@pytest.mark.parametrize("forged", [
    "", "sluice-run", "sluice-run.run-1", "sluice-run.run-1.", "sluice-run.run-1." + "0" * 64,
    "sluice-run..abc", "other.run-1." + "0" * 64, "sluice-run.run/../1." + "0" * 64,
])
def test_a_malformed_or_forged_token_is_nobody(forged):
    assert credentials(opened()).authenticate(forged, None) is None
    assert credentials(opened()).authenticate(None, None) is None


def test_a_token_is_its_attempts_and_refused_once_another_attempt_opened_the_runs_access():
    """Regression: a token signed the run id only, so attempt 1's program (still running on the host of a
    launcher that lost its lease) took partitions with it after a retry's attempt 2 had opened the access."""
    issuer = credentials(opened(attempt=2))
    first, second = issuer.issue("run-1", 1), issuer.issue("run-1", 2)
    assert first.startswith("sluice-run.run-1.1.") and second.startswith("sluice-run.run-1.2.")
    assert issuer.authenticate(first, None) is None
    assert issuer.refusal(first) == "run run-1: this credential is attempt 1's, and attempt 2 is the run's current one"
    assert issuer.authenticate(second, None).name == "run:run-1" and issuer.refusal(second) is None


def test_an_attempt_cannot_be_forged_it_is_signed_with_the_run_id():
    issuer = credentials(opened(attempt=2))
    digest = issuer.issue("run-1", 1).rsplit(".", 1)[1]
    for forged in (f"sluice-run.run-1.2.{digest}", f"sluice-run.run-1.{digest}"):
        assert issuer.authenticate(forged, None) is None
        assert issuer.refusal(forged) is None, "a token it did not sign learns nothing of the run"


@pytest.mark.parametrize("spelling", ["01", "+1", "-1", " 1", "1\n", "1 ", "\u0661", "1" * 11, ""])
def test_an_attempt_has_one_spelling(spelling):
    issuer = credentials(opened(attempt=1))
    digest = hmac.new(SECRET, f"run-1.{spelling}".encode(), hashlib.sha256).hexdigest()
    assert issuer.authenticate(f"sluice-run.run-1.{spelling}.{digest}", None) is None
    with pytest.raises(ValueError):
        issuer.issue("run-1", spelling)


def test_a_token_issued_before_tokens_named_their_attempt_holds_only_while_the_access_names_none():
    legacy = f"sluice-run.run-1.{hmac.new(SECRET, b'run-1', hashlib.sha256).hexdigest()}"
    assert credentials(opened()).authenticate(legacy, None).name == "run:run-1"  # a run in flight at the upgrade
    named = credentials(opened(attempt=2))
    assert named.authenticate(legacy, None) is None
    assert named.refusal(legacy) == "run run-1: this credential names no attempt, and attempt 2 is the run's current one"


def test_the_refusal_of_an_ended_attempts_token_says_how_it_ended():
    assert credentials(opened(is_open=False, attempt=1)).refusal(credentials().issue("run-1", 1)) == \
        "run run-1: attempt 1's access has ended (what it took was released): its credential ended with it"
    assert credentials().refusal(credentials().issue("run-1", 1)) == "run run-1: its access was never opened"


def test_a_token_signed_with_another_secret_is_refused():
    token = credentials(opened(), secret=b"another secret").issue("run-1")
    assert credentials(opened()).authenticate(token, None) is None


def test_a_token_is_for_its_own_run_only():
    issuer = credentials(opened("run-1"), opened("run-2"))
    digest = issuer.issue("run-1").rsplit(".", 1)[1]
    assert issuer.authenticate(f"sluice-run.run-2.{digest}", None) is None
    assert issuer.authenticate(issuer.issue("run-2"), None).name == "run:run-2"


def test_the_credential_ends_with_its_runs_access():
    issuer = credentials(opened(is_open=False))
    assert issuer.authenticate(issuer.issue("run-1"), None) is None


def test_a_run_whose_access_was_never_opened_is_refused():
    token = credentials(opened()).issue("run-1")
    assert credentials().authenticate(token, None) is None


def test_a_datasets_service_restarted_with_the_same_secret_accepts_the_token():
    token = credentials(opened()).issue("run-1")
    assert credentials(opened()).authenticate(token, None).name == "run:run-1"


def test_signatures_are_compared_in_constant_time():
    compared = []

    def compare(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return hmac.compare_digest(a, b)

    issuer = credentials(opened(), compare=compare)
    token = issuer.issue("run-1")
    assert issuer.authenticate(token, None) is not None
    assert compared == [(token.rsplit(".", 1)[1].encode(), token.rsplit(".", 1)[1].encode())]
    assert RunCredentials.__init__.__defaults__[-1] is hmac.compare_digest


def test_a_runs_access_opens_again_with_its_grants_and_closes_once():
    events = run_access.decide(None, run_access.Open("run-1", GRANTS), T0)
    access = run_access.evolve(None, events[0])
    assert access == opened() and run_access.decide(access, run_access.Open("run-1", GRANTS), T0) == []
    closed = run_access.evolve(access, run_access.decide(access, run_access.Close("run-1", "published"), T0)[0])
    assert not closed.open and run_access.decide(closed, run_access.Close("run-1", "again"), T0) == []
    assert run_access.evolve(closed, run_access.decide(closed, run_access.Open("run-1", GRANTS), T0)[0]).open


@pytest.mark.parametrize("command, field", [
    (run_access.Open("run/1", GRANTS), "run_id"),
    (run_access.Open("run-1", ()), "grants"),
    (run_access.Open("run-1", (AccessGrant("Bad Namespace!", ("*",)),)), "grants[0].namespace"),
    (run_access.Open("run-1", (AccessGrant("shop", ()),)), "grants[0].datasets"),
    (run_access.Open("run-1", (AccessGrant("shop", ("../x",)),)), "grants[0].datasets[0]"),
])
def test_a_hostile_open_is_refused_naming_the_field(command, field):
    with pytest.raises(InvalidArgument) as refused:
        run_access.decide(None, command, T0)
    assert refused.value.field == field


def test_the_secret_is_made_once_in_the_data_dir_readable_by_its_owner_only(tmp_path: Path):
    first = load_secret(tmp_path)
    assert len(first) == 64 and load_secret(tmp_path) == first
    assert stat.S_IMODE(os.stat(tmp_path / SECRET_FILE).st_mode) == 0o600
    assert load_secret(tmp_path, "given by the operator") == b"given by the operator"


class OpenedRuns:
    """The RunData port's open_run as a program's context needs it (address and token)."""

    def __init__(self) -> None:
        self.opened: list[tuple[str, tuple[AccessGrant, ...]]] = []

    def address(self) -> str:
        return "datasets:50051"

    async def open_run(self, run_id: str, grants: tuple[AccessGrant, ...], attempt: int = 0) -> str:
        self.opened.append((run_id, grants))
        return f"token of {run_id}"


def test_a_program_is_told_the_datasets_service_and_the_token_its_runs_access_was_opened_with():
    assert [program_host(h) for h in ("0.0.0.0", "::", "localhost", "127.0.0.1", "127.0.0.2", "10.1.2.3", "::1")] == [
        "127.0.0.1", "127.0.0.1", "127.0.0.1", "127.0.0.1", "127.0.0.2", "10.1.2.3", "[::1]"]
    runs = OpenedRuns()
    assert asyncio.run(ProgramApi(runs).context_for(a_run())) == {
        "api": {"address": "datasets:50051", "token": "token of run-1"}}
    assert runs.opened == [("run-1", GRANTS)]
    tls = ProgramApi(runs, Path("/etc/sluice/server.pem"))
    assert asyncio.run(tls.context_for(a_run()))["api"]["tls_ca"] == "/etc/sluice/server.pem"


def test_a_program_environment_is_the_allowlist_plus_what_the_operator_adds():
    launcher = {"PATH": "/usr/bin", "HOME": "/root", "LANG": "C.UTF-8", "LC_ALL": "C", "TZ": "UTC",
                "JAVA_HOME": "/jvm", "SPARK_HOME": "/spark", "PYSPARK_PYTHON": "python3", "TMPDIR": "/tmp",
                "SLUICE_GRPC_TOKEN": "server-token", "SLUICE_OPENLINEAGE_API_KEY": "ol-key",
                "SLUICE_EVENT_LOG": "postgresql://sluice:pw@db/sluice", "SLUICE_RUN_CREDENTIAL_SECRET": "s",
                "AWS_SECRET_ACCESS_KEY": "aws", "SLUICE_TOKEN": "t", "MY_APP_CONFIG": "x", "MY_APP_MODE": "y"}
    env = program_environment(launcher)
    assert set(env) == {"PATH", "HOME", "LANG", "LC_ALL", "TZ", "JAVA_HOME", "SPARK_HOME", "PYSPARK_PYTHON", "TMPDIR"}
    assert set(program_environment(launcher, ["MY_APP_*"])) - set(env) == {"MY_APP_CONFIG", "MY_APP_MODE"}
    assert program_environment(launcher, overrides={"SPARK_LOCAL_IP": "127.0.0.1"})["SPARK_LOCAL_IP"] == "127.0.0.1"


@pytest.mark.parametrize("url, masked", [
    ("postgresql://sluice:hunter2@db:5432/sluice", "postgresql://sluice:***@db:5432/sluice"),
    ("postgresql://sluice@db/sluice", "postgresql://sluice@db/sluice"),
    ("sqlite:///var/sluice/events.db", "sqlite:///var/sluice/events.db"),
    ("esdb://admin:changeit@h:2113?tls=false", "esdb://admin:***@h:2113?tls=false"),
    ("https://ol.example/api?api_key=k&x=1", "https://ol.example/api?api_key=***&x=1"),
    ("kafka://h:9092?sasl_password=pw", "kafka://h:9092?sasl_password=***"),
    ("", ""),
])
def test_urls_are_shown_with_their_secrets_masked(url, masked):
    assert mask_url(url) == masked


def test_a_drivers_message_quoting_the_url_or_its_password_is_masked():
    url = "postgresql://sluice:hunter2@db/sluice"
    assert mask_text(f"cannot connect to {url}: password hunter2 refused", url) == \
        "cannot connect to postgresql://sluice:***@db/sluice: password *** refused"


def test_settings_print_without_the_secrets_they_hold():
    from sluice_services.composition import Settings

    from sluice.runtime.grpc_security import GrpcSecurity

    shown = repr(Settings(openlineage_api_key="ol-key-1234", run_credential_secret="run-secret-1234",
                          lineage_token="lineage-token-1234", grpc_security=GrpcSecurity(token="grpc-token-1234")))
    assert not [s for s in ("ol-key-1234", "run-secret-1234", "lineage-token-1234", "grpc-token-1234") if s in shown]
