"""Server settings from the command line, the environment and a TOML file.

Precedence: command line > environment (SLUICE_<OPTION>, e.g. SLUICE_PORT) > file > defaults.
In the file, `[sluice]` holds the options and `[services.<name>]` overrides them for one service
(`sluice serve <name>`; `[services.standalone]` for `sluice standalone`):

    [sluice]
    bus = "kafka://127.0.0.1:9092"

    [services.registry]
    port = 50051

Keys are the option names with underscores (data_dir, metrics_port, ...). Relative paths in the file
are relative to the file's directory. Any unknown key, wrong type or out-of-range value raises
ConfigError with one line naming the file and the key (or the variable, or the option)."""
from __future__ import annotations

import argparse
import os
import re
import tomllib
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable, Mapping

from sluice.domain.constraints import Capacity
from sluice.readmodels.jobs import DEFAULT_FINISHED_PER_SCHEDULE
from sluice.domain.errors import InvalidArgument
from sluice.runtime.auth_policy import PolicyError, load_policy
from sluice.runtime.grpc_security import GrpcSecurity, loopback
from sluice_services.catalogue import SECTIONS
from sluice_services.composition import DEFAULT_APPS_DIR, Settings
from sluice.domain.spark_conf import parse_pair
from sluice_services.launcher.program_user import ProgramUser
from sluice_services.launcher.programs import SparkConfig
from sluice_services.launcher.run_control import DEFAULT_RUN_DIR_RETENTION, parse_retention
from sluice_services.launcher.service import DEFAULT_FINISHED_RUNS_PER_SCHEDULE

ENV_PREFIX = "SLUICE_"
CONFIG_ENV = "SLUICE_CONFIG"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


class ConfigError(Exception):
    """A setting that cannot be used; the message is one line naming where it came from."""


def _port(value: int) -> int:
    if not 0 <= value <= 65535:
        raise ValueError(f"must be a port number from 0 to 65535, got {value}")
    return value


def _at_least_one(value: int) -> int:
    if value < 1:
        raise ValueError(f"must be at least 1, got {value}")
    return value


def _retention(value: str) -> timedelta:
    retention = parse_retention(value)
    if retention < timedelta(minutes=1):
        raise ValueError(f"must be at least 1m, got {value!r}")
    return retention


def _log_format(value: str) -> str:
    if value.lower() not in ("text", "json"):
        raise ValueError(f"must be text or json, got {value!r}")
    return value.lower()


def _log_level(value: str) -> str:
    if value.upper() not in LOG_LEVELS:
        raise ValueError(f"must be one of {', '.join(LOG_LEVELS)}, got {value!r}")
    return value.upper()


def _any(value: Any) -> Any:
    return value


def _readable_file(value: Path) -> Path:
    try:
        with open(value, "rb"):
            return value
    except OSError as error:
        raise ValueError(f"cannot read {value}: {error.strerror or error}") from None


def _http_url(value: str) -> str:
    if value and not value.startswith(("http://", "https://")):
        raise ValueError(f"must be an http:// or https:// URL, got {value!r}")
    return value


def _address(value: str) -> str:
    host, colon, port = value.rpartition(":")
    if value and (not colon or not host or not port.isdigit() or not 0 < int(port) <= 65535):
        raise ValueError(f"must be HOST:PORT, got {value!r}")
    return value


def _program_user(value: str) -> str:
    if value:
        ProgramUser.named(value)  # ValueError naming what is wrong
    return value


def _env_names(value: Any) -> tuple[str, ...]:
    names = tuple(value)
    for name in names:
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*\*?", name):
            raise ValueError(f"must be environment variable names (a trailing * allows a prefix), got {name!r}")
    return names


