"""Server settings: command line > environment > TOML file ([services.<name>] over [sluice]) > defaults."""
from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest

from sluice_services.cli.main import build_parser
from sluice_services.composition import DEFAULT_APPS_DIR, SERVICES, Settings, program_user
from sluice.runtime.grpc_security import GrpcSecurity
from sluice_services.config import ConfigError, load_settings, resolve

ROOT = Path(__file__).resolve().parents[2]
FILE = Path("/etc/sluice/sluice.toml")

CONFIG = """
[sluice]
port = 6000
data_dir = "state"
event_log = "postgresql://sluice@db/sluice"

[services.registry]
port = 6001
metrics_port = 9001

[services.launcher]
port = 6004
max_parallel_runs = 8
spark_master = "spark://spark:7077"

[services.standalone]
port = 6100
"""


def cli(*argv: str):
    """Options as the real `sluice serve registry` parser leaves them (None: not given)."""
    return build_parser().parse_args(["serve", "registry", *argv])


def settings(*argv: str, env=None, text: str | None = CONFIG, service: str = "registry"):
    return resolve(cli(*argv), env or {}, text, service=service, file=FILE)


def test_defaults_without_file_environment_or_options():
    chosen = resolve(cli(), {}, service="registry")
    assert (chosen.data_dir, chosen.host, chosen.port, chosen.metrics_port) == (Path(".sluice"), "127.0.0.1", 50051, None)
    assert (chosen.spark.master, chosen.apps_dir, chosen.max_parallel_runs) == ("local[*]", DEFAULT_APPS_DIR, 2)
    assert (chosen.event_log, chosen.bus, chosen.log_level) == ("", "", "WARNING")


def test_command_line_beats_environment_beats_file():
    env = {"SLUICE_PORT": "7000", "SLUICE_METRICS_PORT": "0"}
    assert settings().port == 6001
    assert settings(env=env).port == 7000
    assert settings(env=env).metrics_port == 0
    assert settings("--port", "8000", env=env).port == 8000
    assert settings("--port", "0", env=env).port == 0


def test_file_values_fill_in_what_is_not_given_and_paths_are_relative_to_the_file():
    chosen = settings("--bus", "kafka://k:9092")
    assert chosen.event_log == "postgresql://sluice@db/sluice"
    assert chosen.bus == "kafka://k:9092"
    assert chosen.data_dir == Path("/etc/sluice/state")
    assert settings("--data-dir", "here").data_dir == Path("here")


def test_per_service_tables_override_the_sluice_table_for_that_service_only():
    assert settings(service="registry").port == 6001
    launcher = settings(service="launcher")
    assert (launcher.port, launcher.max_parallel_runs, launcher.spark.master) == (6004, 8, "spark://spark:7077")
    checker = settings(service="checker")
    assert (checker.port, checker.max_parallel_runs, checker.metrics_port) == (6000, 2, None)
    assert settings(service="standalone").port == 6100


def test_existing_environment_variables_keep_working_and_empty_ones_are_unset():
    env = {"SLUICE_EVENT_LOG": "sqlite:///tmp/e.db", "SLUICE_BUS": "kafka://k:9092", "SLUICE_HOST": ""}
    chosen = settings(env=env, text=None)
    assert (chosen.event_log, chosen.bus, chosen.host) == ("sqlite:///tmp/e.db", "kafka://k:9092", "127.0.0.1")
    assert settings(env={"SLUICE_LOG_LEVEL": "debug", "SLUICE_DATA_DIR": "rel"}).log_level == "DEBUG"
    assert settings(env={"SLUICE_DATA_DIR": "rel"}).data_dir == Path("rel")


def test_the_jobs_history_of_the_checker_comes_from_option_environment_or_file():
    assert settings().jobs_history == 1_000
    assert settings(text=CONFIG + "[services.checker]\njobs_history = 50\n", service="checker").jobs_history == 50
    assert settings(env={"SLUICE_JOBS_HISTORY": "20"}).jobs_history == 20
    assert settings("--jobs-history", "5", env={"SLUICE_JOBS_HISTORY": "20"}).jobs_history == 5


def test_the_runs_history_of_the_launcher_comes_from_option_environment_or_file():
    assert settings().runs_history == 1_000
    assert settings(text="[services.launcher]\nruns_history = 50\n", service="launcher").runs_history == 50
    assert settings("--runs-history", "5", env={"SLUICE_RUNS_HISTORY": "20"}).runs_history == 5
    assert error(env={"SLUICE_RUNS_HISTORY": "0"}) == "SLUICE_RUNS_HISTORY: must be at least 1, got 0"


