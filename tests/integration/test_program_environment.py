"""A program started by the real SparkSubmitter (through the supervise wrapper) gets the allowlisted
environment only: none of the launcher's secrets. Regression (issue 23): it got `{**os.environ}`,
SLUICE_GRPC_TOKEN, the OpenLineage API key and SLUICE_EVENT_LOG included."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from sluice_services.launcher.programs import SparkConfig, SparkSubmitter

pytestmark = pytest.mark.integration

SECRETS = {
    "SLUICE_GRPC_TOKEN": "server-grpc-token-0123456789",
    "SLUICE_OPENLINEAGE_API_KEY": "openlineage-api-key-0123456789",
    "SLUICE_EVENT_LOG": "postgresql://sluice:event-log-password@db:5432/sluice",
    "SLUICE_RUN_CREDENTIAL_SECRET": "run-credential-secret-0123456789",
    "SLUICE_LINEAGE_TOKEN": "lineage-token-0123456789",
    "AWS_SECRET_ACCESS_KEY": "aws-secret-0123456789",
}


def env_dumping_spark_submit(tmp_path: Path) -> Path:
    """A spark-submit stand-in that writes its environment beside the context file it is given."""
    script = tmp_path / "dump-env-spark-submit"
    script.write_text(f"#!{sys.executable}\n"
                      "import json, os, sys\n"
                      "from pathlib import Path\n"
                      "context = Path(sys.argv[sys.argv.index('--sluice-context') + 1])\n"
                      "(context.parent / 'environ.json').write_text(json.dumps(dict(os.environ)))\n")
    script.chmod(0o755)
    return script


async def submitted_environment(tmp_path: Path, **submitter_options) -> dict[str, str]:
    attempt = tmp_path / "runs" / "run-1"
    attempt.mkdir(parents=True)
    (attempt / "context.json").write_text("{}")
    submitter = SparkSubmitter(SparkConfig(spark_submit=str(env_dumping_spark_submit(tmp_path))), 0.05,
                               **submitter_options)
    child = await submitter.submit(tmp_path / "program.py", attempt / "context.json", attempt / "driver.log")
    assert await child.wait() == 0, (attempt / "driver.log").read_text()
    return json.loads((attempt / "environ.json").read_text())


async def test_a_program_gets_none_of_the_launchers_secrets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    environ = await submitted_environment(tmp_path)
    leaked = {name for name, value in environ.items() if name in SECRETS or value in SECRETS.values()}
    assert leaked == set()
    assert not [name for name in environ if name.startswith("SLUICE_")]
    assert environ["PATH"] and environ["LC_ALL"] == "C.UTF-8"
    assert environ["PYSPARK_PYTHON"] == sys.executable and environ["SPARK_LOCAL_IP"]


async def test_an_operator_adds_names_to_the_allowlist(tmp_path: Path):
    environ = await submitted_environment(tmp_path, program_env=("MY_APP_*",),
                                          environ={"PATH": "/usr/bin:/bin", "MY_APP_MODE": "fast",
                                                   "SLUICE_GRPC_TOKEN": "t"})
    assert environ["MY_APP_MODE"] == "fast" and "SLUICE_GRPC_TOKEN" not in environ