# option -> (type, default, check); list: a TOML array of strings, comma-separated in the environment
OPTIONS: dict[str, tuple[type, Any, Callable[[Any], Any]]] = {
    "data_dir": (Path, Path(".sluice"), _any),
    "host": (str, "127.0.0.1", _any),
    "port": (int, 50051, _port),
    "metrics_port": (int, None, _port),
    "spark_master": (str, "local[*]", _any),
    "spark_submit": (str, "", _any),
    "spark_driver_host": (str, "", _any),
    "spark_driver_bind_address": (str, "", _any),
    "spark_executor_memory": (str, "", _any),
    "spark_executor_cores": (int, None, _at_least_one),
    "spark_packages": (list, (), _any),
    "spark_conf": (list, (), _any),
    "apps_dir": (Path, DEFAULT_APPS_DIR, _any),
    "max_parallel_runs": (int, 2, _at_least_one),
    "event_log": (str, "", _any),
    "bus": (str, "", _any),
    "log_level": (str, "WARNING", _log_level),
    "log_format": (str, "text", _log_format),
    "load_limit": (int, None, _at_least_one),
    "load_hard_limit": (int, None, _at_least_one),
    "high_priority": (int, 1, _any),
    "jobs_history": (int, DEFAULT_FINISHED_PER_SCHEDULE, _at_least_one),
    "runs_history": (int, DEFAULT_FINISHED_RUNS_PER_SCHEDULE, _at_least_one),
    "lease_seconds": (int, 30, _at_least_one),
    "grpc_token": (str, "", _any),
    "tls_cert": (Path, None, _readable_file),
    "tls_key": (Path, None, _readable_file),
    "tls_client_ca": (Path, None, _readable_file),
    "lineage_port": (int, None, _port),
    "lineage_token": (str, "", _any),
    "openlineage_url": (str, "", _http_url),
    "openlineage_api_key": (str, "", _any),
    "auth_policy": (Path, None, _readable_file),
    "insecure": (bool, False, _any),
    "program_env": (list, (), _env_names),
    "program_user": (str, "", _program_user),
    "run_credential_secret": (str, "", _any),
    "datasets_address": (str, "", _address),
    "datasets_token": (str, "", _any),
    "migrate": (bool, True, _any),
    "web_port": (int, None, _port),
    "run_dir_retention": (str, DEFAULT_RUN_DIR_RETENTION, _retention),
}


def resolve(args: argparse.Namespace | Mapping[str, Any], env: Mapping[str, str], file_text: str | None = None,
            *, service: str, file: Path | None = None) -> Settings:
    """Settings for `service` (a service name or "standalone") from parsed options (None: not given),
    the environment and the text of a TOML file read from `file`."""
    values = {name: default for name, (_, default, _) in OPTIONS.items()}
    if file_text is not None:
        values.update(from_file(file_text, service, file or Path("<config>")))
    values.update(from_env(env))
    values.update(from_args(args))
    return to_settings(values)


def load_settings(args: argparse.Namespace, service: str, env: Mapping[str, str] | None = None) -> Settings:
    """`resolve` with the file named by --config (or SLUICE_CONFIG) read from disk."""
    env = os.environ if env is None else env
    path = getattr(args, "config", None) or env.get(CONFIG_ENV) or None
    if path is None:
        return resolve(args, env, service=service)
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"{file}: cannot read the configuration file: {getattr(error, 'strerror', None) or error}")
    return resolve(args, env, text, service=service, file=file)


def from_file(text: str, service: str, file: Path) -> dict[str, Any]:
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{file}: invalid TOML: {error}") from None
    for key in document:
        if key not in ("sluice", "services"):
            raise ConfigError(f"{file}: {key}: unknown table (expected [sluice] and [services.<name>])")
    services = _table(document, "services", file, "services")
    for name in services:
        if name not in SECTIONS:
            raise ConfigError(f"{file}: services.{name}: unknown service (one of {', '.join(SECTIONS)})")
    overrides = {name: _file_options(_table(services, name, file, f"services.{name}"), f"services.{name}", file)
                 for name in services}
    return {**_file_options(_table(document, "sluice", file, "sluice"), "sluice", file), **overrides.get(service, {})}


def _table(document: Mapping[str, Any], key: str, file: Path, name: str) -> Mapping[str, Any]:
    table = document.get(key, {})
    if not isinstance(table, dict):
        raise ConfigError(f"{file}: {name}: must be a table, got {_type_name(table)}")
    return table


def _file_options(table: Mapping[str, Any], prefix: str, file: Path) -> dict[str, Any]:
    values = {}
    for key, raw in table.items():
        where = f"{file}: {prefix}.{key}"
        if key not in OPTIONS:
            raise ConfigError(f"{where}: unknown key (known: {', '.join(OPTIONS)})")
        kind = OPTIONS[key][0]
        if kind is bool:
            if not isinstance(raw, bool):
                raise ConfigError(f"{where}: expected true or false, got {_type_name(raw)} {raw!r}")
            values[key] = raw
            continue
        if not isinstance(raw, str if kind is Path else kind) or isinstance(raw, bool):
            expected = {int: "an integer", list: "an array of strings"}.get(kind, "a string")
            raise ConfigError(f"{where}: expected {expected}, got {_type_name(raw)} {raw!r}")
        value = file.parent / Path(raw).expanduser() if kind is Path else raw
        values[key] = _checked(key, value, where)
    return values


def from_env(env: Mapping[str, str]) -> dict[str, Any]:
    values = {}
    for key, (kind, _, _) in OPTIONS.items():
        variable = ENV_PREFIX + key.upper()
        raw = env.get(variable, "")
        if raw == "":
            continue
        if kind is bool:
            values[key] = _flag(raw, variable)
            continue
        try:
            value = [name.strip() for name in raw.split(",") if name.strip()] if kind is list else kind(raw)
        except ValueError:
            raise ConfigError(f"{variable}: expected an integer, got {raw!r}") from None
        values[key] = _checked(key, value, variable)
    return values


