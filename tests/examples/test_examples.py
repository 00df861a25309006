"""The example agents (examples/*_agent.py) run as real processes, with the official SDKs (or
httpx for Ollama), against a real uvicorn of the service and the fake LLM server scripted to
call a tool, then answer: each exits 0, the LLM got valid requests carrying the task's
temperature and the tool's result, and the service's history and /stats show the run."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from context_client import ContextClient
from tests.fakes import llm_server
from tests.fakes.llm_server import FakeLLM, ToolUse
from tests.support.formats import validate_payload
from tests.support.paths import REPO
from tests.support.server import ServerPool

pytestmark = [pytest.mark.e2e, pytest.mark.database_agnostic]

fake_llm = llm_server.fake_llm  # the fixture: a real HTTP server on 127.0.0.1

EXAMPLES = REPO / "examples"
RUN_TIMEOUT_S = 120
NOTES = "The build is broken since Tuesday.\n"
FINAL = "The notes say the build is broken."
PATHS = {"openai": "/v1/chat/completions", "anthropic": "/v1/messages", "ollama": "/api/chat"}


def example_env(fake: FakeLLM, service_url: str) -> dict[str, str]:
    """Every provider's variables pointed at the fake; keys the SDKs need but nobody checks."""
    env = {name: value for name, value in os.environ.items() if "API_KEY" not in name}
    env.update(
        CONTEXT_SERVICE_URL=service_url,
        OPENAI_BASE_URL=f"{fake.base_url}/v1",
        OPENAI_API_KEY="test-key",
        ANTHROPIC_BASE_URL=fake.base_url,
        ANTHROPIC_API_KEY="test-key",
        OLLAMA_HOST=fake.base_url,
        AGENT_MODEL="fake-model",
    )
    return env


def run_example(
    provider: str, env: dict[str, str], *arguments: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(EXAMPLES / f"{provider}_agent.py"), *arguments],
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )


def temperature_of(provider: str, body: dict[str, object]) -> object:
    options = body.get("options")
    return options.get("temperature") if isinstance(options, dict) else body.get("temperature")


@pytest.mark.parametrize("provider", ["openai", "anthropic", "ollama"])
def test_an_example_agent_runs_a_task_to_its_end(
    provider: str, servers: ServerPool, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    server = servers.start()
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    (sandbox / "notes.txt").write_text(NOTES)
    fake_llm.set("ok", script=[ToolUse("read_file", {"path": "notes.txt"}), FINAL])

    env = example_env(fake_llm, server.base_url)
    done = run_example(provider, env, "What do the notes say?", "--sandbox", str(sandbox))
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip().endswith(FINAL)

    first, second = fake_llm.requests
    assert [first.path, second.path] == [PATHS[provider]] * 2
    for request in (first, second):
        validate_payload(provider, request.body)  # valid, and results paired with calls
        assert temperature_of(provider, request.body) == 0.2
    assert NOTES.strip() in str(second.body["messages"][-1])

    with ContextClient(server.base_url) as service:
        (task,) = service.list_tasks()["tasks"]
        history = service.list_messages(task["uuid"])["messages"]
        stats = service.get_stats()
    assert (task["status"], task["llm_provider"]) == ("completed", provider)
    assert [r.get("role") for r in history] == ["system", "user", "assistant", "tool", "assistant"]
    assert history[3].get("content") == NOTES
    (call,) = history[2].get("tool_calls") or []
    assert history[3].get("tool_call_id") == call["id"]
    assert history[4].get("content") == FINAL
    assert (task["statistics"]["llm_call_count"], task["statistics"]["total_tokens"]) == (2, 30)
    assert (stats["calls"]["llm_calls"], stats["calls"]["tool_calls"]) == (2, 1)
    assert stats["tokens"]["all"]["total"] == 30


@pytest.mark.parametrize("provider", ["openai", "anthropic", "ollama"])
def test_an_example_says_how_to_configure_it(provider: str) -> None:
    done = run_example(provider, dict(os.environ), "--help")
    assert done.returncode == 0, done.stderr
    for mentioned in ("--sandbox", "--model", "--llm-url", "AGENT_MODEL", "CONTEXT_SERVICE_URL"):
        assert mentioned in done.stdout
