"""Spark settings as they enter Sluice: a launcher's `--spark-conf` (the operator's) and a schedule's
`spark_conf` (anyone allowed to write schedules). Both are hostile text that ends up on spark-submit's
command line; a schedule's is also limited to tuning, because its writer is not the program's author
nor the launcher's operator: a setting that loads code (extraJavaOptions, jars, packages, plugins,
listeners, class names), sets the environment (executorEnv), runs a command (discovery scripts, the
Python executable), moves the driver or where data and logs are written (master, driver host and
ports, event-log and local dirs, warehouse), or changes security (authentication, redaction, ACLs)
would break the least-privilege sandbox of programs (sluice_services.launcher.program_env) and is
refused by name."""
from __future__ import annotations

import re
from typing import Mapping

from sluice.domain import bounds
from sluice.domain.errors import InvalidArgument, ResourceExhausted

MAX_ENTRIES = 64
MAX_KEY_BYTES = 200
MAX_VALUE_BYTES = 1024
MAX_TOTAL_BYTES = 16 * 1024
"""Keys and values, UTF-8, summed: a schedule's settings travel in every job message."""

_KEY = re.compile(r"spark\.[A-Za-z0-9][A-Za-z0-9_.\-]*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

SCHEDULE_KEYS = (
    "spark.executor.memory", "spark.executor.memoryOverhead", "spark.executor.memoryOverheadFactor",
    "spark.executor.cores", "spark.executor.instances", "spark.cores.max", "spark.task.cpus",
    "spark.task.maxFailures", "spark.driver.memory", "spark.driver.memoryOverhead", "spark.driver.cores",
    "spark.driver.maxResultSize", "spark.default.parallelism", "spark.memory.fraction",
    "spark.memory.storageFraction", "spark.memory.offHeap.enabled", "spark.memory.offHeap.size",
    "spark.dynamicAllocation.*", "spark.speculation", "spark.speculation.*", "spark.network.timeout",
    "spark.executor.heartbeatInterval", "spark.locality.wait", "spark.locality.wait.*", "spark.log.level",
    "spark.python.worker.memory", "spark.python.worker.reuse", "spark.shuffle.compress", "spark.rdd.compress",
    "spark.reducer.maxSizeInFlight", "spark.shuffle.file.buffer", "spark.sql.shuffle.partitions",
    "spark.sql.adaptive.enabled", "spark.sql.adaptive.coalescePartitions.enabled",
    "spark.sql.adaptive.advisoryPartitionSizeInBytes", "spark.sql.adaptive.skewJoin.enabled",
    "spark.sql.autoBroadcastJoinThreshold", "spark.sql.broadcastTimeout", "spark.sql.files.maxPartitionBytes",
    "spark.sql.files.openCostInBytes", "spark.sql.session.timeZone", "spark.sql.ansi.enabled",
    "spark.sql.sources.partitionOverwriteMode", "spark.sql.execution.arrow.pyspark.enabled",
)
"""What a schedule may set: resources, parallelism, timeouts and query tuning (numbers, sizes,
booleans, a zone), nothing that names code, a command, a path, an address or a credential. A
trailing `*` allows the keys under that prefix (each of them a number or a flag)."""


def schedule_key_allowed(key: str) -> bool:
    return any(key.startswith(p[:-1]) if p.endswith("*") else key == p for p in SCHEDULE_KEYS)


def check_spark_conf(conf: Mapping[str, str], path: str) -> None:
    """InvalidArgument (or ResourceExhausted) naming `path` unless every key is `spark.` followed by
    letters, digits, `_`, `-` and dots, and no key or value holds a control character (a newline
    would start another line of spark-defaults or a log) and the sizes are within bounds."""
    if len(conf) > MAX_ENTRIES:
        raise ResourceExhausted(path, f"{len(conf)} settings exceed the limit of {MAX_ENTRIES}")
    total = 0
    for key, value in conf.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise InvalidArgument(path, f"keys and values must be strings, got {key!r}: {value!r}")
        where = f"{path}[{key[:MAX_KEY_BYTES]!r}]"
        if bounds.utf8_size(key) > MAX_KEY_BYTES or not _KEY.fullmatch(key):
            raise InvalidArgument(where, "a key must be spark. then letters, digits, '_', '-' or '.', "
                                         f"at most {MAX_KEY_BYTES} bytes")
        bounds.check_text(where, value, MAX_VALUE_BYTES)
        if _CONTROL.search(value):
            raise InvalidArgument(where, "the value holds a control character (newline, tab, NUL...)")
        total += bounds.utf8_size(key) + bounds.utf8_size(value)
    if total > MAX_TOTAL_BYTES:
        raise ResourceExhausted(path, f"{total} bytes of keys and values exceed the limit of {MAX_TOTAL_BYTES}")


def check_schedule_spark_conf(conf: Mapping[str, str], path: str) -> None:
    """`check_spark_conf`, then only keys of SCHEDULE_KEYS, and no `${...}` in a value (Spark
    substitutes ${env:NAME} and ${system:name} from the driver's environment)."""
    check_spark_conf(conf, path)
    for key, value in conf.items():
        if not schedule_key_allowed(key):
            raise InvalidArgument(f"{path}[{key!r}]", "a schedule may set only resources and tuning "
                                  "(executor and driver memory and cores, parallelism, timeouts, spark.sql tuning: "
                                  "README 'Spark settings'); code, environment, commands, paths, addresses and "
                                  "security are the launcher's (--spark-conf)")
        if "${" in value:
            raise InvalidArgument(f"{path}[{key!r}]", "the value holds '${': Spark would substitute it "
                                                      "from the driver's environment")


def parse_pair(text: str, path: str) -> tuple[str, str]:
    """`key=value` (the CLI's --spark-conf and the launcher's) split at the first `=`."""
    key, equals, value = text.partition("=")
    if not equals or not key:
        raise InvalidArgument(path, f"expected key=value, got {text[:200]!r}")
    return key.strip(), value
