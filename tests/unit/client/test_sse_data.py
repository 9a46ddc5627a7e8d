"""The SDK's reader of server-sent events, as a followed job log arrives."""

from __future__ import annotations

from aicenter.client._jobs import sse_data


def test_messages_in_order_pings_skipped_until_the_end_event() -> None:
    stream = [
        ": ping - 2026-01-01 00:00:00",
        "",
        "id: 4",
        "data: one",
        "",
        "id: 5",
        "data: ",  # an empty output line stays a line
        "",
        ": ping - 2026-01-01 00:00:15",
        "",
        "id: 11",
        "data: two",
        "data: lines",
        "",
        "event: end",
        'data: {"offset": 11}',
        "",
        "data: after the end",
        "",
    ]
    assert list(sse_data(iter(stream))) == ["one", "", "two\nlines"]


def test_a_stream_cut_before_its_end_event_yields_what_completed() -> None:
    assert list(sse_data(iter(["data: whole", "", "data: cut"]))) == ["whole"]
