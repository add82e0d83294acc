"""Offline commands for operators: read the event log and the dead-letter topic directly, with no
server running (`sluice log ...`, `sluice dlq ...`; `replay` and `rebuild` beside this module). They find the log and the bus as the servers
do: --event-log / --bus / --data-dir, the SLUICE_* variables, or a --config file."""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections import Counter
from typing import Any

from sluice.bus.port import Record
from sluice.cli import render
from sluice.eventlog.batched import expand_all
from sluice.eventlog.port import RecordedEvent
from sluice_services.cli.offline import OperatorError, add_sources, offline, open_bus, open_log
from sluice_services.cli.progress import Progress, progress
from sluice_services.sre import dead_letters
from sluice_services.sre.dead_letters import letter_id as _letter_id, letter_json as _letter_json

DRAIN_IDLE_SECONDS = 2.0


def add_commands(commands: argparse._SubParsersAction) -> None:
    log = commands.add_parser("log", help="read the event log (offline)").add_subparsers(metavar="ACTION")
    stats = log.add_parser("stats", help="head position, events per stream category and per type")
    tail = log.add_parser("tail", help="the last events")
    tail.add_argument("-n", type=int, default=20, help="how many (default 20)")
    show = log.add_parser("show", help="every event of one stream, with its data")
    show.add_argument("stream")
    read = log.add_parser("read", help="events after a position, with their data")
    read.add_argument("--from", dest="after", type=int, default=0, metavar="POSITION",
                      help="start after this position (default 0: the beginning)")
    read.add_argument("--limit", type=int, default=100)
    for parser, handler in ((stats, _log_stats), (tail, _log_tail), (show, _log_show), (read, _log_read)):
        add_sources(parser)
        parser.set_defaults(handler=offline(handler), server_mode=True)

    dlq = commands.add_parser("dlq", help="dead-lettered bus messages (offline)").add_subparsers(metavar="ACTION")
    listing = dlq.add_parser("list", help="every dead letter: id, source, reason")
    show_one = dlq.add_parser("show", help="one dead letter with its headers and bytes")
    show_one.add_argument("id", help="PARTITION/OFFSET in the dead-letter topic, as `dlq list` prints it")
    replay = dlq.add_parser("replay", help="publish dead letters again to the topic they came from")
    replay.add_argument("ids", nargs="+", metavar="ID")
    replay.add_argument("--force", action="store_true", help="replay also what was replayed before")
    for parser, handler in ((listing, _dlq_list), (show_one, _dlq_show), (replay, _dlq_replay)):
        add_sources(parser)
        parser.set_defaults(handler=offline(handler), server_mode=True)



# -- sluice log ---------------------------------------------------------------------------------

def _log_stats(settings, args) -> int:
    log = open_log(settings)
    try:
        categories, types, count, after = Counter(), Counter(), 0, 0
        with progress(args, "reading the log", log.head_position(), unit="position") as reading:
            while records := log.read_all(after, 5000):
                events = expand_all(records)
                for event in events:
                    categories[_category(event.stream)] += 1
                    types[event.type] += 1
                count += len(events)
                after = records[-1].position
                reading.reach(after)
        head = log.head_position()
    finally:
        log.close()
    if args.json:
        print(json.dumps({"head_position": head, "events": count, "categories": dict(categories),
                          "types": dict(types)}, indent=2))
        return 0
    print(f"head position {head}, {count} events\n")
    print(render.table(("STREAM CATEGORY", "EVENTS"), sorted(categories.items())))
    print()
    print(render.table(("EVENT TYPE", "EVENTS"), sorted(types.items(), key=lambda item: (-item[1], item[0]))))
    return 0


def _log_tail(settings, args) -> int:
    if args.n < 1:
        raise OperatorError(f"-n: must be at least 1, got {args.n}")
    log = open_log(settings)
    try:
        head = log.head_position()
        after, events = max(0, head - args.n), []
        while len(events) < args.n and after > 0:  # positions may have gaps: widen until enough
            events = _read_from(log, after, head)
            after = max(0, after - args.n)
        if len(events) < args.n:
            events = _read_from(log, 0, head)
    finally:
        log.close()
    return _print_events(args, events[-args.n:], with_data=False)


def _log_show(settings, args) -> int:
    log = open_log(settings)
    try:
        from sluice_services.streams import read_stream  # a command's own import: `sluice --help` loads no service
        events = read_stream(log, args.stream)
    finally:
        log.close()
    if not events:
        raise OperatorError(f"no stream {args.stream!r} in the event log (see `sluice log stats`)")
    return _print_events(args, events, with_data=True)


