"""A real uvicorn process with LOG_FORMAT=json: every line it writes is JSON, access lines too,
and the access line of a task request carries the task's uuid."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.support.paths import REPO
from tests.support.server import free_port
from tests.support.tasks import task_body

READY_TIMEOUT_S = 45.0


@pytest.mark.e2e
def test_uvicorn_writes_json_lines_with_the_task_uuid(tmp_path: Path) -> None:
    port = free_port()
    env = dict(os.environ) | {
        "CONTEXT_DIR": str(tmp_path / "contexts"),
        "LOG_FORMAT": "json",
        "FSYNC": "never",
    }
    log_path = tmp_path / "server.log"
    command = [sys.executable, "-m", "uvicorn", "app.main:app", "--port", str(port)]
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=log)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5.0) as http:
            deadline = time.monotonic() + READY_TIMEOUT_S
            while True:
                assert process.poll() is None, log_path.read_text()
                try:
                    if http.get("/readyz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, log_path.read_text()
                time.sleep(0.1)
            uuid = http.post("/tasks", json=task_body()).json()["uuid"]
            assert http.get(f"/tasks/{uuid}").status_code == 200
    finally:
        process.terminate()
        process.wait(timeout=15)

    records = [json.loads(line) for line in log_path.read_text().splitlines() if line.strip()]
    messages = {r["message"] for r in records if r["logger"] == "uvicorn.error"}
    assert "Application startup complete." in messages
    access = [r for r in records if r["logger"] == "uvicorn.access"]
    read = [r for r in access if f"GET /tasks/{uuid} " in r["message"]]
    assert len(read) == 1, access
    assert read[0]["task_uuid"] == uuid
    ready = [r["task_uuid"] for r in access if "/readyz" in r["message"]]
    assert ready
    assert set(ready) == {None}
