"""The configured chat backends, by name, built once from the settings.

``"default"`` is LLM_BACKEND with the LLM_* settings (absent when LLM_BACKEND is ``extractive``,
which needs no chat backend); every entry of LLM_BACKENDS adds a backend under its own name, its
unset fields taken from the LLM_* settings. Requests pick among these by name only: a request never
brings a URL (no server-side request forgery).
"""

import logging

import httpx
from pydantic import SecretStr

from app.config import DEFAULT_BACKEND, EXTRACTIVE, Settings
from app.llm.anthropic import AnthropicBackend
from app.llm.base import BackendConfig, ChatBackend
from app.llm.http import HTTPBackend
from app.llm.ollama import OllamaBackend
from app.llm.openai import OpenAIBackend
from app.observability.metrics import Metrics

__all__ = ["BACKEND_KINDS", "build_backends", "make_backend"]

log = logging.getLogger("app.llm")

BACKEND_KINDS: dict[str, type[HTTPBackend]] = {
    "openai": OpenAIBackend,
    "ollama": OllamaBackend,
    "anthropic": AnthropicBackend,
}


def make_backend(
    kind: str,
    config: BackendConfig,
    client: httpx.AsyncClient,
    *,
    name: str = DEFAULT_BACKEND,
    metrics: Metrics | None = None,
) -> HTTPBackend:
    """One backend of ``kind`` (openai | ollama | anthropic), its calls measured in ``metrics``."""
    try:
        cls = BACKEND_KINDS[kind]
    except KeyError:
        raise ValueError(f"unknown LLM backend kind {kind!r}") from None
    return cls(client, config, name=name, metrics=metrics)


def build_backends(
    settings: Settings, client: httpx.AsyncClient, metrics: Metrics | None = None
) -> dict[str, ChatBackend]:
    """Every configured chat backend by name; ``{}`` when only the extractive summarizer is."""
    backends: dict[str, ChatBackend] = {}
    if settings.llm.backend != EXTRACTIVE:
        default = _config(settings, settings.llm.base_url, settings.llm.model, settings.llm.api_key)
        backends[DEFAULT_BACKEND] = _make(
            DEFAULT_BACKEND, settings.llm.backend, default, client, metrics
        )
    for name, entry in settings.llm.backends.items():
        config = _config(
            settings,
            entry.base_url,
            entry.model,
            entry.api_key,
            timeout_s=entry.timeout_s,
            max_retries=entry.max_retries,
            window=entry.window,
        )
        backends[name] = _make(name, entry.kind, config, client, metrics)
    for backend in backends.values():
        log.info("llm backend %r: %r", backend.name, backend)
    return backends


def _config(
    settings: Settings,
    base_url: str,
    model: str,
    api_key: SecretStr | None,
    *,
    timeout_s: float | None = None,
    max_retries: int | None = None,
    window: int | None = None,
) -> BackendConfig:
    """A backend's config, the unset values taken from the LLM_* settings."""
    return BackendConfig(
        base_url=base_url,
        model=model,
        api_key=api_key,
        timeout_s=settings.llm.timeout_s if timeout_s is None else timeout_s,
        max_retries=settings.llm.max_retries if max_retries is None else max_retries,
        window=settings.llm.window if window is None else window,
        backoff_s=settings.llm.retry_backoff_s,
        backoff_max_s=settings.llm.retry_backoff_max_s,
    )


def _make(
    name: str,
    kind: str,
    config: BackendConfig,
    client: httpx.AsyncClient,
    metrics: Metrics | None,
) -> HTTPBackend:
    try:
        return make_backend(kind, config, client, name=name, metrics=metrics)
    except ValueError as exc:
        raise ValueError(f"LLM backend {name!r}: {exc}") from None
