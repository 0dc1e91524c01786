"""The one reader of ages and times given by operators and stored in reports.

- `parse_age("30m")` -> seconds: a number (fractions allowed) and a unit s, m, h, d or w;
- `parse_since(text)` -> an aware datetime, or None for the open end ('boot' by default, or
  whatever words the caller names); the text is an age (counted back from now), or an ISO time
  (a time without zone is local time);
- `epoch(when)` -> Unix time of a datetime, a number or an ISO string (a report's `started`);
  anything unreadable is now.

Bad text raises ValueError; the command line turns that into a one-line usage error naming
its option.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from datetime import datetime, timedelta, timezone
from typing import Any

from preflight import lazyre

UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}
_AGE = lazyre.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")


def parse_age(text: str) -> float:
    """'90s', '30m', '6h', '2d', '4w', '1.5h' -> seconds. Raises ValueError otherwise."""
    m = _AGE.match(text or "")
    if not m:
        raise ValueError(f"{text!r} is not an age (30m, 6h, 2d, 4w)")
    return float(m.group(1)) * UNIT_S[m.group(2)]


def _iso(text: str) -> datetime:
    t = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    return t if t.tzinfo else t.astimezone()


def parse_since(text: str | None, now: datetime | None = None,
                open_words: Iterable[str] = ("boot",)) -> datetime | None:
    """A window's start: None for no text or one of `open_words`, else now minus an age, or an
    ISO time. Raises ValueError for anything else."""
    if text is None or text.strip().lower() in ("", *open_words):
        return None
    if _AGE.match(text):
        return (now or datetime.now(timezone.utc)) - timedelta(seconds=parse_age(text))
    try:
        return _iso(text)
    except ValueError:
        raise ValueError(f"{text!r} is neither an age nor an ISO time") from None


def epoch(when: Any) -> float:
    """Unix time of a datetime (naive: local time), a number, or an ISO string; now otherwise."""
    if isinstance(when, datetime):
        return (when if when.tzinfo else when.astimezone()).timestamp()
    if isinstance(when, (int, float)) and not isinstance(when, bool):
        return float(when)
    if isinstance(when, str) and when.strip():
        try:
            return _iso(when).timestamp()
        except ValueError:
            return time.time()
    return time.time()
