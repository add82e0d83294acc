"""Spark settings as hostile input: a schedule's (tuning only), the launcher's (any spark.*, each option in
one place), how they merge on spark-submit's command line, and the Spark application a run records."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from sluice.domain import runs
from sluice.domain.common import ProgramRef, RunStatus
from sluice.domain.errors import InvalidArgument, ResourceExhausted
from sluice.domain.jobs import Job, RetryPolicy, TriggerContext
from sluice.domain.schedules import Schedule, validate
from sluice.domain.spark_conf import check_schedule_spark_conf, check_spark_conf
from sluice.domain.triggers import ElapsedTrigger
from sluice.eventlog.codec import from_jsonable, to_jsonable
from sluice.v1 import schedules_pb2
from sluice.wire.schedules import schedule_from_proto, schedule_to_proto
from sluice_services.launcher.spark_application import read_reported
from sluice_services.launcher.spark_config import SparkConfig

T0 = datetime(2026, 11, 26, 10, tzinfo=timezone.utc)
PROGRAM = ProgramRef("web", "analytics", "hourly")


@pytest.mark.parametrize("key, value", [
    ("spark.driver.extraJavaOptions", "-javaagent:/tmp/evil.jar"),      # code
    ("spark.executor.extraClassPath", "/tmp/evil"),
    ("spark.jars", "http://example.invalid/evil.jar"),
    ("spark.jars.packages", "org.evil:evil:1.0"),
    ("spark.plugins", "org.evil.Plugin"),
    ("spark.extraListeners", "org.evil.Listener"),
    ("spark.sql.extensions", "org.evil.Extensions"),
    ("spark.executorEnv.LD_PRELOAD", "/tmp/evil.so"),                    # environment
    ("spark.pyspark.python", "/tmp/evil"),                               # commands
    ("spark.driver.resource.gpu.discoveryScript", "/tmp/evil.sh"),
    ("spark.master", "spark://evil.invalid:7077"),                      # where the driver and data go
    ("spark.driver.host", "evil.invalid"),
    ("spark.driver.bindAddress", "0.0.0.0"),
    ("spark.eventLog.dir", "/etc"),
    ("spark.local.dir", "/etc"),
    ("spark.sql.warehouse.dir", "/etc"),
    ("spark.hadoop.fs.s3a.access.key", "x"),
    ("spark.authenticate", "false"),                                    # security
    ("spark.redaction.regex", "nothing"),
    ("spark.ui.enabled", "true"),
])
def test_a_schedule_may_not_set_what_breaks_the_sandbox(key, value):
    with pytest.raises(InvalidArgument) as refused:
        check_schedule_spark_conf({key: value}, "schedule.spark_conf")
    assert refused.value.field == f"schedule.spark_conf[{key!r}]"
    assert "launcher" in refused.value.message


def test_a_schedule_sets_resources_and_tuning():
    conf = {"spark.executor.memory": "2g", "spark.executor.cores": "2", "spark.sql.shuffle.partitions": "8",
            "spark.dynamicAllocation.maxExecutors": "4", "spark.sql.session.timeZone": "Europe/Paris"}
    check_schedule_spark_conf(conf, "schedule.spark_conf")
    validate(Schedule("s", "hourly", PROGRAM, ElapsedTrigger(60), spark_conf=conf))


@pytest.mark.parametrize("conf, message", [
    ({"spark.executor.memory": "2g\nspark.driver.extraJavaOptions=-javaagent:x"}, "control character"),
    ({"spark.executor.memory": "2g\r"}, "control character"),
    ({"spark.executor.memory": "\x00"}, "control character"),
    ({"spark.executor.memory ": "2g"}, "a key must be spark."),
    ({"hadoop.fs.defaultFS": "x"}, "a key must be spark."),
    ({"spark.": "x"}, "a key must be spark."),
    ({"spark.a=b": "x"}, "a key must be spark."),
    ({"spark.sql.session.timeZone": "${env:SLUICE_GRPC_TOKEN}"}, "'${'"),
    ({"spark.executor.memory": "\ud800"}, "lone surrogate"),
])
def test_hostile_text_is_refused_naming_the_key(conf, message):
    with pytest.raises(InvalidArgument) as refused:
        check_schedule_spark_conf(conf, "schedule.spark_conf")
    assert message in refused.value.message
    assert refused.value.field.startswith("schedule.spark_conf")


def test_sizes_are_bounded():
    with pytest.raises(ResourceExhausted):
        check_spark_conf({f"spark.a{i}": "1" for i in range(65)}, "spark_conf")
    with pytest.raises(ResourceExhausted):
        check_spark_conf({"spark.a": "x" * 1025}, "spark_conf")
    with pytest.raises(InvalidArgument):
        check_spark_conf({"spark." + "a" * 200: "x"}, "spark_conf")


def test_the_registry_refuses_a_schedule_with_a_forbidden_setting_naming_the_field():
    message = schedule_to_proto(Schedule("s", "hourly", PROGRAM, ElapsedTrigger(60)))
    message.spark_conf["spark.driver.extraJavaOptions"] = "-javaagent:x"
    with pytest.raises(InvalidArgument) as refused:
        schedule_from_proto(message, "s")
    assert refused.value.field == "schedule.spark_conf['spark.driver.extraJavaOptions']"
    message = schedules_pb2.Schedule()
    message.CopyFrom(schedule_to_proto(Schedule("s", "hourly", PROGRAM, ElapsedTrigger(60),
                                                spark_conf={"spark.executor.memory": "1g"})))
    assert dict(schedule_from_proto(message, "s").spark_conf) == {"spark.executor.memory": "1g"}


def test_the_command_line_layers_defaults_launcher_schedule_then_the_options_own_keys():
    config = SparkConfig(master="spark://127.0.0.1:7077", driver_host="127.0.0.2", executor_memory="512m",
                         executor_cores=1, packages=("org.example:lib_2.13:1.0",),
                         conf={"spark.ui.enabled": "true", "spark.sql.shuffle.partitions": "4"})
    command = config.command(Path("/apps/a/p.py"), Path("/runs/r/context.json"),
                             {"spark.sql.shuffle.partitions": "8", "spark.driver.memory": "1g"})
    conf = dict(command[i + 1].split("=", 1) for i, arg in enumerate(command) if arg == "--conf")
    assert command[:5] == [config.spark_submit, "--master", "spark://127.0.0.1:7077", "--deploy-mode", "client"]
    assert command[command.index("--packages") + 1] == "org.example:lib_2.13:1.0"
    assert conf == {"spark.ui.enabled": "true", "spark.log.level": "WARN", "spark.sql.shuffle.partitions": "8",
                    "spark.driver.memory": "1g", "spark.driver.host": "127.0.0.2",
                    "spark.driver.bindAddress": "127.0.0.2", "spark.executor.memory": "512m",
                    "spark.executor.cores": "1"}
    assert command[-3:] == ["/apps/a/p.py", "--sluice-context", "/runs/r/context.json"]
    assert config.environment({})["SPARK_LOCAL_IP"] == "127.0.0.2"


def test_the_launcher_checks_a_schedules_settings_again_they_came_over_the_bus():
    with pytest.raises(InvalidArgument) as refused:
        SparkConfig().command(Path("/p.py"), Path("/c.json"), {"spark.executorEnv.PYTHONSTARTUP": "/tmp/x.py"})
    assert refused.value.field == "job.spark_conf['spark.executorEnv.PYTHONSTARTUP']"


def test_no_address_is_fixed_a_cluster_master_without_a_driver_host_leaves_it_to_spark():
    cluster = SparkConfig(master="spark://10.0.0.5:7077")
    conf = cluster.settings()
    assert "spark.driver.host" not in conf and "spark.driver.bindAddress" not in conf
    assert cluster.environment({}) == {}
    assert SparkConfig().settings()["spark.driver.host"] == "127.0.0.1"   # local mode never leaves the machine
    assert SparkConfig(driver_host="sluice-launcher", driver_bind_address="0.0.0.0",
                       master="spark://spark-master:7077").settings()["spark.driver.bindAddress"] == "0.0.0.0"


@pytest.mark.parametrize("options, field", [
    ({"master": "mesos://x:5050"}, "spark_master"),
    ({"master": "spark://host:7077 --conf x"}, "spark_master"),
    ({"driver_host": "0.0.0.0"}, "spark_driver_host"),
    ({"driver_host": "a b"}, "spark_driver_host"),
    ({"executor_memory": "lots"}, "spark_executor_memory"),
    ({"executor_cores": 0}, "spark_executor_cores"),
    ({"packages": ("org.example:lib",)}, "spark_packages"),
    ({"conf": {"spark.master": "local"}}, "spark_conf['spark.master']"),
    ({"conf": {"spark.submit.deployMode": "cluster"}}, "spark_conf['spark.submit.deployMode']"),
    ({"conf": {"spark.ui.enabled": "true\n"}}, "spark_conf['spark.ui.enabled']"),
])
def test_the_launchers_options_are_checked_naming_the_key(options, field):
    with pytest.raises(InvalidArgument) as refused:
        SparkConfig(**options)
    assert refused.value.field == field


@pytest.mark.parametrize("master", ["local", "local[2]", "local[*]", "spark://127.0.0.1:7077",
                                    "spark://a:7077,b:7077", "yarn", "k8s://https://10.0.0.1:6443"])
def test_masters_accepted(master):
    assert SparkConfig(master=master).command(Path("/p.py"), Path("/c.json"))[2] == master


def _job() -> Job:
    return Job("job-1", "schedule-1", 1, PROGRAM, TriggerContext("schedule-1", "hourly"), T0,
               retry_policy=RetryPolicy(max_retries=1, delay_seconds=0))


def test_a_run_records_the_spark_application_of_each_attempt():
    run, now = None, T0
    commands = [runs.RequestRun(_job()), runs.MarkSparkApplication("too-early"), runs.MarkStarted(10),
                runs.MarkSparkApplication("app-1", "http://127.0.0.2:4040"),
                runs.MarkSparkApplication("app-1", "http://127.0.0.2:4040"), runs.MarkLost("gone"),
                runs.MarkStarted(11), runs.MarkSparkApplication("app-2"), runs.MarkCompleted((), ())]
    events = []
    for command in commands:
        now += timedelta(seconds=1)
        decided = runs.decide(run, command, now)
        for event in decided:
            event = from_jsonable(type(event), to_jsonable(event))   # as the log gives it back
            run = runs.evolve(run, event)
        events += decided
    reported = [e for e in events if isinstance(e, runs.SparkApplicationStarted)]
    assert [(e.attempt, e.application_id, e.ui_url) for e in reported] == [
        (1, "app-1", "http://127.0.0.2:4040"), (2, "app-2", "")]
    assert run.status is RunStatus.COMPLETED
    assert [a.spark_application_id for a in run.attempts] == ["app-1", "app-2"]
    assert run.spark_application_id == "app-2"


@pytest.mark.parametrize("text", [
    '{"application_id": "app-1\\nINJECTED"}', '{"application_id": "app-1", "ui_url": "javascript:alert(1)"}',
    '{"application_id": 5}', '[]', 'not json', '{"application_id": "' + "a" * 5000 + '"}',
])
def test_a_hostile_report_is_ignored(tmp_path, text):
    (tmp_path / "spark_application.json").write_text(text)
    assert read_reported(tmp_path) is None


def test_a_report_through_a_link_is_not_followed(tmp_path):
    (tmp_path / "elsewhere.json").write_text('{"application_id": "app-1"}')
    (tmp_path / "spark_application.json").symlink_to(tmp_path / "elsewhere.json")
    assert read_reported(tmp_path) is None
    (tmp_path / "spark_application.json").unlink()
    (tmp_path / "spark_application.json").write_text('{"application_id": "app-1", "ui_url": "http://127.0.0.2:4041"}')
    assert read_reported(tmp_path) == ("app-1", "http://127.0.0.2:4041")