def _log_read(settings, args) -> int:
    if args.limit < 1:
        raise OperatorError(f"--limit: must be at least 1, got {args.limit}")
    log = open_log(settings)
    try:
        head = log.head_position()
        if args.after < 0 or args.after > head:
            raise OperatorError(f"--from: position {args.after} is outside the log (0 to {head})")
        events = expand_all(log.read_all(args.after, args.limit))
    finally:
        log.close()
    return _print_events(args, events, with_data=True)


def _read_from(log, after: int, head: int) -> list[RecordedEvent]:
    events = []
    while batch := log.read_all(after, 5000):
        events += expand_all(batch)
        after = batch[-1].position
        if after >= head:
            break
    return events


def _print_events(args, events: list[RecordedEvent], with_data: bool) -> int:
    if args.json:
        print(json.dumps([_event_json(e) for e in events], indent=2))
        return 0
    rows = [(e.position, e.recorded_at.strftime("%Y-%m-%d %H:%M:%S"), e.stream, e.version, e.type,
             _data_text(e.data) if with_data else "") for e in events]
    headers = ("POSITION", "RECORDED", "STREAM", "VERSION", "TYPE", "DATA" if with_data else "")
    print(render.table(headers, rows))
    return 0


def _event_json(event: RecordedEvent) -> dict[str, Any]:
    try:
        data: Any = json.loads(event.data)
    except (ValueError, UnicodeDecodeError):
        data = bytes(event.data).hex()
    return {"position": event.position, "stream": event.stream, "version": event.version, "type": event.type,
            "id": event.id, "recorded_at": event.recorded_at.isoformat(), "metadata": dict(event.metadata),
            "data": data}


def _data_text(data: bytes, width: int = 120) -> str:
    text = bytes(data).decode("utf-8", errors="replace")
    return text if len(text) <= width else text[: width - 1] + "…"


def _category(stream: str) -> str:
    return stream.split("-", 1)[0] + "-*" if "-" in stream else stream


# -- sluice dlq ---------------------------------------------------------------------------------

def _dlq_list(settings, args) -> int:
    with progress(args, "reading dead letters", unit="letter") as reading:
        letters = asyncio.run(_dead_letters(settings, reading))
    if args.json:
        print(json.dumps([_letter_json(r) for r in letters], indent=2))
        return 0
    rows = [(_letter_id(r), r.header("source-topic"), r.header("consumer-group"), len(r.value),
             r.header("reason")[:100]) for r in letters]
    print(render.table(("ID", "SOURCE TOPIC", "GROUP", "BYTES", "REASON"), rows) if rows else "no dead letters")
    return 0


def _dlq_show(settings, args) -> int:
    record = _find(asyncio.run(_dead_letters(settings)), args.id)
    if args.json:
        print(json.dumps(_letter_json(record), indent=2))
        return 0
    for name, value in record.headers:
        print(render.printable(f"{name}: {value.decode('utf-8', errors='replace')}"))
    print(render.printable(f"key: {record.key.decode('utf-8', errors='replace') if record.key else '-'}"))
    print(f"bytes ({len(record.value)}): {record.value[:512].hex()}{'…' if len(record.value) > 512 else ''}")
    return 0


def _dlq_replay(settings, args) -> int:
    letters = asyncio.run(_dead_letters(settings))
    chosen = [_find(letters, letter_id) for letter_id in args.ids]
    log = open_log(settings)
    try:
        done = dead_letters.replayed_ids(log)
        again = [_letter_id(r) for r in chosen if _letter_id(r) in done]
        if again and not args.force:
            raise OperatorError(f"already replayed: {', '.join(again)} (--force replays them again)")
        asyncio.run(_republish(settings, chosen))
        dead_letters.record_replays(log, chosen)
    finally:
        log.close()
    for record in chosen:
        print(render.printable(f"replayed {_letter_id(record)} to {record.header('source-topic')}"))
    return 0


async def _dead_letters(settings, reading: Progress = Progress()) -> list[Record]:
    bus = open_bus(settings)
    try:
        return await dead_letters.drain(bus, DRAIN_IDLE_SECONDS, reading.advance)
    finally:
        await bus.close()


async def _republish(settings, records: list[Record]) -> None:
    bus = open_bus(settings)
    producer = bus.producer()
    try:
        await dead_letters.republish(producer, records)
    finally:
        await producer.close()
        await bus.close()


def _find(records: list[Record], letter_id: str) -> Record:
    found = dead_letters.find(records, letter_id)
    if found is None:
        raise OperatorError(f"no dead letter {letter_id!r} (see `sluice dlq list`)")
    return found