def test_grpc_token_and_tls_files_come_from_option_environment_or_file(tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.write_text("certificate"), key.write_text("key")
    assert settings().grpc_security == GrpcSecurity()
    assert settings(env={"SLUICE_GRPC_TOKEN": "s3cret"}).grpc_security.token == "s3cret"
    assert settings("--grpc-token", "t", env={"SLUICE_GRPC_TOKEN": "s3cret"}).grpc_security.token == "t"
    chosen = resolve(cli(), {}, "[sluice]\ntls_cert = 'cert.pem'\ntls_key = 'key.pem'\n", service="registry",
                     file=tmp_path / "sluice.toml")
    assert chosen.grpc_security == GrpcSecurity("", cert, key)
    assert settings("--tls-cert", str(cert), env={"SLUICE_TLS_KEY": str(key)}).grpc_security == GrpcSecurity("", cert, key)


def test_tls_files_must_be_readable_and_come_in_pairs(tmp_path):
    cert = tmp_path / "cert.pem"
    cert.write_text("certificate")
    assert error("--tls-cert", str(cert)) == (
        "tls_cert, tls_key: give both (the certificate and its private key) or neither")
    assert error("--tls-client-ca", str(cert)) == (
        "tls_client_ca: client certificates need TLS: give tls_cert and tls_key too")
    assert settings("--tls-cert", str(cert), "--tls-key", str(cert), "--tls-client-ca", str(cert)).grpc_security == (
        GrpcSecurity("", cert, cert, cert))
    assert error("--tls-cert", str(cert), env={"SLUICE_TLS_KEY": str(tmp_path / "gone.pem")}) == (
        f"SLUICE_TLS_KEY: cannot read {tmp_path / 'gone.pem'}: No such file or directory")


def test_other_sluice_variables_are_not_options():
    assert settings(env={"SLUICE_SERVER": "elsewhere:1", "SLUICE_POSTGRES_BIN": "/x"}).port == 6001


def error(*argv: str, env=None, text: str | None = CONFIG, service: str = "registry") -> str:
    with pytest.raises(ConfigError) as raised:
        settings(*argv, env=env, text=text, service=service)
    message = str(raised.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("text, expected", [
    ("[sluice]\nprot = 1\n", f"{FILE}: sluice.prot: unknown key"),
    ("[services.checker]\nspark = 'x'\n", f"{FILE}: services.checker.spark: unknown key"),
    ("[sluice]\nport = '50051'\n", f"{FILE}: sluice.port: expected an integer, got a string '50051'"),
    ("[sluice]\nport = true\n", f"{FILE}: sluice.port: expected an integer, got a boolean True"),
    ("[sluice]\ndata_dir = 3\n", f"{FILE}: sluice.data_dir: expected a string, got an integer 3"),
    ("[services.lineage]\nport = 70000\n", f"{FILE}: services.lineage.port: must be a port number"),
    ("[services.launcher]\nmax_parallel_runs = 0\n", f"{FILE}: services.launcher.max_parallel_runs: must be at least 1"),
    ("[sluice]\nlog_level = 'LOUD'\n", f"{FILE}: sluice.log_level: must be one of DEBUG"),
    ("[services.checker]\njobs_history = 0\n", f"{FILE}: services.checker.jobs_history: must be at least 1"),
    ("[services.scheduler]\nport = 1\n", f"{FILE}: services.scheduler: unknown service"),
    ("[server]\nport = 1\n", f"{FILE}: server: unknown table"),
    ("port = 1\n", f"{FILE}: port: unknown table"),
    ("sluice = 1\n", f"{FILE}: sluice: must be a table, got an integer"),
    ("[sluice\n", f"{FILE}: invalid TOML:"),
])
def test_file_errors_name_the_file_and_the_key(text, expected):
    assert error(text=text).startswith(expected)


def test_errors_in_another_services_table_are_reported_too():
    assert error(text="[services.matcher]\nprot = 1\n").startswith(f"{FILE}: services.matcher.prot: unknown key")


def test_environment_and_command_line_errors_name_the_variable_or_option():
    assert error(env={"SLUICE_PORT": "fifty"}) == "SLUICE_PORT: expected an integer, got 'fifty'"
    assert error(env={"SLUICE_METRICS_PORT": "-1"}).startswith("SLUICE_METRICS_PORT: must be a port number")
    assert error("--max-parallel-runs", "0") == "--max-parallel-runs: must be at least 1, got 0"
    assert error("--log-level", "chatty").startswith("--log-level: must be one of")


def test_load_settings_reads_the_file_named_by_option_or_environment(tmp_path):
    path = tmp_path / "sluice.toml"
    path.write_text("[sluice]\ndata_dir = 'data'\n[services.registry]\nport = 0\n")
    assert load_settings(cli("--config", str(path)), "registry", env={}).data_dir == tmp_path / "data"
    assert load_settings(cli(), "registry", env={"SLUICE_CONFIG": str(path)}).port == 0
    assert load_settings(cli(), "registry", env={}).port == 50051


def test_a_missing_file_is_one_line_naming_it(tmp_path):
    with pytest.raises(ConfigError) as raised:
        load_settings(cli("--config", str(tmp_path / "absent.toml")), "registry", env={})
    assert str(raised.value).startswith(f"{tmp_path / 'absent.toml'}: cannot read the configuration file")


def test_the_example_file_configures_every_service_on_kafka_and_postgresql():
    path = ROOT / "deploy/sluice.example.toml"
    text = path.read_text()
    chosen = {name: resolve(cli(), {}, text, service=name, file=path) for name in SERVICES}
    assert len({s.port for s in chosen.values()}) == len(SERVICES)
    assert len({s.metrics_port for s in chosen.values()}) == len(SERVICES)
    for name, each in chosen.items():
        assert each.bus.startswith("kafka://") and each.event_log.startswith("postgresql://"), name
    assert chosen["launcher"].max_parallel_runs > 1


def test_spark_submit_command_comes_from_the_option_or_the_environment_else_the_venvs():
    assert settings().spark.spark_submit.endswith("spark-submit")
    assert settings(env={"SLUICE_SPARK_SUBMIT": "/opt/spark/bin/spark-submit"}).spark.spark_submit == "/opt/spark/bin/spark-submit"
    assert settings("--spark-submit", "/usr/bin/spark-submit").spark.spark_submit == "/usr/bin/spark-submit"


def test_spark_settings_pass_through_and_the_driver_address_follows_the_launchers_host():
    spark = settings("--host", "127.0.0.2", "--spark-master", "spark://127.0.0.1:7077", "--spark-executor-memory", "2g",
                     "--spark-executor-cores", "2", "--spark-packages", "org.example:lib:1.0",
                     "--spark-conf", "spark.ui.enabled=true", "--spark-conf", "spark.cores.max=4", text=None).spark
    assert (spark.master, spark.driver_host, spark.executor_memory, spark.executor_cores, spark.packages) == (
        "spark://127.0.0.1:7077", "127.0.0.2", "2g", 2, ("org.example:lib:1.0",))
    assert spark.settings()["spark.driver.bindAddress"] == "127.0.0.2"
    assert dict(spark.conf) == {"spark.ui.enabled": "true", "spark.cores.max": "4"}
    text = '[services.launcher]\nspark_driver_host = "sluice-launcher"\nspark_driver_bind_address = "0.0.0.0"\n'
    compose = settings(text=text, service="launcher").spark
    assert (compose.driver_host, compose.driver_bind_address) == ("sluice-launcher", "0.0.0.0")
    assert settings("--host", "0.0.0.0", "--insecure", text=None).spark.driver_host == ""  # Spark's choice


@pytest.mark.parametrize("argv, message", [
    (("--spark-conf", "spark.master=local"), "spark_conf['spark.master']: set by --spark-master"),
    (("--spark-conf", "spark.ui.enabled"), "spark_conf: expected key=value"),
    (("--spark-master", "mesos://m:5050"), "spark_master: expected local"),
    (("--spark-driver-host", "0.0.0.0"), "spark_driver_host: expected a host name"),
])
def test_bad_spark_settings_are_refused_naming_the_key(argv, message):
    with pytest.raises(ConfigError) as raised:
        settings(*argv, text=None)
    assert message in str(raised.value)


def test_the_program_user_is_a_user_this_launcher_may_switch_to(monkeypatch):
    assert settings("--program-user", "nobody", service="launcher").program_user == "nobody"
    assert error("--program-user", "no-such-user", service="launcher") == "--program-user: no such user 'no-such-user'"
    assert error(env={"SLUICE_PROGRAM_USER": "no-such-user"}, service="launcher") == (
        "SLUICE_PROGRAM_USER: no such user 'no-such-user'")
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    assert error("--program-user", "nobody", service="launcher") == (
        "--program-user: running programs as nobody needs the launcher to run as root (it runs as uid 1000)")


def test_a_program_user_that_is_the_launchers_own_switches_nothing():
    own = pwd.getpwuid(os.geteuid()).pw_name
    assert program_user(Settings(program_user=own)) is None and program_user(Settings()) is None
    assert program_user(Settings(program_user="nobody")).name == "nobody"
