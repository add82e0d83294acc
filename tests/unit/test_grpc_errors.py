"""How grpc_errors answers what a handler raises: domain refusals as their status naming the field, an event
the log holds that this release cannot read as DATA_LOSS naming it (not UNKNOWN with a traceback)."""
from __future__ import annotations

import grpc
import pytest

from sluice.domain.errors import InvalidArgument
from sluice.eventlog.codec import UndecodableEvent
from sluice.eventlog.port import RecordedEvent
from sluice.runtime.grpc_server import grpc_errors


class Aborted(Exception):
    pass


class Context:
    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise Aborted(code, details)


class Servicer:
    def __init__(self, error: Exception) -> None:
        self.error = error

    @grpc_errors
    async def Get(self, request, context):
        raise self.error


CORRUPT = RecordedEvent("e-1", "queue", 7, 42, "JobsAdmitted", b'{"jobs": [', {}, None)


@pytest.mark.parametrize("error, code, says", [
    (InvalidArgument("name", "must not be empty"), grpc.StatusCode.INVALID_ARGUMENT, "name"),
    (UndecodableEvent(CORRUPT, ValueError("Expecting value")), grpc.StatusCode.DATA_LOSS,
     "stream queue version 7 at position 42: JobsAdmitted"),
])
async def test_a_handlers_error_is_answered_with_its_status(error, code, says):
    with pytest.raises(Aborted) as aborted:
        await Servicer(error).Get(None, Context())
    assert aborted.value.args[0] is code and says in aborted.value.args[1]
