"""Errors that cross the service runtime boundary."""
from __future__ import annotations


class MalformedMessage(Exception):
    """A bus message that cannot be handled (not decodable, wrong type, missing fields, ...).

    The consumer loop sends it to the dead-letter topic with this reason and carries on."""


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
