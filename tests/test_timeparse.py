"""preflight.timeparse: the one reader of operator ages and times and of report timestamps."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from preflight.timeparse import epoch, parse_age, parse_since

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize(("text", "seconds"), [("90s", 90), ("30m", 1800), ("6h", 21600), ("2d", 172800),
                                               ("4w", 4 * 7 * 86400), (" 1.5h ", 5400), ("0s", 0)])
def test_ages_in_every_unit(text: str, seconds: float) -> None:
    assert parse_age(text) == seconds


@pytest.mark.parametrize("bad", ["", "h", "30", "3y", "-5m", "5 minutes", "1e3s"])
def test_what_is_not_an_age(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_age(bad)


def test_since_is_an_age_back_from_now_or_an_iso_time() -> None:
    assert parse_since("6h", now=NOW) == NOW - timedelta(hours=6)
    assert parse_since("1w", now=NOW) == NOW - timedelta(days=7)
    assert parse_since("2026-02-28T10:00:00+00:00") == datetime(2026, 2, 28, 10, tzinfo=timezone.utc)
    assert parse_since("2026-02-28T10:00:00Z") == datetime(2026, 2, 28, 10, tzinfo=timezone.utc)
    local = parse_since("2026-02-28T10:00")
    assert local is not None and local.tzinfo is not None  # a time without zone is local time
    assert local.replace(tzinfo=None) == datetime(2026, 2, 28, 10)


def test_the_open_end_words() -> None:
    assert parse_since(None) is None and parse_since("") is None and parse_since(" Boot ") is None
    assert parse_since("all", open_words=("all",)) is None
    with pytest.raises(ValueError):
        parse_since("all")  # not an open end unless the caller says so
    with pytest.raises(ValueError):
        parse_since("boot", open_words=("all",))
    with pytest.raises(ValueError, match="yesterday"):
        parse_since("yesterday")


def test_epoch_of_every_form_a_report_holds() -> None:
    assert epoch(NOW) == NOW.timestamp()
    assert epoch(1700000000) == 1700000000.0
    assert epoch("2026-03-01T12:00:00+00:00") == NOW.timestamp()
    assert epoch("2026-03-01T12:00:00Z") == NOW.timestamp()
    naive = datetime(2026, 3, 1, 12)
    assert epoch(naive) == naive.astimezone().timestamp()
    before = datetime.now().timestamp()
    assert before - 1 <= epoch("garbage") <= before + 60  # unreadable: now
    assert before - 1 <= epoch(None) <= before + 60
