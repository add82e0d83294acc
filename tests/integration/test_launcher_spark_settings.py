"""The launcher passes a schedule's Spark settings to spark-submit over its own, refuses (FAILED, not
retried) one a schedule may not set even when the job came over the bus unchecked, and records the
Spark application the program's driver reports while it runs. spark-submit is the stand-in
(tests/support/fake_spark_submit.py): it runs the entry point in its own process, so the program
sees the whole spark-submit command line in /proc/self/cmdline."""
from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from sluice.clock import SimulatedClock
from sluice.domain.common import ProgramRef, RunStatus
from sluice.domain.jobs import Job, TriggerContext
from sluice.eventlog.sqlite import SqliteEventLog
from sluice.ids import derived_id
from sluice_services.launcher.programs import DirectoryCatalog, SparkConfig, SparkSubmitter
from sluice_services.launcher.service import LauncherService
from tests.integration.test_launcher_history import request

pytestmark = pytest.mark.integration

FAKE_SPARK_SUBMIT = Path(__file__).resolve().parents[1] / "support" / "fake_spark_submit.py"
PROGRAM = ProgramRef("web", "analytics", "reports")
REPORTING_PROGRAM = """
import json, sys, time
from pathlib import Path
context = json.loads(Path(sys.argv[sys.argv.index("--sluice-context") + 1]).read_text())
result_path = context["system"]["result_path"]
Path(result_path).with_name("command_line.json").write_text(
    json.dumps(open("/proc/self/cmdline", "rb").read().decode().split("\\0")))
Path(result_path).with_name("spark_application.json").write_text(   # as sluice.sdk.spark_application writes it
    json.dumps({"application_id": "app-20261126110000-0007", "ui_url": "http://127.0.0.2:4041"}))
time.sleep(1.5)   # the launcher records it while the program runs
sys.exit(3)
"""


@pytest.fixture
def launcher(tmp_path):
    clock = SimulatedClock(datetime(2026, 11, 26, 9, tzinfo=timezone.utc))
    log = SqliteEventLog(tmp_path / "events.db", clock=clock)
    apps = tmp_path / "apps"
    (apps / PROGRAM.app).mkdir(parents=True)
    (apps / PROGRAM.app / f"{PROGRAM.program}.py").write_text(REPORTING_PROGRAM)
    config = SparkConfig(spark_submit=str(FAKE_SPARK_SUBMIT), master="spark://127.0.0.1:7077",
                         driver_host="127.0.0.2", conf={"spark.sql.shuffle.partitions": "4"})
    started = LauncherService(log, clock, DirectoryCatalog(apps), SparkSubmitter(config, 0.05), tmp_path / "data")
    started.recover()
    yield started
    log.close()


def job(spark_conf: dict[str, str]) -> Job:
    return Job(derived_id("job", str(len(spark_conf)), sorted(spark_conf)[0]), "schedule-1", 1, PROGRAM,
               TriggerContext("schedule-1", "reports", {}), datetime(2026, 11, 26, 9, tzinfo=timezone.utc),
               spark_conf=spark_conf)


async def test_the_schedules_settings_reach_spark_submit_and_the_application_is_recorded(launcher):
    run = launcher.get(await request(launcher, job({"spark.executor.memory": "1g", "spark.sql.shuffle.partitions": "8"})))
    assert run.status is RunStatus.FAILED and "exit code 3" in run.error
    assert (run.attempt.spark_application_id, run.attempt.spark_ui_url) == ("app-20261126110000-0007",
                                                                            "http://127.0.0.2:4041")
    command = json.loads((launcher.attempt_dir(run) / "command_line.json").read_text())
    conf = dict(command[i + 1].split("=", 1) for i, arg in enumerate(command) if arg == "--conf")
    assert conf["spark.executor.memory"] == "1g" and conf["spark.sql.shuffle.partitions"] == "8"
    assert (conf["spark.driver.host"], conf["spark.driver.bindAddress"]) == ("127.0.0.2", "127.0.0.2")
    assert command[command.index("--master") + 1] == "spark://127.0.0.1:7077"


async def test_a_setting_a_schedule_may_not_set_fails_the_run_unretried_naming_the_key(launcher):
    run = launcher.get(await request(launcher, job({"spark.driver.extraJavaOptions": "-javaagent:/tmp/evil.jar"})))
    assert run.status is RunStatus.FAILED and len(run.attempts) == 1
    assert "Spark settings refused" in run.error and "spark.driver.extraJavaOptions" in run.error
    assert not (launcher.attempt_dir(run) / "command_line.json").exists(), "nothing was started"
