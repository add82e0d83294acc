from __future__ import annotations

import os
import time
from typing import Callable, TypeVar

import pytest

T = TypeVar("T")


@pytest.fixture(scope="session")
def spark():
    """A local SparkSession to read what programs wrote (tests only read with it)."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    session = (SparkSession.builder.master("local[1]").appName("sluice-tests")
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "1")
               .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
               .getOrCreate())
    yield session
    session.stop()


def eventually(probe: Callable[[], T | None], timeout: float, what: str, interval: float = 0.5) -> T:
    """Poll a condition that depends on other processes (a Spark run), up to `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = probe()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)
