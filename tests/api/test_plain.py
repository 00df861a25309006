"""The fast lanes' readers: a value in its one plain spelling is read, anything else is None
(and the request goes to FastAPI)."""

import pytest
from fastapi import Request

from app.api import plain

UUID = "0f8fad5b-d9cb-469f-a165-70867728950e"


def request(uuid: str = UUID, query: bytes = b"") -> Request:
    return Request({"type": "http", "path_params": {"uuid": uuid}, "query_string": query})


@pytest.mark.parametrize(
    ("uuid", "read"),
    [
        (UUID, UUID),
        (UUID.upper(), None),
        (UUID.replace("-", ""), None),
        (f"{{{UUID}}}", None),
        (f"urn:uuid:{UUID}", None),
        ("not-a-uuid", None),
    ],
)
def test_a_task_uuid_is_read_in_its_canonical_form_only(uuid: str, read: str | None) -> None:
    assert plain.task_uuid(request(uuid)) == read


@pytest.mark.parametrize(
    ("query", "read"),
    [
        (b"", {}),
        (b"thread_id=3", {"thread_id": "3"}),
        (b"thread_id=3&format=ollama", {"thread_id": "3", "format": "ollama"}),
        (b"format=", {"format": ""}),
        (b"thread_id=%33", {"thread_id": "3"}),  # decoded as Starlette decodes it
        (b"thread_id=3&thread_id=3", None),
        (b"other=1", None),
        (b"thread_id=3&other=1", None),
    ],
)
def test_a_query_holds_only_the_names_given_each_once(
    query: bytes, read: dict[str, str] | None
) -> None:
    assert plain.query(request(query=query), {"thread_id", "format"}) == read


@pytest.mark.parametrize(
    ("value", "read"),
    [
        (None, 0),
        ("0", 0),
        ("7", 7),
        (str(2**31 - 1), 2**31 - 1),
        (str(2**31), None),
        ("00", None),
        ("07", None),
        ("-1", None),
        ("+1", None),
        (" 1", None),
        ("1e3", None),
        ("٣", None),  # a digit, but not an ASCII one
        ("", None),
    ],
)
def test_a_thread_id_is_a_plain_number_in_the_columns_range(
    value: str | None, read: int | None
) -> None:
    parameters = {} if value is None else {"thread_id": value}
    assert plain.thread_id(parameters) == read
