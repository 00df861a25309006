"""build_backends(): the configured backends from the settings (env LLM_*), by name."""

import json
import logging

import httpx
import pytest
from pydantic import ValidationError

from app.config import Settings
from app.llm import (
    AnthropicBackend,
    ChatBackend,
    HTTPBackend,
    OllamaBackend,
    OpenAIBackend,
    build_backends,
)
from tests.fakes.llm_server import FakeLLM
from tests.support.backends import API_KEY

pytestmark = pytest.mark.database_agnostic  # touches no database


def backend(backends: dict[str, ChatBackend], name: str) -> HTTPBackend:
    found = backends[name]
    assert isinstance(found, HTTPBackend)
    return found


async def test_extractive_means_no_chat_backend(http: httpx.AsyncClient) -> None:
    """The default configuration (LLM_BACKEND=extractive, no LLM_BACKENDS) builds nothing."""
    assert Settings().llm.backend == "extractive"
    assert build_backends(Settings(), http) == {}


async def test_default_backend_from_env(
    http: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LLM_BACKEND and the LLM_* variables make the backend named "default"."""
    monkeypatch.setenv("LLM_BACKEND", "anthropic")
    monkeypatch.setenv("LLM_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("LLM_MODEL", "claude-haiku")
    monkeypatch.setenv("LLM_API_KEY", API_KEY)
    monkeypatch.setenv("LLM_TIMEOUT_S", "12.5")
    monkeypatch.setenv("LLM_MAX_RETRIES", "4")
    monkeypatch.setenv("LLM_WINDOW", "200000")
    settings = Settings()
    assert API_KEY not in repr(settings)
    backends = build_backends(settings, http)
    assert list(backends) == ["default"]
    default = backend(backends, "default")
    assert isinstance(default, AnthropicBackend)
    assert (default.name, default.kind, default.model, default.window) == (
        "default",
        "anthropic",
        "claude-haiku",
        200_000,
    )
    assert default.url == "http://127.0.0.1:9/v1/messages"
    assert default.config.timeout_s == 12.5
    assert default.config.max_retries == 4
    assert default.config.api_key is not None
    assert default.config.api_key.get_secret_value() == API_KEY


async def test_named_backends_from_json(
    http: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LLM_BACKENDS (JSON) adds backends by name; unset fields come from the LLM_* settings,
    an empty base_url is the kind's usual one."""
    monkeypatch.setenv("LLM_TIMEOUT_S", "30")
    monkeypatch.setenv("LLM_WINDOW", "16384")
    monkeypatch.setenv(
        "LLM_BACKENDS",
        json.dumps(
            {
                "cheap": {"kind": "ollama", "model": "qwen3:4b", "window": 40960},
                "vllm": {
                    "kind": "openai",
                    "base_url": "http://127.0.0.1:8000/v1",
                    "model": "Qwen/Qwen3-8B",
                    "timeout_s": 5,
                    "max_retries": 0,
                },
                "claude": {"kind": "anthropic", "model": "claude-sonnet", "api_key": API_KEY},
            }
        ),
    )
    backends = build_backends(Settings(), http)
    assert sorted(backends) == ["cheap", "claude", "vllm"]  # LLM_BACKEND is extractive
    cheap, vllm, claude = (backend(backends, n) for n in ("cheap", "vllm", "claude"))
    assert isinstance(cheap, OllamaBackend)
    assert cheap.url == "http://127.0.0.1:11434/api/chat"
    assert (cheap.window, cheap.config.timeout_s, cheap.config.max_retries) == (40960, 30, 2)
    assert isinstance(vllm, OpenAIBackend)
    assert vllm.url == "http://127.0.0.1:8000/v1/chat/completions"
    assert (vllm.window, vllm.config.timeout_s, vllm.config.max_retries) == (16384, 5, 0)
    assert isinstance(claude, AnthropicBackend)
    assert claude.url == "https://api.anthropic.com/v1/messages"
    assert claude.name == "claude"


@pytest.mark.parametrize(
    ("env", "match"),
    [
        ({"LLM_BACKEND": "openai"}, "LLM_MODEL must be set"),
        ({"LLM_BACKEND": "gemini", "LLM_MODEL": "m"}, "LLM_BACKEND"),
        ({"LLM_BACKENDS": '{"default": {"kind": "openai", "model": "m"}}'}, "reserved"),
        ({"LLM_BACKENDS": '{"extractive": {"kind": "openai", "model": "m"}}'}, "reserved"),
        ({"LLM_BACKENDS": '{"a b": {"kind": "openai", "model": "m"}}'}, "names must match"),
        ({"LLM_BACKENDS": '{"x": {"kind": "gemini", "model": "m"}}'}, "kind"),
        ({"LLM_BACKENDS": '{"x": {"kind": "openai"}}'}, "model"),
        ({"LLM_BACKENDS": '{"x": {"kind": "openai", "model": "m", "url": "u"}}'}, "url"),
        ({"LLM_BACKENDS": '{"x": {"kind": "openai", "model": "m", "timeout_s": 0}}'}, "timeout"),
        ({"LLM_TIMEOUT_S": "0"}, "LLM_TIMEOUT_S"),
    ],
)
def test_invalid_settings_refused(
    env: dict[str, str], match: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wrong LLM configuration stops the settings from loading, with a message saying why."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError, match=match):
        Settings()


async def test_bad_base_url_names_the_backend(http: httpx.AsyncClient) -> None:
    """A base URL that is not http(s) fails at build time, naming the backend."""
    settings = Settings(
        llm={"backends": {"x": {"kind": "openai", "model": "m", "base_url": "file:///etc/passwd"}}}
    )
    with pytest.raises(ValueError, match="LLM backend 'x': base URL"):
        build_backends(settings, http)


async def test_built_backend_talks_to_the_server(
    fake_llm: FakeLLM, http: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    """A backend from the settings calls the configured server with the configured key, and
    the startup log lists it without the key."""
    caplog.set_level(logging.INFO, logger="app.llm")
    settings = Settings(
        llm={
            "backend": "openai",
            "base_url": fake_llm.base_url,
            "model": "local-model",
            "api_key": API_KEY,
        }
    )
    backends = build_backends(settings, http)
    fake_llm.set("ok", text="Summary from the server.")
    text = await backends["default"].complete([{"role": "user", "content": "hello"}], max_tokens=20)
    assert text == "Summary from the server."
    assert fake_llm.last.headers["authorization"] == f"Bearer {API_KEY}"
    assert fake_llm.last.body["model"] == "local-model"
    assert "local-model" in caplog.text
    assert API_KEY not in caplog.text
