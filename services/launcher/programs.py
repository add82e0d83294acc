"""Ports for finding and starting programs, with their adapters."""
from __future__ import annotations

import asyncio
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, Sequence

from sluice.domain.common import ProgramRef


class ProgramCatalog(Protocol):
    def entry_point(self, program: ProgramRef) -> Path | None:
        """The program's PySpark entry point, None when the program is unknown."""
        ...


class DirectoryCatalog:
    """Programs laid out as <apps_dir>/<app>/<program>.py (the examples/ folder follows it)."""

    def __init__(self, apps_dir: Path) -> None:
        self._apps_dir = apps_dir

    def entry_point(self, program: ProgramRef) -> Path | None:
        path = self._apps_dir / program.app / f"{program.program}.py"
        return path if path.is_file() else None


class ProgramProcess(Protocol):
    @property
    def pid(self) -> int: ...

    async def wait(self) -> int:
        """Wait for the program to end; its exit code."""
        ...


class ProgramSubmitter(Protocol):
    async def submit(self, entry_point: Path, context_path: Path, log_path: Path) -> ProgramProcess: ...


@dataclass(frozen=True)
class SparkConfig:
    master: str = "local[*]"
    conf: dict[str, str] = field(default_factory=lambda: {
        "spark.ui.enabled": "false",
        "spark.log.level": "WARN",
        "spark.sql.shuffle.partitions": "2",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
    })
    spark_submit: str = str(Path(sys.executable).parent / "spark-submit")


class SparkSubmitter:
    """Starts a program with spark-submit against the configured master (local[*] by default)."""

    def __init__(self, config: SparkConfig = SparkConfig()) -> None:
        self._config = config

    def command(self, entry_point: Path, context_path: Path) -> list[str]:
        conf: Sequence[str] = [arg for k, v in sorted(self._config.conf.items()) for arg in ("--conf", f"{k}={v}")]
        return [self._config.spark_submit, "--master", self._config.master, *conf, str(entry_point),
                "--sluice-context", str(context_path)]

    async def submit(self, entry_point: Path, context_path: Path, log_path: Path) -> asyncio.subprocess.Process:
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
               "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1")}
        with open(log_path, "ab") as log_file:
            return await asyncio.create_subprocess_exec(
                *self.command(entry_point, context_path), stdin=asyncio.subprocess.DEVNULL,
                stdout=log_file, stderr=asyncio.subprocess.STDOUT, env=env, start_new_session=True,
            )
