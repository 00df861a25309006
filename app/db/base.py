"""Declarative base with a constraint naming convention and portable column types."""

import re
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator
from sqlalchemy import JSON, DateTime, MetaData
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase
from sqlalchemy.types import TypeDecorator

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

PortableJSON = JSON().with_variant(JSONB(), "postgresql")


def as_utc(value: datetime) -> datetime:
    """A query bound in UTC (without a zone: read as UTC); ValueError for one whose UTC time
    falls outside years 1-9999 (a 422 at the edge, not an OverflowError in the database)."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC)
    except OverflowError as exc:
        raise ValueError("the time is out of range in UTC") from exc


def iso_only(value: Any) -> Any:
    """Pydantic reads a number as a Unix time; the API documents ISO 8601 date-times only."""
    if isinstance(value, int | float) or (isinstance(value, str) and _NUMBER.fullmatch(value)):
        raise ValueError("a date-time in ISO 8601 (2026-01-31T12:00:00Z), not a number")
    return value


_NUMBER = re.compile(r"\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*")

# A query parameter or filter field.
UTCBound = Annotated[datetime, BeforeValidator(iso_only), AfterValidator(as_utc)]


def storable(value: str) -> str:
    """A string a database column can hold: PostgreSQL text and jsonb refuse NUL characters
    (SQLite would take them; refused on both, so the API is the same everywhere)."""
    if "\x00" in value:
        raise ValueError("NUL characters cannot be stored")
    return value


def storable_json(value: Any) -> Any:
    """:func:`storable` for every key and string inside a JSON value."""
    if isinstance(value, str):
        storable(value)
    elif isinstance(value, dict):
        for key, item in value.items():
            storable(key)
            storable_json(item)
    elif isinstance(value, list):
        for item in value:
            storable_json(item)
    return value


DBText = Annotated[str, AfterValidator(storable)]  # a field stored in a text column
DBJSON = Annotated[dict[str, Any], AfterValidator(storable_json)]  # ... in a JSON column


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on every backend (SQLite stores no zone)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        assert isinstance(value, datetime)
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
