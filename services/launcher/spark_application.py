"""The Spark application of a running attempt, as its driver reported it (sluice.sdk.spark_application):
read from the attempt's directory while the program runs. The file is the program's, so hostile:
read without following a link, at most MAX_BYTES, and taken only when its id and address look like
what Spark writes; anything else is ignored (the run goes on without it)."""
from __future__ import annotations

import asyncio
import json
import logging
import os
import re
from pathlib import Path
from typing import Awaitable, Callable

from sluice.sdk.spark_application import SPARK_APPLICATION_FILE

log = logging.getLogger(__name__)

MAX_BYTES = 4096
POLL_SECONDS = 0.5
_APPLICATION_ID = re.compile(r"[A-Za-z0-9_.:\-]{1,200}")
_UI_URL = re.compile(r"https?://[A-Za-z0-9.\-\[\]:]{1,300}(/[A-Za-z0-9._~/\-]{0,200})?")


def read_reported(attempt_dir: Path) -> tuple[str, str] | None:
    """(application id, driver UI URL or "") from the attempt's report, None when there is none (yet) or
    it is not one."""
    try:
        fd = os.open(attempt_dir / SPARK_APPLICATION_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as file:
            data = file.read(MAX_BYTES + 1)
        document = json.loads(data) if len(data) <= MAX_BYTES else {}
        application_id, ui_url = document["application_id"], document.get("ui_url") or ""
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if not isinstance(application_id, str) or not _APPLICATION_ID.fullmatch(application_id) or \
            not isinstance(ui_url, str) or (ui_url and not _UI_URL.fullmatch(ui_url)):
        log.warning("%s: not a Spark application report; ignored", attempt_dir / SPARK_APPLICATION_FILE)
        return None
    return application_id, ui_url


async def watch(attempt_dir: Path, record: Callable[[str, str], None], ended: Awaitable,
                poll_seconds: float = POLL_SECONDS) -> None:
    """Call `record(application id, UI URL)` for the report once it appears, and once more for what
    it says when `ended` is done (the last word of a program that wrote it just before exiting)."""
    recorded = None
    while not ended.done():
        found = read_reported(attempt_dir)
        if found is not None and found != recorded:
            record(*found)
            recorded = found
        await asyncio.wait([ended], timeout=poll_seconds)
    found = read_reported(attempt_dir)
    if found is not None and found != recorded:
        record(*found)
