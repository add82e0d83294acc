"""The identifier rule for names, and the encoding that turns any key value into one path segment."""
from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from sluice.domain.datasets import DatasetSpec, KeySpec
from sluice.domain.names import (
    NAME_PATTERN,
    decode_segment,
    encode_segment,
    is_name,
    key_segment,
    relative_parts,
    validate_name,
)
from sluice.domain.errors import InvalidArgument


@pytest.mark.parametrize("name", ["experiments", "clickstream_hourly_metrics", "_private", "daily-metrics",
                                  "P", "a" * 128, "hourly_metrics_on_arrival"])
def test_names_that_follow_the_rule(name: str) -> None:
    assert validate_name("schedule.name", name) == name


@pytest.mark.parametrize("name", ["", " ", "..", ".", "../..", "/tmp", "a/b", "a.b", "9lives", "-x", "a b", "a\x00",
                                  "a" * 129, "é", "x\n", "C:\\x"])
def test_names_that_break_the_rule_name_the_field(name: str) -> None:
    with pytest.raises(InvalidArgument) as refused:
        validate_name("schedule.program.app", name)
    assert refused.value.field == "schedule.program.app"
    assert not is_name(name)


def test_the_refusal_states_the_rule() -> None:
    with pytest.raises(InvalidArgument, match=r"^schedule.program.app: must match \[A-Za-z_\]\[A-Za-z0-9_-\]\{0,127\}, "
                                              r"got '\.\./\.\.'$"):
        validate_name("schedule.program.app", "../..")
    assert NAME_PATTERN == "[A-Za-z_][A-Za-z0-9_-]{0,127}"


@given(st.text(min_size=1))
@example(".")
@example("..")
@example("...")
@example("x/../../..")
@example("a=b%2F\\c:d")
@example("\ud800")
@example("%2E%2E")
def test_any_text_is_one_segment_that_decodes_back(value: str) -> None:
    segment = encode_segment(value)
    assert segment and segment not in (".", "..")
    assert "/" not in segment and "\\" not in segment and "\x00" not in segment and "=" not in segment
    assert decode_segment(segment) == value


@pytest.mark.parametrize("value, segment", [
    ("US", "US"), ("2026-11-22", "2026-11-22"), ("9", "9"), ("São Paulo", "São Paulo"),   # unchanged, as Hive
    ("x/../..", "x%2F..%2F.."), ("..", "%2E%2E"), ("50%", "50%25"), ("a=b", "a%3Db"), ("c:\\", "c%3A%5C"),
])
def test_encoding_is_hive_s(value: str, segment: str) -> None:
    assert encode_segment(value) == segment


def test_every_path_builder_encodes_key_values() -> None:
    spec = DatasetSpec("experiments", "hourly", (KeySpec("marketplace"), KeySpec("date")), "/data/experiments/hourly")
    assert spec.default_location({"marketplace": "x/../../..", "date": ".."}) \
        == "/data/experiments/hourly/marketplace=x%2F..%2F..%2F../date=%2E%2E"
    assert key_segment("marketplace", "US") == "marketplace=US"
    with pytest.raises(InvalidArgument):
        key_segment("../x", "US")


@pytest.mark.parametrize("path", ["part-0.parquet", "sub/part-0.parquet", "_SUCCESS", ".part-0.crc", "a..b"])
def test_manifest_paths_inside_their_directory(path: str) -> None:
    assert "/".join(relative_parts("files[0].path", path)) == path


@pytest.mark.parametrize("path", ["", "/etc/passwd", "../x", "a/../../x", "a/./b", "a//b", "..", ".", "a\\..\\b",
                                  "a/", "x\x00"])
def test_manifest_paths_that_leave_or_obscure_their_directory(path: str) -> None:
    with pytest.raises(InvalidArgument) as refused:
        relative_parts("outputs[0].files[1].path", path)
    assert refused.value.field == "outputs[0].files[1].path"
