"""The Spark application a program's driver runs, told to the launcher: once the SparkSession is up,
`spark_application.json` beside the attempt's result.json holds its application id (`local-...`,
`app-...` on a standalone master, `application_...` on YARN) and the driver UI's address ("" when
the UI is disabled). The launcher reads it while the program runs and records it on the run."""
from __future__ import annotations

import json
import os
from pathlib import Path

SPARK_APPLICATION_FILE = "spark_application.json"


def spark_application_path(result_path: str | Path) -> Path:
    return Path(result_path).parent / SPARK_APPLICATION_FILE


def write_spark_application(result_path: str | Path, application_id: str, ui_url: str | None) -> None:
    """Written whole (a temporary file renamed), so the launcher never reads half of it."""
    path = spark_application_path(result_path)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps({"application_id": application_id, "ui_url": ui_url or ""}), encoding="utf-8")
    os.replace(temporary, path)
