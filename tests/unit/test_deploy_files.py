"""docker-compose.yml and the Dockerfile cannot be run here (no Docker engine): check what can be checked."""
from __future__ import annotations

from pathlib import Path

import yaml

from sluice.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[2]


def test_compose_services_build_from_files_that_exist_and_run_valid_commands():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert compose["services"], "no services"
    for name, service in compose["services"].items():
        build = service["build"]
        assert (ROOT / build["context"] / build["dockerfile"]).is_file(), name
        args = build_parser().parse_args(service["command"])  # exits on an unknown command or option
        assert args.port == 50051
        for port in service.get("ports", []):
            assert port.startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"
        for volume in service.get("volumes", []):
            assert volume.split(":")[0] in compose["volumes"], volume
        build_parser().parse_args(service["healthcheck"]["test"][2:])


def test_dockerfile_copies_everything_make_env_needs():
    dockerfile = (ROOT / "deploy/docker/Dockerfile").read_text()
    for needed in ("pyproject.toml", "constraints.txt", "Makefile", "protos", "libs", "services", "examples"):
        assert f"COPY {needed}" in dockerfile or f" {needed} " in dockerfile, needed
    assert "openjdk-17" in dockerfile
