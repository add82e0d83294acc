"""Hypothesis strategies for the fuzz suite: protobuf messages built from their descriptors (so a new
field or RPC is covered without touching this file), byte-level mutations of serialized messages,
OpenLineage JSON bodies, HTTP paths and queries, and the nasty values every one of them draws from.

Protobuf python refuses to serialize a str field holding a lone surrogate, so strings carry two
private-use markers that `encode` swaps for invalid UTF-8 in the serialized bytes: U+E000 becomes
the encoded surrogate U+D800 (ED A0 80) and U+E001 becomes FF FE FD. Both are 3 bytes, as the
markers are, so every length prefix stays right."""
from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from datetime import datetime, timezone

from google.protobuf import descriptor as _d
from google.protobuf import message as _message
from google.protobuf import text_format
from hypothesis import strategies as st

SURROGATE_MARK, BAD_UTF8_MARK = "\ue000", "\ue001"
_MARKS = ((SURROGATE_MARK.encode(), b"\xed\xa0\x80"), (BAD_UTF8_MARK.encode(), b"\xff\xfe\xfd"))
MiB = 1024 * 1024

INT32 = (-2**31, 2**31 - 1, 0, 1, -1, 2, 3, 100, 10**6)
INT64 = (-2**63, 2**63 - 1, -2**31, 2**31 - 1, 2**53 + 1, 0, 1, -1, 10**12, 10**15, -10**15, 3600, 86400)
UINT32 = (0, 1, 2**32 - 1)
UINT64 = (0, 1, 2**63, 2**64 - 1)
FLOATS = (0.0, -0.0, 1.0, 0.5, -1.0, 1e308, -1e308, 5e-324, float("inf"), float("-inf"), float("nan"), 100.0, 101.0)
TIMESTAMP_SECONDS = (10**12, -10**12, 2**63 - 1, -2**63, 253402300799, 253402300800, -62135596800, -62135596801,
                     0, -1, 1, 1_800_000_000)
NANOS = (0, 1, 999_999_999, 10**9, -1, 2**31 - 1, -2**31)

PATHLIKE = ("../..", "/etc", "/etc/passwd", "x/../../..", "%2e%2e", "%2e%2e%2f%2e%2e", "..", ".", "./", "a/b",
            "..\\..", "C:\\Windows", "~", "~root", "/", "//", "\\\\host\\share", "file:///etc/passwd",
            "x/../../../..", "%252e%252e", "..%00", "/dev/zero", "/proc/self/environ", "$HOME", "${SLUICE_GRPC_TOKEN}")
UNICODE = ("", " ", "\x00", "a\x00b", "\u202eevil", "\u200f", "\u200b", "\ufeff", "שלום", "مرحبا", "🔥💥🧨",
           "👩‍👩‍👧‍👦", "e\u0301", "\uffff", "\U0010ffff", "\n", "\r\n", "\t", "a\nb", "'; DROP TABLE events;--",
           "*", "a=b", "a,b", "a.b", "a:b", "-", "_", "<A*256>", "<x*10000>", "<é*5000>",
           SURROGATE_MARK, "a" + SURROGATE_MARK, BAD_UTF8_MARK, "x" + BAD_UTF8_MARK + "y",
           "partition:x.y", "program:a.b.c.COMPLETED", "NaN", "-1", "99999999999999999999", "1e999")
SANE = ("fuzz", "web", "clicks", "events", "app1", "prog", "hour", "region", "eu", "us", "01", "09",
        "2024-01-01", "UTC", "Europe/Paris", "America/New_York", "Asia/Tokyo", "* * * * *", "0 * * * *",
        "*/5 * * * * *", "0 0 29 2 *", "hour", "day", "09:00", "17:30", "23:59", "24:00", "main.py", "prog.py",
        "/tmp/fuzz/data", "s3://bucket/key", "COMPLETED", "nightly", "g1")


@dataclass
class Pools:
    """Values the warm-up learned (real ids), so fuzzed requests reach past the lookups."""
    strings: list[str] = field(default_factory=list)


POOLS = Pools()


