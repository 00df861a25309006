"""Timestamps as the API writes them: ISO 8601, in UTC."""

from datetime import datetime


def parse_utc(value: str) -> datetime:
    """An ISO 8601 timestamp from the API, which must carry the UTC zone."""
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    offset = parsed.utcoffset()
    assert offset is not None, value
    assert offset.total_seconds() == 0, value
    return parsed
