"""Log lines as text or as JSON (one object per line), with the standard library's logging.

A JSON line carries time (UTC, ISO 8601), level, logger and message, the exception when there is
one, and the ids a call passed in `extra` (IDS: schedule, job, run, trace ...), so a log search can
follow one job from its trigger to its run's end:

    log.info("job admitted", extra={"job_id": job.id, "schedule_id": job.schedule_id})
    {"time": "2026-11-22T09:00:00.123Z", "level": "INFO", "logger": "sluice.runtime.journal",
     "message": "job admitted", "job_id": "...", "schedule_id": "..."}
"""
from __future__ import annotations

import json
import logging
import sys
from datetime import datetime, timezone

LOG_FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
IDS = ("schedule_id", "job_id", "run_id", "trace_id", "attempt", "event", "state", "service")
"""The `extra` fields a JSON line carries when a call gives them."""


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = {"time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds")
                .replace("+00:00", "Z"),
                "level": record.levelname, "logger": record.name, "message": record.getMessage()}
        for name in IDS:
            value = record.__dict__.get(name)
            if value not in (None, ""):
                line[name] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def configure_logging(level: str, log_format: str = "text") -> None:
    """The root logger at `level`, writing to stderr as `log_format` says (text or json)."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}, got {log_format!r}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=level, handlers=[handler], force=True)
