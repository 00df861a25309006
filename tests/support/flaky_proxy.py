"""A real HTTP proxy on 127.0.0.1 in front of a server, which breaks the requests it is told to.

Each request takes the next of :attr:`FlakyProxy.faults` (none left: it is forwarded and
answered as the server answered):

    Fault("lose")       forwarded, then the connection is closed without an answer: the server
                        did the work, the client cannot know it
    Fault("fail")       forwarded, then answered ``status`` (502) instead of the server's answer
    Fault("refuse")     not forwarded: answered ``status`` with ``headers`` (a 429, say)

Every request is recorded (method, path, lower-case headers) before its fault applies. It is
plain HTTP/1.1 over sockets with keep-alive, enough for httpx's requests (bodies with a
Content-Length); one thread per connection.
"""

import contextlib
import io
import socketserver
import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Literal

import httpx

FORWARD_TIMEOUT_S = 30.0
# Hop-by-hop headers, and those the proxy sets itself for the bytes it sends.
_NOT_FORWARDED = frozenset(
    {"host", "connection", "keep-alive", "content-length", "transfer-encoding", "accept-encoding"}
)
_NOT_RETURNED = frozenset(
    {"connection", "keep-alive", "content-length", "transfer-encoding", "content-encoding"}
)


@dataclass(frozen=True)
class Fault:
    kind: Literal["lose", "fail", "refuse"]
    status: int = 502
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ProxiedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


class FlakyProxy:
    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.faults: deque[Fault] = deque()
        self.requests: list[ProxiedRequest] = []
        self.base_url = ""
        self._lock = threading.Lock()

    def break_next(self, *faults: Fault) -> None:
        """The next requests meet these faults, in order."""
        with self._lock:
            self.faults.extend(faults)

    def _admit(self, request: ProxiedRequest) -> Fault | None:
        with self._lock:
            self.requests.append(request)
            return self.faults.popleft() if self.faults else None

    def _forward(self, request: ProxiedRequest) -> httpx.Response:
        headers = {k: v for k, v in request.headers.items() if k not in _NOT_FORWARDED}
        return httpx.request(
            request.method,
            self.upstream + request.path,
            headers=headers,
            content=request.body,
            timeout=FORWARD_TIMEOUT_S,
        )

    def serve(self, rfile: io.BufferedIOBase, wfile: io.BufferedIOBase) -> None:
        """One connection: its requests in turn, until either side closes it."""
        while (request := _read_request(rfile)) is not None:
            fault = self._admit(request)
            if fault is not None and fault.kind == "refuse":
                _write(wfile, fault.status, fault.headers, b"", close=True)
                return
            response = self._forward(request)
            if fault is not None and fault.kind == "lose":
                return
            if fault is not None:  # "fail"
                _write(wfile, fault.status, fault.headers, b"", close=True)
                return
            headers = {k: v for k, v in response.headers.items() if k not in _NOT_RETURNED}
            close = response.headers.get("connection", "").lower() == "close"
            _write(wfile, response.status_code, headers, response.content, close=close)
            if close:
                return


class _Handler(socketserver.StreamRequestHandler):
    server: "_Server"

    def handle(self) -> None:
        self.server.proxy.serve(self.rfile, self.wfile)


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, proxy: FlakyProxy) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.proxy = proxy


def _read_request(rfile: io.BufferedIOBase) -> ProxiedRequest | None:
    """The next request of the connection, or None once the client has closed it."""
    line = rfile.readline()
    if not line.strip():
        return None
    method, target, _ = line.decode("latin-1").split(" ", 2)
    headers: dict[str, str] = {}
    while (header := rfile.readline()) not in (b"\r\n", b"\n", b""):
        name, value = header.decode("latin-1").split(":", 1)
        headers[name.strip().lower()] = value.strip()
    body = rfile.read(int(headers.get("content-length", "0")))
    return ProxiedRequest(method, target, headers, body)


def _write(
    wfile: io.BufferedIOBase, status: int, headers: dict[str, str], body: bytes, *, close: bool
) -> None:
    lines = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    lines += [f"content-length: {len(body)}", f"connection: {'close' if close else 'keep-alive'}"]
    wfile.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
    wfile.flush()


@contextlib.contextmanager
def flaky_proxy(upstream: str) -> Iterator[FlakyProxy]:
    """A proxy to ``upstream`` on a port the OS picked (``base_url`` set), stopped on exit."""
    proxy = FlakyProxy(upstream)
    server = _Server(proxy)
    thread = threading.Thread(target=server.serve_forever, name="flaky-proxy", daemon=True)
    thread.start()
    proxy.base_url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield proxy
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
