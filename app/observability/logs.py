"""Logging: one configuration for the service and uvicorn, as text or one JSON object a line,
with the uuid of the task a line is about.

The uuid comes from a context variable, set for the duration of a request on a task's path
(:mod:`app.observability.middleware`) and of a background job (:mod:`app.jobs.runner`), so
every line logged meanwhile carries it without each call site passing it. Tasks started
meanwhile (the store's group commit, for one) inherit it.
"""

import logging
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TextIO

from pythonjsonlogger.core import RESERVED_ATTRS
from pythonjsonlogger.json import JsonFormatter

from app.config import Settings

__all__ = [
    "SECRET_QUERY_NAMES",
    "TASK_UUID",
    "QueryRedactor",
    "TaskFilter",
    "configure_logging",
    "task_context",
]

TASK_UUID: ContextVar[str | None] = ContextVar("task_uuid", default=None)

# Uvicorn installs its own handlers on these (propagate off) before it imports the app.
UVICORN_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


@contextmanager
def task_context(task_uuid: str | None) -> Iterator[None]:
    """Lines logged inside are about ``task_uuid``."""
    token = TASK_UUID.set(task_uuid)
    try:
        yield
    finally:
        TASK_UUID.reset(token)


class TaskFilter(logging.Filter):
    """Adds ``task_uuid`` (None outside a task) to every record it sees."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "task_uuid", None) is None:  # an explicit extra= wins
            record.task_uuid = TASK_UUID.get()
        return True


# Query parameters whose values are credentials. The API takes keys only in the Authorization
# header and refuses them in the URL, but uvicorn's access line (or any line quoting a URL)
# would still write the refused key out.
SECRET_QUERY_NAMES = (
    "api_key",
    "apikey",
    "api-key",
    "key",
    "access_token",
    "refresh_token",
    "id_token",
    "token",
    "auth",
    "authorization",
    "password",
    "passwd",
    "secret",
    "client_secret",
    "signature",
    "sig",
)
REDACTED = "[REDACTED]"
_SECRET_NAMES = "|".join(re.escape(name) for name in SECRET_QUERY_NAMES)
_SECRET_QUERY = re.compile(rf"([?&](?:{_SECRET_NAMES})=)[^&#\s\"']*", re.IGNORECASE)


class QueryRedactor(logging.Filter):
    """Replaces the value of every SECRET_QUERY_NAMES parameter in a line's message."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = _SECRET_QUERY.sub(rf"\g<1>{REDACTED}", message)
        if redacted != message:
            record.msg, record.args = redacted, None
            record.__dict__.pop("color_message", None)  # uvicorn's copy holds the URL too
        return True


class TextFormatter(logging.Formatter):
    """The classic line, `` task=<uuid>`` appended when there is one (before any traceback)."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        line = super().formatMessage(record)
        task_uuid = getattr(record, "task_uuid", None)
        return f"{line} task={task_uuid}" if task_uuid else line


class ServiceHandler(logging.StreamHandler[TextIO]):
    """The root handler :func:`configure_logging` installs (and replaces when called again)."""


def _formatter(log_format: str) -> logging.Formatter:
    if log_format == "json":
        return JsonFormatter(
            "%(levelname)s %(name)s %(message)s",
            rename_fields={"levelname": "level", "name": "logger"},
            timestamp=True,
            # Uvicorn's ANSI-coloured copy of the message would only duplicate it.
            reserved_attrs=[*RESERVED_ATTRS, "color_message"],
            json_ensure_ascii=False,  # Japanese text stays readable
        )
    return TextFormatter(TEXT_FORMAT)


# httpx logs every request's full URL at INFO: webhook and LLM URLs may carry tokens. The MCP
# SDK logs a line per /mcp request at INFO, and at DEBUG the messages, task content included.
QUIET_LOGGERS = ("httpx", "httpcore", "mcp")


def configure_logging(settings: Settings, stream: TextIO | None = None) -> ServiceHandler:
    """Log to ``stream`` (stderr) in ``settings.log.format`` at ``settings.log.level``.

    Idempotent: a second call replaces the handler the first installed and leaves other
    handlers (pytest's, say) alone. Uvicorn's loggers lose their own handlers and propagate
    here, so access lines have the same format (and the task uuid: uvicorn logs them while
    the app sends its response).
    """
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, ServiceHandler)]:
        root.removeHandler(old)
    handler = ServiceHandler(stream or sys.stderr)
    handler.setFormatter(_formatter(settings.log.format))
    handler.addFilter(TaskFilter())
    handler.addFilter(QueryRedactor())
    root.addHandler(handler)
    root.setLevel(settings.log.level.upper())
    for name in UVICORN_LOGGERS:
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(max(logging.WARNING, root.level))
    return handler
