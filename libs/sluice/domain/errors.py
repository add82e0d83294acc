"""The domain's refusals: a command or input the rules reject, whoever sent it.

They are the domain's own words; the edges translate them (gRPC status codes in
runtime/grpc_server.py, dead letters in the consumer loop, exit codes in the CLI)."""
from __future__ import annotations


class InvalidArgument(Exception):
    """Bad input from a caller; `field` names the offending field (gRPC INVALID_ARGUMENT)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class ResourceExhausted(InvalidArgument):
    """Input over a size limit; `field` names it, the message the limit (gRPC RESOURCE_EXHAUSTED).
    An InvalidArgument too: every path that refuses bad input refuses it the same way."""


class NotFound(Exception):
    """The named entity does not exist (gRPC NOT_FOUND)."""


class FailedPrecondition(Exception):
    """The request is valid but the entity's state does not allow it (gRPC FAILED_PRECONDITION)."""


class AlreadyExists(Exception):
    """An entity with that identity exists already (gRPC ALREADY_EXISTS)."""
