"""`sluice schedules create|update --spark-conf K=V` against a running standalone: the schedule keeps its
Spark settings, update sets or (empty value) removes keys, a forbidden one is a one-line error naming it."""
from __future__ import annotations

import json

import pytest

from sluice_services.localserver import LocalServer
from tests.integration.test_cli import assert_one_line_error, create_args, sluice

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with LocalServer(tmp_path_factory.mktemp("cli-spark") / "sluice") as running:
        yield running


def test_a_schedules_spark_settings_are_set_updated_and_removed(server):
    created = sluice(server, "--json", *create_args("tuned", "--spark-conf", "spark.executor.memory=2g",
                                                    "--spark-conf", "spark.sql.shuffle.partitions=8"))
    assert created.returncode == 0, created.stderr
    schedule = json.loads(created.stdout)
    assert schedule["sparkConf"] == {"spark.executor.memory": "2g", "spark.sql.shuffle.partitions": "8"}
    updated = sluice(server, "--json", "schedules", "update", schedule["id"], "--spark-conf", "spark.executor.memory=",
                     "--spark-conf", "spark.executor.cores=2")
    assert updated.returncode == 0, updated.stderr
    assert json.loads(updated.stdout)["sparkConf"] == {"spark.sql.shuffle.partitions": "8", "spark.executor.cores": "2"}


@pytest.mark.parametrize("setting, text", [
    ("spark.driver.extraJavaOptions=-javaagent:/tmp/x.jar",
     "INVALID_ARGUMENT: schedule.spark_conf['spark.driver.extraJavaOptions']: a schedule may set only resources"),
    ("spark.master=spark://elsewhere:7077", "INVALID_ARGUMENT: schedule.spark_conf['spark.master']"),
    ("spark.sql.session.timeZone=${env:HOME}", "INVALID_ARGUMENT: schedule.spark_conf['spark.sql.session.timeZone']"),
    ("no-equals-sign", "--spark-conf"),
])
def test_a_forbidden_setting_is_a_one_line_error_naming_it(server, setting, text):
    result = sluice(server, *create_args("forbidden", "--spark-conf", setting))
    assert_one_line_error(result, 2 if "=" not in setting else 1, text)