def from_args(args: argparse.Namespace | Mapping[str, Any]) -> dict[str, Any]:
    given = vars(args) if isinstance(args, argparse.Namespace) else args
    return {key: _checked(key, given[key], "--" + key.replace("_", "-"))
            for key in OPTIONS if given.get(key) is not None}


def _checked(key: str, value: Any, where: str) -> Any:
    try:
        return OPTIONS[key][2](value)
    except ValueError as error:
        raise ConfigError(f"{where}: {error}") from None


def _type_name(value: Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a float", str: "a string", dict: "a table",
            list: "an array"}.get(type(value), type(value).__name__)


def to_settings(values: Mapping[str, Any]) -> Settings:
    return Settings(data_dir=Path(values["data_dir"]), host=values["host"], port=values["port"],
                    spark=_spark(values), apps_dir=Path(values["apps_dir"]),
                    max_parallel_runs=values["max_parallel_runs"], event_log=values["event_log"], bus=values["bus"],
                    metrics_port=values["metrics_port"], log_level=values["log_level"], log_format=values["log_format"],
                    capacity=_capacity(values), lineage_port=values["lineage_port"],
                    lineage_token=values["lineage_token"], openlineage_url=values["openlineage_url"],
                    openlineage_api_key=values["openlineage_api_key"], jobs_history=values["jobs_history"],
                    runs_history=values["runs_history"], lease_seconds=values["lease_seconds"],
                    grpc_security=_grpc_security(values), program_env=tuple(values["program_env"]),
                    program_user=values["program_user"],
                    migrate=bool(values["migrate"]),
                    run_credential_secret=values["run_credential_secret"], web_port=values["web_port"],
                    datasets_address=values["datasets_address"], datasets_token=values["datasets_token"],
                    run_dir_retention=values["run_dir_retention"])


def _grpc_security(values: Mapping[str, Any]) -> GrpcSecurity:
    if (values["tls_cert"] is None) != (values["tls_key"] is None):
        raise ConfigError("tls_cert, tls_key: give both (the certificate and its private key) or neither")
    if values["tls_client_ca"] is not None and values["tls_cert"] is None:
        raise ConfigError("tls_client_ca: client certificates need TLS: give tls_cert and tls_key too")
    try:
        policy = load_policy(values["auth_policy"]) if values["auth_policy"] is not None else None
    except PolicyError as error:
        raise ConfigError(str(error)) from None
    return GrpcSecurity(values["grpc_token"], values["tls_cert"], values["tls_key"], values["tls_client_ca"],
                        policy, bool(values["insecure"]))


def _flag(raw: str, variable: str) -> bool:
    if raw.lower() in ("1", "true", "yes", "on"):
        return True
    if raw.lower() in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{variable}: expected 1, true, yes or on (or 0, false, no, off), got {raw!r}")


def exposure_error(settings: Settings) -> str | None:
    """Why serving as `settings` say must not start: beyond loopback, no caller has to prove who it is
    (no token, no policy, no client certificates) and --insecure does not say that is meant."""
    security = settings.grpc_security
    if loopback(settings.host) or security.authenticated() or security.insecure:
        return None
    return (f"host {settings.host}: serving beyond loopback without authentication: give --grpc-token, "
            "--auth-policy or --tls-client-ca, or --insecure (SLUICE_INSECURE=1) to serve anyone who connects")


def _spark(values: Mapping[str, Any]) -> SparkConfig:
    """The driver's address is the launcher's own (--host) unless spark_driver_host says otherwise;
    a wildcard host leaves it to Spark (the machine's name)."""
    host = values["host"]
    try:
        conf = dict(parse_pair(pair, "spark_conf") for pair in values["spark_conf"])
        return SparkConfig(
            master=values["spark_master"],
            driver_host=values["spark_driver_host"] or ("" if host in ("", "0.0.0.0", "::") else host),
            driver_bind_address=values["spark_driver_bind_address"],
            executor_memory=values["spark_executor_memory"], executor_cores=values["spark_executor_cores"],
            packages=tuple(values["spark_packages"]), conf=conf,
            **({"spark_submit": values["spark_submit"]} if values["spark_submit"] else {}))
    except InvalidArgument as error:
        raise ConfigError(str(error)) from None


def _capacity(values: Mapping[str, Any]) -> Capacity:
    try:
        return Capacity(values["load_limit"], values["high_priority"], values["load_hard_limit"])
    except InvalidArgument as error:
        raise ConfigError(f"{error.field.replace('capacity.', 'load_')}: {error.message}") from None