def _expand(token: str) -> str:
    """"<c*n>" stands for n times c (so strategies' reprs stay short)."""
    if token.startswith("<") and token.endswith(">") and "*" in token:
        char, count = token[1:-1].split("*")
        return char * int(count)
    return token


def strings() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(SANE),
        st.sampled_from(PATHLIKE),
        st.sampled_from(UNICODE).map(_expand),
        st.builds(lambda a, b: a + b, st.sampled_from(SANE), st.sampled_from(PATHLIKE + UNICODE[:20])),
        st.text(st.characters(exclude_categories=("Cs",), exclude_characters=SURROGATE_MARK + BAD_UTF8_MARK),
                max_size=24),
        st.deferred(lambda: st.sampled_from(POOLS.strings or list(SANE))),
    )


def ints(field_type: int) -> st.SearchStrategy[int]:
    t = _d.FieldDescriptor
    if field_type in (t.TYPE_INT32, t.TYPE_SINT32, t.TYPE_SFIXED32):
        return st.one_of(st.sampled_from(INT32), st.integers(-2**31, 2**31 - 1))
    if field_type in (t.TYPE_UINT32, t.TYPE_FIXED32):
        return st.one_of(st.sampled_from(UINT32), st.integers(0, 2**32 - 1))
    if field_type in (t.TYPE_UINT64, t.TYPE_FIXED64):
        return st.one_of(st.sampled_from(UINT64), st.integers(0, 2**64 - 1))
    return st.one_of(st.sampled_from(INT64), st.integers(-2**63, 2**63 - 1))


def scalar(fd: _d.FieldDescriptor) -> st.SearchStrategy:
    t = _d.FieldDescriptor
    if fd.type == t.TYPE_STRING:
        return strings()
    if fd.type == t.TYPE_BYTES:
        return st.one_of(st.binary(max_size=64), lineage_bodies().map(lambda body: body.data))
    if fd.type == t.TYPE_BOOL:
        return st.booleans()
    if fd.type in (t.TYPE_DOUBLE, t.TYPE_FLOAT):
        return st.one_of(st.sampled_from(FLOATS), st.floats(width=32 if fd.type == t.TYPE_FLOAT else 64))
    if fd.type == t.TYPE_ENUM:
        known = [v.number for v in fd.enum_type.values]
        return st.one_of(st.sampled_from(known), st.sampled_from((-1, 99, 2**31 - 1, -2**31)))
    return ints(fd.type)


def _repeated_count(depth: int = 0) -> st.SearchStrategy[int]:
    """Huge counts only near the top: a huge list of huge lists would take minutes to build."""
    if depth > 0:
        return st.integers(0, 3)
    return st.one_of(st.integers(0, 3), st.sampled_from((1000, 5000, 30_000)))


MAX_DEPTH = 4


def messages(descriptor: _d.Descriptor, depth: int = 0) -> st.SearchStrategy[_message.Message]:
    """Messages of this type with any subset of fields set to extreme, nasty or sane values."""
    return st.builds(_build, st.just(descriptor), _field_values(descriptor, depth))


def _field_values(descriptor: _d.Descriptor, depth: int) -> st.SearchStrategy[dict]:
    if descriptor.full_name in ("google.protobuf.Timestamp", "google.protobuf.Duration"):
        return st.fixed_dictionaries({}, optional={"seconds": st.one_of(st.sampled_from(TIMESTAMP_SECONDS),
                                                                        st.integers(-2**63, 2**63 - 1)),
                                                   "nanos": st.sampled_from(NANOS)})
    optional = {}
    for fd in descriptor.fields:
        optional[fd.name] = _value(fd, depth)
    oneofs = {o.name: [f.name for f in o.fields] for o in descriptor.oneofs if not o.name.startswith("_")}
    return st.fixed_dictionaries({}, optional=optional).flatmap(
        lambda values: st.just(values) if not oneofs else st.just(_one_per_oneof(values, oneofs)))


def _one_per_oneof(values: dict, oneofs: dict[str, list[str]]) -> dict:
    for names in oneofs.values():
        chosen = [n for n in names if n in values]
        for extra in chosen[1:]:
            values.pop(extra)
    return values


