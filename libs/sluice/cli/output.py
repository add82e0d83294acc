"""What every `sluice` command shares: the usage and refusal errors, and printing messages as text or JSON."""
from __future__ import annotations

import json
from typing import Sequence

from google.protobuf import descriptor, json_format

from sluice.client import parse_pairs


class UsageError(Exception):
    """Bad usage: one line on stderr, exit code 2."""


class Refused(Exception):
    """A request the CLI refuses itself, as the server would (an unknown id: NOT_FOUND): one line on
    stderr, then `details` (one per line, e.g. the candidates of an ambiguous id prefix); exit code 1."""

    def __init__(self, code: str, message: str, details: Sequence[str] = ()) -> None:
        super().__init__(f"{code}: {message}")
        self.details = tuple(details)


def pairs(values: list[str], what: str) -> dict[str, str]:
    try:
        return dict(parse_pairs(values, what))
    except ValueError as error:
        raise UsageError(str(error)) from error


def jsonable(message) -> dict:
    """The message as protobuf's JSON mapping, except 64-bit integers as numbers (MessageToDict writes
    them as strings); durations and timestamps stay strings ("7200s", RFC 3339)."""
    value = json_format.MessageToDict(message)
    _numbers(message.DESCRIPTOR, value)
    return value


_INT64 = {descriptor.FieldDescriptor.TYPE_INT64, descriptor.FieldDescriptor.TYPE_UINT64,
          descriptor.FieldDescriptor.TYPE_SINT64, descriptor.FieldDescriptor.TYPE_FIXED64,
          descriptor.FieldDescriptor.TYPE_SFIXED64}


def _numbers(message_type: descriptor.Descriptor, value: dict) -> None:
    for field in message_type.fields:
        if field.json_name not in value:
            continue
        found = value[field.json_name]
        if field.type in _INT64:
            value[field.json_name] = [int(v) for v in found] if isinstance(found, list) else int(found)
        elif field.message_type is not None and not field.message_type.full_name.startswith("google.protobuf."):
            if field.message_type.GetOptions().map_entry:
                entry = field.message_type.fields_by_name["value"]
                for key, item in found.items():
                    if entry.type in _INT64:
                        found[key] = int(item)
                    elif entry.message_type is not None and isinstance(item, dict):
                        _numbers(entry.message_type, item)
            else:
                for item in found if isinstance(found, list) else [found]:
                    _numbers(field.message_type, item)


def print_json(value: object) -> None:
    print(json.dumps(value, indent=2))


def print_message(args, message) -> int:
    """The message as JSON (numbers as numbers), with --json or without: the detail view."""
    print_json(jsonable(message))
    return 0


def print_many(args, messages, text: str) -> int:
    if args.json:
        print_json([jsonable(m) for m in messages])
    else:
        print(text)
    return 0
