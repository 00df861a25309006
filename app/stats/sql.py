"""SQL the two backends spell differently: date arithmetic, and hints for SQLite's planner.

SQLite keeps no statistics unless ANALYZE is run, so its planner guesses, and for /stats over
many tasks some guesses cost a hundredfold (bench/stats_queries.py). PostgreSQL plans from its
own statistics: there the hints compile to the plain expressions.
"""

from typing import Any

from sqlalchemy import ColumnClause, Float, String, literal_column
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

# Shares of the rows a condition keeps. Constants, not parameters: likelihood() takes a literal.
# A time bound: a /stats window is usually a small slice of history.
NARROW: ColumnClause[Any] = literal_column("0.05")
QUARTER: ColumnClause[Any] = literal_column("0.25")  # one status of four
HALF: ColumnClause[Any] = literal_column("0.5")  # one task source of a few (github, gitlab...)


class seconds_between(FunctionElement[float]):
    """seconds_between(start, end): end - start in seconds."""

    type = Float()
    inherit_cache = True


@compiles(seconds_between, "sqlite")
def _seconds_sqlite(element: seconds_between, compiler: SQLCompiler, **kw: Any) -> str:
    # UTCDateTime stores naive UTC text on SQLite, which julianday() reads as UTC.
    start, end = (compiler.process(clause, **kw) for clause in element.clauses)
    return f"((julianday({end}) - julianday({start})) * 86400.0)"


@compiles(seconds_between)
def _seconds_default(element: seconds_between, compiler: SQLCompiler, **kw: Any) -> str:
    # PostgreSQL, the service's other backend: the timestamptz difference is an interval.
    start, end = (compiler.process(clause, **kw) for clause in element.clauses)
    return f"EXTRACT(EPOCH FROM ({end} - {start}))"


class estimated(FunctionElement[bool]):
    """estimated(condition, share): the condition, with the share of rows it keeps told to
    SQLite's planner. Unhinted, it takes `status = ?` to keep ~10 rows (a quarter of the table)
    and prefers the status index to everything: a day's failures walked every failure. And it
    takes a one-sided time bound to keep a quarter: a day's counts scanned every task."""

    # No Boolean type: SQLAlchemy would write "likelihood(...) = 1", and the planner would no
    # longer see the condition.
    inherit_cache = True


@compiles(estimated, "sqlite")
def _estimated_sqlite(element: estimated, compiler: SQLCompiler, **kw: Any) -> str:
    return f"likelihood({compiler.process(element.clauses, **kw)})"


@compiles(estimated)
def _estimated_default(element: estimated, compiler: SQLCompiler, **kw: Any) -> str:
    condition, _share = element.clauses
    return compiler.process(condition, **kw)


class scanned(FunctionElement[str]):
    """A GROUP BY key SQLite may not read from an index: for the whole table, walking the
    status index and fetching each row costs about twice a plain scan and sort."""

    type = String()
    inherit_cache = True


@compiles(scanned, "sqlite")
def _scanned_sqlite(element: scanned, compiler: SQLCompiler, **kw: Any) -> str:
    return f"+{compiler.process(element.clauses, **kw)}"


@compiles(scanned)
def _scanned_default(element: scanned, compiler: SQLCompiler, **kw: Any) -> str:
    return compiler.process(element.clauses, **kw)


class day_of(FunctionElement[str]):
    """day_of(timestamp): its UTC day as text, "YYYY-MM-DD" (a bucket of a time series)."""

    type = String()
    inherit_cache = True


class hour_of(FunctionElement[str]):
    """hour_of(timestamp): its UTC hour as text, "YYYY-MM-DDTHH"."""

    type = String()
    inherit_cache = True


@compiles(day_of, "sqlite")
def _day_sqlite(element: day_of, compiler: SQLCompiler, **kw: Any) -> str:
    return f"strftime('%Y-%m-%d', {compiler.process(element.clauses, **kw)})"


@compiles(day_of)
def _day_default(element: day_of, compiler: SQLCompiler, **kw: Any) -> str:
    column = compiler.process(element.clauses, **kw)
    return f"to_char({column} AT TIME ZONE 'UTC', 'YYYY-MM-DD')"


@compiles(hour_of, "sqlite")
def _hour_sqlite(element: hour_of, compiler: SQLCompiler, **kw: Any) -> str:
    return f"strftime('%Y-%m-%dT%H', {compiler.process(element.clauses, **kw)})"


@compiles(hour_of)
def _hour_default(element: hour_of, compiler: SQLCompiler, **kw: Any) -> str:
    column = compiler.process(element.clauses, **kw)
    return f"to_char({column} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24')"