def _value(fd: _d.FieldDescriptor, depth: int) -> st.SearchStrategy:
    if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
        key_fd, value_fd = fd.message_type.fields_by_name["key"], fd.message_type.fields_by_name["value"]
        value = _single(value_fd, depth + 1)
        return st.one_of(st.dictionaries(scalar(key_fd), value, max_size=3),
                         st.builds(_huge_map, _repeated_count(depth), value))
    single = _single(fd, depth)
    if fd.is_repeated:
        return st.one_of(st.lists(single, max_size=3), st.builds(lambda n, v: [v] * n, _repeated_count(depth), single))
    return single


def _huge_map(count: int, value) -> dict:
    return {f"k{i}": value for i in range(count)}


def _single(fd: _d.FieldDescriptor, depth: int) -> st.SearchStrategy:
    if fd.message_type is None:
        return scalar(fd)
    if depth >= MAX_DEPTH:
        return st.builds(fd.message_type._concrete_class)
    return st.deferred(lambda: messages(fd.message_type, depth + 1))


def _build(descriptor: _d.Descriptor, values: dict) -> _message.Message:
    message = descriptor._concrete_class()
    for name, value in values.items():
        fd = descriptor.fields_by_name.get(name)
        if fd is None:  # Timestamp/Duration
            setattr(message, name, value)
            continue
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            target = getattr(message, name)
            for k, v in value.items():
                if fd.message_type.fields_by_name["value"].message_type is not None:
                    target[k].CopyFrom(v)
                else:
                    target[k] = v
        elif fd.is_repeated:
            if fd.message_type is not None:
                getattr(message, name).extend(value)
            else:
                getattr(message, name).extend(value)
        elif fd.message_type is not None:
            getattr(message, name).CopyFrom(value)
        else:
            setattr(message, name, value)
    return message


def encode(message: _message.Message) -> bytes:
    """Serialized, with the markers swapped for invalid UTF-8."""
    data = message.SerializeToString()
    for mark, bad in _MARKS:
        data = data.replace(mark, bad)
    return data


# -- one field of a known-good message ----------------------------------------------------------

def _field_paths(descriptor: _d.Descriptor, prefix: tuple = (), depth: int = 0) -> list[tuple]:
    """Paths (tuples of field descriptors) to every field, nested messages to MAX_DEPTH."""
    paths = []
    for fd in descriptor.fields:
        paths.append(prefix + (fd,))
        if (fd.message_type is not None and not fd.message_type.GetOptions().map_entry
                and not fd.is_repeated and depth < 3
                and fd.message_type.full_name not in ("google.protobuf.Timestamp", "google.protobuf.Duration")):
            paths += _field_paths(fd.message_type, prefix + (fd,), depth + 1)
    return paths


def one_field_changed(template: _message.Message) -> st.SearchStrategy[tuple[_message.Message, str]]:
    """The template with one field (at any depth) set to a drawn value; the field's dotted path."""
    paths = _field_paths(template.DESCRIPTOR)
    if not paths:
        return st.just((template, "-"))

    @st.composite
    def draw(draw_from):
        path = draw_from(st.sampled_from(paths))
        value = draw_from(_value(path[-1], 0 if len(path) == 1 else MAX_DEPTH - 1))
        message = type(template)()
        message.CopyFrom(template)
        target = message
        for fd in path[:-1]:
            target = getattr(target, fd.name)
        holder = type(target)()
        _build_into(holder, path[-1], value)
        target.ClearField(path[-1].name)
        target.MergeFrom(holder)
        return message, ".".join(fd.name for fd in path)
    return draw()


def _build_into(holder: _message.Message, fd: _d.FieldDescriptor, value) -> None:
    built = _build(holder.DESCRIPTOR, {fd.name: value})
    holder.MergeFrom(built)


# -- bytes: mutations, random, oversized --------------------------------------------------------

def _varint(n: int) -> bytes:
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


