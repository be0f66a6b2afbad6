"""The source header's value format (standard library only: the driver writes it, the provider reads it)."""

from __future__ import annotations

import pytest

from airflow_ckpt_provider.source_header import SOURCE_HEADER, format_source, parse_source, source_of


def test_round_trip_with_a_dotted_topic() -> None:
    assert parse_source(format_source("orders.v1-eu", 7, 123456789012)) == ("orders.v1-eu", 7, 123456789012)


@pytest.mark.parametrize("value", [None, b"", b"orders", b"orders:1", b"orders:x:3", b":1:2", b"t:-1:2",
                                   b"\xff\xfe:1:2"])
def test_anything_else_is_no_source(value: bytes | None) -> None:
    assert parse_source(value) is None


def test_the_first_header_of_that_name_counts() -> None:
    headers = [("trace", b"abc"), (SOURCE_HEADER, b"t:0:5"), (SOURCE_HEADER, b"t:0:6")]
    assert source_of(headers) == ("t", 0, 5) and source_of([("trace", b"t:0:5")]) is None
