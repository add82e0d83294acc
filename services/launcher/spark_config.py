"""How the launcher runs spark-submit: the master, where the driver listens, executor resources,
packages and extra settings (the operator's: --spark-* options, `spark_*` configuration keys), then a
schedule's own settings (resources and tuning only: sluice.domain.spark_conf).

Masters: `local`, `local[N]`, `local[*]` and a standalone `spark://host:port` are run by the tests;
`yarn` and `k8s://https://host:port` are accepted and passed to spark-submit as they are (client deploy
mode, as every master here: the driver is the launcher's child, its exit the run's end), untested.
Nothing network-related is fixed: the driver's address is `driver_host` (by default the address the
launcher serves on, see sluice_services.config), bound on `driver_bind_address` (default: the same)."""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from sluice.domain.errors import InvalidArgument
from sluice.domain.spark_conf import check_schedule_spark_conf, check_spark_conf

DEFAULT_CONF = {
    "spark.ui.enabled": "false",
    "spark.log.level": "WARN",
    "spark.sql.shuffle.partitions": "2",
}
"""Under the operator's --spark-conf, which may set any of them (spark.ui.enabled=true for a driver UI)."""

OWN_OPTIONS = {
    "spark.master": "--spark-master", "spark.driver.host": "--spark-driver-host",
    "spark.driver.bindAddress": "--spark-driver-bind-address", "spark.executor.memory": "--spark-executor-memory",
    "spark.executor.cores": "--spark-executor-cores", "spark.jars.packages": "--spark-packages",
    "spark.submit.deployMode": "nothing: programs run in client deploy mode, their driver the launcher's child",
}
"""Settings with an option of their own, refused in --spark-conf so that one place says each."""

_LOCAL = re.compile(r"local(\[(\*|[1-9][0-9]{0,3})(,[0-9]{1,3})?\])?")
_HOST_PORT = r"[A-Za-z0-9.\-]{1,253}:[0-9]{1,5}"
_STANDALONE = re.compile(rf"spark://{_HOST_PORT}(,{_HOST_PORT})*")
_KUBERNETES = re.compile(rf"k8s://(https?://)?{_HOST_PORT}")
_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9.\-]{0,252}|\[?[0-9A-Fa-f:]{2,45}\]?")
_WILDCARDS = ("0.0.0.0", "::", "[::]")
_MEMORY = re.compile(r"[1-9][0-9]{0,6}[kKmMgGtT]?[bB]?")
_PACKAGE = re.compile(r"[A-Za-z0-9_.\-]{1,200}:[A-Za-z0-9_.\-]{1,200}:[A-Za-z0-9_.\-+]{1,100}")


def is_local(master: str) -> bool:
    return master.startswith("local")


@dataclass(frozen=True)
class SparkConfig:
    master: str = "local[*]"
    driver_host: str = ""
    """The address executors reach the driver at. "": loopback with a local master; with a cluster
    master, Spark's own choice (the machine's name), which the workers must be able to resolve."""
    driver_bind_address: str = ""
    """Where the driver listens; "": `driver_host`."""
    executor_memory: str = ""
    executor_cores: int | None = None
    packages: tuple[str, ...] = ()
    """Maven coordinates group:artifact:version, fetched by spark-submit (spark.jars.packages)."""
    conf: Mapping[str, str] = field(default_factory=dict)
    """Extra settings over DEFAULT_CONF; each spark.* (the keys of OWN_OPTIONS have options of their own)."""
    spark_submit: str = str(Path(sys.executable).parent / "spark-submit")

    def __post_init__(self) -> None:
        object.__setattr__(self, "packages", tuple(self.packages))
        object.__setattr__(self, "conf", dict(self.conf))
        self.validate()

    def validate(self) -> None:
        """InvalidArgument naming the option (as its configuration key) that is wrong."""
        if not (_LOCAL.fullmatch(self.master) or _STANDALONE.fullmatch(self.master) or self.master == "yarn"
                or _KUBERNETES.fullmatch(self.master)):
            raise InvalidArgument("spark_master", f"expected local, local[N], local[*], spark://host:port, yarn or "
                                                  f"k8s://https://host:port, got {self.master[:200]!r}")
        if self.driver_host and (not _HOST.fullmatch(self.driver_host) or self.driver_host in _WILDCARDS):
            raise InvalidArgument("spark_driver_host", f"expected a host name or an address executors can reach "
                                                       f"(not a wildcard), got {self.driver_host[:200]!r}")
        if self.driver_bind_address and not _HOST.fullmatch(self.driver_bind_address):
            raise InvalidArgument("spark_driver_bind_address",
                                  f"expected a host name or an address, got {self.driver_bind_address[:200]!r}")
        if self.executor_memory and not _MEMORY.fullmatch(self.executor_memory):
            raise InvalidArgument("spark_executor_memory", f"expected a size such as 512m or 2g, "
                                                           f"got {self.executor_memory[:200]!r}")
        if self.executor_cores is not None and not 1 <= self.executor_cores <= 1024:
            raise InvalidArgument("spark_executor_cores", f"expected 1 to 1024, got {self.executor_cores}")
        for package in self.packages:
            if not _PACKAGE.fullmatch(package):
                raise InvalidArgument("spark_packages", f"expected group:artifact:version, got {package[:200]!r}")
        check_spark_conf(self.conf, "spark_conf")
        for key in self.conf:
            if key in OWN_OPTIONS:
                raise InvalidArgument(f"spark_conf[{key!r}]", f"set by {OWN_OPTIONS[key]}")

    @property
    def effective_driver_host(self) -> str:
        return self.driver_host or ("127.0.0.1" if is_local(self.master) else "")

    @property
    def effective_bind_address(self) -> str:
        return self.driver_bind_address or self.effective_driver_host

    def settings(self, schedule_conf: Mapping[str, str] = {}) -> dict[str, str]:
        """Every --conf of a run: the defaults, the operator's, the schedule's (checked again: it came
        over the bus), then the options' own keys, which nothing overrides."""
        check_schedule_spark_conf(schedule_conf, "job.spark_conf")
        own = {"spark.driver.host": self.effective_driver_host, "spark.driver.bindAddress": self.effective_bind_address,
               "spark.executor.memory": self.executor_memory,
               "spark.executor.cores": "" if self.executor_cores is None else str(self.executor_cores)}
        return {**DEFAULT_CONF, **self.conf, **schedule_conf, **{k: v for k, v in own.items() if v}}

    def command(self, entry_point: Path, context_path: Path, schedule_conf: Mapping[str, str] = {}) -> list[str]:
        conf: Sequence[str] = [arg for k, v in sorted(self.settings(schedule_conf).items())
                               for arg in ("--conf", f"{k}={v}")]
        packages = ["--packages", ",".join(self.packages)] if self.packages else []
        return [self.spark_submit, "--master", self.master, "--deploy-mode", "client", *packages, *conf,
                str(entry_point), "--sluice-context", str(context_path)]

    def environment(self, environ: Mapping[str, str]) -> dict[str, str]:
        """SPARK_LOCAL_IP, which Spark binds by where no setting says: the bind address, else the launcher's own."""
        bind = self.effective_bind_address
        return {"SPARK_LOCAL_IP": bind} if bind else (
            {"SPARK_LOCAL_IP": environ["SPARK_LOCAL_IP"]} if "SPARK_LOCAL_IP" in environ else {})
