"""The README's quick start, run as written: its curl commands against a real server."""

import json
import re
import shutil
import subprocess
from typing import Any

import httpx
import pytest

from tests.support.paths import REPO
from tests.support.server import ServerPool

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(shutil.which("curl") is None, reason="the quick start uses curl"),
]

README_URL = "http://127.0.0.1:8080"
UUID_LINE = re.compile(r"^U=\S+", re.MULTILINE)


def quick_start_blocks() -> list[str]:
    text = (REPO / "README.md").read_text()
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.*?)```", section, re.DOTALL)


def run(script: str, base_url: str) -> str:
    """The block as bash, every curl failing on an HTTP error (and saying so)."""
    script = script.replace(README_URL, base_url).replace("curl -s ", "curl -sS --fail-with-body ")
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, f"{script}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def json_values(text: str) -> list[Any]:
    """The JSON answers curl printed one after another (without newlines between them)."""
    decoder, values, at = json.JSONDecoder(), [], 0
    while at < len(text):
        value, at = decoder.raw_decode(text, at)
        values.append(value)
        while at < len(text) and text[at].isspace():
            at += 1
    return values


def test_the_quick_start_works_as_written(servers: ServerPool) -> None:
    server = servers.start()
    create, append_and_request, reply_and_complete = quick_start_blocks()
    task = json.loads(run(create, server.base_url))
    uuid = task["uuid"]
    assert task["status"] == "running"

    answers = run(UUID_LINE.sub(f"U={uuid}", append_and_request), server.base_url)
    appended, payload = json_values(answers)
    assert appended["seqs"] == [2]
    assert [m["role"] for m in payload["messages"]] == ["system", "user"]
    assert payload["tools"][0]["function"]["name"] == "read_file"

    run(f"U={uuid}\n{reply_and_complete}", server.base_url)  # U as set by the block before
    record = httpx.get(f"{server.base_url}/tasks/{uuid}").json()
    assert record["status"] == "completed"
    assert record["statistics"]["llm_call_count"] == 1
    assert record["statistics"]["tool_call_count"] == 1
    assert record["statistics"]["total_tokens"] == 80 + 22
