"""Durations print like Go's time.Duration.String() and parse like time.ParseDuration."""

from __future__ import annotations

import pytest

from pykubelet.common.durations import format_duration, parse_duration


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (1, "1s"),
        (10, "10s"),
        (1.5, "1.5s"),
        (59.999, "59.999s"),
        (60, "1m0s"),
        (90, "1m30s"),
        (300, "5m0s"),
        (3600, "1h0m0s"),
        (7384, "2h3m4s"),
        (3600 + 0.25, "1h0m0.25s"),
        (0.5, "500ms"),
        (0.0015, "1.5ms"),
        (0.0005, "500µs"),
        (1e-7, "100ns"),
        (-5, "-5s"),
        (-90, "-1m30s"),
        (-0.25, "-250ms"),
    ],
)
def test_format_duration_matches_go(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("10s", 10.0), ("1m30s", 90.0), ("500ms", 0.5), ("1h", 3600.0), ("0", 0.0), ("1.5s", 1.5),
     ("2h3m4s", 7384.0), ("-1m", -60.0), ("+2s", 2.0), ("300us", 0.0003), ("300µs", 0.0003), ("5ns", 5e-9)],
)
def test_parse_duration_follows_go_grammar(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("bad", ["", "10", "abc", "1x", "s", "-", "1m 30s"])
def test_parse_duration_rejects_what_go_rejects(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(bad)


def test_numbers_are_seconds_and_booleans_are_rejected() -> None:
    assert parse_duration(2) == 2.0
    with pytest.raises(ValueError):
        parse_duration(True)


@pytest.mark.parametrize("seconds", [0.5, 10.0, 90.0, 3600.0, 7384.0, 0.000123])
def test_formatted_durations_parse_back(seconds: float) -> None:
    assert parse_duration(format_duration(seconds)) == pytest.approx(seconds)
