"""Running a small ASGI app with uvicorn in a background thread on a port the OS picks."""

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import uvicorn

START_TIMEOUT_S = 5.0
STOP_TIMEOUT_S = 5


@contextlib.contextmanager
def serve_in_thread(
    app: Any, name: str, on_stop: Callable[[], None] = lambda: None
) -> Iterator[str]:
    """Serve ``app`` on 127.0.0.1; yield its base URL; ``on_stop`` runs before the shutdown
    (to wake handlers that are still waiting)."""
    # No log_config, no log_level: uvicorn must not reconfigure the test process's logging
    # (the service's own loggers are under test in the same process).
    config = uvicorn.Config(
        app,
        log_config=None,
        log_level=None,
        access_log=False,
        lifespan="off",
        loop="asyncio",
        timeout_graceful_shutdown=STOP_TIMEOUT_S,
    )
    server = uvicorn.Server(config)
    # IPPROTO_TCP named: asyncio sets TCP_NODELAY only on connections accepted from a socket
    # that says it is TCP, and without it every answer written in two parts (headers, then
    # body) waited ~40 ms for the client's delayed ACK.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name=name, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the {name} server did not start")
            time.sleep(0.01)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        on_stop()
        server.should_exit = True
        thread.join(STOP_TIMEOUT_S + 1)
        sock.close()
        if thread.is_alive():
            raise RuntimeError(f"the {name} server did not stop")
