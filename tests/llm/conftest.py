"""Fixtures for the LLM backend tests: the fake server, a shared client, a backend factory."""

import ssl
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from app.llm import BackendConfig, HTTPBackend, make_backend
from tests.fakes.llm_server import FakeLLM, fake_llm  # noqa: F401
from tests.support.backends import API_KEY, MakeBackend

# Building a client's default TLS context costs ~30 ms: one context serves every test's client.
_TLS = ssl.create_default_context()


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(verify=_TLS) as client:
        yield client


@pytest.fixture
def make(fake_llm: FakeLLM, http: httpx.AsyncClient) -> MakeBackend:  # noqa: F811
    """``make(kind, **config)``: a backend on the fake server with fast retries by default."""

    def build(kind: str, **overrides: Any) -> HTTPBackend:
        options: dict[str, Any] = {
            "base_url": fake_llm.base_url,
            "model": "test-model",
            "api_key": SecretStr(API_KEY),
            "timeout_s": 5.0,
            "max_retries": 2,
            "window": 4096,
            "backoff_s": 0.01,
            "backoff_max_s": 0.05,
        }
        options.update(overrides)
        name = options.pop("name", "default")
        return make_backend(kind, BackendConfig(**options), http, name=name)

    return build
