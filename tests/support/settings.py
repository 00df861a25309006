"""Settings the tests run the app with: fast (no fsync, quick job polling, characters / 4
tokens), and with the fake LLM server as the backend."""

from pathlib import Path
from typing import Any

from app.config import Settings
from tests.fakes.llm_server import FakeLLM


def fast_settings(context_dir: Path, **extra: Any) -> Settings:
    """No fsync, jobs polled and retried every 50 ms, the seed 000 heuristic counter."""
    values: dict[str, Any] = {
        "context_dir": context_dir,
        "fsync": "never",
        "job_poll_s": 0.05,
        "job_backoff_s": 0.05,
        "token_counter": "heuristic",
    }
    return Settings(**(values | extra))


def llm_settings(context_dir: Path, fake: FakeLLM, kind: str = "openai", **extra: Any) -> Settings:
    """Fast settings with the fake LLM server as the default backend (of ``kind``)."""
    values = {"llm_backend": kind, "llm_base_url": fake.base_url, "llm_model": "fake-model"}
    return fast_settings(context_dir, **(values | extra))


# A summariser that fails or hangs ends its job quickly: one call per attempt, two attempts,
# short timeouts for the call and for a condense a request waits for.
IMPATIENT: dict[str, Any] = {
    "llm_timeout_s": 2.0,
    "llm_max_retries": 0,
    "llm_retry_backoff_s": 0.01,
    "job_max_attempts": 2,
    "request_condense_timeout_s": 1.0,
}


def impatient_llm_settings(
    context_dir: Path, fake: FakeLLM, kind: str = "openai", **extra: Any
) -> Settings:
    """``llm_settings`` with the IMPATIENT timeouts and attempts (``extra`` wins)."""
    return llm_settings(context_dir, fake, kind, **(IMPATIENT | extra))
