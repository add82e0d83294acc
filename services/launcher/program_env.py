"""The environment a launched program gets: an allowlist of the launcher's, never all of it.

The launcher's environment holds its secrets (SLUICE_GRPC_TOKEN, SLUICE_OPENLINEAGE_API_KEY, the
event-log URL with its password in SLUICE_EVENT_LOG, cloud keys...); a program gets only what
spark-submit and a Python driver need to start, plus the names the operator adds (--program-env
NAME, repeated, or `program_env = [...]` in the configuration file). A name ending in `*` allows
every variable with that prefix."""
from __future__ import annotations

from typing import Iterable, Mapping

DEFAULT_ALLOWED = (
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "LC_*", "TZ",
    "TMPDIR", "TMP", "TEMP",
    "JAVA_HOME", "SPARK_*", "PYSPARK_*", "PYTHONPATH", "VIRTUAL_ENV",
    "HADOOP_CONF_DIR", "HADOOP_HOME", "YARN_CONF_DIR",
)
"""What spark-submit (java on PATH or JAVA_HOME, SPARK_HOME, SPARK_CONF_DIR, SPARK_LOCAL_IP...), the
Python driver (PYSPARK_PYTHON, PYTHONPATH, VIRTUAL_ENV) and a cluster manager's client (HADOOP_CONF_DIR,
YARN_CONF_DIR) need, the locale and the time zone. Nothing named SLUICE_*."""


def allowed(name: str, patterns: Iterable[str]) -> bool:
    return any(name.startswith(p[:-1]) if p.endswith("*") else name == p for p in patterns)


def program_environment(environ: Mapping[str, str], extra: Iterable[str] = (),
                        overrides: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables of `environ` that DEFAULT_ALLOWED or `extra` allow, then `overrides`."""
    patterns = (*DEFAULT_ALLOWED, *extra)
    return {**{name: value for name, value in environ.items() if allowed(name, patterns)}, **(overrides or {})}
