"""What every `sluice` command shares: the usage error and printing messages as text or JSON."""
from __future__ import annotations

import json

from google.protobuf import json_format

from sluice.client import parse_pairs


class UsageError(Exception):
    """Bad usage: one line on stderr, exit code 2."""


def pairs(values: list[str], what: str) -> dict[str, str]:
    try:
        return dict(parse_pairs(values, what))
    except ValueError as error:
        raise UsageError(str(error)) from error


def print_message(args, message) -> int:
    print(json.dumps(json_format.MessageToDict(message), indent=2) if args.json else
          json_format.MessageToJson(message, indent=2))
    return 0


def print_many(args, messages, text: str) -> int:
    print(json.dumps([json_format.MessageToDict(m) for m in messages], indent=2) if args.json else text)
    return 0
