"""Request parameters read without FastAPI, for the fast lanes (app/api/routing.py).

Each reader returns None unless the value is in its one plain spelling (a canonical uuid, a
decimal number without leading zeros, a parameter given once), so that any other request goes
to FastAPI, which accepts or refuses it in full.
"""

import re
from collections.abc import Set
from urllib.parse import parse_qsl

from fastapi import Request

from app.api.deps import MAX_THREAD_ID

_CANONICAL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_CANONICAL_INT = re.compile(r"0|[1-9][0-9]{0,9}")


def task_uuid(request: Request) -> str | None:
    """The path's task uuid, in canonical form."""
    uuid: str = request.path_params["uuid"]
    return uuid if _CANONICAL_UUID.fullmatch(uuid) else None


def query(request: Request, names: Set[str]) -> dict[str, str] | None:
    """The query's parameters, none but ``names`` and each once (as Starlette parses them)."""
    raw: bytes = request.scope["query_string"]
    if not raw:
        return {}
    pairs = parse_qsl(raw.decode("latin-1"), keep_blank_values=True)
    parameters = dict(pairs)
    if len(parameters) != len(pairs) or not parameters.keys() <= names:
        return None
    return parameters


def thread_id(parameters: dict[str, str]) -> int | None:
    """``thread_id`` (0 when absent) within the column's range."""
    value = parameters.get("thread_id", "0")
    if _CANONICAL_INT.fullmatch(value) is None or int(value) > MAX_THREAD_ID:
        return None
    return int(value)
