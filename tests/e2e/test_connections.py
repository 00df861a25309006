"""What a real ``context-service serve`` does with connections: a 5xx ends its connection and
says so, a body that stalls is cut off, many stalled clients do not lock out a new one, and
credentials in a query string never reach the log.

Raw sockets where the bytes on the wire are the point (headers sent, then nothing; whether the
server closed the connection).
"""

import socket
import time
from pathlib import Path

import httpx
import pytest

from tests.support.server import Server, ServerPool, read_until_closed, status_and_headers
from tests.support.tasks import task_body

pytestmark = [pytest.mark.e2e, pytest.mark.database_agnostic]

READ_TIMEOUT_S = 1.0  # BODY_READ_TIMEOUT_S of these servers
STALLED_BODY = (
    b"POST /tasks HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
    b"Content-Length: 1000\r\n\r\n{"
)


def connect(target: Server) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", target.port), timeout=10)
    return sock


def get_on(sock: socket.socket, path: str) -> None:
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: test\r\n\r\n".encode())


def start(servers: ServerPool, **env: str) -> Server:
    base = {"FSYNC": "never", "BODY_READ_TIMEOUT_S": str(READ_TIMEOUT_S)}
    return servers.start(cli=True, env=base | env)


def test_a_5xx_says_connection_close_and_the_next_connection_is_served(
    servers: ServerPool,
) -> None:
    """An unhandled error (a damaged metadata.json) and a named one (a missing metadata.json):
    both answers carry ``Connection: close`` and the server then closes the keep-alive
    connection, so a client never sends its next request into a dead socket."""
    target = start(servers)
    with httpx.Client(base_url=target.base_url, timeout=10) as http:
        damaged, missing = (
            http.post("/tasks", json=task_body(task_key=task_body()["task_key"] | {"task_id": n}))
            .raise_for_status()
            .json()
            for n in ("1", "2")
        )
        for task in (damaged, missing):
            message = {"role": "user", "content": "Fix the bug."}
            http.post(f"/tasks/{task['uuid']}/messages", json={"messages": [message]})
    running = servers.context_dir / "running"
    (running / damaged["uuid"] / "metadata.json").write_text("[]")  # no longer an object
    (running / missing["uuid"] / "metadata.json").unlink()

    for uuid, code in (
        (damaged["uuid"], "internal_error"),
        (missing["uuid"], "task_metadata_missing"),
    ):
        with connect(target) as sock:
            get_on(sock, f"/tasks/{uuid}/request")
            response = read_until_closed(sock)  # the server ends the connection
        status, headers = status_and_headers(response)
        assert status == 500, response
        assert headers["connection"] == "close", response
        assert f'"code":"{code}"'.encode() in response
        with connect(target) as sock:  # a new connection is served
            get_on(sock, "/healthz")
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
            answers = read_until_closed(sock)
        assert answers.count(b"HTTP/1.1 200 OK") == 2, answers
    assert "Exception in ASGI application" in target.log_text()  # the first was unhandled


def test_a_stalled_body_is_cut_off_with_408(servers: ServerPool) -> None:
    target = start(servers)
    with connect(target) as sock:
        sock.sendall(STALLED_BODY)
        started = time.monotonic()
        response = read_until_closed(sock)
        waited = time.monotonic() - started
    status, headers = status_and_headers(response)
    assert status == 408, response
    assert headers["connection"] == "close"
    assert b'"code":"body_read_timeout"' in response
    assert READ_TIMEOUT_S * 0.9 <= waited < READ_TIMEOUT_S + 5
    with httpx.Client(base_url=target.base_url, timeout=10) as http:
        assert http.get("/tasks").json()["tasks"] == []  # nothing was created


def test_many_stalled_clients_do_not_lock_a_new_one_out(servers: ServerPool) -> None:
    """MAX_CONNECTIONS 20 and 40 clients stalled mid-body: a new request is answered at once
    (served, or past the limit refused with uvicorn's 503 and a close) rather than left
    waiting; the admitted stalled ones are cut off after BODY_READ_TIMEOUT_S, and then a new
    client is served. (How many are admitted when the probe comes depends on the machine.)"""
    target = start(servers, MAX_CONNECTIONS="20")
    stalled = [connect(target) for _ in range(40)]
    try:
        for sock in stalled:
            sock.sendall(STALLED_BODY)
        # A new client is answered at once, never left waiting behind the stalled ones: served,
        # or (once the server has admitted as many as MAX_CONNECTIONS) refused with a close.
        started = time.monotonic()
        with connect(target) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
            probe = read_until_closed(sock, timeout=5)
        status, headers = status_and_headers(probe)
        assert time.monotonic() - started < 5, probe
        assert status in (200, 503), probe
        if status == 503:
            assert headers["connection"] == "close"
        answers = [status_and_headers(read_until_closed(sock))[0] for sock in stalled]
    finally:
        for sock in stalled:
            sock.close()
    # Each stalled client is cut off (408) or was never admitted (503); how many were admitted
    # depends on when the server read them, but never more than the limit.
    assert set(answers) <= {408, 503}, answers
    assert answers.count(408) <= 20
    with httpx.Client(base_url=target.base_url, timeout=10) as http:
        assert http.get("/healthz").status_code == 200


SECRETS = {
    "api_key": "query-key-0123456789",
    "access_token": "query-token-0123456789",
    "token": "query-token-abcdefghij",
    "password": "query-password-012345",
    "Key": "query-key-abcdefghijkl",
}


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_credentials_in_a_query_string_never_reach_the_log(
    servers: ServerPool, tmp_path: Path, log_format: str
) -> None:
    """Keys sent in the URL are refused (401: only the Authorization header counts), and the
    access log writes the URL with their values replaced by [REDACTED]."""
    target = start(servers, API_KEYS="agent-key-0123456789", LOG_FORMAT=log_format)
    with httpx.Client(base_url=target.base_url, timeout=10) as http:
        for name, secret in SECRETS.items():
            response = http.get(f"/tasks?limit=5&{name}={secret}&user=alice")
            assert response.status_code == 401, response.text
    servers.close()  # flushes and ends the server: its log is complete
    log = target.log_text()
    for name, secret in SECRETS.items():
        assert secret not in log
        assert f"/tasks?limit=5&{name}=[REDACTED]&user=alice" in log, log[-3000:]
