"""Sluice's own lineage events to an external OpenLineage backend too (Marquez, DataHub, ...).

The lineage topic carries every OpenLineage event of Sluice's runs (schedule run, program run,
Spark application: see services/launcher/lineage_events.py). With `openlineage_url` set, the
lineage service consumes that topic a second time, in a consumer group of its own, and sends
each event through the openlineage-python client's HTTP transport (its retries, API key and
compression), so a slow or unreachable backend never holds up Sluice's own lineage service.
An event the backend still refuses after the transport's retries goes to the dead-letter topic
with the reason, like any message a handler fails on.
"""
from __future__ import annotations

import asyncio
import json
from typing import Any

from openlineage.client import OpenLineageClient
from openlineage.client.transport.http import ApiKeyTokenProvider, HttpCompression, HttpConfig, HttpTransport

from sluice.runtime.errors import MalformedMessage

EXPORT_GROUP = "lineage-export"


class OpenLineageExport:
    def __init__(self, url: str, api_key: str = "", timeout: float = 10.0, gzip: bool = False) -> None:
        config = HttpConfig(url=url, timeout=timeout, compression=HttpCompression.GZIP if gzip else None)
        if api_key:
            config.auth = ApiKeyTokenProvider({"apiKey": api_key})
        self._client = OpenLineageClient(transport=HttpTransport(config))

    async def on_lineage_event(self, record: Any) -> None:
        """Send one event of the lineage topic, as it is; MalformedMessage if it is not a JSON object."""
        try:
            event = json.loads(record.value)
        except (ValueError, UnicodeDecodeError) as error:
            raise MalformedMessage(f"lineage event: not JSON ({error})") from error
        if not isinstance(event, dict):
            raise MalformedMessage("lineage event: must be a JSON object")
        # HttpTransport.emit serializes a mapping as it is (OpenLineageClient.emit takes model objects only)
        await asyncio.to_thread(self._client.transport.emit, event)
