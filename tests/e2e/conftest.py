from __future__ import annotations

import os

import pytest

from tests.support.waiting import eventually  # noqa: F401 -- the e2e tests import it from here


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
