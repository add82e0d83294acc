"""Errors of the service runtime (the bus side). The domain's refusals (InvalidArgument, NotFound,
...) live in sluice.domain.errors."""
from __future__ import annotations


class MalformedMessage(Exception):
    """A bus message that cannot be handled (not decodable, wrong type, missing fields, ...).

    The consumer loop sends it to the dead-letter topic with this reason and carries on."""
