"""docker-compose.yml and the Dockerfile cannot be run here (no Docker engine): check what can be checked."""
from __future__ import annotations

from pathlib import Path

import json

import jsonschema
import yaml

from sluice_services.catalogue import NAMES as SERVICES
from sluice_services.cli.main import build_parser
from sluice_services.config import resolve

ROOT = Path(__file__).resolve().parents[2]


SCHEMA = ROOT / "deploy/compose/.cache/compose_spec.json"


def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def schema_errors(document: dict) -> list[str]:
    assert SCHEMA.is_file(), "the Compose schema is missing: run `make compose-schema`"
    validator = jsonschema.Draft7Validator(json.loads(SCHEMA.read_text()))
    return [f"{'.'.join(map(str, error.path))}: {error.message}" for error in validator.iter_errors(document)]


def test_compose_file_is_valid_against_the_compose_schema():
    assert schema_errors(compose()) == []


def test_the_schema_check_rejects_a_broken_compose_file():
    broken = compose()
    broken["services"]["registry"]["comand"] = ["serve", "registry"]
    broken["services"]["kafka"]["healthcheck"]["retries"] = "many"
    assert len(schema_errors(broken)) == 2


def test_the_stack_runs_every_service_on_kafka_postgres_and_a_spark_cluster():
    services = compose()["services"]
    assert {"kafka", "postgres", "kurrentdb", "spark-master", "spark-worker", *SERVICES} <= set(services)
    for name in SERVICES:
        args = build_parser().parse_args(services[name]["command"])  # exits on an unknown command or option
        assert args.service == name and args.host == "0.0.0.0" and args.metrics_port == 9100
        environment = services[name]["environment"]
        assert environment["SLUICE_BUS"] == "kafka://kafka:9092"
        assert environment["SLUICE_EVENT_LOG"].startswith("postgresql://") and "@postgres:5432/" in environment["SLUICE_EVENT_LOG"]
        assert environment["SLUICE_SPARK_MASTER"] == "spark://spark-master:7077"
        assert set(services[name]["depends_on"]) >= {"kafka", "postgres"}
    worker = services["spark-worker"]
    assert worker["command"][:2] == ["org.apache.spark.deploy.worker.Worker", "spark://spark-master:7077"]
    assert worker["deploy"]["replicas"] == 2
    assert "sluice-data:/data" in worker["volumes"] and "sluice-data:/data" in services["launcher"]["volumes"]
    # the launcher publishes through the datasets service, which moves the runs' files on the same volume
    assert build_parser().parse_args(services["launcher"]["command"]).datasets_address == "datasets:50051"
    assert "datasets" in services["launcher"]["depends_on"] and "sluice-data:/data" in services["datasets"]["volumes"]


def test_programs_drivers_are_reached_at_the_launchers_service_name():
    services = compose()["services"]
    spark_environment = {k: v for k, v in services["launcher"]["environment"].items() if k.startswith("SLUICE_SPARK_")}
    launcher = resolve(build_parser().parse_args(services["launcher"]["command"]), spark_environment, service="launcher")
    assert (launcher.spark.master, launcher.spark.driver_host) == ("spark://spark-master:7077", "launcher")
    settings = launcher.spark.settings()
    assert (settings["spark.driver.host"], settings["spark.driver.bindAddress"]) == ("launcher", "0.0.0.0")
    for name in ("spark-master", "spark-worker"):
        assert "launcher" not in services[name].get("depends_on", {}), "the cluster does not wait for a driver"


def test_compose_references_are_consistent_and_ports_stay_on_loopback():
    document = compose()
    services = document["services"]
    for name, service in services.items():
        for dependency in service.get("depends_on", {}):
            assert dependency in services, f"{name} depends on unknown {dependency}"
        for port in service.get("ports", []):
            assert port.startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"
        for volume in service.get("volumes", []):
            assert volume.split(":")[0] in document["volumes"], volume
        if "build" in service:
            assert (ROOT / service["build"]["context"] / service["build"]["dockerfile"]).is_file(), name
    standalone = services["sluice-standalone"]
    assert standalone["profiles"] == ["standalone"]
    assert build_parser().parse_args(standalone["command"]).data_dir == Path("/data")


def test_dockerfile_copies_everything_make_env_needs():
    dockerfile = (ROOT / "deploy/docker/Dockerfile").read_text()
    for needed in ("pyproject.toml", "constraints.txt", "Makefile", "protos", "libs", "services", "examples"):
        assert f"COPY {needed}" in dockerfile or f" {needed} " in dockerfile, needed
    assert "openjdk-17" in dockerfile