@st.composite
def mutated(draw, data: bytes) -> tuple[bytes, str]:
    """A byte-level mutation of a serialized message, and what was done."""
    kind = draw(st.sampled_from(("bitflip", "truncate", "insert", "unknown_field", "wrong_wire_type",
                                 "duplicate", "overlong_length", "delete")))
    n = len(data)
    if kind == "bitflip" and n:
        i, bit = draw(st.integers(0, n - 1)), draw(st.integers(0, 7))
        return data[:i] + bytes([data[i] ^ (1 << bit)]) + data[i + 1:], f"bitflip@{i}.{bit}"
    if kind == "truncate" and n:
        i = draw(st.integers(0, n - 1))
        return data[:i], f"truncate@{i}/{n}"
    if kind == "delete" and n:
        i = draw(st.integers(0, n - 1))
        j = draw(st.integers(i, min(n, i + 8)))
        return data[:i] + data[j:], f"delete[{i}:{j}]"
    if kind == "insert":
        i, junk = draw(st.integers(0, n)), draw(st.binary(min_size=1, max_size=16))
        return data[:i] + junk + data[i:], f"insert@{i}:{junk.hex()}"
    if kind == "unknown_field":
        number = draw(st.sampled_from((15, 100, 1000, 536870911)))
        wire = draw(st.sampled_from((0, 1, 2, 5)))
        payload = {0: _varint(2**64 - 1), 1: b"\xff" * 8, 2: _varint(5) + b"\x00\xff\xed\xa0\x80", 5: b"\xff" * 4}[wire]
        return data + _varint(number << 3 | wire) + payload, f"unknown_field#{number}/wt{wire}"
    if kind == "wrong_wire_type":
        number, wire = draw(st.integers(1, 16)), draw(st.sampled_from((0, 1, 2, 3, 4, 5, 6, 7)))
        payload = {0: _varint(1), 1: b"\x00" * 8, 2: _varint(3) + b"abc", 5: b"\x00" * 4}.get(wire, b"")
        return _varint(number << 3 | wire) + payload + data, f"field#{number}_as_wt{wire}"
    if kind == "overlong_length":
        return b"\x0a" + _varint(2**31) + data, "length_prefix_2^31"
    return data + data, "duplicate"


def random_bytes() -> st.SearchStrategy[bytes]:
    return st.one_of(st.binary(max_size=128), st.sampled_from((b"", b"\x00", b"\xff" * 10, b"\x0a\xff\xff\xff\xff\x0f",
                                                               b"\x08" + b"\xff" * 10 + b"\x01")))


OVERSIZED = (300 * 1024, 1100 * 1024, 4 * MiB + 1024)
"""Over the bus limit (256 KiB), over the lineage body limit and the outbox's (1 MiB), over gRPC's 4 MiB."""


# -- JSON bodies for the lineage endpoint (and the lineage topic, and RecordEvent) --------------

@dataclass(frozen=True)
class Body:
    data: bytes
    label: str
    headers: tuple[tuple[str, str], ...] = ()


EVENT_TIMES = ("2026-11-22T09:00:00+00:00", "9999-12-31T23:59:59Z", "0001-01-01T00:00:00Z", "+275760-09-13T00:00:00Z",
               "2026-02-30T00:00:00Z", "2026-11-22T09:00:00", "1e12", "", "now", "2026-11-22T25:61:61Z")


def _event(run_id, job_ns, job_name, event_type="START", event_time=EVENT_TIMES[0], parent=None, inputs=(), outputs=()):
    run = {"runId": run_id, "facets": {}}
    if parent is not None:
        run["facets"]["parent"] = {"_producer": "x", "_schemaURL": "x", "run": {"runId": parent[0]},
                                   "job": {"namespace": parent[1], "name": parent[2]}}
    return {"eventType": event_type, "eventTime": event_time, "producer": "https://example.com/fuzz",
            "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent",
            "run": run, "job": {"namespace": job_ns, "name": job_name},
            "inputs": [{"namespace": job_ns, "name": n} for n in inputs],
            "outputs": [{"namespace": job_ns, "name": n} for n in outputs]}


JSON_ANY = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | strings(),
                        lambda children: st.lists(children, max_size=3) | st.dictionaries(strings(), children, max_size=3),
                        max_leaves=8)
UUIDS = ("0176a8c2-fe01-7439-87e6-56a1a1b4e6f5", "not-a-uuid", "", "../../etc", "00000000-0000-0000-0000-000000000000")


