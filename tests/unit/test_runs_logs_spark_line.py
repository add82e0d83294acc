"""`sluice runs logs` names a cluster run's Spark application and its status: running while the attempt
whose driver runs it does (client mode), ended with that attempt otherwise."""
from __future__ import annotations

from sluice.cli.run_control import spark_application_line
from sluice.v1 import notifications_pb2, runs_pb2


def run(*attempts: tuple[int, str]) -> runs_pb2.Run:
    return runs_pb2.Run(id="r1", status=attempts[-1][0], spark_application_id="app-20261126-0001",
                        spark_ui_url="http://127.0.0.2:4040",
                        attempts=[runs_pb2.RunAttempt(number=n, status=status, spark_application_id=app)
                                  for n, (status, app) in enumerate(attempts, 1)])


def test_a_running_attempt_runs_its_application_with_its_driver_ui():
    line = spark_application_line(run((notifications_pb2.RUNNING, "app-20261126-0001")))
    assert line == "spark application app-20261126-0001: RUNNING, driver UI http://127.0.0.2:4040"


def test_an_application_ends_with_the_attempt_that_drove_it():
    killed = run((notifications_pb2.KILLED, "app-20261126-0001"))
    assert spark_application_line(killed) == "spark application app-20261126-0001: ended (KILLED)"
    retried = run((notifications_pb2.LOST, "app-20261126-0001"), (notifications_pb2.STARTING, ""))
    assert spark_application_line(retried) == "spark application app-20261126-0001: ended (LOST)"