def _json_bytes(obj) -> bytes:
    text = json.dumps(obj, ensure_ascii=False)
    return text.replace(SURROGATE_MARK, "\\ud800").replace(BAD_UTF8_MARK, "\\udfff").encode("utf-8", "surrogatepass")


@st.composite
def lineage_bodies(draw) -> Body:
    kind = draw(st.sampled_from(("event", "event_field", "json", "raw", "deep", "bignum", "huge", "gzip")))
    base = _event(draw(st.sampled_from(UUIDS)), "fuzz", "job", draw(st.sampled_from(("START", "COMPLETE", "FAIL", "X"))),
                  draw(st.sampled_from(EVENT_TIMES)),
                  draw(st.none() | st.tuples(st.sampled_from(UUIDS), strings(), strings())),
                  draw(st.lists(strings(), max_size=2)), draw(st.lists(strings(), max_size=2)))
    if kind == "event":
        base["job"] = {"namespace": draw(strings()), "name": draw(strings())}
        return Body(_json_bytes(base), "event")
    if kind == "event_field":
        where = draw(st.sampled_from(("eventType", "eventTime", "run", "job", "run.runId", "job.name", "job.namespace",
                                      "inputs", "run.facets", "run.facets.parent", "producer")))
        value = draw(JSON_ANY)
        target, *rest = where.split(".")
        holder = base
        for part in [target, *rest][:-1]:
            holder = holder[part]
        holder[where.split(".")[-1]] = value
        return Body(_json_bytes(base), f"event with {where}={_short(repr(value), 60)}")
    if kind == "json":
        return Body(_json_bytes(draw(JSON_ANY)), "json")
    if kind == "raw":
        data = draw(random_bytes() | st.sampled_from((b'{"eventType": "\\ud800"}', b'{"a": "\xed\xa0\x80"}',
                                                      b"{", b'{"run": {', b"\xef\xbb\xbf{}", b"[]", b"null", b"1e99999")))
        if draw(st.booleans()):
            whole = _json_bytes(base)
            data = whole[:draw(st.integers(0, len(whole) - 1))]
            return Body(data, "truncated event")
        return Body(data, "raw")
    if kind == "deep":
        depth = draw(st.sampled_from((100, 1000, 100_000)))
        return Body(b"[" * depth + b"]" * depth, f"nested[{depth}]")
    if kind == "bignum":
        base["run"]["facets"]["n"] = {"_producer": "x", "_schemaURL": "x"}
        text = _json_bytes(base).replace(b'"_producer": "x"', b'"_producer": ' + b"9" * 5000, 1)
        return Body(text, "5000-digit int")
    if kind == "huge":
        size = draw(st.sampled_from(OVERSIZED))
        base["job"]["description"] = "x" * size
        return Body(_json_bytes(base), f"event of {size} bytes")
    import gzip
    body = draw(st.sampled_from(("bomb", "notgzip", "ok")))
    if body == "bomb":
        return Body(gzip.compress(b" " * (8 * MiB)), "gzip bomb 8 MiB", (("Content-Encoding", "gzip"),))
    if body == "notgzip":
        return Body(_json_bytes(base), "json labelled gzip", (("Content-Encoding", "gzip"),))
    return Body(gzip.compress(_json_bytes(base)), "gzip event", (("Content-Encoding", "gzip"),))


def _short(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else f"{text[:limit]}…(+{len(text) - limit})"


def describe(message: _message.Message, limit: int = 160) -> str:
    try:
        text = text_format.MessageToString(message, as_one_line=True, use_short_repeated_primitives=True)
    except Exception:  # noqa: BLE001
        text = repr(message)
    return f"{message.DESCRIPTOR.name}{{{_short(text, limit)}}}"


def describe_bytes(data: bytes, limit: int = 48) -> str:
    return f"{len(data)}B:{data[:limit].hex()}{'…' if len(data) > limit else ''}"


def pack_double(x: float) -> bytes:
    return struct.pack("<d", x)


def now_seconds() -> int:
    return int(datetime.now(timezone.utc).timestamp())
